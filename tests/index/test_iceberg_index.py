"""Row index over Iceberg tables in the embedded catalog; Spark SQL writes as the "other" writer, pyarrow checks."""

from __future__ import annotations

import datetime as dt
import os
import random
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from index_oracle import keys_of, row_at

from partialcow.exceptions import DuplicateKeyError
from partialcow.index import INDEX_DIR, RowIndex
from partialcow.table.iceberg import IcebergTable
from partialcow.table.paths import local_path

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

KEYS = ["id", "code"]  # bigint + string


@pytest.fixture()
def table(spark):
    """An Iceberg v2 table with merge-on-read deletes/updates, 3 files of 700 rows."""
    name = f"default.idx_{uuid.uuid4().hex[:8]}"
    spark.sql(
        f"CREATE TABLE {name} (id bigint, code string, amount double) USING iceberg TBLPROPERTIES ("
        "'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
        "'write.merge.mode'='merge-on-read')"
    )
    for f in range(3):
        spark.range(f * 700, (f + 1) * 700).selectExpr("id", "concat('c', cast(id % 11 as string)) AS code", "1.0D AS amount") \
            .coalesce(1).writeTo(name).append()
    yield name
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def _data_files(spark, name: str) -> set[str]:
    return {r[0] for r in spark.sql(f"SELECT file_path FROM {name}.files WHERE content = 0").collect()}


def _file_of(spark, name: str, key_id: int) -> str:
    return spark.sql(f"SELECT _file FROM {name} WHERE id = {key_id}").first()[0]


def _lookup(spark, index: RowIndex, keys: list[tuple]) -> tuple[dict, set]:
    results = []
    for broadcast_keys in (False, True):  # the shuffle join and the broadcast probe must find the same rows
        result = index.lookup(spark.createDataFrame(keys, "id bigint, code string"), broadcast_keys=broadcast_keys)
        found = {(r["id"], r["code"]): (r["file"], r["pos"]) for r in result.found.collect()}
        results.append((found, {(r["id"], r["code"]) for r in result.missing.collect()}))
    assert results[0] == results[1]
    return results[0]


def _key(i: int) -> tuple:
    return (i, f"c{i % 11}")


def test_build_lookup_and_position_deletes(spark, table) -> None:
    source = IcebergTable(spark, table)
    index = RowIndex.create(source, key_columns=KEYS, num_buckets=4)
    assert index.last_metrics.rows_total == 2100
    oracle = keys_of(_data_files(spark, table), KEYS)
    present = random.Random(3).sample(sorted(oracle), 40)
    found, missing = _lookup(spark, index, present + [(5, "c6"), (99_999, "c0")])
    assert set(found) == set(present) and missing == {(5, "c6"), (99_999, "c0")}
    for key, (path, pos) in found.items():
        assert row_at(path, pos, KEYS) == key

    # a merge-on-read DELETE keeps the data file and adds a delete file: only that data file is re-indexed
    hit = _file_of(spark, table, 800)
    spark.sql(f"DELETE FROM {table} WHERE id = 800")
    metrics = index.ensure_fresh()
    assert metrics.files_reindexed == [hit] and metrics.files_dropped == [hit]
    assert index.state.by_path()[hit].deletes is not None
    found, missing = _lookup(spark, index, [_key(800), _key(801)])
    assert missing == {_key(800)} and row_at(*found[_key(801)], KEYS) == _key(801)  # _pos keeps the physical row
    assert index.verify().ok


def test_merge_and_compaction_by_other_writers(spark, table) -> None:
    index = RowIndex.create(IcebergTable(spark, table), key_columns=KEYS, num_buckets=3)
    before = _data_files(spark, table)
    touched = {_file_of(spark, table, 5), _file_of(spark, table, 1500)}
    spark.createDataFrame([_key(5) + (9.0,), _key(1500) + (9.0,), (5000, "new", 1.0)], "id bigint, code string, amount double") \
        .createOrReplaceTempView("changes")
    spark.sql(
        f"MERGE INTO {table} t USING changes s ON t.id = s.id AND t.code = s.code "
        "WHEN MATCHED THEN UPDATE SET t.amount = s.amount WHEN NOT MATCHED THEN INSERT *"
    )
    added = _data_files(spark, table) - before
    metrics = index.ensure_fresh()
    # merge-on-read: new rows land in new files, the old rows of 5 and 1500 get position deletes in their files
    assert set(metrics.files_reindexed) == added | touched
    assert set(metrics.files_dropped) == touched
    found, _ = _lookup(spark, index, [_key(5), (5000, "new")])
    assert found[_key(5)][0] in added and row_at(*found[(5000, "new")], KEYS) == (5000, "new")
    assert index.verify().ok

    before = _data_files(spark, table)
    spark.sql(f"CALL spark_catalog.system.rewrite_data_files(table => '{table}', options => map('rewrite-all', 'true'))")
    after = _data_files(spark, table)
    metrics = index.ensure_fresh()
    assert set(metrics.files_reindexed) == after - before and set(metrics.files_dropped) == before - after
    assert metrics.rows_total == 2101
    report = index.verify()
    assert report.ok, report


