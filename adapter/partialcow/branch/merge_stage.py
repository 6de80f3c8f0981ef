"""The staging half of ``branch_merge`` (:mod:`partialcow.branch.merge`): each model's keys classified three ways
and staged, the conflict report, and the checks every model passes before the merge writes anything.

Nothing here writes to the parent or to the branch's overlays: a merge refused at this stage leaves everything as it
was (only its staging tables and the conflict table are written).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from partialcow.branch.catalog import holds_no_rows, iceberg_snapshot, load_iceberg, table_exists
from partialcow.branch.frames import all_of, key_join, key_string, row_hash, same_key, same_types, same_value
from partialcow.branch.image import _OVERLAY_MARK
from partialcow.branch.levels import overlay_info
from partialcow.branch.naming import (
    IMAGE_OF_PROPERTY,
    MAIN,
    OP_COLUMN,
    OP_DELETE,
    OP_UPSERT,
    base_image_table,
    full_table,
    overlay_schema,
    overlay_table,
    qualified,
    quote,
)
from partialcow.branch.types import PRESENT_COLUMN, BranchRecord, ConflictPolicy, OverlayInfo
from partialcow.exceptions import BranchError, ParentTableDroppedError, RepeatedKeysError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from partialcow.spark.changes import ChangeSpec

__all__ = ["ModelMerge"]

_PAST = {"insert": "inserted", "update": "updated", "delete": "deleted"}
# The merge's staging columns sit next to the model's own (the overlay's rows): ``_pcow_`` names, which no model
# column takes (the overlay's op and sequence columns have them too), so a model column named _status or _t0 is
# neither overwritten nor ambiguous. _THEIRS/_BASE + position: the parent's row now / at the merge base, + "x":
# whether it has one.
_STATUS, _TAKE, _ACTION = "_pcow_status", "_pcow_take", "_pcow_action"
_THEIRS, _BASE, _BASE_KNOWN = "_pcow_t", "_pcow_b", "_pcow_bk"
_SAMPLE = 5  # keys named in an error message


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
    #: a model the branch changed key by key whose parent's table was dropped since the branch built it
    parent_dropped: bool = False
    #: the branch's model was removed (the parent's drop kept, ``on_conflict: theirs``)
    removed: bool = False
    #: partition and sort fields of the parent's table a detached model's other columns could not keep
    layout_dropped: tuple[str, ...] = ()
    #: an incremental model without unique_key: the parent's rows are its history and stay as they are
    kept_history: bool = False
    #: such a model whose columns on the branch differ from the parent's (its result was not merged either)
    columns_differ: bool = False
    #: the parent's relation is a view (the model is one there, a table on the branch): holds no rows to merge into
    parent_view: str | None = None
    #: descendant branches whose model cannot be read over the merged parent any more (see
    #: :func:`~partialcow.branch.overlay.refresh_descendant_views`)
    behind: tuple[str, ...] = ()
    #: the parent's tables whose schema changed since the branch's base without a commit (``ALTER TABLE``)
    schema_changed: tuple[str, ...] = ()

    def describe(self) -> str:
        how = "fast-forward" if self.fast_forward else "three-way"
        if self.parent_dropped:
            if self.replaced:
                done = "recreated the parent's table from the rows the branch shows"
            elif self.removed:
                done = "the parent's table stays dropped; the branch's model was removed"
            else:
                done = "changed on the branch, the parent's table dropped since the branch built it"
            text = f"  {self.model} (parent's table dropped): {done}"
        elif self.parent_view:
            text = (f"  {self.model}: not merged, the parent's {self.parent_view} is a view, which holds no rows; "
                    f"`dbt run -s {self.model.split('.', 1)[1]}` there builds the model from its code (the branch "
                    "keeps showing its rows)")
        elif self.kept_history:
            text = (f"  {self.model} (incremental without unique_key): left the parent's rows, its history, as they "
                    "are; the model's next run there appends what its sources gained")
            if self.columns_differ:
                text += " and changes its columns to the branch's as its on_schema_change says"
        elif self.detached:
            done = "replaced the parent's rows" if self.replaced else "left the parent as it is"
            text = f"  {self.model} ({how}, detached): {done}"
            if self.schema_changed:
                text += f"; the parent's schema changed since the branch's base ({', '.join(self.schema_changed)})"
            if self.layout_dropped:
                text += (f"; not kept from the parent's table (its column gone, or of another type now): "
                         f"{', '.join(self.layout_dropped)}")
        else:
            text = f"  {self.model} ({how}): {self.inserted} inserted, {self.updated} updated, {self.deleted} deleted"
        if self.conflicts:
            text += f"; {self.conflicts} conflicting key(s)"
            text += f" resolved as {self.resolution}" if self.resolution else ""
        return text + "".join(f"\n    {line}" for line in self.behind)


@dataclass
class _Plan:
    info: OverlayInfo
    base_schema: str
    merge: ModelMerge
    parent: tuple[str, str] | None
    stage: str | None = None  # staged rows (delta models)
    rows_from: str | None = None  # a dropped parent: what holds the rows the branch shows (see _rows_the_branch_shows)
    seen: dict[str, int] | None = None  # the parent's chain state the plan was made against (chain_state)
    odd_keys: bool | None = None  # whether a staged key goes through Iceberg's MERGE (_odd_keys), once checked

    @property
    def source(self) -> str:
        """The staged rows to apply (delta models)."""
        return f"SELECT * FROM {self.stage} WHERE {_TAKE} AND {_ACTION} IS NOT NULL"


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
        # _pcow_n, which no single row equals). ``present``: the base image's column (its rows' first). The copies
        # are compared as a whole through _pcow_h, their sorted row hashes: first() per column would read a change
        # to a copy other than the first as none.
        extra = [] if present is None else [F.first(present).alias(PRESENT_COLUMN)]
        return frame.groupBy(*[F.col(quote(k)) for k in keys]).agg(
            *[F.first(quote(c)).alias(c) for c in values], *extra, F.count(F.lit(1)).alias("_pcow_n"),
            F.sort_array(F.collect_list(row_hash(values, types))).alias("_pcow_h"))

    def side(frame: DataFrame | None, prefix: str) -> DataFrame:
        if frame is None:  # absent at that point in time: no rows
            frame = spark.table(info.table).select(*[quote(c) for c in cols]).limit(0)
        frame = per_key(key_join(frame, overlay, keys, "left_semi", broadcast=True))
        return frame.select(
            *[F.col(quote(c)).alias(f"{prefix}{i}") for i, c in enumerate(cols)], F.lit(True).alias(f"{prefix}x"),
            F.col("_pcow_n").alias(f"{prefix}n"), F.col("_pcow_h").alias(f"{prefix}h"),
        )

    theirs_frame = None if plan.parent is None else spark.table(qualified(*plan.parent))
    theirs = side(theirs_frame, _THEIRS)
    image = qualified(info.schema, base_image_table(info.identifier))
    # On a fast-forward the base is the parent as it is now (and without an image, nothing): a key it lacks was
    # absent at the base (the branch inserted it). Only the base image can hold keys of unknown base.
    from_image = False
    # Every build of a keyed model captures the base image after writing its overlay, so a parent that moved and
    # no image means a build died in between: the base is unknown (an empty one would read the branch's deletes
    # as agreed with the parent, and drop them), and only keys both sides agree on merge.
    base_unknown = False
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
            F.col("_pcow_n").alias(f"{_BASE}n"), F.col("_pcow_h").alias(f"{_BASE}h"),
        )
    else:
        base = side(None, _BASE)
        base_unknown = theirs_frame is not None
    key_pos = [cols.index(k) for k in keys]
    joined = overlay.join(
        theirs, same_key([overlay[quote(k)] for k in keys], [theirs[f"{_THEIRS}{i}"] for i in key_pos]), "left"
    )
    joined = joined.join(base, same_key([joined[quote(k)] for k in keys], [base[f"{_BASE}{i}"] for i in key_pos]),
                         "left")

    ours_x = F.col(OP_COLUMN) == OP_UPSERT
    theirs_x, base_x = F.col(f"{_THEIRS}x").isNotNull(), F.col(f"{_BASE}x").isNotNull()
    # a key missing from the base image, or stored as unknown, matches neither side: only ours == theirs merges
    base_known = F.coalesce(F.col(_BASE_KNOWN), F.lit(False)) if from_image else F.lit(not base_unknown)

    def equal(a_x: Column, a: Sequence[Column], a_n: Column, a_h: Column,
              b_x: Column, b: Sequence[Column], b_n: Column, b_h: Column) -> Column:
        same_values = all_of([same_value(x, y, types[c]) for x, y, c in zip(a, b, values)]) & a_n.eqNullSafe(b_n)
        same_copies = (F.coalesce(a_n, F.lit(1)) <= 1) | a_h.eqNullSafe(b_h)
        return (a_x == b_x) & (~a_x | (same_values & same_copies))

    value_pos = [cols.index(c) for c in values]
    ours_v = [F.col(quote(cols[i])) for i in value_pos]
    theirs_v = [F.col(f"{_THEIRS}{i}") for i in value_pos]
    base_v = [F.col(f"{_BASE}{i}") for i in value_pos]
    ours_n, theirs_n, base_n = F.lit(1).cast("bigint"), F.col(f"{_THEIRS}n"), F.col(f"{_BASE}n")
    # the branch shows a key once: its copies' hashes are never needed (a count of 1 compares by values)
    ours_h, theirs_h, base_h = F.lit(None), F.col(f"{_THEIRS}h"), F.col(f"{_BASE}h")
    status = (
        F.when(equal(ours_x, ours_v, ours_n, ours_h, theirs_x, theirs_v, theirs_n, theirs_h), "same")
        .when(base_known & equal(theirs_x, theirs_v, theirs_n, theirs_h, base_x, base_v, base_n, base_h), "ours")
        .when(base_known & equal(ours_x, ours_v, ours_n, ours_h, base_x, base_v, base_n, base_h), "theirs")
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


def _odd_keys(keys: Sequence[str]) -> Column:
    """Staged rows the row index of a root table cannot address (partial copy-on-write refuses them): a key with a
    null part, or one the parent holds more than once. A model staging any is applied through Iceberg's MERGE."""
    from pyspark.sql import functions as F

    return functools.reduce(operator.or_, [F.col(quote(k)).isNull() for k in keys], F.col(f"{_THEIRS}n") > 1)


