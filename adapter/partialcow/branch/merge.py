"""``branch_merge``: the three-way merge of a branch into its parent, key by key, in one commit per model.

For each key in the branch's overlay: *base* is the parent's row at the branch's creation or last merge (the base
image, or Iceberg time travel), *ours* the branch's row, *theirs* the parent's row now. The merged rows are applied
to a ``main`` table with partial copy-on-write, to a parent branch's overlay with ``MERGE INTO``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partialcow.branch.base import capture_base, chain_state, record_snapshots, recorded_state
from partialcow.branch.catalog import table_exists
from partialcow.branch.frames import all_of, key_join, key_string, same_key, same_key_sql, same_value
from partialcow.branch.levels import (
    branch_models,
    distinct_models,
    overlay_info,
    resolve_parent,
    write_overlay,
)
from partialcow.branch.naming import (
    MAIN,
    OP_COLUMN,
    OP_DELETE,
    OP_UPSERT,
    SEQ_COLUMN,
    base_image_table,
    base_schema_of,
    full_table,
    overlay_schema,
    qualified,
    quote,
)
from partialcow.branch.overlay import create_branch_view, refresh_descendant_views
from partialcow.branch.store import BranchStore
from partialcow.branch.types import PRESENT_COLUMN, BranchRecord, ConflictPolicy, OverlayInfo, validate_conflict_policy
from partialcow.exceptions import BranchError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["CONFLICT_TABLE", "MergeResult", "ModelMerge", "merge_branch"]

#: Written to ``<target schema>__br_<branch>`` by branch_merge.
CONFLICT_TABLE = "partialcow_merge_conflicts"
_PAST = {"insert": "inserted", "update": "updated", "delete": "deleted"}
# The merge's staging columns sit next to the model's own (the overlay's rows): ``_pcow_`` names, which no model
# column takes (the overlay's op and sequence columns have them too), so a model column named _status or _t0 is
# neither overwritten nor ambiguous. _THEIRS/_BASE + position: the parent's row now / at the merge base, + "x":
# whether it has one.
_STATUS, _TAKE, _ACTION = "_pcow_status", "_pcow_take", "_pcow_action"
_THEIRS, _BASE, _BASE_KNOWN = "_pcow_t", "_pcow_b", "_pcow_bk"
_INSERT = "_pcow_insert"  # in the source of a whole-row MERGE: the row to insert, not the one that deletes


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
        replaced = [m.model.split(".", 1)[1] for m in self.models if m.detached and m.replaced]
        on_parent = "" if self.parent == MAIN else f" --vars '{{branch: {self.parent}}}'"
        if self.applied and replaced:
            # a detached model is copied as the branch computed it: an aggregate of a keyed model that the merge
            # combined with the parent's changes no longer matches that model
            lines.append(
                f"  note: {', '.join(replaced)} replaced the parent's rows with the branch's result; a model derived "
                f"from merged models (an aggregate) is out of step with them now: rebuild it on the parent "
                f"(dbt run -s {' '.join(replaced)}{on_parent})"
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
    policy: ConflictPolicy,
) -> None:
    """Classify every overlay key three ways and stage the rows to apply or report in ``<model>__pcow_merge``."""
    from pyspark.sql import functions as F

    info = plan.info
    keys, cols = info.key_columns, info.columns
    values = [c for c in cols if c not in keys]
    overlay = spark.table(info.table)
    types = {f.name: f.dataType for f in overlay.schema.fields}

    def per_key(frame: DataFrame, present: Column | None = None) -> DataFrame:
        # One row per key: the parent may hold a key more than once (then one state, with its copies counted in
        # _pcow_n, which no single row equals). ``present``: the base image's column (its rows' first).
        extra = [] if present is None else [F.first(present).alias(PRESENT_COLUMN)]
        return frame.groupBy(*[F.col(quote(k)) for k in keys]).agg(
            *[F.first(quote(c)).alias(c) for c in values], *extra, F.count(F.lit(1)).alias("_pcow_n"))

    def side(frame: DataFrame | None, prefix: str) -> DataFrame:
        if frame is None:  # absent at that point in time: no rows
            frame = spark.table(info.table).select(*[quote(c) for c in cols]).limit(0)
        frame = per_key(key_join(frame, overlay, keys, "left_semi", broadcast=True))
        return frame.select(
            *[F.col(quote(c)).alias(f"{prefix}{i}") for i, c in enumerate(cols)], F.lit(True).alias(f"{prefix}x"),
            F.col("_pcow_n").alias(f"{prefix}n"),
        )

    theirs_frame = None if plan.parent is None else spark.table(qualified(*plan.parent))
    theirs = side(theirs_frame, _THEIRS)
    image = qualified(info.schema, base_image_table(info.identifier))
    # On a fast-forward the base is the parent as it is now (and without an image, nothing): a key it lacks was
    # absent at the base (the branch inserted it). Only the base image can hold keys of unknown base.
    from_image = False
    if plan.merge.fast_forward:
        base = side(theirs_frame, _BASE)
    elif table_exists(spark, info.schema, base_image_table(info.identifier)):
        from_image = True
        # the parent's rows at the merge base, captured when each key entered the overlay
        stored = per_key(spark.table(image), F.col(PRESENT_COLUMN))
        base = stored.select(
            *[F.when(F.col(PRESENT_COLUMN), F.col(quote(c))).alias(f"{_BASE}{i}") if c not in keys else
              F.col(quote(c)).alias(f"{_BASE}{i}") for i, c in enumerate(cols)],
            F.when(F.col(PRESENT_COLUMN), F.lit(True)).alias(f"{_BASE}x"),
            F.col(PRESENT_COLUMN).isNotNull().alias(_BASE_KNOWN),
            F.col("_pcow_n").alias(f"{_BASE}n"),
        )
    else:
        base = side(None, _BASE)
    key_pos = [cols.index(k) for k in keys]
    joined = overlay.join(
        theirs, same_key([overlay[quote(k)] for k in keys], [theirs[f"{_THEIRS}{i}"] for i in key_pos]), "left"
    )
    joined = joined.join(base, same_key([joined[quote(k)] for k in keys], [base[f"{_BASE}{i}"] for i in key_pos]),
                         "left")

    ours_x = F.col(OP_COLUMN) == OP_UPSERT
    theirs_x, base_x = F.col(f"{_THEIRS}x").isNotNull(), F.col(f"{_BASE}x").isNotNull()
    # a key missing from the base image, or stored as unknown, matches neither side: only ours == theirs merges
    base_known = F.coalesce(F.col(_BASE_KNOWN), F.lit(False)) if from_image else F.lit(True)

    def equal(a_x: Column, a: Sequence[Column], a_n: Column, b_x: Column, b: Sequence[Column], b_n: Column) -> Column:
        same_values = all_of([same_value(x, y, types[c]) for x, y, c in zip(a, b, values)]) & a_n.eqNullSafe(b_n)
        return (a_x == b_x) & (~a_x | same_values)

    value_pos = [cols.index(c) for c in values]
    ours_v = [F.col(quote(cols[i])) for i in value_pos]
    theirs_v = [F.col(f"{_THEIRS}{i}") for i in value_pos]
    base_v = [F.col(f"{_BASE}{i}") for i in value_pos]
    ours_n, theirs_n, base_n = F.lit(1).cast("bigint"), F.col(f"{_THEIRS}n"), F.col(f"{_BASE}n")
    status = (
        F.when(equal(ours_x, ours_v, ours_n, theirs_x, theirs_v, theirs_n), "same")
        .when(base_known & equal(theirs_x, theirs_v, theirs_n, base_x, base_v, base_n), "ours")
        .when(base_known & equal(ours_x, ours_v, ours_n, base_x, base_v, base_n), "theirs")
        .otherwise("conflict")
    )
    take = (F.col(_STATUS) == "ours") | ((F.col(_STATUS) == "conflict") & F.lit(policy == "ours"))
    action = F.when(ours_x & theirs_x, "update").when(ours_x, "insert").when(theirs_x, "delete")
    staged = (
        joined.withColumn(_STATUS, status)
        .where(F.col(_STATUS).isin("ours", "conflict"))
        .withColumn(_TAKE, take)
        .withColumn(_ACTION, action)
        .withColumn(f"{_THEIRS}x", theirs_x)
        .withColumn(f"{_BASE}x", base_x)
        .drop(_BASE_KNOWN)
    )
    plan.stage = f"{info.schema}.{info.identifier}__pcow_merge"
    staged.writeTo(plan.stage).using("iceberg").createOrReplace()
    counts = spark.sql(
        f"SELECT {_STATUS}, {_TAKE}, {_ACTION}, count(*) AS n FROM {plan.stage} GROUP BY 1, 2, 3"
    ).collect()
    for row in counts:
        if row[_STATUS] == "conflict":
            plan.merge.conflicts += row["n"]
        if row[_TAKE] and row[_ACTION]:
            counter = _PAST[row[_ACTION]]
            setattr(plan.merge, counter, getattr(plan.merge, counter) + row["n"])
    if plan.merge.conflicts and policy != "fail":
        plan.merge.resolution = policy


def _conflict_rows(spark: SparkSession, plan: _Plan, branch: str) -> DataFrame:
    """One row per conflicting key and column (column ``*`` with whole rows as JSON when a side deleted it)."""
    from pyspark.sql import functions as F

    info = plan.info
    keys, cols = info.key_columns, info.columns
    if plan.stage is None:  # only delta models have conflicting keys, and _stage_delta staged those
        raise BranchError(f"branch_merge {branch}: {plan.merge.model} has conflicts but no staged rows")
    staged = spark.table(plan.stage).where(F.col(_STATUS) == "conflict")
    types = {f.name: f.dataType for f in staged.schema.fields}
    # column by column when both sides hold one row of the key (a parent's several copies: whole rows)
    both = (F.col(OP_COLUMN) == OP_UPSERT) & F.col(f"{_THEIRS}x") & (F.col(f"{_THEIRS}n") == 1)

    def row_json(prefix: str | None, present: Column) -> Column:
        fields = [
            (F.col(quote(c)) if prefix is None else F.col(f"{prefix}{i}")).alias(c) for i, c in enumerate(cols)
        ]
        return F.when(present, F.to_json(F.struct(*fields)))

    per_column = F.array(
        *[
            F.struct(
                F.lit(c).alias("column_name"),
                F.col(f"{_BASE}{i}").cast("string").alias("base_value"),
                F.col(quote(c)).cast("string").alias("ours_value"),
                F.col(f"{_THEIRS}{i}").cast("string").alias("theirs_value"),
                (~same_value(F.col(quote(c)), F.col(f"{_THEIRS}{i}"), types[c])).alias("differs"),
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
            row_json(_BASE, F.col(f"{_BASE}x")).alias("base_value"),
            row_json(None, F.col(OP_COLUMN) == OP_UPSERT).alias("ours_value"),
            row_json(_THEIRS, F.col(f"{_THEIRS}x")).alias("theirs_value"),
            F.lit(True).alias("differs"),
        )
    )
    entries = F.filter(F.when(both, per_column).otherwise(whole_row), lambda x: x["differs"])
    return staged.select(
        F.lit(branch).alias("branch"),
        F.lit(f"{plan.base_schema}.{info.identifier}").alias("model"),
        key_string(keys, "").alias("key"),
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
    """MERGE the staged changes into a table holding whole rows (a root table or a detached overlay), in one commit:
    every row of a staged key is deleted and the branch's row, if it has one, inserted. A key the table holds more
    than once then ends as the branch showed it, once (an UPDATE would change every copy and keep them all)."""
    names = [quote(c) for c in cols] + ([OP_COLUMN, SEQ_COLUMN] if with_op else [])
    values = [f"s.{quote(c)}" for c in cols] + ([f"'{OP_UPSERT}'", f"s.{SEQ_COLUMN}"] if with_op else [])
    # each staged key twice: a row that matches (and deletes) the key's rows, and for an upsert one that matches
    # nothing (and is inserted)
    rows = (
        f"SELECT *, false AS {_INSERT} FROM ({source}) "
        f"UNION ALL SELECT *, true AS {_INSERT} FROM ({source}) WHERE {OP_COLUMN} = '{OP_UPSERT}'"
    )
    return (
        f"MERGE INTO {target} t USING ({rows}) s ON NOT s.{_INSERT} AND {same_key_sql(keys, 't', 's')} "
        f"WHEN MATCHED THEN DELETE "
        f"WHEN NOT MATCHED AND s.{_INSERT} THEN INSERT ({', '.join(names)}) VALUES ({', '.join(values)})"
    )


def _merge_overlay_sql(target: str, source: str, keys: Sequence[str], cols: Sequence[str]) -> str:
    """MERGE the staged changes into a parent branch's overlay: upserts and tombstones both become overlay rows."""
    on = same_key_sql(keys, "t", "s")
    names = [quote(c) for c in cols] + [OP_COLUMN, SEQ_COLUMN]
    sets = ", ".join(f"t.{n} = s.{n}" for n in names)
    return (
        f"MERGE INTO {target} t USING ({source}) s ON {on} WHEN MATCHED THEN UPDATE SET {sets} "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(names)}) VALUES ({', '.join('s.' + n for n in names)})"
    )


