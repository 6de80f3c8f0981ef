"""Branch operations: create, diff, merge (three-way by key), drop, list, materialize.

Each takes the SparkSession plus keyword options and returns a small result object whose ``describe()`` is the
log summary the dbt ``run-operation`` macros print.
"""

from __future__ import annotations

import datetime as _dt
import functools
import operator
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Sequence

from partialcow.branch.catalog import iceberg_total_records, table_exists
from partialcow.branch.naming import (
    MAIN,
    base_image_table,
    OP_COLUMN,
    OP_DELETE,
    OP_UPSERT,
    SEQ_COLUMN,
    base_schema_of,
    full_table,
    overlay_schema,
    overlay_table,
    qualified,
    quote,
    validate_branch_name,
)
from partialcow.branch.image import (
    COPY_ON_WRITE,
    ImageMode,
    drop_image,
    drop_reader_relation,
    has_image,
    validate_image_mode,
)
from partialcow.branch.overlay import (
    PRESENT_COLUMN,
    OverlayInfo,
    capture_base,
    current_snapshots,
    recorded_snapshots,
    branch_models,
    chain_tables,
    create_branch_view,
    overlay_info,
    record_snapshots,
    refresh_descendant_views,
    resolve_parent,
    write_overlay,
)
from partialcow.branch.store import BranchRecord, BranchStore
from partialcow.exceptions import BranchError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "ConflictPolicy",
    "CreateResult",
    "DiffResult",
    "MergeResult",
    "ModelMerge",
    "ListResult",
    "create_branch",
    "diff_branch",
    "merge_branch",
    "drop_branch",
    "list_branches",
    "materialize_branch",
    "refresh_branch",
    "RefreshResult",
    "DIFF_TABLE",
    "CONFLICT_TABLE",
]

ConflictPolicy = Literal["ours", "theirs"]
#: Written to ``<target schema>__br_<branch>`` by branch_diff / branch_merge.
DIFF_TABLE = "partialcow_branch_diff"
CONFLICT_TABLE = "partialcow_merge_conflicts"
_POLICIES = ("ours", "theirs")
_PAST = {"insert": "inserted", "update": "updated", "delete": "deleted", "replace": "replaced"}


def _now() -> _dt.datetime:
    return _dt.datetime.now()


def _models(models: Sequence[Sequence[str]]) -> list[tuple[str, str]]:
    """Distinct ``(base schema, identifier)`` pairs; overlay schemas in the input are mapped to their base."""
    seen: dict[tuple[str, str], None] = {}
    for schema, identifier in models:
        seen[(base_schema_of(str(schema)).lower(), str(identifier).lower())] = None
    return list(seen)


def _key_string(keys: Sequence[str], prefix: str) -> Column:
    """One readable string per key: the value itself, or JSON for composite keys."""
    from pyspark.sql import functions as F

    if len(keys) == 1:
        return F.col(f"{prefix}{quote(keys[0])}").cast("string")
    return F.to_json(F.struct(*[F.col(f"{prefix}{quote(k)}").alias(k) for k in keys]))


def _and(conditions: Sequence[Column]) -> Column:
    from pyspark.sql import functions as F

    return functools.reduce(operator.and_, conditions) if conditions else F.lit(True)


# --------------------------------------------------------------------------------------------------- create


@dataclass(frozen=True)
class CreateResult:
    record: BranchRecord
    seconds: float

    def describe(self) -> str:
        return (
            f"branch {self.record.name} created from {self.record.parent} in {self.seconds:.2f}s "
            f"(nothing copied; merge base: {len(self.record.base_snapshots)} table snapshot(s))"
        )


def create_branch(
    spark: SparkSession,
    *,
    name: str,
    parent: str = MAIN,
    meta_schema: str,
    models: Sequence[Sequence[str]] = (),
    image_mode: ImageMode = COPY_ON_WRITE,
) -> CreateResult:
    """Create branch ``name`` from ``parent``: records the parent's snapshots, copies no data.

    ``models`` lists ``(schema, identifier)`` of the project's models and seeds (dbt passes its graph).
    ``image_mode``: how the branch's read images are built (``copy-on-write``: reads as fast as the table's, the
    image stores the data files a build touches; ``merge-on-read``: the image stores position deletes, reads apply
    them); see ``partialcow.branch.image``.

    >>> create_branch(spark, name="dev", meta_schema="shop", models=[("shop", "orders")]).record.parent  # doctest: +SKIP
    'main'
    """
    start = time.perf_counter()
    validate_branch_name(name)
    validate_branch_name(parent, allow_main=True)
    validate_image_mode(image_mode)
    store = BranchStore(spark, meta_schema=meta_schema)
    if store.get(name) is not None:
        raise BranchError(f"branch {name!r} already exists: drop it first or choose another name")
    levels = store.chain(parent)
    # models that exist only on the parent branches count too
    inherited = [(base_schema_of(i.schema), i.identifier) for lvl in levels[:-1] for i in branch_models(spark, lvl)]
    wanted = _models(models) + inherited
    record = BranchRecord(
        name=name, parent=parent, created_at=_now(), base_snapshots=record_snapshots(spark, _models(wanted), levels),
        image_mode=image_mode,
    )
    store.put(record)
    return CreateResult(record=record, seconds=time.perf_counter() - start)


