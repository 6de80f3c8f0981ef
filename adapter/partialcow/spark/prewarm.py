"""Warm-up of a fresh process, in a background thread, while dbt parses, compiles and lists relations.

A scheduler starts one ``dbt run`` process per job: every class the JVM loads and every Python module the pipeline
imports is loaded for the first time inside the first model's timing. Started right after the session, this thread
loads them concurrently with dbt's own start-up: the pipeline's modules, Iceberg's catalog and table classes, and
Spark's Arrow conversion (the driver path collects batches as Arrow). Nothing here changes any state; any failure is
ignored (the model then pays the cost itself). ``PARTIALCOW_PREWARM=0`` turns it off.
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["start_prewarm"]

_started: set[int] = set()
_lock = threading.Lock()


def start_prewarm(spark: Any, table_format: str) -> threading.Thread | None:
    """Start the warm-up thread once per SparkContext; returns it (None when off or already started)."""
    if os.environ.get("PARTIALCOW_PREWARM", "1") == "0":
        return None
    with _lock:
        key = id(spark.sparkContext)
        if key in _started:
            return None
        _started.add(key)
    thread = threading.Thread(target=_prewarm, args=(spark, table_format), name="partialcow-prewarm", daemon=True)
    thread.start()
    return thread


def _prewarm(spark: Any, table_format: str) -> None:
    try:
        import partialcow.parquet
        import partialcow.spark.changes
        import partialcow.spark.small_batch  # noqa: F401

        spark.range(1)._collect_as_arrow()
        if table_format == "iceberg":
            from partialcow.table.java import bind_to_current_thread

            bind_to_current_thread(spark)
            jvm = spark._jvm
            jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergCatalog(spark._jsparkSession, "spark_catalog")
    except Exception:  # noqa: BLE001 - a warm-up that fails changes nothing; the model pays the cost itself
        pass