def _change_spec(table: str, keys: Sequence[str]) -> ChangeSpec:
    from partialcow.spark.changes import ChangeSpec

    return ChangeSpec(
        key_columns=tuple(keys), op_column=OP_COLUMN, insert_ops=(), update_ops=(OP_UPSERT,),
        delete_ops=(OP_DELETE,), model=table,
    )


def _refuse_lossy_values(spark: SparkSession, plan: _Plan, table: str) -> None:
    """Refuse, naming column, values and keys, staged upserts that ``table``'s column types cannot hold exactly
    (the parent narrowed a column since the branch built the model). The path through Iceberg's MERGE is checked
    here as ``apply_changes`` checks its batches: Spark's MERGE would fail during the write (an overflow naming
    neither) or, under a legacy store policy, wrap the value."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    from partialcow.spark.casting import lossy_value
    from partialcow.spark.staging import lossy_error

    keys = plan.info.key_columns
    upserts = spark.sql(plan.source).where(F.col(OP_COLUMN) == OP_UPSERT)
    table_types = {f.name.lower(): f.dataType for f in spark.table(table).schema.fields}
    for field in upserts.schema.fields:
        target = table_types.get(field.name.lower())
        if field.name not in plan.info.columns or target is None or target == field.dataType or any(
                isinstance(t, (ArrayType, MapType, StructType)) for t in (target, field.dataType)):
            continue
        bad = upserts.where(lossy_value(quote(field.name), field.dataType, target, exact=field.name in keys))
        rows = bad.select(*[quote(c) for c in {*keys, field.name}]).limit(_SAMPLE).collect()
        if rows:
            raise lossy_error(_change_spec(table, keys), field.name, bad.count(), field.dataType, target,
                              [r[field.name] for r in rows], rows)


def _check_plan(
    spark: SparkSession, plan: _Plan, *, branch: str, parent_levels: Sequence[str], policy: ConflictPolicy
) -> None:
    """Refuse, before anything is written, what would make the merge of this model fail once begun."""
    info = plan.info
    if plan.merge.parent_dropped:
        if policy == "ours":
            plan.rows_from = _rows_the_branch_shows(spark, plan, branch=branch)
        return
    if plan.merge.detached or plan.stage is None:
        return
    keys = ", ".join(quote(k) for k in info.key_columns)

    def repeated(relation: str) -> str:
        rows = spark.sql(
            f"SELECT {keys} FROM {relation} GROUP BY {keys} HAVING count(*) > 1 LIMIT {_SAMPLE}"
        ).collect()
        return ", ".join("(" + ", ".join(f"{k}={r[k]!r}" for k in info.key_columns) + ")" for r in rows)

    where = f"branch_merge {branch}: model {plan.merge.model}"
    found = repeated(info.table)
    if found:
        raise RepeatedKeysError(
            f"{where}: the branch's result holds key(s) {found} more than once (overlay {info.table}); the branch "
            "shows every copy, and the parent can take only one. Make the key unique in the model and build it on "
            "the branch again; nothing was merged", found)
    # a key the parent holds more than once is staged once (its copies counted): the merge leaves it once
    target_schema = overlay_schema(plan.base_schema, parent_levels[0])
    if parent_levels[0] == MAIN:
        # staged keys with a null part or held twice by the parent go through Iceberg's MERGE, not apply_changes
        odd = plan.odd_keys = not spark.sql(plan.source).where(_odd_keys(info.key_columns)).isEmpty()
        if odd and table_exists(spark, target_schema, info.identifier):
            _refuse_lossy_values(spark, plan, f"{target_schema}.{info.identifier}")
        if not odd and table_exists(spark, target_schema, info.identifier):
            # what apply_changes checks before its commit (types, nulls, table features), checked now
            from partialcow.spark.changes import stage_changes
            from partialcow.spark.tables import open_table

            name = f"{target_schema}.{info.identifier}"
            table = open_table(spark, name, table_format="iceberg")
            table.check_supported(removing=False, partitioned_ok=False)
            changes = spark.sql(plan.source).select(*[quote(c) for c in info.columns], OP_COLUMN)
            stage_changes(changes, _change_spec(name, info.key_columns), table_schema=table.spark_schema())
        return
    parent_info = overlay_info(spark, target_schema, info.identifier)
    if parent_info is not None and parent_info.mode == "delta" and (
            sorted(k.lower() for k in parent_info.key_columns) != sorted(k.lower() for k in info.key_columns)):
        # the merge matches the parent's overlay rows on the branch's key, the parent shows them by its own
        raise BranchError(
            f"{where}: the branch keys the model by {list(info.key_columns)}, the parent branch "
            f"{parent_levels[0]} by {list(parent_info.key_columns)}; build the model on {parent_levels[0]} with the "
            "new unique_key first (or on this branch with the parent's); nothing was merged"
        )
    if parent_info is not None:
        theirs = {f.name.lower(): f.dataType for f in spark.table(parent_info.table).schema.fields}
        ours = {f.name.lower(): f.dataType for f in spark.table(info.table).schema.fields}
        differ = [c for c in info.columns
                  if c.lower() not in theirs or not same_types(theirs[c.lower()], ours[c.lower()])]
        if differ:
            raise BranchError(
                f"{where}: the parent branch's overlay {parent_info.table} lacks column(s) {differ} or holds them "
                f"with other types than the branch's; build the model on {parent_levels[0]} again (or on this "
                "branch with the parent's columns); nothing was merged"
            )


def _rows_the_branch_shows(spark: SparkSession, plan: _Plan, *, branch: str) -> str:
    """What still holds every row the branch shows of a model whose parent's table was dropped: its materialized
    table, or its image table while that reflects the overlay's last build and its files are all there (the
    parent's rows it shares are the dropped table's files: a ``DROP TABLE`` keeps them, ``PURGE`` deletes them).
    ``ParentTableDroppedError`` when nothing does: the parent's rows the branch did not change are gone."""
    info = plan.info
    if table_exists(spark, info.schema, full_table(info.identifier)):
        return qualified(info.schema, full_table(info.identifier))  # kept in step with every build
    why = None
    image = load_iceberg(spark, info.schema, info.identifier)
    if image is None or not image.properties().containsKey(IMAGE_OF_PROPERTY):
        why = "the branch reads it through the parent's table, and has no image of its own"
    else:
        snapshot = image.currentSnapshot()
        overlay = iceberg_snapshot(spark, info.schema, overlay_table(info.identifier))
        if snapshot is None or snapshot.summary().get(_OVERLAY_MARK) != str(overlay):
            why = "its image does not reflect the branch's last build of the model"
        elif [c.lower() for c in spark.table(qualified(info.schema, info.identifier)).columns] != [
            c.lower() for c in info.columns
        ]:
            why = "its image's columns differ from the model's"
        else:
            why = _missing_image_files(spark, image, qualified(info.schema, info.identifier))
    if why is None:
        return qualified(info.schema, info.identifier)
    model = plan.merge.model
    raise ParentTableDroppedError(
        f"branch_merge {branch}: model {model}: its parent's table was dropped since the branch built the model, "
        f"and the branch changed it only key by key (its overlay holds the changed rows, not the others), so the "
        f"parent's rows it did not change cannot be recreated: {why}. Nothing was merged. Build {model} on the "
        f"branch again (without a parent it stores its whole result), or merge with on_conflict: theirs (the "
        f"parent's drop stays and the model leaves the branch)",
        model,
    )