# ----------------------------------------------------------------------------------------------------- diff


@dataclass
class DiffResult:
    branch: str
    table: str
    #: model -> {"inserted": n, "updated": n, "deleted": n, "replaced": n}
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    #: model -> {column: number of keys whose value changed}
    columns: dict[str, dict[str, int]] = field(default_factory=dict)

    def describe(self) -> str:
        lines = [f"branch {self.branch} vs its parent (rows in {self.table}):"]
        for model, counts in sorted(self.counts.items()):
            changed = ", ".join(f"{c} ({n})" for c, n in sorted(self.columns.get(model, {}).items()))
            lines.append(
                f"  {model}: {counts.get('inserted', 0)} inserted, {counts.get('updated', 0)} updated, "
                f"{counts.get('deleted', 0)} deleted"
                + (", replaced (detached model)" if counts.get("replaced") else "")
                + (f"; changed columns: {changed}" if changed else "")
            )
        if not self.counts:
            lines.append("  no model differs")
        return "\n".join(lines)


def _diff_rows(spark: SparkSession, info: OverlayInfo, parent: tuple[str, str] | None, model: str) -> DataFrame:
    from pyspark.sql import functions as F

    ours = spark.table(info.table).alias("o")
    if info.mode == "detached" or parent is None:
        parent_rows = 0 if parent is None else spark.table(qualified(*parent)).count()
        our_rows = ours.where(F.col(OP_COLUMN) == OP_UPSERT).count()
        return spark.createDataFrame(
            [(model, None, "replace", None, str(parent_rows), str(our_rows))],
            "model string, key string, change string, column_name string, old_value string, new_value string",
        )
    keys = info.key_columns
    theirs = (
        spark.table(qualified(*parent))
        .join(F.broadcast(spark.table(info.table).select(*[quote(k) for k in keys])), list(keys), "left_semi")
        .select(*[quote(c) for c in info.columns])
        .withColumn("_t", F.lit(True))
        .alias("t")
    )
    joined = ours.join(theirs, on=_and([F.col(f"o.{quote(k)}") == F.col(f"t.{quote(k)}") for k in keys]), how="left")
    in_parent = F.col("t._t").isNotNull()
    is_upsert = F.col(f"o.{OP_COLUMN}") == OP_UPSERT
    changes = F.filter(
        F.array(
            *[
                F.struct(
                    F.lit(c).alias("column_name"),
                    F.col(f"t.{quote(c)}").cast("string").alias("old_value"),
                    F.col(f"o.{quote(c)}").cast("string").alias("new_value"),
                    (~F.col(f"o.{quote(c)}").eqNullSafe(F.col(f"t.{quote(c)}"))).alias("changed"),
                )
                for c in info.columns
                if c not in keys
            ]
            or [F.struct(F.lit(None).cast("string").alias("column_name"), F.lit(None).cast("string").alias("old_value"),
                         F.lit(None).cast("string").alias("new_value"), F.lit(False).alias("changed"))]
        ),
        lambda x: x["changed"],
    )
    keyed = joined.select(
        F.lit(model).alias("model"),
        _key_string(keys, "o.").alias("key"),
        F.when(is_upsert & ~in_parent, "insert").when(is_upsert, "update").when(in_parent, "delete").alias("change"),
        changes.alias("changes"),
    ).where(F.col("change").isNotNull())
    updates = (
        keyed.where(F.col("change") == "update")
        .select("model", "key", "change", F.explode("changes").alias("c"))
        .select("model", "key", "change", "c.column_name", "c.old_value", "c.new_value")
    )
    others = keyed.where(F.col("change") != "update").select(
        "model",
        "key",
        "change",
        F.lit(None).cast("string").alias("column_name"),
        F.lit(None).cast("string").alias("old_value"),
        F.lit(None).cast("string").alias("new_value"),
    )
    return updates.unionByName(others)


def diff_branch(spark: SparkSession, *, name: str, meta_schema: str) -> DiffResult:
    """Compare each model on branch ``name`` with its parent's current rows; writes the per-column changes to
    ``<meta_schema>__br_<name>.partialcow_branch_diff`` (model, key, change, column_name, old_value, new_value).

    >>> print(diff_branch(spark, name="dev", meta_schema="shop").describe())   # doctest: +SKIP
    branch dev vs its parent (rows in shop__br_dev.partialcow_branch_diff):
      shop.orders: 1 inserted, 2 updated, 1 deleted; changed columns: status (2)
    """
    from pyspark.sql import functions as F

    store = BranchStore(spark, meta_schema=meta_schema)
    store.require(name)
    levels = store.chain(name)
    frames = []
    for info in branch_models(spark, name):
        model = f"{base_schema_of(info.schema)}.{info.identifier}"
        parent = resolve_parent(spark, levels[1:], base_schema_of(info.schema), info.identifier)
        frames.append(_diff_rows(spark, info, parent, model))
    schema = overlay_schema(meta_schema, name)
    table = f"{schema}.{DIFF_TABLE}"
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
    empty = spark.createDataFrame(
        [], "model string, key string, change string, column_name string, old_value string, new_value string"
    )
    functools.reduce(lambda a, b: a.unionByName(b), frames, empty).writeTo(table).using("iceberg").createOrReplace()
    result = DiffResult(branch=name, table=table)
    written = spark.table(table)
    for row in written.groupBy("model", "change").agg(F.countDistinct("key").alias("n")).collect():
        result.counts.setdefault(row["model"], {})[_PAST[row["change"]]] = row["n"]
    for row in written.where("change = 'update'").groupBy("model", "column_name").count().collect():
        result.columns.setdefault(row["model"], {})[row["column_name"]] = row["count"]
    return result


