"""Row index over Delta tables (delta-rs writes, Spark's Parquet reader indexes); pyarrow is the oracle."""

from __future__ import annotations

import datetime as dt
import os
import random
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from index_oracle import corrupt_bucket, keys_of, row_at  # noqa: E402

from partialcow.table.base import FileReplacement  # noqa: E402
from partialcow.exceptions import DuplicateKeyError  # noqa: E402
from partialcow.index import INDEX_DIR, RowIndex, bucket_of  # noqa: E402
from partialcow.table.delta import DeltaRsTable  # noqa: E402

pytestmark = pytest.mark.spark

KEYS = ["id", "name", "day"]  # int, string, date: a composite key of three types


def _batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int32()),
            "name": [f"n{i % 13}" for i in ids],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 50) for i in ids],
            "amount": pa.array([float(i) for i in ids]),
        }
    )


def _key(i: int) -> tuple:
    row = _batch(i, 1).to_pylist()[0]
    return tuple(row[c] for c in KEYS)


def _table(root: str, files: int = 3, rows: int = 800) -> str:
    for f in range(files):
        write_deltalake(root, _batch(f * rows, rows), mode="append")
    return root


def _live_paths(root: str) -> set[str]:
    return set(DeltaTable(root).file_uris())


def _check_lookup(spark, index: RowIndex, root: str, present: list[tuple], absent: list[tuple]) -> None:
    keys = spark.createDataFrame(present + absent, "id int, name string, day date")
    result = index.lookup(keys)
    found = {tuple(r[c] for c in KEYS): (r["file"], r["pos"]) for r in result.found.collect()}
    missing = {tuple(r[c] for c in KEYS) for r in result.missing.collect()}
    assert set(found) == set(present)
    assert missing == set(absent)
    assert set(f for f, _ in found.values()) <= _live_paths(root)
    for key, (path, pos) in found.items():
        assert row_at(path, pos, KEYS) == key


def test_build_and_lookup(spark, tmp_path) -> None:
    root = _table(str(tmp_path / "t"))
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=4)
    metrics = index.last_metrics
    assert metrics is not None and metrics.rows_total == 2400 and metrics.num_buckets == 4
    assert set(metrics.files_reindexed) == _live_paths(root)
    oracle = keys_of(_live_paths(root), KEYS)
    rnd = random.Random(1)
    present = rnd.sample(sorted(oracle), 60)
    absent = [(99999, "n1", dt.date(2024, 1, 1)), (5, "wrong", dt.date(2024, 1, 6))]
    _check_lookup(spark, index, root, present, absent)
    # every bucket file holds exactly the keys that hash to it (Python's hash as the second oracle), sorted
    seen = 0
    for bucket, name in enumerate(index.state.buckets):
        assert name is not None
        rows = pq.read_table(os.path.join(index.store.root, name)).to_pylist()
        keys = [tuple(r[c] for c in KEYS) for r in rows]
        assert keys == sorted(keys)
        assert {bucket_of(k, ["int", "string", "date"], 4) for k in keys} == {bucket}
        seen += len(rows)
    assert seen == len(oracle)
    assert index.verify().ok


def test_lookup_reads_only_the_buckets_of_the_keys(spark, tmp_path) -> None:
    root = _table(str(tmp_path / "t"), files=2, rows=500)
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=16)
    key = (7, "n7", dt.date(2024, 1, 8))
    result = index.lookup(spark.createDataFrame([key], "id int, name string, day date"))
    assert result.buckets_read == 1
    assert [tuple(r[c] for c in KEYS) for r in result.found.collect()] == [key]


def test_keys_are_cast_to_the_key_types(spark, tmp_path) -> None:
    root = _table(str(tmp_path / "t"), files=1, rows=100)
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=2)
    # bigint and string-typed keys must hash like the int/date columns of the table
    keys = spark.createDataFrame([(3, "n3", "2024-01-04")], "id bigint, name string, day string")
    assert index.lookup(keys).found.count() == 1


def test_duplicate_keys_are_refused_at_build(spark, tmp_path) -> None:
    root = str(tmp_path / "t")
    write_deltalake(root, _batch(0, 100))
    write_deltalake(root, _batch(40, 5), mode="append")  # keys 40..44 twice
    with pytest.raises(DuplicateKeyError) as info:
        RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=2)
    message = str(info.value)
    assert root in message and any(f"({i}, 'n{i % 13}'" in message for i in range(40, 45))


def test_duplicate_keys_are_detected_at_lookup(spark, tmp_path) -> None:
    root = _table(str(tmp_path / "t"), files=1, rows=200)
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=1)
    key = corrupt_bucket(index.store.root, index.state.buckets[0], duplicate_first=True)
    with pytest.raises(DuplicateKeyError, match=str(key[0])):
        index.lookup(spark.createDataFrame([key], "id int, name string, day date"))


