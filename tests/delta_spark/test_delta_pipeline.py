"""The change pipeline on Delta tables inside Spark: first build, batches, deletion vectors, schema evolution.

Every table state is checked against the DuckDB CDC oracle and read by delta-spark, delta-rs and polars
(``delta_readers``), time travel to each earlier version included, with the log stats of our files checked against
the files. Files we write must have our writer's layout (page index, small pages), and the row index must agree
with the table after every write.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest

from cdc_oracle import CdcOracle, sorted_rows
from delta_readers import DeltaCheck, assert_readers_agree

from partialcow.exceptions import ChangeFeedError
from partialcow.index import RowIndex
from partialcow.parquet.inspect import describe
from partialcow.parquet.writer import ROWS_PER_PAGE
from partialcow.spark.changes import ChangeSpec, apply_changes, create_pending, create_table
from partialcow.spark.tables import delta_root, open_table

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPEC = ChangeSpec(key_columns=("id",), op_column="_op", sequence_column="_ts", model="delta_feed")
COLUMNS = ("id", "name", "amount", "day", "_ts")  # the sequence column is stored, the op column not
CHANGE_SCHEMA = "id bigint, name string, amount decimal(12,2), day date, _op string, _ts bigint"


def _change(i: int, op: str = "U", ts: int = 1, *, tag: str = "v") -> tuple:
    amount = decimal.Decimal(i) / 4 + sum(map(ord, tag)) - ord("v")  # every tag its own values
    return (i, f"{tag}-{i}", amount, dt.date(2024, 1, 1) + dt.timedelta(days=i % 400), op, ts)


def _arrow(changes: list[tuple]) -> pa.Table:
    names = ("id", "name", "amount", "day", "_op", "_ts")
    return pa.Table.from_pylist([dict(zip(names, c)) for c in changes], schema=pa.schema([
        ("id", pa.int64()), ("name", pa.string()), ("amount", pa.decimal128(12, 2)), ("day", pa.date32()),
        ("_op", pa.string()), ("_ts", pa.int64())]))


def _dicts(rows: list[tuple]) -> list[dict]:
    return [dict(zip(COLUMNS, r)) for r in rows]


def _table_rows(spark, name: str) -> list[tuple]:
    return sorted_rows([tuple(r) for r in spark.table(name).select(*COLUMNS).collect()])


def _log(root: str, version: int) -> list[dict]:
    with open(os.path.join(root, "_delta_log", f"{version:020d}.json"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_session_creates_and_merges(spark, schema) -> None:
    """The embedded Delta session: Delta's catalog and SQL (MERGE) in the metastore, tables read back by name."""
    spark.sql(f"CREATE TABLE {schema}.d (id BIGINT, v STRING) USING delta")
    spark.sql(f"INSERT INTO {schema}.d VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"MERGE INTO {schema}.d t USING (SELECT 2 AS id, 'B' AS v) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET *")
    assert sorted((r.id, r.v) for r in spark.table(f"{schema}.d").collect()) == [(1, "a"), (2, "B")]
    assert spark.sql(f"DESCRIBE DETAIL {schema}.d").first()["format"] == "delta"


@pytest.mark.parametrize("reader", ["delta-rs", "delta-spark"])
def test_create_pending_reads_the_mark(spark, schema, reader, monkeypatch) -> None:
    """The pending mark of a first build that died is found by delta-rs, and by delta-spark where delta-rs fails."""
    import deltalake

    if reader == "delta-spark":
        def unreadable(*args, **kwargs):
            raise deltalake.exceptions.DeltaProtocolError("a reader feature delta-rs lacks")

        monkeypatch.setattr(deltalake, "DeltaTable", unreadable)
    name = f"{schema}.pending_{reader.replace('-', '_')}"
    spark.sql(f"CREATE TABLE {name} (id BIGINT) USING delta TBLPROPERTIES ('partialcow.create-pending' = 'true')")
    assert create_pending(spark, name)
    spark.sql(f"ALTER TABLE {name} UNSET TBLPROPERTIES ('partialcow.create-pending')")
    assert not create_pending(spark, name)
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('partialcow.create-pending' = 'false')")
    assert not create_pending(spark, name)


def test_first_build_and_batches_through_delta_spark(spark, schema) -> None:
    """create_table builds the Delta table through Spark with our layout and its index; batches are committed by
    delta-spark transactions; every version reads the same in all three readers and equals the oracle."""
    name = f"{schema}.feed"
    oracle = CdcOracle(key_columns=("id",), columns=COLUMNS, op_column="_op", sequence_column="_ts")
    first = [_change(i, "I") for i in range(3000)] + [_change(5, "D", 2), _change(7, "U", 3, tag="late"),
                                                       _change(7, "U", 2, tag="early")]
    counts = oracle.apply(_arrow(first))
    metrics = create_table(spark, name, spark.createDataFrame(first, CHANGE_SCHEMA), SPEC, table_format="delta")
    assert metrics.rows_inserted == counts.inserted == 2999
    assert not create_pending(spark, name)
    root = delta_root(spark, name)
    expected = {0: [], 1: _dicts(oracle.rows())}  # CREATE (marked pending), our rows (mark removed)
    assert _table_rows(spark, name) == oracle.rows()

    batches = [
        ([_change(i, "U", 10, tag="b1") for i in (1, 2, 2999)] + [_change(3, "D", 10), _change(9000, "U", 10),
                                                                  _change(9999, "D", 10), _change(9001, "I", 10)],
         None),
        ([_change(i, "U", 20, tag="b2") for i in (1, 10, 2500)] + [_change(9002, "I", 20)], ("amount",)),
    ]
    for number, (changes, update_columns) in enumerate(batches, start=1):
        spec = SPEC if update_columns is None else ChangeSpec(**{**SPEC.__dict__, "update_columns": update_columns})
        counts = oracle.apply(_arrow(changes), update_columns=update_columns)
        metrics = apply_changes(spark, open_table(spark, name, table_format="delta"),
                                spark.createDataFrame(changes, CHANGE_SCHEMA), spec)
        assert (metrics.rows_inserted, metrics.rows_updated, metrics.rows_deleted) == (
            counts.inserted, counts.updated, counts.deleted), (number, metrics)
        assert _table_rows(spark, name) == oracle.rows(), number
        expected[1 + number] = _dicts(oracle.rows())
    assert metrics.pages_copied > 0  # an update of one column copies the other columns' pages

    # our commits: delta-spark transactions labelled as ours, files with our layout
    # (not "Manual Update": delta-spark derives no checksum incrementally for that one and rebuilds the table's state)
    for version, kind, operation in ((1, "WRITE", "partial_cow_create"), (2, "UPDATE", "partial_cow_upsert"),
                                     (3, "UPDATE", "partial_cow_upsert")):
        info = next(a["commitInfo"] for a in _log(root, version) if "commitInfo" in a)
        assert info["operation"] == kind and info["userMetadata"] == operation, info
        assert "partialcow.commitId" in info["tags"], info
    ours = [a["add"]["path"] for v in (1, 2, 3) for a in _log(root, v) if "add" in a]
    assert ours and all(unquote(p).startswith("pcow-") for p in ours)
    for path in ours:
        layout = describe(os.path.join(root, unquote(path)))
        for group in layout["row_groups"]:
            for column in group["columns"]:
                data_pages = [p for p in column["pages"] if p["rows"] is not None]
                assert data_pages and max(p["rows"] for p in data_pages) <= ROWS_PER_PAGE, (path, column["path"])
    index = RowIndex.open(open_table(spark, name, table_format="delta").format_table)
    assert index.verify().ok
    assert index.state.table_version == 3
    assert_readers_agree([DeltaCheck(root, expected=expected)], spark=spark, spark_time_zones=("UTC", "Asia/Tokyo"))


def test_a_full_refresh_is_one_version(spark, schema) -> None:
    """A full refresh replaces schema, properties and files in one delta-spark commit: readers see the old table
    until then, time travel to the version before shows it whole, the pending mark never appears, the replaced
    table's constraint goes with it, and properties that need a newer protocol get it."""
    name = f"{schema}.refreshed"
    first = [_change(i, "I") for i in range(500)]
    create_table(spark, name, spark.createDataFrame(first, CHANGE_SCHEMA), SPEC, table_format="delta")
    spark.sql(f"ALTER TABLE {name} ADD CONSTRAINT small CHECK (id < 1000)")
    before = int(spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()["version"])
    old_rows = _table_rows(spark, name)

    refresh = spark.sql("select id * 10 as id, cast(id as string) as name, 'I' as _op from range(200)")
    spec = ChangeSpec(key_columns=("id",), op_column="_op", model="refreshed",
                      extra_table_properties={"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "3"})
    create_table(spark, name, refresh, spec, table_format="delta")

    root = delta_root(spark, name)
    history = spark.sql(f"DESCRIBE HISTORY {name}").collect()
    assert int(history[0]["version"]) == before + 1, [(r["version"], r["operation"]) for r in history]
    assert history[0]["userMetadata"] == "partial_cow_create"
    assert sorted((r["id"], r["name"]) for r in spark.table(name).collect()) == [(i * 10, str(i)) for i in range(200)]
    assert spark.table(name).columns == ["id", "name"]
    old = spark.read.format("delta").option("versionAsOf", before).load(root).select(*COLUMNS).collect()
    assert sorted_rows([tuple(r) for r in old]) == old_rows
    properties = spark.sql(f"DESCRIBE DETAIL {name}").first()["properties"]
    assert properties.get("delta.checkpointInterval") == "3"
    assert "partialcow.create-pending" not in properties and "delta.constraints.small" not in properties
    protocol = next(a["protocol"] for a in _log(root, before + 1) if "protocol" in a)
    assert "deletionVectors" in protocol.get("writerFeatures", []), protocol
    assert not any("add" in a and not unquote(a["add"]["path"]).startswith("pcow-") for a in _log(root, before + 1))
    assert RowIndex.open(open_table(spark, name, table_format="delta").format_table).verify().ok
    # the new protocol lists deletion vectors: delta-spark alone reads the new version, against the expected rows
    expected = {before: _dicts(old_rows), before + 1: [{"id": i * 10, "name": str(i)} for i in range(200)]}
    assert_readers_agree([DeltaCheck(root, expected=expected)], spark=spark)


def test_a_full_refresh_replaces_a_table_with_column_mapping(spark, schema) -> None:
    """Column mapping, which our incremental commits refuse, goes with the replaced table's metadata: the full
    refresh works and leaves a table without it."""
    name = f"{schema}.mapped"
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING) USING delta TBLPROPERTIES "
              "('delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')")
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a')")
    spec = ChangeSpec(key_columns=("id",), op_column="_op", model="mapped")
    create_table(spark, name, spark.sql("select id, 'x' as v, 'I' as _op from range(5)"), spec, table_format="delta")
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [(i, "x") for i in range(5)]
    properties = spark.sql(f"DESCRIBE DETAIL {name}").first()["properties"]
    assert "delta.columnMapping.mode" not in properties and "partialcow.create-pending" not in properties
    assert RowIndex.open(open_table(spark, name, table_format="delta").format_table).verify().ok


def _rows_by_id(spark, name: str) -> dict[int, tuple]:
    return {r["id"]: (r["name"], r["v"]) for r in spark.table(name).collect()}


def test_deletion_vectors_are_applied_and_materialised(spark, schema) -> None:
    """Rows other writers deleted through deletion vectors stay deleted when we rewrite their file (the new file
    leaves them out, the remove action carries the vector); untouched files keep their vectors; the index follows
    vectors added after it was built."""
    spec = ChangeSpec(key_columns=("id",), op_column="_op", model="dv_feed",
                      extra_table_properties={"delta.enableDeletionVectors": "true"})
    name = f"{schema}.dv"
    make = lambda ids, op="I", tag="v": spark.createDataFrame(  # noqa: E731
        [(i, f"{tag}{i}", i, op) for i in ids], "id bigint, name string, v bigint, _op string")
    # one file for ids 0..2999 (a first build writes a file per task), one for 3000..3999
    create_table(spark, name, make(range(3000)).coalesce(1), spec, table_format="delta")
    apply_changes(spark, open_table(spark, name, table_format="delta"), make(range(3000, 4000)), spec)
    expected = {i: (f"v{i}", i) for i in range(4000)}
    spark.sql(f"DELETE FROM {name} WHERE id % 10 = 3")  # a deletion vector on both files
    for i in [i for i in expected if i % 10 == 3]:
        del expected[i]
    root = delta_root(spark, name)
    delete_version = int(spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()["version"])
    assert "deletionVector" in json.dumps(_log(root, delete_version))

    apply_changes(spark, open_table(spark, name, table_format="delta"),
                  make([1], tag="u").union(make([2], "D")).union(make([5000])), spec)
    expected.update({1: ("u1", 1), 5000: ("v5000", 5000)})
    del expected[2]
    assert _rows_by_id(spark, name) == expected
    actions = _log(root, delete_version + 1)
    removed = [a["remove"] for a in actions if "remove" in a]
    assert len(removed) == 1 and removed[0]["deletionVector"]["cardinality"] == 300  # ids 3, 13, ... of 0..2999
    assert all("deletionVector" not in a["add"] for a in actions if "add" in a)
    vectors = open_table(spark, name, table_format="delta").format_table.deletion_vectors(delete_version + 1)
    assert [v["cardinality"] for v in vectors.values()] == [100]  # the untouched file keeps its vector
    assert RowIndex.open(open_table(spark, name, table_format="delta").format_table).verify().ok

    # another vector on the file we did not touch, then a change of that file: the index re-reads it first
    spark.sql(f"DELETE FROM {name} WHERE id IN (3001, 3002)")
    del expected[3001], expected[3002]
    metrics = apply_changes(spark, open_table(spark, name, table_format="delta"),
                            make([3004], tag="u").union(make([3002], tag="again")), spec)
    expected.update({3004: ("u3004", 3004), 3002: ("again3002", 3002)})
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 1)
    assert _rows_by_id(spark, name) == expected
    assert RowIndex.open(open_table(spark, name, table_format="delta").format_table).verify().ok
    history = {int(r["version"]): r for r in spark.sql(f"DESCRIBE HISTORY {name}").collect()}
    latest = max(history)
    check = DeltaCheck(root, expected={latest: [{"id": k, "name": n, "v": v} for k, (n, v) in expected.items()]})
    assert_readers_agree([check], spark=spark)


