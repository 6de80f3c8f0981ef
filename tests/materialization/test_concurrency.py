"""Two ``apply_changes`` on one Iceberg table from the same snapshot, interleaved deterministically.

Writer A stages, locates and rewrites; just before A commits, writer B runs a whole ``apply_changes``. Same key:
A must fail with ``CommitConflictError``, B's change stays, A's files are gone and a retry of A applies on top.
Different files: both commits land. Each time the table's rows are checked against the expected dict and the row
index against the table (``RowIndex.verify``).
"""

from __future__ import annotations

import os
import uuid

import pytest

from interleave import CommitsAfter
from partialcow.exceptions import CommitConflictError
from partialcow.index import RowIndex
from partialcow.table.iceberg import IcebergTable
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import local_path, open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("id",), op_column="_op", model="concurrent")
SCHEMA = "id bigint, v int, _op string"



@pytest.fixture()
def table(spark):
    """Two data files with disjoint keys: 0..99 (v = id) and 1000..1099 (v = id)."""
    schema = f"pcow_conc_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    # one partition: the first build writes one file per partition of its batch
    create_table(spark, name, spark.createDataFrame([(i, i, "I") for i in range(100)], SCHEMA).coalesce(1), SPEC)
    apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                  spark.createDataFrame([(i, i, "I") for i in range(1000, 1100)], SCHEMA), SPEC)
    assert spark.sql(f"select * from {name}.files").count() == 2
    yield name
    spark.sql(f"drop schema {schema} cascade")


def _rows(spark, name: str) -> dict[int, int]:
    return {r["id"]: r["v"] for r in spark.table(name).collect()}


def _check_consistent(spark, name: str, expected: dict[int, int]) -> None:
    assert _rows(spark, name) == expected
    report = RowIndex.open(IcebergTable(spark, name)).verify()
    assert report.ok, report
    # every data file in the table folder is referenced by some snapshot: the failed writer left nothing behind
    referenced = {local_path(r[0]) for r in spark.sql(f"select file_path from {name}.all_data_files").collect()}
    data_dir = os.path.join(local_path(IcebergTable(spark, name).location), "data")
    on_disk = {os.path.join(data_dir, f) for f in os.listdir(data_dir) if f.endswith(".parquet")}
    assert on_disk <= referenced, sorted(on_disk - referenced)


def _interleaved(spark, name: str, a_rows, b_rows):
    b = lambda: apply_changes(spark, open_table(spark, name, table_format="iceberg"),  # noqa: E731
                              spark.createDataFrame(b_rows, SCHEMA), SPEC)
    writer_a = open_table(spark, name, table_format="iceberg")
    writer_a.format_table = CommitsAfter(writer_a.format_table, b)
    return lambda: apply_changes(spark, writer_a, spark.createDataFrame(a_rows, SCHEMA), SPEC)


def test_same_key_conflicts_and_nothing_is_lost(spark, table):
    expected = {i: i for i in [*range(100), *range(1000, 1100)]}
    run_a = _interleaved(spark, table, a_rows=[(5, 500, "U")], b_rows=[(5, 555, "U"), (6, 666, "U")])
    with pytest.raises(CommitConflictError) as info:
        run_a()
    assert table in str(info.value)
    expected.update({5: 555, 6: 666})  # B's change, whole
    _check_consistent(spark, table, expected)

    # the retry of A starts from B's snapshot and wins
    apply_changes(spark, open_table(spark, table, table_format="iceberg"),
                  spark.createDataFrame([(5, 500, "U")], SCHEMA), SPEC)
    expected[5] = 500
    _check_consistent(spark, table, expected)


def test_different_files_both_commit(spark, table):
    expected = {i: i for i in [*range(100), *range(1000, 1100)]}
    run_a = _interleaved(spark, table, a_rows=[(5, 500, "U"), (7, 0, "D")], b_rows=[(1005, 1500, "U")])
    metrics = run_a()
    assert metrics.rows_updated == 1 and metrics.rows_deleted == 1
    expected.update({5: 500, 1005: 1500})
    del expected[7]
    _check_consistent(spark, table, expected)

    # the index followed both commits: a next batch touching both files finds every key
    metrics = apply_changes(spark, open_table(spark, table, table_format="iceberg"),
                            spark.createDataFrame([(5, 5, "U"), (1005, 5, "U"), (7, 7, "I")], SCHEMA), SPEC)
    assert (metrics.rows_updated, metrics.rows_inserted) == (2, 1)
    expected.update({5: 5, 1005: 5, 7: 7})
    _check_consistent(spark, table, expected)
