"""An Iceberg table through Iceberg's own Java API, driven from the Spark driver over py4j: its live files (with the
delete files that apply to each), positional reads of its keys, and commits.

A partial rewrite replaces data files by rewritten copies; :class:`IcebergTable` commits that as one Iceberg
``overwrite`` snapshot validated from the snapshot the rewrite read: a concurrent change that added data holding
the touched keys (or keys within the new files' key ranges), deleted a replaced file or attached delete files to
one fails the commit (``CommitConflictError``), while concurrent appends of other keys are rebased by Iceberg. The
Java API (not Spark SQL) is used because only it commits a chosen file set atomically with these validations.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import decimal
import hashlib
import json
import struct
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from partialcow.exceptions import (
    CommitConflictError,
    CommitError,
    CommitStateUnknownError,
    ConfigurationError,
    LostCommitError,
    PartitionedTableError,
    TableFormatMismatchError,
    UnsupportedTableFeatureError,
)
from partialcow.table.base import POS, CommitResult, DataFile, FileReplacement, quote_identifier
from partialcow.table.iceberg_metrics import DataFileBuilder
from partialcow.table.java import (
    bind_to_current_thread,
    java_class,
    java_errors,
    java_message,
    load_iceberg_table,
)
from partialcow.table.paths import local_path
from partialcow.table.positions import files_frame

__all__ = ["NO_SNAPSHOT", "IcebergTable", "data_folder", "top_level_field_ids"]

#: ``current_version()`` of a table without any snapshot yet.
NO_SNAPSHOT = -1
# Above this many keys the conflict filter becomes a min..max range: a superset (never misses a conflict) that
# keeps the expression small and avoids one py4j round trip per key.
_MAX_IN_KEYS = 1000
# Above this many new files their key ranges in the conflict filter become one min..max range (a superset).
_MAX_FILE_RANGES = 32
# Key types whose bounds order their values for Iceberg's metrics evaluation (floating point keys have NaN outside
# any bounds, so their new files' rows are covered by an always-true term instead).
_RANGED_TYPES = frozenset({"INTEGER", "LONG", "STRING", "DATE", "TIMESTAMP", "DECIMAL", "UUID"})
_COMMIT_ID = "partialcow.commit-id"
# The embedded Hive 2.3 metastore ignores the compare-and-swap condition of Iceberg's lock-free commits (enforced
# from Hive 4, HIVE-26882): two threads committing to one table could both "win". Serialise ours per table.
_COMMIT_LOCKS: dict[str, threading.Lock] = {}
_COMMIT_LOCKS_GUARD = threading.Lock()


# Iceberg's codec names (write.parquet.compression-codec) as pyarrow spells them
_CODECS = {"zstd": "zstd", "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "brotli": "brotli",
           "uncompressed": "none"}


def parquet_writer_options(properties: Mapping[str, str]) -> dict[str, Any]:
    """pyarrow writer options for new data files that Iceberg table ``properties`` ask for (``{}``: ours stand).

    >>> parquet_writer_options({"write.parquet.compression-codec": "GZIP", "write.parquet.compression-level": "5"})
    {'compression': 'gzip', 'compression_level': 5}
    >>> parquet_writer_options({"write.parquet.compression-codec": "uncompressed"})
    {'compression': 'none'}
    """
    options: dict[str, Any] = {}
    codec = _CODECS.get(str(properties.get("write.parquet.compression-codec", "")).strip().lower())
    if codec is not None:
        options["compression"] = codec
        level = str(properties.get("write.parquet.compression-level", "")).strip()
        if level.lstrip("-").isdigit() and codec not in ("none", "snappy", "lz4"):
            options["compression_level"] = int(level)
    return options


# what data_folder reads of a table's properties
DATA_FOLDER_PROPERTIES = ("write.data.path", "write.object-storage.enabled", "write.object-storage.path",
                          "write.folder-storage.path")


def data_folder(location: str, properties: Mapping[str, str]) -> str:
    """Where new data files of the Iceberg table at ``location`` go, as Iceberg's own location providers decide from
    its ``properties``: ``write.data.path``; with object storage on, the deprecated ``write.object-storage.path``;
    the deprecated ``write.folder-storage.path``; else ``<location>/data``. Object storage's hashed sub-folders are
    left out: they spread files over an object store's prefixes, and partial copy-on-write writes local files only.

    >>> data_folder("file:/wh/db/t", {}), data_folder("/wh/t/", {"write.data.path": "file:/fast/t/"})
    ('file:/wh/db/t/data', 'file:/fast/t')
    >>> data_folder("/wh/t", {"write.object-storage.path": "/o", "write.folder-storage.path": "/f"})
    '/f'
    >>> data_folder("/wh/t", {"write.object-storage.enabled": "true", "write.object-storage.path": "/o"})
    '/o'
    """
    names = ["write.data.path"]
    if str(properties.get("write.object-storage.enabled", "")).strip().lower() == "true":
        names.append("write.object-storage.path")
    names.append("write.folder-storage.path")
    for name in names:
        if properties.get(name):
            return str(properties[name]).rstrip("/")
    return f"{location.rstrip('/')}/data"


class _KeyTypeUnsupported(Exception):
    """A key value has no Iceberg literal form here: fall back to a filter that matches everything."""


class IcebergTable:
    """One Iceberg table of the Spark session's catalog: what the row index reads and what the pipeline commits.

    Args:
        spark: the SparkSession whose catalog holds the table (see ``partialcow.spark.session``).
        table_name: the table as Spark names it (``schema.table`` or ``catalog.schema.table``).

    >>> table = IcebergTable(spark, "db.events")  # doctest: +SKIP
    >>> base = table.current_version()  # doctest: +SKIP
    >>> old = table.live_files(base)[0].path  # doctest: +SKIP
    >>> new = "/wh/db/events/data/new.parquet"
    >>> table.replace_files(FileReplacement(base_version=base, removed=[old], added=[new],  # doctest: +SKIP
    ...                                     conflict_keys={"id": [7]}))
    """

    table_format = "iceberg"

    def __init__(self, spark: Any, table_name: str) -> None:
        self.spark = spark
        self._jvm = spark._jvm
        self._name = table_name
        self._loaded: Any = None  # the Java table, loaded once: later calls only refresh it
        self._root: str | None = None
        self._live_cache: dict[int, list[DataFile]] = {}  # a snapshot's files never change
        self._scan_cache: dict[int, list[tuple[Any, Any]]] = {}  # their Java objects, for the commit that follows

    @property
    def name(self) -> str:
        return self._name

    @property
    def location(self) -> str:
        """The table's root folder (URI), as its metadata names it."""
        if self._root is None:
            self._root = str(self._table().location())
        return self._root

    # ---------------------------------------------------------------- reading

    def _table(self) -> Any:
        # Each Python thread drives its own JVM thread, whose active session starts empty (dbt runs models on
        # worker threads); without it Iceberg resolves the name through a catalog that returns a non-Iceberg table.
        bind_to_current_thread(self.spark)
        if self._loaded is not None:
            # Resolving the name through Spark's catalogs costs about as much as the refresh again; the
            # refresh re-reads the name's current metadata, so a table dropped and re-created is seen as it is now.
            try:
                self._loaded.refresh()
                return self._loaded
            except java_errors():
                self._loaded = None  # dropped: load by name again, which reports why it cannot
        try:
            table = load_iceberg_table(self.spark, self._name)
        except java_errors() as exc:
            message = java_message(exc)
            if "not an Iceberg table" in message or "ClassCastException" in java_class(exc):
                raise TableFormatMismatchError(
                    f"table {self._name} is not an Iceberg table: partialcow's Iceberg commits need USING iceberg"
                ) from exc
            raise CommitError(f"cannot load Iceberg table {self._name}: {message}") from exc
        except TypeError as exc:  # py4j hands back a JavaPackage where the class is missing: no Iceberg runtime
            raise CommitError(
                f"cannot load Iceberg table {self._name}: the session has no Iceberg runtime ({exc}); start it with "
                "partialcow.spark.session.get_or_create_session or add the Iceberg jar"
            ) from exc
        self._check_name(table)
        # The session catalog caches table objects: read the latest metadata, not the cached one.
        table.refresh()
        self._loaded = table
        return table

    def _check_name(self, table: Any) -> None:
        """Refuse a name that reads a branch, tag, snapshot or metadata table (``db.t.branch_audit``,
        ``db.t.snapshots``): Iceberg resolves it to the whole table, and our commits go to ``main``."""
        metadata_table = self._jvm.org.apache.iceberg.BaseMetadataTable._java_lang_class
        asked = str(self.spark._jsparkSession.sessionState().sqlParser().parseMultipartIdentifier(self._name).last())
        if metadata_table.isInstance(table) or not str(table.name()).lower().endswith("." + asked.lower()):
            raise ConfigurationError(
                f"{self._name} names a branch, tag, snapshot or metadata table of Iceberg table {table.name()}: "
                "partialcow writes the table's main branch only; name the table itself"
            )

    def check_supported(self, *, removing: bool = True, partitioned_ok: bool = True) -> None:
        """Refuse, before anything is written, what the commit would refuse whatever the batch (see
        ``_check_table``; ``partitioned_ok=False``: a partition transform other than identity)."""
        table = self._loaded if self._loaded is not None else self._table()
        self._check_table(table)
        if not partitioned_ok:
            fields = table.spec().fields()
            for i in range(fields.size()):
                self._check_identity(fields.get(i))

    def late_refusals(self) -> list[str]:
        """The table's rules a write checks only once it knows the files it replaces (at the commit): the
        partitions of the files it rewrites (any spec that partitions files; older specs' files may remain)."""
        table = self._loaded if self._loaded is not None else self._table()
        return ["partitions"] if any(not spec.isUnpartitioned() for spec in table.specs().values()) else []

    def current_version(self) -> int:
        """The table's current snapshot id, or ``NO_SNAPSHOT`` (-1) for a table without snapshots."""
        snapshot = self._table().currentSnapshot()
        return NO_SNAPSHOT if snapshot is None else int(snapshot.snapshotId())

    def live_files(self, version: int | None = None) -> list[DataFile]:
        """The data files live at snapshot ``version`` (default: current), paths as the table's metadata holds them.

        Each file's ``deletes`` signs the delete files that apply to it, so a data file that gained deletes through
        another writer's ``DELETE`` or merge-on-read ``MERGE`` is noticed (the snapshot summary only counts delete
        files; it does not say which data files they hit).
        """
        table = None
        if version is None:  # the current snapshot: one refresh serves both the version and the scan
            table = self._table()
            snapshot = table.currentSnapshot()
            version = NO_SNAPSHOT if snapshot is None else int(snapshot.snapshotId())
        if version in self._live_cache:
            return list(self._live_cache[version])
        try:
            scanned = self._scan(table if table is not None else self._table(), version)
        except CommitConflictError as exc:  # a conflict only where a commit's base is read (replace_files)
            raise CommitError(str(exc)) from exc
        out = []
        for data_file, deletes in scanned:
            paths = sorted(str(d.location()) for d in deletes)
            out.append(DataFile(
                path=str(data_file.location()), record_count=int(data_file.recordCount()),
                file_size_bytes=int(data_file.fileSizeInBytes()),
                deletes=hashlib.sha1("\n".join(paths).encode()).hexdigest()[:16] if paths else None,
            ))
        self._live_cache[version] = out
        return list(out)

    def normalize_path(self, path: str) -> str:
        return path

    def parquet_writer_options(self) -> dict[str, Any]:
        """pyarrow options for the new data files a write adds, from the table's properties as they are now (a codec
        set after the table was built applies from then on): see :func:`parquet_writer_options`."""
        table = self._loaded if self._loaded is not None else self._table()
        return parquet_writer_options({str(k): str(v) for k, v in dict(table.properties()).items()})

    def data_folder(self) -> str:
        """Where this table's new data files go (see :func:`data_folder`), from its properties as they are now."""
        table = self._loaded if self._loaded is not None else self._table()
        if self._root is None:
            self._root = str(table.location())
        # the few properties data_folder reads, one py4j call each: converting every property took 25-30 ms
        properties = table.properties()
        wanted = {name: properties.get(name) for name in DATA_FOLDER_PROPERTIES}
        return data_folder(self._root, {name: str(value) for name, value in wanted.items() if value is not None})

    def column_ids(self) -> dict[str, int]:
        table = self._loaded if self._loaded is not None else self._table()  # as fresh as the last version read
        return {name.lower(): field_id for name, field_id in top_level_field_ids(self._jvm, table).items()}

    def read_rows(self, key_columns: Sequence[str], *, version: int, files: Mapping[str, int]) -> Any:
        """``key..., _file_id, _pos`` of ``files`` (path -> id) at snapshot ``version``: ``VERSION AS OF`` pins the
        read to the snapshot the index records, and Iceberg's ``_file``/``_pos`` honour delete files (``_pos`` stays
        the physical row position)."""
        from pyspark.sql import functions as F

        # As the table is now: a read AS OF a snapshot takes that snapshot's schema, and schema changes commit no
        # snapshot. A key column promoted (int -> bigint) would keep its old type, and a key name that renames moved
        # to another column would still read the old column: each key is read by its field id, typed as now.
        now = self.spark.table(quote_identifier(self._name)).schema
        current = {f.name.lower(): f.dataType.simpleString() for f in now.fields}
        ids = self.column_ids()
        then = _names_at(self._jvm, self._table(), version)

        def key(column: str) -> str:
            field_id = ids.get(column.lower())
            if then and field_id is not None and field_id not in then:
                read = "NULL"  # the column was added after that snapshot (its old namesake, if any, is another)
            else:
                read = quote_identifier(then.get(field_id, column) if field_id is not None else column)
            return (f"CAST({read} AS {current[column.lower()]}) AS {quote_identifier(column)}"
                    if column.lower() in current else f"{read} AS {quote_identifier(column)}")

        keys = ", ".join(key(c) for c in key_columns)
        rows = self.spark.sql(
            f"SELECT {keys}, _file, _pos FROM {quote_identifier(self._name)} VERSION AS OF {int(version)}"
        )
        if not {f.path for f in self.live_files(version)} <= set(files):
            # Iceberg does not prune data files on a _file predicate: this still scans the snapshot's key columns.
            rows = rows.where(F.col("_file").isin(list(files.keys())))
        return (
            rows.join(files_frame(self.spark, files, "_file"), "_file")
            .drop("_file")
            .withColumn(POS, F.col(POS).cast("bigint"))
        )

    def _scan(self, table: Any, version: int | None) -> list[tuple[Any, Any]]:
        """(data file, attached delete files) of every live data file at ``version``."""
        if version == NO_SNAPSHOT or (version is None and table.currentSnapshot() is None):
            return []
        if version is not None and version in self._scan_cache:
            return self._scan_cache[version]
        scan = table.newScan()
        try:
            if version is not None:
                scan = scan.useSnapshot(int(version))
            tasks = scan.planFiles()
        except java_errors() as exc:
            raise CommitConflictError(
                f"snapshot {version} of Iceberg table {self._name} cannot be read ({java_message(exc)}); it may "
                "have expired: re-run the change from the current snapshot"
            ) from exc
        out = []
        iterator = tasks.iterator()
        try:
            while iterator.hasNext():
                task = iterator.next()
                out.append((task.file(), task.deletes()))
        finally:
            tasks.close()
        if version is not None:
            self._scan_cache = {version: out}  # the last one: a commit reads the snapshot its lookup read
        return out

    # ---------------------------------------------------------------- committing

    def replace_files(self, change: FileReplacement) -> CommitResult:
        """Commit ``change`` as one Iceberg overwrite snapshot: delete ``change.removed``, add ``change.added``.

        ``removed`` are data file paths live at ``change.base_version`` (as :meth:`live_files` returns them).
        ``added`` are Parquet files already written with the table's field ids (absolute paths or URIs, or paths
        relative to the table's ``data/`` folder). On a conflict or refusal nothing is committed and the added
        files are deleted; when the outcome is unknown they are kept and ``CommitStateUnknownError`` is raised.
        They are also kept when the base snapshot cannot be read (expired): without it we cannot prove that no
        snapshot references them.
        """
        table = self._table()
        added = [self._location(table, p) for p in change.added]
        # One listing of the base snapshot serves both checks (each file costs py4j round trips).
        base_files = self._scan(table, change.base_version)
        self._refuse_live_added(table, change, base_files, added)
        try:
            if not change.removed and not added:
                raise CommitError(f"nothing to commit to Iceberg table {self._name}: no file removed or added")
            self._check_table(table)
            removed = self._removed_files(change, base_files)
            spec, partition = self._target_partition(table, removed)
            mapping_json = table.properties().get("schema.name-mapping.default")
            # Tables imported from plain Parquet read files without field ids through their name mapping.
            mapping = (
                None
                if mapping_json is None
                else self._jvm.org.apache.iceberg.mapping.NameMappingParser.fromJson(mapping_json)
            )
            field_ids = set(top_level_field_ids(self._jvm, table).values()) if added and mapping is None else set()
            builder = DataFileBuilder(self._jvm, table, spec, mapping=mapping) if added else None
            new_files = [
                self._data_file(table, spec, partition, path, mapping=mapping, field_ids=field_ids, builder=builder)
                for path in added
            ]
            commit_id = str(uuid.uuid4())
            overwrite = table.newOverwrite()
            for old in removed:
                overwrite = overwrite.deleteFile(old)
            for new in new_files:
                overwrite = overwrite.addFile(new)
            if change.base_version != NO_SNAPSHOT:
                overwrite = overwrite.validateFromSnapshot(int(change.base_version))
            overwrite = (
                overwrite.caseSensitive(False)  # Spark resolves column names case-insensitively
                .conflictDetectionFilter(
                    self._jvm.org.apache.iceberg.expressions.Expressions.alwaysTrue()
                    if change.base_version != NO_SNAPSHOT and self._equality_deletes_since(table, change.base_version)
                    else self._conflict_filter(table, change.conflict_keys, new_files)
                )
                .validateNoConflictingData()
                .validateNoConflictingDeletes()
            )
            for key, value in {**change.metrics.as_commit_summary(), "partialcow.operation": change.operation}.items():
                overwrite = overwrite.set(key, value)
            overwrite = overwrite.set(_COMMIT_ID, commit_id)
        except CommitError:
            self._delete_quietly(table, added)
            raise
        except java_errors() as exc:
            self._delete_quietly(table, added)
            raise CommitError(
                f"cannot prepare the commit to Iceberg table {self._name}: {java_message(exc)}; nothing was committed"
            ) from exc

        with _COMMIT_LOCKS_GUARD:
            lock = _COMMIT_LOCKS.setdefault(str(table.name()), threading.Lock())
        try:
            with lock:
                overwrite.commit()
        except java_errors() as exc:
            failed = java_class(exc)
            if failed.endswith("CommitStateUnknownException"):
                raise CommitStateUnknownError(
                    f"commit to Iceberg table {self._name} (base snapshot {change.base_version}) may or may not have "
                    f"landed: {java_message(exc)}; the new files are kept. Check the table's snapshots before retrying"
                ) from exc
            self._delete_quietly(table, added)
            if failed.endswith(("ValidationException", "CommitFailedException")):
                raise CommitConflictError(
                    f"concurrent change to Iceberg table {self._name} since base snapshot {change.base_version}: "
                    f"{java_message(exc)}. Nothing was committed; re-run the change"
                ) from exc
            raise CommitError(
                f"Iceberg refused the commit to table {self._name} (base snapshot {change.base_version}): "
                f"{java_message(exc)}"
            ) from exc

        try:
            snapshot = self._find_snapshot(table, commit_id)
            self.spark.catalog.refreshTable(self._name)
        except Exception as exc:
            # the commit landed: its files are the table's now, whatever failed after it
            raise CommitStateUnknownError(
                f"commit to Iceberg table {self._name} landed, but reading it back failed: {exc}; the new files are "
                "kept, and the next write brings the row index up to it"
            ) from exc
        parent = snapshot.parentId()
        return CommitResult(
            version=int(snapshot.snapshotId()),
            previous_version=NO_SNAPSHOT if parent is None else int(parent),
            removed=tuple(str(f.location()) for f in removed),
            added=tuple(added),
        )

    # ---------------------------------------------------------------- internals

    def _refuse_live_added(
        self, table: Any, change: FileReplacement, base_files: Sequence[tuple[Any, Any]], added: Sequence[str]
    ) -> None:
        """An added path that the table already references must never reach our failure cleanup."""
        if len({_plain(p) for p in added}) != len(added):
            raise CommitError(f"a new file is listed twice in the files to add to Iceberg table {self._name}")
        current = table.currentSnapshot()
        moved_on = current is not None and int(current.snapshotId()) != change.base_version
        head_files = self._scan(table, None) if moved_on else []
        live = {_plain(str(f.location())) for f, _ in [*base_files, *head_files]}
        for path in added:
            if _plain(path) in live:
                raise CommitError(
                    f"new file {path} is already a data file of Iceberg table {self._name}: write each new file "
                    "under a fresh name (nothing was committed or deleted)"
                )

    def _check_table(self, table: Any) -> None:
        properties = table.properties()
        if str(properties.get("write.wap.enabled") or "").strip().lower() == "true":
            staged = {key: self.spark.conf.get(key, None) for key in ("spark.wap.id", "spark.wap.branch")}
            staged = {key: value for key, value in staged.items() if value}
            if staged:
                raise UnsupportedTableFeatureError(
                    f"Iceberg table {self._name} stages writes for audit (write.wap.enabled, and this session sets "
                    f"{', '.join(f'{k}={v}' for k, v in staged.items())}), which partialcow's commits, always to "
                    "the main branch, would bypass: unset them for this write, or publish through Spark's own writes"
                )
        version = int(table.operations().current().formatVersion())
        if version >= 3:
            raise UnsupportedTableFeatureError(
                f"Iceberg table {self._name} is format v{version} (row lineage, deletion vectors), which partial "
                "rewrites do not maintain: use a format-version 2 table. Iceberg never turns a table back to an "
                f"older format (a full refresh cannot either): drop it (DROP TABLE {self._name} PURGE) and build "
                "the model again"
            )

    def _removed_files(self, change: FileReplacement, base_files: Sequence[tuple[Any, Any]]) -> list[Any]:
        live = {str(f.location()): (f, deletes) for f, deletes in base_files}
        by_plain = {_plain(p): p for p in live}
        removed: list[Any] = []
        for path in change.removed:
            key = path if path in live else by_plain.get(_plain(path))
            if key is None:
                raise CommitError(
                    f"file {path} is not a live data file of Iceberg table {self._name} at snapshot "
                    f"{change.base_version}: pass paths from live_files() of that snapshot"
                )
            data_file, deletes = live[key]
            if deletes.size() > 0:
                kinds = sorted({_delete_kind(d) for d in deletes})
                raise UnsupportedTableFeatureError(
                    f"data file {key} of Iceberg table {self._name} has {', '.join(kinds)} attached; partial rewrites "
                    "would bring deleted rows back. Compact the table first (CALL system.rewrite_data_files) or use "
                    "copy-on-write deletes ('write.delete.mode'='copy-on-write')"
                )
            if any(str(f.location()) == key for f in removed):
                raise CommitError(f"file {key} is listed twice in the files to remove from Iceberg table {self._name}")
            removed.append(data_file)
        return removed

    def _target_partition(self, table: Any, removed: Sequence[Any]) -> tuple[Any, Any]:
        """The spec and partition the new files get: the replaced files' own (all must share one)."""
        if not removed:
            spec = table.spec()
            if not spec.isUnpartitioned():
                raise PartitionedTableError(
                    f"adding files to partitioned Iceberg table {self._name} without replacing one: a new file takes "
                    "the partition of a file it replaces, and this change replaces none"
                )
            return spec, None
        spec_id = int(removed[0].specId())
        spec = table.specs().get(spec_id)
        if spec.isUnpartitioned():
            if any(int(f.specId()) != spec_id for f in removed):
                raise PartitionedTableError(
                    f"the files replaced in Iceberg table {self._name} belong to different partition specs: replace "
                    "them in separate changes"
                )
            return spec, None
        partition = removed[0].partition()
        for f in removed[1:]:
            if int(f.specId()) != spec_id or not partition.equals(f.partition()):
                raise PartitionedTableError(
                    f"the files replaced in Iceberg table {self._name} lie in different partitions "
                    f"({removed[0].location()} and {f.location()}): replace each partition's files in its own change"
                )
        fields = spec.fields()
        for i in range(fields.size()):
            self._check_identity(fields.get(i))
        return spec, partition

    def _check_identity(self, field: Any) -> None:
        if not field.transform().isIdentity():
            raise PartitionedTableError(
                f"Iceberg table {self._name} is partitioned by {field.transform()}({field.name()}): partialcow "
                "carries only identity partitions over to rewritten files"
            )

    def _location(self, table: Any, path: str) -> str:
        if "://" in path or path.startswith("file:"):
            return path
        if path.startswith("/"):
            # Match how Spark writes local locations, so paths compare equal in metadata tables.
            return f"file:{path}" if str(table.location()).startswith("file:") else path
        return f"{str(table.location()).rstrip('/')}/data/{path}"

    def _data_file(self, table: Any, spec: Any, partition: Any, path: str, *, mapping: Any, field_ids: set[int],
                   builder: Any) -> Any:
        """Iceberg's ``DataFile`` of a new Parquet file, with the metrics Iceberg itself would read from its footer."""
        if mapping is None:
            self._check_field_ids(path, field_ids)
        try:
            if partition is not None:
                self._check_partition_values(table, spec, partition, path, builder)
            return builder.build(path, partition=partition)
        except java_errors() as exc:
            raise CommitError(
                f"cannot read new data file {path} for Iceberg table {self._name}: {java_message(exc)}"
            ) from exc

    def _check_field_ids(self, path: str, known: set[int]) -> None:
        """Iceberg resolves Parquet columns by field id: a file without them would read back as nulls."""
        try:
            # A local location is a path as it stands: read as a URI, a space or a non-ASCII character is refused,
            # "%3A" in a partition folder is decoded, and a "#" cuts the path short.
            local = local_path(path)
            filesystem, inner = (pafs.LocalFileSystem(), local) if local is not None else pafs.FileSystem.from_uri(path)
            with filesystem.open_input_file(inner) as handle:
                schema = pq.read_schema(handle)
        except (OSError, ValueError) as exc:
            raise CommitError(f"cannot read new data file {path} for Iceberg table {self._name}: {exc}") from exc
        ids = []
        for field in schema:
            raw = (field.metadata or {}).get(b"PARQUET:field_id")
            if raw is None:
                raise CommitError(
                    f"new data file {path} has no Parquet field id on column {field.name!r}, so Iceberg table "
                    f"{self._name} would read it as nulls: write it with the source file's schema (field ids kept)"
                )
            ids.append(int(raw))
        if not known & set(ids):
            raise CommitError(
                f"new data file {path}: none of its field ids {ids} belongs to Iceberg table {self._name}'s schema; "
                "write it with the replaced file's schema"
            )

    def _check_partition_values(
        self, table: Any, spec: Any, partition: Any, path: str, builder: DataFileBuilder
    ) -> None:
        """Every row of a new file must lie in the partition it inherits: check exact min/max of identity columns."""
        jvm = self._jvm
        exact = builder.exact_metrics(path)
        fields = spec.fields()
        for i in range(fields.size()):
            source_id = int(fields.get(i).sourceId())
            source_type = table.schema().findType(source_id)
            value = partition.get(i, source_type.typeId().javaClass())
            nulls = exact.null_value_counts.get(source_id)
            values = exact.value_counts.get(source_id)
            column = table.schema().findColumnName(source_id)
            if nulls is None:  # a writer that left null counts out: count them
                nulls = _null_count(path, source_id)
            if value is None:
                ok = values is not None and nulls == values
            else:
                expected = bytes(jvm.org.apache.iceberg.util.ByteBuffers.toByteArray(
                    jvm.org.apache.iceberg.types.Conversions.toByteBuffer(source_type, value)))
                kind = str(source_type.typeId().name())
                ok = nulls == 0 and all(
                    _same_bound(exact_bound.get(source_id), expected, kind)
                    for exact_bound in (exact.lower_bounds, exact.upper_bounds)
                )
            if not ok:
                raise PartitionedTableError(
                    f"new data file {path} holds rows whose {column} differs from its partition's value {value} in "
                    f"Iceberg table {self._name}: a partial rewrite cannot move rows between partitions"
                )

    def _conflict_filter(self, table: Any, keys: Mapping[str, Sequence[object]], new_files: Sequence[Any]) -> Any:
        """The filter Iceberg validates concurrent commits with: the keys this change touches, or any row of the
        files it adds.

        Iceberg uses one filter for two checks. Concurrently added data files must not hold our keys, and the
        replaced files must not have gained delete files. It drops a delete file whose column bounds miss the
        filter before looking at the files it applies to. An equality delete (Flink, for one) of another key of a
        replaced file misses our keys, so with the keys alone it passed, and the rewritten file, newer than the
        delete, brought the deleted row back. Only rows the new files carry over can come back, so the new files'
        key ranges (from the metrics we wrote them with) keep such a delete in view; a concurrent append of keys
        inside those ranges now conflicts too (the write is located and committed again), while appends of keys
        outside them are still rebased. (``replace_files`` uses an always-true filter instead when a snapshot since
        the base added equality deletes: see :meth:`_equality_deletes_since`.)
        """
        expressions = self._jvm.org.apache.iceberg.expressions.Expressions
        if not keys:
            return expressions.alwaysTrue()  # unknown keys: any concurrent change of the data conflicts
        schema = table.schema()
        result = expressions.alwaysTrue()
        for column, values in keys.items():
            field = schema.caseInsensitiveFindField(column)
            if field is None:
                raise CommitError(
                    f"conflict key column {column!r} is not a column of Iceberg table {self._name}: pass the table's "
                    "key columns"
                )
            present = [v for v in dict.fromkeys(values) if v is not None]  # aligned columns repeat values
            key_type = field.type()
            try:
                if not present:
                    term = expressions.isNull(column)
                elif len(present) > _MAX_IN_KEYS:
                    term = getattr(expressions, "and")(
                        expressions.greaterThanOrEqual(column, _key_literal(min(present), key_type)),  # type: ignore[type-var]
                        expressions.lessThanOrEqual(column, _key_literal(max(present), key_type)),  # type: ignore[type-var]
                    )
                else:
                    literals = self._jvm.java.util.ArrayList()
                    for value in present:
                        literals.add(_key_literal(value, key_type))
                    term = getattr(expressions, "in")(column, literals)
            except (_KeyTypeUnsupported, TypeError, decimal.InvalidOperation):
                return expressions.alwaysTrue()
            result = getattr(expressions, "and")(result, term)
        return getattr(expressions, "or")(result, self._key_ranges(table, next(iter(keys)), new_files))

    def _key_ranges(self, table: Any, column: str, files: Sequence[Any]) -> Any:
        """An expression true for every row the data ``files`` hold: their ``column`` bounds, and null keys where a
        file may hold some (always true when a file lacks bounds or the type has no usable order)."""
        expressions = self._jvm.org.apache.iceberg.expressions.Expressions
        if not files:
            return expressions.alwaysFalse()
        field = table.schema().caseInsensitiveFindField(column)
        key_type = field.type()
        kind = str(key_type.typeId().name()) if key_type.isPrimitiveType() else ""
        if kind not in _RANGED_TYPES:
            return expressions.alwaysTrue()
        conversions = self._jvm.org.apache.iceberg.types.Conversions
        fid = field.fieldId()
        ranges, nulls = [], False
        for data_file in files:
            lower, upper, null_counts = data_file.lowerBounds(), data_file.upperBounds(), data_file.nullValueCounts()
            low = None if lower is None else lower.get(fid)
            high = None if upper is None else upper.get(fid)
            count = None if null_counts is None else null_counts.get(fid)
            nulls = nulls or count is None or count > 0
            if low is None or high is None:
                return expressions.alwaysTrue()
            ranges.append((_bound(kind, conversions.fromByteBuffer(key_type, low)),
                           _bound(kind, conversions.fromByteBuffer(key_type, high))))
        if len(ranges) > _MAX_FILE_RANGES:
            ranges = [(min(r[0] for r in ranges), max(r[1] for r in ranges))]
        result = expressions.isNull(field.name()) if nulls else expressions.alwaysFalse()
        try:
            for low, high in ranges:
                within = getattr(expressions, "and")(
                    expressions.greaterThanOrEqual(field.name(), _range_literal(kind, low, key_type)),
                    expressions.lessThanOrEqual(field.name(), _range_literal(kind, high, key_type)),
                )
                result = getattr(expressions, "or")(result, within)
        except OverflowError:  # a timestamp Python's datetime cannot spell
            return expressions.alwaysTrue()
        return result

    def _equality_deletes_since(self, table: Any, version: int) -> bool:
        """Whether a snapshot committed after ``version`` added equality delete files (a full-row equality delete
        keyed on another column can delete rows outside its bounds on ours, which the key ranges cannot see)."""
        snapshot = table.currentSnapshot()
        while snapshot is not None and int(snapshot.snapshotId()) != int(version):
            summary = snapshot.summary()
            if int(summary.get("added-equality-delete-files") or 0) > 0:
                return True
            parent = snapshot.parentId()
            snapshot = None if parent is None else table.snapshot(parent)
        return False

    def _find_snapshot(self, table: Any, commit_id: str) -> Any:
        """Our snapshot (found by the commit id in its summary), walking back from the current one.

        Not there although ``commit()`` returned: another writer replaced the table's metadata from the same base
        at the same moment (a catalog that does not compare-and-swap, such as a Hive 2.3 metastore without locks).
        Looked up once more after a pause, in case a writer that started from ours is still committing; then the
        commit is reported lost (``LostCommitError``). Its files are kept: the orphaned metadata file references
        them, and the next write's clean-up removes them once no snapshot does.
        """
        for pause in (0.0, 0.5):
            time.sleep(pause)
            table.refresh()
            snapshot = table.currentSnapshot()
            while snapshot is not None:
                if snapshot.summary().get(_COMMIT_ID) == commit_id:
                    return snapshot
                parent = snapshot.parentId()
                snapshot = None if parent is None else table.snapshot(parent)
        raise LostCommitError(
            f"the commit to Iceberg table {self._name} was lost: another writer replaced the table's metadata from "
            f"the same base at the same moment, so no snapshot of the table carries {_COMMIT_ID}={commit_id}"
        )

    def _delete_quietly(self, table: Any, paths: Sequence[str]) -> None:
        io = table.io()
        for path in paths:
            # cleanup of our own unreferenced files is best effort
            with contextlib.suppress(Exception):
                io.deleteFile(path)