def _missing_image_files(spark: SparkSession, image: Any, relation: str) -> str | None:
    """Why the image table ``relation`` cannot be read whole any more (its metadata or data files are gone), or None.
    Its manifests and most of its data files are the root table's: a ``DROP TABLE ... PURGE`` of it deletes them."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    try:
        files = spark.sql(f"SELECT file_path FROM {relation}.files").collect()
    except (Py4JJavaError, CapturedException) as exc:
        first = (str(exc).strip().splitlines() or ["unreadable"])[0]
        return f"the image's metadata files were deleted with the parent's table ({first[:300]})"
    io = image.io()
    missing = [r[0] for r in files if not io.newInputFile(r[0]).exists()]
    return f"the image's data files were deleted with the parent's table (e.g. {missing[0]})" if missing else None


def _write_conflicts(spark: SparkSession, plans: Sequence[_Plan], *, branch: str, table: str) -> None:
    frames = []
    for plan in plans:
        if not plan.merge.conflicts:
            continue
        if plan.merge.parent_dropped or plan.merge.detached:
            ours, theirs = (("branch changed it key by key", "parent's table dropped since the branch built the model")
                            if plan.merge.parent_dropped else
                            ("branch result (detached model)", "parent changed since the base"))
            row = (branch, plan.merge.model, None, "*", "parent at branch base", ours, theirs)
            frames.append(spark.createDataFrame([row], _CONFLICT_SCHEMA))
        else:
            frames.append(_conflict_rows(spark, plan, branch))
    schema, name = table.split(".", 1)
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
    empty = spark.createDataFrame([], _CONFLICT_SCHEMA)
    if not frames and _empty_report(spark, schema, name, empty.schema):
        return
    functools.reduce(lambda a, b: a.unionByName(b), frames, empty).writeTo(table).using("iceberg").createOrReplace()


def _empty_report(spark: SparkSession, schema: str, name: str, columns: Any) -> bool:
    """Leave ``schema.name`` as an empty conflict report without a Spark job (most merges have no conflicts, and
    a table written from an empty frame costs one): created from its columns, or emptied by a metadata-only
    ``DELETE``. False when the table there is not such a report (another schema): the caller replaces it."""
    loaded = load_iceberg(spark, schema, name)
    if loaded is None:
        if table_exists(spark, schema, name):
            return False  # a view or another format: replaced
        spark.sql(f"CREATE TABLE {qualified(schema, name)} ({_CONFLICT_SCHEMA}) USING iceberg")
        return True
    if spark.table(qualified(schema, name)).schema != columns:
        return False
    if not holds_no_rows(spark, schema, name, loaded=loaded):
        spark.sql(f"DELETE FROM {qualified(schema, name)}")  # every file whole: Iceberg drops them from metadata
    return True
