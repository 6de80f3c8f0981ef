"""A Delta table through delta-rs, without delta-spark: live files from its log, key positions read by Spark's plain
Parquet reader, and commits through delta-rs with our own conflict check.

delta-rs commits remove + add actions in one log version but does not check that the files we remove are still
live, so :class:`DeltaRsTable` reads the log entries written since the change's base version and applies
Delta's optimistic-concurrency rules itself (concurrent removal or rewrite of a file we replace, concurrent
metadata/protocol/domain changes and concurrent appends of the keys we touch are conflicts; other appends are
rebased). The log version file is created with put-if-absent, which is what makes check-then-commit atomic.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from partialcow.exceptions import (
    CommitConflictError,
    CommitError,
    CommitStateUnknownError,
    ConfigurationError,
    UnsupportedTableFeatureError,
)
from partialcow.parquet import INT96_UNIT
from partialcow.table.base import CommitResult, DataFile, FileReplacement
from partialcow.table.delta.conflicts import check_concurrent
from partialcow.table.delta.features import DeltaTableInfo, unsupported_features
from partialcow.table.delta.stats import file_stats, logged_partition_strings, partition_strings
from partialcow.table.paths import uri_local_path
from partialcow.table.positions import read_parquet_positions, refuse_partition_keys

__all__ = ["DeltaRsTable"]


# reader features with which every live file without a deletion vector reads as plain Parquet
_PLAIN_READER_FEATURES = frozenset({"deletionVectors", "timestampNtz", "vacuumProtocolCheck"})
_GLOB = re.compile(r"[*?\[\]{}\\]")  # Spark expands these in the paths it reads


def _lazy_deltalake() -> Any:
    try:
        import deltalake
    except ImportError as exc:  # pragma: no cover - the extra is installed in dev
        raise ConfigurationError(
            "Delta commits without Spark need the deltalake package: pip install 'dbt-partialcow[delta]'"
        ) from exc
    return deltalake


@dataclass(frozen=True)
class _AddAction:
    """A live file as the log's ``add`` action holds it (what a commit needs to remove it)."""

    log_path: str  # as the log writes it (URL-encoded)
    rel_path: str  # decoded: the file's path under the table root
    size: int
    num_records: int | None
    partition_values: dict[str, Any]


def _unmatched_spellings(removed: Sequence[_AddAction]) -> list[str]:
    """Files whose remove delta-rs would spell otherwise than the log's add: it percent-encodes non-ASCII
    characters, which other writers (delta-spark) log as they are, and no reader takes the two for one file: the
    old file would stay live beside its replacement. delta-spark's own commits spell them as its log does."""
    odd = [f.log_path for f in removed if not f.log_path.isascii()]
    if not odd:
        return []
    return [f"file(s) {', '.join(odd[:3])} spelled in the log with characters outside ASCII, which delta-rs's "
            "remove would spell percent-encoded (the file would stay live beside its rewrite): write it through a "
            "Spark session with Delta (profile table_format: delta)"]


