"""The narrowing of a `dbt snapshot` run, and dbt's staging query over what it leaves, in fresh processes, against
the SF1 snapshot a kept snapshot benchmark left (`PYTHONPATH=adapter python bench/dbt_bench.py --snapshot --steps
build --contenders snap_iceberg --keep`; with `--format delta`, `--contenders snap_ours_delta` and delta-spark's
jars in `PARTIALCOW_DELTA_JARS`).

    PYTHONPATH=adapter python bench/snapshot_narrow_bench.py --runs 3 [--variants hash,lazy] [--code old=<adapter>]

Each run is a new Python process with its own Spark session (as a `dbt snapshot` process), which narrows the source
`snapshot_init.parquet` (1% of the keys away from the snapshot after the benchmark's 1% step) against
`bench.snap_iceberg` (`bench.snap_ours_delta`) as `partialcow_snapshot_narrow` does: the join of every key, then the
candidates' rows of the source and of the snapshot, each computed once. Then dbt's own staging query of the kept run
(read from its log) runs over them, computed once, as `partialcow_snapshot_apply` does. Variants run in turn, so a
slow moment of the machine falls on all of them: `hash` and `sort` (the join with and without the `SHUFFLE_HASH`
hint), `g1` (hashed, the driver JVM on G1 rather than our default collector), `lazy` (hashed; the snapshot's rows not
computed beforehand: dbt's query reads them where it uses them, only the columns it needs), `parquet` (hashed; the
snapshot read by Spark's own Parquet reader from its current data files, listed through Iceberg's `files` metadata
table or by delta-rs in a phase of its own; right only for a table without delete files, partitions or renamed
columns, as the kept one). `--code name=<adapter folder>` (repeatable) runs every variant with each checkout's code,
for two commits on the same data. `--stages` also prints each Spark stage's times and sizes (from Spark's REST API;
the UI is on in those processes). Prints seconds per phase and the JVM's CPU time; no files written.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from fresh_process import KEPT as WORK

REPO = Path(__file__).resolve().parents[1]
KEY = "concat(ss_item_sk, '-', ss_ticket_number)"  # the benchmark's snapshot key
VARIANTS = {"hash": {}, "sort": {}, "g1": {"spark.driver.extraJavaOptions": "-XX:+UseG1GC"}, "lazy": {},
            "parquet": {}}
UI = {"spark.ui.enabled": "true", "spark.ui.port": "4077"}  # --stages
SNAPSHOTS = {"iceberg": "snap_iceberg", "delta": "snap_ours_delta"}  # the kept run's snapshot per format


def views(fmt: str) -> dict[str, str]:
    """The names dbt's staging query of the kept run reads (macros/materializations/snapshot.sql)."""
    prefix = f"bench__{SNAPSHOTS[fmt]}__pcow_snapshot"
    return {"keys": f"{prefix}_keys", "source": f"{prefix}_source", "target": f"{prefix}_current"}


def staging_sql(fmt: str) -> str:
    """dbt's staging query of the kept run's 1% snapshot, as its log holds it."""
    log = (WORK / "logs" / "snapshot_1pct" / SNAPSHOTS[fmt] / "dbt.log").read_text()
    match = re.search(r"create or replace temporary view \S+ as(.*?)\n\S*\d\d:\d\d:\d\d\.\d+ ", log, re.S)
    if match is None:
        sys.exit("no staging query in the kept run's log")
    return match.group(1)


