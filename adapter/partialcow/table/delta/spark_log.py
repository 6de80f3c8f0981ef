"""delta-spark's transaction log over py4j: whether the session has Delta, a table's snapshots and their files.

delta-spark's ``DeltaLog`` is internal API (stable within a release line, pinned by ``DELTA_MAVEN`` and tested where
the jar is): ``DeltaLog.forTable(spark, path)``, ``update()`` for the latest snapshot, ``getSnapshotAt(v)`` for time
travel, and the snapshot's protocol, metadata and add actions. Protocol and metadata cross as their JSON actions,
the add actions as a Spark DataFrame: no Scala object is taken apart field by field from Python.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from partialcow.exceptions import CommitError, ConfigurationError
from partialcow.table.delta.features import DeltaTableInfo
from partialcow.table.java import jvm

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "add_actions",
    "delta_log",
    "has_delta",
    "known_empty",
    "latest_snapshot",
    "local_root",
    "log_versions",
    "read_log_entry",
    "snapshot_at",
    "table_info",
]


def has_delta(spark: SparkSession) -> bool:
    """Whether the session can run delta-spark: its jar loaded and Delta's SQL extension configured.

    A session without the extension cannot read Delta tables by name, and an Iceberg session holds Iceberg's catalog
    in ``spark_catalog`` (one session catalog holds one table format).
    """
    extensions = spark.sparkContext.getConf().get("spark.sql.extensions") or ""
    if "io.delta.sql.DeltaSparkSessionExtension" not in extensions:
        return False
    from py4j.java_gateway import JavaClass

    return isinstance(jvm(spark).org.apache.spark.sql.delta.DeltaLog, JavaClass)


def _none(spark: SparkSession) -> Any:
    return jvm(spark).scala.Option.apply(None)


def local_root(uri: str) -> str:
    """A Delta table root (local path or ``file:`` URI) as an absolute local path without a trailing slash.

    >>> local_root("file:///tmp/t/"), local_root("/tmp/a%20b")
    ('/tmp/t', '/tmp/a%20b')
    """
    if uri.startswith("file:"):
        return os.path.abspath(unquote(urlparse(uri).path))
    if "://" in uri:
        raise ConfigurationError(
            f"Delta table {uri}: partial copy-on-write rewrites files on a local or mounted file system; "
            f"the {urlparse(uri).scheme!r} scheme is not supported yet"
        )
    return os.path.abspath(uri)


def delta_log(spark: SparkSession, root: str) -> Any:
    """delta-spark's ``DeltaLog`` of the table at ``root`` (cached by delta-spark per path)."""
    return jvm(spark).org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, local_root(root))


def latest_snapshot(spark: SparkSession, root: str) -> Any:
    """The table's latest snapshot (the log is listed again: commits of other writers are seen)."""
    log = delta_log(spark, root)
    snapshot = log.update(False, _none(spark), _none(spark))
    if int(snapshot.version()) < 0:
        raise CommitError(f"no Delta table at {root}: its _delta_log holds no version")
    return snapshot


def snapshot_at(spark: SparkSession, root: str, version: int) -> Any:
    """The table's snapshot at ``version`` (time travel through delta-spark)."""
    return delta_log(spark, root).getSnapshotAt(int(version), _none(spark), _none(spark))


def table_info(snapshot: Any) -> DeltaTableInfo:
    """A snapshot's protocol, table properties, schema and partition columns."""
    protocol = json.loads(str(snapshot.protocol().json()))["protocol"]
    metadata = json.loads(str(snapshot.metadata().json()))["metaData"]
    return DeltaTableInfo(
        min_reader_version=int(protocol["minReaderVersion"]),
        min_writer_version=int(protocol["minWriterVersion"]),
        reader_features=frozenset(protocol.get("readerFeatures") or ()),
        writer_features=frozenset(protocol.get("writerFeatures") or ()),
        configuration=dict(metadata.get("configuration") or {}),
        schema=json.loads(metadata["schemaString"]),
        partition_columns=tuple(metadata.get("partitionColumns") or ()),
    )


def add_actions(spark: SparkSession, snapshot: Any) -> DataFrame:
    """The snapshot's live files as a DataFrame of add actions (``path``, ``size``, ``stats``,
    ``deletionVector``...)."""
    from pyspark.sql import DataFrame

    return DataFrame(snapshot.allFiles().toDF(), spark)


def known_empty(root: str, version: int) -> bool:
    """Whether version ``version`` of the table is known to hold no file, read from the version's checksum file
    (``.crc``, which delta-spark writes after each commit) rather than by reconstructing the table's state (a
    Spark job; delta-spark's own ``numOfFilesIfKnown`` runs it too). False when there is no checksum to say so.
    """
    path = os.path.join(local_root(root), "_delta_log", f"{version:020d}.crc")
    try:
        with open(path, encoding="utf-8") as handle:
            checksum = json.load(handle)
    except (OSError, ValueError):
        return False
    return bool(checksum.get("numFiles") == 0)


def log_versions(root: str, first: int = 0) -> list[int]:
    """The versions from ``first`` on whose commit file (``<version>.json``) is in the table's log, in order."""
    log = os.path.join(local_root(root), "_delta_log")
    try:
        listed = os.listdir(log)
    except FileNotFoundError:
        return []
    names = (n for n in listed if len(n) == 25 and n.endswith(".json") and n[:20].isdigit())
    return sorted(v for v in (int(n[:20]) for n in names) if v >= first)


def read_log_entry(root: str, version: int) -> list[dict[str, Any]]:
    """The actions of log version ``version`` (raises FileNotFoundError when the version does not exist)."""
    path = os.path.join(local_root(root), "_delta_log", f"{version:020d}.json")
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
