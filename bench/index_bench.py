"""Row-index benchmark: build time, and lookup of 1% of the keys vs the key join a MERGE does on the full table.

Data: TPC-DS store_sales SF1 (2,880,404 rows), key (ss_item_sk, ss_ticket_number). Reuses
bench/data/sf1/store_sales.parquet when present, otherwise generates it with
``tpcgen-cli tpcds parquet -s 1 --tables=store_sales --output-dir=bench/data/sf1``.

Contenders, each run once to warm up and then ``--runs`` times (min and median reported), both forced to completion
with Spark's ``noop`` writer and both producing found (key, file, pos) and missing keys:

- index lookup: ``RowIndex.lookup`` (bucket pruning + join against the narrow index, duplicate check included);
- index lookup without the duplicate check (one Spark job less);
- ``RowIndex.lookup_local``: the same lookup on the driver with pyarrow (reads the buckets, Arrow hash join);
- full-table join: the 1% keys left-joined with (key, _metadata.file_path, _metadata.row_index) of the whole
  table, which is the join a MERGE performs to find its target rows; once reading only the key columns (the best
  a merge-on-read MERGE can do), once reading whole rows (what a copy-on-write MERGE reads).

Run: PYTHONPATH=adapter python bench/index_bench.py   (writes bench/results/index_sf1.{md,png,json})
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "sf1" / "store_sales.parquet"
WORK = ROOT / "bench" / "work" / "index_sf1"
RESULTS = ROOT / "bench" / "results"
KEYS = ["ss_item_sk", "ss_ticket_number"]
COMMAND = "PYTHONPATH=adapter python bench/index_bench.py"


def _ensure_data() -> None:
    if DATA.exists():
        return
    DATA.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["tpcgen-cli", "tpcds", "parquet", "-s", "1", "--tables=store_sales", f"--output-dir={DATA.parent}"], check=True
    )
    if not DATA.exists():
        found = sorted(DATA.parent.rglob("store_sales*.parquet"))
        sys.exit(f"tpcgen-cli did not produce {DATA} (found {found[:3]})")


def _timed(action) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _noop(frame) -> None:  # type: ignore[no-untyped-def]
    frame.write.format("noop").mode("overwrite").save()


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--data", type=Path, default=DATA, help="another store_sales file (smoke tests)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder for index_sf1.{md,json,png}")
    args = parser.parse_args()
    data, results = args.data, args.results

    if data == DATA:
        _ensure_data()
    load_before = os.getloadavg()[0]
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from partialcow.index import RowIndex
    from partialcow.table.parquet_files import ParquetFilesSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("partialcow-index-bench")
        .config("spark.driver.memory", "6g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)

    # the index lives in the work folder (the data file is shared with other benchmarks: never write next to it)
    source = ParquetFilesSource(spark, [str(data)], location=str(WORK / "table"), name="store_sales_sf1")
    index = RowIndex.create(source, key_columns=KEYS)
    build = index.last_metrics
    assert build is not None
    print(f"built: {build.rows_total} rows, {build.num_buckets} buckets in {build.duration_ms / 1000:.1f} s", flush=True)

    table = spark.read.parquet(str(data))
    keys_path = str(WORK / "keys")
    table.select(*KEYS).sample(fraction=args.fraction, seed=7).write.parquet(keys_path)
    keys = spark.read.parquet(keys_path)
    n_keys = keys.count()

    def lookup(check: bool) -> None:
        result = index.lookup(keys, check_duplicates=check)
        _noop(result.found)
        _noop(result.missing)

    def lookup_local() -> None:
        import pyarrow.parquet as pq

        index.lookup_local(pq.read_table(keys_path))

    def merge_join(all_columns: bool) -> None:
        meta = [F.col("_metadata.file_path").alias("file"), F.col("_metadata.row_index").alias("pos")]
        full = table.select("*", *meta) if all_columns else table.select(*KEYS, *meta)
        _noop(keys.join(full, KEYS, "left"))

    contenders = {
        "index lookup": lambda: lookup(True),
        "index lookup (no duplicate check)": lambda: lookup(False),
        "index lookup on the driver (pyarrow, no Spark job)": lookup_local,
        "full-table join, key columns only": lambda: merge_join(False),
        "full-table join, whole rows (copy-on-write MERGE)": lambda: merge_join(True),
    }
    times: dict[str, list[float]] = {}
    for name, action in contenders.items():
        action()  # warm-up: file listing, JIT
        times[name] = [_timed(action) for _ in range(args.runs)]
        print(f"{name}: {[round(t, 2) for t in times[name]]}", flush=True)
    found = index.lookup(keys).found.count()

    rebuild_s = _timed(lambda: index.rebuild())
    index_bytes = _dir_bytes(Path(index.store.root) / "data")
    summary = {
        "rows": build.rows_total,
        "buckets": build.num_buckets,
        "build_s": build.duration_ms / 1000,
        "rebuild_s": rebuild_s,
        "index_bytes": index_bytes,
        "table_bytes": data.stat().st_size,
        "keys": n_keys,
        "found": found,
        "runs": {k: v for k, v in times.items()},
    }
    lines = [
        "# Row index: TPC-DS store_sales SF1",
        "",
        f"Command: `{COMMAND}` (local[2], 2 shared cores, driver 6g, shuffle partitions 8)",
        "",
        f"Table {summary['rows']:,} rows, {summary['table_bytes'] / 1e6:.0f} MB; index {summary['buckets']} buckets, "
        f"{index_bytes / 1e6:.1f} MB; key (ss_item_sk, ss_ticket_number); lookup of {n_keys:,} keys "
        f"({args.fraction:.0%}, {found:,} found).",
        "",
        "| measure | min (s) | median (s) |",
        "|---|---|---|",
        f"| index build (first) | {summary['build_s']:.2f} | |",
        f"| index rebuild | {rebuild_s:.2f} | |",
        *[f"| {k} | {min(v):.2f} | {statistics.median(v):.2f} |" for k, v in times.items()],
        "",
        f"Machine load average (1 min) {load_before:.1f} at start, {os.getloadavg()[0]:.1f} at end (shared with "
        "other jobs): compare rows of one run, not absolute times across machines.",
        "",
        "Notes: every contender produces found (key, file, pos) and missing keys. The checked index lookup reads the "
        "index once and caches the matched rows for both outputs; without the check, found and missing are two "
        "jobs that each read the index. The driver lookup reads all bucket files with pyarrow (with this many keys "
        "every bucket is touched) and joins in Arrow. The full-table joins are what a MERGE does to locate its rows.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    results.mkdir(parents=True, exist_ok=True)
    (results / "index_sf1.md").write_text(text)
    (results / "index_sf1.json").write_text(json.dumps(summary, indent=1) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["index build", *times]
    values = [summary["build_s"], *[statistics.median(v) for v in times.values()]]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.barh(labels, values, color=["#888", "#2a7", "#6c9", "#4a8", "#c55", "#a33"])
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.2f} s", va="center")
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median; build: single run)")
    ax.set_title(f"store_sales SF1: lookup of {n_keys:,} keys (1%) vs MERGE's key join", fontsize=10)
    fig.text(0.01, 0.01, COMMAND, fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(results / "index_sf1.png", dpi=120)
    spark.stop()


if __name__ == "__main__":
    main()
