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


def _table(schema: str) -> str:
    return f"{schema}.t_{uuid.uuid4().hex[:8]}"  # the module's schema (tests/conftest.py), a table per case


@pytest.mark.parametrize("how", ["alter", "replace"])
def test_regression_key_promoted_to_bigint_found_an_int_index(spark, schema, how):
    """Regression case: after the key went from int to bigint, the row index kept hashing and typing keys as int.
    A batch with a key beyond int's range failed (``ArrowInvalid``) after ``ALTER``, and with ``StaleIndexError``
    (``rebuild the index``) after the table was re-created, on every later run."""
    name = _table(schema)
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
    name = _table(schema)
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


def test_regression_nested_values_a_file_cannot_hold_move_the_row(spark, schema):
    """Regression case: inside a struct or a list the file's types were not looked at. After ``s.x`` went from
    float to double, an update of it to 0.1 was stored as the file's float; a null in a struct field or a list
    element that Spark's own insert wrote as required in the file (optional in the table) was refused."""
    name = _table(schema)
    spark.sql(f"create table {name} (k bigint, s struct<x: float, n: int>, tags array<int>) using iceberg")
    spark.sql(f"insert into {name} select id, named_struct('x', cast(id as float), 'n', cast(id as int)), "
              "array(cast(id as int)) from range(20)")
    spark.sql(f"alter table {name} alter column s.x type double")
    expected = _rows(spark, name)
    batch = [(1, (0.1, 1), [1], "U"), (2, (2.0, 2), [2, None], "U"), (3, (3.0, None), [3], "U")]
    metrics = _apply(spark, name, batch, "k bigint, s struct<x: double, n: int>, tags array<int>, _op string")
    assert metrics.rows_updated == 3
    got = {k: (tuple(v[0]), list(v[1])) for k, v in _rows(spark, name).items()}
    expected = {k: (tuple(v[0]), list(v[1])) for k, v in expected.items()}
    expected.update({k: (s, tags) for k, s, tags, _ in batch})
    assert got == expected


def test_regression_a_smallint_key_beyond_its_range_is_not_taken_for_another(spark, schema):
    """A model's smallint key is an int column in Iceberg (it has no smallint), but the build's index kept the
    model's smallint and lookups cast keys to it: 65539 became 3. The first batch re-indexes under the table's
    type, once (its key types then match), and keys beyond smallint's range are found as themselves."""
    from partialcow.index import RowIndex

    name = _table(schema)
    create_table(spark, name, spark.createDataFrame([(k, f"v{k}", "I") for k in range(1, 50)],
                                                    "k smallint, v string, _op string"), SPEC)
    table = open_table(spark, name, table_format="iceberg")
    expected = _rows(spark, name)
    metrics = _apply(spark, name, [(3, "three", "U"), (65539, "wide", "I")], "k int, v string, _op string")
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 1)
    expected.update({3: ("three",), 65539: ("wide",)})
    assert _rows(spark, name) == expected
    assert RowIndex.open(table.format_table).state.key_types == ("int",)
    metrics = _apply(spark, name, [(65539, "wider", "U"), (65540, "new", "I")], "k int, v string, _op string")
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 1)
    expected.update({65539: ("wider",), 65540: ("new",)})
    assert _rows(spark, name) == expected
