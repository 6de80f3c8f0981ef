"""The narrowing of a `dbt snapshot` run alone, in fresh processes, against the SF1 snapshot a kept snapshot benchmark
left (`PYTHONPATH=adapter python bench/dbt_bench.py --snapshot --steps build --contenders snap_iceberg --keep`).

    PYTHONPATH=adapter python bench/snapshot_narrow_bench.py --runs 3

Each run is a new Python process with its own Spark session (as a `dbt snapshot` process), which narrows the
source `snapshot_init.parquet` (1% of the keys away from the snapshot after the benchmark's 1% step) against
`bench.snap_iceberg`: the join of every key, then the candidates' rows of each side, as
`partialcow_snapshot_narrow` does. Variants run in turn, so a slow moment of the machine falls on all of them:
`hash` and `sort` (the join with and without the `SHUFFLE_HASH` hint), `g1` (hashed, the driver JVM on G1 rather
than our default collector). Prints seconds per phase and the JVM's CPU time per thread kind; no files written.
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

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench" / "work" / "dbt_sf1"
KEY = "concat(ss_item_sk, '-', ss_ticket_number)"  # the benchmark's snapshot key
VARIANTS = {"hash": {}, "sort": {}, "g1": {"spark.driver.extraJavaOptions": "-XX:+UseG1GC"}}


def one(variant: str) -> dict[str, float]:
    """One narrowing in this process (a fresh one: the caller starts it)."""
    os.environ.setdefault("PARTIALCOW_CLASS_CACHE_DIR", str(WORK / "jvm_cache"))
    from partialcow.dbt_adapter import snapshot_narrow as narrow
    from partialcow.spark.session import get_or_create_session

    spark = get_or_create_session(table_format="iceberg", warehouse=str(WORK / "warehouse_iceberg"),
                                  extra=VARIANTS[variant])
    source_sql = f"select * from parquet.`{WORK / 'batches' / 'snapshot_init.parquet'}`"
    target = "bench.snap_iceberg"
    target_columns = spark.table(target).columns
    source = spark.sql(source_sql)
    plan, why = narrow.plan_narrowing(
        strategy_name="check", unique_key=KEY, check_cols=["ss_quantity", "ss_net_profit"],
        source_columns=source.columns, source_types=[t for _, t in source.dtypes], target_columns=target_columns,
        meta_columns={"dbt_valid_to": "dbt_valid_to", "dbt_valid_from": "dbt_valid_from"}, updated_at=None,
        valid_to_current=None)
    assert plan is not None, why
    times: dict[str, float] = {}
    started = time.perf_counter()
    keys = spark.sql(narrow.candidate_keys_sql(plan, source_sql, target, shuffle_hash=variant != "sort"))
    keys = keys.localCheckpoint(eager=True)
    keys.createOrReplaceTempView("bench_keys")
    times["candidates"] = keys.count()
    times["keys_s"] = time.perf_counter() - started
    mark = time.perf_counter()
    spark.sql(narrow.narrowed_source_sql(plan, source_sql, "bench_keys")).localCheckpoint(eager=True)
    spark.sql(narrow.narrowed_target_sql(plan, target, target_columns, "bench_keys")).localCheckpoint(eager=True)
    times["rows_s"] = time.perf_counter() - mark
    times["narrowing_s"] = time.perf_counter() - started
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
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variants", default="hash,sort,g1")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    if not (WORK / "warehouse_iceberg").is_dir():
        sys.exit(f"no kept snapshot benchmark in {WORK}: run bench/dbt_bench.py --snapshot ... --keep first")
    for run in range(args.runs):
        for variant in args.variants.split(","):
            out = subprocess.run([sys.executable, __file__, "--one", variant], capture_output=True, text=True,
                                 check=True, env={**os.environ, "PYTHONPATH": str(REPO / "adapter")})
            times = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"run {run + 1} {variant:5} " + " ".join(
                f"{k} {v:.1f}" if k != "candidates" else f"{k} {int(v)}" for k, v in times.items()), flush=True)


if __name__ == "__main__":
    main()