# ---------------------------------------------------------------------------------------------------- merge


@dataclass
class ModelMerge:
    """What ``branch_merge`` did (or would do) for one model."""

    model: str
    fast_forward: bool
    detached: bool = False
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    replaced: bool = False
    conflicts: int = 0
    resolution: str | None = None

    def describe(self) -> str:
        how = "fast-forward" if self.fast_forward else "three-way"
        if self.detached:
            done = "replaced the parent's rows" if self.replaced else "left the parent as it is"
            text = f"  {self.model} ({how}, detached): {done}"
        else:
            text = f"  {self.model} ({how}): {self.inserted} inserted, {self.updated} updated, {self.deleted} deleted"
        if self.conflicts:
            text += f"; {self.conflicts} conflicting key(s)"
            text += f" resolved as {self.resolution}" if self.resolution else ""
        return text


@dataclass
class MergeResult:
    branch: str
    parent: str
    applied: bool
    conflict_table: str
    models: list[ModelMerge] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def conflicts(self) -> int:
        return sum(m.conflicts for m in self.models)

    def describe(self) -> str:
        state = "merged" if self.applied else "NOT merged (nothing applied)"
        lines = [f"branch {self.branch} -> {self.parent}: {state} in {self.seconds:.2f}s"]
        lines += [m.describe() for m in self.models] or ["  nothing to merge"]
        if self.conflicts:
            lines.append(
                f"  conflicts: {self.conflict_table} (model, key, column_name, base_value, ours_value, theirs_value)"
            )
        return "\n".join(lines)


@dataclass
class _Plan:
    info: OverlayInfo
    base_schema: str
    merge: ModelMerge
    parent: tuple[str, str] | None
    stage: str | None = None  # staged rows (delta models)


_CONFLICT_SCHEMA = (
    "branch string, model string, key string, column_name string, base_value string, ours_value string, "
    "theirs_value string"
)


def _stage_delta(
    spark: SparkSession,
    plan: _Plan,
    *,
    record: BranchRecord,
    parent_levels: Sequence[str],
    policy: ConflictPolicy | None,
) -> None:
    """Classify every overlay key three ways and stage the rows to apply or report in ``<model>__pcow_merge``."""
    from pyspark.sql import functions as F

    info = plan.info
    keys, cols = info.key_columns, info.columns
    values = [c for c in cols if c not in keys]
    overlay = spark.table(info.table)
    overlay_keys = F.broadcast(overlay.select(*[quote(k) for k in keys]).distinct())

    def side(frame: DataFrame | None, prefix: str) -> DataFrame:
        if frame is None:  # absent at that point in time: no rows
            frame = spark.table(info.table).select(*[quote(c) for c in cols]).limit(0)
        frame = frame.join(overlay_keys, list(keys), "left_semi")
        return frame.select(
            *[F.col(quote(c)).alias(f"{prefix}{i}") for i, c in enumerate(cols)], F.lit(True).alias(f"{prefix}x")
        )

    theirs_frame = None if plan.parent is None else spark.table(qualified(*plan.parent))
    theirs = side(theirs_frame, "_t")
    image = qualified(info.schema, base_image_table(info.identifier))
    if plan.merge.fast_forward:
        base = side(theirs_frame, "_b").withColumn("_bk", F.lit(True))
    elif table_exists(spark, info.schema, base_image_table(info.identifier)):
        # the parent's rows at the merge base, captured when each key entered the overlay
        stored = spark.table(image)
        base = stored.select(
            *[F.when(F.col(PRESENT_COLUMN), F.col(quote(c))).alias(f"_b{i}") if c not in keys else
              F.col(quote(c)).alias(f"_b{i}") for i, c in enumerate(cols)],
            F.when(F.col(PRESENT_COLUMN), F.lit(True)).alias("_bx"),
            F.col(PRESENT_COLUMN).isNotNull().alias("_bk"),
        )
    else:
        base = side(None, "_b").withColumn("_bk", F.lit(True))
    key_pos = [cols.index(k) for k in keys]
    joined = overlay.join(theirs, _and([overlay[quote(k)] == theirs[f"_t{i}"] for k, i in zip(keys, key_pos)]), "left")
    joined = joined.join(base, _and([joined[quote(k)] == base[f"_b{i}"] for k, i in zip(keys, key_pos)]), "left")

    ours_x = F.col(OP_COLUMN) == OP_UPSERT
    theirs_x, base_x = F.col("_tx").isNotNull(), F.col("_bx").isNotNull()
    # a key missing from the base image, or stored as unknown, matches neither side: only ours == theirs merges
    base_known = F.coalesce(F.col("_bk"), F.lit(False))

    def equal(a_x: Column, a: Sequence[Column], b_x: Column, b: Sequence[Column]) -> Column:
        same_values = _and([x.eqNullSafe(y) for x, y in zip(a, b)])
        return (a_x == b_x) & (~a_x | same_values)

    value_pos = [cols.index(c) for c in values]
    ours_v = [F.col(quote(cols[i])) for i in value_pos]
    theirs_v = [F.col(f"_t{i}") for i in value_pos]
    base_v = [F.col(f"_b{i}") for i in value_pos]
    status = (
        F.when(equal(ours_x, ours_v, theirs_x, theirs_v), "same")
        .when(base_known & equal(theirs_x, theirs_v, base_x, base_v), "ours")
        .when(base_known & equal(ours_x, ours_v, base_x, base_v), "theirs")
        .otherwise("conflict")
    )
    take = (F.col("_status") == "ours") | ((F.col("_status") == "conflict") & F.lit(policy == "ours"))
    action = F.when(ours_x & theirs_x, "update").when(ours_x, "insert").when(theirs_x, "delete")
    staged = (
        joined.withColumn("_status", status)
        .where(F.col("_status").isin("ours", "conflict"))
        .withColumn("_take", take)
        .withColumn("_action", action)
        .withColumn("_tx", theirs_x)
        .withColumn("_bx", base_x)
        .drop("_bk")
    )
    plan.stage = f"{info.schema}.{info.identifier}__pcow_merge"
    staged.writeTo(plan.stage).using("iceberg").createOrReplace()
    counts = spark.sql(
        f"SELECT _status, _take, _action, count(*) AS n FROM {plan.stage} GROUP BY 1, 2, 3"
    ).collect()
    for row in counts:
        if row["_status"] == "conflict":
            plan.merge.conflicts += row["n"]
        if row["_take"] and row["_action"]:
            counter = _PAST[row["_action"]]
            setattr(plan.merge, counter, getattr(plan.merge, counter) + row["n"])
    if plan.merge.conflicts and policy:
        plan.merge.resolution = policy


