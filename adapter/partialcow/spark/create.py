"""Creating the tables ``apply_changes`` writes (writer settings, Delta's pending-create marker). Split from
``partialcow.spark.changes``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from partialcow.formats import TableFormat
from partialcow.metrics import WriteMetrics
from partialcow.parquet.writer import WRITER_OPTIONS, WriterOptions
from partialcow.spark.errors import named_errors
from partialcow.spark.spec import ChangeSpec
from partialcow.spark.tables import check_table_name
from partialcow.table.base import quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def iceberg_table_properties(options: WriterOptions = WRITER_OPTIONS) -> dict[str, str]:
    """Properties of the Iceberg tables we create: Iceberg's own writers (another engine's INSERT or MERGE into the
    table) then lay files out as ours do, small pages so a change touches few of them, and copy-on-write modes.

    >>> iceberg_table_properties(WriterOptions(rows_per_page=500))["write.parquet.page-row-limit"]
    '500'
    """
    return {
        "format-version": "2",
        "write.parquet.page-row-limit": str(options.rows_per_page),
        "write.parquet.page-size-bytes": str(options.page_size_bytes),
        "write.parquet.compression-codec": options.compression,
        # Iceberg bounds row groups in bytes, not rows: its default, 128 MB
        "write.parquet.row-group-size-bytes": str(128 * 1024 * 1024),
        "write.delete.mode": "copy-on-write",
        "write.update.mode": "copy-on-write",
        "write.merge.mode": "copy-on-write",
    }


# Delta tables we create keep deletion vectors off whatever the session's defaults say: our writes rewrite pages and
# need none, and delta-rs and polars (1.x) cannot read a table whose protocol lists them. A model turns them on with
# tblproperties {'delta.enableDeletionVectors': 'true'} (our writes then materialise them; see FileTask).
DELTA_TABLE_PROPERTIES = {"delta.enableDeletionVectors": "false"}


# Set while a new Delta table's first build runs: a table that still carries it after a crash is rebuilt.
# (Iceberg tables are created and filled in one commit and need no marker.)
PENDING_CREATE = "partialcow.create-pending"


def create_table(
    spark: SparkSession,
    name: str,
    changes: DataFrame,
    spec: ChangeSpec,
    *,
    table_format: TableFormat = "iceberg",
    nullable: bool = False,
    not_null: Sequence[str] = (),
) -> WriteMetrics:
    """Create (or replace) ``name`` from a first batch of changes and build its row index.

    ``nullable``: every column nullable, as Spark's CREATE TABLE AS SELECT creates them (dbt's snapshots need it:
    the rows that close a deleted record hold null in every column); by default a column the batch cannot make
    null is created NOT NULL. ``not_null``: top-level columns created NOT NULL in any case (a contract's).

    The batch's latest change per key is written (deletes dropped) by the Parquet engine's writer (page index,
    small pages) in one Spark job that also builds the index, then committed in one commit (see
    ``partialcow.spark.bulk``). A build that fails leaves no table, or the previous one untouched. A Delta table
    needs a session with Delta; a new one is created empty first and carries the property ``PENDING_CREATE`` until
    its files are committed: a build that dies in between leaves a table that :func:`create_pending` reports, and
    the next run builds it again instead of adding to it.
    """
    from partialcow.spark.bulk import bulk_create
    from partialcow.spark.tables import require_session_format

    with named_errors(model=spec.model, table=name):
        check_table_name(spark, name, model=spec.model)
        require_session_format(spark, table_format, what=f"model {spec.model}")
        defaults = iceberg_table_properties() if table_format == "iceberg" else DELTA_TABLE_PROPERTIES
        return bulk_create(spark, name, changes, spec, properties={**defaults, **spec.extra_table_properties},
                           table_format=table_format, nullable=nullable, not_null=not_null)


def sql_string(text: str) -> str:
    """A Spark SQL string literal.

    >>> print(sql_string("it's"))
    'it\\'s'
    """
    return "'" + str(text).replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_pending(spark: SparkSession, name: str) -> bool:
    """Whether Delta table ``name``'s first build (or full refresh) never finished (see :func:`create_table`): it
    carries the pending mark and holds no data file. The build's own commit adds its files and removes the mark at
    once, so files beside the mark came from another writer (an INSERT after the build died, a RESTORE to the empty
    version): the table is theirs then, and a rebuild would replace their rows.

    Every incremental run asks, so the log is read by delta-rs (milliseconds); ``SHOW TBLPROPERTIES`` and
    ``DESCRIBE DETAIL`` through delta-spark, the fallback for tables delta-rs cannot load, build the table's snapshot
    first.
    """
    from partialcow.spark.tables import delta_root

    try:
        from deltalake import DeltaTable

        table = DeltaTable(delta_root(spark, name))
        marked = table.metadata().configuration.get(PENDING_CREATE) == "true"
        return marked and not table.file_uris()
    except Exception:  # noqa: BLE001 - delta-rs missing, or a table it cannot load: delta-spark reads it
        rows = spark.sql(f"SHOW TBLPROPERTIES {quote_identifier(name)} ('{PENDING_CREATE}')").collect()
        if not rows or str(rows[0][1]) != "true":
            return False
        detail = spark.sql(f"DESCRIBE DETAIL {quote_identifier(name)}").first()
        return detail is None or not detail["numFiles"]
