"""Where the `stage` phase of a 1% batch goes, in a fresh process: `collect_small_batch` on a kept benchmark table.

Usage (after `PYTHONPATH=adapter python bench/dbt_bench.py --steps build,batch --batches 1 --contenders ours_iceberg
--check none --keep`):

    PYTHONPATH=adapter python bench/stage_profile.py [default|nowholestage|unscaled]

Starts the session and the prewarm thread as a dbt process does, waits for the thread, then stages the kept batch
three times (cold, then warm) and prints the model query's analysis, the whole staging, and the Spark job that
collects the batch as Arrow. `nowholestage` turns Spark's whole-stage code generation off first; `unscaled` collects
the decimals as unscaled integers (`partialcow.spark.decimal_transfer`, which only first builds and large batches
use) and turns them back.
"""

import os
import sys
import time

import pyspark.sql.dataframe as frames
from fresh_process import KEPT, KEYS, dbt_session
from pyspark.sql import functions as F

from partialcow.spark import small_batch
from partialcow.spark.spec import ChangeSpec
from partialcow.spark.tables import open_table

WORK = str(KEPT)
variant = sys.argv[1] if len(sys.argv) > 1 else "default"
spark = dbt_session(os.path.join(WORK, "warehouse_iceberg"))
if variant == "nowholestage":
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
table = open_table(spark, "bench.ours_iceberg", table_format="iceberg")
spec = ChangeSpec(key_columns=KEYS, op_column="_op", model="stage_profile")
schema = table.spark_schema()
collect = frames.DataFrame._collect_as_arrow
seconds: dict[str, float] = {}


def timed_collect(self, *args, **kwargs):
    started = time.perf_counter()
    try:
        if variant != "unscaled":
            return collect(self, *args, **kwargs)
        from partialcow.spark.decimal_transfer import restore_decimals, send_unscaled, unscaled_decimals

        decimals = unscaled_decimals(self.schema)
        return [restore_decimals(b, decimals) for b in collect(send_unscaled(self, decimals), *args, **kwargs)]
    finally:
        seconds["collect"] = time.perf_counter() - started


frames.DataFrame._collect_as_arrow = timed_collect
bucket = F.pmod(F.xxhash64(F.col("ss_item_sk").cast("int"), F.col("ss_ticket_number").cast("int")), F.lit(6))
for run in ("cold", "warm", "warm"):
    started = time.perf_counter()
    changes = spark.sql(f"select * from parquet.`{os.path.join(WORK, 'batches', 'batch01.parquet')}`")
    query = time.perf_counter() - started
    started = time.perf_counter()
    batch, rows = small_batch.collect_small_batch(changes, spec, table_schema=schema, bucket=bucket.cast("int"))
    stage = time.perf_counter() - started
    print(f"{variant} {run}: query {query:.3f} s, stage {stage:.3f} s (collect {seconds['collect']:.3f} s), "
          f"{rows} rows")
