"""Helpers the compiled code of Python models calls (it runs in this process, see ``python_submission``)."""

from __future__ import annotations

import threading
from typing import Any

from dbt_common.exceptions import DbtRuntimeError

_ARROW = "spark.sql.execution.arrow.pyspark.enabled"
# Arrow or nothing: PySpark's fallback to its row-by-row conversion, taken for the whole frame when one column has a
# type Arrow cannot give Spark (uint64, an object column of mixed values), stores other values wrongly (see below)
_ARROW_FALLBACK = "spark.sql.execution.arrow.pyspark.fallback.enabled"
_ARROW_SWITCH = threading.Lock()  # dbt runs Python models in threads that share the session's settings


def to_spark_dataframe(result: Any, spark: Any, *, model_name: str) -> Any:
    """The Spark DataFrame a Python model returned (a Spark or pandas DataFrame).

    A pandas DataFrame converts through Arrow, as dbt-spark's pandas-on-Spark conversion does: a missing value
    (``NaN``, ``None``, ``pd.NA``) becomes null, a nullable ``Int64`` column stays an integer column, and a naive
    timestamp is a wall-clock time in the session's time zone. PySpark's row-by-row conversion (its default) kept
    ``NaN`` as a value, made ``Int64`` columns doubles and read naive timestamps in the Python process's local time
    zone, silently shifting them by its offset from the session's; it also stored a ``uint64`` above 2**63 as null.
    A frame with a column Arrow cannot convert is therefore refused, naming the column; the smaller unsigned integers
    and ``float16``, which Spark's Arrow conversion lacks, are widened first (as that conversion stored them).

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
        if result.empty:  # a batch with no changes: Spark infers no schema from no rows, the dtypes tell it
            return spark.createDataFrame([], _empty_frame_schema(result))
        with _ARROW_SWITCH:
            before = {key: spark.conf.get(key, None) for key in (_ARROW, _ARROW_FALLBACK)}
            spark.conf.set(_ARROW, "true")
            spark.conf.set(_ARROW_FALLBACK, "false")
            try:
                return spark.createDataFrame(_widened(result))
            except Exception as exc:
                columns = _unconvertible_columns(result)
                if not columns:
                    raise
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise DbtRuntimeError(
                    f"Python model {model_name} returned a pandas DataFrame whose column(s) {', '.join(columns)} "
                    f"Arrow cannot convert to a Spark type exactly ({first}); nothing was written. Convert them in "
                    "the model: a uint64 to int64 (values below 2**63) or to Python Decimals (a decimal(20,0) "
                    "column), an object column to one type of value; give each column a name of its own"
                ) from None
            finally:
                # left as they were, unset included: the model's own settings are what dbt's log reports
                for key, value in before.items():
                    if value is None:
                        spark.conf.unset(key)
                    else:
                        spark.conf.set(key, value)
    raise DbtRuntimeError(
        f"Python model {model_name} returned {type(result).__name__}: return a Spark or pandas DataFrame"
    )


# numpy types Spark has no Arrow conversion for, and the type that holds every value of theirs exactly
_WIDER = {"uint8": "int16", "uint16": "int32", "uint32": "int64", "float16": "float32"}


def _widened(frame: Any) -> Any:
    """``frame`` with its columns of the types in ``_WIDER`` widened (PySpark's row-by-row conversion stored them as
    wider types too); the same frame when it has none.

    >>> import numpy as np, pandas as pd
    >>> _widened(pd.DataFrame({"u": np.array([255], "uint8"), "f": np.array([0.5], "float16")})).dtypes.tolist()
    [dtype('int16'), dtype('float32')]
    """
    wider = {i: _WIDER[str(t)] for i, t in enumerate(frame.dtypes) if str(t) in _WIDER}
    if not wider:
        return frame
    frame = frame.copy(deep=False)
    for i, dtype in wider.items():
        frame.isetitem(i, frame.iloc[:, i].astype(dtype))
    return frame


def _unconvertible_columns(frame: Any) -> list[str]:
    """The columns of a pandas DataFrame that Arrow cannot convert to a Spark type, each with its dtype, and names
    held by more than one column.

    >>> import numpy as np, pandas as pd
    >>> _unconvertible_columns(pd.DataFrame({"id": [1], "u": np.array([1], "uint64"), "o": [object()]}))
    ['u (uint64)', 'o (object)']
    >>> _unconvertible_columns(pd.DataFrame([[1, 2]], columns=["a", "a"]))
    ['a (a name 2 columns hold)']
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_type

    names = [str(c) for c in frame.columns]
    found = [f"{name} (a name {names.count(name)} columns hold)" for name in dict.fromkeys(names)
             if names.count(name) > 1]
    for i, name in enumerate(names):
        column = frame.iloc[:, i]
        try:
            from_arrow_type(pa.Schema.from_pandas(column.to_frame(name="c"), preserve_index=False).field(0).type)
        except Exception:  # noqa: BLE001 - Arrow's and PySpark's errors alike: the column cannot be converted
            found.append(f"{name} ({column.dtype})")
    return found


def _empty_frame_schema(frame: Any) -> Any:
    """The Spark schema of an empty pandas DataFrame, from its dtypes (an ``object`` column, whose type no value
    tells, is a string column)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = pa.Schema.from_pandas(frame, preserve_index=False)
    fields = [pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f for f in schema]
    return from_arrow_schema(pa.schema(fields))


def sql_literal(value: Any) -> str:
    r"""A Python value (as agate reads a seed) as a Spark SQL literal; strings escaped, ``None`` as null.

    >>> import datetime, decimal
    >>> print(*(sql_literal(v) for v in (None, True, decimal.Decimal("1.50"), datetime.date(2026, 1, 2))))
    null true 1.50 '2026-01-02'
    >>> print(sql_literal("it's a \ path"))
    'it\'s a \\ path'
    >>> print(*(sql_literal(v) for v in (decimal.Decimal("NaN"), float("inf"), decimal.Decimal("-Infinity"))))
    'NaN' 'Infinity' '-Infinity'
    """
    import datetime
    import decimal
    import math

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, decimal.Decimal)):
        if not isinstance(value, int) and not math.isfinite(value):
            # as strings, which Spark casts to the special values; a bare NaN is a column name to it
            return "'NaN'" if math.isnan(value) else ("'Infinity'" if value > 0 else "'-Infinity'")
        return str(value)
    if isinstance(value, datetime.datetime):
        return "'" + value.isoformat(sep=" ") + "'"
    if isinstance(value, datetime.date):
        return "'" + value.isoformat() + "'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
