"""The index's state files: round trip, put-if-absent publication, garbage collection (no Spark)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from partialcow.exceptions import IndexError_, StaleIndexError
from partialcow.index.storage import INDEX_DIR, IndexedFile, IndexState, IndexStore
from partialcow.table.paths import local_path


def _state(version: int, buckets: tuple[str | None, ...]) -> IndexState:
    return IndexState(
        table="db.t",
        table_format="iceberg",
        location="/x",
        key_columns=("id", "name"),
        key_types=("bigint", "string"),
        num_buckets=len(buckets),
        table_version=100 + version,
        files=(IndexedFile(0, "file:/x/data/a.parquet", 10, 10, None, (0,)), IndexedFile(1, "file:/x/b", 5, 4, "d1", None)),
        buckets=buckets,
        next_file_id=2,
        state_version=version,
    )


def test_round_trip_and_latest(tmp_path) -> None:
    store = IndexStore(f"file:{tmp_path}")
    assert store.root == os.path.join(str(tmp_path), INDEX_DIR)
    assert store.read_state() is None
    first = _state(1, ("data/b00000-a.parquet", None))
    store.write_state(first)
    store.write_state(_state(2, ("data/b00000-b.parquet", "data/b00001-b.parquet")))
    assert store.read_state(1) == first
    latest = store.read_state()
    assert latest is not None and latest.state_version == 2 and latest.files[1].buckets is None


def test_second_writer_of_a_version_loses(tmp_path) -> None:
    store = IndexStore(str(tmp_path))
    store.write_state(_state(1, (None,)))
    with pytest.raises(StaleIndexError, match="db.t"):
        store.write_state(replace(_state(1, (None,)), table_version=999))
    assert store.read_state().table_version == 101  # the first publication stands
    assert [f.base_name for f in store.list_dir("_state")] == ["v00000001.json"]  # no temp file left behind


def test_garbage_collection_keeps_files_of_the_last_two_states(tmp_path) -> None:
    store = IndexStore(str(tmp_path))
    data = tmp_path / INDEX_DIR / "data"
    data.mkdir(parents=True)
    for name in ("b00000-a", "b00000-b", "b00000-c", "b00001-a"):
        (data / f"{name}.parquet").write_bytes(b"x")
    store.write_state(_state(1, ("data/b00000-a.parquet", "data/b00001-a.parquet")))
    store.write_state(_state(2, ("data/b00000-b.parquet", "data/b00001-a.parquet")))
    store.write_state(_state(3, ("data/b00000-c.parquet", "data/b00001-a.parquet")))
    assert store.garbage_collect() == ["_state/v00000001.json"]  # fresh unreferenced files may be another writer's
    deleted = store.garbage_collect(min_age_seconds=0)
    assert deleted == ["data/b00000-a.parquet"]
    assert sorted(p.name for p in data.iterdir()) == ["b00000-b.parquet", "b00000-c.parquet", "b00001-a.parquet"]


def test_local_path() -> None:
    # an Iceberg/Hadoop location is not escaped: its "%20" is on disk as it stands (tests/table/test_location_paths.py)
    assert local_path("file:///tmp/a%20b") == "/tmp/a%20b"
    assert local_path("s3a://bucket/t") is None


def test_bucket_files_are_written_without_dictionaries(tmp_path) -> None:
    """Keys are nearly all distinct: both writers of bucket files (the driver's merge of one commit, and the writer
    of whole buckets) store them PLAIN, without a dictionary pyarrow would build and then abandon."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from partialcow.index.bucket_files import write_bucket_files_local
    from partialcow.index.local import FILE_ID, POS, merge_bucket

    n = 20_000
    entries = pa.table({"k": pa.array(np.arange(n) * 7, pa.int64()), FILE_ID: pa.array(np.zeros(n), pa.int32()),
                        POS: pa.array(np.arange(n), pa.int64())})
    store = IndexStore(str(tmp_path / "t"))
    names = write_bucket_files_local(store, ["k"], "db.t", entries, 2, np.arange(n, dtype=np.int64))
    written = [store.path(name) for name in names.values()]
    merged = str(tmp_path / "merged.parquet")
    merge_bucket([written[0]], merged, key_columns=["k"], remap={}, drop_ids=frozenset(),
                 added=pa.table({"k": pa.array([-1], pa.int64()), FILE_ID: pa.array([1], pa.int32()),
                                 POS: pa.array([0], pa.int64())}), table="db.t")
    for path in [*written, merged]:
        meta = pq.ParquetFile(path).metadata
        for rg in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                column = meta.row_group(rg).column(c)
                assert not column.has_dictionary_page, (path, column.path_in_schema)
                assert column.compression == "ZSTD"


def test_delta_files_round_trip_and_are_kept_by_garbage_collection(tmp_path) -> None:
    store = IndexStore(str(tmp_path))
    data = tmp_path / INDEX_DIR / "data"
    data.mkdir(parents=True)
    for name in ("b00000-a", "d00000-a", "d00000-b", "b00001-a"):
        (data / f"{name}.parquet").write_bytes(b"x")
    state = _state(1, ("data/b00000-a.parquet", "data/b00001-a.parquet")).with_bucket_files(
        {0: ["data/b00000-a.parquet", "data/d00000-a.parquet", "data/d00000-b.parquet"]})
    store.write_state(state)
    assert store.read_state() == state
    assert state.bucket_files(0)[1:] == ("data/d00000-a.parquet", "data/d00000-b.parquet")
    assert state.bucket_files(1) == ("data/b00001-a.parquet",)
    assert store.garbage_collect(min_age_seconds=0) == []
    merged = replace(state.with_bucket_files({0: ["data/b00000-a.parquet"]}), state_version=2)
    assert merged.deltas == ()
    store.write_state(merged)
    store.write_state(replace(merged, state_version=3))
    assert store.garbage_collect(min_age_seconds=0) == ["_state/v00000001.json", "data/d00000-a.parquet",
                                                        "data/d00000-b.parquet"]


