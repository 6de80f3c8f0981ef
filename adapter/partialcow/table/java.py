"""The bridge to a Spark session's JVM: the one place that reaches through py4j for the session's gateway, binds
the session to the calling thread, loads Iceberg's Java table, and reads what a failed Java call raised.

PySpark pins each Python thread to its own JVM thread, whose thread-local active session starts empty; Iceberg's
``Spark3Util.loadIcebergTable`` then resolves names through a catalog that hands back a V1 table. dbt runs models on
worker threads, so everything that calls Iceberg's (or Delta's) Java API binds the session first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "bind_to_current_thread",
    "java_class",
    "java_errors",
    "java_map",
    "java_message",
    "java_throwable",
    "jvm",
    "load_iceberg_table",
]


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


def java_errors() -> tuple[type[BaseException], ...]:
    """What a failing py4j call raises: pyspark converts some Java exceptions (IllegalArgumentException, ...)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    return (Py4JJavaError, CapturedException)


def java_throwable(exc: BaseException) -> Any:
    """The Java exception behind what a py4j call raised: a ``Py4JJavaError``, or an exception PySpark converted
    (its own, or one a package registered, such as delta-spark's ``delta.exceptions``)."""
    return getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)


def java_class(exc: BaseException) -> str:
    """The Java class name of the exception a py4j call raised (the Python type's name when there is none)."""
    try:
        return str(java_throwable(exc).getClass().getName())
    except Exception:  # noqa: BLE001 - a broken gateway must not hide the original error
        return type(exc).__name__


def java_message(exc: BaseException) -> str:
    """``SimpleClassName: message`` of the Java exception behind ``exc``, for error messages."""
    try:
        java = java_throwable(exc)
        return f"{java.getClass().getSimpleName()}: {java.getMessage()}"
    except Exception:  # noqa: BLE001
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__


def java_map(gateway: Any, values: Mapping[str, str]) -> Any:
    """A ``java.util.HashMap`` holding ``values`` (``gateway`` is ``jvm(spark)``)."""
    result = gateway.java.util.HashMap()
    for key, value in values.items():
        result.put(key, value)
    return result
