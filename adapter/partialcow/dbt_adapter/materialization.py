"""The Python side of the ``partial_cow_incremental`` materialization: model config -> ChangeSpec -> one write.

The Jinja materialization hands the model's query (or, for Python models and on branches, a temporary view of its
rows) to ``partial_cow_apply``; everything typed and testable happens here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dbt.adapters.base import available
from dbt.adapters.base.meta import AdapterMeta
from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtDatabaseError, DbtRuntimeError

from partialcow.exceptions import PartialCowError, PartitionedTableError, TableFormatMismatchError
from partialcow.formats import TABLE_FORMATS
from partialcow.metrics import PhaseClock, WriteMetrics

_LOGGER = AdapterLogger("partialcow")
ON_SCHEMA_CHANGE = ("ignore", "fail", "append_new_columns", "sync_all_columns")
FILE_FORMATS = TABLE_FORMATS  # a model's file_format
DEFAULT_OP_CODES = {"insert": ["I"], "update": ["U"], "delete": ["D"]}


@dataclass
class PartialCowResponse(AdapterResponse):
    """dbt's adapter response with what the write did (dbt-spark reports only "OK")."""

    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    files_rewritten: int = 0
    files_added: int = 0
    pages_rewritten: int = 0
    pages_copied: int = 0
    bytes_reencoded: int = 0
    bytes_copied: int = 0
    commit_retries: int = 0

    @classmethod
    def from_metrics(cls, metrics: WriteMetrics, *, created: bool) -> PartialCowResponse:
        """
        >>> str(PartialCowResponse.from_metrics(WriteMetrics(rows_updated=3, pages_rewritten=1, pages_copied=9,
        ...                                                  files_added=1, files_removed=1), created=False))
        'UPDATE 3, INSERT 0, DELETE 0; pages 1 rewritten / 9 copied'
        >>> str(PartialCowResponse.from_metrics(WriteMetrics(pages_copied=9), created=False))
        'UPDATE 0, INSERT 0, DELETE 0; pages 0 rewritten / 9 copied; nothing changed, nothing committed'
        >>> str(PartialCowResponse.from_metrics(WriteMetrics(pages_copied=9, columns_dropped=1), created=False))
        'UPDATE 0, INSERT 0, DELETE 0; pages 0 rewritten / 9 copied; columns 0 added, 1 dropped; no row changed'
        """
        verb = "CREATE" if created else "UPDATE"
        message = (
            f"{verb} {metrics.rows_inserted}" if created else
            f"UPDATE {metrics.rows_updated}, INSERT {metrics.rows_inserted}, DELETE {metrics.rows_deleted}; "
            f"pages {metrics.pages_rewritten} rewritten / {metrics.pages_copied} copied"
        )
        if metrics.columns_added or metrics.columns_dropped:
            message += f"; columns {metrics.columns_added} added, {metrics.columns_dropped} dropped"
            if not created and not (metrics.files_added or metrics.files_removed):
                message += "; no row changed"
        elif not created and not (metrics.files_added or metrics.files_removed):
            message += "; nothing changed, nothing committed"
        if metrics.commit_retries:
            message += f"; committed after {metrics.commit_retries} retry(ies): another writer committed first"
        return cls(
            _message=message,
            rows_affected=metrics.rows_inserted + metrics.rows_updated + metrics.rows_deleted,
            rows_inserted=metrics.rows_inserted,
            rows_updated=metrics.rows_updated,
            rows_deleted=metrics.rows_deleted,
            files_rewritten=metrics.files_rewritten,
            files_added=metrics.files_added,
            pages_rewritten=metrics.pages_rewritten,
            pages_copied=metrics.pages_copied,
            bytes_reencoded=metrics.bytes_reencoded,
            bytes_copied=metrics.bytes_copied,
            commit_retries=metrics.commit_retries,
        )