def test_insert_overwrite_and_duplicates(spark, table) -> None:
    index = RowIndex.create(IcebergTable(spark, table), key_columns=KEYS, num_buckets=2)
    spark.sql(f"INSERT INTO {table} VALUES (7, 'c7', 2.0)")  # a second row with key (7, 'c7')
    with pytest.raises(DuplicateKeyError, match=table):
        index.ensure_fresh()
    assert index.state.table_version != IcebergTable(spark, table).current_version()  # nothing was published
    spark.sql(f"INSERT OVERWRITE {table} SELECT * FROM {table} WHERE NOT (id = 7 AND amount = 2.0)")
    metrics = index.ensure_fresh()
    assert metrics.rows_total == 2100 and index.verify().ok


def test_index_folder_survives_remove_orphan_files(spark, table) -> None:
    index = RowIndex.create(IcebergTable(spark, table), key_columns=KEYS, num_buckets=2)
    root = local_path(index.source.location)
    control = os.path.join(root, "data", "orphan-control.parquet")  # a file no metadata lists
    pq.write_table(pq.read_table(local_path(next(iter(_data_files(spark, table))))), control)
    week_ago = time.time() - 7 * 86400
    for folder, _, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(folder, name), (week_ago, week_ago))
    cutoff = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=2)).strftime("%Y-%m-%d %H:%M:%S")
    listed = [r[0] for r in spark.sql(
        f"CALL spark_catalog.system.remove_orphan_files(table => '{table}', older_than => TIMESTAMP '{cutoff}', dry_run => true)"
    ).collect()]
    assert any(p.endswith("orphan-control.parquet") for p in listed)  # the procedure does see unlisted files
    assert not [p for p in listed if INDEX_DIR in p]
    assert index.verify().ok


def test_apply_commit_with_the_iceberg_committer(spark, table) -> None:
    import pyarrow as pa

    from partialcow.table.base import FileReplacement
    from partialcow.table.iceberg import IcebergTable

    committer = IcebergTable(spark, table)
    index = RowIndex.create(IcebergTable(spark, table), key_columns=KEYS, num_buckets=2)
    data_dir = os.path.join(local_path(index.source.location), "data")

    # update of a non-key column, rows kept in place: the entries are re-pointed, no bucket rewritten
    old = committer.live_files()[0].path
    source = pq.read_table(local_path(old))  # keeps the PARQUET:field_id metadata Iceberg reads by
    patched = source.set_column(2, source.schema.field(2), pa.array([7.0] * source.num_rows))
    new = os.path.join(data_dir, f"pcow-{uuid.uuid4().hex}.parquet")
    pq.write_table(patched, new)
    result = committer.replace_files(FileReplacement(base_version=committer.current_version(), removed=[old], added=[new]))
    metrics = index.apply_commit(result, same_positions={old: result.added[0]})
    assert metrics.buckets_rewritten == 0 and metrics.files_repointed == [result.added[0]]
    assert index.verify().ok

    # a delete inside a file shifts positions: that file is re-indexed, others untouched
    old = result.added[0]
    gone = keys_of([old], KEYS)
    first_keys = sorted(gone, key=lambda k: gone[k][1])[:3]
    new = os.path.join(data_dir, f"pcow-{uuid.uuid4().hex}.parquet")
    pq.write_table(patched.slice(3), new)
    result = committer.replace_files(FileReplacement(base_version=committer.current_version(), removed=[old], added=[new]))
    metrics = index.apply_commit(result)
    assert metrics.files_reindexed == list(result.added) and metrics.files_dropped == [old]
    found, missing = _lookup(spark, index, first_keys + [sorted(gone, key=lambda k: gone[k][1])[3]])
    assert missing == set(first_keys) and list(found.values())[0][1] == 0  # the 4th row moved to position 0
    assert index.ensure_fresh().files_reindexed == []
    assert index.verify().ok