def _conflict_rows(spark: SparkSession, plan: _Plan, branch: str) -> DataFrame:
    """One row per conflicting key and column (column ``*`` with whole rows as JSON when a side deleted it)."""
    from pyspark.sql import functions as F

    info = plan.info
    keys, cols = info.key_columns, info.columns
    staged = spark.table(plan.stage).where("_status = 'conflict'")
    both = (F.col(OP_COLUMN) == OP_UPSERT) & F.col("_tx")

    def row_json(prefix: str | None, present: Column) -> Column:
        fields = [
            (F.col(quote(c)) if prefix is None else F.col(f"{prefix}{i}")).alias(c) for i, c in enumerate(cols)
        ]
        return F.when(present, F.to_json(F.struct(*fields)))

    per_column = F.array(
        *[
            F.struct(
                F.lit(c).alias("column_name"),
                F.col(f"_b{i}").cast("string").alias("base_value"),
                F.col(quote(c)).cast("string").alias("ours_value"),
                F.col(f"_t{i}").cast("string").alias("theirs_value"),
                (~F.col(quote(c)).eqNullSafe(F.col(f"_t{i}"))).alias("differs"),
            )
            for i, c in enumerate(cols)
            if c not in keys
        ]
        or [F.struct(F.lit("*").alias("column_name"), F.lit(None).cast("string").alias("base_value"),
                     F.lit(None).cast("string").alias("ours_value"), F.lit(None).cast("string").alias("theirs_value"),
                     F.lit(True).alias("differs"))]
    )
    whole_row = F.array(
        F.struct(
            F.lit("*").alias("column_name"),
            row_json("_b", F.col("_bx")).alias("base_value"),
            row_json(None, F.col(OP_COLUMN) == OP_UPSERT).alias("ours_value"),
            row_json("_t", F.col("_tx")).alias("theirs_value"),
            F.lit(True).alias("differs"),
        )
    )
    entries = F.filter(F.when(both, per_column).otherwise(whole_row), lambda x: x["differs"])
    return staged.select(
        F.lit(branch).alias("branch"),
        F.lit(f"{plan.base_schema}.{info.identifier}").alias("model"),
        _key_string(keys, "").alias("key"),
        F.explode(entries).alias("e"),
    ).select("branch", "model", "key", "e.column_name", "e.base_value", "e.ours_value", "e.theirs_value")


def _apply_with_partial_cow(
    spark: SparkSession, table: str, source: str, keys: Sequence[str], cols: Sequence[str]
) -> None:
    """Apply the staged upserts and tombstones to a main table with partial copy-on-write (one commit, only the
    Parquet pages holding changed values re-encoded)."""
    from partialcow.spark.changes import ChangeSpec, apply_changes
    from partialcow.spark.tables import open_table

    changes = spark.sql(source).select(*[quote(c) for c in cols], OP_COLUMN)
    spec = ChangeSpec(
        key_columns=tuple(keys), op_column=OP_COLUMN, insert_ops=(), update_ops=(OP_UPSERT,),
        delete_ops=(OP_DELETE,), model=table,
    )
    apply_changes(spark, open_table(spark, table, table_format="iceberg"), changes, spec)