def test_states_written_before_delta_files_are_read(tmp_path) -> None:
    import json

    store = IndexStore(str(tmp_path))
    state = _state(1, ("data/b00000-a.parquet", None))
    body = json.loads(state.to_json())
    del body["deltas"]
    body["format_version"] = 1
    (tmp_path / INDEX_DIR / "_state").mkdir(parents=True)
    (tmp_path / INDEX_DIR / "_state" / "v00000001.json").write_text(json.dumps(body))
    assert store.read_state() == state and store.read_state().deltas == ()
    body["format_version"] = 3
    (tmp_path / INDEX_DIR / "_state" / "v00000002.json").write_text(json.dumps(body))
    with pytest.raises(IndexError_, match="unknown format"):
        store.read_state()


def test_merge_reads_every_file_of_a_bucket_and_deltas_take_the_base_types(tmp_path) -> None:
    """A merge sorts base and delta entries into one file and refuses a key found twice among them; a delta file is
    written sorted, in the base file's column types (here int32 keys and INT96 timestamps as Spark may write)."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    from partialcow.exceptions import DuplicateKeyError
    from partialcow.index.local import FILE_ID, POS, merge_bucket, write_delta

    def entries(keys: list[int], file_id: int, types=(pa.int32(), pa.timestamp("us"))) -> pa.Table:
        return pa.table({"k": pa.array(keys, types[0]),
                         "t": pa.array([dt.datetime(2024, 1, 1, 0, 0, k) for k in keys], types[1]),
                         FILE_ID: pa.array([file_id] * len(keys), pa.int32()),
                         POS: pa.array(range(len(keys)), pa.int64())})

    base = str(tmp_path / "base.parquet")
    pq.write_table(entries([1, 4, 8], 0), base, use_deprecated_int96_timestamps=True)
    delta = str(tmp_path / "delta.parquet")
    assert write_delta(base, delta, key_columns=["k", "t"], added=entries([9, 2], 1, (pa.int64(), pa.timestamp("ns"))),
                       table="db.t") == 2
    written = pq.ParquetFile(delta)
    assert written.schema_arrow.field("k").type == pa.int32()
    assert written.schema.column(1).physical_type == "INT96"
    assert pq.read_table(delta).column("k").to_pylist() == [2, 9]

    merged = str(tmp_path / "merged.parquet")
    counts, left = merge_bucket([base, delta], merged, key_columns=["k", "t"], remap={0: (5, pa.array([1]).to_numpy())},
                                drop_ids=frozenset(), added=None, table="db.t")
    assert (counts, left) == ({0: 1}, 4)
    rows = pq.read_table(merged)
    assert rows.column("k").to_pylist() == [1, 2, 8, 9]
    assert rows.column(FILE_ID).to_pylist() == [5, 1, 5, 1] and rows.column(POS).to_pylist() == [0, 1, 1, 0]

    twice = str(tmp_path / "twice.parquet")
    write_delta(base, twice, key_columns=["k", "t"], added=entries([4], 2), table="db.t")
    with pytest.raises(DuplicateKeyError, match="db.t"):
        merge_bucket([base, twice], str(tmp_path / "bad.parquet"), key_columns=["k", "t"], remap={},
                     drop_ids=frozenset(), added=None, table="db.t")
    with pytest.raises(DuplicateKeyError, match="db.t"):
        write_delta(base, str(tmp_path / "bad2.parquet"), key_columns=["k", "t"], added=entries([3, 3], 2),
                    table="db.t")


def test_garbage_collections_at_once_tolerate_each_other(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: two writes collecting at once (each after its own commit) raised FileNotFoundError for a file the
    other had just removed, and an assertion for a state the other had just removed; the write's commit had landed,
    so dbt reported a committed batch as failed."""
    store = IndexStore(str(tmp_path))
    data = tmp_path / INDEX_DIR / "data"
    data.mkdir(parents=True)
    for name in ("b00000-a", "b00000-b", "b00000-c"):
        (data / f"{name}.parquet").write_bytes(b"x")
    for version, name in enumerate(("a", "b", "c"), start=1):
        store.write_state(_state(version, (f"data/b00000-{name}.parquet", None)))
    other = IndexStore(str(tmp_path))
    listed = store.list_dir("data")
    other.garbage_collect(min_age_seconds=0)  # the other write collected first: v1 and b00000-a are gone
    monkeypatch.setattr(store, "_state_versions", lambda: [1, 2, 3])  # what this write listed before that
    monkeypatch.setattr(store, "list_dir", lambda rel: listed if rel == "data" else [])
    assert store.garbage_collect(min_age_seconds=0) == []  # nothing left to remove, and no error
    monkeypatch.setattr(store, "_state_versions", lambda: [1, 2, 3, 4])  # v2 and v3 kept: v3 is known, v4 is not
    assert store.garbage_collect(min_age_seconds=0, keep_states=2) == []  # a kept state gone: leave it to others
    assert sorted(p.name for p in data.iterdir()) == ["b00000-b.parquet", "b00000-c.parquet"]
