"""The branch records table (``BranchStore``): what ``put`` writes reads back exactly, through the store and Spark."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import pytest

from partialcow.branch import build_model, create_branch, drop_branch
from partialcow.branch.catalog import list_tables
from partialcow.branch.store import BranchStore
from partialcow.branch.types import BranchRecord
from partialcow.exceptions import BranchError

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]


def _record(name: str, **changes) -> BranchRecord:
    record = BranchRecord(name=name, parent="main", created_at=dt.datetime(2026, 3, 29, 1, 30, 5, 123456),
                          base_snapshots={"shop.orders": 1}, merged_at=None, image_mode="copy-on-write",
                          schemas=("shop",))
    return dataclasses.replace(record, **changes)


def test_put_replaces_a_record_field_by_field_and_only_adds_schemas(spark, monkeypatch):
    meta = f"store_{uuid.uuid4().hex[:8]}"
    store = BranchStore(spark, meta_schema=meta)
    store.insert(_record("dev"))
    store.insert(_record("other", schemas=None))
    # a session time zone other than the process's (the instants must not move with it), and backslashes read
    # literally in SQL text (a profile may set it)
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Pacific/Chatham")
    spark.conf.set("spark.sql.parser.escapedStringLiterals", "true")
    try:
        wanted = _record("dev", parent="qa", merged_at=dt.datetime(2026, 11, 1, 23, 59, 59, 999999),
                         base_snapshots={"shop.orders": 7, "it's.odd\\name": -1, "shop.items": 2**40},
                         image_mode="merge-on-read", schemas=("sales",))
        statements: list[str] = []
        sql = spark.sql
        monkeypatch.setattr(spark, "sql", lambda q, *a, **k: (statements.append(q), sql(q, *a, **k))[1])
        store.put(wanted)
        monkeypatch.setattr(spark, "sql", sql)
        assert [q.split()[0] for q in statements if q.split()[0] in ("UPDATE", "MERGE")] == ["UPDATE"]
        fresh = BranchStore(spark, meta_schema=meta)
        assert fresh.require("dev") == dataclasses.replace(wanted, schemas=("sales", "shop"))
        assert fresh.require("other") == _record("other", schemas=None)  # untouched
        # an empty map and no schemas: the stored schemas stay (they only grow)
        store.put(dataclasses.replace(wanted, base_snapshots={}, schemas=None, merged_at=None))
        assert BranchStore(spark, meta_schema=meta).require("dev") == dataclasses.replace(
            wanted, base_snapshots={}, schemas=("sales", "shop"), merged_at=None)
        # a record that had none takes the new ones
        store.put(_record("other", schemas=("x",)))
        assert BranchStore(spark, meta_schema=meta).require("other").schemas == ("x",)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
        spark.conf.unset("spark.sql.parser.escapedStringLiterals")
    # the instants as Spark reads them in the process's zone: what insert and put store are the same instant
    row = spark.sql(f"SELECT created_at FROM {meta}.partialcow_branches WHERE name = 'dev'").collect()[0]
    assert row.created_at == _record("dev").created_at
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_every_read_sees_the_records_tables_current_snapshot(spark):
    """A process reads each snapshot of the records table once (``BranchStore._read``): whatever moves the table
    to another snapshot (a write that bypasses the store, a rollback, the table dropped and created again) is
    read anew by the next store."""
    meta = f"store_{uuid.uuid4().hex[:8]}"
    table = f"{meta}.partialcow_branches"
    BranchStore(spark, meta_schema=meta).insert(_record("dev"))
    first = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()[0][0]
    assert BranchStore(spark, meta_schema=meta).require("dev").parent == "main"
    spark.sql(f"UPDATE {table} SET parent = 'qa' WHERE name = 'dev'")  # SQL, as another process would write
    assert BranchStore(spark, meta_schema=meta).require("dev").parent == "qa"
    spark.sql(f"CALL spark_catalog.system.rollback_to_snapshot('{table}', {first})")
    assert BranchStore(spark, meta_schema=meta).require("dev").parent == "main"
    spark.sql(f"DROP TABLE {table} PURGE")
    assert BranchStore(spark, meta_schema=meta).get("dev") is None
    BranchStore(spark, meta_schema=meta).insert(_record("dev", parent="other"))
    assert BranchStore(spark, meta_schema=meta).require("dev").parent == "other"
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_put_of_a_record_dropped_meanwhile_leaves_it_dropped(spark):
    meta = f"store_{uuid.uuid4().hex[:8]}"
    store = BranchStore(spark, meta_schema=meta)
    store.insert(_record("dev"))
    record = store.require("dev")
    BranchStore(spark, meta_schema=meta).delete("dev")  # another operation drops the branch
    store.put(dataclasses.replace(record, merged_at=dt.datetime(2026, 11, 2)))
    assert BranchStore(spark, meta_schema=meta).get("dev") is None
    # a record the store never read is inserted
    store.put(_record("new"))
    assert BranchStore(spark, meta_schema=meta).require("new") == _record("new")
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_a_build_that_races_a_drop_fails_and_its_leftovers_block_a_new_branch_until_dropped(spark, monkeypatch):
    meta, sales = (f"{p}_{uuid.uuid4().hex[:8]}" for p in ("store", "sales"))
    spark.sql(f"CREATE SCHEMA {sales}")
    main_rows = [(1, "a"), (2, "b")]
    spark.createDataFrame(main_rows, "k int, v string").writeTo(f"{sales}.items").using("iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta)  # its record covers the meta schema only
    # another operation drops the branch just before the build's first write of the record (the race)
    put = BranchStore.put

    def dropped_first(self, record):
        BranchStore(spark, meta_schema=meta).delete(record.name)
        monkeypatch.setattr(BranchStore, "put", put)
        return put(self, record)

    monkeypatch.setattr(BranchStore, "put", dropped_first)
    changed = spark.createDataFrame([(1, "changed"), (2, "b")], "k int, v string")
    with pytest.raises(BranchError, match=r"branch 'dev' was dropped while a model was being built on it.*branch_drop"):
        build_model(spark, changed, branch="dev", base_schema=sales, identifier="items", key_columns=["k"],
                    meta_schema=meta)
    assert BranchStore(spark, meta_schema=meta).get("dev") is None
    # a new branch of the name would read the build's rows as its own: refused until they are dropped
    models = [(sales, "items")]
    with pytest.raises(BranchError, match=rf"{sales}__br_dev still hold objects of an earlier branch"):
        create_branch(spark, name="dev", meta_schema=meta, models=models)
    assert BranchStore(spark, meta_schema=meta).get("dev") is None
    drop_branch(spark, name="dev", meta_schema=meta, models=models)
    create_branch(spark, name="dev", meta_schema=meta, models=models)
    assert list_tables(spark, f"{sales}__br_dev") == []  # nothing of the earlier branch is left to read
    drop_branch(spark, name="dev", meta_schema=meta, models=models)
    for schema in (meta, sales):
        spark.sql(f"DROP SCHEMA {schema} CASCADE")
