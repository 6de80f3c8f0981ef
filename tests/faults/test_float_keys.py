"""Float keys compare one way everywhere: -0.0 is 0.0 in the batch, the row index and the locate join.

The regression (a table that could not be written again): key 0.0 existed, a batch upserted -0.0; the join in the
locate job compared bits, so -0.0 was inserted as a new key, the commit landed, and the index then found the key
twice (``DuplicateKeyError``) on every later write.
"""

from __future__ import annotations

import uuid

import pytest

from partialcow.index import RowIndex
from partialcow.table.iceberg import IcebergTable
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("f",), op_column="_op", model="floaty")


@pytest.fixture()
def table(spark):
    schema = f"pcow_float_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    create_table(spark, name, spark.createDataFrame([(0.0, 1, "I"), (1.5, 2, "I")], "f double, v int, _op string"),
                 SPEC)
    yield name
    spark.sql(f"drop schema {schema} cascade")


def _apply(spark, name, rows):
    return apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                         spark.createDataFrame(rows, "f double, v int, _op string"), SPEC)


def test_minus_zero_updates_the_zero_key(spark, table):
    metrics = _apply(spark, table, [(-0.0, 10, "U")])
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 0)
    assert sorted((r["f"], r["v"]) for r in spark.table(table).collect()) == [(0.0, 10), (1.5, 2)]
    # the table can be written again, and its index agrees with it
    metrics = _apply(spark, table, [(0.0, 11, "U"), (2.5, 3, "I")])
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 1)
    assert RowIndex.open(IcebergTable(spark, table)).verify().ok


def test_a_minus_zero_written_by_another_engine_is_found(spark, table):
    """The table holds -0.0 (Spark SQL wrote it); a batch with 0.0 updates that row instead of adding a second one."""
    _apply(spark, table, [(0.0, 0, "D")])
    spark.sql(f"INSERT INTO {table} VALUES (cast('-0.0' as double), 5)")
    metrics = _apply(spark, table, [(0.0, 12, "U")])
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 0)
    assert sorted((r["f"], r["v"]) for r in spark.table(table).collect()) == [(0.0, 12), (1.5, 2)]
    assert RowIndex.open(IcebergTable(spark, table)).verify().ok


def test_a_first_build_stores_minus_zero_as_zero(spark, schema):
    """The first build kept a -0.0 key as -0.0 where every incremental write stores 0.0 (README)."""
    name = f"{schema}.first_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(-0.0, 1, "I"), (1.5, 2, "I")], "f double, v int, _op string"),
                 SPEC)
    assert sorted(r[0] for r in spark.sql(f"select cast(f as string) from {name}").collect()) == ["0.0", "1.5"]
    assert RowIndex.open(IcebergTable(spark, name)).verify().ok
