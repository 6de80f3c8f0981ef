"""dbt snapshots on Iceberg and Delta tables through the change pipeline: the Python side of
``macros/materializations/snapshot.sql``.

A snapshot table's rows are versions keyed by ``dbt_scd_id``. dbt's staging query (strategies, hard deletes) yields
one row per change: ``insert`` (a new version, or a deleted record's ``new_record`` version) and ``update`` /
``delete`` (the current version of a changed or deleted record, with its new ``dbt_valid_to``). That is a batch for
:func:`partialcow.spark.changes.apply_changes`: key ``dbt_scd_id``, op column ``dbt_change_type``, only
``dbt_valid_to`` updated; so a run re-encodes the pages holding the closed versions' ``dbt_valid_to`` and appends the
new versions, in one commit, where dbt-spark's ``MERGE`` rewrites every data file holding a changed record.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from dbt.adapters.base import available
from dbt.adapters.base.meta import AdapterMeta
from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from partialcow.exceptions import PartialCowError, RepeatedKeysError
from partialcow.metrics import PhaseClock, WriteMetrics

__all__ = ["CHANGE_TYPE", "SnapshotMixin", "snapshot_spec"]

_LOGGER = AdapterLogger("partialcow")

# dbt's staging column with the kind of each row (dbt-adapters' snapshot_staging_table)
CHANGE_TYPE = "dbt_change_type"


# dbt-spark settings of a snapshot's table that snapshot_write='partial_cow' would otherwise go without
_NOT_HONOURED = {
    "partition_by": "its tables are unpartitioned",
    "clustered_by": "its tables are not bucketed",
    "location_root": "its tables are created where the catalog puts them",
}


def snapshot_properties(config: Mapping[str, Any], *, model: str) -> dict[str, str]:
    """The table properties (``tblproperties``) a partial copy-on-write snapshot is created with; a setting it
    cannot honour is refused before anything is written.

    >>> snapshot_properties({"tblproperties": {"owner": "crm"}}, model="snap")
    {'owner': 'crm'}
    >>> snapshot_properties({"partition_by": "id"}, model="snap")
    Traceback (most recent call last):
    ...
    dbt_common.exceptions.base.DbtRuntimeError: Runtime Error
      snapshot snap: snapshot_write='partial_cow' cannot honour partition_by (its tables are unpartitioned); remove the setting or set snapshot_write='merge' (dbt-spark's MERGE)
    """  # noqa: E501 - a doctest line cannot wrap
    for setting, why in _NOT_HONOURED.items():
        if config.get(setting):
            raise DbtRuntimeError(
                f"snapshot {model}: snapshot_write='partial_cow' cannot honour {setting} ({why}); remove the setting "
                "or set snapshot_write='merge' (dbt-spark's MERGE)"
            )
    properties = config.get("tblproperties") or {}
    if not isinstance(properties, Mapping):
        raise DbtRuntimeError(f"snapshot {model}: tblproperties must be a mapping of table properties, got "
                              f"{properties!r}")
    return {str(k): str(v) for k, v in properties.items()}


def snapshot_spec(columns: Mapping[str, str], *, model: str, staged: bool) -> Any:
    """The ``ChangeSpec`` of a snapshot's rows: the first build's (``staged=False``: versions keyed by
    ``dbt_scd_id``) or a later run's staged changes (``staged=True``).

    >>> names = {"dbt_scd_id": "dbt_scd_id", "dbt_valid_to": "valid_until"}
    >>> spec = snapshot_spec(names, model="orders_snapshot", staged=True)
    >>> spec.key_columns, spec.op_column, spec.update_ops, spec.update_columns
    (('dbt_scd_id',), 'dbt_change_type', ('update', 'delete'), ('valid_until',))
    >>> snapshot_spec(names, model="orders_snapshot", staged=False).op_column is None
    True
    """
    from partialcow.spark.changes import ChangeSpec

    scd_id, valid_to = str(columns["dbt_scd_id"]), str(columns["dbt_valid_to"])
    if not staged:
        return ChangeSpec(key_columns=(scd_id,), model=model)
    return ChangeSpec(
        key_columns=(scd_id,),
        op_column=CHANGE_TYPE,
        insert_ops=("insert",),
        # an update or a hard delete closes the current version: only its dbt_valid_to changes
        update_ops=("update", "delete"),
        delete_ops=(),
        update_columns=(valid_to,),
        model=model,
    )


def _pinned(frame: Any) -> Any:
    """The rows of ``frame`` computed once. dbt's snapshot SQL calls ``current_timestamp()`` (check strategy ids,
    hard deletes' validity), which each Spark query evaluates anew, and a later run's pipeline reads its batch more
    than once."""
    return frame.localCheckpoint(eager=True)


class SnapshotMixin(metaclass=AdapterMeta):
    """``@available`` methods of the snapshot materialization (mixed into ``PartialcowAdapter``)."""

    def _narrowings(self) -> dict[str, dict[str, int]]:
        """Per snapshot (schema.name) narrowed in this run: the narrowing's phase times, reported with the write's."""
        if not hasattr(self, "_snapshot_narrowings"):
            self._snapshot_narrowings: dict[str, dict[str, int]] = {}
        return self._snapshot_narrowings

    def _snapshot_spark(self) -> Any:
        from partialcow.table.java import bind_to_current_thread

        return bind_to_current_thread(self.connections.spark_session())  # type: ignore[attr-defined]

    @available
    def partialcow_snapshot_narrow(self, relation: Any, source_sql: str, strategy_name: str,
                                   strategy: Mapping[str, Any], config: Mapping[str, Any], columns: Mapping[str, str],
                                   views: Mapping[str, str], file_format: str = "iceberg") -> bool:
        """Cut a later run's inputs to the records that can have changed (see ``snapshot_narrow``): the temporary
        views ``views['source']`` and ``views['target']`` hold the source's and the snapshot's rows of those records,
        computed once (``views['keys']``: their keys; ``views['files']``: a Delta snapshot's data files read as plain
        Parquet, see ``_plain_parquet_files``), and True is returned; or False, logging why, and dbt's query reads
        everything. ``config``: the snapshot's ``check_cols`` and ``dbt_valid_to_current``."""
        from partialcow.dbt_adapter import snapshot_narrow as narrow
        from partialcow.table.base import quote_identifier

        spark = self._snapshot_spark()
        name = f"{relation.schema}.{relation.identifier}"
        source = spark.sql(source_sql)
        table_frame = spark.table(quote_identifier(name))
        target_columns = table_frame.columns
        plan, why = narrow.plan_narrowing(
            strategy_name=strategy_name, unique_key=strategy["unique_key"], check_cols=config.get("check_cols"),
            source_columns=source.columns, source_types=[t for _, t in source.dtypes], target_columns=target_columns,
            target_types=[t for _, t in table_frame.dtypes],
            meta_columns=dict(columns), updated_at=strategy.get("updated_at"),
            valid_to_current=config.get("dbt_valid_to_current"), hard_deletes=strategy.get("hard_deletes") or (
                "invalidate" if strategy.get("invalidate_hard_deletes") else "ignore"))
        if plan is None:
            _LOGGER.info(f"snapshot {name}: dbt's staging query reads every record ({why})")
            return False
        clock = PhaseClock()
        with clock("narrow"):
            target = quote_identifier(name)
            files = _plain_parquet_files(spark, name) if file_format == "delta" and "files" in views else None
            if files:
                spark.read.schema(table_frame.schema).parquet(*files).createOrReplaceTempView(views["files"])
                target = quote_identifier(views["files"])
            # Spark's estimate of the snapshot's side (planning only, no job)
            side = spark.sql(narrow.current_side_sql(plan, target))
            hashed = narrow.join_by_hash(int(str(side._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())),
                                         int(spark.conf.get("spark.sql.shuffle.partitions") or 200))
            keys = _pinned(spark.sql(narrow.candidate_keys_sql(plan, source_sql, target, shuffle_hash=hashed)))
            keys.createOrReplaceTempView(views["keys"])
            keys_view = quote_identifier(views["keys"])
            candidates = keys.count()
            broadcast = candidates <= narrow.BROADCAST_KEYS
            # the candidates' rows, read once: dbt's query reads each side two or three times
            _pinned(spark.sql(narrow.narrowed_source_sql(plan, source_sql, keys_view, broadcast=broadcast))
                    ).createOrReplaceTempView(views["source"])
            _pinned(spark.sql(narrow.narrowed_target_sql(plan, target, target_columns, keys_view,
                                                         broadcast=broadcast))).createOrReplaceTempView(views["target"])
        self._narrowings()[name] = clock.ms
        _LOGGER.info(f"snapshot {name}: {candidates} candidate records for dbt's staging query")
        return True

    @available
    def partialcow_snapshot_create(self, relation: Any, build_sql: str, columns: Mapping[str, str],
                                   file_format: str = "iceberg", strategy: Mapping[str, Any] | None = None,
                                   source_sql: str | None = None, config: Mapping[str, Any] | None = None) -> Any:
        """First run of a snapshot: its versions become a table (``file_format``: iceberg or delta) with our layout
        and row index. ``strategy`` and ``source_sql`` (the snapshot's query) name the rows at fault when the
        versions repeat a dbt_scd_id (see ``_snapshot_write``); ``config``: the snapshot's (see
        :func:`snapshot_properties`)."""
        import dataclasses

        from partialcow.spark.changes import create_table

        properties = snapshot_properties(config or {}, model=str(relation.identifier))
        spec = dataclasses.replace(snapshot_spec(columns, model=str(relation.identifier), staged=False),
                                   extra_table_properties=properties)

        def create(spark: Any, name: str) -> Any:
            # not pinned: the first build reads its rows in one query, whose current_timestamp() is one value.
            # Nullable columns, as dbt-spark's CREATE TABLE AS SELECT: dbt's rows closing a hard-deleted record
            # hold null in every source column, which a NOT NULL column (a literal in the query) would refuse.
            return create_table(spark, name, spark.sql(build_sql), spec, table_format=file_format, nullable=True)

        metrics = self._snapshot_write(relation, file_format, "create", create, _source_keys(strategy, source_sql))
        response = _response(metrics, created=True)
        response._message = f"SNAPSHOT {metrics.rows_inserted}"
        return response

    @available
    def partialcow_snapshot_apply(self, relation: Any, staging_view: str, columns: Mapping[str, str],
                                  file_format: str = "iceberg", strategy: Mapping[str, Any] | None = None,
                                  versions_view: str | None = None, source_sql: str | None = None) -> Any:
        """A later run: close the changed versions and insert the new ones (``staging_view``: dbt's staged rows).
        ``strategy``: dbt's strategy of the snapshot; ``versions_view``: the narrowing's view of every version of the
        records that can have changed (see ``partialcow_snapshot_narrow``), None when the run was not narrowed;
        ``source_sql``: the snapshot's query."""
        from partialcow.spark.changes import apply_changes
        from partialcow.spark.tables import open_table
        from partialcow.table.base import quote_identifier

        spec = snapshot_spec(columns, model=str(relation.identifier), staged=True)

        def apply(spark: Any, name: str) -> Any:
            staged = spark.table(quote_identifier(staging_view))
            table_schema = spark.table(quote_identifier(name)).schema
            batch = staged.select(*[_as_stored(staged, field, columns) for field in table_schema
                                    if field.name in staged.columns], quote_identifier(CHANGE_TYPE))
            if not _scd_ids_are_new(strategy):
                _refuse_reused_ids(batch, str(columns["dbt_scd_id"]), name, strategy)
                batch = _without_existing_versions(batch, spark.table(quote_identifier(versions_view or name)),
                                                   str(columns["dbt_scd_id"]))
            clock = PhaseClock()
            clock.ms.update(self._narrowings().pop(name, {}))
            with clock("dbt_query"):
                rows = _pinned(batch)
            if versions_view and not _scd_ids_are_new(strategy) and _ambiguous_inserts(rows, strategy):
                # the narrowing holds the records that can have changed; another record shares a dbt_scd_id with
                # an insert only where dbt's hash input cannot tell their keys apart: checked against every version
                rows = _pinned(_without_existing_versions(rows, spark.table(quote_identifier(name)),
                                                          str(columns["dbt_scd_id"])))
            return _with_phases(clock, apply_changes(spark, open_table(spark, name, table_format=file_format), rows,
                                                     spec))

        metrics = self._snapshot_write(relation, file_format, "apply changes", apply,
                                       _source_keys(strategy, source_sql))
        response = _response(metrics, created=False)
        response._message = (
            f"SNAPSHOT {metrics.rows_updated} closed, {metrics.rows_inserted} inserted; "
            f"pages {metrics.pages_rewritten} rewritten / {metrics.pages_copied} copied"
        )
        return response

    def _snapshot_write(self, relation: Any, file_format: str, what: str, write: Any,
                        source_keys: tuple[str, tuple[str, ...]] | None = None) -> Any:
        """Run ``write(spark, name)`` with the snapshot's job description; our errors become dbt's, and the phases
        go to the log as a model's do (``partialcow phases:``, read by the dbt-level benchmark). ``source_keys``:
        the snapshot's query and unique_key expressions, to say when repeated dbt_scd_ids come from NULL keys."""
        from partialcow.dbt_adapter.materialization import log_phases
        from partialcow.spark.tables import require_session_format

        spark = self._snapshot_spark()
        name = f"{relation.schema}.{relation.identifier}"
        spark.sparkContext.setJobDescription(f"dbt-partialcow snapshot {name}: {what}")
        try:
            what_format = f"snapshot {relation.identifier} (file_format={file_format!r})"
            require_session_format(spark, file_format, what=what_format)
            metrics = write(spark, name)
        except RepeatedKeysError as exc:
            raise DbtRuntimeError(_repeated_ids_message(spark, str(relation.identifier), source_keys, exc)) from None
        except PartialCowError as exc:
            raise DbtRuntimeError(str(exc)) from None
        finally:
            spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
        log_phases(name, metrics)
        return metrics


# dbt's validity columns: its staging query fills them from the strategy's updated_at (a date column makes them
# dates) and from current_timestamp() (hard deletes), so their union can be wider than the table's
_VALIDITY = ("dbt_valid_from", "dbt_valid_to", "dbt_updated_at")
_DATETIME = ("DateType", "TimestampType", "TimestampNTZType")


def _as_stored(staged: Any, field: Any, columns: Mapping[str, str]) -> Any:
    """The staged column of the table's ``field``, cast to the table's type where ``_widened``."""
    from partialcow.table.base import quote_identifier

    if _widened(field.name, staged.schema[field.name].dataType, field.dataType, columns):
        return staged[field.name].cast(field.dataType).alias(field.name)
    return quote_identifier(field.name)


def _widened(name: str, staged_type: Any, table_type: Any, columns: Mapping[str, str]) -> bool:
    """Whether dbt's query delivers validity column ``name`` as another datetime type than the table stores: it is
    then stored in the table's type, as dbt-spark's MERGE stores any datetime into a datetime column.

    >>> from pyspark.sql.types import DateType, TimestampType
    >>> names = {"dbt_valid_to": "valid_until"}
    >>> _widened("valid_until", TimestampType(), DateType(), names), _widened("upd", TimestampType(), DateType(), names)
    (True, False)
    """
    validity = {str(columns.get(c, c)) for c in _VALIDITY}
    return (name in validity and staged_type != table_type and type(staged_type).__name__ in _DATETIME
            and type(table_type).__name__ in _DATETIME)


def _source_keys(strategy: Mapping[str, Any] | None, source_sql: str | None) -> tuple[str, tuple[str, ...]] | None:
    """The snapshot's query and its unique_key expressions (one, or a list's), when both are known."""
    if not strategy or not source_sql or not strategy.get("unique_key"):
        return None
    key = strategy["unique_key"]
    return source_sql, (str(key),) if isinstance(key, str) else tuple(str(k) for k in key)


def _null_keys_message(spark: Any, model: str, source_keys: tuple[str, tuple[str, ...]] | None,
                       exc: RepeatedKeysError) -> str | None:
    """Why a snapshot's staged versions repeat a dbt_scd_id, when the snapshot's query has rows with a NULL
    unique_key (part): dbt's hash of a NULL key part is the empty string's, so those rows get one id (a check run's,
    or a timestamp run's with the same updated_at). dbt-spark's MERGE inserts them all, again in every run; a
    table keyed by dbt_scd_id cannot hold them. None when fewer than two rows have one (another cause)."""
    if source_keys is None:
        return None
    source_sql, keys = source_keys
    null = " or ".join(f"({k}) is null" for k in keys)
    count = spark.sql(f"select count(*) from (\n{source_sql}\n) __pcow_src where {null}").collect()[0][0]
    if count < 2:
        return None
    shown = keys[0] if len(keys) == 1 else list(keys)
    return (
        f"snapshot {model}: unique_key {shown!r} is null in {count} source rows, which dbt gives the same dbt_scd_id "
        f"({exc.keys or exc}); partial_cow keys a snapshot's versions by dbt_scd_id and cannot hold one twice. "
        f"Filter those rows out of the snapshot's query (where {' and '.join(f'({k}) is not null' for k in keys)}), "
        "or set snapshot_write='merge' (dbt-spark's MERGE, which inserts them again in every run)"
    )


def _repeated_ids_message(spark: Any, model: str, source_keys: tuple[str, tuple[str, ...]] | None,
                          exc: RepeatedKeysError) -> str:
    """Why a snapshot's staged versions repeat a dbt_scd_id, in the snapshot's terms (the pipeline's own message
    speaks of a model's batch and its sequence_column, which a snapshot has none of): NULL keys (see
    :func:`_null_keys_message`), a unique_key the query returns more than once, or keys that read alike in dbt's
    hash (:func:`_joined_keys_message`)."""
    null = _null_keys_message(spark, model, source_keys, exc)
    if null is not None:
        return null
    if source_keys is not None:
        source_sql, keys = source_keys
        by = ", ".join(f"({k})" for k in keys)
        rows = spark.sql(f"select {by} from (\n{source_sql}\n) __pcow_src group by {by} having count(*) > 1 "
                         "limit 5").collect()
        if rows:
            shown = keys[0] if len(keys) == 1 else list(keys)
            samples = ", ".join(str(r[0]) if len(keys) == 1 else str(tuple(r)) for r in rows)
            return (
                f"snapshot {model}: the snapshot's query returns unique_key {shown!r} more than once (e.g. {samples}); "
                f"dbt gives such rows one dbt_scd_id, and partial_cow keys a snapshot's versions by dbt_scd_id. Make "
                "the key unique in the query (one row per unique_key, as dbt's snapshots expect); nothing was written"
            )
        joined = _joined_keys_message(spark, model, source_keys)
        if joined is not None:
            return joined
    return (f"snapshot {model}: dbt's staged versions repeat dbt_scd_id(s) {exc.keys or exc}, which partial_cow keys "
            "a snapshot's versions by; nothing was written")


def _joined_keys_message(spark: Any, model: str, source_keys: tuple[str, tuple[str, ...]]) -> str | None:
    """Why a snapshot's staged versions repeat a dbt_scd_id, when different unique_keys of the query read alike
    in dbt's hash: it joins the key's parts with '|' and reads NULL as '' (``('p|q', 'r')`` and ``('p', 'q|r')``,
    ``(NULL, 'x')`` and ``('', 'x')``), so versions of such keys from one run get one id. None when no two do."""
    source_sql, keys = source_keys
    text = " || '|' || ".join(f"coalesce(cast(({k}) as string), '')" for k in keys)
    parts = ", ".join(f"({k}) as k{i}" for i, k in enumerate(keys))
    rows = spark.sql(
        f"select slice(array_sort(collect_set(to_json(struct({parts})))), 1, 2) from (\n{source_sql}\n) __pcow_src "
        f"group by {text} having count(distinct to_json(struct({parts}))) > 1 limit 3"
    ).collect()
    if not rows:
        return None
    samples = "; ".join(" and ".join(pair) for (pair,) in rows)
    shown = keys[0] if len(keys) == 1 else list(keys)
    return (
        f"snapshot {model}: different values of unique_key {shown!r} read alike in dbt's dbt_scd_id, which joins the "
        f"key's parts with '|' and reads NULL as '' ({samples}): versions of both from one run get one dbt_scd_id, "
        "and partial_cow keys a snapshot's versions by dbt_scd_id. Use a unique_key whose values cannot read alike "
        "(one expression, e.g. to_json(struct(<the key columns>))), or set snapshot_write='merge'; nothing was written"
    )


# dbt-spark's snapshot_get_time(), the check strategy's updated_at unless the snapshot configures one
_RUN_TIME = "current_timestamp()"


def _scd_ids_are_new(strategy: Mapping[str, Any] | None) -> bool:
    """Whether no version the run inserts can have the dbt_scd_id of a version the snapshot holds: dbt hashes
    the run's time into them (``check`` without ``updated_at``: the ids of new versions and of deletion records).

    >>> _scd_ids_are_new({"updated_at": "current_timestamp()"}), _scd_ids_are_new({"updated_at": "updated_at"})
    (True, False)
    """
    return strategy is not None and str(strategy.get("updated_at", "")).strip().lower() == _RUN_TIME


def _refuse_reused_ids(batch: Any, scd_id: str, name: str, strategy: Mapping[str, Any] | None) -> None:
    """Refuse a run whose new version of a record has the dbt_scd_id of the version it closes.

    dbt hashes a version's key and ``updated_at`` into its id, so a ``check`` snapshot with an ``updated_at`` column
    whose checked columns changed while ``updated_at`` did not stages both with one id. dbt-spark's Iceberg MERGE
    fails on it (two staged rows match one version); applied, the close would stand and the new version be dropped as
    already there, leaving the record with no current version and no error."""
    from pyspark.sql import functions as F

    from partialcow.spark.staging import SAMPLE
    from partialcow.table.base import quote_identifier

    kind, ident = F.col(quote_identifier(CHANGE_TYPE)), quote_identifier(scd_id)
    closing = batch.where(kind.isin("update", "delete")).select(F.col(ident).alias("__pcow_closed_id"))
    reused = batch.where(kind == F.lit("insert")).join(
        closing, F.col(ident) == F.col("__pcow_closed_id"), "left_semi").limit(SAMPLE).collect()
    if not reused:
        return
    key = (strategy or {}).get("unique_key")
    keys = [str(k) for k in (key if isinstance(key, (list, tuple)) else [key])] if key else []
    shown = [", ".join(f"{k}={row[k]!r}" for k in keys if k in row.asDict()) or f"{scd_id}={row[scd_id]!r}"
             for row in reused]
    updated_at = (strategy or {}).get("updated_at")
    if keys and any(row.asDict().get(k, "") is None for row in reused for k in keys):
        # dbt's query joins no key with a NULL part to its current version: every run closes such a record as
        # deleted and inserts it again, under the timestamp strategy with the id of the version it closes
        raise DbtRuntimeError(
            f"snapshot {name}: record(s) {'; '.join(shown)} have a null unique_key part, which dbt's staging query "
            "never matches with the record's current version: each run closes that version as deleted and inserts "
            f"the record again, here with the same dbt_scd_id (its key and an unchanged {updated_at}), which would "
            "leave it with no current version. Filter rows with a null key part out of the snapshot's query, or "
            "give them a key (coalesce)"
        )
    raise DbtRuntimeError(
        f"snapshot {name}: record(s) {'; '.join(shown)} changed their check_cols but kept their updated_at "
        f"({updated_at}), so the new version would have the id of the version it closes and the record would be "
        "left with no current version. Give changed rows a new updated_at, or drop updated_at from the check "
        "strategy's config"
    )


def _without_existing_versions(batch: Any, versions: Any, scd_id: str) -> Any:
    """``batch`` without its ``insert`` rows whose ``scd_id`` a version in ``versions`` already has.

    dbt-spark's MERGE inserts a staged row only when no version has its dbt_scd_id ("when not matched"), and one
    that matches a version changes nothing (only update and delete rows close versions). The change pipeline would
    treat such a row as an update of that version's dbt_valid_to instead: with the timestamp strategy, a record
    deleted (hard_deletes invalidate or new_record) that comes back with the same updated_at is staged as an insert
    with its closed version's id, which the update re-opened, erasing the deletion.

    ``versions`` is the table, or the narrowing's rows of the records that can have changed: every version of the
    records whose rows dbt staged, since a dbt_scd_id hashes the record's key; keys whose text dbt's hash input
    cannot tell apart share ids across records, and a run inserting such a key is checked against the whole table
    too (see ``_ambiguous_inserts``)."""
    from pyspark.sql import functions as F

    from partialcow.table.base import quote_identifier

    ids = versions.select(F.col(quote_identifier(scd_id)).alias("__pcow_existing_id"))
    matches = (F.col(quote_identifier(CHANGE_TYPE)) == F.lit("insert")) & (
        batch[quote_identifier(scd_id)] == F.col("__pcow_existing_id"))
    return batch.join(ids, matches, "left_anti")


def _ambiguous_inserts(rows: Any, strategy: Mapping[str, Any] | None) -> bool:
    """Whether a version ``rows`` inserts has a key whose text in dbt's dbt_scd_id hash another key can share: a
    NULL part (hashed as ''), an empty part, or a '|' inside a part (dbt joins a list key's parts with '|'), so a
    record outside the narrowing may hold its id. True when the key cannot be evaluated over the rows."""
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    key = (strategy or {}).get("unique_key")
    keys = [str(k) for k in (key if isinstance(key, (list, tuple)) else [key])] if key else []
    if not keys:
        return True
    try:
        parts = [F.expr(k).cast("string") for k in keys]
        ambiguous = functools.reduce(lambda a, b: a | b,
                                     [p.isNull() | (p == "") | (F.instr(p, "|") > 0) for p in parts])
        return bool(rows.where((F.col(CHANGE_TYPE) == "insert") & ambiguous).limit(1).count())
    except PySparkException:
        return True


def _plain_parquet_files(spark: Any, name: str) -> list[str] | None:
    """A Delta snapshot's data files, when reading them as plain Parquet reads the table (``DeltaRsTable``'s
    ``plain_parquet_files``), else None. The narrowing reads the snapshot twice; in a fresh process delta-spark's
    planning of those reads took seconds more than listing the files with delta-rs (bench/README.md, the snapshot
    runs). Iceberg's reads are planned as fast as its files are listed, and stay Iceberg's."""
    from partialcow.spark.tables import delta_root
    from partialcow.table.delta import DeltaRsTable

    try:
        return DeltaRsTable(delta_root(spark, name), spark=spark).plain_parquet_files()
    except Exception as exc:  # noqa: BLE001 - delta-rs cannot open it (a feature it lacks): delta-spark reads it
        _LOGGER.debug(f"snapshot {name}: read through delta-spark ({exc})")
        return None


def _with_phases(clock: PhaseClock, metrics: WriteMetrics) -> WriteMetrics:
    """``metrics`` with the time dbt's own snapshot query took (its rows computed once, before our write) first."""
    metrics.phase_ms = {**clock.ms, **metrics.phase_ms}
    return metrics


def _response(metrics: Any, *, created: bool) -> Any:
    from partialcow.dbt_adapter.materialization import PartialCowResponse

    return PartialCowResponse.from_metrics(metrics, created=created)