def _apply_to_main(spark: SparkSession, schema: str, identifier: str, source: str, keys: Sequence[str],
                   cols: Sequence[str]) -> None:
    """Apply the staged rows to a root table: partial copy-on-write, unless a staged key has a null part or the
    table holds one more than once, which its row index cannot address (it refuses both): then Iceberg's MERGE,
    still one commit."""
    from pyspark.sql import functions as F

    from partialcow.exceptions import DuplicateKeyError

    staged = spark.sql(source)
    odd = functools.reduce(operator.or_, [F.col(quote(k)).isNull() for k in keys], F.col(f"{_THEIRS}n") > 1)
    if staged.where(odd).isEmpty():
        try:
            _apply_with_partial_cow(spark, f"{schema}.{identifier}", source, keys, cols)
            return
        except DuplicateKeyError:  # a key the branch did not change is held twice: nothing was written
            pass
    spark.sql(_merge_full_table_sql(qualified(schema, identifier), source, keys, cols, with_op=False))


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
        source = f"SELECT * FROM {plan.stage} WHERE {_TAKE} AND {_ACTION} IS NOT NULL"
        if parent_level == MAIN:
            target = qualified(target_schema, info.identifier)
            if table_exists(spark, target_schema, info.identifier):
                _apply_to_main(spark, target_schema, info.identifier, source, info.key_columns, info.columns)
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
    ``<meta_schema>__br_<name>.partialcow_merge_conflicts`` and nothing at all is applied (``on_conflict``
    ``fail``, the default), unless ``on_conflict`` is ``ours`` (the branch's row wins) or ``theirs`` (the parent's
    row stays). When no parent table, and no parent branch's image, changed since the base the merge is a
    fast-forward (no base reconstruction). Each model is applied in one commit. Afterwards the branch's overlays
    are emptied and its base moves to the merge result, so the branch continues from there.

    >>> print(merge_branch(spark, name="dev", meta_schema="shop").describe())   # doctest: +SKIP
    branch dev -> main: merged in 4.10s
      shop.orders (three-way): 1 inserted, 2 updated, 1 deleted
    """
    start = time.perf_counter()
    policy = validate_conflict_policy(on_conflict, branch=name)
    store = BranchStore(spark, meta_schema=meta_schema)
    record = store.require(name)
    levels = store.chain(name)
    parent_levels = levels[1:]
    conflict_schema = overlay_schema(meta_schema, name)
    result = MergeResult(branch=name, parent=record.parent, applied=False,
                         conflict_table=f"{conflict_schema}.{CONFLICT_TABLE}")
    plans: list[_Plan] = []
    try:
        for info in branch_models(spark, name, record.base_schemas(meta_schema)):
            base_schema = base_schema_of(info.schema)
            # a parent branch's refresh changes what it shows without committing to a chain table: its image counts
            unchanged = chain_state(spark, base_schema, info.identifier, parent_levels) == recorded_state(
                record.base_snapshots, base_schema, info.identifier, parent_levels)
            parent = resolve_parent(spark, parent_levels, base_schema, info.identifier)
            plan = _Plan(
                info=info,
                base_schema=base_schema,
                parent=parent,
                merge=ModelMerge(
                    model=f"{base_schema}.{info.identifier}",
                    fast_forward=unchanged,
                    detached=info.mode == "detached" or parent is None,
                ),
            )
            if plan.merge.detached:
                if not plan.merge.fast_forward:
                    plan.merge.conflicts = 1  # no keys: a change on both sides conflicts as a whole
                    plan.merge.resolution = None if policy == "fail" else policy
            else:
                _stage_delta(spark, plan, record=record, parent_levels=parent_levels, policy=policy)
            plans.append(plan)
        _write_conflicts(spark, plans, branch=name, table=result.conflict_table)
        result.models = [p.merge for p in plans]
        if result.conflicts and policy == "fail":
            result.seconds = time.perf_counter() - start
            raise BranchError(
                f"branch_merge {name} -> {record.parent}: {result.conflicts} conflicting key(s) in "
                f"{sum(1 for m in result.models if m.conflicts)} model(s), listed in {result.conflict_table}; "
                f"nothing was applied. Fix them on the branch, or re-run with "
                f"--args '{{name: {name}, on_conflict: ours}}' (the branch's rows win) or on_conflict: theirs (the "
                f"parent's rows stay)\n{result.describe()}"
            )
        for plan in plans:
            if not (plan.merge.detached and plan.merge.conflicts and policy == "theirs"):
                _apply(spark, plan, store=store, parent_levels=parent_levels)
            _reset_branch_model(spark, plan, store=store, branch=name)
        result.applied = True
        wanted = distinct_models([*models, *[(p.base_schema, p.info.identifier) for p in plans]])
        # replace(): every field not named here (the image mode) is kept as the branch was created
        store.put(dataclasses.replace(record, merged_at=_dt.datetime.now(),
                                      base_snapshots=record_snapshots(spark, wanted, parent_levels)))
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
    """After a merge the branch shows the merge result: its delta overlay empties (history kept for children), a
    detached overlay holds the parent's rows."""
    if plan.merge.detached:
        if not plan.merge.replaced:
            _take_parent_rows(spark, plan, store=store, branch=branch)
        return  # replaced: the detached overlay now equals the parent's rows
    spark.sql(f"DELETE FROM {plan.info.table}")
    spark.sql(f"DROP TABLE IF EXISTS {qualified(plan.info.schema, base_image_table(plan.info.identifier))} PURGE")
    _unmaterialize(spark, plan.info.schema, plan.info.identifier)
    create_branch_view(spark, store=store, branch=branch, base_schema=plan.base_schema,
                       identifier=plan.info.identifier)