def _merge_full_table_sql(target: str, source: str, keys: Sequence[str], cols: Sequence[str], *, with_op: bool) -> str:
    """MERGE the staged changes into a table holding whole rows (a root table or a detached overlay)."""
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
    sets = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in cols if c not in keys)
    names = [quote(c) for c in cols] + ([OP_COLUMN, SEQ_COLUMN] if with_op else [])
    values = [f"s.{quote(c)}" for c in cols] + ([f"'{OP_UPSERT}'", f"s.{SEQ_COLUMN}"] if with_op else [])
    update = f"WHEN MATCHED THEN UPDATE SET {sets} " if sets else ""
    return (
        f"MERGE INTO {target} t USING ({source}) s ON {on} "
        f"WHEN MATCHED AND s.{OP_COLUMN} = '{OP_DELETE}' THEN DELETE {update}"
        f"WHEN NOT MATCHED AND s.{OP_COLUMN} = '{OP_UPSERT}' "
        f"THEN INSERT ({', '.join(names)}) VALUES ({', '.join(values)})"
    )


def _merge_overlay_sql(target: str, source: str, keys: Sequence[str], cols: Sequence[str]) -> str:
    """MERGE the staged changes into a parent branch's overlay: upserts and tombstones both become overlay rows."""
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
    names = [quote(c) for c in cols] + [OP_COLUMN, SEQ_COLUMN]
    sets = ", ".join(f"t.{n} = s.{n}" for n in names)
    return (
        f"MERGE INTO {target} t USING ({source}) s ON {on} WHEN MATCHED THEN UPDATE SET {sets} "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(names)}) VALUES ({', '.join('s.' + n for n in names)})"
    )


def _unmaterialize(spark: SparkSession, schema: str, identifier: str) -> bool:
    if table_exists(spark, schema, full_table(identifier)):
        spark.sql(f"DROP TABLE {qualified(schema, full_table(identifier))} PURGE")
        return True
    return False


def _apply(spark: SparkSession, plan: _Plan, *, store: BranchStore, parent_levels: Sequence[str]) -> None:
    """Apply one model's merge to the parent in one commit (the parent's view is refreshed afterwards)."""
    from pyspark.sql import functions as F

    info, base_schema = plan.info, plan.base_schema
    cols = ", ".join(quote(c) for c in info.columns)
    parent_level = parent_levels[0]
    target_schema = overlay_schema(base_schema, parent_level)
    if plan.merge.detached:
        ours = spark.table(info.table).where(F.col(OP_COLUMN) == OP_UPSERT)
        if parent_level == MAIN:
            target = f"{target_schema}.{info.identifier}"
            current = spark.table(target) if table_exists(spark, target_schema, info.identifier) else None
            same = current is not None and [f.name.lower() for f in current.schema.fields] == [
                c.lower() for c in info.columns
            ]
            if same:
                ours.select(*[quote(c) for c in info.columns]).writeTo(target).overwrite(F.lit(True))
            else:
                ours.select(*[quote(c) for c in info.columns]).writeTo(target).using("iceberg").createOrReplace()
        else:
            write_overlay(spark, ours, schema=target_schema, identifier=info.identifier,
                          key_columns=info.key_columns, mode="detached")
        plan.merge.replaced = True
    else:
        source = f"SELECT * FROM {plan.stage} WHERE _take AND _action IS NOT NULL"
        if parent_level == MAIN:
            target = qualified(target_schema, info.identifier)
            if table_exists(spark, target_schema, info.identifier):
                _apply_with_partial_cow(spark, f"{target_schema}.{info.identifier}", source, info.key_columns,
                                        info.columns)
            else:  # a model new on the branch: the parent gets its rows as a new table
                spark.sql(
                    f"CREATE TABLE {target} USING iceberg AS "
                    f"SELECT {cols} FROM ({source}) WHERE {OP_COLUMN} = '{OP_UPSERT}'"
                )
        else:
            # keys entering the parent's overlay need the parent's own merge base, before they land
            capture_base(
                spark, store=store, branch=parent_level, base_schema=base_schema, identifier=info.identifier,
                columns=info.columns, key_columns=info.key_columns, keys_frame=spark.sql(source),
            )
            parent_info = overlay_info(spark, target_schema, info.identifier)
            if parent_info is None:
                write_overlay(
                    spark, spark.sql(f"SELECT {cols}, {OP_COLUMN}, {SEQ_COLUMN} FROM ({source})"),
                    schema=target_schema, identifier=info.identifier, key_columns=info.key_columns, mode="delta",
                )
            elif parent_info.mode == "delta":
                spark.sql(_merge_overlay_sql(parent_info.table, source, info.key_columns, info.columns))
            else:
                full_merge = _merge_full_table_sql(
                    parent_info.table, source, info.key_columns, info.columns, with_op=True
                )
                spark.sql(full_merge)
    if parent_level != MAIN:
        _unmaterialize(spark, target_schema, info.identifier)  # its collapsed copy no longer matches
        create_branch_view(spark, store=store, branch=parent_level, base_schema=base_schema,
                           identifier=info.identifier)
        refresh_descendant_views(spark, store=store, branch=parent_level, base_schema=base_schema,
                                 identifier=info.identifier)


