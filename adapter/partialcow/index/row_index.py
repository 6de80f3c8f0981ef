"""The row-level index: record key -> (data file, row position), kept as bucketed Parquet next to the table data.

Why a folder ``<table location>/_partialcow_index/`` (see ``partialcow.index.storage`` for its layout): it shares
the table's lifecycle (dropping or moving the table folder takes the index along), needs no catalog entry, and is
plain Parquet + JSON any engine can read. Iceberg and Delta readers only open files their metadata lists, so the
folder is invisible to them; their cleanup jobs skip it too because its name starts with an underscore: Iceberg's
``remove_orphan_files`` and delta-rs' full ``vacuum`` leave it alone (``tests/index`` checks both with dry runs
that do list a planted orphan file), and Delta's own ``VACUUM`` is documented to skip every folder starting with
``_`` except partition folders (``name=value``, which ours is not).

Bucketing: each row goes to bucket ``pmod(xxhash64(key...), N)`` (Spark's function, reproduced in
``partialcow.index.hashing``); a bucket is one immutable Parquet file sorted by key. A lookup reads only the buckets
its keys hash to. N is chosen at (re)build time from the table's row count (``rows_per_bucket``) and kept by
incremental maintenance; ``rebuild`` re-chooses it.

Incremental maintenance rewrites only the buckets that hold rows of removed files or rows of added files; a file
rewritten with the same rows in the same order (a partial copy-on-write update of non-key columns) is re-pointed
in the state file without touching any bucket. A file rewritten minus some rows (a partial copy-on-write delete)
has its entries shifted in the buckets that hold them: each bucket file is patched by the Parquet page engine, one
Spark task per bucket, without reading the data file or re-sorting (what that saves: bench/README.md, "Measurements
behind code choices").
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from partialcow.exceptions import (
    ConfigurationError,
    DuplicateKeyError,
    IndexError_,
    StaleIndexError,
    UnusableIndexError,
)
from partialcow.faults import checkpoint
from partialcow.index import bucket_files
from partialcow.index.bucket_files import (
    _DUPLICATE_SAMPLE,
    _MAX_BUCKETS,
    _RESERVED,
    _ROWS_PER_BUCKET,
    BUCKET,
    _bucket_expr,
    _choose_buckets,
    duplicate_error,
    write_bucket_files,
)
from partialcow.index.driver_side import _DriverSide
from partialcow.index.hashing import SUPPORTED_KEY_TYPES
from partialcow.index.results import IndexMetrics, LookupResult, VerifyReport
from partialcow.index.storage import IndexedFile, IndexState, IndexStore
from partialcow.parquet import remove_sidecar
from partialcow.table.base import FILE_ID, POS, CommitResult, DataFile, TableSource, quote_identifier
from partialcow.table.paths import local_path

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["IndexMetrics", "LookupResult", "RowIndex", "VerifyReport"]

#: ``IndexState.extra`` entry: the key columns' ids in the table (``TableSource.column_ids``) when they were indexed
_KEY_IDS = "key_column_ids"


def key_identity(source: TableSource, key_columns: Sequence[str]) -> dict[str, Any]:
    """What an index state records of its key columns' identity, beside their names and types (``extra``
    entries): their ids in the table, where the format has ids. :meth:`RowIndex.ensure_fresh` re-indexes when a
    key name has moved to another column."""
    ids = source.column_ids()
    found = [ids.get(c.lower()) for c in key_columns]
    return {_KEY_IDS: found} if any(i is not None for i in found) else {}


def _same_place(a: str, b: str) -> bool:
    """Whether two table locations name one folder (``file:`` URIs and plain paths alike).

    >>> _same_place("file:/w/t/", "/w/t"), _same_place("/w/t", "/w/u")
    (True, False)
    """
    return (local_path(a) or a).rstrip("/") == (local_path(b) or b).rstrip("/")


class RowIndex(_DriverSide):
    """The row-level index of one table.

    Build it once, then keep it fresh after every commit::

        table = IcebergTable(spark, "db.events")            # or DeltaRsTable("/data/events", spark=spark)
        index = RowIndex.create(table, key_columns=["id"])
        hits = index.lookup(spark.createDataFrame([(1,), (2,)], "id bigint"))
        hits.found.show(); hits.missing.show()              # id, file, pos / id
        index.apply_commit(result)                          # after one of our commits
        index.ensure_fresh()                                # before serving, if others may have written
        assert index.verify().ok

    The same calls run in ``tests/index`` against Spark, with pyarrow reading the data files as the oracle.

    ``RowIndex.open(table)`` loads an existing index. The index reads its table through the ``TableSource`` half of
    ``partialcow.table``'s tables, the very object that commits to it.
    """

    def __init__(self, source: TableSource, state: IndexState, store: IndexStore) -> None:
        self.source = source
        self.state = state
        self._store = store
        self.last_metrics: IndexMetrics | None = None

    # -- construction -------------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        source: TableSource,
        *,
        key_columns: Sequence[str],
        num_buckets: int | None = None,
        rows_per_bucket: int = _ROWS_PER_BUCKET,
    ) -> RowIndex:
        """Build the index of ``source``'s current snapshot (replacing any existing index) and return it.

        ``last_metrics`` holds the build metrics (duration, rows, buckets).
        """
        key_columns = tuple(key_columns)
        if not key_columns:
            raise ConfigurationError(f"table {source.name}: the index needs at least one key column")
        clash = sorted(set(key_columns) & _RESERVED)
        if clash:
            raise ConfigurationError(
                f"table {source.name}: key column name(s) {clash} are reserved by the index; rename them"
            )
        store = IndexStore(source.location)
        empty = IndexState(
            table=source.name,
            table_format=source.table_format,
            location=source.location,
            key_columns=key_columns,
            key_types=(),
            num_buckets=1,
            table_version=-1,
            files=(),
            buckets=(None,),
            next_file_id=0,
            state_version=store.latest_state_version() or 0,
        )
        index = cls(source, empty, store)
        index.rebuild(num_buckets=num_buckets, rows_per_bucket=rows_per_bucket)
        return index

    @classmethod
    def open(cls, source: TableSource) -> RowIndex:
        """Load the index stored next to ``source``'s data; ``IndexError_`` if there is none."""
        store = IndexStore(source.location)
        state = store.read_state()
        if state is None:
            raise IndexError_(
                f"table {source.name} has no row index under {store.root}; build one with RowIndex.create(...) or "
                "`partialcow index rebuild`"
            )
        # a table folder copied with its index (a Delta table cloned by copying its folder), or a re-created table
        # of another format, holds an index of other files: its version number may even match
        if not _same_place(state.location, source.location) or state.table_format != source.table_format:
            raise UnusableIndexError(
                f"the row index under {store.root} is that of the {state.table_format} table at {state.location}, "
                f"not of table {source.name}; the next write, or `partialcow index rebuild`, builds it again",
                key_columns=state.key_columns)
        damaged = store.unusable_files(state)
        if damaged:
            raise UnusableIndexError(
                f"the row index of table {source.name} names bucket file(s) {damaged[:3]} that are missing or "
                "damaged; the next write, or `partialcow index rebuild`, builds it again",
                key_columns=state.key_columns)
        return cls(source, state, store)

    @staticmethod
    def exists(source: TableSource) -> bool:
        return IndexStore(source.location).latest_state_version() is not None

    @property
    def spark(self) -> SparkSession:
        return self.source.spark

    @property
    def key_columns(self) -> tuple[str, ...]:
        return self.state.key_columns

    # -- full build -----------------------------------------------------------------------------------------------
    def rebuild(self, *, num_buckets: int | None = None, rows_per_bucket: int = _ROWS_PER_BUCKET) -> IndexMetrics:
        """Re-index every live file of the current snapshot into a new generation (bucket count re-chosen)."""
        started = time.monotonic()
        version = self.source.current_version()
        live = self.source.live_files(version)
        if num_buckets is None:
            total = sum(max(f.record_count, 0) for f in live)
            unknown = [f.path for f in live if f.record_count < 0]
            if unknown:  # e.g. Delta files written without stats: Spark counts them from the Parquet footers
                total += self.spark.read.parquet(*unknown).count()
            num_buckets = _choose_buckets(total, rows_per_bucket)
        if not 1 <= num_buckets <= _MAX_BUCKETS:
            raise ConfigurationError(
                f"table {self.source.name}: num_buckets must be in 1..{_MAX_BUCKETS}, got {num_buckets}"
            )
        base = replace(
            self.state,
            num_buckets=num_buckets,
            buckets=(None,) * num_buckets,
            deltas=(),
            files=(),
            next_file_id=0,
            key_types=(),  # re-read from the data: a rebuild adopts the table's current key types
        )
        metrics = self._update(base, version=version, drop=(), add=live, full=True, operation="rebuild")
        metrics.duration_ms = int((time.monotonic() - started) * 1000)
        self.last_metrics = metrics
        return metrics

    # -- lookup ---------------------------------------------------------------------------------------------------
    def lookup(
        self,
        keys: DataFrame,
        *,
        file_column: str = "file",
        pos_column: str = "pos",
        check_duplicates: bool = True,
        broadcast_keys: bool = False,
        file_ids: bool = False,
        keep: Sequence[str] = (),
        expected_keys: int | None = None,
    ) -> LookupResult:
        """Find where ``keys`` (a DataFrame with the key columns) live, without collecting keys to the driver.

        Only the distinct bucket numbers of the keys are collected (at most ``num_buckets`` ints) to choose which
        bucket files to read. Keys are cast to the index's key types first, so ``1`` finds a ``bigint`` key 1.
        ``check_duplicates`` reads the matched index rows in one Spark job, raises ``DuplicateKeyError`` if a key
        appears twice, and keeps those rows (a local checkpoint) for ``found`` and ``missing`` to reuse.
        Without it the index is trusted: builds and maintenance already refuse duplicates. Keys are not
        deduplicated: a key given twice is found twice. ``broadcast_keys`` (for key sets that fit in memory) probes
        the index scan with a broadcast copy of the keys instead of shuffling every index row of the read buckets.
        ``file_ids`` leaves files as the index's int ids (``file_column`` then holds ids; ``file_paths`` maps them),
        which keeps the rows of a large lookup small. ``keep`` names columns of ``keys`` carried into ``found``.
        ``expected_keys`` (about how many keys there are): from four keys per bucket on, every bucket is read without
        the job that finds the keys' buckets (each bucket then holds a key with probability above 98%).
        """
        from pyspark.sql import functions as F

        missing_columns = [c for c in self.key_columns if c not in keys.columns]
        if missing_columns:
            raise ConfigurationError(
                f"lookup on the index of {self.state.table}: the keys DataFrame lacks key column(s) {missing_columns}"
            )
        kept = [F.col(quote_identifier(c)) for c in keep]
        if self.state.key_types:
            typed = keys.select(
                *[F.col(quote_identifier(c)).cast(t).alias(c) for c, t in zip(self.key_columns, self.state.key_types)],
                *kept,
            )
        else:  # an index of an empty table has not seen the key types yet
            typed = keys.select(*[F.col(quote_identifier(c)) for c in self.key_columns], *kept)
        if self.state.num_buckets == 1:
            wanted = [0]  # nothing to prune: skip the Spark job that finds the keys' buckets
        elif expected_keys is not None and expected_keys >= 4 * self.state.num_buckets:
            wanted = list(range(self.state.num_buckets))  # nearly all would be wanted: skip that job too
        else:
            bucket = _bucket_expr(self.key_columns, self.state.num_buckets).alias(BUCKET)
            wanted = sorted(r[0] for r in typed.select(bucket).distinct().collect() if r[0] is not None)
        names = [name for b in wanted for name in self.state.bucket_files(b)]
        index_rows = self._read_index(names)
        keys_list = list(self.key_columns)
        if check_duplicates:
            # The index rows of the wanted keys are few (about one per key): materialise them once for the
            # duplicate check and let found/missing reuse them instead of scanning the buckets again. A local
            # checkpoint (not persist) so Spark frees the blocks by itself once the DataFrames are gone.
            index_rows = index_rows.join(typed.select(*keys_list).distinct(), keys_list, "left_semi").localCheckpoint(
                eager=True
            )
            dups = index_rows.groupBy(*keys_list).count().where("count > 1").limit(_DUPLICATE_SAMPLE).collect()
            if dups:
                raise self._duplicate_error(dups)
        probe = F.broadcast(typed) if broadcast_keys else typed
        found = index_rows.join(probe, keys_list, "inner")
        if file_ids:
            found = found.withColumnRenamed(FILE_ID, file_column)
        else:
            found = found.join(self._files_frame(file_column), FILE_ID)
        found = found.select(*[F.col(quote_identifier(c)) for c in self.key_columns], F.col(file_column),
                             F.col(POS).alias(pos_column), *kept)
        missing = typed.join(index_rows, keys_list, "left_anti").select(*keys_list)
        return LookupResult(found=found, missing=missing, buckets_read=len(names))

    def file_paths(self) -> dict[int, str]:
        """The indexed files by id (what ``lookup(..., file_ids=True)`` returns instead of paths)."""
        return {f.file_id: f.path for f in self.state.files}

    # -- lookups in executor tasks (the caller routes rows by bucket and joins with Arrow) -----------------------
    def bucket_column(self) -> Column:
        """The bucket of each row's key: a Spark expression over the key columns cast to the index's key types."""
        from pyspark.sql import functions as F

        typed = [F.col(quote_identifier(c)).cast(t) for c, t in zip(self.key_columns, self.state.key_types)]
        return F.pmod(F.xxhash64(*typed), F.lit(self.state.num_buckets)).cast("int")

    def bucket_paths(self) -> dict[int, tuple[str, ...]]:
        """Local paths of each non-empty bucket's files by bucket number (for tasks that read them with pyarrow)."""
        if not self._store.is_local:
            raise ConfigurationError(f"the row index of {self.state.table} is not on a local file system")
        return {b: tuple(self._store.path(name) for name in names) for b in range(self.state.num_buckets)
                if (names := self.state.bucket_files(b))}

    def new_scratch_dir(self) -> str:
        """A new, empty local folder inside the index folder for one write's intermediate files.

        The writer deletes it when done; one left by a crash is removed by the index's garbage collection.
        """
        if not self._store.is_local:
            raise ConfigurationError(f"the row index of {self.state.table} is not on a local file system")
        path = self._store.path(self._store.new_tmp_dir())
        os.makedirs(path)
        return path

    def apply_commit(
        self,
        result: CommitResult,
        *,
        new_file_rows: DataFrame | None = None,
        same_positions: Mapping[str, str] | None = None,
        shifted: Mapping[str, tuple[str, Sequence[int]]] | None = None,
        added_rows: pa.Table | None = None,
        appended_rows: pa.Table | None = None,
    ) -> IndexMetrics:
        """Bring the index to ``result.version`` after a commit of ours.

        - ``same_positions`` maps removed -> added paths whose files hold the same keys in the same row order (a
          partial copy-on-write update of non-key columns): these are re-pointed, no bucket is rewritten.
        - ``shifted`` maps removed -> (added path, sorted positions removed): the added file holds the removed file's
          rows minus those positions, in the same order (a partial copy-on-write delete). When the commit changed
          nothing else, the entries are shifted in place (the touched bucket files patched by the Parquet engine; no
          data file read, no shuffle); otherwise those files are re-indexed like any added file.
        - the other removed files are dropped and the other added files are indexed, from ``new_file_rows``
          (``key..., file, pos`` of the added files, if the writer has them) or by reading the added files.
        - ``added_rows`` (Arrow: ``key..., file, pos, _pcow_bucket`` of every row of the other added files, with the
          index's bucket of each key) lets the whole change be applied without Spark: each affected bucket file is
          merged on the driver (see ``partialcow.index.local``). Used when the index is local, has seen its key
          types and does not need more buckets.
        - ``appended_rows`` (the same columns as ``added_rows``): rows appended to files of ``same_positions`` or
          ``shifted``, at their positions in the added file. Merged on the driver with ``added_rows``; where that
          path is not taken, those files are re-indexed like any added file.

        If the index was not at ``result.previous_version`` (someone else committed in between) it falls back to
        ``ensure_fresh``-style repair against the table at ``result.version``.
        """
        started = time.monotonic()
        if result.previous_version != self.state.table_version:
            metrics = self._refresh_to(result.version, operation="apply_commit(repair)")
        else:
            norm = self.source.normalize_path
            pairs = {norm(a): norm(b) for a, b in (same_positions or {}).items()}
            shifts = {norm(a): (norm(b), np.unique(np.asarray(gone, dtype=np.int64)))
                      for a, (b, gone) in (shifted or {}).items()}
            removed = [norm(p) for p in result.removed]
            added = [norm(p) for p in result.added]
            unknown = sorted((set(removed) | set(pairs) | set(shifts)) - set(self.state.by_path()))
            if unknown:
                raise StaleIndexError(
                    f"index of {self.state.table}: commit {result.version} removed file(s) the index does not cover "
                    f"({unknown[:3]}); rebuild the index"
                )
            local = self._apply_local(result, pairs, shifts, removed, added, added_rows, appended_rows)
            if local is not None:
                local.duration_ms = int((time.monotonic() - started) * 1000)
                self.last_metrics = local
                return local
            if appended_rows is not None and appended_rows.num_rows:
                grown = {norm(p) for p in appended_rows.column("file").to_pylist()}
                pairs = {a: b for a, b in pairs.items() if b not in grown}
                shifts = {a: (b, gone) for a, (b, gone) in shifts.items() if b not in grown}
            by_path = self.state.by_path()
            files = []
            for f in self.state.files:
                files.append(replace(f, path=pairs[f.path], deletes=None) if f.path in pairs else f)
            base = replace(self.state, files=tuple(files))
            drop = [by_path[p] for p in removed if p not in pairs and p not in shifts]
            targets = set(pairs.values()) | {dst for dst, _ in shifts.values()}
            add = [DataFile(p, -1) for p in added if p not in targets]
            if shifts and not drop and not add and self._store.is_local \
                    and not any(by_path[p].deletes for p in shifts):
                metrics = self._shift(base, shifts, version=result.version, repointed=sorted(pairs.values()))
                metrics.duration_ms = int((time.monotonic() - started) * 1000)
                self.last_metrics = metrics
                return metrics
            drop += [by_path[p] for p in shifts]
            add += [DataFile(dst, -1) for dst, _ in shifts.values()]
            metrics = self._update(
                base, version=result.version, drop=drop, add=add, full=False, operation="apply_commit",
                new_rows=new_file_rows, aliases={a: norm(a) for a in result.added}, repointed=sorted(pairs.values()),
            )
        metrics.duration_ms = int((time.monotonic() - started) * 1000)
        self.last_metrics = metrics
        return metrics

    def ensure_fresh(self) -> IndexMetrics:
        """Make the index reflect the table's current version, re-indexing only the files that changed.

        Files that disappeared are dropped, new files are indexed, and files whose delete files changed (Iceberg
        merge-on-read deletes by other writers) are re-indexed. A no-op when the version did not move.
        """
        started = time.monotonic()
        version = self.source.current_version()
        recorded = self.state.extra.get(_KEY_IDS)
        if recorded is not None and list(recorded) != key_identity(self.source, self.key_columns).get(_KEY_IDS):
            # A key name now names another column (Iceberg renames commit no snapshot): every entry holds the old
            # column's values, so a key would be found in the row of another key. A new generation.
            return self.rebuild()
        if version == self.state.table_version:
            metrics = IndexMetrics(
                "ensure_fresh", version, rows_total=self._rows_total(self.state), num_buckets=self.state.num_buckets
            )
        else:
            metrics = self._refresh_to(version, operation="ensure_fresh")
        metrics.duration_ms = int((time.monotonic() - started) * 1000)
        self.last_metrics = metrics
        return metrics

    def _refresh_to(self, version: int, *, operation: str) -> IndexMetrics:
        live = self.source.live_files(version)
        recorded = self.state.by_path()
        current = {f.path: f for f in live}
        drop = [f for p, f in recorded.items() if p not in current or current[p].deletes != f.deletes]
        add = [f for p, f in current.items() if p not in recorded or recorded[p].deletes != f.deletes]
        metrics = self._update(self.state, version=version, drop=drop, add=add, full=False, operation=operation)
        self._forget_fingerprints([p for p in recorded if p not in current])
        return metrics

    def _forget_fingerprints(self, paths: Sequence[str]) -> None:
        """Remove the row-fingerprint sidecars of data files the table no longer has live (replaced by another
        writer, or by a write of ours that crashed before removing them): no later batch rewrites those files."""
        root = local_path(self.source.location) if paths else None
        for path in paths:
            local = local_path(path)
            if local is None and root is not None and "://" not in path and ":" not in path.split("/")[0]:
                local = os.path.join(root, path)  # a path relative to the table (Delta)
            if local is not None:
                with suppress(OSError):
                    remove_sidecar(local)

    def _update(
        self,
        base: IndexState,
        *,
        version: int,
        drop: Sequence[IndexedFile],
        add: Sequence[DataFile],
        full: bool,
        operation: str,
        new_rows: DataFrame | None = None,
        aliases: Mapping[str, str] | None = None,
        repointed: Sequence[str] = (),
    ) -> IndexMetrics:
        """Drop ``drop``'s entries, index ``add``, rewrite the affected buckets, publish a new state.

        An index that grows to twice its buckets' target size (a table created empty and then loaded, or grown batch
        by batch) is laid out again with the bucket count its size calls for: otherwise one task reads the whole
        index of a large table and lookups prune nothing.
        """
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        n = base.num_buckets
        aliases = aliases or {}
        next_id = base.next_file_id
        new_ids: dict[str, int] = {}
        for live in add:
            new_ids[live.path] = next_id
            next_id += 1
        rows = None
        if add:
            if new_rows is not None:
                # the writer may spell paths as its committer reported them: accept both spellings
                spellings = {
                    **{p: i for p, i in new_ids.items()},
                    **{a: new_ids[n] for a, n in aliases.items() if n in new_ids},
                }
                ids = self.spark.createDataFrame(list(spellings.items()), f"file string, {FILE_ID} int")
                rows = new_rows.join(F.broadcast(ids), "file").select(
                    *[F.col(quote_identifier(c)) for c in self.key_columns],
                    FILE_ID,
                    F.col("pos").cast("bigint").alias(POS),
                )
            else:
                rows = self.source.read_rows(self.key_columns, version=version, files=new_ids)
        key_types = base.key_types
        if rows is not None:
            read_types = dict(rows.dtypes)
            actual = tuple(read_types[c] for c in self.key_columns)
            unsupported = [f"{c} {t}" for c, t in zip(self.key_columns, actual) if t not in SUPPORTED_KEY_TYPES]
            if unsupported:
                raise ConfigurationError(
                    f"table {base.table}: key column(s) {unsupported} have types the index cannot hash; supported: "
                    f"{sorted(SUPPORTED_KEY_TYPES)}"
                )
            if key_types and key_types != actual:
                raise StaleIndexError(
                    f"index of {base.table}: key types changed from {list(key_types)} to {list(actual)}; "
                    "rebuild the index"
                )
            key_types = actual
            rows = rows.withColumn(BUCKET, _bucket_expr(self.key_columns, n)).persist(StorageLevel.MEMORY_AND_DISK)
        persisted = rows
        try:
            stats: dict[int, tuple[int, tuple[int, ...] | None]] = {}
            if rows is not None:
                per_file = rows.groupBy(FILE_ID).agg(F.count(F.lit(1)).alias("n"), F.collect_set(BUCKET).alias("b"))
                for r in per_file.select(FILE_ID, "n", F.when(F.size("b") < n, F.col("b")).alias("b")).collect():
                    stats[r[FILE_ID]] = (int(r["n"]), None if r["b"] is None else tuple(sorted(r["b"])))
            rows_after = (self._rows_total(base) - sum(f.indexed_rows for f in drop)
                          + sum(count for count, _ in stats.values()))
            relayout = not full and _choose_buckets(rows_after, bucket_files._ROWS_PER_BUCKET) >= 2 * n
            if relayout:
                n = _choose_buckets(rows_after, bucket_files._ROWS_PER_BUCKET)
                if rows is not None:
                    rows = rows.withColumn(BUCKET, _bucket_expr(self.key_columns, n))
                # which new buckets a file's rows fall in is not known without reading them: any
                stats = {file_id: (count, None) for file_id, (count, _) in stats.items()}
            affected: set[int] = set(range(n)) if full or relayout else set()
            if not full:
                for f in drop:
                    affected.update(range(n) if f.buckets is None else f.buckets)
                for _, buckets in stats.values():
                    affected.update(range(n) if buckets is None else buckets)
            affected_list = sorted(affected)
            drop_ids = [f.file_id for f in drop]
            parts: list[DataFrame] = []
            old_buckets = range(base.num_buckets) if relayout else affected_list
            old_names = [name for b in old_buckets for name in base.bucket_files(b)]
            if old_names and not full:
                old = self._read_index(old_names)
                if drop_ids:
                    old = old.where(~F.col(FILE_ID).isin(drop_ids))
                parts.append(old.withColumn(BUCKET, _bucket_expr(self.key_columns, n)))
            if rows is not None:
                parts.append(rows)
            changes: dict[int, list[str]] = {b: [] for b in affected_list}
            if parts:
                merged = parts[0]
                for p in parts[1:]:
                    merged = merged.unionByName(p)
                changes.update({b: [name] for b, name in self._write_buckets(merged, affected_list).items()})
        finally:
            if persisted is not None:
                persisted.unpersist()
        dropped = {f.file_id for f in drop}
        files = [f for f in base.files if f.file_id not in dropped]
        if relayout:
            files = [replace(f, buckets=None) for f in files]
        live_by_path = {f.path: f for f in add}
        for path, file_id in new_ids.items():
            indexed, buckets = stats.get(file_id, (0, ()))
            count = live_by_path[path].record_count
            files.append(
                IndexedFile(
                    file_id, path, count if count >= 0 else indexed, indexed, live_by_path[path].deletes, buckets
                )
            )
        laid_out = replace(base, num_buckets=n, buckets=(None,) * n, deltas=()) if relayout else base
        state = replace(
            laid_out.with_bucket_files(changes),
            extra={**base.extra, **key_identity(self.source, self.key_columns)},
            key_types=key_types,
            table_version=version,
            files=tuple(files),
            next_file_id=next_id,
            state_version=self.state.state_version + 1,
        )
        checkpoint("index-written")
        self._store.write_state(state)
        self.state = state
        self._store.garbage_collect()
        return IndexMetrics(
            operation,
            version,
            rows_indexed=sum(s[0] for s in stats.values()),
            rows_total=self._rows_total(state),
            num_buckets=n,
            buckets_rewritten=len(affected_list),
            files_reindexed=sorted(new_ids),
            files_dropped=sorted(f.path for f in drop),
            files_repointed=list(repointed),
        )

    def _write_buckets(self, merged: DataFrame, buckets: Sequence[int]) -> dict[int, str]:
        """See :func:`write_bucket_files`."""
        return write_bucket_files(self.spark, self._store, self.key_columns, self.state.table, merged, buckets)

    # -- verification ---------------------------------------------------------------------------------------------
    def verify(self) -> VerifyReport:
        """Compare the whole index with a fresh scan of the table (see :func:`partialcow.index.verify.verify`)."""
        from partialcow.index.verify import verify

        return verify(self)

    # -- helpers ------------------------------------------------------------------------------------------------------
    def _read_index(self, names: Sequence[str], *, with_bucket: bool = False) -> DataFrame:
        from pyspark.sql import functions as F

        if not names:
            frame = self._empty_rows()
            return frame.withColumn(BUCKET, F.lit(None).cast("int")) if with_bucket else frame
        # the schema is known: without it Spark would run a job to read it from the files' footers
        frame = self.spark.read.schema(self._row_schema()).parquet(*[self._store.uri(n) for n in names])
        if with_bucket:
            # the bucket a row is stored in comes from its file name (data/b00003-....parquet, or d00003-... for a
            # bucket's delta files)
            frame = frame.withColumn(
                BUCKET, F.regexp_extract(F.input_file_name(), r"/[bd](\d{5})-[0-9a-f]+\.parquet$", 1).cast("int")
            )
        return frame

    def _row_schema(self) -> str:
        fields = ", ".join(f"{quote_identifier(c)} {t}" for c, t in zip(self.state.key_columns, self.state.key_types))
        return f"{fields}, {FILE_ID} int, {POS} bigint" if fields else f"{FILE_ID} int, {POS} bigint"

    def _empty_rows(self) -> DataFrame:
        return self.spark.createDataFrame([], self._row_schema())

    def _files_frame(self, file_column: str) -> DataFrame:
        from pyspark.sql import functions as F

        frame = self.spark.createDataFrame(
            [(f.file_id, f.path) for f in self.state.files], f"{FILE_ID} int, {quote_identifier(file_column)} string"
        )
        return F.broadcast(frame)

    def _duplicate_error(self, rows: Iterable) -> DuplicateKeyError:  # type: ignore[type-arg]
        return duplicate_error(self.state.table, self.key_columns, rows)

    @staticmethod
    def _rows_total(state: IndexState) -> int:
        return sum(f.indexed_rows for f in state.files)

    @property
    def store(self) -> IndexStore:
        """The index folder (``store.root``) and its file operations."""
        return self._store
