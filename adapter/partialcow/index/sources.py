"""Where the index reads from: a table snapshot's live files, and a way to read ``(key..., file, pos)`` of some of them.

Two implementations share everything else in ``partialcow.index``:

- ``IcebergSource``: reads ``SELECT key..., _file, _pos FROM t VERSION AS OF <snapshot>``, so position deletes and
  equality deletes are honoured (``_pos`` stays the physical row position in the data file). Live files come from
  Iceberg's scan planning (``table.newScan().useSnapshot(s).planFiles()`` over py4j): each task names its data file
  *and the delete files that apply to it*. The index records a signature of those delete files per data file, which is
  how a data file that gained deletes through someone else's ``DELETE``/merge-on-read ``MERGE`` is noticed even though
  its path did not change (the snapshot summary only counts delete files, it does not say which data files they hit).
- ``ParquetFilesSource``: a fixed set of plain Parquet files (no table format), e.g. for benchmarks.
- ``DeltaSource``: live files from delta-rs (``DeltaTable.get_add_actions``), read with Spark's own Parquet reader and
  its ``_metadata.file_path`` / ``_metadata.row_index`` columns (no delta-spark jar needed). Files with deletion vectors
  are refused: Spark's plain Parquet reader would not apply them.
- ``DeltaSparkSource``: where the session has Delta, live files from delta-spark's snapshot and rows read through
  delta-spark itself (``_metadata.row_index`` stays the physical position; rows a deletion vector removes are not
  read). A file's deletion vector is its delete signature, so a file that gained one through another writer's
  ``DELETE``/``MERGE`` is re-indexed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import unquote

from partialcow.exceptions import ConfigurationError, UnsupportedTableFeatureError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DeltaSource",
    "DeltaSparkSource",
    "IcebergSource",
    "LiveFile",
    "ParquetFilesSource",
    "TableSource",
    "quote_identifier",
    "read_parquet_positions",
]

FILE_ID = "_file_id"
POS = "_pos"


@dataclass(frozen=True)
class LiveFile:
    """A data file live in a snapshot: its path as the table format names it, its record count, its deletes."""

    path: str
    record_count: int
    deletes: str | None = None  # signature of the delete files applied to it (None: no deletes)


@runtime_checkable
class TableSource(Protocol):
    """What the index needs from a table: identity, location, versions, live files and positional reads."""

    spark: SparkSession
    name: str
    table_format: str
    location: str

    def current_version(self) -> int:
        """The table's current snapshot id / version (-1 for a table without any snapshot)."""
        ...

    def live_files(self, version: int | None = None) -> list[LiveFile]:
        """The data files live at ``version`` (default: current)."""
        ...

    def normalize_path(self, path: str) -> str:
        """The path as ``live_files`` spells it (committers may report relative or differently encoded paths)."""
        ...

    def read_rows(self, key_columns: Sequence[str], *, version: int, files: Mapping[str, int]) -> DataFrame:
        """Rows of ``files`` (path -> file id) at ``version`` as ``key..., _file_id (int), _pos (bigint)``."""
        ...


def quote_identifier(name: str) -> str:
    """Backtick-quote each part of a dotted table name (embedded backticks doubled).

    >>> quote_identifier("db.my`table")
    '`db`.`my``table`'
    """
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))


def _files_frame(spark: SparkSession, files: Mapping[str, int], path_column: str) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    schema = StructType([StructField(path_column, StringType(), False), StructField(FILE_ID, IntegerType(), False)])
    return F.broadcast(spark.createDataFrame(list(files.items()), schema))


def read_parquet_positions(spark: SparkSession, key_columns: Sequence[str], files: Mapping[str, int]) -> DataFrame:
    """Read ``key..., _file_id, _pos`` from plain Parquet files with Spark's reader (``_metadata.row_index``).

    ``files`` maps each file's path (local path or URI) to its id in the index.
    """

    if not files:
        raise ValueError("no files to read")
    return _positions(spark, spark.read.parquet(*files.keys()), key_columns, files)