def _take_parent_rows(spark: SparkSession, plan: _Plan, *, store: BranchStore, branch: str) -> None:
    """A detached model merged with ``on_conflict: theirs``: the parent's rows stayed, and the branch continues from
    them. Left as it was, the overlay would still show the branch's result, and as the merge base moves on, the next
    merge would take it for a change made after the base and copy it over the parent as a fast-forward."""
    from pyspark.sql import functions as F

    info = plan.info
    if plan.parent is None:  # the parent dropped the model since the base: it has no rows
        rows = spark.table(info.table).select(*[quote(c) for c in info.columns]).limit(0)
    else:
        rows = spark.table(qualified(*plan.parent))
    seq = time.time_ns() // 1_000_000
    frame = rows.select(*[quote(c) for c in rows.columns], F.lit(OP_UPSERT).alias(OP_COLUMN),
                        F.lit(seq).cast("bigint").alias(SEQ_COLUMN))
    keys = [k for k in info.key_columns if k in rows.columns]  # the parent's columns may differ from the branch's
    write_overlay(spark, frame, schema=info.schema, identifier=info.identifier, key_columns=keys, mode="detached")
    _unmaterialize(spark, info.schema, info.identifier)  # the collapsed copy held the branch's result
    create_branch_view(spark, store=store, branch=branch, base_schema=plan.base_schema, identifier=info.identifier)
