"""The driver JVM's JIT settings, in fresh processes: session start, a 1% batch, a first build and a CTAS.

Usage (after `PYTHONPATH=adapter python bench/dbt_bench.py --steps build,batch --batches 1 --contenders ours_iceberg
--check none --keep`, whose table, batch and build files it reuses):

    PYTHONPATH=adapter python bench/jit_profile.py --rounds 3

Each round starts one process per variant and work kind, variants in turn, so a slow moment of the machine falls on
all of them. A process starts the session and the prewarm thread as a dbt process does, waits for the thread, then
does one thing: `batch` applies 1% of the keys (the kept batch with `ss_quantity` moved by a new amount each time)
to the kept table through `apply_changes`; `build` is `create_table` of the whole table into a new table; `ctas` is
Iceberg's CTAS of the same rows (what dbt-spark's first build runs). Printed per process: the session start, the
work's wall time and phases, and the JVM's CPU time during the work. Variants: `jvm` (the JVM's own JIT: the option
`-XX:+TieredCompilation` makes the session leave its JIT default out), `late_c2` (the session's default,
`partialcow.spark.session.DRIVER_JIT`) and `c1` (`-XX:TieredStopAtLevel=1`, the quick compiler only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from fresh_process import KEPT as WORK
from fresh_process import KEYS, cpu_seconds, dbt_session, jvm_pid, moved_batch

VARIANTS = {"jvm": "-XX:+TieredCompilation", "late_c2": "", "c1": "-XX:TieredStopAtLevel=1"}


def child(variant: str, kind: str, run: int) -> None:
    from partialcow.spark.changes import apply_changes, create_table
    from partialcow.spark.spec import ChangeSpec
    from partialcow.spark.tables import open_table

    started = time.perf_counter()
    spark = dbt_session(WORK / "warehouse_iceberg", java_options=VARIANTS[variant])
    session = time.perf_counter() - started
    jvm = jvm_pid(spark)
    phases: dict[str, int] = {}
    cpu, started = cpu_seconds(jvm), time.perf_counter()
    if kind == "batch":
        path = moved_batch(f"jit_{variant}_{run}", 1000 + run * len(VARIANTS) + list(VARIANTS).index(variant))
        changes = spark.sql(f"select * from parquet.`{path}`")
        table = open_table(spark, "bench.ours_iceberg", table_format="iceberg")
        phases = apply_changes(spark, table, changes, ChangeSpec(key_columns=KEYS, op_column="_op")).phase_ms
    elif kind == "build":
        name = f"bench.jit_build_{variant}_{run}"
        rows = spark.read.parquet(str(WORK / "batches" / "build.parquet"))
        phases = create_table(spark, name, rows, ChangeSpec(key_columns=KEYS, op_column="_op"),
                              table_format="iceberg").phase_ms
    else:
        name = f"bench.jit_ctas_{variant}_{run}"
        spark.sql(f"CREATE TABLE {name} USING iceberg AS SELECT * FROM parquet.`{WORK / 'batches' / 'build.parquet'}`")
    seconds = time.perf_counter() - started
    print(json.dumps({"variant": variant, "kind": kind, "session": round(session, 2), "work": round(seconds, 2),
                      "jvm_cpu": round(cpu_seconds(jvm) - cpu, 2), "phases": phases}), flush=True)
    if kind != "batch":
        spark.sql(f"DROP TABLE {name} PURGE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", default="batch,build,ctas")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "KIND", "RUN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    if not (WORK / "warehouse_iceberg").is_dir():
        sys.exit(f"no kept benchmark in {WORK}: run dbt_bench.py with --keep first (see the docstring)")
    results: list[dict[str, Any]] = []
    for run in range(args.rounds):
        for kind in args.kinds.split(","):
            for variant in args.variants.split(","):
                out = subprocess.run([sys.executable, __file__, "--child", variant, kind, str(run)],
                                     capture_output=True, text=True, check=False)
                lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
                if out.returncode or not lines:
                    sys.exit(f"{variant} {kind} failed:\n{out.stderr[-3000:]}")
                results.append(json.loads(lines[-1]))
                print(lines[-1], flush=True)
    print("\n| work | variant | session start, s | work, s | JVM CPU during the work, s |\n|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        for variant in args.variants.split(","):
            mine = [r for r in results if r["kind"] == kind and r["variant"] == variant]
            cells = [", ".join(f"{r[k]:.2f}" for r in mine) + f" (median {statistics.median(r[k] for r in mine):.2f})"
                     for k in ("session", "work", "jvm_cpu")]
            print(f"| {kind} | {variant} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