def test_on_schema_change_on_delta(spark, schema) -> None:
    """The four on_schema_change values on Delta: new columns through a Delta metadata commit (a row that gets a
    value in a column its file lacks moves to a new file), refusals leave the table as it was."""
    name = f"{schema}.evolve"
    base = ChangeSpec(key_columns=("id",), op_column="_op", model="evolving")
    rows = lambda sql: spark.sql(sql)  # noqa: E731
    create_table(spark, name, rows("select id, concat('n', id) as name, 'I' as _op from range(10)"), base,
                 table_format="delta")
    table = lambda: open_table(spark, name, table_format="delta")  # noqa: E731
    version = lambda: int(spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()["version"])  # noqa: E731
    with_extra = "select 1L as id, 'one' as name, 2.5d as extra, 'U' as _op union all " \
                 "select 20L, 'twenty', 3.5d, 'I'"

    apply_changes(spark, table(), rows(with_extra), base)  # ignore: the column is not added
    assert spark.table(name).columns == ["id", "name"]
    before = (version(), sorted(tuple(r) for r in spark.table(name).collect()))
    with pytest.raises(ChangeFeedError, match="on_schema_change='fail'"):
        apply_changes(spark, table(), rows(with_extra), ChangeSpec(**{**base.__dict__, "on_schema_change": "fail"}))
    assert (version(), sorted(tuple(r) for r in spark.table(name).collect())) == before

    append = ChangeSpec(**{**base.__dict__, "on_schema_change": "append_new_columns"})
    # the ALTER is a version of its own; the batch is located after it, not once before it and again after the
    # commit took the ALTER for another writer's (regression: every such batch was done twice)
    assert apply_changes(spark, table(), rows(with_extra.replace("20L", "21L")), append).commit_retries == 0
    got = {r["id"]: (r["name"], r["extra"]) for r in spark.table(name).collect()}
    assert got[1] == ("one", 2.5) and got[21] == ("twenty", 3.5) and got[2] == ("n2", None)
    # a batch without `name`: row 3 moves to a new file for its `extra` and keeps its name from the old file
    apply_changes(spark, table(), rows("select 3L as id, 4.5d as extra, 'U' as _op"), append)
    assert {r["id"]: (r["name"], r["extra"]) for r in spark.table(name).collect()}[3] == ("n3", 4.5)

    sync = ChangeSpec(**{**base.__dict__, "on_schema_change": "sync_all_columns"})
    metrics = apply_changes(spark, table(), rows("select 2L as id, 'two' as name, 1.0d as extra, 7 as more, "
                                                 "'U' as _op"), sync)
    assert metrics.commit_retries == 0
    assert spark.table(name).columns == ["id", "name", "extra", "more"]
    before = (version(), sorted(tuple(r) for r in spark.table(name).collect()))
    with pytest.raises(ChangeFeedError, match=r"drop column\(s\) \['more'\].*column mapping"):
        apply_changes(spark, table(), rows("select 2L as id, 'two' as name, 1.0d as extra, 'U' as _op"), sync)
    assert (version(), sorted(tuple(r) for r in spark.table(name).collect())) == before
    assert RowIndex.open(table().format_table).verify().ok
    root = delta_root(spark, name)
    assert_readers_agree([DeltaCheck(root, versions=list(range(version() + 1)))], spark=spark)


