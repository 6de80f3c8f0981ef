"""Create (or replace) an Iceberg table together with its first data files, in one atomic commit; drop one with
its files.

Iceberg's create-or-replace transaction assigns the new schema's field ids before anything is committed, so the
data files can be written with those ids first and the table appears (or replaces the old one) only when the
transaction commits with them: a first build or full refresh that fails half-way leaves no table, or the old table
exactly as it was. This is what Spark's atomic CTAS does through a staging catalog; we need it from Python because
our files are written by our own Parquet writer.

Dropping with its files (:func:`purge_table`) goes through the catalog's Java API too: Spark's ``DROP TABLE ...
PURGE`` runs Iceberg's ``deleteReachableFiles`` action as Spark jobs, which a branch operation pays for every
overlay and base image it drops (``bench/README.md``, "Measurements behind code choices").
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from partialcow.exceptions import CommitConflictError, CommitError, CommitStateUnknownError
from partialcow.metrics import WriteMetrics
from partialcow.table.base import CommitResult, quote_identifier
from partialcow.table.iceberg import NO_SNAPSHOT
from partialcow.table.iceberg_metrics import DataFileBuilder
from partialcow.table.java import bind_to_current_thread, java_errors, java_message, load_iceberg_table

__all__ = ["NewIcebergTable", "purge_table"]

_COMMIT_ID = "partialcow.commit-id"


class NewIcebergTable:
    """A table being created or replaced in the Spark session's Iceberg catalog, committed with its files.

    >>> new = NewIcebergTable(spark, "db.events", spark_schema, {"format-version": "2"})  # doctest: +SKIP
    >>> new.schema_json["fields"][0]["id"], new.location  # doctest: +SKIP
    (1, 'file:/wh/db.db/events')
    >>> new.commit(["file:/wh/db.db/events/data/a.parquet"], WriteMetrics(rows_inserted=10))  # doctest: +SKIP
    """

    def __init__(self, spark: Any, name: str, spark_schema: Any, properties: Mapping[str, str]) -> None:
        self._spark = spark
        self._jvm = spark._jvm
        self.name = name
        jvm = self._jvm
        try:
            catalog = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergCatalog(spark._jsparkSession, "spark_catalog")
            schema = jvm.org.apache.iceberg.spark.SparkSchemaUtil.convert(spark_schema)
            java_props = jvm.java.util.HashMap()
            for key, value in properties.items():
                java_props.put(key, value)
            identifier = jvm.org.apache.iceberg.catalog.TableIdentifier.parse(name)
            self._txn = catalog.buildTable(identifier, schema).withProperties(java_props).createOrReplaceTransaction()
            self._table = self._txn.table()
            self.schema_json: dict[str, Any] = json.loads(
                str(jvm.org.apache.iceberg.SchemaParser.toJson(self._table.schema()))
            )
            self.location = str(self._table.location())
            self.properties = {str(k): str(v) for k, v in dict(self._table.properties()).items()}
        except java_errors() as exc:
            message = java_message(exc)
            if "Cannot downgrade" in message:
                # a replace keeps the table's format version or raises it, never lowers it
                message += (f"; Iceberg never turns a table back to an older format: drop it (DROP TABLE {name} "
                            "PURGE) and build it again. Nothing was changed")
            raise CommitError(f"cannot create Iceberg table {name}: {message}") from exc

    def commit(self, paths: Sequence[str], metrics: WriteMetrics) -> CommitResult:
        """Append ``paths`` (Parquet files written with :attr:`schema_json`'s field ids) and commit the table."""
        jvm = self._jvm
        table = self._table
        commit_id = str(uuid.uuid4())
        try:
            append = table.newAppend()
            builder = DataFileBuilder(jvm, table, table.spec())
            for path in paths:
                append = append.appendFile(builder.build(path))
            for key, value in {**metrics.as_commit_summary(), "partialcow.operation": "partial_cow_create",
                               _COMMIT_ID: commit_id}.items():
                append = append.set(key, value)
            append.commit()
        except java_errors() as exc:
            raise CommitError(f"cannot prepare the first commit of Iceberg table {self.name}: {java_message(exc)}; "
                              "nothing was committed") from exc
        try:
            self._txn.commitTransaction()
        except java_errors() as exc:
            message = java_message(exc)
            if "CommitStateUnknownException" in message:
                raise CommitStateUnknownError(
                    f"creating Iceberg table {self.name} may or may not have committed: {message}; its files are kept"
                ) from exc
            if "AlreadyExists" in message or "CommitFailed" in message:
                raise CommitConflictError(
                    f"Iceberg table {self.name} was created or changed by another writer during this build: {message}"
                ) from exc
            raise CommitError(f"Iceberg refused to create table {self.name}: {message}") from exc
        try:
            self._spark.catalog.refreshTable(self.name)
            loaded = load_iceberg_table(self._spark, self.name)
            snapshot = loaded.currentSnapshot()
            while snapshot is not None and snapshot.summary().get(_COMMIT_ID) != commit_id:
                parent = snapshot.parentId()
                snapshot = None if parent is None else loaded.snapshot(parent)
        except Exception as exc:
            # the catalog took the commit: its files are the table's now, whatever failed after it
            raise CommitStateUnknownError(f"Iceberg table {self.name} was committed, but reading it back failed: "
                                          f"{exc}; its files are kept, check the table") from exc
        if snapshot is None:
            raise CommitStateUnknownError(f"Iceberg table {self.name} was committed but carries no snapshot "
                                          f"{_COMMIT_ID}={commit_id}; check the table")
        parent = snapshot.parentId()
        return CommitResult(version=int(snapshot.snapshotId()),
                            previous_version=NO_SNAPSHOT if parent is None else int(parent),
                            removed=(), added=tuple(paths))


def purge_table(spark: Any, schema: str, table: str) -> bool:
    """``DROP TABLE IF EXISTS schema.table PURGE``, done by the session's Iceberg catalog on the driver when that
    deletes what Spark's statement would (:func:`_catalog_purges_alike`): the metastore entry, then every file the
    table's metadata reaches. True when a table was dropped. Anything else (a view, a table of another format, a
    session catalog that is not Iceberg's, a table Spark would refuse to purge) takes Spark's statement, with its
    errors.
    """
    name = quote_identifier(f"{schema}.{table}")
    catalog: Any = None
    identifier: Any = None
    loaded: Any = None
    try:
        bind_to_current_thread(spark)
        catalog = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergCatalog(spark._jsparkSession,
                                                                                     "spark_catalog")
        identifier = _identifier(spark, schema, table)
        loaded = catalog.loadTable(identifier)  # raises for a missing table, a view or another format
        alike = _catalog_purges_alike(loaded)
    except java_errors():
        alike = False
    if alike:
        return bool(catalog.dropTable(identifier, True))
    if loaded is None and not spark.catalog.tableExists(name):
        return False
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
    return True


def _catalog_purges_alike(table: Any) -> bool:
    """Whether the catalog's drop with purge deletes the same files as Spark's ``PURGE`` (Iceberg's
    ``deleteReachableFiles``). Not with garbage collection off: Spark refuses to purge such a table, whose files
    may be another table's (a branch's image table holds its root table's manifests and metadata log), while the
    catalog's drop deletes all but its data files. Nor when the metadata log is full: older metadata files than it
    lists may exist, which Spark's action finds through the log and the catalog's drop leaves behind.
    """
    properties = table.properties()
    if str(properties.getOrDefault("gc.enabled", "true")).lower() == "false":
        return False
    keep = int(properties.getOrDefault("write.metadata.previous-versions-max", "100"))
    return int(table.operations().current().previousFiles().size()) < keep


def _identifier(spark: Any, schema: str, table: str) -> Any:
    names = spark.sparkContext._gateway.new_array(spark._jvm.java.lang.String, 2)
    names[0], names[1] = schema, table
    return spark._jvm.org.apache.iceberg.catalog.TableIdentifier.of(names)