def _rewrite(root: str, rel_or_abs: str, *, transform) -> str:
    """Write a new data file next to ``rel_or_abs`` with ``transform`` applied to its rows (pyarrow only)."""
    src = rel_or_abs if rel_or_abs.startswith("/") else os.path.join(root, rel_or_abs)
    table = transform(pq.read_table(src))
    name = f"rewritten-{time.monotonic_ns()}.parquet"
    pq.write_table(table, os.path.join(root, name))
    return name


def test_apply_commit_update_in_place_touches_no_bucket(spark, tmp_path) -> None:
    root = _table(str(tmp_path / "t"))
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=4)
    buckets_before = index.state.buckets
    committer = DeltaRsTable(root)
    old = committer.live_files()[1].path
    new = _rewrite(root, old, transform=lambda t: t.set_column(3, "amount", pa.array([-1.0] * t.num_rows)))
    result = committer.replace_files(FileReplacement(base_version=committer.current_version(), removed=[old], added=[new]))
    metrics = index.apply_commit(result, same_positions={old: new})
    assert metrics.buckets_rewritten == 0 and metrics.files_reindexed == []
    assert metrics.files_repointed == [os.path.join(root, new)]
    assert index.state.buckets == buckets_before
    moved = list(keys_of([os.path.join(root, new)], KEYS))[:20]
    _check_lookup(spark, index, root, moved, [])
    assert index.verify().ok


def test_apply_commit_insert_and_delete(spark, tmp_path) -> None:
    root = _table(str(tmp_path / "t"))
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=4)
    committer = DeltaRsTable(root)

    # insert: one new file, indexed from the rows the writer hands over
    pq.write_table(_batch(10_000, 50), os.path.join(root, "inserted.parquet"))
    result = committer.replace_files(FileReplacement(base_version=committer.current_version(), added=["inserted.parquet"]))
    new_rows = spark.createDataFrame(
        [(*k, "inserted.parquet", pos) for pos, k in enumerate(keys_of([os.path.join(root, "inserted.parquet")], KEYS))],
        "id int, name string, day date, file string, pos bigint",
    )
    metrics = index.apply_commit(result, new_file_rows=new_rows)
    assert metrics.files_reindexed == [os.path.join(root, "inserted.parquet")] and metrics.files_dropped == []
    assert metrics.rows_indexed == 50 and metrics.rows_total == 2450

    # delete: rows 0..9 of one file go away, the positions of the rest shift down by 10
    victim = next(f.path for f in committer.live_files() if not f.path.endswith("/inserted.parquet"))
    deleted = list(keys_of([os.path.join(root, victim)], KEYS))[:10]
    new = _rewrite(root, victim, transform=lambda t: t.slice(10))
    result = committer.replace_files(FileReplacement(base_version=committer.current_version(), removed=[victim], added=[new]))
    metrics = index.apply_commit(result)
    assert metrics.files_reindexed == [os.path.join(root, new)]
    assert metrics.files_dropped == [os.path.join(root, victim)]
    survivors = list(keys_of([os.path.join(root, new)], KEYS))
    _check_lookup(spark, index, root, survivors[:5] + [_key(10_003)], deleted)
    assert index.verify().ok


def test_apply_commit_after_a_foreign_commit_repairs(spark, tmp_path) -> None:
    root = _table(str(tmp_path / "t"), files=2, rows=300)
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=2)
    write_deltalake(root, _batch(5_000, 20), mode="append")  # someone else
    committer = DeltaRsTable(root)
    pq.write_table(_batch(6_000, 20), os.path.join(root, "ours.parquet"))
    result = committer.replace_files(FileReplacement(base_version=committer.current_version(), added=["ours.parquet"]))
    metrics = index.apply_commit(result)
    assert metrics.operation == "apply_commit(repair)" and len(metrics.files_reindexed) == 2
    assert index.verify().ok and index.state.table_version == result.version


def test_outside_writers_are_noticed_and_only_changed_files_reindexed(spark, tmp_path) -> None:
    root = _table(str(tmp_path / "t"), files=4, rows=500)
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=4)
    table = DeltaTable(root)

    def step(action) -> None:
        before = _live_paths(root)
        action()
        after = _live_paths(root)
        metrics = index.ensure_fresh()
        assert set(metrics.files_reindexed) == after - before
        assert set(metrics.files_dropped) == before - after
        report = index.verify()
        assert report.ok, report

    step(lambda: table.delete("id = 1234"))  # delta-rs rewrites the one file holding id 1234
    # two matched keys (files holding 10 and 510 are rewritten) and one new key
    source = pa.Table.from_pylist(
        [dict(zip([*KEYS, "amount"], (*_key(i), 0.5))) for i in (10, 510)]
        + [{"id": 9_000, "name": "n4", "day": dt.date(2024, 1, 1), "amount": 0.5}],
        schema=_batch(0, 1).schema,
    )
    step(lambda: DeltaTable(root).merge(source, "s.id = t.id AND s.name = t.name AND s.day = t.day", source_alias="s",
                                        target_alias="t").when_matched_update_all().when_not_matched_insert_all().execute())
    step(lambda: DeltaTable(root).optimize.compact())
    assert index.ensure_fresh().files_reindexed == []  # nothing changed: no-op
    _check_lookup(spark, index, root, [_key(10), _key(510), (9_000, "n4", dt.date(2024, 1, 1))], [_key(1234)])


