"""A first build whose commit outcome is unknown keeps its files (and one beside another write leaves that write alone).

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


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_after_the_first_commit_keeps_the_files(spark, monkeypatch, interrupt):
    """Regression: the first build removed its files on any exception, interrupts included, as the commit step of
    a batch once did (tests/faults/test_interrupt_after_commit.py): a Ctrl-C that surfaced once the commit had
    landed left a table whose files were gone. The next build of the table works on what was committed."""
    schema = f"pcow_intr_first_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    landed = NewIcebergTable.commit

    def lands_then_interrupted(self, paths, metrics):  # type: ignore[no-untyped-def]
        landed(self, paths, metrics)
        raise interrupt()

    monkeypatch.setattr(NewIcebergTable, "commit", lands_then_interrupted)
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="interrupted")
    rows = spark.createDataFrame([(k, k * 10, "I") for k in range(500)], "k bigint, v bigint, _op string")
    try:
        with pytest.raises(interrupt):
            create_table(spark, name, rows, spec)
        spark.catalog.refreshTable(name)
        assert sorted(tuple(r) for r in spark.table(name).collect()) == [(k, k * 10) for k in range(500)]
        monkeypatch.undo()
        create_table(spark, name, rows.where("k < 10"), spec)  # a full refresh after it: the lease's clean-up
        spark.catalog.refreshTable(name)
        assert spark.table(name).count() == 10
    finally:
        spark.sql(f"drop schema {schema} cascade")


def test_an_error_after_the_catalog_committed_is_an_unknown_outcome(spark, monkeypatch):
    """Regression: an error in the steps after Iceberg's ``commitTransaction`` returned (reloading the table to
    find our snapshot) came out as an ordinary error, and the first build deleted the files the table now held."""
    import partialcow.table.iceberg_create as iceberg_create

    schema = f"pcow_after_first_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"

    def metastore_hiccup(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("the metastore did not answer")

    monkeypatch.setattr(iceberg_create, "load_iceberg_table", metastore_hiccup)
    rows = spark.createDataFrame([(k, k * 10, "I") for k in range(500)], "k bigint, v bigint, _op string")
    try:
        with pytest.raises(CommitStateUnknownError, match="metastore did not answer"):
            create_table(spark, name, rows, ChangeSpec(key_columns=("k",), op_column="_op", model="after"))
        spark.catalog.refreshTable(name)
        assert spark.table(name).count() == 500
    finally:
        spark.sql(f"drop schema {schema} cascade")


def test_a_full_refresh_leaves_another_writes_scratch_alone(spark):
    """Regression: a first build or full refresh cleaned the index folder as if no other write ran, and deleted a
    running write's scratch folder (the lease's own clean-up checks for other writes first)."""
    import os

    from partialcow.spark.journal import WriteLease
    from partialcow.spark.tables import local_path, open_table

    schema = f"pcow_beside_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="beside")
    rows = spark.createDataFrame([(k, k * 10, "I") for k in range(50)], "k bigint, v bigint, _op string")
    try:
        create_table(spark, name, rows, spec)
        root = local_path(open_table(spark, name, table_format="iceberg").format_table.location)
        with WriteLease(root, [os.path.join(root, "data")], referenced=set) as other:
            scratch = other.scratch_dir()
            open(os.path.join(scratch, "entries.parquet"), "w").close()
            create_table(spark, name, rows.where("k < 10"), spec)
            assert os.path.exists(os.path.join(scratch, "entries.parquet"))
        spark.catalog.refreshTable(name)
        assert spark.table(name).count() == 10
    finally:
        spark.sql(f"drop schema {schema} cascade")