def merge_branch(
    spark: SparkSession,
    *,
    name: str,
    meta_schema: str,
    on_conflict: ConflictPolicy | None = None,
    models: Sequence[Sequence[str]] = (),
) -> MergeResult:
    """Three-way merge of branch ``name`` into its parent, key by key.

    For each overlay key: *base* is the parent at the branch's creation (or last merge; Iceberg time travel),
    *ours* the branch row, *theirs* the parent now. Ours == theirs: nothing to do; theirs == base: ours is applied;
    ours == base: theirs stays; otherwise a conflict. Conflicts are written to
    ``<meta_schema>__br_<name>.partialcow_merge_conflicts`` and nothing at all is applied, unless ``on_conflict``
    is ``ours`` or ``theirs``. When no parent table changed since the base the merge is a fast-forward (no base
    reconstruction). Each model is applied in one commit. Afterwards the branch's overlays are emptied and its base
    moves to the merge result, so the branch continues from there.

    >>> print(merge_branch(spark, name="dev", meta_schema="shop").describe())   # doctest: +SKIP
    branch dev -> main: merged in 4.10s
      shop.orders (three-way): 1 inserted, 2 updated, 1 deleted
    """
    start = time.perf_counter()
    if on_conflict is not None and on_conflict not in _POLICIES:
        raise BranchError(f"branch_merge {name}: on_conflict {on_conflict!r} is not one of: ours, theirs")
    store = BranchStore(spark, meta_schema=meta_schema)
    record = store.require(name)
    levels = store.chain(name)
    parent_levels = levels[1:]
    conflict_schema = overlay_schema(meta_schema, name)
    result = MergeResult(branch=name, parent=record.parent, applied=False,
                         conflict_table=f"{conflict_schema}.{CONFLICT_TABLE}")
    plans: list[_Plan] = []
    try:
        for info in branch_models(spark, name):
            base_schema = base_schema_of(info.schema)
            tables = chain_tables(base_schema, info.identifier, parent_levels)
            parent = resolve_parent(spark, parent_levels, base_schema, info.identifier)
            plan = _Plan(
                info=info,
                base_schema=base_schema,
                parent=parent,
                merge=ModelMerge(
                    model=f"{base_schema}.{info.identifier}",
                    fast_forward=current_snapshots(spark, tables) == recorded_snapshots(record.base_snapshots, tables),
                    detached=info.mode == "detached" or parent is None,
                ),
            )
            if plan.merge.detached:
                if not plan.merge.fast_forward:
                    plan.merge.conflicts = 1  # no keys: a change on both sides conflicts as a whole
                    plan.merge.resolution = on_conflict
            else:
                _stage_delta(spark, plan, record=record, parent_levels=parent_levels, policy=on_conflict)
            plans.append(plan)
        _write_conflicts(spark, plans, branch=name, table=result.conflict_table)
        result.models = [p.merge for p in plans]
        if result.conflicts and on_conflict is None:
            result.seconds = time.perf_counter() - start
            raise BranchError(
                f"branch_merge {name} -> {record.parent}: {result.conflicts} conflicting key(s) in "
                f"{sum(1 for m in result.models if m.conflicts)} model(s), listed in {result.conflict_table}; "
                f"nothing was applied. Fix them on the branch, or re-run with "
                f"--args '{{name: {name}, on_conflict: ours}}' (or theirs)\n{result.describe()}"
            )
        for plan in plans:
            if plan.merge.detached and plan.merge.conflicts and on_conflict == "theirs":
                continue
            _apply(spark, plan, store=store, parent_levels=parent_levels)
            _reset_branch_model(spark, plan, store=store, branch=name)
        result.applied = True
        wanted = _models(models) + [(p.base_schema, p.info.identifier) for p in plans]
        store.put(
            BranchRecord(
                name=record.name,
                parent=record.parent,
                created_at=record.created_at,
                merged_at=_now(),
                base_snapshots=record_snapshots(spark, _models(wanted), parent_levels),
            )
        )
    finally:
        for plan in plans:
            if plan.stage:
                spark.sql(f"DROP TABLE IF EXISTS {plan.stage} PURGE")
    result.seconds = time.perf_counter() - start
    return result


def _write_conflicts(spark: SparkSession, plans: Sequence[_Plan], *, branch: str, table: str) -> None:
    frames = []
    for plan in plans:
        if not plan.merge.conflicts:
            continue
        if plan.merge.detached:
            frames.append(
                spark.createDataFrame(
                    [(branch, plan.merge.model, None, "*", "parent at branch base",
                      "branch result (detached model)", "parent changed since the base")],
                    _CONFLICT_SCHEMA,
                )
            )
        else:
            frames.append(_conflict_rows(spark, plan, branch))
    schema = table.split(".")[0]
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
    empty = spark.createDataFrame([], _CONFLICT_SCHEMA)
    functools.reduce(lambda a, b: a.unionByName(b), frames, empty).writeTo(table).using("iceberg").createOrReplace()


