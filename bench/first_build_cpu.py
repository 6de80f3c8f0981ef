"""Where a first build's CPU goes, in fresh processes: wall time, phases and CPU of the driver JVM, the Python
workers and the driver's Python, for the library's ``create_table`` of TPC-DS store_sales (and Iceberg's CTAS of
the same rows, ``--ctas``), with code variants in turn.

    PYTHONPATH=adapter python bench/first_build_cpu.py --rounds 3 [--ctas] [--variant old=/path/to/old/adapter]

Each round runs one fresh process per variant (``name=PYTHONPATH``; the default is this checkout's ``adapter``):
the session and the prewarm thread as a dbt process starts them, then the build. A variant pointing at another
checkout's ``adapter`` folder compares two commits on the same data, alternating, so machine drift falls on both.
The JVM's CPU is read from ``/proc`` (threads that ended included); the Python workers' is that of the JVM's
Python descendants still alive at the end (PySpark keeps its daemon and idle workers). Data: TPC-DS store_sales
SF1 in bench/data/sf1 (``upsert_bench.py`` generates it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from fresh_process import HERE, KEYS, cpu_seconds, dbt_session, descendants_cpu, jvm_pid


def child(what: str, data: str, work: str) -> None:
    """One fresh process: start the session as dbt does, build, print one JSON line."""
    from partialcow.spark.changes import ChangeSpec, create_table

    shutil.rmtree(work, ignore_errors=True)
    spark = dbt_session(os.path.join(work, "warehouse"), master="local[2]")
    spark.sql("CREATE SCHEMA IF NOT EXISTS bench")
    jvm = jvm_pid(spark)
    before = (cpu_seconds(jvm), descendants_cpu(jvm), cpu_seconds(os.getpid()))
    started = time.perf_counter()
    phases: dict[str, int] = {}
    if what == "build":
        rows = spark.read.parquet(data)
        phases = create_table(spark, "bench.ours", rows, ChangeSpec(key_columns=list(KEYS))).phase_ms
    else:
        spark.sql(f"CREATE OR REPLACE TABLE bench.ctas USING iceberg AS SELECT * FROM parquet.`{data}`")
    wall = time.perf_counter() - started
    after = (cpu_seconds(jvm), descendants_cpu(jvm), cpu_seconds(os.getpid()))
    print("RESULT " + json.dumps({"wall": wall, "phases": phases, "jvm_cpu": after[0] - before[0],
                                  "workers_cpu": after[1] - before[1], "driver_python_cpu": after[2] - before[2]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ctas", action="store_true", help="also time Iceberg's CTAS of the same rows")
    parser.add_argument("--variant", action="append", default=[],
                        help="name=PYTHONPATH of a code variant (repeatable; default: this=<this checkout>/adapter)")
    parser.add_argument("--data", default=str(HERE / "data" / "sf1" / "store_sales.parquet"))
    parser.add_argument("--child", choices=["build", "ctas"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = str(HERE / "work" / "first_build_cpu")
    if args.child:
        child(args.child, args.data, work)
        return
    variants = dict(v.split("=", 1) for v in args.variant) or {"this": str(HERE.parent / "adapter")}
    runs = [(name, "build") for name in variants] + ([("ctas", "ctas")] if args.ctas else [])
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}; "
          f"variants {variants}", flush=True)
    for round_ in range(1, args.rounds + 1):
        for name, what in runs:
            path = variants.get(name, next(iter(variants.values())))
            env = {**os.environ, "PYTHONPATH": path}
            out = subprocess.run([sys.executable, __file__, "--child", what, "--data", args.data], env=env,
                                 capture_output=True, text=True, check=False)
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                print(f"round {round_} {name}: failed\n{out.stderr[-2000:]}", flush=True)
                continue
            r = json.loads(line[len("RESULT "):])
            print(f"round {round_} {name:>6}: wall {r['wall']:.2f} s, JVM CPU {r['jvm_cpu']:.1f} s, Python workers "
                  f"{r['workers_cpu']:.1f} s, driver Python {r['driver_python_cpu']:.1f} s; phases (ms) "
                  f"{r['phases']}", flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
