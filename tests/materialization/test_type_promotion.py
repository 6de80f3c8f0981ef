"""Batches on Iceberg tables whose files were written under other column types than the table has now.

Iceberg promotes a column in place (``ALTER COLUMN ... TYPE``: int -> bigint, float -> double, a decimal's
precision) without rewriting a file or committing a snapshot, and Spark's own writes store a column as required in
the file when the query could not produce a null, though the table's column is optional. A file then cannot hold
every value the table can: a row whose new value it cannot hold moves to a new file, new rows go to a new file, and
the row index follows the key's type. Expected rows come from a plain Python dict of the table's rows.
"""

from __future__ import annotations

import math
import uuid

import pytest

from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="promoted")
BIG = 2**32 + 1  # an int key of 1 once cast back to int


def _rows(spark, name: str) -> dict:
    return {r["k"]: tuple(r)[1:] for r in spark.table(name).collect()}


def _apply(spark, name: str, rows: list, schema: str):
    return apply_changes(spark, open_table(spark, name, table_format="iceberg"), spark.createDataFrame(rows, schema),
                         SPEC)


@pytest.fixture()
def schema(spark):
    name = f"pcow_promo_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {name}")
    yield name
    spark.sql(f"drop schema {name} cascade")


@pytest.mark.parametrize("how", ["alter", "replace"])
def test_regression_key_promoted_to_bigint_found_an_int_index(spark, schema, how):
    """Regression case: after the key went from int to bigint, the row index kept hashing and typing keys as int.
    A batch with a key beyond int's range failed (``ArrowInvalid``) after ``ALTER``, and with ``StaleIndexError``
    (``rebuild the index``) after the table was re-created, on every later run."""
    name = f"{schema}.t"
    create_table(spark, name, spark.createDataFrame([(k, f"v{k}", "I") for k in range(1, 50)],
                                                    "k int, v string, _op string"), SPEC)
    _apply(spark, name, [(3, "three", "U")], "k int, v string, _op string")  # the index exists, keys typed int
    if how == "alter":
        spark.sql(f"alter table {name} alter column k type bigint")
    else:
        spark.sql(f"create or replace table {name} using iceberg as select cast(k as bigint) k, v from {name}")
    expected = _rows(spark, name)
    metrics = _apply(spark, name, [(BIG, "big", "I"), (4, "four", "U")], "k bigint, v string, _op string")
    expected.update({BIG: ("big",), 4: ("four",)})
    assert (metrics.rows_inserted, metrics.rows_updated) == (1, 1)
    assert _rows(spark, name) == expected
    metrics = _apply(spark, name, [(BIG, "bigger", "U"), (1, "one", "U")], "k bigint, v string, _op string")
    expected.update({BIG: ("bigger",), 1: ("one",)})
    assert (metrics.rows_inserted, metrics.rows_updated) == (0, 2)  # the new key is found again, not added twice
    assert _rows(spark, name) == expected


def test_regression_values_a_file_cannot_hold_move_the_row(spark, schema):
    """Regression case: after ``n`` went from int to bigint and ``x`` from float to double, an update of ``n``
    beyond int's range was refused (``cannot cast the updated values``), and an update of ``x`` to 0.1 or 1e300
    was stored as the file's float (0.10000000149..., inf). A null into a column Spark's own insert wrote as
    required in its file (``s``, optional in the table) was refused."""
    name = f"{schema}.t"
    spark.sql(f"create table {name} (k bigint, n int, x float, s string) using iceberg")
    spark.sql(f"insert into {name} select id, cast(id as int), cast(id as float), concat('s', id) from range(40)")
    spark.sql(f"alter table {name} alter column n type bigint")
    spark.sql(f"alter table {name} alter column x type double")
    cols = "k bigint, n bigint, x double, s string, _op string"
    expected = _rows(spark, name)
    batch = [(1, BIG, 1.0, "s1", "U"), (2, 2, 0.1, "s2", "U"), (3, 3, 1e300, "s3", "U"), (4, 4, 4.0, None, "U"),
             (5, 55, 5.0, "s5", "U"), (100, BIG, 0.1, None, "I")]
    metrics = _apply(spark, name, batch, cols)
    expected.update({k: (n, x, s) for k, n, x, s, _ in batch})
    assert (metrics.rows_updated, metrics.rows_inserted) == (5, 1)
    got = _rows(spark, name)
    assert got == expected
    assert not any(isinstance(v[1], float) and math.isinf(v[1]) and v[1] != 1e300 for v in got.values())