def _reset_branch_model(spark: SparkSession, plan: _Plan, *, store: BranchStore, branch: str) -> None:
    """After a merge the branch shows the merge result: its delta overlay empties (history kept for children)."""
    if plan.merge.detached:
        return  # the detached overlay now equals the parent's rows
    spark.sql(f"DELETE FROM {plan.info.table}")
    spark.sql(f"DROP TABLE IF EXISTS {qualified(plan.info.schema, base_image_table(plan.info.identifier))} PURGE")
    _unmaterialize(spark, plan.info.schema, plan.info.identifier)
    create_branch_view(spark, store=store, branch=branch, base_schema=plan.base_schema,
                       identifier=plan.info.identifier)


# ----------------------------------------------------------------------------------------------------- drop


@dataclass(frozen=True)
class DropResult:
    branch: str
    schemas: tuple[str, ...]
    objects: int

    def describe(self) -> str:
        where = ", ".join(self.schemas) or "no schema"
        return f"branch {self.branch} dropped: {self.objects} table(s)/view(s) in {where}"


def drop_branch(spark: SparkSession, *, name: str, meta_schema: str) -> DropResult:
    """Drop branch ``name``: every overlay schema (tables purged) and its metadata row. Refuses with child branches.

    >>> drop_branch(spark, name="dev", meta_schema="shop").schemas   # doctest: +SKIP
    ('shop__br_dev',)
    """
    validate_branch_name(name)
    store = BranchStore(spark, meta_schema=meta_schema)
    schemas = tuple(
        sorted(
            d.name
            for d in spark.catalog.listDatabases()
            if d.name != base_schema_of(d.name) and overlay_schema(base_schema_of(d.name), name) == d.name
        )
    )
    if store.get(name) is None and not schemas:
        store.require(name)  # raises "does not exist"
    children = store.children(name)
    if children:
        raise BranchError(
            f"branch {name!r} has child branches {', '.join(children)}: merge or drop them first"
        )
    objects = 0
    for schema in schemas:
        tables = spark.catalog.listTables(schema)
        names = {t.name for t in tables}
        models = sorted(n for n in names if overlay_table(n) in names)
        for identifier in models:  # what readers query first (views read the tables; image tables the image)
            drop_reader_relation(spark, schema, identifier)
            drop_image(spark, base_schema_of(schema), identifier, name)  # the image ref on the root table
        for table in sorted(tables, key=lambda t: t.tableType != "VIEW"):
            if table.isTemporary or table.name in models:
                continue
            if table.tableType == "VIEW":
                spark.sql(f"DROP VIEW IF EXISTS {qualified(schema, table.name)}")
            else:
                spark.sql(f"DROP TABLE IF EXISTS {qualified(schema, table.name)} PURGE")
        objects += len([t for t in tables if not t.isTemporary])
        spark.sql(f"DROP SCHEMA IF EXISTS {quote(schema)}")
    store.delete(name)
    return DropResult(branch=name, schemas=schemas, objects=objects)


# ----------------------------------------------------------------------------------------------------- list


@dataclass(frozen=True)
class ModelStats:
    model: str
    upserts: int
    tombstones: int
    root_rows: int | None
    materialized: bool

    @property
    def ratio(self) -> float | None:
        """Overlay rows per row of the table built without a branch (None when unknown)."""
        if not self.root_rows:
            return None
        return (self.upserts + self.tombstones) / self.root_rows


@dataclass(frozen=True)
class BranchInfo:
    name: str
    parent: str
    created_at: _dt.datetime
    merged_at: _dt.datetime | None
    models: tuple[ModelStats, ...]
    image_mode: ImageMode = COPY_ON_WRITE


@dataclass(frozen=True)
class ListResult:
    branches: tuple[BranchInfo, ...]

    def describe(self) -> str:
        if not self.branches:
            return "no branches"
        now = _now()
        lines = []
        for b in self.branches:
            age = now - b.created_at
            merged = f", last merged {b.merged_at:%Y-%m-%d %H:%M}" if b.merged_at else ""
            lines.append(f"{b.name} (parent {b.parent}, {b.image_mode} images, age {_age(age)}{merged})")
            for m in b.models:
                ratio = "n/a" if m.ratio is None else f"{m.ratio:.2%}"
                lines.append(
                    f"  {m.model}: {m.upserts} overlay rows, {m.tombstones} tombstones, {ratio} of the table"
                    + (", materialized" if m.materialized else "")
                )
        return "\n".join(lines)


