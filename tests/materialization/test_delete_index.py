"""Deletes through ``apply_changes``: the row index shifts its entries (no re-read of the rewritten files) and
stays equal to a fresh scan of the table."""

from __future__ import annotations

import uuid

import pytest

from partialcow.index import RowIndex
from partialcow.table.iceberg import IcebergTable
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

SPEC = ChangeSpec(key_columns=("id",), op_column="_op", model="deletes")
SCHEMA = "id bigint, v int, _op string"


def test_deletes_and_updates_shift_the_index(spark, monkeypatch) -> None:
    schema = f"pcow_del_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    try:
        create_table(spark, name, spark.createDataFrame([(i, i, "I") for i in range(3000)], SCHEMA), SPEC)
        expected = {i: i for i in range(3000)}

        def rewrite_only(*args, **kwargs):  # the generic path re-reads added files: it must not run here
            raise AssertionError("the index re-indexed files instead of shifting their entries")

        monkeypatch.setattr(RowIndex, "_update", rewrite_only)
        batch = [(i, None, "D") for i in (0, 1, 17, 1500, 2999)] + [(i, -i, "U") for i in (2, 1501, 2998)]
        metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                                spark.createDataFrame(batch, SCHEMA), SPEC)
        monkeypatch.undo()
        for key, value, op in batch:
            if op == "D":
                del expected[key]
            else:
                expected[key] = value
        assert (metrics.rows_deleted, metrics.rows_updated, metrics.rows_inserted) == (5, 3, 0)
        assert {r["id"]: r["v"] for r in spark.table(name).collect()} == expected
        index = RowIndex.open(IcebergTable(spark, name))
        assert index.verify().ok
        found = {r["id"]: (r["file"], r["pos"]) for r in index.lookup(
            spark.createDataFrame([(k,) for k in (3, 1502, 2997)], "id bigint")).found.collect()}
        assert sorted(found) == [3, 1502, 2997]
        # rows 0, 1 and 17 are gone before id 3 at position 3: it moved to position 1
        rows = {r["id"]: r["pos"] for r in spark.sql(f"select id, _pos as pos from {name} where id in (3, 1502, 2997)").collect()}
        assert {k: pos for k, (_, pos) in found.items()} == rows
        # a later batch with inserts takes the generic path on the shifted state
        metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                                spark.createDataFrame([(5000, 5, "I"), (3, None, "D")], SCHEMA), SPEC)
        assert (metrics.rows_inserted, metrics.rows_deleted) == (1, 1)
        assert RowIndex.open(IcebergTable(spark, name)).verify().ok
    finally:
        spark.sql(f"drop schema {schema} cascade")
