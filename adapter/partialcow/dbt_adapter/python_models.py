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
    raise DbtRuntimeError(f"Python model {model_name} returned {type(result).__name__}: return a Spark or pandas DataFrame")