def test_delta_rs_commits_are_read_by_delta_spark(spark, tmp_path: Path) -> None:
    """A DeltaRsTable (delta-rs) commit read back by delta-spark, Delta's reference implementation: current and
    previous version, history label, and boundary filters that data skipping on our stats must not lose."""
    from test_delta import batch, file_with_id, make_table, rewrite

    from partialcow.table.base import FileReplacement
    from partialcow.table.delta import DeltaRsTable
    from partialcow.metrics import WriteMetrics

    root = make_table(tmp_path / "t")
    committer = DeltaRsTable(str(root))
    old = file_with_id(committer, 2)
    long_name = "changed-" + "x" * 60  # the truncated max must still bound it
    new = rewrite(root, old, {2: long_name})
    result = committer.replace_files(FileReplacement(base_version=1, removed=[old], added=[new],
                                                     metrics=WriteMetrics(rows_updated=1)))
    reader = lambda **o: spark.read.format("delta").options(**o).load(str(root))  # noqa: E731
    before = {i: batch([i])["name"][0].as_py() for i in range(12)}
    assert {r["id"]: r["name"] for r in reader().collect()} == {**before, 2: long_name}
    assert {r["id"]: r["name"] for r in reader(versionAsOf=str(result.previous_version)).collect()} == before
    last = spark.sql(f"DESCRIBE HISTORY delta.`{root}` LIMIT 1").first()
    assert (last["version"], last["userMetadata"]) == (result.version, "partial_cow_upsert")
    import pyarrow.parquet as pq

    data = pq.read_table(root / new)
    ts_max = max(data["ts"].to_pylist()).strftime("%Y-%m-%d %H:%M:%S.%f")
    assert [r["id"] for r in reader().where(f"name = '{long_name}'").collect()] == [2]
    for predicate in (f"ts = TIMESTAMP '{ts_max}'", f"id = {max(data['id'].to_pylist())}",
                      f"amount = {max(data['amount'].to_pylist())}"):
        assert reader().where(predicate).count(), predicate  # the boundary row is found, not skipped