def _same_bound(bound: bytes | None, expected: bytes, kind: str) -> bool:
    """A bound equal to a partition value; for floating point by value, since writers widen a bound of 0.0 to -0.0."""
    if bound is None:
        return False
    if kind in ("FLOAT", "DOUBLE") and len(bound) == len(expected):
        fmt = "<f" if kind == "FLOAT" else "<d"
        return bool(struct.unpack(fmt, bound)[0] == struct.unpack(fmt, expected)[0])
    return bound == expected


def _null_count(path: str, field_id: int) -> int | None:
    """Nulls of the column with Iceberg field id ``field_id`` in a local Parquet file, read (None if not local)."""
    local = local_path(path)
    if local is None:
        return None
    parquet = pq.ParquetFile(local)
    for name in parquet.schema_arrow.names:
        field = parquet.schema_arrow.field(name)
        if (field.metadata or {}).get(b"PARQUET:field_id") == str(field_id).encode():
            return int(parquet.read(columns=[name]).column(0).null_count)
    return None


def _key_literal(value: object, iceberg_type: Any) -> object:
    """A Python key value as what py4j passes and Iceberg's literal binding converts to the column's type."""
    type_id = str(iceberg_type.typeId().name())
    if isinstance(value, bool) or type_id == "BOOLEAN":
        if not isinstance(value, bool):
            raise _KeyTypeUnsupported(type(value).__name__)
        return value
    if type_id == "TIMESTAMP" and isinstance(value, _dt.datetime):
        # Iceberg parses ISO strings into microseconds; naive values are UTC, as in our sessions.
        utc = value.astimezone(_dt.timezone.utc) if value.tzinfo is not None else value.replace(tzinfo=_dt.timezone.utc)
        if bool(iceberg_type.shouldAdjustToUTC()):
            return utc.isoformat()
        return utc.replace(tzinfo=None).isoformat()
    if type_id == "DATE" and isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
        return value.isoformat()
    if type_id == "DECIMAL" and isinstance(value, (decimal.Decimal, int, str)):
        # Iceberg binds a decimal literal only at the column's exact scale.
        return decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-int(iceberg_type.scale())))
    if type_id == "UUID" and isinstance(value, (uuid.UUID, str)):
        return str(value)
    if type_id in ("INTEGER", "LONG") and isinstance(value, int):
        return value
    if type_id in ("FLOAT", "DOUBLE") and isinstance(value, (int, float)):
        return float(value)
    if type_id == "STRING" and isinstance(value, str):
        return value
    raise _KeyTypeUnsupported(f"{type(value).__name__} for {type_id}")


