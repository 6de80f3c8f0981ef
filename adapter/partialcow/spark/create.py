"""Creating the tables ``apply_changes`` writes (writer settings, Delta's pending-create marker). Split from
``partialcow.spark.changes``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from partialcow.index import RowIndex
from partialcow.index.sources import quote_identifier
from partialcow.metrics import WriteMetrics
from partialcow.spark.errors import named_errors
from partialcow.spark.rewrite_job import (
    DELETE,
)
from partialcow.spark.spec import ChangeSpec
from partialcow.spark.staging import stage_changes
from partialcow.spark.tables import check_table_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


# Writer settings of tables we create: small pages so a change touches few of them (see partialcow.parquet.writer).
ICEBERG_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.parquet.page-row-limit": "2000",
    "write.parquet.page-size-bytes": str(256 * 1024),
    "write.parquet.compression-codec": "zstd",
    "write.parquet.row-group-size-bytes": str(128 * 1024 * 1024),
    "write.delete.mode": "copy-on-write",
    "write.update.mode": "copy-on-write",
    "write.merge.mode": "copy-on-write",
}


# Delta tables we create keep deletion vectors off whatever the session's defaults say: our writes rewrite pages and
# need none, and delta-rs and polars (1.x) cannot read a table whose protocol lists them. A model turns them on with
# tblproperties {'delta.enableDeletionVectors': 'true'} (our writes then materialise them; see FileTask).
DELTA_TABLE_PROPERTIES = {"delta.enableDeletionVectors": "false"}


# Set while a Delta table's first build (or full refresh) runs: a table that still carries it after a crash is rebuilt.
# (Iceberg tables are created and filled in one commit and need no marker.)
PENDING_CREATE = "partialcow.create-pending"


def create_table(
    spark: SparkSession,
    name: str,
    changes: DataFrame,
    spec: ChangeSpec,
    *,
    table_format: Literal["iceberg", "delta"] = "iceberg",
) -> WriteMetrics:
    """Create (or replace) ``name`` from a first batch of changes and build its row index.

    The batch is staged like any other (latest change per key; deletes dropped); the rows are written by the
    Parquet engine's writer (page index, small pages).

    An Iceberg table is written in one Spark job that also builds the index, and created or replaced with those
    files in one commit (see ``partialcow.spark.bulk``): a build that fails leaves no table, or the previous one
    untouched. A Delta table is created by Spark SQL (``CREATE OR REPLACE TABLE ... USING delta``: a metadata commit,
    no data file) and needs a session with Delta; its rows then land in one delta-spark transaction. Until then it
    carries the property ``PENDING_CREATE``: a build that dies in between leaves a table that :func:`create_pending`
    reports, and the next run builds it again instead of adding to it.
    """
    from partialcow.spark.bulk import bulk_create
    from partialcow.spark.changes import apply_changes  # changes imports this module: import when called
    from partialcow.spark.tables import open_table, require_session_format

    with named_errors(model=spec.model, table=name):
        check_table_name(spark, name, model=spec.model)
        require_session_format(spark, table_format, what=f"model {spec.model}")
        if table_format == "iceberg":
            return bulk_create(spark, name, changes, spec,
                               properties={**ICEBERG_TABLE_PROPERTIES, **spec.extra_table_properties})
        staged = stage_changes(changes, spec)
        columns = [c for c in staged.columns if c != DELETE]
        properties = {**DELTA_TABLE_PROPERTIES, **spec.extra_table_properties, PENDING_CREATE: "true"}
        schema = staged.select(*columns).schema
        ddl = spark.sparkContext._jvm.org.apache.spark.sql.types.DataType.fromJson(schema.json()).toDDL()  # type: ignore[union-attr]
        listed = ", ".join(f"{_sql_string(k)} = {_sql_string(v)}" for k, v in properties.items())
        spark.sql(f"CREATE OR REPLACE TABLE {quote_identifier(name)} ({ddl}) USING delta TBLPROPERTIES ({listed})")

        # A replaced table keeps its location: a leftover index is repaired against the new (empty) snapshot.
        table = open_table(spark, name, table_format=table_format)
        metrics = apply_changes(spark, table, changes, spec)
        spark.sql(f"ALTER TABLE {quote_identifier(name)} UNSET TBLPROPERTIES IF EXISTS ('{PENDING_CREATE}')")
        # Delta records a property change as a table version: the index follows it now, so the next write does not
        # start by publishing an index state for a version that changed no file
        RowIndex.open(table.source).ensure_fresh(table.committer)
        return metrics


def _sql_string(text: str) -> str:
    """A Spark SQL string literal.

    >>> print(_sql_string("it's"))
    'it\\'s'
    """
    return "'" + str(text).replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_pending(spark: SparkSession, name: str) -> bool:
    """Whether table ``name``'s first build (or full refresh) never finished (see :func:`create_table`)."""
    rows = spark.sql(f"SHOW TBLPROPERTIES {quote_identifier(name)} ('{PENDING_CREATE}')").collect()
    return bool(rows) and str(rows[0][1]) == "true"
