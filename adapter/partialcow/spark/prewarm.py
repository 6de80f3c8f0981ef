"""Warm-up of a fresh process, in a background thread, while dbt parses, compiles and lists relations.

A scheduler starts one ``dbt run`` process per job: every class the JVM loads, every method it compiles and every
Python module the pipeline imports is met for the first time inside the first model's timing. Started right after
the session, this thread runs part of that code concurrently with dbt's own start-up, on throw-away data in a
temporary folder: the pipeline's modules, a Parquet file's schema inference, scan and collection as Arrow (the
driver path collects batches that way), the conversion of a Spark schema to Arrow, and Iceberg's catalog. Nothing
in the session, the catalog or the warehouse changes; any failure is ignored (the model then pays the cost
itself). ``PARTIALCOW_PREWARM=0`` turns it off.

A process can end while the thread still runs (a model that fails to compile, any run done sooner): the interpreter
then tore the thread down in the middle of a step and the process aborted (exit code 134, "Fatal Python error:
PyGILState_Release"), so a scheduler saw a crash where dbt had reported success or an ordinary error. At exit the
thread is told to stop after its current step and waited for.

Only steps that finish before the model needs the cores are worth it on a small machine: warming the table
formats' commits too (an Iceberg append and overwrite, or two Delta commits, on a path table) overlapped the model
and made it slower (``bench/README.md``). Class loading itself is shared across processes by
:mod:`partialcow.spark.class_cache`.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

__all__ = ["start_prewarm"]

_started: set[int] = set()
_lock = threading.Lock()
_stop = threading.Event()
# Waited for at most this long at exit: a step takes about a second; one stuck (a JVM that died) must not hold the
# process forever.
_EXIT_WAIT_SECONDS = 30.0


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
    # registered after PySpark's own exit handlers, so it runs before them (the session still up while we wait)
    atexit.register(_finish, thread)
    return thread


def _finish(thread: threading.Thread) -> None:
    _stop.set()
    thread.join(_EXIT_WAIT_SECONDS)


def _prewarm(spark: Any, table_format: str) -> None:
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="partialcow-prewarm-")
    try:
        import partialcow.parquet
        import partialcow.spark.changes
        import partialcow.spark.small_batch  # noqa: F401

        if _stop.is_set():
            return
        _parquet_to_arrow(spark, folder)
        if table_format == "iceberg" and not _stop.is_set():
            from partialcow.table.java import bind_to_current_thread

            bind_to_current_thread(spark)
            spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergCatalog(spark._jsparkSession, "spark_catalog")
    except Exception:  # noqa: BLE001 - a warm-up that fails changes nothing; the model pays the cost itself
        pass
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _parquet_to_arrow(spark: Any, folder: str) -> Any:
    """What a model's first batch does: infer a Parquet file's schema, scan it and collect the rows as Arrow, over
    the column types tables usually hold (the scan's code is generated and compiled per type). Returns the frame."""
    import datetime
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pa.table({
        "i": pa.array([1, None], pa.int32()),
        "l": pa.array([2, 3], pa.int64()),
        "d": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(7, 2)),
        "f": pa.array([0.5, None], pa.float64()),
        "s": pa.array(["a", None], pa.string()),
        "day": pa.array([datetime.date(2026, 1, 1), None], pa.date32()),
        "ts": pa.array([datetime.datetime(2026, 1, 1), None], pa.timestamp("us", tz="UTC")),
    })
    pq.write_table(rows, f"{folder}/rows.parquet")
    frame = spark.read.parquet(f"{folder}/rows.parquet")
    frame.where("l > 0")._collect_as_arrow()
    # the Arrow schema new data files are written with: PySpark's conversion imports distutils on first use
    from pyspark.sql.pandas.types import to_arrow_schema

    to_arrow_schema(frame.schema)
    return frame

