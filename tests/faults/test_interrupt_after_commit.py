"""An interrupt (Ctrl-C in a notebook, SystemExit) that arrives once the table commit has landed keeps the files
the commit points to.

The commit step deleted its new files on any exception, interrupts included, and an interrupt can surface only
after the commit call returned (a Rust or JVM call finishes before Python sees the signal): the table's current
version then referenced deleted files and no reader could read it.
"""

from __future__ import annotations

import os
import uuid

import pytest

from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="interrupted")
SCHEMA = "k bigint, v string, _op string"


def _assert_committed_and_usable(spark, name: str) -> None:
    """The batch (key 5 updated, key 500 inserted) is in the table, and the next batch works on that version."""
    spark.catalog.refreshTable(name)
    rows = dict(spark.sql(f"select k, v from {name}").collect())
    assert len(rows) == 101 and rows[5] == "new" and rows[500] == "x"
    apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                  spark.createDataFrame([(6, "later", "U")], SCHEMA), SPEC)
    spark.catalog.refreshTable(name)
    assert spark.sql(f"select v from {name} where k = 6").first()[0] == "later"


@pytest.fixture
def built(spark):
    """A table of keys 0-99 (v = 'v<k>') in a schema of its own, dropped afterwards; yields its name."""
    schema = f"pcow_after_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    try:
        create_table(spark, name, spark.createDataFrame([(k, f"v{k}", "I") for k in range(100)], SCHEMA), SPEC)
        yield name
    finally:
        spark.sql(f"drop schema {schema} cascade")


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_after_the_commit_keeps_its_files(spark, built, interrupt):
    name = built
    table = open_table(spark, name, table_format="iceberg")
    commit = table.format_table.replace_files

    def commit_then_interrupt(change):
        commit(change)
        raise interrupt()

    table.format_table.replace_files = commit_then_interrupt  # type: ignore[method-assign]
    with pytest.raises(interrupt):
        apply_changes(spark, table, spark.createDataFrame([(5, "new", "U"), (500, "x", "I")], SCHEMA), SPEC)
    _assert_committed_and_usable(spark, name)


@pytest.mark.parametrize("where", ["format", "iceberg read-back"])
def test_an_error_after_the_commit_landed_keeps_its_files(spark, built, monkeypatch, where):
    """Regression: an ordinary error raised once the commit had landed (reading the new snapshot back, refreshing
    Spark's cache, or anything else in the format's commit call) deleted the new files as if nothing had been
    committed: the table's current snapshot named deleted files and every read failed. It is an unknown outcome now:
    the files stay, and the next write finds the commit."""
    from partialcow.exceptions import CommitStateUnknownError
    from partialcow.table import iceberg

    name = built
    table = open_table(spark, name, table_format="iceberg")
    if where == "format":
        commit = table.format_table.replace_files

        def commit_then_fail(change):
            commit(change)
            raise RuntimeError("the format broke after committing")

        table.format_table.replace_files = commit_then_fail  # type: ignore[method-assign]
    else:
        def fail(*args, **kwargs):
            raise RuntimeError("metastore hiccup")

        monkeypatch.setattr(iceberg.IcebergTable, "_find_snapshot", fail)
    with pytest.raises(CommitStateUnknownError):
        apply_changes(spark, table, spark.createDataFrame([(5, "new", "U"), (500, "x", "I")], SCHEMA), SPEC)
    monkeypatch.undo()
    _assert_committed_and_usable(spark, name)