def _positions(
    spark: SparkSession, frame: DataFrame, key_columns: Sequence[str], files: Mapping[str, int]
) -> DataFrame:
    """``key..., _file_id, _pos`` of ``frame``'s rows in ``files`` (path -> id), by Spark's file metadata columns."""
    from pyspark.sql import functions as F

    # Spark reports _metadata.file_path as the qualified, URL-encoded Hadoop URI; compute the same form to join
    # back, with local URIs reduced to their path on both sides (Spark prints file:/x where Hadoop says file:///x).
    from partialcow.commit.java import jvm

    conf = spark.sparkContext._jsc.hadoopConfiguration()
    by_uri: dict[str, int] = {}
    for path, file_id in files.items():
        hpath = jvm(spark).org.apache.hadoop.fs.Path(path)
        uri = str(hpath.getFileSystem(conf).makeQualified(hpath).toUri().toString())
        by_uri[re.sub(r"^file:/+", "/", uri)] = file_id
    rows = frame.select(
        *[F.col(quote_identifier(c)) for c in key_columns],
        F.regexp_replace(F.col("_metadata.file_path"), r"^file:/+", "/").alias("_uri"),
        F.col("_metadata.row_index").cast("bigint").alias(POS),
    )
    return rows.join(_files_frame(spark, by_uri, "_uri"), "_uri").drop("_uri")


class IcebergSource:
    """An Iceberg table of the session's catalog, e.g. ``IcebergSource(spark, "db.events")``."""

    table_format = "iceberg"

    def __init__(self, spark: SparkSession, table_name: str) -> None:
        self.spark = spark
        self.name = table_name
        self._table = self._load()
        self.location = str(self._table.location())
        self._live_cache: dict[int, list[LiveFile]] = {}  # a snapshot's files never change

    def _load(self) -> Any:
        from partialcow.commit.java import load_iceberg_table

        try:
            return load_iceberg_table(self.spark, self.name)
        except Exception as exc:  # noqa: BLE001 - py4j wraps NoSuchTableException and class-not-found alike
            raise ConfigurationError(
                f"cannot load Iceberg table {self.name}: {str(exc).splitlines()[0]}; check the table name and that "
                "the session has the Iceberg catalog (partialcow.spark.session.get_or_create_session)"
            ) from None

    def current_version(self) -> int:
        self._table.refresh()
        snapshot = self._table.currentSnapshot()
        return -1 if snapshot is None else int(snapshot.snapshotId())

    def live_files(self, version: int | None = None) -> list[LiveFile]:
        if version is None:
            version = self.current_version()
        if version < 0:
            return []
        if version in self._live_cache:
            return list(self._live_cache[version])
        if self._table.snapshot(version) is None:  # committed after we loaded the table (e.g. by our committer)
            self._table.refresh()
        tasks = self._table.newScan().useSnapshot(version).planFiles()
        out: list[LiveFile] = []
        try:
            it = tasks.iterator()
            while it.hasNext():
                task = it.next()
                data_file = task.file()
                deletes = sorted(str(d.location()) for d in task.deletes())
                signature = hashlib.sha1("\n".join(deletes).encode()).hexdigest()[:16] if deletes else None
                out.append(LiveFile(str(data_file.location()), int(data_file.recordCount()), signature))
        finally:
            tasks.close()
        self._live_cache[version] = out
        return list(out)

    def normalize_path(self, path: str) -> str:
        return path

    def read_rows(self, key_columns: Sequence[str], *, version: int, files: Mapping[str, int]) -> DataFrame:
        from pyspark.sql import functions as F

        keys = ", ".join(quote_identifier(c) for c in key_columns)
        # VERSION AS OF pins the read to the snapshot the index records; _file/_pos honour delete files.
        rows = self.spark.sql(
            f"SELECT {keys}, _file, _pos FROM {quote_identifier(self.name)} VERSION AS OF {int(version)}"
        )
        if not {f.path for f in self.live_files(version)} <= set(files):
            # Iceberg does not prune data files on a _file predicate: this still scans the snapshot's key columns.
            rows = rows.where(F.col("_file").isin(list(files.keys())))
        return (
            rows.join(_files_frame(self.spark, files, "_file"), "_file")
            .drop("_file")
            .withColumn(POS, F.col(POS).cast("bigint"))
        )


