"""Benchmark of the data-page size: scan time of an Iceberg table against what a sparse change re-encodes.

``ROWS_PER_PAGE`` (``partialcow.parquet.writer``) trades two costs. Small pages let a partial rewrite re-encode few
rows; every page also costs readers a header, a decompression call and a page-index entry. This benchmark writes
TPC-DS ``store_sales`` with ``write_table`` at several page sizes, registers each layout as an Iceberg table
(``add_files``), adds the same rows written by Iceberg's own Spark writer, and times the upsert benchmark's full
scan (every value read) and selective scan in interleaved rounds. Next to each layout it reports the share of data
values a partial rewrite re-encodes (the rows of every page holding a change) when 0.01%, 0.1% and 1% of the rows
change at random, computed from the files' real page sizes.

    PYTHONPATH=adapter python bench/layout_bench.py                 # SF1, 8 files, 15 rounds (~6 min on 2 cores)
    PYTHONPATH=adapter python bench/layout_bench.py --rows-per-page 2000,20000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path

from partialcow.parquet import write_table
from partialcow.parquet.inspect import describe
from partialcow.parquet.writer import ROWS_PER_PAGE

sys.path.insert(0, str(Path(__file__).resolve().parent))
from upsert_bench import REPO, code_version, ensure_data, full_scan_sql, load_base, selective_scan_sql  # noqa: E402

NAMESPACE = "layout_bench"
CHANGE_RATES = (0.0001, 0.001, 0.01)
ICEBERG_WRITER = "iceberg_writer"
SCANS = {"full": full_scan_sql, "selective": selective_scan_sql}  # the upsert benchmark's two scans


def data_page_rows(path: Path) -> list[int]:
    """Rows per data page, over every column chunk of the file."""
    return [
        page["rows"]
        for rg in describe(path)["row_groups"]
        for column in rg["columns"]
        for page in column["pages"]
        if page["type"] != "DICTIONARY_PAGE"
    ]


def reencoded_share(page_rows: list[int], rate: float) -> float:
    """Expected share of the values a partial rewrite re-encodes when a uniform random ``rate`` of the rows change:
    the rows of every page that holds at least one change, over all rows (a page of r rows is touched with
    probability 1-(1-rate)^r)."""
    return sum(rows * (1 - (1 - rate) ** rows) for rows in page_rows) / sum(page_rows)


def write_layout(base, folder: Path, files: int, rows_per_page: int) -> list[int]:  # type: ignore[no-untyped-def]
    folder.mkdir(parents=True)
    page_rows: list[int] = []
    n = base.num_rows
    for i in range(files):
        start, stop = n * i // files, n * (i + 1) // files
        path = folder / f"part-{i:03d}.parquet"
        write_table(base.slice(start, stop - start), path, max_rows_per_page=rows_per_page)
        page_rows += data_page_rows(path)
    return page_rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1, help="TPC-DS scale factor")
    parser.add_argument("--rows-per-page", default="2000,5000,10000,20000", help="comma-separated page sizes in rows")
    parser.add_argument("--files", type=int, default=8, help="data files per table")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved scan rounds, at least 2 (the first is warm-up)")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2: the first round is a warm-up")
    version = code_version()
    command = "PYTHONPATH=adapter python bench/layout_bench.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    sizes = [int(s) for s in args.rows_per_page.split(",")]

    work = REPO / "bench" / "work" / f"layout_sf{args.scale}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    source = ensure_data(args.scale)
    _, base = load_base(source, None, work)

    from pyspark.sql import functions as F

    from partialcow.spark.session import get_or_create_session

    spark = get_or_create_session(table_format="iceberg", warehouse=str(work / "warehouse"), master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {NAMESPACE}")
    frame = spark.read.parquet(str(source))
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in frame.schema.fields)

    layouts: dict[str, dict] = {}
    for rows in sizes:
        name = f"rows_{rows}"
        page_rows = write_layout(base, work / "files" / name, args.files, rows)
        spark.sql(f"CREATE TABLE {NAMESPACE}.{name} ({columns}) USING iceberg")
        spark.sql(
            f"CALL spark_catalog.system.add_files(table => '{NAMESPACE}.{name}', "
            f"source_table => '`parquet`.`{work / 'files' / name}`')"
        )
        layouts[name] = {"rows_per_page": rows, "data_pages": len(page_rows),
                         **{f"reencoded_{r}": reencoded_share(page_rows, r) for r in CHANGE_RATES}}
    # the source's row order in as many files as ours (a round-robin repartition would scatter rows: larger files)
    order = "_layout_bench_row"
    (
        frame.withColumn(order, F.monotonically_increasing_id())
        .repartitionByRange(args.files, order)
        .sortWithinPartitions(order)
        .drop(order)
        .writeTo(f"{NAMESPACE}.{ICEBERG_WRITER}")
        .using("iceberg")
        .create()
    )
    layouts[ICEBERG_WRITER] = {"rows_per_page": None, "data_pages": None}

    times: dict[tuple[str, str], list[float]] = {}
    expected: dict[str, tuple] = {}
    for _ in range(args.rounds):
        for name in layouts:
            for scan, sql in SCANS.items():
                started = time.perf_counter()
                result = tuple(spark.sql(sql(f"{NAMESPACE}.{name}")).first())
                times.setdefault((name, scan), []).append(time.perf_counter() - started)
                if expected.setdefault(scan, result) != result:
                    sys.exit(f"{name}: {scan} scan gave {result}, expected {expected[scan]}: the layouts differ")
    default = f"rows_{ROWS_PER_PAGE}" if ROWS_PER_PAGE in sizes else None
    for name, info in layouts.items():
        files = spark.sql(f"SELECT count(*), sum(file_size_in_bytes) FROM {NAMESPACE}.{name}.files").first()
        info["files"], info["mb"] = files[0], files[1] / 1e6
        for scan in SCANS:
            info[f"{scan}_s"] = statistics.median(times[name, scan][1:])
            info[f"{scan}_runs_s"] = [round(t, 3) for t in times[name, scan]]
    for name, info in layouts.items():
        for scan in SCANS:
            info[f"{scan}_vs_default"] = None if default is None else info[f"{scan}_s"] / layouts[default][f"{scan}_s"]
    report(args, command, version, base.num_rows, layouts)


def report(args: argparse.Namespace, command: str, version: str, rows: int, layouts: dict[str, dict]) -> None:
    rates = " | ".join(f"values re-encoded at {r:.2%} changed" for r in CHANGE_RATES)
    lines = [
        f"# Page size benchmark: TPC-DS store_sales SF{args.scale}",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end, Spark local[2], "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {version}. {rows:,} rows; {args.files} files per table "
        f"in the source's row order; the upsert benchmark's scans through Iceberg (full: `count(*), sum(hash(*))`; selective: an "
        f"`ss_item_sk` range), median of {args.rounds - 1} interleaved rounds after one warm-up round. The product "
        f"writes {ROWS_PER_PAGE:,} rows per page (`ROWS_PER_PAGE`). Values re-encoded: the expected share of the rows "
        "that sit in a page holding a change, when that share of rows changes at random.",
        "",
        f"| layout | rows per page | files | data pages | MB | full scan s | vs {ROWS_PER_PAGE:,} | selective scan s | "
        f"vs {ROWS_PER_PAGE:,} | {rates} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(CHANGE_RATES),
    ]
    for name, info in layouts.items():
        shares = " | ".join(
            "" if info.get(f"reencoded_{r}") is None else f"{info[f'reencoded_{r}']:.1%}" for r in CHANGE_RATES
        )
        scans = " | ".join(
            f"{info[f'{scan}_s']:.3f} | " + ("" if info[f"{scan}_vs_default"] is None else f"{info[f'{scan}_vs_default']:.2f}")
            for scan in SCANS
        )
        lines.append(
            f"| {name} | {info['rows_per_page'] or 'writer default'} | {info['files']} | {info['data_pages'] or ''} | {info['mb']:.1f} | "
            f"{scans} | {shares} |"
        )
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"layout_sf{args.scale}"
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    stem.with_suffix(".json").write_text(json.dumps({"command": command, "code": version, "layouts": layouts}, indent=1))
    plot(layouts, stem.with_suffix(".png"), f"store_sales SF{args.scale}: page size vs scan and rewrite granularity")
    print("\n".join(lines))


def plot(layouts: dict[str, dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(layouts)
    fig, (scan, reencoded) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.4
    for i, kind in enumerate(SCANS):
        scan.bar([x + (i - 0.5) * width for x in range(len(names))], [layouts[n][f"{kind}_s"] for n in names],
                 width, label=f"{kind} scan")
    scan.set_xticks(range(len(names)), names, rotation=30)
    scan.set_ylabel("scan, s (median)")
    scan.legend()
    sized = [n for n in names if layouts[n]["rows_per_page"]]
    for rate in CHANGE_RATES:
        reencoded.plot([layouts[n]["rows_per_page"] for n in sized], [100 * layouts[n][f"reencoded_{rate}"] for n in sized],
                     marker="o", label=f"{rate:.2%} of rows changed")
    reencoded.set_xscale("log")
    reencoded.set_xlabel("rows per page")
    reencoded.set_ylabel("values re-encoded, %")
    reencoded.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
