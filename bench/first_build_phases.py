"""Where a first build's time goes, in one warm session: ``create_table`` (our writer + row index) against
Iceberg's CTAS of the same rows, repeated; prints the phases of ``bulk_create`` (stage, create, write, index,
commit) and, inside the index phase, the bucket-file write.

    PYTHONPATH=adapter python bench/first_build_phases.py --repeat 3

The first round includes the JVM's and the Python workers' warm-up (what a fresh ``dbt run`` pays); later rounds
are warm. Data: TPC-DS store_sales SF1 in bench/data/sf1 (``upsert_bench.py`` generates it).
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KEYS = ["ss_item_sk", "ss_ticket_number"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", default=str(HERE / "data" / "sf1" / "store_sales.parquet"))
    parser.add_argument("--format", choices=["iceberg", "delta"], default="iceberg")
    args = parser.parse_args()

    import partialcow.spark.bulk as bulk
    from partialcow.spark.changes import ChangeSpec, create_table
    from partialcow.spark.session import get_or_create_session

    work = HERE / "work" / "first_build"
    shutil.rmtree(work, ignore_errors=True)
    spark = get_or_create_session(table_format=args.format, warehouse=str(work / "warehouse"), master="local[2]")
    seconds: dict[str, float] = {}
    original = bulk._write_index

    def timed(*a: Any, **k: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            seconds["bucket files"] = time.perf_counter() - started

    bulk._write_index = timed  # type: ignore[assignment]
    spark.sql("CREATE SCHEMA IF NOT EXISTS bench")
    for round_ in range(args.repeat):
        started = time.perf_counter()
        metrics = create_table(spark, "bench.ours", spark.read.parquet(args.data), ChangeSpec(key_columns=KEYS),
                               table_format=args.format)
        ours = time.perf_counter() - started
        started = time.perf_counter()
        spark.sql(f"CREATE OR REPLACE TABLE bench.ctas USING {args.format} AS SELECT * FROM parquet.`{args.data}`")
        ctas = time.perf_counter() - started
        print(f"round {round_ + 1}: create_table {ours:.2f} s {metrics.phase_ms} (bucket files "
              f"{seconds['bucket files']:.2f} s); CTAS {ctas:.2f} s", flush=True)


if __name__ == "__main__":
    main()