class DeltaSource:
    """A Delta table by path, read through delta-rs metadata and Spark's Parquet reader.

    ``DeltaSource(spark, "/data/events")``
    """

    table_format = "delta"

    def __init__(
        self, spark: SparkSession, table_uri: str, *, storage_options: Mapping[str, str] | None = None
    ) -> None:
        try:
            from deltalake import DeltaTable
        except ImportError:
            raise ConfigurationError("Delta tables need delta-rs: pip install 'dbt-partialcow[delta]'") from None
        self.spark = spark
        self._DeltaTable = DeltaTable
        self._storage_options = dict(storage_options or {})
        self.name = table_uri
        table = DeltaTable(table_uri, storage_options=self._storage_options or None)
        self.location = str(table.table_uri).rstrip("/")
        self._partition_columns = set(table.metadata().partition_columns)

    def current_version(self) -> int:
        return int(self._DeltaTable(self.location, storage_options=self._storage_options or None).version())

    def normalize_path(self, path: str) -> str:
        if "://" in path or path.startswith("/") or path.startswith("file:"):
            return path if not path.startswith("file:") else self._absolute(path)
        return f"{self._absolute(self.location)}/{unquote(path)}"

    @staticmethod
    def _absolute(uri: str) -> str:
        from partialcow.index.storage import local_path

        local = local_path(uri)
        return local.rstrip("/") if local is not None else uri.rstrip("/")

    def live_files(self, version: int | None = None) -> list[LiveFile]:
        import pyarrow as pa

        table = self._DeltaTable(self.location, version=version, storage_options=self._storage_options or None)
        actions = pa.table(table.get_add_actions(flatten=True))
        dv_columns = [c for c in actions.column_names if c.startswith("deletionVector")]
        paths = actions.column("path").to_pylist()
        counts = (
            actions.column("num_records").to_pylist() if "num_records" in actions.column_names else [None] * len(paths)
        )
        for column in dv_columns:
            hits = [p for p, v in zip(paths, actions.column(column).to_pylist()) if v is not None]
            if hits:
                raise UnsupportedTableFeatureError(
                    f"Delta table {self.name}: file {hits[0]} has a deletion vector, which the row index cannot read "
                    "through Spark's Parquet reader; run OPTIMIZE/purge to materialise deletes, then rebuild the index"
                )
        return [LiveFile(self.normalize_path(p), -1 if n is None else int(n)) for p, n in zip(paths, counts)]

    def read_rows(self, key_columns: Sequence[str], *, version: int, files: Mapping[str, int]) -> DataFrame:
        _refuse_partition_keys(self.name, key_columns, self._partition_columns)
        # Delta data files are immutable: reading them by path is reading them at ``version``.
        return read_parquet_positions(self.spark, key_columns, files)