def test_verify_fails_on_a_corrupted_index(spark, tmp_path) -> None:
    root = _table(str(tmp_path / "t"), files=2, rows=300)
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=2)
    assert index.verify().ok
    corrupt_bucket(index.store.root, index.state.buckets[1], shift_first_pos=1)
    report = RowIndex.open(DeltaRsTable(root, spark=spark)).verify()
    assert not report.ok
    assert report.missing_from_index == 1 and report.extra_in_index == 1 and report.wrong_bucket == 0
    assert any("extra in index" in s for s in report.samples)


def test_verify_tells_a_version_without_file_changes_from_an_index_behind(spark, tmp_path) -> None:
    """Regression: a Delta version that changed no file (a table property set) made ``verify`` report the index as
    disagreeing ("run rebuild"). It agrees; an index behind a table whose files changed is told apart, since the
    next write brings it up to date."""
    root = _table(str(tmp_path / "t"), files=2, rows=300)
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=2)
    DeltaTable(root).alter.set_table_properties({"delta.checkpointInterval": "5"})
    report = RowIndex.open(DeltaRsTable(root, spark=spark)).verify()
    assert report.table_version == report.index_version + 1 and report.ok and not report.behind, report
    write_deltalake(root, _batch(1000, 1), mode="append")
    report = RowIndex.open(DeltaRsTable(root, spark=spark)).verify()
    assert not report.ok and report.behind and len(report.stale_files) == 1, report
    assert index.state.table_version == report.index_version


def test_index_folder_is_invisible_to_delta_vacuum(spark, tmp_path) -> None:
    root = _table(str(tmp_path / "t"), files=2, rows=100)
    RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=2)
    DeltaTable(root).delete("id < 10")  # leaves a removed file for vacuum
    control = os.path.join(root, "orphan-control.parquet")  # an untracked data file vacuum should consider
    pq.write_table(_batch(0, 1), control)
    week_ago = time.time() - 7 * 86400
    for folder, _, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(folder, name), (week_ago, week_ago))
    # full=True: also list files the log never mentioned (the case a folder of ours would fall under)
    listed = DeltaTable(root).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True, full=True)
    assert any(p.endswith("orphan-control.parquet") for p in listed)  # the dry run does list candidates
    assert not [p for p in listed if INDEX_DIR in p]
    DeltaTable(root).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
    assert RowIndex.open(DeltaRsTable(root, spark=spark)).ensure_fresh().rows_total == 190


@pytest.mark.parametrize("n_keys", [5, 400])  # few keys: hashed to their buckets; many: every bucket read
def test_lookup_local_agrees_with_spark_lookup(spark, tmp_path, n_keys) -> None:
    root = _table(str(tmp_path / "t"), files=2, rows=400)
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=8)
    present = random.Random(n_keys).sample(sorted(keys_of(_live_paths(root), KEYS)), n_keys)
    absent = [(70_000, "n0", dt.date(2024, 2, 1))]
    keys = pa.Table.from_pylist([dict(zip(KEYS, k)) for k in present + absent])  # int64 ids: cast to the key type
    found, missing = index.lookup_local(keys)
    local = {tuple(r[c] for c in KEYS): (r["file"], r["pos"]) for r in found.to_pylist()}
    assert [tuple(r[c] for c in KEYS) for r in missing.to_pylist()] == absent
    assert set(local) == set(present)
    for key, (path, pos) in local.items():
        assert row_at(path, pos, KEYS) == key
    result = index.lookup(spark.createDataFrame(present, "id int, name string, day date"))
    assert {tuple(r[c] for c in KEYS): (r["file"], r["pos"]) for r in result.found.collect()} == local


def test_two_maintainers_racing_for_the_same_state(spark, tmp_path) -> None:
    from partialcow.exceptions import StaleIndexError

    root = _table(str(tmp_path / "t"), files=2, rows=200)
    first = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=2)
    second = RowIndex.open(DeltaRsTable(root, spark=spark))
    write_deltalake(root, _batch(1_000, 10), mode="append")
    first.ensure_fresh()
    with pytest.raises(StaleIndexError, match="concurrently"):
        second.ensure_fresh()  # built on the same state version: loses, publishes nothing
    reopened = RowIndex.open(DeltaRsTable(root, spark=spark))
    assert reopened.state == first.state and reopened.verify().ok


def test_lookup_local_finds_a_key_asked_for_twice_twice(spark, tmp_path) -> None:
    """Regression: a key the caller passed twice was reported as a key the table holds twice."""
    root = _table(str(tmp_path / "t"), files=1, rows=50)
    index = RowIndex.create(DeltaRsTable(root, spark=spark), key_columns=KEYS, num_buckets=2)
    keys = pa.Table.from_pylist([dict(zip(KEYS, _key(i))) for i in (2, 2, 5)])
    found, missing = index.lookup_local(keys)
    assert [tuple(r[c] for c in KEYS) for r in found.to_pylist()].count(_key(2)) == 2 and missing.num_rows == 0
