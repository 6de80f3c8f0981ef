"""A first build whose commit outcome is unknown keeps its files.

``CommitStateUnknownError`` means the commit may have landed: the files it names may be the table's now. The
regression: the first build's clean-up deleted every file it had written on any error, so a commit that landed but
reported an unknown state left a table whose files were gone (unreadable at its current snapshot).
"""

from __future__ import annotations

import uuid

import pytest

from partialcow.table.iceberg_create import NewIcebergTable
from partialcow.exceptions import CommitStateUnknownError
from partialcow.spark.changes import ChangeSpec, create_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]


def test_an_unknown_commit_outcome_keeps_the_files(spark, monkeypatch):
    schema = f"pcow_unknown_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    landed = NewIcebergTable.commit

    def lands_then_reports_unknown(self, paths, metrics):  # type: ignore[no-untyped-def]
        landed(self, paths, metrics)
        raise CommitStateUnknownError("the catalog did not answer after the commit")

    monkeypatch.setattr(NewIcebergTable, "commit", lands_then_reports_unknown)
    rows = spark.createDataFrame([(k, k * 10, "I") for k in range(500)], "k bigint, v bigint, _op string")
    try:
        with pytest.raises(CommitStateUnknownError):
            create_table(spark, name, rows, ChangeSpec(key_columns=("k",), op_column="_op", model="unknown"))
        spark.catalog.refreshTable(name)
        assert sorted(tuple(r) for r in spark.table(name).collect()) == [(k, k * 10) for k in range(500)]
    finally:
        spark.sql(f"drop schema {schema} cascade")