def _names(value: Any, what: str, model: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not all(isinstance(v, str) and v.strip() for v in value):
        raise DbtRuntimeError(f"model {model}: {what} must be a column name or a list of column names, got {value!r}")
    return tuple(v.strip() for v in value)


# dbt-spark settings a partial_cow_incremental model would otherwise silently go without
_NOT_HONOURED = {
    "partition_by": "its tables are unpartitioned (pages are rewritten within files; a Delta table's partitions are "
                    "refused), remove the setting",
    "clustered_by": "its tables are not bucketed, remove the setting",
    "location_root": "its tables are created where the catalog puts them, remove the setting",
    "incremental_predicates": "a batch finds its rows through the row index, not a MERGE condition, so predicates "
                              "that leave rows out would not be applied; remove the setting",
}


def model_settings(config: Mapping[str, Any], *, model: str) -> tuple[Any, str]:
    """The one parser of a ``partial_cow_incremental`` model's config: its ``ChangeSpec`` and table format. The
    materialization calls it before any SQL runs (``partialcow_check_change_settings``), the write calls it again.

    >>> model_settings({"unique_key": "id", "file_format": "hudi"}, model="m")
    Traceback (most recent call last):
    ...
    dbt_common.exceptions.base.DbtRuntimeError: Runtime Error
      model m: partial_cow_incremental writes iceberg or delta tables, not file_format='hudi'
    """
    file_format = config.get("file_format") or "iceberg"
    for setting, why in _NOT_HONOURED.items():
        if config.get(setting):
            raise DbtRuntimeError(f"model {model}: partial_cow_incremental cannot honour {setting}: {why}")
    if file_format not in FILE_FORMATS:
        raise DbtRuntimeError(
            f"model {model}: partial_cow_incremental writes {' or '.join(FILE_FORMATS)} tables, "
            f"not file_format={file_format!r}"
        )
    return change_spec(config, model=model), str(file_format)


def change_spec(config: Mapping[str, Any], *, model: str) -> Any:
    """Turn the model's config into a typed ``ChangeSpec``; bad values get an error listing the accepted ones.

    >>> change_spec({"unique_key": ["a", "b"], "op_column": "_op", "sequence_column": "_ts"}, model="m").key_columns
    ('a', 'b')
    >>> change_spec({"op_column": "_op"}, model="m")
    Traceback (most recent call last):
    ...
    dbt_common.exceptions.base.DbtRuntimeError: Runtime Error
      model m: partial_cow_incremental needs unique_key (a column or a list of columns)
    """
    from partialcow.spark.changes import ChangeSpec

    keys = _names(config.get("unique_key"), "unique_key", model)
    if not keys:
        raise DbtRuntimeError(
            f"model {model}: partial_cow_incremental needs unique_key (a column or a list of columns)"
        )
    on_schema_change = config.get("on_schema_change") or "ignore"
    if on_schema_change not in ON_SCHEMA_CHANGE:
        raise DbtRuntimeError(
            f"model {model}: on_schema_change={on_schema_change!r} is not one of {', '.join(ON_SCHEMA_CHANGE)}"
        )
    op_codes = {**DEFAULT_OP_CODES, **(config.get("op_codes") or {})}
    unknown = sorted(set(op_codes) - set(DEFAULT_OP_CODES))
    if unknown:
        raise DbtRuntimeError(f"model {model}: op_codes keys {unknown} are not among insert, update, delete")
    update_columns = _names(config.get("merge_update_columns"), "merge_update_columns", model)
    exclude_columns = _names(config.get("merge_exclude_columns"), "merge_exclude_columns", model)
    if update_columns and exclude_columns:  # as dbt's get_merge_update_columns refuses them together
        raise DbtRuntimeError(
            f"model {model}: set merge_update_columns or merge_exclude_columns, not both"
        )
    properties = config.get("tblproperties") or {}
    if not isinstance(properties, Mapping):
        raise DbtRuntimeError(f"model {model}: tblproperties must be a mapping of table properties, got {properties!r}")
    try:
        return ChangeSpec(
            key_columns=keys,
            op_column=(_names(config.get("op_column"), "op_column", model) or (None,))[0],
            insert_ops=_names(op_codes["insert"], "op_codes.insert", model),
            update_ops=_names(op_codes["update"], "op_codes.update", model),
            delete_ops=_names(op_codes["delete"], "op_codes.delete", model),
            sequence_column=(_names(config.get("sequence_column"), "sequence_column", model) or (None,))[0],
            update_columns=update_columns or None,
            exclude_columns=exclude_columns,
            on_schema_change=on_schema_change,
            model=model,
            extra_table_properties={str(k): str(v) for k, v in properties.items()},
        )
    except PartialCowError as exc:  # op codes in two roles
        raise DbtRuntimeError(str(exc)) from None


def _named(model: str, exc: Exception) -> str:
    """``exc``'s message led by the model's name, once (the change pipeline names it in most of its errors).

    >>> _named("m", ValueError("model m: x")), _named("m", ValueError("x"))
    ('model m: x', 'model m: x')
    """
    text = str(exc)
    return text if text.startswith(f"model {model}:") else f"model {model}: {text}"


def log_phases(name: str, metrics: WriteMetrics) -> None:
    """Where a write's time went, for the log and the dbt-level benchmark (``bench/dbt_bench.py`` reads the line)."""
    _LOGGER.info(f"partialcow phases: {json.dumps({'model': name, **metrics.phase_ms})}")


def _model_rows(spark: Any, model: str, sql: str) -> Any:
    """The model's query as a DataFrame; a query Spark cannot parse or analyse is the model's database error."""
    from pyspark.errors import PySparkException

    try:
        return spark.sql(sql)
    except PySparkException as exc:
        raise DbtDatabaseError(f"model {model}: {exc}") from None


class PartialCowMixin(metaclass=AdapterMeta):
    """``@available`` methods the ``partial_cow_incremental`` materialization calls (AdapterMeta collects them)."""

    @available
    def partialcow_check_change_settings(self, config: Mapping[str, Any], model: str) -> str:
        """Refuse a bad model config before any of the model's SQL runs (the error names model and setting)."""
        model_settings(config, model=model)
        return ""

    @available
    def partialcow_create_pending(self, relation: Any) -> bool:
        """Whether ``relation`` is a Delta table whose first build (model or snapshot) died before its first commit
        (empty or half-written, and marked): the run builds it again, so it is not incremental."""
        from partialcow.spark.changes import create_pending
        from partialcow.table.java import bind_to_current_thread

        if not getattr(relation, "is_delta", False):
            return False
        spark = bind_to_current_thread(self.connections.spark_session())  # type: ignore[attr-defined]
        return create_pending(spark, f"{relation.schema}.{relation.identifier}")

    @available
    def partial_cow_apply(
        self, relation: Any, changes_view: str, config: Mapping[str, Any], create: bool,
        changes_sql: str | None = None, model_name: str | None = None, not_null_columns: Sequence[str] = (),
    ) -> PartialCowResponse:
        """Create the table from the changes (first run, full refresh) or apply them to it: the rows of the query
        ``changes_sql`` when given (a SQL model), else of the temporary view ``changes_view``. ``model_name``: the
        model's name in the project, which errors name (the relation may have an alias); ``not_null_columns``: the
        columns an enforced contract declares not_null, which a first build creates NOT NULL."""
        from pyspark.sql import SparkSession

        from partialcow.spark.changes import apply_changes, create_pending, create_table
        from partialcow.spark.tables import open_table, require_session_format

        model = model_name or str(relation.identifier)
        spec, file_format = model_settings(config, model=model)
        from partialcow.table.java import bind_to_current_thread

        spark = bind_to_current_thread(SparkSession.getActiveSession() or SparkSession.builder.getOrCreate())
        name = f"{relation.schema}.{relation.identifier}"
        spark.sparkContext.setJobDescription(f"dbt-partialcow {name}: {'create' if create else 'apply changes'}")
        # the model's query analysed and the table opened, before the write's own phases
        clock = PhaseClock()
        try:
            require_session_format(spark, file_format, what=f"model {model} (file_format={file_format!r})")
            with clock("query"):
                changes = _model_rows(spark, model, changes_sql) if changes_sql is not None \
                    else spark.table(f"`{changes_view}`")
            if not create and file_format == "delta" and create_pending(spark, name):
                create = True  # its first build died before its first commit: build it again
            if create:
                # every column nullable, as dbt-spark's CREATE TABLE AS SELECT makes them: a column the first
                # batch happened to fill everywhere (coalesce, a literal) must take a null in a later batch
                metrics = create_table(spark, name, changes, spec, table_format=file_format, nullable=True,
                                       not_null=tuple(not_null_columns))
            else:
                with clock("open"):
                    table = open_table(spark, name, table_format=file_format)
                metrics = apply_changes(spark, table, changes, spec)
            metrics.phase_ms = {**clock.ms, **metrics.phase_ms}
        except TableFormatMismatchError as exc:
            if create:
                raise DbtRuntimeError(str(exc)) from None
            # a model switched to this materialization (or to another file_format) over an existing table: batches
            # apply only to a table of the model's format, and only the user may replace what the table holds
            raise DbtRuntimeError(
                f"{_named(model, exc)}. The model's file_format is {file_format!r}: `dbt run --full-refresh --select "
                f"{model}` rebuilds the table as one from the model's rows, replacing what it holds now"
            ) from None
        except PartitionedTableError as exc:
            # a table partitioned by another writer (a dbt-spark model's partition_by, say): only some batches fit
            raise DbtRuntimeError(
                f"{_named(model, exc)}. partial_cow_incremental changes a partitioned table only where a batch's "
                "updates and deletes lie in one partition and its inserts belong there; `dbt run --full-refresh "
                f"--select {model}` rebuilds the table unpartitioned (partition_by is not supported)"
            ) from None
        except PartialCowError as exc:
            raise DbtRuntimeError(str(exc)) from None
        finally:
            spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
        log_phases(name, metrics)
        return PartialCowResponse.from_metrics(metrics, created=create)