class DeltaSparkSource:
    """A Delta table by path, read through delta-spark (the session has Delta; see ``commit.delta.spark_log``).

    ``DeltaSparkSource(spark, "/warehouse/db.db/events", name="db.events")``
    """

    table_format = "delta"

    def __init__(self, spark: SparkSession, table_root: str, *, name: str | None = None) -> None:
        from partialcow.commit.delta import spark_log

        self.spark = spark
        self._log = spark_log
        self.location = spark_log.local_root(table_root)
        self.name = name or self.location
        info = spark_log.table_info(spark_log.latest_snapshot(spark, self.location))
        self._partition_columns = set(info.partition_columns)
        self._live_cache: dict[int, list[LiveFile]] = {}  # a version's files never change

    def current_version(self) -> int:
        return int(self._log.latest_snapshot(self.spark, self.location).version())

    def normalize_path(self, path: str) -> str:
        if "://" in path or path.startswith("/") or path.startswith("file:"):
            return path if not path.startswith("file:") else DeltaSource._absolute(path)
        return f"{self.location}/{unquote(path)}"

    def live_files(self, version: int | None = None) -> list[LiveFile]:
        from pyspark.sql import functions as F

        if version is None:
            version = self.current_version()
        if version in self._live_cache:
            return list(self._live_cache[version])
        snapshot = self._log.snapshot_at(self.spark, self.location, version)
        rows = self._log.add_actions(self.spark, snapshot).select(
            "path",
            F.get_json_object("stats", "$.numRecords").cast("long").alias("n"),
            # Delta's uniqueId of a deletion vector: a file whose vector changed is another set of rows
            F.when(F.col("deletionVector").isNotNull(), F.concat_ws(
                "@", F.concat(F.col("deletionVector.storageType"), F.col("deletionVector.pathOrInlineDv")),
                F.col("deletionVector.offset").cast("string"))).alias("dv"),
        ).collect()
        out = [LiveFile(self.normalize_path(r["path"]), -1 if r["n"] is None else int(r["n"]), r["dv"]) for r in rows]
        self._live_cache[version] = out
        return list(out)

    def read_rows(self, key_columns: Sequence[str], *, version: int, files: Mapping[str, int]) -> DataFrame:
        _refuse_partition_keys(self.name, key_columns, self._partition_columns)
        snapshot = self._log.snapshot_at(self.spark, self.location, version)
        if "deletionVectors" not in self._log.table_info(snapshot).reader_features:
            # no file can have a deletion vector (and delta-spark then hides _metadata.row_index): data files are
            # immutable, so reading them as Parquet is reading them at ``version``
            return read_parquet_positions(self.spark, key_columns, files)
        # delta-spark applies deletion vectors and keeps _metadata.row_index the physical row position
        frame = self.spark.read.format("delta").option("versionAsOf", str(int(version))).load(self.location)
        return _positions(self.spark, frame, key_columns, files)


class ParquetFilesSource:
    """A fixed set of plain Parquet files as one version-0 "table"; the index lives under ``location``.

    ``ParquetFilesSource(spark, ["/data/a.parquet", "/data/b.parquet"], location="/data")``
    """

    table_format = "parquet"

    def __init__(self, spark: SparkSession, files: Sequence[str], *, location: str, name: str | None = None) -> None:
        if not files:
            raise ConfigurationError(f"ParquetFilesSource at {location}: pass at least one Parquet file")
        self.spark = spark
        self.location = location
        self.name = name or location
        self._files = list(files)

    def current_version(self) -> int:
        return 0

    def live_files(self, version: int | None = None) -> list[LiveFile]:
        import pyarrow.parquet as pq

        from partialcow.index.storage import local_path

        out = []
        for path in self._files:
            local = local_path(path)
            # the footer's row count sizes the buckets; remote files stay unknown (-1) and are counted by Spark
            out.append(LiveFile(path, pq.ParquetFile(local).metadata.num_rows if local else -1))
        return out

    def normalize_path(self, path: str) -> str:
        return path

    def read_rows(self, key_columns: Sequence[str], *, version: int, files: Mapping[str, int]) -> DataFrame:
        return read_parquet_positions(self.spark, key_columns, files)


def _refuse_partition_keys(table: str, key_columns: Sequence[str], partition_columns: set[str]) -> None:
    """Delta keeps partition values in its log, not in the data files the index reads."""
    partition_keys = sorted(set(key_columns) & partition_columns)
    if partition_keys:
        raise ConfigurationError(
            f"Delta table {table}: key column(s) {partition_keys} are partition columns, which are not stored in "
            "the data files; index a key made of data columns"
        )