@pytest.mark.parametrize("removed", [[0, 1, 2], [5, 300, 301, 699]], ids=["first_rows", "scattered"])
def test_apply_commit_shifts_entries_of_files_that_lost_rows(spark, table, removed) -> None:
    """A commit that only removed rows from files (partial copy-on-write deletes): the entries are shifted in the
    bucket files, no data file is re-read, and lookups see the new positions."""
    from partialcow.table.base import FileReplacement
    from partialcow.table.iceberg import IcebergTable

    committer = IcebergTable(spark, table)
    index = RowIndex.create(IcebergTable(spark, table), key_columns=KEYS, num_buckets=3)
    data_dir = os.path.join(local_path(index.source.location), "data")
    old = committer.live_files()[1].path
    source = pq.read_table(local_path(old))
    by_pos = sorted(keys_of([old], KEYS).items(), key=lambda item: item[1][1])  # (key, (file, pos)) in file order
    kept = [i for i in range(source.num_rows) if i not in set(removed)]
    new = os.path.join(data_dir, f"pcow-{uuid.uuid4().hex}.parquet")
    pq.write_table(source.take(kept), new)
    others = {f.path for f in committer.live_files()} - {old}
    result = committer.replace_files(FileReplacement(base_version=committer.current_version(), removed=[old], added=[new]))
    buckets_before = dict(enumerate(index.state.buckets))
    metrics = index.apply_commit(result, shifted={old: (result.added[0], removed)})

    assert metrics.files_reindexed == [] and metrics.rows_indexed == 0
    assert metrics.files_dropped == [old] and metrics.files_repointed == [result.added[0]]
    assert metrics.rows_total == 2100 - len(removed)
    assert 0 < metrics.buckets_rewritten <= 3
    assert sum(1 for b, name in enumerate(index.state.buckets) if name != buckets_before[b]) == metrics.buckets_rewritten
    (entry,) = [f for f in index.state.files if f.path == result.added[0]]
    assert entry.indexed_rows == 700 - len(removed)
    gone = [key for key, _ in (by_pos[i] for i in removed)]
    moved = [by_pos[i][0] for i in (kept[0], kept[len(kept) // 2], kept[-1])]
    found, missing = _lookup(spark, index, gone + moved)
    assert missing == set(gone)
    for key in moved:
        path, pos = found[key]
        assert row_at(path, pos, KEYS) == key and local_path(path) == new
    assert {f.path for f in index.state.files} == others | {result.added[0]}
    assert index.ensure_fresh().files_reindexed == []
    assert index.verify().ok


def test_shift_that_empties_a_bucket_records_it_as_empty(spark, table) -> None:
    from partialcow.table.base import FileReplacement
    from partialcow.table.iceberg import IcebergTable
    from partialcow.table.base import FILE_ID, POS

    committer = IcebergTable(spark, table)
    index = RowIndex.create(IcebergTable(spark, table), key_columns=KEYS, num_buckets=3)
    data_dir = os.path.join(local_path(index.source.location), "data")
    bucket0 = pq.read_table(index._store.path(index.state.buckets[0]))  # noqa: SLF001 - the bucket's own entries
    shifted, removed, added = {}, [], []
    for f in index.state.files:
        gone = sorted(p for i, p in zip(bucket0[FILE_ID].to_pylist(), bucket0[POS].to_pylist()) if i == f.file_id)
        source = pq.read_table(local_path(f.path))
        new = os.path.join(data_dir, f"pcow-{uuid.uuid4().hex}.parquet")
        pq.write_table(source.take([i for i in range(source.num_rows) if i not in set(gone)]), new)
        removed.append(f.path)
        added.append(new)
        shifted[f.path] = (new, gone)
    result = committer.replace_files(FileReplacement(base_version=committer.current_version(), removed=removed,
                                                     added=added))
    spelled = dict(zip(added, result.added))
    metrics = index.apply_commit(result, shifted={old: (spelled[new], gone) for old, (new, gone) in shifted.items()})
    assert metrics.files_reindexed == [] and metrics.rows_total == 2100 - bucket0.num_rows
    assert index.state.buckets[0] is None
    assert index.verify().ok


def test_an_index_that_outgrows_its_buckets_is_laid_out_again(spark, monkeypatch) -> None:
    """A table created empty and then loaded (what a first dbt run does) must not keep a one-bucket index."""
    from partialcow.table.iceberg import IcebergTable
    from partialcow.index import bucket_files

    monkeypatch.setattr(bucket_files, "_ROWS_PER_BUCKET", 100)
    name = f"default.idx_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} (id bigint, code string, amount double) USING iceberg")
    try:
        index = RowIndex.create(IcebergTable(spark, name), key_columns=KEYS)
        assert index.state.num_buckets == 1

        def load(first: int, rows: int):
            spark.range(first, first + rows).selectExpr("id", "concat('c', cast(id % 11 as string)) AS code",
                                                        "1.0D AS amount").coalesce(1).writeTo(name).append()
            return index.ensure_fresh()

        metrics = load(0, 650)  # 650 rows want 7 buckets of 100: at least twice the one it has
        assert metrics.num_buckets == index.state.num_buckets == 7
        assert all(b is not None for b in index.state.buckets)
        assert index.verify().ok
        found, missing = _lookup(spark, index, [_key(i) for i in (0, 321, 649, 650)])
        assert set(found) == {_key(0), _key(321), _key(649)} and missing == {_key(650)}

        metrics = load(650, 300)  # 950 rows want 10 buckets: fewer than twice 7, the layout stays
        assert metrics.num_buckets == 7 and metrics.buckets_rewritten <= 7
        assert index.verify().ok
        found, missing = _lookup(spark, index, [_key(i) for i in (5, 700, 949)])
        assert len(found) == 3 and not missing
        assert RowIndex.open(IcebergTable(spark, name)).state.num_buckets == 7  # what was stored
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def test_lookup_by_file_id_with_kept_columns_matches_the_path_lookup(spark, table) -> None:
    index = RowIndex.create(IcebergTable(spark, table), key_columns=KEYS, num_buckets=3)
    keys = spark.createDataFrame([(*_key(i), i % 2 == 0) for i in (1, 700, 1500, 9999)], "id bigint, code string, flag boolean")
    for broadcast_keys in (False, True):
        by_path = {(r["id"], r["code"]): (r["file"], r["pos"])
                   for r in index.lookup(keys, broadcast_keys=broadcast_keys).found.collect()}
        for expected_keys in (None, 10_000):  # many keys per bucket: every bucket is read, without choosing
            result = index.lookup(keys, file_column="fid", broadcast_keys=broadcast_keys, file_ids=True, keep=["flag"],
                                  expected_keys=expected_keys)
            paths = index.file_paths()
            rows = result.found.collect()
            assert result.found.columns == ["id", "code", "fid", "pos", "flag"]
            assert {(r["id"], r["code"]): (paths[r["fid"]], r["pos"]) for r in rows} == by_path
            assert {(r["id"], r["code"]): r["flag"] for r in rows} == {_key(1): False, _key(700): True, _key(1500): True}
            assert [tuple(r) for r in result.missing.collect()] == [_key(9999)]
            if expected_keys:
                assert result.buckets_read == 3


def _insert_commit(committer, index, data_dir: str, first: int, rows: int):
    """Commit a new file of ``rows`` new keys from id ``first``; apply it with the rows' entries known (added_rows)."""
    import pyarrow as pa

    from partialcow.index.hashing import bucket_of
    from partialcow.table.base import FileReplacement

    template = pq.read_table(local_path(committer.live_files()[0].path)).slice(0, 0)  # field ids Iceberg reads by
    keys = [_key(i) for i in range(first, first + rows)]
    new_rows = pa.table([pa.array([k[0] for k in keys], pa.int64()), pa.array([k[1] for k in keys]),
                         pa.array([2.0] * rows)], schema=template.schema)
    new = os.path.join(data_dir, f"pcow-{uuid.uuid4().hex}.parquet")
    pq.write_table(new_rows, new)
    result = committer.replace_files(FileReplacement(base_version=committer.current_version(), removed=[],
                                                     added=[new]))
    state = index.state
    added = pa.table({"id": [k[0] for k in keys], "code": [k[1] for k in keys], "file": [result.added[0]] * rows,
                      "pos": pa.array(range(rows), pa.int64()),
                      "_pcow_bucket": [bucket_of(k, state.key_types, state.num_buckets) for k in keys]})
    return index.apply_commit(result, added_rows=added), result.added[0], keys


def _assert_found(spark, index, keys: list[tuple], path: str) -> None:
    """Every lookup path (Spark's join, the driver's two) finds ``keys`` at their row in ``path``."""
    import pyarrow as pa

    found, missing = _lookup(spark, index, keys)
    assert not missing and {k: local_path(f) for k, (f, _) in found.items()} == {k: local_path(path) for k in keys}
    for key, (file, pos) in found.items():
        assert row_at(file, pos, KEYS) == key
    probe = pa.table({"id": [k[0] for k in keys], "code": [k[1] for k in keys]})
    local_found, local_missing = index.lookup_local(probe)
    assert local_missing.num_rows == 0 and sorted(local_found.column("pos").to_pylist()) == sorted(
        p for _, p in found.values())
    at, _, positions = index.locate_local(probe)
    assert sorted(positions.tolist()) == sorted(p for _, p in found.values()) and len(at) == len(keys)


def test_few_new_entries_go_to_delta_files_until_merged(spark, table, monkeypatch) -> None:
    """Inserts add a small delta file to each bucket they hit instead of rewriting it; lookups read base and
    deltas; a bucket with MAX_DELTA_FILES deltas is merged into one base file at its next change; a shift of
    positions patches deltas too; a reopened index sees the same files."""
    from partialcow.index import driver_side
    from partialcow.table.base import FileReplacement
    from partialcow.table.iceberg import IcebergTable

    monkeypatch.setenv(driver_side.MAX_DELTAS_ENV, "2")
    committer = IcebergTable(spark, table)
    index = RowIndex.create(IcebergTable(spark, table), key_columns=KEYS, num_buckets=3)
    data_dir = os.path.join(local_path(index.source.location), "data")
    bases = index.state.buckets

    metrics, first_file, first_keys = _insert_commit(committer, index, data_dir, 10_000, 30)
    assert (metrics.delta_files_written, metrics.buckets_rewritten) == (3, 0)
    assert index.state.buckets == bases and all(len(d) == 1 for d in index.state.deltas)
    _assert_found(spark, index, first_keys, first_file)
    assert index.verify().ok
    # regression: verify read the bucket of base files' entries only (from their b<n>- names), never checking the
    # entries of delta files (d<n>-)
    from pyspark.sql import functions as F

    from partialcow.index.bucket_files import BUCKET

    stored = index._read_index(index.state.all_bucket_files(), with_bucket=True)
    assert stored.where(F.col(BUCKET).isNull()).count() == 0
    assert RowIndex.open(IcebergTable(spark, table)).state.deltas == index.state.deltas

    # a commit that shifts positions of a file whose entries sit in deltas (Spark's patch path, forced here)
    gone = [0, 7]
    kept_rows = pq.read_table(local_path(first_file)).take([i for i in range(30) if i not in gone])
    shifted_path = os.path.join(data_dir, f"pcow-{uuid.uuid4().hex}.parquet")
    pq.write_table(kept_rows, shifted_path)
    result = committer.replace_files(FileReplacement(base_version=committer.current_version(), removed=[first_file],
                                                     added=[shifted_path]))
    with monkeypatch.context() as patched:
        patched.setattr(RowIndex, "_apply_local", lambda self, *args, **kwargs: None)
        metrics = index.apply_commit(result, shifted={first_file: (result.added[0], gone)})
    assert metrics.operation == "apply_commit"
    assert metrics.rows_total == 2100 + 28 and all(len(d) == 1 for d in index.state.deltas)
    left = [k for i, k in enumerate(first_keys) if i not in gone]
    _assert_found(spark, index, left, result.added[0])
    assert not _lookup(spark, index, [first_keys[i] for i in gone])[0]
    assert index.verify().ok

    metrics, _, _ = _insert_commit(committer, index, data_dir, 20_000, 30)
    assert metrics.delta_files_written == 3 and all(len(d) == 2 for d in index.state.deltas)
    # the third delta would pass the limit: those buckets are merged, their deltas with them
    metrics, last_file, last_keys = _insert_commit(committer, index, data_dir, 30_000, 30)
    assert (metrics.delta_files_written, metrics.buckets_rewritten) == (0, 3) and index.state.deltas == ()
    assert all(b not in bases for b in index.state.buckets)
    _assert_found(spark, index, last_keys, last_file)
    _assert_found(spark, index, left, result.added[0])
    assert index.verify().ok
    assert len(os.listdir(os.path.join(index.store.root, "data"))) >= 3  # the replaced files wait for the GC

    # many new entries at once: the buckets are merged, no delta is written
    metrics, big_file, big_keys = _insert_commit(committer, index, data_dir, 40_000, 600)
    assert (metrics.delta_files_written, metrics.buckets_rewritten) == (0, 3)
    _assert_found(spark, index, big_keys[::50], big_file)
    assert index.verify().ok

    monkeypatch.setenv(driver_side.MAX_DELTAS_ENV, "0")  # the setting that turns delta files off
    metrics, _, _ = _insert_commit(committer, index, data_dir, 50_000, 30)
    assert (metrics.delta_files_written, metrics.buckets_rewritten) == (0, 3) and index.state.deltas == ()


def test_lookup_local_compares_float_keys_as_values(spark) -> None:
    """Regression: ``lookup_local`` compared float keys bit for bit, so a table's ``-0.0`` did not match a lookup of
    ``0.0`` (nor the other way round), where Spark's ``lookup`` and the batches find it."""
    import pyarrow as pa

    name = f"default.floatkeys_{uuid.uuid4().hex[:8]}"
    spark.createDataFrame([(-0.0, "a"), (1.5, "b")], "k double, v string").writeTo(name).using("iceberg").create()
    try:
        index = RowIndex.create(IcebergTable(spark, name), key_columns=["k"])
        found, missing = index.lookup_local(pa.table({"k": [0.0, 1.5, 2.0]}))
        assert sorted(found.column("k").to_pylist()) == [0.0, 1.5] and missing.column("k").to_pylist() == [2.0]
        found, _ = index.lookup_local(pa.table({"k": [-0.0]}))
        assert found.num_rows == 1
    finally:
        spark.sql(f"DROP TABLE {name} PURGE")


def test_locate_local_refuses_an_index_it_cannot_read(spark, table, monkeypatch) -> None:
    """Regression: on an index outside the local file system ``locate_local`` answered "no key found", which turns
    every update of a batch into an insert of a second row for the key."""
    import pyarrow as pa

    from partialcow.exceptions import ConfigurationError
    from partialcow.index.storage import IndexStore

    index = RowIndex.create(IcebergTable(spark, table), key_columns=KEYS)
    monkeypatch.setattr(IndexStore, "is_local", property(lambda self: False))
    with pytest.raises(ConfigurationError, match="not on a local file system"):
        index.locate_local(pa.table({"id": [1], "code": ["c1"]}))


def test_local_lookups_read_buckets_written_by_spark_and_by_arrow_together(spark) -> None:
    """Regression: a build writes bucket files from Spark, which declares a NOT NULL key (a first build's default)
    and ``_file_id``/``_pos`` not null; a refresh after another writer's commit rewrites some buckets with Arrow,
    every column nullable. Arrow concatenates identical schemas only: every small batch whose keys fell in both
    kinds of bucket failed ("Schema at index 1 was different") until the index was rebuilt."""
    name = f"default.idx_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} (id bigint NOT NULL, code string NOT NULL, amount double) USING iceberg")
    try:
        for first, last in ((0, 600), (1000, 1003)):  # a small file: the delete below rewrites it, so a few buckets
            spark.range(first, last).selectExpr("id", "concat('c', cast(id % 11 as string)) AS code",
                                                "1.0D AS amount").coalesce(1).writeTo(name).append()
        index = RowIndex.create(IcebergTable(spark, name), key_columns=KEYS, num_buckets=8)
        spark.sql(f"DELETE FROM {name} WHERE id = 1001")  # another writer
        index.ensure_fresh()
        schemas = {str(pq.read_schema(os.path.join(index.store.root, f)))
                   for b in range(8) for f in index.state.bucket_files(b)}
        assert len(schemas) > 1, "every bucket file has one schema: the case this test is for did not arise"
        present = [_key(i) for i in [*range(0, 600, 7), 1000, 1002]]
        keys = pa.table({"id": [k[0] for k in present], "code": [k[1] for k in present]})
        found, missing = index.lookup_local(keys)
        assert missing.num_rows == 0 and found.num_rows == len(present)
        rows, _, _ = index.locate_local(keys)
        assert sorted(rows.tolist()) == list(range(len(present)))
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
