"""New rows of a small batch go into a data file the batch rewrites anyway, not into a new file per batch.

A batch applied on the driver appends its inserts to the smallest file it rewrites (``small_batch.append_target``),
so the table's file count stays put from batch to batch. The appended rows must be found again through the row
index at their new positions: a later batch updates and deletes them, and the table must hold exactly what the
changes say, read by Spark and by pyiceberg, with the index equal to a fresh scan. Through Spark's jobs (large
batches) the inserts still get files of their own.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from independent_read import iceberg_rows
from partialcow.index import RowIndex
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table
from partialcow.table.iceberg import IcebergTable

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

SPEC = ChangeSpec(key_columns=("id",), op_column="_op", model="appends")
SCHEMA = "id bigint, v int, s string, _op string"

# (id, v, s, op) per batch: updates and inserts, then changes of the rows the first batch appended
BATCHES = [
    [(5, -5, "five", "U"), (2500, -1, "x", "U"), (9001, 1, "new-1", "I"), (9002, 2, None, "I"), (9003, 3, "new-3", "I")],
    [(9001, 10, "new-1b", "U"), (9002, None, None, "D"), (7, -7, "seven", "U"), (9004, 4, "new-4", "I")],
    [(9003, 30, "new-3c", "U"), (9004, None, None, "D"), (9005, 5, "new-5", "I")],
]


def _live_files(spark, name: str) -> set[str]:
    return {r[0] for r in spark.sql(f"select file_path from {name}.files").collect()}


def test_inserts_go_into_a_rewritten_file(spark, pipeline_path) -> None:
    _apply_batches(spark, pipeline_path)


def test_grown_file_reindexed_by_reading(spark, monkeypatch) -> None:
    """When the index cannot merge the appended entries on the driver (a remote index, or one growing past its
    layout), it indexes the grown file again by reading it."""
    from partialcow.spark.small_batch import DRIVER_ROWS_ENV

    monkeypatch.delenv(DRIVER_ROWS_ENV, raising=False)
    monkeypatch.setattr(RowIndex, "_apply_local", lambda self, *args: None)
    _apply_batches(spark, "driver")


def _apply_batches(spark, pipeline_path: str) -> None:
    schema = f"pcow_app_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    try:
        create_table(spark, name, spark.createDataFrame([(i, i, f"s{i}", "I") for i in range(3000)], SCHEMA), SPEC)
        expected = {i: (i, f"s{i}") for i in range(3000)}
        table_dir = Path(spark.sql(f"describe table extended {name}").where("col_name = 'Location'")
                         .collect()[0]["data_type"].removeprefix("file:"))
        for batch in BATCHES:
            before = _live_files(spark, name)
            metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                                    spark.createDataFrame(batch, SCHEMA), SPEC)
            for key, v, s, op in batch:
                if op == "D":
                    del expected[key]
                else:
                    expected[key] = (v, s)
            inserts = sum(op == "I" for *_, op in batch)
            assert metrics.rows_inserted == inserts
            after = _live_files(spark, name)
            if pipeline_path == "driver":  # the inserts rode along in a rewritten file
                assert metrics.files_added == metrics.files_rewritten
                assert len(after) == len(before)
            else:
                assert metrics.files_added == metrics.files_rewritten + 1
                assert len(after) == len(before) + 1
            rows = sorted((r["id"], r["v"], r["s"]) for r in spark.table(name).collect())
            assert rows == sorted((k, *value) for k, value in expected.items())
            assert iceberg_rows(table_dir, ("id", "v", "s")) == rows
            assert RowIndex.open(IcebergTable(spark, name)).verify().ok
    finally:
        spark.sql(f"drop schema {schema} cascade")