def top_level_field_ids(jvm: Any, table: Any) -> dict[str, int]:
    """Column name -> Iceberg field id of ``table``'s top-level columns, read in one py4j call (the schema as JSON),
    not two per column."""
    schema = json.loads(str(jvm.org.apache.iceberg.SchemaParser.toJson(table.schema())))
    return {str(f["name"]): int(f["id"]) for f in schema["fields"]}


def _names_at(jvm: Any, table: Any, version: int) -> dict[int, str]:
    """Field id -> top-level column name in the schema snapshot ``version`` was written with (empty when the
    snapshot records no schema)."""
    snapshot = table.snapshot(int(version))
    schema_id = None if snapshot is None else snapshot.schemaId()
    schema = None if schema_id is None else table.schemas().get(schema_id)
    if schema is None:
        return {}
    fields = json.loads(str(jvm.org.apache.iceberg.SchemaParser.toJson(schema)))["fields"]
    return {int(f["id"]): str(f["name"]) for f in fields}


def _bound(kind: str, value: Any) -> Any:
    """A bound as Iceberg's ``Conversions`` gives it, as a Python value ordered as Iceberg orders the type's values:
    ints (dates in days, timestamps in microseconds), ``Decimal``, ``str`` (strings; UUIDs in their canonical form,
    whose order is that of their bytes)."""
    return str(value) if kind in ("STRING", "UUID") else value


def _range_literal(kind: str, value: Any, iceberg_type: Any) -> Any:
    """``value`` (from :func:`_bound`) in a form py4j passes as a literal Iceberg binds to the type: a timestamp as
    ISO text (a small microsecond count would cross as a Java ``Integer``, which Iceberg does not convert to a
    timestamp).

    >>> _range_literal("LONG", 7, None), _range_literal("STRING", "a", None)
    (7, 'a')
    """
    if kind != "TIMESTAMP":
        return value
    instant = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(microseconds=value)
    return instant.isoformat() if bool(iceberg_type.shouldAdjustToUTC()) else instant.replace(tzinfo=None).isoformat()


def _plain(path: str) -> str:
    """A local location without its ``file:`` scheme, for comparing ``file:/x`` with ``file:///x`` and ``/x``."""
    if path.startswith("file:"):
        return "/" + path[len("file:") :].lstrip("/")
    return path


def _delete_kind(delete_file: Any) -> str:
    content = str(delete_file.content().name())
    if str(delete_file.format().name()) == "PUFFIN":
        return "deletion vectors"
    return {"POSITION_DELETES": "position delete files", "EQUALITY_DELETES": "equality delete files"}.get(
        content, content.lower()
    )