class DeltaRsTable:
    """One Delta table through delta-rs (no JVM for its log and commits; Spark only reads key positions).

    Args:
        table_uri: the table root (local path, ``file://``, ``s3://``, ... as delta-rs accepts).
        spark: the session that reads key positions for the row index (``read_rows``); commits need none.
        storage_options: delta-rs storage options (credentials, endpoints, locking provider for S3).
        max_attempts: how many times to re-check and retry when another writer wins the race for the next
            log version.

    >>> import tempfile, pyarrow as pa, deltalake
    >>> root = tempfile.mkdtemp()
    >>> deltalake.write_deltalake(root, pa.table({"id": [1, 2]}))
    >>> t = DeltaRsTable(root)
    >>> t.current_version(), [f.record_count for f in t.live_files()]
    (0, [2])
    """

    table_format = "delta"

    def __init__(
        self,
        table_uri: str,
        *,
        spark: Any = None,
        storage_options: Mapping[str, str] | None = None,
        max_attempts: int = 5,
    ) -> None:
        if max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1 for Delta table {table_uri}, got {max_attempts}")
        self.spark = spark
        self.name = table_uri
        self._table_uri = table_uri
        self._storage_options = dict(storage_options) if storage_options else None
        self._max_attempts = max_attempts
        self._local_root = _local_root(table_uri)
        self._fs_cache: pafs.FileSystem | None = None
        self._location: str | None = None

    @property
    def table_uri(self) -> str:
        return self._table_uri

    # ---------------------------------------------------------------- reading

    def current_version(self) -> int:
        """The table's latest version.

        >>> import tempfile, pyarrow as pa, deltalake
        >>> root = tempfile.mkdtemp(); deltalake.write_deltalake(root, pa.table({"a": [1]}))
        >>> DeltaRsTable(root).current_version()
        0
        """
        return int(self._open().version())

    @property
    def location(self) -> str:
        """The table root as delta-rs resolves it (no trailing slash); a local one as a decoded path, as a Delta
        table's location is everywhere else (delta-rs percent-encodes its ``file:`` URIs)."""
        if self._location is None:
            self._location = _absolute(str(self._open().table_uri))
        return self._location

    def column_ids(self) -> dict[str, int]:
        return {}  # column mapping (Delta's column ids) is refused, so a name is always the same column

    def normalize_path(self, path: str) -> str:
        """An absolute path or URI for ``path`` as the log spells it (relative to the root, URL-encoded)."""
        if "://" in path or path.startswith("/") or path.startswith("file:"):
            return path if not path.startswith("file:") else _absolute(path)
        return f"{_absolute(self.location)}/{unquote(path)}"

    def live_files(self, version: int | None = None) -> list[DataFile]:
        """The data files live at ``version`` (default: latest); ``deletes`` signs the rows a file's deletion vector
        deletes (None: it has none).

        >>> import tempfile, pyarrow as pa, deltalake
        >>> root = tempfile.mkdtemp(); deltalake.write_deltalake(root, pa.table({"a": [1, 2, 3]}))
        >>> [(f.path.startswith(root), f.record_count) for f in DeltaRsTable(root).live_files(0)]
        [(True, 3)]
        """
        return self._files_of(self._open(version))

    def _files_of(self, table: Any) -> list[DataFile]:
        """The live files of delta-rs ``table`` (one opened version) as :meth:`live_files` gives them."""
        out = []
        vectors = self._deletion_vectors(table)
        for f in self._live(table).values():
            count = f.num_records
            if count is None:  # no stats in the log: the footer knows
                count = self._read_metadata(f.rel_path).num_rows
            out.append(DataFile(path=self.normalize_path(f.log_path), record_count=int(count), file_size_bytes=f.size,
                                deletes=vectors.get(f.rel_path)))
        return out

    def plain_parquet_files(self) -> list[str] | None:
        """The latest version's data files, when Spark's own Parquet reader given the table's schema reads them as
        the table: no partition columns (their values are in the log, not in the files), no column mapping (the
        files name columns physically), no reader feature but deletion vectors, timestampNtz and vacuumProtocolCheck
        (type widening, for one, changes how old files read), no file with a deletion vector, and no path that
        Spark would take for a glob pattern. None otherwise, or without data files. delta-spark plans a scan of a
        table in a fresh process for seconds; listing its files with delta-rs takes a fraction of that.

        >>> import tempfile, pyarrow as pa, deltalake
        >>> root = tempfile.mkdtemp(); deltalake.write_deltalake(root, pa.table({"a": [1, 2]}))
        >>> [p.startswith(root) for p in DeltaRsTable(root).plain_parquet_files()]
        [True]
        >>> root = tempfile.mkdtemp()
        >>> deltalake.write_deltalake(root, pa.table({"a": [1], "p": ["x"]}), partition_by=["p"])
        >>> print(DeltaRsTable(root).plain_parquet_files())
        None
        """
        table = self._open()  # one version for the checks and the listing
        info = DeltaTableInfo.of_delta_rs(table)
        if (info.partition_columns or info.reader_features - _PLAIN_READER_FEATURES
                or info.configuration.get("delta.columnMapping.mode", "none") not in ("", "none")):
            return None
        files = self._files_of(table)
        if not files or any(f.deletes is not None or _GLOB.search(f.path) for f in files):
            return None
        return [f.path for f in files]

    def read_rows(self, key_columns: Sequence[str], *, version: int, files: Mapping[str, int]) -> Any:
        """``key..., _file_id, _pos`` of ``files`` (path -> id), read as plain Parquet: Delta data files are
        immutable, so reading them by path is reading them at ``version``. A file with a deletion vector is refused
        (the plain reader would not apply it)."""
        if self.spark is None:
            raise ConfigurationError(f"Delta table {self.name}: reading key positions needs a Spark session")
        refuse_partition_keys(self.name, key_columns, set(self._open(version).metadata().partition_columns))
        hits = [f.path for f in self.live_files(version) if f.deletes is not None and f.path in files]
        if hits:
            raise UnsupportedTableFeatureError(
                f"Delta table {self.name}: file {hits[0]} has a deletion vector, which the row index cannot read "
                "through Spark's Parquet reader; run OPTIMIZE/purge to materialise deletes, then rebuild the index"
            )
        return read_parquet_positions(self.spark, key_columns, files)

    def check_supported(self, *, removing: bool = True, partitioned_ok: bool = True) -> None:
        """Raise ``UnsupportedTableFeatureError`` if this writer cannot honour the table's features.

        Call it before writing any new file; ``replace_files`` checks again before committing.

        >>> import tempfile, pyarrow as pa, deltalake
        >>> root = tempfile.mkdtemp()
        >>> deltalake.write_deltalake(root, pa.table({"a": [1]}), configuration={"delta.enableChangeDataFeed": "true"})
        >>> try:
        ...     DeltaRsTable(root).check_supported()
        ... except UnsupportedTableFeatureError as exc:
        ...     print("change data feed" in str(exc))
        True
        """
        problems = unsupported_features(DeltaTableInfo.of_delta_rs(self._open()), removing=removing,
                                        partitioned_ok=partitioned_ok)
        if problems:
            raise UnsupportedTableFeatureError(self._refusal_message(problems))

    # ---------------------------------------------------------------- committing

    def replace_files(self, change: FileReplacement) -> CommitResult:
        """Commit ``change`` as one new Delta version: remove ``change.removed``, add ``change.added``.

        ``removed`` are paths live at ``change.base_version`` (as :meth:`live_files` returns them, or the file's
        path under the table root, or an absolute local path). ``added`` are Parquet files already written inside
        the table folder (relative to the root or absolute). On a conflict or refusal nothing is committed and
        the added files are deleted; when the outcome is unknown they are kept and ``CommitStateUnknownError``
        is raised.

        >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq, deltalake
        >>> root = tempfile.mkdtemp(); deltalake.write_deltalake(root, pa.table({"id": [1, 2]}))
        >>> c = DeltaRsTable(root); old = c.live_files()[0].path
        >>> pq.write_table(pa.table({"id": [1, 20]}), os.path.join(root, "new.parquet"))
        >>> r = c.replace_files(FileReplacement(base_version=0, removed=[old], added=["new.parquet"]))
        >>> r.version, sorted(deltalake.DeltaTable(root).to_pyarrow_table()["id"].to_pylist())
        (1, [1, 20])
        """
        started = time.monotonic()
        added: list[str] = []
        try:
            added = [self._relative_added(p) for p in change.added]
            if not change.removed and not added:
                raise CommitError(f"nothing to commit to Delta table {self._table_uri}: no file removed or added")
            _no_duplicates(added, "added", self._table_uri)
            base = self._open_version(change.base_version)
            base_live = self._live(base)
            removed = [self._resolve_removed(p, base_live, change.base_version) for p in change.removed]
            _no_duplicates([f.rel_path for f in removed], "removed", self._table_uri)
            for rel in added:
                if rel in base_live:
                    # A live file must never be deleted by our cleanup: fail before anything else can.
                    raise _KeepFiles(
                        CommitError(
                            f"added file {rel} is already live in Delta table {self._table_uri} at version "
                            f"{change.base_version}; write each new file under a fresh name"
                        )
                    )
            head = self._open()
            problems = unsupported_features(DeltaTableInfo.of_delta_rs(head), removing=bool(removed))
            problems += self._deletion_vector_problems(base, removed)
            problems += _unmatched_spellings(removed)
            if problems:
                raise UnsupportedTableFeatureError(self._refusal_message(problems))
            partition_values = self._partition_values(head, removed, added)
            add_actions = [self._add_action(head, rel, partition_values) for rel in added]
        except _KeepFiles as keep:
            raise keep.error from None
        except CommitError:
            self._delete_quietly(added)
            raise

        commit_id = str(uuid.uuid4())
        referenced_by_others: set[str] = set()
        try:
            # Check-then-commit is atomic because delta-rs creates log file head+1 with put-if-absent (rename
            # without replace locally, conditional put on object stores) and we disable its own retries: every
            # version <= head has been checked, so a commit we have not seen can only be head+1, which makes our
            # put fail; we then reload, check the newcomer, and try head+2.
            for _attempt in range(self._max_attempts):
                head_version = int(head.version())
                check_concurrent(
                    self._table_uri, change, [f.rel_path for f in removed], added, head_version, referenced_by_others,
                    read_entry=self._read_log_entry, read_columns=self._read_parquet,
                )
                outcome = self._commit_once(head, change, removed, add_actions, commit_id, started)
                if outcome is not None:
                    return CommitResult(
                        version=outcome,
                        previous_version=head_version,
                        removed=tuple(f.log_path for f in removed),
                        added=self._logged_paths(outcome, added),
                    )
                head = self._open()  # lost the race for head_version + 1: re-check what landed, then retry
            raise CommitConflictError(
                f"gave up committing to Delta table {self._table_uri} after {self._max_attempts} attempts: other "
                f"writers kept winning the race for the next version; re-run when the table is quieter"
            )
        except CommitStateUnknownError:
            raise
        except CommitError:
            self._delete_quietly([p for p in added if p not in referenced_by_others])
            raise

    # ---------------------------------------------------------------- internals: commit

    def _commit_once(
        self,
        head: Any,
        change: FileReplacement,
        removed: Sequence[_AddAction],
        add_actions: Sequence[Any],
        commit_id: str,
        started: float,
    ) -> int | None:
        """Try to write version ``head.version() + 1``; return it, or None if another writer took that number."""
        from deltalake.exceptions import CommitFailedError, DeltaProtocolError, SchemaMismatchError
        from deltalake.transaction import CommitProperties, RemoveAction

        target = int(head.version()) + 1
        now_ms = int(time.time() * 1000)
        actions: list[Any] = [
            RemoveAction(
                path=f.rel_path,  # delta-rs URL-encodes paths when it writes the log
                data_change=True,
                deletion_timestamp=now_ms,
                size=f.size,
                partition_values=partition_strings(f.partition_values),
            )
            for f in removed
        ]
        actions += add_actions
        summary = change.metrics.as_commit_summary()
        summary["partialcow.duration_ms"] = str(
            max(change.metrics.duration_ms, int((time.monotonic() - started) * 1000))
        )
        custom = {
            "readVersion": int(change.base_version),
            "isolationLevel": "WriteSerializable",
            "isBlindAppend": False,
            # delta-rs fixes commitInfo.operation to WRITE; userMetadata is Delta's field for the caller's label.
            "userMetadata": change.operation,
            "operationParameters": {"partialcow.operation": change.operation},
            "operationMetrics": summary,
            "partialcow.operation": change.operation,
            "partialcow.commitId": commit_id,
        }
        try:
            head.create_write_transaction(
                actions,
                mode="append",
                schema=head.schema(),
                partition_by=list(head.metadata().partition_columns) or None,
                commit_properties=CommitProperties(max_commit_retries=0, custom_metadata=custom),
            )
        except (DeltaProtocolError, SchemaMismatchError) as exc:
            # delta-rs validates these before it writes the log: nothing was committed.
            raise CommitError(f"delta-rs refused the commit to Delta table {self._table_uri}: {exc}") from exc
        except Exception as exc:
            # Failed, lost the race, or failed after writing (e.g. in a post-commit checkpoint): the log says which.
            landed = self._find_commit(commit_id, target, exc)
            if landed is not None:
                return landed
            if isinstance(exc, CommitFailedError) and self._version_exists(target, exc):
                return None
            # Anything else may be an object-store error around the put itself: without proof that nothing
            # landed, keep the files (an orphan file is harmless; a log entry pointing at a deleted one is not).
            raise CommitStateUnknownError(
                f"commit to Delta table {self._table_uri} failed ({exc!r}) and version {target} "
                f"cannot be confirmed absent; the new files are kept. Check the table's history before retrying"
            ) from exc
        landed = self._find_commit(commit_id, target, None)
        if landed is None:
            raise CommitStateUnknownError(
                f"delta-rs reported success but commit {commit_id} is not in the log of Delta table "
                f"{self._table_uri} from version {target}; the new files are kept"
            )
        return landed

    def _logged_paths(self, version: int, added: Sequence[str]) -> tuple[str, ...]:
        """Our added files as the committed log entry spells them (delta-rs URL-encodes on write)."""
        try:
            entries = self._read_log_entry(version)
        except OSError:
            return tuple(added)  # committed already; the decoded paths name the same files
        spelled = {unquote(a["add"]["path"]): a["add"]["path"] for a in entries if "add" in a}
        return tuple(spelled.get(p, p) for p in added)

    def _find_commit(self, commit_id: str, first: int, cause: BaseException | None) -> int | None:
        """The version whose commitInfo carries ``commit_id``, searching from ``first`` while versions exist."""
        version = first
        while True:
            try:
                entries = self._read_log_entry(version)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise CommitStateUnknownError(
                    f"cannot read version {version} of Delta table {self._table_uri} to confirm the commit "
                    f"({exc}); the new files are kept. Check the table's history before retrying"
                ) from (cause or exc)
            for action in entries:
                info = action.get("commitInfo")
                if info is not None and info.get("partialcow.commitId") == commit_id:
                    return version
            version += 1

    def _version_exists(self, version: int, cause: BaseException) -> bool:
        try:
            self._read_log_entry(version)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise CommitStateUnknownError(
                f"cannot read version {version} of Delta table {self._table_uri} ({exc}); the new files are kept"
            ) from cause
        return True

    # ---------------------------------------------------------------- internals: validation

    def _refusal_message(self, problems: Sequence[str]) -> str:
        return (
            f"Delta table {self._table_uri} uses features partial copy-on-write cannot honour: "
            + "; ".join(problems)
            + ". Use a full rewrite (e.g. Spark MERGE) for this table, or disable the feature"
        )

    def _deletion_vectors(self, table: Any) -> dict[str, str]:
        """Relative path -> a signature of the rows its deletion vector deletes, for the live files of delta-rs
        ``table`` that have one. Read through ``deletion_vectors()``: delta-rs' add actions leave the vectors out."""
        if "deletionVectors" not in (table.protocol().reader_features or []):
            return {}
        vectors = pa.table(table.deletion_vectors().read_all())
        selections = vectors.column("selection_vector").combine_chunks()
        offsets = selections.offsets.to_numpy()
        kept = selections.flatten().to_numpy(zero_copy_only=False)
        out = {}
        for i, uri in enumerate(vectors.column("filepath").to_pylist()):
            deleted = np.flatnonzero(~kept[offsets[i]:offsets[i + 1]])
            if deleted.size:
                out[self._relative_any(uri)] = hashlib.sha1(deleted.astype("<i8").tobytes()).hexdigest()[:16]
        return out

    def _deletion_vector_problems(self, base: Any, removed: Sequence[_AddAction]) -> list[str]:
        if not removed or "deletionVectors" not in (base.protocol().reader_features or []):
            return []
        wanted = {f.rel_path for f in removed}
        try:
            batches = base.deletion_vectors().read_all()
        except Exception as exc:  # noqa: BLE001 - any failure means we cannot prove the files are DV-free
            return [f"deletion vectors (cannot read them to check the replaced files: {exc})"]
        with_dv = {self._relative_any(uri) for uri in pa.table(batches).column("filepath").to_pylist()}
        return [f"a deletion vector on replaced file {p}" for p in sorted(wanted & with_dv)]

    def _resolve_removed(self, path: str, live: Mapping[str, _AddAction], base_version: int) -> _AddAction:
        if _is_absolute(path):
            hit = live.get(self._relative_any(path))
        else:
            # The log's (URL-encoded) form first, then the file's own path under the root.
            hit = next((f for f in live.values() if f.log_path == path), None) or live.get(path)
        if hit is not None:
            return hit
        raise CommitConflictError(
            f"file {path} is not live in Delta table {self._table_uri} at base version {base_version}; pass paths "
            f"from live_files({base_version}) (it may have been removed by another writer)"
        )

    def _partition_values(
        self, head: Any, removed: Sequence[_AddAction], added: Sequence[str]
    ) -> dict[str, str | None]:
        columns = list(head.metadata().partition_columns)
        if not columns or not added:
            return {}
        distinct = {tuple(sorted(partition_strings(f.partition_values).items())) for f in removed}
        if len(distinct) != 1:
            raise CommitError(
                f"partitioned Delta table {self._table_uri} (by {columns}): new files take the partition values of "
                f"the files they replace, so a change must remove files of exactly one partition (got "
                f"{len(distinct)}); split it into one change per partition"
            )
        typed = removed[0].partition_values
        if any(isinstance(v, datetime) and v.tzinfo is not None for v in typed.values()):
            return logged_partition_strings(typed, head.partitions())
        return partition_strings(typed)

    def _add_action(self, head: Any, rel: str, partition_values: Mapping[str, str | None]) -> Any:
        from deltalake.transaction import AddAction

        try:
            info = self._fs.get_file_info(rel)
        except OSError as exc:
            raise CommitError(f"cannot stat new file {rel} of Delta table {self._table_uri}: {exc}") from exc
        if info.type != pafs.FileType.File:
            raise CommitError(
                f"new file {rel} does not exist under Delta table {self._table_uri}; write it inside the table folder"
            )
        try:
            metadata = self._read_metadata(rel)
        except (pa.ArrowException, OSError) as exc:
            raise CommitError(
                f"new file {rel} of Delta table {self._table_uri} is not readable Parquet: {exc}"
            ) from exc
        meta = head.metadata()
        # a rewritten copy of a file older than a column the table gained keeps the file's columns (as delta-spark's
        # committer, see spark_table): readers read the missing nullable column as null
        stats = file_stats(metadata, json.loads(head.schema().to_json()), list(meta.partition_columns),
                           dict(meta.configuration), rel, self._table_uri, missing_nullable_ok=True)
        mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
        return AddAction(
            path=rel,
            size=int(info.size),
            partition_values=dict(partition_values),
            modification_time=int(mtime * 1000),
            data_change=True,
            stats=stats,
        )

    # ---------------------------------------------------------------- internals: storage

    @property
    def _fs(self) -> pafs.FileSystem:
        if self._fs_cache is None:
            if self._local_root is not None:
                self._fs_cache = pafs.SubTreeFileSystem(self._local_root, pafs.LocalFileSystem())
            else:
                from deltalake.fs import DeltaStorageHandler

                self._fs_cache = pafs.PyFileSystem(DeltaStorageHandler(self._table_uri, self._storage_options))
        return self._fs_cache

    def _open(self, version: int | None = None) -> Any:
        deltalake = _lazy_deltalake()
        from deltalake.exceptions import TableNotFoundError

        try:
            return deltalake.DeltaTable(self._table_uri, version=version, storage_options=self._storage_options)
        except TableNotFoundError as exc:
            raise CommitError(f"no Delta table at {self._table_uri}: {exc}") from exc

    def _open_version(self, version: int) -> Any:
        from deltalake.exceptions import DeltaError

        try:
            return self._open(version)
        except DeltaError as exc:
            raise CommitConflictError(
                f"cannot load base version {version} of Delta table {self._table_uri} ({exc}); re-run the change "
                f"from the current version"
            ) from exc

    def _live(self, table: Any) -> dict[str, _AddAction]:
        actions = pa.table(table.get_add_actions(flatten=True))
        part_cols = [c for c in actions.column_names if c.startswith("partition.")]
        live = {}
        for row in actions.to_pylist():
            rel = unquote(row["path"])
            live[rel] = _AddAction(
                log_path=row["path"],
                rel_path=rel,
                size=int(row["size_bytes"]),
                num_records=row.get("num_records"),
                partition_values={c[len("partition.") :]: row[c] for c in part_cols},
            )
        return live

    def _read_log_entry(self, version: int) -> list[dict[str, Any]]:
        path = f"_delta_log/{version:020d}.json"
        with self._fs.open_input_stream(path) as stream:
            text = stream.read().decode("utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _read_metadata(self, rel: str) -> pq.FileMetaData:
        with self._fs.open_input_file(rel) as f:
            return pq.ParquetFile(f).metadata

    def _read_parquet(self, rel: str, columns: list[str]) -> pa.Table:
        with self._fs.open_input_file(rel) as f:
            return pq.ParquetFile(f, coerce_int96_timestamp_unit=INT96_UNIT).read(columns=columns)

    def _relative_added(self, path: str) -> str:
        rel = self._relative_any(path) if _is_absolute(path) else path.replace(os.sep, "/")
        parts = rel.split("/")
        if not rel or ".." in parts or rel.startswith("/") or parts[0] == "_delta_log":
            raise _KeepFiles(
                CommitError(
                    f"new file {path} must be a data file inside Delta table {self._table_uri} (not outside it "
                    f"or in _delta_log)"
                )
            )
        return rel

    def _relative_any(self, path: str) -> str:
        """Absolute local path or URI -> path under the table root (decoded)."""
        if self._local_root is not None:
            local = _local_root(path) if "://" in path or path.startswith("file:") else os.path.abspath(path)
            rel = os.path.relpath(local or path, self._local_root)
            if rel.startswith(".."):
                raise _KeepFiles(CommitError(f"file {path} is outside Delta table {self._table_uri}"))
            return rel.replace(os.sep, "/")
        root = self._table_uri.rstrip("/") + "/"
        if not path.startswith(root):
            raise _KeepFiles(CommitError(f"file {path} is outside Delta table {self._table_uri}"))
        return unquote(path[len(root) :])

    def _delete_quietly(self, paths: Iterable[str]) -> None:
        for rel in paths:
            # already gone or not ours to fix: it is unreferenced either way
            with contextlib.suppress(FileNotFoundError, OSError):
                self._fs.delete_file(rel)


class _KeepFiles(Exception):
    """Internal: an error raised before we may safely delete the caller's files (they may be live or foreign)."""

    def __init__(self, error: CommitError) -> None:
        super().__init__(str(error))
        self.error = error


def _no_duplicates(paths: Sequence[str], what: str, table: str) -> None:
    seen: set[str] = set()
    for p in paths:
        if p in seen:
            raise _KeepFiles(CommitError(f"file {p} is listed twice in {what} files for Delta table {table}"))
        seen.add(p)


def _is_absolute(path: str) -> bool:
    # "file:/x" (one slash) is how Spark and Iceberg spell local files: a URI, not a relative path
    return os.path.isabs(path) or "://" in path or path.startswith("file:")


def _local_root(uri: str) -> str | None:
    if "://" not in uri and not uri.lower().startswith("file:"):
        return os.path.abspath(uri)  # a path as it stands, relative or not
    local = uri_local_path(uri)  # a file: URI is percent-encoded (a "#" in it is "%23", never a fragment)
    return None if local is None else os.path.abspath(local)


def _absolute(uri: str) -> str:
    """A local ``file:`` URI or path as an absolute path; other URIs unchanged (without a trailing slash)."""
    return (_local_root(uri) or uri).rstrip("/")
