"""The driver-side half of ``RowIndex``: lookups and commit upkeep with pyarrow on the driver (small key sets,
a local index) and the bucket shift after deletes. A mixin, so ``RowIndex`` stays one class for its users."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from partialcow.exceptions import ConfigurationError, DuplicateKeyError
from partialcow.faults import checkpoint
from partialcow.index.storage import IndexedFile, IndexState, IndexStore, unique_names
from partialcow.parquet import INT96_UNIT
from partialcow.table.base import FILE_ID, POS, CommitResult, TableSource

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

from partialcow.index import bucket_files
from partialcow.index.bucket_files import _ADDED_BUCKET, _DUPLICATE_SAMPLE, _choose_buckets, _shift_bucket_files
from partialcow.index.results import IndexMetrics


class _DriverSide:
    """Methods of :class:`partialcow.index.row_index.RowIndex` that run on the driver."""

    source: TableSource
    state: IndexState
    _store: IndexStore

    if TYPE_CHECKING:  # provided by RowIndex

        @property
        def spark(self) -> SparkSession: ...

        def _duplicate_error(self, rows: Iterable) -> DuplicateKeyError: ...  # type: ignore[type-arg]

        @staticmethod
        def _rows_total(state: IndexState) -> int: ...

    def lookup_local(
        self, keys: pa.Table, *, file_column: str = "file", pos_column: str = "pos"
    ) -> tuple[pa.Table, pa.Table]:
        """Like ``lookup`` but on the driver with pyarrow, no Spark job: for small key sets (a few thousand keys).

        Returns ``(found, missing)`` Arrow tables. Buckets are chosen with the Python port of Spark's hash; when
        there are many keys per bucket every bucket is read anyway, so hashing is skipped.

        ``found, missing = index.lookup_local(pa.table({"id": [1, 2]}))``
        """
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from partialcow.index.hashing import bucket_of
        from partialcow.index.lookup import bucket_entries, normalized_key

        state = self.state
        missing_columns = [c for c in state.key_columns if c not in keys.column_names]
        if missing_columns:
            raise ConfigurationError(
                f"lookup on the index of {state.table}: the keys lack key column(s) {missing_columns}"
            )
        if not state.key_types:  # an index of an empty table
            none = keys.select(list(state.key_columns)).slice(0, 0)
            found = none.append_column(file_column, pa.array([], pa.string()))
            return found.append_column(pos_column, pa.array([], pa.int64())), keys.select(list(state.key_columns))
        schema = self._arrow_key_schema()
        # float keys compared as values on both sides (-0.0 is 0.0), as batches and Spark's lookup compare them
        typed = pa.table([normalized_key(keys.column(c).cast(schema.field(c).type)) for c in state.key_columns],
                         schema=schema)
        if typed.num_rows < 4 * state.num_buckets:
            rows = zip(*[typed.column(c).to_pylist() for c in state.key_columns])
            wanted = sorted({bucket_of(k, state.key_types, state.num_buckets) for k in rows})
        else:
            wanted = list(range(state.num_buckets))
        parts = []
        for b in wanted:
            for name in state.bucket_files(b):
                with self._store.fs.open_input_file(self._store.path(name)) as handle:
                    part = pq.read_table(handle, columns=[*state.key_columns, FILE_ID, POS],
                                         coerce_int96_timestamp_unit=INT96_UNIT)
                parts.append(bucket_entries(part, state.key_columns, schema))
        if not parts:
            return typed.slice(0, 0).append_column(file_column, pa.array([], pa.string())).append_column(
                pos_column, pa.array([], pa.int64())), typed
        index_rows = pa.concat_tables(parts)
        paths = {f.file_id: f.path for f in state.files}
        ids = pa.table(
            {FILE_ID: pa.array(list(paths), pa.int32()), file_column: pa.array(list(paths.values()), pa.string())}
        )
        joined = typed.join(index_rows, list(state.key_columns), join_type="left outer")
        hit = pc.is_valid(joined.column(FILE_ID))
        found = joined.filter(hit).join(ids, FILE_ID, join_type="inner")
        found = found.select([*state.key_columns, file_column, POS]).rename_columns(
            [*state.key_columns, file_column, pos_column]
        )
        missing = joined.filter(pc.invert(hit)).select(list(state.key_columns))
        # a key the table holds twice, not one the caller asked for twice (that is found twice)
        asked = index_rows.join(typed.group_by(list(state.key_columns)).aggregate([]), list(state.key_columns),
                                join_type="left semi")
        counts = asked.group_by(list(state.key_columns)).aggregate([(FILE_ID, "count")])
        dups = counts.filter(pc.greater(counts.column(f"{FILE_ID}_count"), 1))
        if dups.num_rows:
            raise self._duplicate_error(dups.slice(0, _DUPLICATE_SAMPLE).to_pylist())
        return found, missing

    def locate_local(self, keys: pa.Table, buckets: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Find ``keys`` (the key columns of a batch, one row per change) on the driver, with pyarrow: the batch row,
        file id and position of every match (see ``partialcow.index.lookup``). ``buckets``: each key's bucket as
        Spark hashed it, so only those bucket files are read.

        ``locate_partition`` (the executor side of large batches) runs the same join on the buckets of its rows.
        """
        from partialcow.index.lookup import join_keys, read_buckets

        state = self.state
        if not self._store.is_local:  # "no match" would turn every update of the batch into an insert
            raise ConfigurationError(f"the row index of {state.table} is not on a local file system")
        if not state.key_types:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty.astype(np.int32), empty
        wanted = range(state.num_buckets) if buckets is None else np.unique(buckets).tolist()
        schema = self._arrow_key_schema()
        entries = read_buckets([self._store.path(name) for b in wanted for name in state.bucket_files(b)],
                               state.key_columns, schema)
        typed = keys.select(list(state.key_columns)).cast(schema)
        return join_keys(entries, typed)

    def _arrow_key_schema(self) -> pa.Schema:
        import pyarrow as pa

        arrow = {
            "tinyint": pa.int8(),
            "smallint": pa.int16(),
            "int": pa.int32(),
            "bigint": pa.int64(),
            "boolean": pa.bool_(),
            "date": pa.date32(),
            "timestamp": pa.timestamp("us", tz="UTC"),
            "timestamp_ntz": pa.timestamp("us"),
            "float": pa.float32(),
            "double": pa.float64(),
            "string": pa.string(),
            "binary": pa.binary(),
        }
        return pa.schema([(c, arrow[t]) for c, t in zip(self.state.key_columns, self.state.key_types)])

    def _apply_local(self, result: CommitResult, pairs: Mapping[str, str],
                     shifts: Mapping[str, tuple[str, np.ndarray]], removed: Sequence[str], added: Sequence[str],
                     added_rows: pa.Table | None, appended_rows: pa.Table | None = None) -> IndexMetrics | None:
        """``apply_commit`` merged bucket by bucket on the driver (see ``partialcow.index.local``); None when the
        change needs the Spark path (rows of added files unknown, a remote index, an index growing past its layout)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from partialcow.index.local import merge_bucket, write_delta

        state = self.state
        targets = set(pairs.values()) | {dst for dst, _ in shifts.values()}
        new_paths = [p for p in added if p not in targets]
        if not self._store.is_local or not state.key_types or (new_paths and added_rows is None):
            return None
        by_path = state.by_path()
        if any(by_path[p].deletes for p in shifts):
            return None
        n = state.num_buckets
        norm = self.source.normalize_path
        rows = None
        if new_paths:
            assert added_rows is not None
            rows = added_rows.set_column(
                added_rows.schema.get_field_index("file"),
                "file",
                pa.array([norm(p) for p in added_rows.column("file").to_pylist()], pa.string()),
            )
            if set(pc.unique(rows.column("file")).to_pylist()) - set(new_paths):
                return None  # rows of files this commit did not add: not ours to trust
        grown: dict[str, int] = {}  # re-pointed or shifted file -> rows appended to it
        if appended_rows is not None and appended_rows.num_rows:
            appended_rows = appended_rows.set_column(
                appended_rows.schema.get_field_index("file"), "file",
                pa.array([norm(p) for p in appended_rows.column("file").to_pylist()], pa.string()))
            for path, count in zip(*np.unique(appended_rows.column("file").to_numpy(zero_copy_only=False),
                                              return_counts=True)):
                grown[str(path)] = int(count)
            if set(grown) - targets:
                return None  # rows appended to a file this commit did not rewrite: not ours to trust
            rows = appended_rows if rows is None else pa.concat_tables([rows, appended_rows.select(rows.column_names)])
        dropped = [by_path[p] for p in removed if p not in pairs and p not in shifts]
        rows_after = (self._rows_total(state) - sum(f.indexed_rows for f in dropped)
                      - sum(len(g) for _, g in shifts.values()) + (rows.num_rows if rows is not None else 0))
        if _choose_buckets(rows_after, bucket_files._ROWS_PER_BUCKET) >= 2 * n:
            return None  # the index grows past its layout: the Spark path lays it out again

        next_id = state.next_file_id
        remap: dict[int, tuple[int, np.ndarray]] = {}
        affected: set[int] = set()
        for f in state.files:
            if f.path in shifts:
                remap[f.file_id] = (next_id, shifts[f.path][1])
                affected.update(range(n) if f.buckets is None else f.buckets)
                next_id += 1
        for f in dropped:
            affected.update(range(n) if f.buckets is None else f.buckets)
        new_ids = {}
        for path in new_paths:
            new_ids[path] = next_id
            next_id += 1
        for f in state.files:  # rows appended to a rewritten file take the id its other entries get
            if f.path in pairs and pairs[f.path] in grown:
                new_ids[pairs[f.path]] = f.file_id
            elif f.file_id in remap and shifts[f.path][0] in grown:
                new_ids[shifts[f.path][0]] = remap[f.file_id][0]
        rewritten = set(affected)  # buckets losing or re-pointing entries: their files are merged anew
        grown_buckets: dict[str, tuple[int, ...]] = {}
        per_bucket: dict[int, pa.Table] = {}
        new_stats: dict[str, tuple[int, tuple[int, ...]]] = {p: (0, ()) for p in new_paths}
        if rows is not None and rows.num_rows:
            ids = pa.array([new_ids[p] for p in rows.column("file").to_pylist()], pa.int32())
            key_schema = self._arrow_key_schema()
            entries = pa.table([*(rows.column(c).cast(key_schema.field(c).type) for c in state.key_columns), ids,
                                rows.column("pos").cast(pa.int64())],
                               names=[*state.key_columns, FILE_ID, POS])
            buckets = rows.column(_ADDED_BUCKET).to_numpy(zero_copy_only=False)
            for b in np.unique(buckets).tolist():
                per_bucket[int(b)] = entries.filter(pa.array(buckets == b))
            affected.update(per_bucket)
            files_col = rows.column("file").to_numpy(zero_copy_only=False)
            for path in new_paths:
                mine = buckets[files_col == path]
                new_stats[path] = (int(mine.size), tuple(sorted(int(b) for b in np.unique(mine))))
            for path in grown:
                grown_buckets[path] = tuple(int(b) for b in np.unique(buckets[files_col == path]))
        per_bucket_entries = self._rows_total(state) // n
        as_delta = sorted(b for b, entries in per_bucket.items()
                          if b not in rewritten and _takes_delta(state, b, entries.num_rows, per_bucket_entries))
        merged = sorted(affected - set(as_delta))
        names = {**unique_names("b", merged), **unique_names("d", as_delta)}
        drop_ids = frozenset(f.file_id for f in dropped)

        def one(bucket: int) -> tuple[int, dict[int, int], int]:
            files = [self._store.path(name) for name in state.bucket_files(bucket)]
            if bucket in as_delta:
                return bucket, {}, write_delta(files[0], self._store.path(names[bucket]),
                                               key_columns=state.key_columns, added=per_bucket[bucket],
                                               table=state.table)
            counts, left = merge_bucket(files, self._store.path(names[bucket]), key_columns=state.key_columns,
                                        remap=remap, drop_ids=drop_ids, added=per_bucket.get(bucket),
                                        table=state.table)
            return bucket, counts, left

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1, max(1, len(affected)))) as pool:
            done = list(pool.map(one, [*as_delta, *merged]))
        changes: dict[int, list[str]] = {}
        removed_counts: dict[int, int] = {}
        for bucket, counts, left in done:
            if bucket in as_delta:
                changes[bucket] = [*state.bucket_files(bucket), names[bucket]]
            else:
                changes[bucket] = [names[bucket]] if left else []
            for file_id, count in counts.items():
                removed_counts[file_id] = removed_counts.get(file_id, 0) + count
        files = []
        for f in state.files:
            if f.file_id in drop_ids:
                continue
            if f.path in pairs:
                files.append(_grow(replace(f, path=pairs[f.path], deletes=None), grown, grown_buckets))
            elif f.file_id in remap:
                dst, gone = shifts[f.path]
                count = f.record_count - len(gone) if f.record_count >= 0 else -1
                files.append(_grow(IndexedFile(remap[f.file_id][0], dst, count,
                                               f.indexed_rows - removed_counts.get(f.file_id, 0), None, f.buckets),
                                   grown, grown_buckets))
            else:
                files.append(f)
        for path in new_paths:
            count, buckets_of = new_stats[path]
            files.append(IndexedFile(new_ids[path], path, count, count, None, buckets_of))
        new_state = replace(state.with_bucket_files(changes), table_version=result.version, files=tuple(files),
                            next_file_id=next_id, state_version=state.state_version + 1)
        checkpoint("index-written")
        self._store.write_state(new_state)
        self.state = new_state
        self._store.garbage_collect()
        return IndexMetrics(
            "apply_commit(local)", result.version, rows_indexed=rows.num_rows if rows is not None else 0,
            rows_total=self._rows_total(new_state), num_buckets=n, buckets_rewritten=len(merged),
            delta_files_written=len(as_delta), files_reindexed=sorted(new_paths),
            files_dropped=sorted([*(f.path for f in dropped), *shifts]),
            files_repointed=sorted([*pairs.values(), *(dst for dst, _ in shifts.values())]),
        )

    def _shift(self, base: IndexState, shifts: Mapping[str, tuple[str, np.ndarray]], *, version: int,
               repointed: Sequence[str]) -> IndexMetrics:
        """Entries of files that lost rows: drop the removed positions, shift the later ones, point at the new file.

        One Spark task per touched bucket file patches its ``file id`` and ``pos`` columns with the Parquet engine
        and deletes the removed entries: the key columns' pages are copied or re-encoded in place, the file stays
        sorted by key, and no data file is read.
        """
        n = base.num_buckets
        next_id = base.next_file_id
        remap: dict[int, tuple[int, np.ndarray]] = {}
        affected: set[int] = set()
        for f in base.files:
            if f.path in shifts:
                remap[f.file_id] = (next_id, shifts[f.path][1])
                affected.update(range(n) if f.buckets is None else f.buckets)
                next_id += 1
        # every file of a bucket, base and deltas, is patched on its own: each stays sorted
        names = {(b, i): unique_names("b", [b])[b] for b in sorted(affected) for i in range(len(base.bucket_files(b)))}
        tasks = [((b, i), self._store.path(base.bucket_files(b)[i]), self._store.path(name))
                 for (b, i), name in names.items()]
        removed: dict[int, int] = {}
        kept: dict[int, dict[int, str]] = {b: {} for b in affected}
        if tasks:
            job = partial(_shift_bucket_files, remap=remap)
            done = self.spark.sparkContext.parallelize(tasks, len(tasks)).mapPartitions(job).collect()
            for (bucket, i), counts, left in done:
                if left:  # an emptied file is dropped; an emptied bucket is recorded as empty
                    kept[bucket][i] = names[(bucket, i)]
                for file_id, count in counts.items():
                    removed[file_id] = removed.get(file_id, 0) + count
        changes = {b: [files[i] for i in sorted(files)] for b, files in kept.items()}
        files = []
        for f in base.files:
            if f.file_id in remap:
                gone = removed.get(f.file_id, 0)
                dst = shifts[f.path][0]
                count = f.record_count - len(shifts[f.path][1]) if f.record_count >= 0 else -1
                files.append(IndexedFile(remap[f.file_id][0], dst, count, f.indexed_rows - gone, None, f.buckets))
            else:
                files.append(f)
        state = replace(base.with_bucket_files(changes), table_version=version, files=tuple(files),
                        next_file_id=next_id, state_version=self.state.state_version + 1)
        checkpoint("index-written")
        self._store.write_state(state)
        self.state = state
        self._store.garbage_collect()
        return IndexMetrics(
            "apply_commit", version, rows_total=self._rows_total(state), num_buckets=n,
            buckets_rewritten=len(changes), files_dropped=sorted(shifts),
            files_repointed=sorted([*repointed, *(dst for dst, _ in shifts.values())]),
        )


def _grow(f: IndexedFile, grown: Mapping[str, int], buckets: Mapping[str, tuple[int, ...]]) -> IndexedFile:
    """``f`` after ``grown[f.path]`` rows were appended to it, their entries in ``buckets[f.path]``."""
    added = grown.get(f.path, 0)
    if not added:
        return f
    return replace(f, record_count=f.record_count + added if f.record_count >= 0 else -1,
                   indexed_rows=f.indexed_rows + added,
                   buckets=None if f.buckets is None else tuple(sorted({*f.buckets, *buckets.get(f.path, ())})))


# A bucket takes at most this many delta files before its next change merges them into a new base file
# (``PARTIALCOW_INDEX_MAX_DELTAS`` overrides it; 0 merges at every change, as before delta files existed).
MAX_DELTA_FILES = 8
MAX_DELTAS_ENV = "PARTIALCOW_INDEX_MAX_DELTAS"
# A commit's entries for a bucket go into a delta file while they are at most this share of its usual size.
DELTA_SHARE = 1 / 16


def _takes_delta(state: IndexState, bucket: int, entries: int, per_bucket: int) -> bool:
    """Whether ``entries`` new entries of ``bucket`` (the index holding about ``per_bucket`` per bucket) are written
    as a delta file: the bucket has a base file, fewer than ``MAX_DELTA_FILES`` deltas, and the entries are few.

    Merging reads, sorts and writes the whole bucket for a handful of entries; a delta costs one small write now
    and one more file to read per lookup until the next merge (``bench/README.md``).
    """
    files = state.bucket_files(bucket)
    limit = int(os.environ.get(MAX_DELTAS_ENV, MAX_DELTA_FILES))
    return bool(files) and len(files) <= limit and entries <= per_bucket * DELTA_SHARE
