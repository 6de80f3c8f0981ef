"""Helpers the compiled code of Python models calls (it runs in this process, see ``python_submission``)."""

from __future__ import annotations

from typing import Any

from dbt_common.exceptions import DbtRuntimeError


def to_spark_dataframe(result: Any, spark: Any, *, model_name: str) -> Any:
    """The Spark DataFrame a Python model returned (a Spark or pandas DataFrame).

    >>> to_spark_dataframe(42, None, model_name="m")
    Traceback (most recent call last):
    ...
    dbt_common.exceptions.base.DbtRuntimeError: Runtime Error
      Python model m returned int: return a Spark or pandas DataFrame
    """
    from pyspark.sql import DataFrame

    if isinstance(result, DataFrame):
        return result
    if type(result).__module__.startswith("pandas") and type(result).__name__ == "DataFrame":
        return spark.createDataFrame(result)
    raise DbtRuntimeError(
        f"Python model {model_name} returned {type(result).__name__}: return a Spark or pandas DataFrame"
    )


def sql_literal(value: Any) -> str:
    r"""A Python value (as agate reads a seed) as a Spark SQL literal; strings escaped, ``None`` as null.

    >>> import datetime, decimal
    >>> print(*(sql_literal(v) for v in (None, True, decimal.Decimal("1.50"), datetime.date(2026, 1, 2))))
    null true 1.50 '2026-01-02'
    >>> print(sql_literal("it's a \ path"))
    'it\'s a \\ path'
    """
    import datetime
    import decimal

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, decimal.Decimal)):
        return str(value)
    if isinstance(value, datetime.datetime):
        return "'" + value.isoformat(sep=" ") + "'"
    if isinstance(value, datetime.date):
        return "'" + value.isoformat() + "'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