def _age(delta: _dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def list_branches(spark: SparkSession, *, meta_schema: str) -> ListResult:
    """Every branch with its parent, age and per-model overlay size (rows, tombstones, ratio to the table).

    >>> print(list_branches(spark, meta_schema="shop").describe())   # doctest: +SKIP
    dev (parent main, copy-on-write images, age 5m)
      shop.orders: 3 overlay rows, 1 tombstones, 0.40% of the table
    """
    from pyspark.sql import functions as F

    store = BranchStore(spark, meta_schema=meta_schema)
    branches = []
    for record in store.all():
        stats = []
        for info in branch_models(spark, record.name):
            counts = {
                r[0]: r[1] for r in spark.table(info.table).groupBy(OP_COLUMN).agg(F.count(F.lit(1))).collect()
            }
            base_schema = base_schema_of(info.schema)
            stats.append(
                ModelStats(
                    model=f"{base_schema}.{info.identifier}",
                    upserts=counts.get(OP_UPSERT, 0),
                    tombstones=counts.get(OP_DELETE, 0),
                    root_rows=iceberg_total_records(spark, base_schema, info.identifier),
                    materialized=table_exists(spark, info.schema, full_table(info.identifier)),
                )
            )
        branches.append(
            BranchInfo(
                name=record.name,
                parent=record.parent,
                created_at=record.created_at,
                merged_at=record.merged_at,
                models=tuple(stats),
                image_mode=record.image_mode,
            )
        )
    return ListResult(branches=tuple(branches))


# ---------------------------------------------------------------------------------------------- materialize


@dataclass(frozen=True)
class MaterializeResult:
    branch: str
    models: tuple[tuple[str, int], ...]

    def describe(self) -> str:
        if not self.models:
            return f"branch {self.branch}: no model to materialize"
        return "\n".join(
            [f"branch {self.branch}: materialized (the view now reads one full table)"]
            + [f"  {model}: {rows} rows" for model, rows in self.models]
        )


def materialize_branch(
    spark: SparkSession, *, name: str, meta_schema: str, models: Sequence[str] | None = None
) -> MaterializeResult:
    """Collapse the overlay chain of the branch's models into one full table each (``<model>__pcow_full``).

    The branch view then reads that table alone (as fast as the table without a branch); the overlay stays for
    diff and merge, and later builds of the model on the branch rewrite both. Parent changes made after this are
    no longer visible on the branch until the model is built again. ``models`` limits it to those model names.

    >>> materialize_branch(spark, name="dev", meta_schema="shop", models=["orders"]).models   # doctest: +SKIP
    (('shop.orders', 1000000),)
    """
    from partialcow.branch.overlay import view_sql

    store = BranchStore(spark, meta_schema=meta_schema)
    store.require(name)
    levels = store.chain(name)
    wanted = None if models is None else {m.lower() for m in models}
    done = []
    for info in branch_models(spark, name):
        if wanted is not None and info.identifier.lower() not in wanted:
            continue
        base_schema = base_schema_of(info.schema)
        parent = resolve_parent(spark, levels[1:], base_schema, info.identifier)
        live = spark.sql(view_sql(info, parent, materialized=False))
        target = f"{info.schema}.{full_table(info.identifier)}"
        live.writeTo(target).using("iceberg").createOrReplace()
        create_branch_view(spark, store=store, branch=name, base_schema=base_schema, identifier=info.identifier)
        done.append((f"{base_schema}.{info.identifier}", spark.table(target).count()))
    if wanted is not None:
        unknown = wanted - {m.split(".")[1] for m, _ in done}
        if unknown:
            raise BranchError(
                f"branch_materialize {name}: no overlay for model(s) {', '.join(sorted(unknown))} on this branch "
                "(build them on the branch first)"
            )
    return MaterializeResult(branch=name, models=tuple(done))


# ----------------------------------------------------------------------------------------------------- refresh


@dataclass(frozen=True)
class RefreshResult:
    branch: str
    models: tuple[tuple[str, bool], ...]  # (model, read through an image)

    def describe(self) -> str:
        if not self.models:
            return f"branch {self.branch}: no model built on it"
        return "\n".join(
            [f"branch {self.branch}: views re-pinned to their parents as they are now"]
            + [
                f"  {model}: " + ("image (one scan)" if imaged else "overlay joined to the live parent")
                for model, imaged in self.models
            ]
        )


def refresh_branch(spark: SparkSession, *, name: str, meta_schema: str) -> RefreshResult:
    """Rebuild the images of the branch's models (and its descendants') from their parents as they are now.

    A model's image pins its parent as of the model's last build on the branch; this picks up what the parent
    changed since, without building the model again. Overlays (what the branch changed) stay as they are.

    >>> refresh_branch(spark, name="dev", meta_schema="shop").models   # doctest: +SKIP
    (('shop.orders', True),)
    """
    store = BranchStore(spark, meta_schema=meta_schema)
    store.require(name)
    done = []
    for info in branch_models(spark, name):
        base_schema = base_schema_of(info.schema)
        create_branch_view(spark, store=store, branch=name, base_schema=base_schema, identifier=info.identifier)
        refresh_descendant_views(spark, store=store, branch=name, base_schema=base_schema, identifier=info.identifier)
        done.append((f"{base_schema}.{info.identifier}", has_image(spark, base_schema, info.identifier, name)))
    return RefreshResult(branch=name, models=tuple(done))
