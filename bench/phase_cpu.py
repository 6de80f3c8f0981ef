"""CPU use per phase of a 1% batch in a fresh process: wall time, and the JVM's and Python's CPU time in each phase.

Usage (after `PYTHONPATH=adapter python bench/dbt_bench.py --steps build,batch --batches 1 --contenders ours_iceberg
--check none --keep`, whose table and batch it reuses):

    PYTHONPATH=adapter python bench/phase_cpu.py [--java-options=-XX:+TieredCompilation]

Starts the session and the prewarm thread as a dbt process does, waits for the thread, then analyses the model's
query, opens the table and applies the kept batch with `ss_quantity` moved by a new amount (so every row changes),
timing each phase of `apply_changes`. A phase whose JVM used close to 2 cores on this 2-core machine had no core to
spare for work running beside it. `--java-options` are added to the driver's (`-XX:+TieredCompilation` keeps the
JVM's own JIT instead of the session's default).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator

from fresh_process import KEPT as WORK
from fresh_process import KEYS, cpu_seconds, dbt_session, jvm_pid, moved_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--java-options", default="")
    args = parser.parse_args()

    import partialcow.metrics as metrics
    from partialcow.spark.changes import apply_changes
    from partialcow.spark.spec import ChangeSpec
    from partialcow.spark.tables import open_table

    spark = dbt_session(WORK / "warehouse_iceberg", java_options=args.java_options)
    jvm = jvm_pid(spark)

    rows: list[tuple[str, float, float, float]] = []
    timed = metrics.PhaseClock.__call__

    @contextlib.contextmanager
    def phase(clock: object, name: str) -> Iterator[None]:
        wall, jvm_cpu, py_cpu = time.perf_counter(), cpu_seconds(jvm), cpu_seconds(os.getpid())
        with timed(clock, name):  # type: ignore[arg-type]
            yield
        rows.append((name, time.perf_counter() - wall, cpu_seconds(jvm) - jvm_cpu, cpu_seconds(os.getpid()) - py_cpu))

    metrics.PhaseClock.__call__ = phase  # type: ignore[assignment,method-assign]
    path = moved_batch(f"phase_cpu_{time.time_ns()}", time.time_ns() % 100_000 + 1)
    clock = metrics.PhaseClock()
    with clock("query"):
        changes = spark.sql(f"select * from parquet.`{path}`")
    with clock("open"):
        table = open_table(spark, "bench.ours_iceberg", table_format="iceberg")
    apply_changes(spark, table, changes, ChangeSpec(key_columns=KEYS, op_column="_op"))
    print(f"java options: {args.java_options or '(the session default)'}\n")
    print("| phase | wall, s | JVM CPU, s (cores) | Python CPU, s (cores) |\n|---|---:|---:|---:|")
    for name, wall, jvm_cpu, py_cpu in rows:
        cores = (f"{jvm_cpu:.2f} ({jvm_cpu / wall:.2f})", f"{py_cpu:.2f} ({py_cpu / wall:.2f})") if wall > 0.05 \
            else (f"{jvm_cpu:.2f}", f"{py_cpu:.2f}")
        print(f"| {name} | {wall:.3f} | {cores[0]} | {cores[1]} |")


if __name__ == "__main__":
    main()