def test_the_files_of_a_lost_commit_go_with_the_next_write(spark, built):
    """Regression: a commit another writer's replaced (``LostCommitError``, a catalog without compare-and-swap) keeps
    its files while a snapshot could name them; the batch was retried and committed, and the lost attempt's files
    stayed in the table folder for good, referenced by nothing. The write's lease now stays for the next write's
    recovery, which removes them."""
    from partialcow.exceptions import LostCommitError
    from tablestate import leftovers

    name = built
    table = open_table(spark, name, table_format="iceberg")
    commit = table.format_table.replace_files
    attempts = []

    def lost_once(change):
        attempts.append(change)
        if len(attempts) == 1:
            raise LostCommitError("replaced by another writer's commit from the same base")
        return commit(change)

    table.format_table.replace_files = lost_once  # type: ignore[method-assign]
    metrics = apply_changes(spark, table, spark.createDataFrame([(5, "new", "U"), (500, "x", "I")], SCHEMA), SPEC)
    assert len(attempts) == 2 and metrics.commit_retries == 1
    assert leftovers(spark, name)  # the lost attempt's files, until the next write
    _assert_committed_and_usable(spark, name)
    assert leftovers(spark, name) == []


def test_a_retry_after_a_lost_commit_that_fails_leaves_the_lost_files_to_recovery(spark, built, monkeypatch):
    """A retry after a lost commit whose rewrite fails removed every file of the write, the lost attempt's included
    (a reader that picked up the lost snapshot could still name them); they are now left to the next write's
    recovery, which removes them once nothing references them."""
    from partialcow.exceptions import LostCommitError
    from partialcow.spark import rewrite_job
    from tablestate import leftovers

    monkeypatch.delenv("PARTIALCOW_DRIVER_MAX_ROWS", raising=False)  # the driver path: rewrites in this process
    name = built
    table = open_table(spark, name, table_format="iceberg")
    rewrite = rewrite_job.rewrite_changed_file
    calls = []

    def fails_the_second_time(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise OSError("disk full")
        return rewrite(*args, **kwargs)

    def lost(change):
        raise LostCommitError("replaced by another writer's commit from the same base")

    monkeypatch.setattr(rewrite_job, "rewrite_changed_file", fails_the_second_time)
    table.format_table.replace_files = lost  # type: ignore[method-assign]
    with pytest.raises(Exception, match="disk full"):
        apply_changes(spark, table, spark.createDataFrame([(5, "new", "U")], SCHEMA), SPEC)
    lost_files = [p for p in leftovers(spark, name) if f"{os.sep}data{os.sep}" in p]
    assert lost_files and all(os.path.exists(p) for p in lost_files)
    monkeypatch.undo()
    apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                  spark.createDataFrame([(6, "later", "U")], SCHEMA), SPEC)
    assert leftovers(spark, name) == []


def test_a_first_build_whose_commit_call_failed_unexpectedly_keeps_its_files(spark, monkeypatch):
    """Regression: an error of another kind than the formats' own (the py4j connection dropped once the catalog had
    taken the commit) deleted the first build's files: the new table named missing files. It is an unknown outcome
    now; the table reads, and the next batch works on it."""
    from py4j.protocol import Py4JNetworkError

    from partialcow.exceptions import CommitStateUnknownError
    from partialcow.spark import bulk

    commit = bulk._IcebergTarget.commit

    def commit_then_lose_the_connection(self, paths, metrics):
        commit(self, paths, metrics)
        raise Py4JNetworkError("Answer from Java side is empty")

    monkeypatch.setattr(bulk._IcebergTarget, "commit", commit_then_lose_the_connection)
    schema = f"pcow_first_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    try:
        rows = [(k, f"v{k}", "I") for k in range(100)]
        with pytest.raises(CommitStateUnknownError, match="may or may not have landed"):
            create_table(spark, name, spark.createDataFrame(rows, SCHEMA), SPEC)
        monkeypatch.undo()
        spark.catalog.refreshTable(name)
        assert spark.sql(f"select count(*) from {name}").first()[0] == 100
        apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                      spark.createDataFrame([(5, "new", "U"), (500, "x", "I")], SCHEMA), SPEC)
        spark.catalog.refreshTable(name)
        rows_now = dict(spark.sql(f"select k, v from {name}").collect())
        assert len(rows_now) == 101 and rows_now[5] == "new" and rows_now[500] == "x"
    finally:
        spark.sql(f"drop schema {schema} cascade")
