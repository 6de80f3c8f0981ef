"""Small catalog look-ups the branch operations need: existence, columns, Iceberg snapshots."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from partialcow.branch.naming import qualified, quote

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["hive_unreadable_columns", "holds_no_rows", "iceberg_snapshot", "iceberg_state", "iceberg_total_records",
           "list_tables", "load_iceberg", "schema_exists", "table_exists"]


def table_exists(spark: SparkSession, schema: str, table: str) -> bool:
    """True if ``schema.table`` exists as a table or a view (False when the schema does not exist)."""
    return bool(spark.catalog.tableExists(f"{schema}.{table}"))


def hive_unreadable_columns(spark: SparkSession, sql: str) -> list[str]:
    """The output columns of query ``sql`` that a view over it could not be read back with (analysis only, no job).

    Spark keeps a view's columns in the Hive metastore as type strings, which spell nested field names unquoted,
    and reads them back with its own parser: a struct field named ``a b`` or ``c-d`` makes every read of the view
    fail with ``CANNOT_RECOGNIZE_HIVE_TYPE`` (a plain ``CREATE VIEW`` has the same limit).
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    parsers = spark._jvm.org.apache.spark.sql.catalyst.parser  # type: ignore[union-attr]
    parser = getattr(getattr(parsers, "CatalystSqlParser$"), "MODULE$")  # a Scala object's instance
    unreadable = []
    for field in spark.sql(sql)._jdf.schema().fields():
        try:
            parser.parseDataType(field.dataType().catalogString())  # the string Spark writes to the metastore
        except (Py4JJavaError, CapturedException):  # PySpark turns Spark's ParseException into its own
            unreadable.append(str(field.name()))
    return unreadable


def schema_exists(spark: SparkSession, schema: str) -> bool:
    return bool(spark.catalog.databaseExists(schema))


def list_tables(spark: SparkSession, schema: str) -> list[str]:
    """Names of the tables and views of ``schema`` (empty when the schema does not exist)."""
    if not schema_exists(spark, schema):
        return []
    rows = spark.sql(f"SHOW TABLES IN {quote(schema)}").collect()
    return [row.tableName for row in rows if not row.isTemporary]  # SHOW TABLES also lists temp views


def load_iceberg(spark: SparkSession, schema: str, table: str) -> Any:
    """Iceberg's Java ``Table`` for ``schema.table``, or None when it is missing, a view or not Iceberg."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    from partialcow.table.java import load_iceberg_table

    try:
        loaded = load_iceberg_table(spark, f"{schema}.{table}")
    except (Py4JJavaError, CapturedException):
        return None  # missing, a view, or not an Iceberg table
    loaded.refresh()  # the catalog may hand out a cached table object
    return loaded


def iceberg_snapshot(spark: SparkSession, schema: str, table: str) -> int | None:
    """Current snapshot id of an Iceberg table; ``-1`` if it has none yet; None if it is not an Iceberg table."""
    loaded = load_iceberg(spark, schema, table)
    if loaded is None:
        return None
    snapshot = loaded.currentSnapshot()
    return -1 if snapshot is None else int(snapshot.snapshotId())


def iceberg_state(spark: SparkSession, schema: str, table: str) -> tuple[int, int] | None:
    """(current snapshot id, ``-1`` if none yet; current schema id) of an Iceberg table; None if it is not one."""
    loaded = load_iceberg(spark, schema, table)
    if loaded is None:
        return None
    snapshot = loaded.currentSnapshot()
    return -1 if snapshot is None else int(snapshot.snapshotId()), int(loaded.schema().schemaId())


def iceberg_total_records(spark: SparkSession, schema: str, table: str) -> int | None:
    """Row count from the current snapshot's summary (metadata only, no scan); None if unknown."""
    loaded = load_iceberg(spark, schema, table)
    snapshot = None if loaded is None else loaded.currentSnapshot()
    if snapshot is None:
        return None if loaded is None else 0
    value = snapshot.summary().get("total-records")
    return None if value is None else int(value)


def holds_no_rows(spark: SparkSession, schema: str, table: str, *, loaded: Any = None) -> bool:
    """Whether the Iceberg table ``schema.table`` holds no rows. Its snapshot's summary answers when it counts no
    records, or some and no deletes (no Spark job); a table with delete files is scanned for one row. ``loaded``:
    its Java ``Table`` when the caller loaded it already."""
    loaded = load_iceberg(spark, schema, table) if loaded is None else loaded
    snapshot = None if loaded is None else loaded.currentSnapshot()
    if loaded is not None and snapshot is None:
        return True
    # three look-ups in the Java map: converting the whole summary costs a py4j call per entry
    java_summary = None if snapshot is None else snapshot.summary()
    summary = {} if java_summary is None else {k: java_summary.get(k) for k in (
        "total-records", "total-position-deletes", "total-equality-deletes")}
    if summary.get("total-records") == "0":
        return True
    if summary.get("total-records") and all(summary.get(k) == "0" for k in ("total-position-deletes",
                                                                            "total-equality-deletes")):
        return False
    return bool(spark.table(qualified(schema, table)).isEmpty())