def one(variant: str, stages: bool, fmt: str) -> dict[str, float]:
    """One narrowing and staging query in this process (a fresh one: the caller starts it)."""
    os.environ.setdefault("PARTIALCOW_CLASS_CACHE_DIR", str(WORK / "jvm_cache"))
    from partialcow.dbt_adapter import snapshot_narrow as narrow
    from partialcow.spark.session import get_or_create_session

    jars = [j for j in os.environ.get("PARTIALCOW_DELTA_JARS", "").split(",") if j]
    spark = get_or_create_session(table_format=fmt, warehouse=str(WORK / f"warehouse_{fmt}"),  # type: ignore[arg-type]
                                  extra={**VARIANTS[variant], **(UI if stages else {})},
                                  delta_jars=jars if fmt == "delta" else None)
    names = views(fmt)
    source_sql = f"select * from parquet.`{WORK / 'batches' / 'snapshot_init.parquet'}`"
    target = f"bench.{SNAPSHOTS[fmt]}"
    target_columns = spark.table(target).columns
    source = spark.sql(source_sql)
    plan, why = narrow.plan_narrowing(
        strategy_name="check", unique_key=KEY, check_cols=["ss_quantity", "ss_net_profit"],
        source_columns=source.columns, source_types=[t for _, t in source.dtypes], target_columns=target_columns,
        meta_columns={"dbt_valid_to": "dbt_valid_to", "dbt_valid_from": "dbt_valid_from"}, updated_at=None,
        valid_to_current=None)
    assert plan is not None, why
    times: dict[str, float] = {}
    started = mark = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        times[name] = now - mark
        mark = now

    if variant == "parquet" and fmt == "delta":
        from partialcow.spark.tables import delta_root
        from partialcow.table.delta import DeltaRsTable

        files = [f.path for f in DeltaRsTable(delta_root(spark, target), spark=spark).live_files()]
        spark.read.schema(spark.table(target).schema).parquet(*files).createOrReplaceTempView("bench_snap_files")
        target = "bench_snap_files"
        lap("list_files_s")
    elif variant == "parquet":
        files = [r[0] for r in spark.sql(f"select file_path from {target}.files").collect()]
        spark.read.schema(spark.table(target).schema).parquet(*files).createOrReplaceTempView("bench_snap_files")
        target = "bench_snap_files"
        lap("list_files_s")
    keys = spark.sql(narrow.candidate_keys_sql(plan, source_sql, target, shuffle_hash=variant != "sort"))
    keys = keys.localCheckpoint(eager=True)
    keys.createOrReplaceTempView(names["keys"])
    times["candidates"] = keys.count()
    lap("keys_s")
    spark.sql(narrow.narrowed_source_sql(plan, source_sql, names["keys"])).localCheckpoint(
        eager=True).createOrReplaceTempView(names["source"])
    lap("source_rows_s")
    target_rows = spark.sql(narrow.narrowed_target_sql(plan, target, target_columns, names["keys"]))
    if variant != "lazy":
        target_rows = target_rows.localCheckpoint(eager=True)
    target_rows.createOrReplaceTempView(names["target"])
    lap("target_rows_s")
    times["narrowing_s"] = mark - started
    times["staged"] = spark.sql(staging_sql(fmt)).localCheckpoint(eager=True).count()
    lap("dbt_query_s")
    times["total_s"] = mark - started
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    tick = os.sysconf("SC_CLK_TCK")
    cpu: collections.Counter[str] = collections.Counter()
    for stat in glob.glob(f"/proc/{pid}/task/*/stat"):
        try:
            text = Path(stat).read_text()
        except OSError:
            continue
        name = re.sub(r"[\d#-]+$", "", text[text.index("(") + 1:text.rindex(")")]).strip()
        fields = text[text.rindex(")") + 2:].split()
        cpu[name] += (int(fields[11]) + int(fields[12])) / tick
    times["jvm_cpu_s"] = sum(cpu.values())
    times["jit_cpu_s"] = sum(v for k, v in cpu.items() if "Compiler" in k)
    if stages:
        _print_stages(spark)
    return times


def _print_stages(spark: object) -> None:
    """Each Spark stage of this process: start and end, tasks, run and CPU time, input and shuffle bytes."""
    import urllib.request

    app = spark.sparkContext.applicationId  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{UI['spark.ui.port']}/api/v1/applications/{app}/stages"
    with urllib.request.urlopen(url) as answer:
        listed = json.load(answer)
    for st in sorted(listed, key=lambda st: st["stageId"]):
        if st.get("submissionTime"):
            print(f"  stage {st['stageId']:3} {st['submissionTime'][11:23]}-{st.get('completionTime', '')[11:23]} "
                  f"tasks {st['numTasks']} run {st['executorRunTime'] / 1000:.1f} s "
                  f"cpu {st['executorCpuTime'] / 1e9:.1f} s gc {st['jvmGcTime'] / 1000:.1f} s "
                  f"input {st['inputBytes'] / 1e6:.0f} MB shuffle write {st['shuffleWriteBytes'] / 1e6:.0f} MB "
                  f"{st['description'][:60] if st.get('description') else st['name'][:30]}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variants", default="hash,sort,g1")
    parser.add_argument("--code", action="append", default=[],
                        help="name=<adapter folder> of a checkout to run (repeatable; default: this checkout's)")
    parser.add_argument("--stages", action="store_true", help="print each Spark stage's times and sizes")
    parser.add_argument("--format", choices=sorted(SNAPSHOTS), default="iceberg")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.stages, args.format)))
        return
    if not (WORK / f"warehouse_{args.format}").is_dir():
        sys.exit(f"no kept snapshot benchmark in {WORK}: run bench/dbt_bench.py --snapshot ... --keep first")
    codes = dict(c.split("=", 1) for c in args.code) or {"this": str(REPO / "adapter")}
    for run in range(args.runs):
        for code, path in codes.items():
            for variant in args.variants.split(","):
                out = subprocess.run([sys.executable, __file__, "--one", variant, "--format", args.format,
                                      *(["--stages"] if args.stages else [])], capture_output=True, text=True,
                                     check=True, env={**os.environ, "PYTHONPATH": path})
                if args.stages:
                    print("\n".join(line for line in out.stderr.splitlines() if line.startswith("  stage")))
                times = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"run {run + 1} {code} {variant:5} " + " ".join(
                    f"{k} {int(v)}" if k in ("candidates", "staged") else f"{k} {v:.1f}" for k, v in times.items()),
                    flush=True)


if __name__ == "__main__":
    main()
