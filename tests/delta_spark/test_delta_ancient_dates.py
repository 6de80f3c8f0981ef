"""Dates before 1582-10-15 and timestamps before 1900 in Delta tables we write (issue 22's type matrix skipped them).

Spark reads a Parquet file of a writer it does not know with ``spark.sql.parquet.datetimeRebaseModeInRead``
(EXCEPTION by default), so such values in our files failed every read of the table; files that say they were written
in the proleptic Gregorian calendar (as Spark 3 says it of its own) read as they are. Every path that writes a file is
covered: the first build, an update in place, an insert, and the readers of both implementations agree.
"""

from __future__ import annotations

import datetime as dt

import pytest
from deltalake import DeltaTable


from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import delta_root, open_table

pytestmark = [pytest.mark.spark]

SPEC = ChangeSpec(key_columns=("id",), op_column="_op", model="ancient")
SCHEMA = "id bigint, d date, ts timestamp, ntz timestamp_ntz, _op string"
OLD_DAY = dt.date(1500, 3, 1)
OLD_TIME = dt.datetime(1200, 5, 6, 7, 8, 9, 123456)


def _rows(spark, name):
    return sorted(tuple(r) for r in spark.table(name).collect())


def test_ancient_dates_and_timestamps_read_back(spark, schema, tmp_path) -> None:
    name = f"{schema}.ancient"
    first = [(1, OLD_DAY, OLD_TIME, OLD_TIME, "I"), (2, dt.date(2024, 1, 1), dt.datetime(2024, 1, 1), None, "I")]
    create_table(spark, name, spark.createDataFrame(first, SCHEMA), SPEC, table_format="delta")
    assert _rows(spark, name) == [r[:4] for r in first]
    table = open_table(spark, name, table_format="delta")
    batch = [(2, dt.date(1000, 1, 1), OLD_TIME, OLD_TIME, "U"), (3, dt.date(1, 1, 1), dt.datetime(100, 1, 1), None, "I")]
    apply_changes(spark, table, spark.createDataFrame(batch, SCHEMA), SPEC)
    want = [first[0][:4], *(r[:4] for r in batch)]
    assert _rows(spark, name) == want
    # delta-rs, an independent reader, reads the same dates (timestamps: the zoned column in UTC, as Spark's here)
    rs = DeltaTable(delta_root(spark, name)).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["d"], r["ntz"]) for r in rs) == sorted((r[0], r[1], r[3]) for r in want)
