"""What a Python model's pandas DataFrame becomes in Spark: the values the model returned, whatever the time zone of
the process dbt runs in (regression: NaN stayed a value, nullable ``Int64`` became ``double``, and naive timestamps
were read in the process's local time zone, shifting them by its offset from the session's UTC)."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from partialcow.dbt_adapter.python_models import to_spark_dataframe

pytestmark = [pytest.mark.spark]


@pytest.fixture()
def new_york(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_pandas_result_keeps_its_nulls_integers_and_wall_clock_times(spark, new_york) -> None:
    frame = pd.DataFrame({
        "id": [1, 2],
        "v": [1.5, None],
        "n": pd.array([7, None], dtype="Int64"),
        "ts": [pd.Timestamp("2024-01-01 00:00"), pd.Timestamp("2024-07-01 12:30:00.000001")],
        "s": ["a", None],
    })
    df = to_spark_dataframe(frame, spark, model_name="pandas_model")
    assert dict(df.dtypes) == {"id": "bigint", "v": "double", "n": "bigint", "ts": "timestamp", "s": "string"}
    rows = df.selectExpr("id", "v", "v IS NULL AS v_null", "n", "CAST(ts AS STRING) AS ts", "s").orderBy("id").collect()
    assert [tuple(r) for r in rows] == [
        (1, 1.5, False, 7, "2024-01-01 00:00:00", "a"),
        (2, None, True, None, "2024-07-01 12:30:00.000001", None),
    ]
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled", "false") == "false"  # left as it was



def test_an_empty_pandas_result_is_an_empty_frame_of_its_dtypes(spark) -> None:
    """Regression: a Python model with no changes to deliver returned an empty DataFrame, and Spark could not infer
    a schema from no rows (CANNOT_INFER_EMPTY_SCHEMA): every quiet run failed."""
    frame = pd.DataFrame({"id": pd.Series([], dtype="int64"), "s": pd.Series([], dtype="object"),
                          "ts": pd.Series([], dtype="datetime64[ns]")})
    df = to_spark_dataframe(frame, spark, model_name="empty_model")
    assert df.dtypes == [("id", "bigint"), ("s", "string"), ("ts", "timestamp")] and df.count() == 0


def test_a_column_arrow_cannot_convert_is_refused_by_name(spark, new_york) -> None:
    """Regression: one column Arrow cannot give Spark (uint64, an object column of mixed values) made PySpark fall
    back to its row-by-row conversion for the whole frame, silently: 2**64 - 1 stored as null, and the other columns
    as that conversion stores them (NaN kept, Int64 as double, naive times shifted by the process's time zone)."""
    import numpy as np
    from dbt_common.exceptions import DbtRuntimeError

    frame = pd.DataFrame({
        "id": [1, 2],
        "u": np.array([7, 2**64 - 1], dtype="uint64"),
        "o": [1, "x"],
        "n": pd.array([5, None], dtype="Int64"),
    })
    with pytest.raises(DbtRuntimeError) as info:
        to_spark_dataframe(frame, spark, model_name="unsigned_model")
    message = str(info.value)
    assert "unsigned_model" in message and "u (uint64), o (object)" in message and "int64" in message, message
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.fallback.enabled", None) in (None, "true")
    converted = to_spark_dataframe(frame.drop(columns=["u", "o"]), spark, model_name="unsigned_model")
    assert [tuple(r) for r in converted.orderBy("id").collect()] == [(1, 5), (2, None)]


def test_small_unsigned_integers_and_half_floats_are_widened_and_repeated_names_refused(spark) -> None:
    """Spark's Arrow conversion has no uint8/16/32 or float16: widened first, every value kept (the row-by-row
    conversion, no longer taken, stored them so too). A frame with two columns of one name is refused by name."""
    import numpy as np
    from dbt_common.exceptions import DbtRuntimeError

    frame = pd.DataFrame({
        "id": [1, 2],
        "u8": np.array([0, 255], "uint8"),
        "u16": np.array([1, 65535], "uint16"),
        "u32": np.array([2, 2**32 - 1], "uint32"),
        "h": np.array([0.5, -0.0], "float16"),
    })
    df = to_spark_dataframe(frame, spark, model_name="small_types")
    assert dict(df.dtypes) == {"id": "bigint", "u8": "smallint", "u16": "int", "u32": "bigint", "h": "float"}
    rows = [tuple(r) for r in df.orderBy("id").collect()]
    assert rows == [(1, 0, 1, 2, 0.5), (2, 255, 65535, 2**32 - 1, -0.0)]
    assert str(rows[1][4]) == "-0.0"
    with pytest.raises(DbtRuntimeError, match=r"small_types.*v \(a name 2 columns hold\)"):
        to_spark_dataframe(pd.DataFrame([[1, 2, 3]], columns=["id", "v", "v"]), spark, model_name="small_types")
