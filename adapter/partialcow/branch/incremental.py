"""``partial_cow_incremental`` on a branch: a batch of CDC changes applied to the branch's view of the model.

Without a branch the batch rewrites the table's Parquet pages in place. On a branch the table is never written:

1. the batch is staged as on ``main`` (op codes checked, the latest change per key wins, keys never null) and
   converted to the model's column types as on ``main`` (lossless conversions only; a value a type cannot hold
   exactly stops the batch);
2. the branch's current rows for the batch's keys are read from what the branch shows over the parent as it is
   now (its image table while that reflects the parent's current snapshot, else the overlay over the live parent;
   the parent's relation when the model was not built on the branch yet) and the batch applied to them: an
   upsert of a key the branch has updates it (only ``merge_update_columns`` when set), of a key it lacks inserts
   it; a delete removes a key the branch has and does nothing otherwise;
3. each changed key's new state is compared with the parent's row as the parent is now, as a table model's build
   does: a row that differs (or that the parent lacks) becomes an overlay row ``'U'``, a key the parent has and
   the branch deleted a tombstone ``'D'``, a row equal to the parent's leaves the overlay. Only the batch's keys
   are touched (one ``MERGE INTO`` of the overlay), every other overlay row stays;
4. the merge base of keys entering the overlay is captured and the image extended by the batch's keys (rebuilt,
   as after any build, when it does not reflect the parent's current snapshot and the overlay before the batch).

``branch_diff``, ``branch_merge`` and conflicts then see the model like any keyed model on the branch. A model the
parent does not have (or a ``--full-refresh``) takes the batch's upserts as its whole content (:func:`build_model`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from partialcow.branch.base import capture_base
from partialcow.branch.catalog import load_iceberg, table_exists
from partialcow.branch.frames import all_of, key_join, same_key, same_key_sql, same_value
from partialcow.branch.image import ALIVE, AT, extend_image, extendable_image, fork_level
from partialcow.branch.levels import (
    overlay_info,
    parent_level,
    require_parent_columns,
    resolve_parent,
    write_overlay,
)
from partialcow.branch.naming import (
    OP_COLUMN,
    OP_DELETE,
    OP_UPSERT,
    SEQ_COLUMN,
    full_table,
    overlay_schema,
    overlay_table,
    qualified,
    quote,
)
from partialcow.branch.overlay import (
    BuildSummary,
    build_model,
    count_ops,
    create_branch_view,
    follow_parent,
    refresh_descendant_views,
    view_sql,
)
from partialcow.branch.store import BranchStore
from partialcow.branch.types import OverlayInfo
from partialcow.exceptions import BranchError
from partialcow.spark.rewrite_job import DELETE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from partialcow.branch.image import ImageReport
    from partialcow.spark.changes import ChangeSpec

__all__ = ["BranchChanges", "apply_changes_on_branch", "prepare_model"]

_ACTION = "_pcow_action"  # per changed key: 'U' / 'D' (the overlay row to hold) or 'X' (leave the overlay)
_LEAVE = "X"
_KIND = "_pcow_kind"  # per batch row: inserted / updated / deleted / none (a delete of a key the branch lacks)


@dataclass(frozen=True)
class BranchChanges:
    """What applying one batch to a model on a branch did."""

    branch: str
    model: str
    inserted: int
    updated: int
    deleted: int
    upserts: int  # overlay rows after the batch
    tombstones: int
    image: ImageReport | None
    whole: BuildSummary | None = None  # set when the batch became the model's whole content
    #: descendant branches whose model cannot be read over this batch's result (see refresh_descendant_views)
    behind: tuple[str, ...] = ()

    def describe(self) -> str:
        """
        >>> BranchChanges("dev", "shop.orders", 1, 2, 3, upserts=4, tombstones=3, image=None).describe()
        'branch dev: shop.orders: 1 inserted, 2 updated, 3 deleted; overlay 4 upserted rows, 3 tombstones; no image'
        """
        image = self.image.describe() if self.image else "no image"
        return (
            f"branch {self.branch}: {self.model}: {self.inserted} inserted, {self.updated} updated, "
            f"{self.deleted} deleted; overlay {self.upserts} upserted rows, {self.tombstones} tombstones; {image}"
        ) + "".join(f"\n  {line}" for line in self.behind)


def prepare_model(
    spark: SparkSession, *, branch: str, base_schema: str, identifier: str, key_columns: Sequence[str],
    meta_schema: str,
) -> bool:
    """Give the model a relation on ``branch`` before its SQL runs, so that ``{{ this }}`` reads what the branch
    shows: when only a parent level has the model, an empty overlay (the branch shows the parent). True when the
    model exists on the branch or a parent level (``is_incremental()`` holds there)."""
    schema = overlay_schema(base_schema, branch)
    if overlay_info(spark, schema, identifier) is not None:
        return True
    store = BranchStore(spark, meta_schema=meta_schema)
    parent = resolve_parent(spark, store.chain(branch)[1:], base_schema, identifier)
    if parent is None:
        return False
    from pyspark.sql import functions as F

    columns = spark.table(qualified(*parent)).schema
    keys = _match(f"{base_schema}.{identifier}", columns.names, key_columns, "unique_key")
    empty = spark.createDataFrame([], columns).select(
        *[quote(c) for c in columns.names], F.lit(OP_UPSERT).alias(OP_COLUMN), F.lit(0).cast("bigint").alias(SEQ_COLUMN)
    )
    write_overlay(spark, empty, schema=schema, identifier=identifier, key_columns=keys, mode="delta")
    create_branch_view(spark, store=store, branch=branch, base_schema=base_schema, identifier=identifier)
    return True


def _match(model: str, columns: Sequence[str], wanted: Sequence[str], what: str) -> tuple[str, ...]:
    by_lower = {c.lower(): c for c in columns}
    missing = [c for c in wanted if c.lower() not in by_lower]
    if missing:
        raise BranchError(f"model {model}: {what} column(s) {', '.join(missing)} are not columns of the model "
                          f"({', '.join(columns)})")
    return tuple(by_lower[c.lower()] for c in wanted)


def _stage(changes: DataFrame, spec: ChangeSpec, current: DataFrame) -> tuple[DataFrame, list[str]]:
    """The batch collapsed to one change per key, in the model's columns and types (converted and checked as on
    main: README, casting rules), and its value columns."""
    from partialcow.spark.changes import stage_changes

    model = spec.model
    columns = current.columns
    # the model's column types, as on main: lossless conversions only, a value a type cannot hold stops the batch
    staged = stage_changes(changes, spec, table_schema=current.schema)
    extra = [c for c in staged.columns if c not in columns and c != DELETE]
    missing = [c for c in columns if c not in staged.columns]
    if extra or (missing and spec.on_schema_change == "sync_all_columns"):
        raise BranchError(
            f"model {model}: on_schema_change={spec.on_schema_change!r} would change the model's columns (new: "
            f"{extra}, dropped: {missing if spec.on_schema_change == 'sync_all_columns' else []}), which a branch "
            "does not do to its parent's table: change the schema without a branch, or build the model on the "
            "branch with --full-refresh"
        )
    values = [c for c in columns if c not in spec.key_columns and c in staged.columns]
    if spec.update_columns is not None:
        unknown = [c for c in spec.update_columns if c not in columns]
        if unknown:
            raise BranchError(f"model {model}: merge_update_columns {unknown} are not columns of the model")
        values = [c for c in values if c in spec.update_columns]
    return staged, [c for c in values if not spec.excludes(c)]


def _of_batch(rows: DataFrame, staged: DataFrame, keys: Sequence[str]) -> DataFrame:
    """``rows`` of the batch's keys (a batch is small next to a model: its keys are broadcast)."""
    return key_join(rows, staged, keys, "left_semi", broadcast=True)


