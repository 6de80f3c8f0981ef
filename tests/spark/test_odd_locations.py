"""Upserts of an Iceberg table whose data files lie under folder names that are not valid URI paths.

Iceberg names partition folders with URL-escaped values (``ts=2024-01-01T10%3A00%3A00%2B00%3A00``,
``city=S%C3%A3o+Paulo``, ``city=a%2Fb``) and writes file locations unescaped, so those ``%`` are on disk as they
stand; the table here also lives under a folder with a space, an accent and a ``#``. Regression: the write path
decoded locations as URIs and cut them at ``#``, so the rewrite opened files that do not exist, the row index went
to a folder outside the table, and crash recovery compared decoded paths with the real ones (it could have taken a
committed file for a dead write's unreferenced one and deleted it).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid

import pytest

from partialcow.spark.changes import ChangeSpec, apply_changes
from partialcow.spark.create import sql_string
from partialcow.spark.journal import JOURNAL_DIR
from partialcow.spark.tables import local_path, open_table
from tablestate import leftovers

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="odd_location")
COLUMNS = "k bigint, v string, ts timestamp, city string"
TEN = dt.datetime(2024, 1, 1, 10, 0)
NEXT_DAY = dt.datetime(2024, 1, 2, 10, 0)
ROWS = {1: ("one", TEN, "São Paulo"), 2: ("two", TEN, "São Paulo"), 3: ("three", TEN, "a/b"),
        4: ("four", TEN, "a/b"), 5: ("five", NEXT_DAY, "x y")}
WAREHOUSE = "John Doe #1 é"


@pytest.fixture
def odd_table(spark, tmp_path):
    """(name, root) of a table partitioned by a timestamp and a string, under a folder named ``WAREHOUSE``."""
    schema = f"pcow_odd_{uuid.uuid4().hex[:8]}"
    root = tmp_path / WAREHOUSE / "events"
    name = f"{schema}.events"
    spark.sql(f"CREATE SCHEMA {schema}")
    try:
        spark.sql(f"CREATE TABLE {name} ({COLUMNS}) USING iceberg PARTITIONED BY (ts, city) "
                  f"LOCATION {sql_string(str(root))}")
        spark.createDataFrame([(k, *row) for k, row in ROWS.items()], COLUMNS).writeTo(name).append()
        yield name, root
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
        spark.sql(f"DROP SCHEMA {schema} CASCADE")


def _upsert(spark, name: str, changes: list[tuple]):
    return apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                         spark.createDataFrame(changes, f"{COLUMNS}, _op string"), SPEC)


def _rows(spark, name: str) -> dict[int, tuple]:
    return {r.k: (r.v, r.ts, r.city) for r in spark.table(name).collect()}


def _live_files(spark, name: str) -> list[str]:
    return [r[0] for r in spark.sql(f"SELECT file_path FROM {name}.files").collect()]


def _dead_lease(root, write_id: str) -> None:
    """Make write ``write_id`` look killed after its commit: its lease left behind, its lock free."""
    journal = root / "_partialcow_index" / JOURNAL_DIR
    journal.mkdir(parents=True, exist_ok=True)
    (journal / f"{write_id}.json").write_text(json.dumps({"write_id": write_id, "pid": 0}))
    (journal / f"{write_id}.lock").touch()


def test_upserts_in_escaped_partition_folders_under_an_odd_warehouse(spark, odd_table, tmp_path):
    name, root = odd_table
    expected = dict(ROWS)
    assert any("%3A" in path and "%C3%A3o+Paulo" in path and "#" in path for path in _live_files(spark, name))

    metrics = _upsert(spark, name, [(1, "one-b", TEN, "São Paulo", "U"), (2, None, TEN, "São Paulo", "D")])
    expected[1] = ("one-b", TEN, "São Paulo")
    del expected[2]
    assert (metrics.rows_updated, metrics.rows_deleted, metrics.rows_inserted) == (1, 1, 0)
    assert _rows(spark, name) == expected
    ours = [p for p in _live_files(spark, name) if os.path.basename(p).startswith("pcow-")]
    assert ours and all(os.path.basename(os.path.dirname(p)) == "city=S%C3%A3o+Paulo" for p in ours)

    # the write "died" after its commit: the next write's recovery must see its files as the table's and keep them
    write_id = os.path.basename(ours[0])[len("pcow-"):][:32]
    _dead_lease(root, write_id)
    metrics = _upsert(spark, name, [(3, "three-b", TEN, "a/b", "U")])
    expected[3] = ("three-b", TEN, "a/b")
    assert metrics.rows_updated == 1
    assert all(os.path.exists(local_path(p)) for p in ours)
    assert _rows(spark, name) == expected
    assert {os.path.basename(os.path.dirname(p)) for p in _live_files(spark, name)} == {
        "city=S%C3%A3o+Paulo", "city=a%2Fb", "city=x+y"}

    assert leftovers(spark, name) == []  # the dead lease went too
    assert os.listdir(tmp_path) == [WAREHOUSE]  # nothing (a row index) in a folder the path was cut or decoded to
