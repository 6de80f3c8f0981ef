"""A batch that changes nothing commits nothing: no snapshot, no data file, the same index (issue 25)."""

from __future__ import annotations

import os
import uuid

import pytest

from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table
from tablestate import location

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="same_again")
SCHEMA = "k bigint, v string, d double, _op string"
ROWS = [(k, f"v{k}", k / 3, "I") for k in range(3000)]


def _files(root: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names)


def test_identical_rows_commit_nothing(spark):
    schema = f"pcow_noop_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    try:
        create_table(spark, name, spark.createDataFrame(ROWS, SCHEMA), SPEC)
        snapshots = spark.sql(f"select count(*) from {name}.snapshots").first()[0]
        files = _files(location(spark, name))
        # every row again, as full row images with the same values (updates and a delete of a missing key)
        again = [(k, v, d, "U") for k, v, d, _ in ROWS[::7]] + [(99999, None, None, "D")]
        metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                                spark.createDataFrame(again, SCHEMA), SPEC)
        assert (metrics.rows_updated, metrics.rows_inserted, metrics.rows_deleted) == (0, 0, 0)
        assert (metrics.files_added, metrics.files_removed) == (0, 0)
        assert spark.sql(f"select count(*) from {name}.snapshots").first()[0] == snapshots
        assert _files(location(spark, name)) == files
    finally:
        spark.sql(f"drop schema {schema} cascade")


def test_a_batch_that_only_drops_a_column_says_so(spark, fresh_schema):
    """``sync_all_columns`` with the same rows but a column fewer: the column is dropped (a commit of its own) and
    the run's message said "nothing changed, nothing committed"; it says which columns changed and that no row did."""
    from partialcow.dbt_adapter.materialization import PartialCowResponse

    name = f"{fresh_schema}.t"
    create_table(spark, name, spark.createDataFrame(ROWS[:100], SCHEMA), SPEC)
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="same_again", on_schema_change="sync_all_columns")
    again = spark.createDataFrame([(k, v, "U") for k, v, _, _ in ROWS[:10]], "k bigint, v string, _op string")
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"), again, spec)
    assert spark.table(name).columns == ["k", "v"]
    assert (metrics.rows_updated, metrics.columns_added, metrics.columns_dropped) == (0, 0, 1)
    assert str(PartialCowResponse.from_metrics(metrics, created=False)).endswith(
        "; columns 0 added, 1 dropped; no row changed")