def _changed_keys(
    staged: DataFrame, ours: DataFrame, parent: DataFrame, *, keys: Sequence[str], values: Sequence[str], seq: int,
    carry: Sequence[str] = (),
) -> DataFrame:
    """One row per key of the batch: its new state on the branch (data columns), what the batch did to it
    (``_pcow_kind``) and what the overlay must hold for it (``_pcow_action``). ``ours``: the branch's current rows of
    the batch's keys (the model's columns, and the ``carry`` columns passed through: null for a key the branch
    lacks)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = [c for c in ours.columns if c not in carry]
    ours_schema = ours.schema
    ours = ours.dropDuplicates(list(keys))
    ours = ours.select(*[F.col(quote(c)).alias(f"c{i}") for i, c in enumerate(columns)], F.lit(True).alias("_c"),
                       *[quote(c) for c in carry])
    # a key the parent holds more than once is never "the parent's row": the branch shows one row for it
    copies = F.count(F.lit(1)).over(Window.partitionBy(*[F.col(quote(k)) for k in keys])).alias("_pcow_copies")
    theirs = _of_batch(parent, staged, keys).select("*", copies).dropDuplicates(list(keys))
    theirs = theirs.select(*[F.col(quote(c)).alias(f"p{i}") for i, c in enumerate(columns)], F.lit(True).alias("_p"),
                           F.col("_pcow_copies"))
    s = staged.alias("s")
    position = {c: i for i, c in enumerate(columns)}
    joined = s.join(ours, same_key([F.col(f"s.{quote(k)}") for k in keys], [F.col(f"c{position[k]}") for k in keys]),
                    "left")
    joined = joined.join(
        theirs, same_key([F.col(f"s.{quote(k)}") for k in keys], [F.col(f"p{position[k]}") for k in keys]), "left")
    present, in_parent, delete = F.col("_c").isNotNull(), F.col("_p").isNotNull(), F.col(f"s.{DELETE}")

    def new_value(column: str) -> object:
        batch = F.col(f"s.{quote(column)}") if column in staged.columns else F.lit(None)
        if column in keys or column in values:
            return batch
        return F.when(present, F.col(f"c{position[column]}")).otherwise(batch)  # kept by an update

    types = {f.name: f.dataType for f in ours_schema.fields}
    state = [F.when(~delete, new_value(c)).cast(types[c]) if c not in keys
             else F.col(f"s.{quote(c)}") for c in columns]
    same_as_parent = (F.col("_pcow_copies") == 1) & all_of(
        [same_value(F.col(f"p{position[c]}"), v, types[c]) for c, v in zip(columns, state) if c not in keys])
    kind = (F.when(delete & present, "deleted").when(delete, "none").when(present, "updated").otherwise("inserted"))
    action = (
        F.when(delete & ~present, F.lit(None))  # a delete of a key the branch lacks changes nothing
        .when(delete, F.when(in_parent, F.lit(OP_DELETE)).otherwise(F.lit(_LEAVE)))
        .when(in_parent & same_as_parent, F.lit(_LEAVE))
        .otherwise(F.lit(OP_UPSERT))
    )
    return joined.select(*[v.alias(c) for c, v in zip(columns, state)], kind.alias(_KIND), action.alias(_ACTION),
                         F.lit(seq).cast("bigint").alias(SEQ_COLUMN), *[quote(c) for c in carry])


def _merge_overlay_sql(target: str, source: str, keys: Sequence[str], columns: Sequence[str]) -> str:
    on = same_key_sql(keys, "t", "s")
    names = [quote(c) for c in columns]
    sets = ", ".join(
        [f"t.{n} = s.{n}" for n in names] + [f"t.{OP_COLUMN} = s.{_ACTION}", f"t.{SEQ_COLUMN} = s.{SEQ_COLUMN}"]
    )
    values = [f"s.{n}" for n in names] + [f"s.{_ACTION}", f"s.{SEQ_COLUMN}"]
    return (
        f"MERGE INTO {target} t USING (SELECT * FROM {source} WHERE {_ACTION} IS NOT NULL) s ON {on} "
        f"WHEN MATCHED AND s.{_ACTION} = '{_LEAVE}' THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {sets} "
        f"WHEN NOT MATCHED AND s.{_ACTION} <> '{_LEAVE}' "
        f"THEN INSERT ({', '.join([*names, OP_COLUMN, SEQ_COLUMN])}) VALUES ({', '.join(values)})"
    )


def _whole(
    spark: SparkSession, staged_rows: DataFrame, *, branch: str, base_schema: str, identifier: str,
    key_columns: Sequence[str], meta_schema: str, counts: tuple[int, int, int],
) -> BranchChanges:
    summary = build_model(spark, staged_rows, branch=branch, base_schema=base_schema, identifier=identifier,
                          key_columns=key_columns, meta_schema=meta_schema)
    inserted, updated, deleted = counts
    return BranchChanges(branch=branch, model=summary.model, inserted=inserted, updated=updated, deleted=deleted,
                         upserts=summary.upserts, tombstones=summary.tombstones, image=summary.image, whole=summary)


def apply_changes_on_branch(
    spark: SparkSession,
    changes: DataFrame,
    spec: ChangeSpec,
    *,
    branch: str,
    base_schema: str,
    identifier: str,
    meta_schema: str,
    full_refresh: bool = False,
) -> BranchChanges:
    """Apply a batch of CDC ``changes`` (read per ``spec``, as ``apply_changes`` reads them) to the model
    ``base_schema.identifier`` on ``branch``; see the module docstring. The parent's table is never written.

    >>> spec = ChangeSpec(key_columns=("id",), op_column="_op")  # doctest: +SKIP
    >>> apply_changes_on_branch(spark, changes_df, spec, branch="dev",  # doctest: +SKIP
    ...                         base_schema="shop", identifier="orders", meta_schema="shop").describe()
    'branch dev: shop.orders: 1 inserted, 2 updated, 1 deleted; overlay 3 upserted rows, 1 tombstones; ...'
    """
    from pyspark.sql import functions as F

    from partialcow.spark.changes import stage_changes
    from partialcow.spark.staging import batch_spelling, table_spelling

    model = f"{base_schema}.{identifier}"
    # columns named in other letter case than the batch's or the model's, matched as on main (spark/changes.py)
    spec = batch_spelling(changes, spec)
    keys = tuple(spec.key_columns)
    schema = overlay_schema(base_schema, branch)
    store = BranchStore(spark, meta_schema=meta_schema)
    levels = store.chain(branch)
    info = overlay_info(spark, schema, identifier)
    if info is None and not full_refresh and prepare_model(
        spark, branch=branch, base_schema=base_schema, identifier=identifier, key_columns=keys,
        meta_schema=meta_schema,
    ):
        info = overlay_info(spark, schema, identifier)
    above = parent_level(spark, levels[1:], base_schema, identifier)
    parent = None if above is None else (overlay_schema(base_schema, above), identifier)
    if not full_refresh and info is not None and info.mode == "delta" and parent is not None:
        # the batch's rows are compared with the parent's (a key back at the parent's row leaves the overlay)
        info = follow_parent(spark, info, parent, store=store, branch=branch)
        require_parent_columns(spark, info, parent, branch=branch, operation="partial_cow_incremental")
    if full_refresh or info is None:
        # the batch's upserts are the model's whole content, as a first build without a branch
        staged = stage_changes(changes, spec)
        rows = staged.where(~F.col(DELETE)).drop(DELETE)
        return _whole(spark, rows, branch=branch, base_schema=base_schema, identifier=identifier, key_columns=keys,
                      meta_schema=meta_schema, counts=(rows.count(), 0, 0))
    current = spark.table(qualified(schema, identifier))
    changes = table_spelling(changes, spec, current.columns)
    spec = batch_spelling(changes, spec)
    keys = tuple(spec.key_columns)
    _match(model, current.columns, keys, "unique_key")
    staged, values = _stage(changes, spec, current)
    seq = time.time_ns() // 1_000_000
    materialized = table_exists(spark, schema, full_table(identifier))
    image_mode = store.require(branch).image_mode
    # the overlay's snapshot the image reflects, when the image can take the batch's changes (not rebuilt)
    extend_from, start = None, above
    if info.mode == "delta" and above is not None and not materialized:
        start = fork_level(spark, levels[1:], base_schema, identifier) or above
        extend_from = extendable_image(spark, info=info, branch=branch, parent_level=start, base_schema=base_schema,
                                       identifier=identifier, mode=image_mode)
    shown = current
    if extend_from is None and info.mode == "delta" and parent is not None and not materialized:
        # The image pins the parent as of its last build and this batch's build re-pins it: the batch applies to
        # what the branch shows over the parent as it is now (a key the parent gained since is there to delete).
        shown = spark.sql(view_sql(info, parent, materialized=False)).select(*[quote(c) for c in current.columns])
    ours = _of_batch(shown, staged, keys)
    carry: list[str] = []
    if extend_from is not None:
        # the image's rows of the batch's keys carry where they are (every copy of a key the parent holds more than
        # once, and what it held there), read in the same job: the image is then changed at those positions
        located = _of_batch(current.select("*", "_spec_id", "_file", "_pos"), staged, keys)
        # the values of a key held more than once come from one of its copies, all of them (first() per column
        # could pair columns of different copies)
        ours = located.groupBy(*[quote(k) for k in keys]).agg(
            F.collect_list(F.struct("_spec_id", "_file", "_pos", *[quote(c) for c in current.columns])).alias(AT),
        ).select(*[quote(k) for k in keys], *[F.col(AT)[0][c].alias(c) for c in current.columns if c not in keys],
                 AT).select(*[quote(c) for c in current.columns], AT)
        carry = [AT]
    parent_rows = spark.table(qualified(*parent)) if parent is not None else current.limit(0)
    changed = _changed_keys(staged, ours, parent_rows, keys=keys, values=values, seq=seq, carry=carry)
    # materialized once: the overlay MERGE below must not re-read what the branch shows while it changes it
    changed = changed.localCheckpoint()
    counts = {r[_KIND]: r["n"] for r in changed.groupBy(_KIND).agg(F.count(F.lit(1)).alias("n")).collect()}
    inserted, updated, deleted = (counts.get(k, 0) for k in ("inserted", "updated", "deleted"))
    if info.mode == "detached" or parent is None:
        # no key-level overlay to patch: the branch's new content as a whole
        alive = changed.where(F.col(_KIND).isin("inserted", "updated")).select(*[quote(c) for c in current.columns])
        rest = key_join(current, staged, keys, "left_anti")
        return _whole(spark, rest.unionByName(alive).localCheckpoint(), branch=branch, base_schema=base_schema,
                      identifier=identifier, key_columns=keys, meta_schema=meta_schema,
                      counts=(inserted, updated, deleted))
    _apply_to_overlay(spark, changed, info=info, keys=keys, columns=current.columns)
    capture_base(spark, store=store, branch=branch, base_schema=base_schema, identifier=identifier,
                 columns=info.columns, key_columns=info.key_columns, keys_frame=spark.table(info.table))
    if materialized:
        # a materialized model keeps its collapsed table in step with the newest build
        spark.sql(view_sql(info, parent, materialized=False)).writeTo(
            f"{schema}.{full_table(identifier)}").using("iceberg").createOrReplace()
    upserts, tombstones = count_ops(spark, info.table)
    overlay = None if extend_from is None else _overlay_after(spark, info, extend_from)
    if carry and start is not None and overlay is not None:
        states = changed.where(F.col(_KIND).isin("inserted", "updated", "deleted")).select(
            *[quote(c) for c in current.columns], (F.col(_KIND) != "deleted").alias(ALIVE), AT)
        image: ImageReport | None = extend_image(
            spark, info=info, branch=branch, parent_level=start, base_schema=base_schema, identifier=identifier,
            mode=image_mode, states=states, keys=keys, overlay=overlay)
    else:
        image = create_branch_view(spark, store=store, branch=branch, base_schema=base_schema,
                                   identifier=identifier)
    behind = refresh_descendant_views(spark, store=store, branch=branch, base_schema=base_schema, identifier=identifier)
    return BranchChanges(branch=branch, model=model, inserted=inserted, updated=updated, deleted=deleted,
                         upserts=upserts, tombstones=tombstones, image=image, behind=behind)


def _overlay_after(spark: SparkSession, info: OverlayInfo, before: int) -> int | None:
    """The overlay's snapshot after this batch's ``MERGE`` when it is the batch's own change of snapshot ``before``
    (or ``before`` itself: nothing to change); None when another writer committed to it in between."""
    table = load_iceberg(spark, info.schema, overlay_table(info.identifier))
    snapshot = None if table is None else table.currentSnapshot()
    if snapshot is None:
        return None
    if int(snapshot.snapshotId()) == before:
        return before
    parent = snapshot.parentId()
    return int(snapshot.snapshotId()) if parent is not None and int(parent) == before else None


def _apply_to_overlay(spark: SparkSession, changed: DataFrame, *, info: OverlayInfo, keys: Sequence[str],
                      columns: Sequence[str]) -> None:
    overlay_columns = {c.lower(): c for c in info.columns}
    if sorted(overlay_columns) != sorted(c.lower() for c in columns) or [k.lower() for k in keys] != [
        k.lower() for k in info.key_columns
    ]:
        raise BranchError(
            f"model {info.schema}.{info.identifier}: its overlay on the branch holds columns {list(info.columns)} "
            f"keyed by {list(info.key_columns)}, the batch's model {list(columns)} keyed by {list(keys)}: build "
            "the model on the branch with --full-refresh"
        )
    view = f"_pcow_branch_changes_{time.time_ns()}"
    changed.createOrReplaceTempView(view)
    try:
        spark.sql(_merge_overlay_sql(info.table, view, keys, columns))
    finally:
        spark.catalog.dropTempView(view)
