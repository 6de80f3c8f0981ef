"""A Delta table inside Spark: live files from delta-spark's snapshot, key positions read through delta-spark, and
commits through delta-spark's own optimistic transaction.

:class:`DeltaSparkTable` is the table wherever the session has Delta (``table_format: delta``). It starts
a delta-spark transaction on the change's base snapshot, removes the replaced files as that snapshot lists them
(with their deletion vectors), adds the new files with stats from their footers, and commits as an ``UPDATE`` (a
table replacement as a ``WRITE`` with mode overwrite). Not ``Manual Update``: delta-spark derives the new version's
checksum from the previous one for every operation but that one, and without it reconstructs the table's whole state
(three Spark jobs) after each commit. Delta's own conflict checks then run against every version committed since the
base (protocol, metadata, concurrent removes of the files we replace or read, concurrent data-changing appends), and
a lost race for the next version is retried by delta-spark itself. Before that, the log versions since the base are
checked for appended files holding the change's keys (``conflicts.check_concurrent``): Delta's WriteSerializable
isolation lets blind appends pass, and a row whose key the change also writes would then exist twice.

The commit carries ``userMetadata`` = the change's operation and the tags ``partialcow.commitId`` and
``partialcow.operation`` (``DESCRIBE HISTORY`` shows both); a failed commit is looked up by its id before anything
is deleted, so a commit that landed is never mistaken for one that did not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from partialcow.exceptions import (
    CommitConflictError,
    CommitError,
    CommitStateUnknownError,
    UnsupportedTableFeatureError,
)
from partialcow.parquet import INT96_UNIT, remove_sidecar
from partialcow.table.base import CommitResult, DataFile, FileReplacement
from partialcow.table.delta import spark_log
from partialcow.table.delta.conflicts import check_concurrent
from partialcow.table.delta.features import (
    ENFORCED_BY_SPARK,
    DeltaTableInfo,
    constraints,
    generated_columns,
    unsupported_features,
)
from partialcow.table.delta.stats import file_stats
from partialcow.table.java import java_errors, java_throwable
from partialcow.table.java import jvm as java_gateway
from partialcow.table.positions import positions, read_parquet_positions, refuse_partition_keys

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from partialcow.metrics import WriteMetrics

__all__ = ["COMMIT_ID_TAG", "DeltaSparkTable"]

#: commitInfo tag naming one commit of ours (a failed call looks for it before deleting anything)
COMMIT_ID_TAG = "partialcow.commitId"
_OPERATION_TAG = "partialcow.operation"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
# a character outside these may be percent-encoded in the log's spelling of a path
_NEEDS_QUOTING = re.compile(r"[^A-Za-z0-9._/-]")


class DeltaSparkTable:
    """The Delta table at ``root``, read and committed through delta-spark (the session has Delta).

    ``DeltaSparkTable(spark, "/warehouse/db.db/events", name="db.events").replace_files(FileReplacement(...))``;
    ``name`` is how errors name the table (its catalog name, when it has one).
    """

    table_format = "delta"

    def __init__(self, spark: SparkSession, root: str, *, name: str | None = None) -> None:
        self.spark = spark
        self.root = spark_log.local_root(root)
        self.location = self.root
        self.name = name or self.root
        self._live_cache: dict[int, list[DataFile]] = {}  # a version's files never change

    @property
    def table_uri(self) -> str:
        return self.root

    # ---------------------------------------------------------------- reading

    def current_version(self) -> int:
        return int(spark_log.latest_snapshot(self.spark, self.root).version())

    def _snapshot(self, version: int | None) -> Any:
        if version is None:
            return spark_log.latest_snapshot(self.spark, self.root)
        return spark_log.snapshot_at(self.spark, self.root, version)

    def column_ids(self) -> dict[str, int]:
        return {}  # column mapping (Delta's column ids) is refused, so a name is always the same column

    def normalize_path(self, path: str) -> str:
        """An absolute path for ``path`` as the log spells it (relative to the root, URL-encoded)."""
        if "://" in path or path.startswith("/") or path.startswith("file:"):
            return path if not path.startswith("file:") else spark_log.local_root(path)
        return f"{self.root}/{unquote(path)}"

    def live_files(self, version: int | None = None) -> list[DataFile]:
        """The data files live at ``version`` (default: latest); ``deletes`` is Delta's unique id of a file's
        deletion vector, so a file whose vector changed is another set of rows."""
        from pyspark.sql import functions as F

        if version is None:
            version = self.current_version()
        if version in self._live_cache:
            return list(self._live_cache[version])
        rows = spark_log.add_actions(self.spark, self._snapshot(version)).select(
            "path", "size",
            F.get_json_object("stats", "$.numRecords").cast("long").alias("n"),
            F.when(F.col("deletionVector").isNotNull(), F.concat_ws(
                "@", F.concat(F.col("deletionVector.storageType"), F.col("deletionVector.pathOrInlineDv")),
                F.col("deletionVector.offset").cast("string"))).alias("dv"),
        ).collect()
        out = []
        for r in rows:
            count = r["n"]
            if count is None:  # no stats in the log: the footer knows
                import pyarrow.parquet as pq

                count = pq.read_metadata(os.path.join(self.root, unquote(r["path"]))).num_rows
            out.append(DataFile(path=self.normalize_path(r["path"]), record_count=int(count),
                                file_size_bytes=int(r["size"]), deletes=r["dv"]))
        self._live_cache[version] = out
        return list(out)

    def read_rows(self, key_columns: Sequence[str], *, version: int, files: Mapping[str, int]) -> Any:
        """``key..., _file_id, _pos`` of ``files`` (path -> id) at ``version``."""
        snapshot = self._snapshot(version)
        info = spark_log.table_info(snapshot)
        refuse_partition_keys(self.name, key_columns, set(info.partition_columns))
        if "deletionVectors" not in info.reader_features:
            # no file can have a deletion vector (and delta-spark then hides _metadata.row_index): data files are
            # immutable, so reading them as Parquet is reading them at ``version``
            return read_parquet_positions(self.spark, key_columns, files)
        # delta-spark applies deletion vectors and keeps _metadata.row_index the physical row position
        frame = self.spark.read.format("delta").option("versionAsOf", str(int(version))).load(self.root)
        return positions(self.spark, frame, key_columns, files)

    def table_info(self, version: int | None = None) -> DeltaTableInfo:
        """Protocol, table properties, schema and partition columns at ``version`` (default: latest)."""
        return spark_log.table_info(self._snapshot(version))

    def check_supported(self, *, removing: bool = True, partitioned_ok: bool = True) -> None:
        """Raise ``UnsupportedTableFeatureError`` if this writer cannot honour the table's features (deletion
        vectors are honoured: a rewritten file leaves out the rows its vector deletes; check constraints and
        generated columns are enforced on every new file before the commit); ``partitioned_ok=False`` for a batch
        of changes (see ``unsupported_features``)."""
        problems = unsupported_features(self.table_info(), removing=removing, enforced=ENFORCED_BY_SPARK,
                                        partitioned_ok=partitioned_ok)
        if problems:
            raise UnsupportedTableFeatureError(self._refusal_message(problems))

    def late_refusals(self) -> list[str]:
        """The table's rules a write checks only once it knows the rows it writes and the files it removes (at the
        commit): check constraints, generated columns, append-only."""
        info = self.table_info()
        rules = [f"check constraint {n.removeprefix('delta.constraints.')}" for n in sorted(constraints(info))]
        rules += [f"generated column {c}" for c in sorted(generated_columns(info))]
        if info.configuration.get("delta.appendOnly", "").lower() == "true":
            rules.append("delta.appendOnly")
        return rules

    def deletion_vectors(self, version: int) -> dict[str, dict[str, Any]]:
        """Local path -> deletion vector descriptor of every file live at ``version`` that has one."""
        snapshot = self._snapshot(version)
        if "deletionVectors" not in spark_log.table_info(snapshot).reader_features:
            return {}  # no file can have one: no Spark job
        rows = spark_log.add_actions(self.spark, snapshot).where("deletionVector IS NOT NULL") \
            .selectExpr("path", "to_json(deletionVector) AS dv").collect()
        return {os.path.join(self.root, unquote(r["path"])): json.loads(r["dv"]) for r in rows}

    # ---------------------------------------------------------------- committing

    def replace_files(self, change: FileReplacement) -> CommitResult:
        """Commit ``change`` as one new Delta version through a delta-spark transaction based on
        ``change.base_version``: remove ``change.removed`` (live at the base), add ``change.added`` (written inside
        the table folder). On a conflict or refusal nothing is committed and the added files are deleted; when the
        outcome is unknown they are kept and ``CommitStateUnknownError`` is raised."""
        started = time.monotonic()
        added = [self._relative(p) for p in change.added]
        referenced: set[str] = set()  # our new files another commit already points at: never deleted
        try:
            if not change.removed and not added:
                raise CommitError(f"nothing to commit to Delta table {self.name}: no file removed or added")
            base = self._snapshot(change.base_version)
            live = self._live_from_log(base)
            # decoded path under the root -> path as the log writes it
            base_paths = self._live_paths(base) if live is None else {p: p for p in live}
            for rel in added:
                if rel in base_paths:
                    raise _KeepFiles(CommitError(
                        f"added file {rel} is already live in Delta table {self.name} at version "
                        f"{change.base_version}; write each new file under a fresh name"))
            removed = [self._resolve_removed(p, base_paths, change.base_version) for p in change.removed]
            if len(set(removed)) != len(removed) or len(set(added)) != len(added):
                raise _KeepFiles(CommitError(f"a file is listed twice in one change of Delta table {self.name}"))
            head = spark_log.latest_snapshot(self.spark, self.root)
            info = spark_log.table_info(head)
            problems = unsupported_features(info, removing=bool(removed), enforced=ENFORCED_BY_SPARK)
            if problems:
                raise UnsupportedTableFeatureError(self._refusal_message(problems))
            removed_actions = (self._base_actions(base, [base_paths[r] for r in removed]) if live is None
                               else [self._add_action(live[r]) for r in removed])
            partition_values = self._partition_values(info, removed_actions, added)
            add_json = [self._add_json(info, rel, partition_values) for rel in added]
            check_concurrent(self.name, change, removed, added, int(head.version()), referenced,
                             read_entry=lambda v: spark_log.read_log_entry(self.root, v),
                             read_columns=self._read_columns)
        except _KeepFiles as keep:
            raise keep.error from None
        except CommitError:
            self._delete_quietly([p for p in added if p not in referenced])
            raise
        commit_id = str(uuid.uuid4())
        try:
            version = self._commit(change, base, removed_actions, add_json, commit_id, started)
        except CommitStateUnknownError:
            raise
        except CommitError:
            self._delete_quietly(added)
            raise
        return CommitResult(
            version=version,
            previous_version=version - 1,
            removed=tuple(base_paths[r] for r in removed),
            added=tuple(quote(rel) for rel in added),
        )

    def replace_table(self, added: Sequence[str], *, schema: Mapping[str, Any], configuration: Mapping[str, str],
                      metrics: WriteMetrics, operation: str) -> CommitResult:
        """Make ``added`` the table's only files, ``schema`` (Delta's JSON form) its schema and ``configuration``
        its whole set of table properties (no partition columns), in one version based on the latest.

        What ``CREATE OR REPLACE`` and a first insert do in two versions, done in one: a reader sees the old table
        until the new one is whole, and a crash before the commit leaves the old table as it was. The protocol is
        kept (delta-spark adds what the new properties need). A concurrent commit fails this one with
        ``CommitConflictError``; errors and the added files are handled as in :meth:`replace_files`.
        """
        started = time.monotonic()
        rel_added = [self._relative(p) for p in added]
        try:
            base = spark_log.latest_snapshot(self.spark, self.root)
            # a table just created empty (a first build): no Spark job to list what is not there
            empty = spark_log.known_empty(self.root, int(base.version()))
            live = {} if empty else self._live_from_log(base)
            base_paths = self._live_paths(base) if live is None else {p: p for p in live}
            if any(rel in base_paths for rel in rel_added):
                raise _KeepFiles(CommitError(f"an added file is already live in Delta table {self.name}; write each "
                                             "new file under a fresh name"))
            metadata = json.loads(str(base.metadata().json()))["metaData"]
            metadata.update(schemaString=json.dumps(schema), configuration=dict(configuration), partitionColumns=[])
            info = dataclasses.replace(spark_log.table_info(base), schema=dict(schema),
                                       configuration=dict(configuration), partition_columns=())
            problems = unsupported_features(info, removing=True, enforced=ENFORCED_BY_SPARK)
            if problems:
                raise UnsupportedTableFeatureError(self._refusal_message(problems))
            removed_actions = (list(base.allFiles().collectAsList()) if live is None
                               else [self._add_action(a) for a in live.values()])
            add_json = [self._add_json(info, rel, {}) for rel in rel_added]
        except _KeepFiles as keep:
            raise keep.error from None
        except CommitError:
            self._delete_quietly(rel_added)
            raise
        change = FileReplacement(base_version=int(base.version()), removed=tuple(base_paths.values()),
                                 added=tuple(added), metrics=metrics, operation=operation)
        try:
            version = self._commit(change, base, removed_actions, add_json, str(uuid.uuid4()), started,
                                   metadata=json.dumps({"metaData": metadata}), overwrite=True)
        except CommitStateUnknownError:
            raise
        except CommitError:
            self._delete_quietly(rel_added)
            raise
        return CommitResult(version=version, previous_version=version - 1, removed=tuple(base_paths.values()),
                            added=tuple(quote(rel) for rel in rel_added))

    def _commit(self, change: FileReplacement, base: Any, removed: Sequence[Any], add_json: Sequence[str],
                commit_id: str, started: float, *, metadata: str | None = None, overwrite: bool = False) -> int:
        jvm = java_gateway(self.spark)
        original = self.spark._jsparkSession
        # userMetadata comes from the session's SQL conf: a session of our own carries it, so no other writer of
        # the shared session picks it up meanwhile (delta-spark takes the thread's active session)
        session = original.newSession()
        session.conf().set(_USER_METADATA, change.operation)
        now = int(time.time() * 1000)
        actions = [a.removeWithTimestamp(now, True) for a in removed]
        actions += [jvm.org.apache.spark.sql.delta.actions.Action.fromJson(a) for a in add_json]
        summary = change.metrics.as_commit_summary()
        summary["partialcow.duration_ms"] = str(
            max(change.metrics.duration_ms, int((time.monotonic() - started) * 1000)))
        tags = {COMMIT_ID_TAG: commit_id, _OPERATION_TAG: change.operation,
                **{k if k.startswith("partialcow.") else f"partialcow.{k}": str(v) for k, v in summary.items()}}
        utils = jvm.org.apache.spark.api.python.PythonUtils
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(session)
        try:
            log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(session, self.root)
            txn = log.startTransaction(jvm.scala.Option.apply(None), jvm.scala.Option.apply(base))
            txn.trackFilesRead(utils.toSeq(list(removed)))
            if metadata is not None:
                # False: the session's default table properties apply, as they do to CREATE OR REPLACE
                txn.updateMetadata(jvm.org.apache.spark.sql.delta.actions.Action.fromJson(metadata), False)
            if change.metrics.rows_inserted or metadata is not None:
                # the batch found its new keys absent from the whole table: any data change since then may hold one
                txn.readWholeTable()
            return int(txn.commit(utils.toSeq(actions), self._operation(overwrite), utils.toScalaMap(tags)))
        except java_errors() as exc:
            # also a converted one: once the `delta` Python package is imported, PySpark raises delta-spark's
            # conflicts as `delta.exceptions.*`, which were taken for an unknown outcome
            landed = self._find_commit(commit_id, change.base_version + 1)
            if landed is not None:  # it landed, then something after the commit failed (a checkpoint, a hook)
                return landed
            raise self._translate(exc) from exc
        finally:
            jvm.org.apache.spark.sql.SparkSession.setActiveSession(original)

    def _operation(self, overwrite: bool) -> Any:
        """The commit's Delta operation (what ``DESCRIBE HISTORY`` shows; our own label is in the tags)."""
        jvm = java_gateway(self.spark)
        operations = jvm.org.apache.spark.sql.delta
        none = jvm.scala.Option.apply(None)
        if overwrite:
            mode = jvm.org.apache.spark.sql.SaveMode.Overwrite
            return getattr(getattr(operations, "DeltaOperations$Write$"), "MODULE$").apply(mode, none, none, none)
        return getattr(getattr(operations, "DeltaOperations$Update$"), "MODULE$").apply(none)

    def _translate(self, exc: Any) -> CommitError:
        jvm = java_gateway(self.spark)
        error = java_throwable(exc)

        def conflict(first: str) -> CommitConflictError:
            return CommitConflictError(
                f"another writer changed Delta table {self.name} since the change's base version in a way Delta's "
                f"conflict rules reject ({first}); nothing was committed. Re-run the change against the new version")

        if error is None:
            # delta-spark's Python package converts its conflicts (`delta.exceptions.*`, all Java
            # ConcurrentModificationExceptions) without the Java exception: their class names tell
            first = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"[:500]
            if type(exc).__module__.startswith("delta.exceptions"):
                return conflict(first)
            return CommitError(f"delta-spark refused the commit to Delta table {self.name}: {first}")
        first = str(error.toString()).splitlines()[0][:500]

        def is_a(class_name: str) -> bool:
            cause = error
            while cause is not None:
                if jvm.java.lang.Class.forName(class_name).isInstance(cause):
                    return True
                cause = cause.getCause()
            return False

        if is_a("java.util.ConcurrentModificationException"):
            return conflict(first)
        if "UnsupportedTableFeature" in first or "InvalidProtocolVersion" in first:
            return UnsupportedTableFeatureError(f"delta-spark refused the commit to Delta table {self.name}: {first}")
        if is_a("java.io.IOException"):
            return CommitStateUnknownError(
                f"commit to Delta table {self.name} failed ({first}) and cannot be confirmed absent; the new files "
                "are kept. Check the table's history before retrying")
        return CommitError(f"delta-spark refused the commit to Delta table {self.name}: {first}")

    def _find_commit(self, commit_id: str, first: int) -> int | None:
        """The log version from ``first`` on that carries ``commit_id``, None when none does. Every version present
        is read: log cleanup may have removed the first ones after a checkpoint (stopping at the first gap took a
        commit that landed for one that did not, and its files were deleted)."""
        for version in spark_log.log_versions(self.root, first):
            try:
                entries = spark_log.read_log_entry(self.root, version)
            except FileNotFoundError:
                continue  # removed by log cleanup meanwhile
            for action in entries:
                info = action.get("commitInfo")
                if info is not None and (info.get("tags") or {}).get(COMMIT_ID_TAG) == commit_id:
                    return version
        return None

    # ---------------------------------------------------------------- internals

    def _refusal_message(self, problems: Sequence[str]) -> str:
        return (f"Delta table {self.name} uses features partial copy-on-write cannot honour: " + "; ".join(problems)
                + ". Use a full rewrite (e.g. Spark MERGE) for this table, or disable the feature")

    def _live_from_log(self, snapshot: Any) -> dict[str, dict[str, Any]] | None:
        """Path -> add action (Delta's JSON form: path, size, modificationTime, stats with numRecords) of every file
        live in delta-spark's ``snapshot``, read from the log by delta-rs in milliseconds; None where this reading
        does not apply and delta-spark's state reconstruction (a Spark job; seconds in a fresh process) must list
        them instead.

        It applies to the tables partial copy-on-write writes: unpartitioned, without deletion vectors or row
        tracking (whose add actions carry fields a removal must repeat), every path spelled the same encoded and
        decoded. Anything else, or any error of delta-rs, falls back to delta-spark.
        """
        try:
            import pyarrow as pa
            from deltalake import DeltaTable
        except ImportError:
            return None
        info = spark_log.table_info(snapshot)
        if (info.partition_columns or "deletionVectors" in info.reader_features
                or {"rowTracking", "domainMetadata"} & info.writer_features):
            return None
        try:
            actions = pa.table(DeltaTable(self.root, version=int(snapshot.version())).get_add_actions(flatten=True))
        except Exception:  # noqa: BLE001 - any table delta-rs cannot read is listed by delta-spark instead
            return None
        paths = actions.column("path").to_pylist()
        if any(_NEEDS_QUOTING.search(p) for p in paths):
            return None  # a path the log may spell encoded: delta-spark's own listing knows how
        sizes = actions.column("size_bytes").to_pylist()
        times = actions.column("modification_time").to_pylist()
        counts = (actions.column("num_records").to_pylist() if "num_records" in actions.column_names
                  else [None] * len(paths))
        out = {}
        for path, size, mtime, count in zip(paths, sizes, times, counts):
            add: dict[str, Any] = {"path": path, "partitionValues": {}, "size": int(size),
                                   "modificationTime": int(mtime), "dataChange": True}
            if count is not None:
                add["stats"] = json.dumps({"numRecords": int(count)})
            out[path] = add
        return out

    def _add_action(self, add: Mapping[str, Any]) -> Any:
        """delta-spark's ``AddFile`` of an add action in JSON form (what a removal and the read set are made of)."""
        jvm = java_gateway(self.spark)
        return jvm.org.apache.spark.sql.delta.actions.Action.fromJson(json.dumps({"add": add}))

    def _live_paths(self, snapshot: Any) -> dict[str, str]:
        rows = spark_log.add_actions(self.spark, snapshot).select("path").collect()
        return {unquote(r["path"]): r["path"] for r in rows}

    def _base_actions(self, snapshot: Any, log_paths: Sequence[str]) -> list[Any]:
        """The base snapshot's add actions (JVM objects, deletion vectors included) of ``log_paths``."""
        if not log_paths:
            return []
        literals = ", ".join("'" + p.replace("\\", "\\\\").replace("'", "\\'") + "'" for p in log_paths)
        found = list(snapshot.allFiles().filter(f"path IN ({literals})").collectAsList())
        if len(found) != len(log_paths):
            raise CommitConflictError(f"files {list(log_paths)[:3]} are no longer all live in Delta table {self.name}")
        return found

    def _resolve_removed(self, path: str, live: Mapping[str, str], base_version: int) -> str:
        rel = self._relative(path) if os.path.isabs(path) or path.startswith("file:") else unquote(path)
        if rel in live:
            return rel
        raise CommitConflictError(
            f"file {path} is not live in Delta table {self.name} at base version {base_version}; pass paths from "
            f"live_files({base_version}) (it may have been removed by another writer)")

    def _partition_values(self, info: DeltaTableInfo, removed: Sequence[Any], added: Sequence[str]) -> dict[str, Any]:
        if not info.partition_columns or not added:
            return {}
        distinct = {tuple(sorted(json.loads(str(a.json()))["add"]["partitionValues"].items())) for a in removed}
        if len(distinct) != 1:
            raise CommitError(
                f"partitioned Delta table {self.name} (by {list(info.partition_columns)}): new files take the "
                f"partition values of the files they replace, so a change must remove files of exactly one partition "
                f"(got {len(distinct)}); split it into one change per partition")
        return dict(next(iter(distinct)))

    def _add_json(self, info: DeltaTableInfo, rel: str, partition_values: Mapping[str, Any]) -> str:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = os.path.join(self.root, rel)
        try:
            stat = os.stat(path)
            metadata = pq.read_metadata(path)
        except FileNotFoundError:
            raise CommitError(f"new file {rel} does not exist under Delta table {self.name}; write it inside the "
                              "table folder") from None
        except (pa.ArrowException, OSError) as exc:
            raise CommitError(f"new file {rel} of Delta table {self.name} is not readable Parquet: {exc}") from exc
        stats = file_stats(metadata, info.schema, info.partition_columns, info.configuration, rel, self.name,
                           missing_nullable_ok=True)
        return json.dumps({"add": {
            "path": quote(rel), "partitionValues": dict(partition_values), "size": stat.st_size,
            "modificationTime": int(stat.st_mtime * 1000), "dataChange": True, "stats": stats,
        }}, ensure_ascii=False)

    def _read_columns(self, rel: str, columns: list[str]) -> Any:
        import pyarrow.parquet as pq

        return pq.read_table(os.path.join(self.root, rel), columns=columns, coerce_int96_timestamp_unit=INT96_UNIT)

    def _relative(self, path: str) -> str:
        local = spark_log.local_root(path) if path.startswith("file:") or os.path.isabs(path) else \
            os.path.join(self.root, unquote(path))
        rel = os.path.relpath(local, self.root)
        parts = rel.split(os.sep)
        if rel.startswith("..") or parts[0] == "_delta_log":
            raise CommitError(f"file {path} must be a data file inside Delta table {self.name} (not outside it or "
                              "in _delta_log)")
        return rel.replace(os.sep, "/")

    def _delete_quietly(self, paths: Sequence[str]) -> None:
        for rel in paths:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.root, rel))
            with contextlib.suppress(OSError):
                remove_sidecar(os.path.join(self.root, rel))


class _KeepFiles(Exception):
    """Internal: an error raised before we may safely delete the caller's files (they may be live or foreign)."""

    def __init__(self, error: CommitError) -> None:
        super().__init__(str(error))
        self.error = error
