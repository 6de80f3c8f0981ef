"""The bridge to a Spark session's JVM: the one place that reaches through py4j for the session's gateway, binds
the session to the calling thread, and loads Iceberg's Java table.

PySpark pins each Python thread to its own JVM thread, whose thread-local active session starts empty; Iceberg's
``Spark3Util.loadIcebergTable`` then resolves names through a catalog that hands back a V1 table. dbt runs models on
worker threads, so everything that calls Iceberg's (or Delta's) Java API binds the session first.
"""

from __future__ import annotations

from typing import Any

__all__ = ["bind_to_current_thread", "jvm", "load_iceberg_table"]


def jvm(spark: Any) -> Any:
    """The py4j view of ``spark``'s JVM (``jvm(spark).org.apache...``).

    >>> jvm(type("Stopped", (), {"sparkContext": type("Context", (), {"_jvm": None})()})())
    Traceback (most recent call last):
    ...
    RuntimeError: the Spark session has no JVM gateway (was it stopped?)
    """
    gateway = spark.sparkContext._jvm
    if gateway is None:
        raise RuntimeError("the Spark session has no JVM gateway (was it stopped?)")
    return gateway


def bind_to_current_thread(spark: Any) -> Any:
    """Make ``spark`` the JVM's active session for the calling thread and return it."""
    jvm(spark).org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    return spark


def load_iceberg_table(spark: Any, name: str) -> Any:
    """Iceberg's Java ``Table`` for catalog name ``name`` (py4j errors pass through: callers say what failed)."""
    bind_to_current_thread(spark)
    return jvm(spark).org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)
