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


def test_int96_timestamps_delta_spark_wrote_inside_structs_arrays_and_maps(spark, schema, pipeline_path) -> None:
    """delta-spark writes timestamps as INT96 (Spark's default), at the top level and inside nested columns, where
    pyarrow reads them as zone-less nanoseconds: a file we rewrite keeps them INT96. The commit's schema check took
    the nested ones for ``timestamp_nanos_ntz`` and refused every batch touching such a file."""
    name = f"{schema}.legacy_{pipeline_path}"
    spark.sql(f"create table {name} (id bigint, ts timestamp, s struct<ts: timestamp, n: int>, a array<timestamp>, "
              "m map<string, timestamp>, n int) using delta tblproperties ('delta.enableDeletionVectors'='false')")
    t0 = "timestamp'2020-01-01 00:00:00.123456'"
    spark.sql(f"insert into {name} select id, {t0}, named_struct('ts', {t0}, 'n', 1), array({t0}, null), "
              f"map('k', {t0}), 0 from range(5)")
    root = delta_root(spark, name)
    before = _rows(spark, name)
    t1 = dt.datetime(2021, 6, 7, 8, 9, 10, 654321)
    batch = spark.createDataFrame(
        [(1, t1, (t1, 2), [t1, None], {"k": t1}, 7, "U"), (6, t1, (None, 3), [], {}, 8, "I")],
        "id bigint, ts timestamp, s struct<ts: timestamp, n: int>, a array<timestamp>, m map<string, timestamp>, "
        "n int, _op string")
    apply_changes(spark, open_table(spark, name, table_format="delta"), batch, SPEC)
    t0v = dt.datetime(2020, 1, 1, 0, 0, 0, 123456)
    want = {i: (t0v, (t0v, 1), [t0v, None], {"k": t0v}, 0) for i in range(5)}
    want[1] = (t1, (t1, 2), [t1, None], {"k": t1}, 7)
    want[6] = (t1, (None, 3), [], {}, 8)
    for vectorized in ("true", "false"):
        spark.conf.set("spark.sql.parquet.enableVectorizedReader", vectorized)
        try:
            got = {r[0]: (r[1], tuple(r[2]), list(r[3]), dict(r[4]), r[5]) for r in spark.table(name).collect()}
        finally:
            spark.conf.unset("spark.sql.parquet.enableVectorizedReader")
        assert got == want, vectorized
    previous = int(spark.sql(f"describe history {name} limit 1").first()["version"]) - 1
    assert sorted(tuple(r) for r in spark.read.format("delta").option("versionAsOf", previous).load(root).collect()) \
        == before
    # delta-rs reads the same instants (zoned timestamps in UTC, the session's time zone here)
    rs = {r["id"]: (r["ts"].replace(tzinfo=None), r["s"]["ts"] and r["s"]["ts"].replace(tzinfo=None),
                    [v and v.replace(tzinfo=None) for v in r["a"]], {k: v.replace(tzinfo=None) for k, v in r["m"]})
          for r in DeltaTable(root).to_pyarrow_table().to_pylist()}
    assert rs == {i: (w[0], w[1][0], w[2], w[3]) for i, w in want.items()}
