"""``branch_merge``: the three-way merge of a branch into its parent, key by key, in one commit per model.

For each key in the branch's overlay: *base* is the parent's row at the branch's creation or last merge (the base
image, or Iceberg time travel), *ours* the branch's row, *theirs* the parent's row now. The merged rows are applied
to a ``main`` table with partial copy-on-write, to a parent branch's overlay with ``MERGE INTO``.

A merge of several models cannot commit them together (one commit per table). So every model is staged and checked
before any is written (:mod:`partialcow.branch.merge_stage`): conflicts under ``on_conflict: fail``, keys the
branch's result holds more than once (a parent's repeated key is staged once), what ``apply_changes`` would refuse
(types, nulls, table features), a parent overlay whose columns differ, a parent table dropped since the branch built
a model key by key.
Then each model is merged in turn: its commit, then the branch's merge base for that model moved to the result (one
write of the branch record), then its overlay emptied and base image dropped. A merge that fails or is killed after
some models leaves those merged (the branch continues from them) and the others as they were, so running it again
merges the rest correctly:

- killed after a model's commit, before the record moved (crash point ``branch-merge-applied``, or ``committed``
  inside ``apply_changes``): the overlay and base image still hold the branch's changes against the old base; the
  base image was marked before the commit (``partialcow.branch.base.mark_merging``), so the next merge or build
  gives the keys the commit applied their new base (``settle_interrupted_merge``): a key the branch then sets back
  to its value before the merge is a change, not lost; the keys the commit applied are equal on both sides;
- killed after the record moved, before the overlay was emptied (``branch-merge-recorded``): the base image is marked
  with the merge base it was captured against (``partialcow.branch.base.stale_base_image``), so the next merge reads
  it three-way rather than as a fast-forward, and the next build captures the base again.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partialcow.branch.base import (
    SCHEMA_SUFFIX,
    capture_base,
    chain_state,
    mark_merging,
    record_snapshots,
    recorded_state,
    schema_moved,
    settle_interrupted_merge,
    stale_base_image,
)
from partialcow.branch.catalog import table_exists
from partialcow.branch.levels import (
    branch_models,
    distinct_models,
    follow_parent_columns,
    overlay_info,
    require_parent_columns,
    resolve_parent,
    write_overlay,
)
from partialcow.branch.merge_sql import carried_columns, merge_full_table_sql, merge_overlay_sql, with_parent_values
from partialcow.branch.merge_stage import (
    ModelMerge,
    _change_spec,
    _check_plan,
    _odd_keys,
    _Plan,
    _stage_delta,
    _write_conflicts,
)
from partialcow.branch.naming import (
    MAIN,
    OP_COLUMN,
    OP_UPSERT,
    SEQ_COLUMN,
    base_image_table,
    base_schema_of,
    full_table,
    model_of_table,
    overlay_schema,
    overlay_table,
    qualified,
    quote,
)
from partialcow.branch.overlay import create_branch_view, follow_parent, refresh_descendant_views, remove_model
from partialcow.branch.replace import replace_keeping_layout
from partialcow.branch.store import BranchStore
from partialcow.branch.types import BranchRecord, ConflictPolicy, OverlayInfo, validate_conflict_policy
from partialcow.exceptions import BranchError
from partialcow.faults import checkpoint
from partialcow.table.iceberg_create import purge_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CONFLICT_TABLE", "CRASH_POINTS", "MergeResult", "ModelMerge", "merge_branch"]

#: Written to ``<target schema>__br_<branch>`` by branch_merge.
CONFLICT_TABLE = "partialcow_merge_conflicts"
#: Where the fault suite kills a merge (``PARTIALCOW_CRASH_AT``, see ``partialcow.faults``), per model: after its
#: commit to the parent; after the branch's merge base moved for it (its overlay not yet emptied).
CRASH_POINTS = ("branch-merge-applied", "branch-merge-recorded")


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
        replaced = [m.model.split(".", 1)[1] for m in self.models if m.detached and m.replaced and not m.parent_dropped]
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


def _apply_with_partial_cow(
    spark: SparkSession, table: str, source: str, keys: Sequence[str], cols: Sequence[str]
) -> None:
    """Apply the staged upserts and tombstones to a main table with partial copy-on-write (one commit, only the
    Parquet pages holding changed values re-encoded)."""
    from partialcow.spark.changes import apply_changes
    from partialcow.spark.tables import open_table

    changes = spark.sql(source).select(*[quote(c) for c in cols], OP_COLUMN)
    apply_changes(spark, open_table(spark, table, table_format="iceberg"), changes, _change_spec(table, keys))


def _apply_to_main(spark: SparkSession, schema: str, identifier: str, source: str, keys: Sequence[str],
                   cols: Sequence[str], *, odd: bool | None = None) -> None:
    """Apply the staged rows to a root table: partial copy-on-write, unless a staged key has a null part or the
    table holds one more than once, which its row index cannot address (it refuses both): then Iceberg's MERGE,
    still one commit. ``odd``: whether such a key is staged, when the merge's checks found out already."""
    from partialcow.exceptions import DuplicateKeyError

    if odd is None:
        odd = not spark.sql(source).where(_odd_keys(keys)).isEmpty()
    if not odd:
        try:
            _apply_with_partial_cow(spark, f"{schema}.{identifier}", source, keys, cols)
            return
        except DuplicateKeyError:  # a key the branch did not change is held twice: nothing was written
            pass
    target = qualified(schema, identifier)
    spark.sql(merge_full_table_sql(target, source, keys, cols, with_op=False,
                                   carried=carried_columns(spark, target, cols)))


def _unmaterialize(spark: SparkSession, schema: str, identifier: str) -> bool:
    return purge_table(spark, schema, full_table(identifier))


def _apply(spark: SparkSession, plan: _Plan, *, store: BranchStore, parent_levels: Sequence[str]) -> None:
    """Apply one model's merge to the parent in one commit (the parent's view is refreshed afterwards)."""
    from pyspark.sql import functions as F

    info, base_schema = plan.info, plan.base_schema
    cols = ", ".join(quote(c) for c in info.columns)
    parent_level = parent_levels[0]
    target_schema = overlay_schema(base_schema, parent_level)
    if plan.merge.parent_dropped:
        # on_conflict ours: the parent gets back the rows the branch shows (checked to be all there before any write)
        if plan.rows_from is None:
            raise BranchError(f"branch_merge: {plan.merge.model}: no rows to recreate the parent's table from")
        rows = spark.table(plan.rows_from).select(*[quote(c) for c in info.columns])
        if parent_level == MAIN:
            # create(), not createOrReplace(): a table someone recreated meanwhile is not replaced
            rows.writeTo(f"{target_schema}.{info.identifier}").using("iceberg").create()
        else:
            write_overlay(spark, rows.withColumn(OP_COLUMN, F.lit(OP_UPSERT)).withColumn(
                SEQ_COLUMN, F.lit(time.time_ns() // 1_000_000).cast("bigint")), schema=target_schema,
                identifier=info.identifier, key_columns=info.key_columns, mode="detached")
        plan.merge.replaced = True
    elif plan.merge.detached:
        ours = spark.table(info.table).where(F.col(OP_COLUMN) == OP_UPSERT)
        if parent_level == MAIN:
            target = f"{target_schema}.{info.identifier}"
            current = spark.table(target) if table_exists(spark, target_schema, info.identifier) else None
            rows = ours.select(*[quote(c) for c in info.columns])
            # the same columns: names and types (written into the table's own types, a string result would fail
            # after the merge's checks, a bigint one be narrowed to the table's int)
            same = current is not None and [(f.name.lower(), f.dataType.simpleString()) for f in current.schema] == [
                (f.name.lower(), f.dataType.simpleString()) for f in rows.schema]
            if same:
                rows.writeTo(target).overwrite(F.lit(True))
            elif current is not None:  # other columns: the table replaced, its partitioning and sort order kept
                plan.merge.layout_dropped = replace_keeping_layout(spark, target_schema, info.identifier, rows)
            else:
                rows.writeTo(target).using("iceberg").createOrReplace()
        else:
            write_overlay(spark, ours, schema=target_schema, identifier=info.identifier,
                          key_columns=info.key_columns, mode="detached")
        plan.merge.replaced = True
    else:
        source = plan.source
        if parent_level == MAIN:
            target = qualified(target_schema, info.identifier)
            if table_exists(spark, target_schema, info.identifier):
                _apply_to_main(spark, target_schema, info.identifier, source, info.key_columns, info.columns,
                               odd=plan.odd_keys)
            else:  # a model new on the branch: the parent gets its rows as a new table
                spark.sql(
                    f"CREATE TABLE {target} USING iceberg AS "
                    f"SELECT {cols} FROM ({source}) WHERE {OP_COLUMN} = '{OP_UPSERT}'"
                )
        else:
            # a parent branch that built nothing yet has no overlay schema, where its merge base is kept
            spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote(target_schema)}")
            parent_info = overlay_info(spark, target_schema, info.identifier)
            # what the parent branch shows has columns the branch's rows lack (gained since the branch built the
            # model): its overlay keeps them, with the values it shows (they were written as null, and a merge of
            # the parent branch into main then wrote that null over main's value)
            shown = qualified(*plan.parent) if plan.parent is not None else None
            carried = [] if shown is None else carried_columns(spark, shown, info.columns)
            if parent_info is not None:
                held = {c.lower() for c in parent_info.columns}
                carried = [c for c in carried if c.lower() in held]
                overlay_columns = list(parent_info.columns)
            else:
                wanted = {c.lower() for c in [*info.columns, *carried]}
                overlay_columns = [c for c in spark.table(shown).columns if c.lower() in wanted] if shown and carried \
                    else list(info.columns)
            staged = with_parent_values(source, str(shown), info.key_columns, carried)
            # keys entering the parent's overlay need the parent's own merge base, before they land, with the
            # columns of its overlay (a base image of other columns would be captured again without the ones it had)
            capture_base(
                spark, store=store, branch=parent_level, base_schema=base_schema, identifier=info.identifier,
                columns=overlay_columns, key_columns=info.key_columns, keys_frame=spark.sql(staged),
            )
            if parent_info is None:
                listed = ", ".join(quote(c) for c in overlay_columns)
                write_overlay(
                    spark, spark.sql(f"SELECT {listed}, {OP_COLUMN}, {SEQ_COLUMN} FROM ({staged})"),
                    schema=target_schema, identifier=info.identifier, key_columns=info.key_columns, mode="delta",
                )
            elif parent_info.mode == "delta":
                spark.sql(merge_overlay_sql(parent_info.table, staged, info.key_columns, info.columns, carried))
            else:
                full_merge = merge_full_table_sql(
                    parent_info.table, source, info.key_columns, info.columns, with_op=True,
                    carried=carried_columns(spark, parent_info.table, info.columns),
                )
                spark.sql(full_merge)
    if parent_level != MAIN:
        _unmaterialize(spark, target_schema, info.identifier)  # its collapsed copy no longer matches
        create_branch_view(spark, store=store, branch=parent_level, base_schema=base_schema,
                           identifier=info.identifier)
        plan.merge.behind = refresh_descendant_views(spark, store=store, branch=parent_level,
                                                     base_schema=base_schema, identifier=info.identifier)


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
    fast-forward (no base reconstruction). Every model is checked before any is written (see the module docstring);
    then each is applied in one commit, the branch's base for it moves to the merge result and its overlay is
    emptied, so the branch continues from there (also from the models merged before one that fails).

    A model the branch changed key by key whose parent's table was dropped since: a conflict (the parent dropped
    what the branch changed). ``on_conflict: ours`` recreates the parent's table from the rows the branch shows,
    when the branch still holds all of them (its image, or its materialized table), else ``ParentTableDroppedError``
    and nothing is merged; ``on_conflict: theirs`` keeps the drop and removes the model from the branch.

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
    views: list[ModelMerge] = []
    try:
        for info in branch_models(spark, name, record.base_schemas(meta_schema)):
            base_schema = base_schema_of(info.schema)
            parent = resolve_parent(spark, parent_levels, base_schema, info.identifier)
            if parent is not None and _view_model(spark, parent):
                # a view model there that the branch built as a table: nothing on the parent takes rows, and the
                # other models still merge
                views.append(ModelMerge(model=f"{base_schema}.{info.identifier}", fast_forward=False,
                                        parent_view=".".join(parent)))
                continue
            if info.mode == "delta" and parent is not None:
                info = follow_parent(spark, info, parent, store=store, branch=name)
                require_parent_columns(spark, info, parent, branch=name, operation="branch_merge")
            if info.mode == "delta":  # what a merge killed during its commit left in the base image
                settle_interrupted_merge(spark, schema=info.schema, identifier=info.identifier, columns=info.columns,
                                         key_columns=info.key_columns, base_schema=base_schema,
                                         levels=parent_levels, parent=parent)
            # a parent branch's refresh changes what it shows without committing to a chain table: its image counts
            seen = chain_state(spark, base_schema, info.identifier, parent_levels)
            fast_forward = seen == recorded_state(record.base_snapshots, base_schema, info.identifier, parent_levels)
            if fast_forward and info.mode == "delta" and stale_base_image(
                spark, record.base_snapshots, schema=info.schema, identifier=info.identifier, base_schema=base_schema,
                levels=parent_levels,
            ):
                # a merge stopped after moving the base, before emptying the overlay: the overlay's changes are
                # against the base image's base, so they are read three-way from it
                fast_forward = False
            # a delta overlay always had a parent (its rows are only what differs from it): none now means the
            # parent's table was dropped since the branch built the model
            dropped = info.mode == "delta" and parent is None
            plan = _Plan(
                info=info,
                base_schema=base_schema,
                parent=parent,
                seen=seen,
                merge=ModelMerge(
                    model=f"{base_schema}.{info.identifier}",
                    fast_forward=fast_forward,
                    detached=info.mode == "detached" or parent is None,
                    parent_dropped=dropped,
                ),
            )
            if plan.merge.detached and info.keeps_history and parent is not None:
                plan.merge.kept_history = True  # never replaced: its runs on the parent append, the branch's rebuilt
                plan.merge.columns_differ = [c.lower() for c in info.columns] != [
                    c.lower() for c in spark.table(qualified(*parent)).columns]
            elif plan.merge.detached:
                if fast_forward and parent is not None:
                    # an ALTER TABLE on the parent since the base is a change of the parent too
                    plan.merge.schema_changed = tuple(schema_moved(spark, record.base_snapshots, base_schema,
                                                                   info.identifier, parent_levels))
                    plan.merge.fast_forward = not plan.merge.schema_changed
                if not plan.merge.fast_forward or dropped:
                    plan.merge.conflicts = 1  # no keys: a change on both sides conflicts as a whole
                    plan.merge.resolution = None if policy == "fail" else policy
            else:
                _stage_delta(spark, plan, record=record, parent_levels=parent_levels, policy=policy)
            plans.append(plan)  # before a refusal: its staged table is dropped at the end
            if not plan.merge.detached and plan.merge.inserted and parent is not None:
                _refuse_inserts_without_new_columns(spark, info, parent, branch=name)
        _write_conflicts(spark, plans, branch=name, table=result.conflict_table)
        result.models = [p.merge for p in plans] + views
        if result.conflicts and policy == "fail":
            result.seconds = time.perf_counter() - start
            raise BranchError(
                f"branch_merge {name} -> {record.parent}: {result.conflicts} conflicting key(s) in "
                f"{sum(1 for m in result.models if m.conflicts)} model(s), listed in {result.conflict_table}; "
                f"nothing was applied. Fix them on the branch, or re-run with "
                f"--args '{{name: {name}, on_conflict: ours}}' (the branch's rows win) or on_conflict: theirs (the "
                f"parent's rows stay)\n{result.describe()}"
            )
        for plan in plans:  # every check before the first write: a refused merge leaves everything as it was
            _check_plan(spark, plan, branch=name, parent_levels=parent_levels, policy=policy)
        # every model the record has a base for moves too, not only those the caller names: the record is
        # rewritten from this list, and a model left out lost its base (its next change merged as a conflict)
        wanted = distinct_models([*models, *_recorded_models(record),
                                  *[(p.base_schema, p.info.identifier) for p in plans]])
        merged: list[str] = []
        for i, plan in enumerate(plans):
            try:
                record = _merge_model(spark, plan, store=store, record=record, parent_levels=parent_levels,
                                      policy=policy, wanted=wanted if i == len(plans) - 1 else None)
            except Exception as exc:
                if not merged:
                    raise
                from partialcow.table.java import java_message

                first = (java_message(exc).strip().splitlines() or [type(exc).__name__])[0]  # Spark's reason too
                raise BranchError(
                    f"branch_merge {name} -> {record.parent}: merging {plan.merge.model} failed ({first}); "
                    f"merged before it: {', '.join(merged)} (the parent has their changes and the branch continues "
                    f"from them); not merged: {', '.join(p.merge.model for p in plans[i:])}. Fix the cause and run "
                    "branch_merge again to merge the rest"
                ) from exc
            merged.append(plan.merge.model)
        if not plans:
            store.put(dataclasses.replace(record, merged_at=_dt.datetime.now(),
                                          base_snapshots=record_snapshots(spark, wanted, parent_levels)))
        result.applied = True
    finally:
        for plan in plans:
            if plan.stage:
                purge_table(spark, *plan.stage.split(".", 1))
    result.seconds = time.perf_counter() - start
    return result


def _recorded_models(record: BranchRecord) -> list[tuple[str, str]]:
    """``(schema, identifier)`` of the models the branch's merge base has entries for (their tables on any level)."""
    return [(schema, model_of_table(table)) for schema, table in
            (name.split(".", 1) for name in record.base_snapshots if "." in name and not name.endswith(SCHEMA_SUFFIX))]


def _refuse_inserts_without_new_columns(spark: SparkSession, info: OverlayInfo, parent: tuple[str, str], *,
                                        branch: str) -> None:
    """Refuse to insert the branch's new keys into a parent table that gained columns since the branch built the
    model: those rows have no values for them and would hold null, where the parent's code fills them. (An updated
    key keeps the parent's values of such columns: its row is there to take them from.)"""
    gained = [c for c in spark.table(qualified(*parent)).columns if c.lower() not in {x.lower() for x in info.columns}]
    if gained:
        model = f"{base_schema_of(info.schema)}.{info.identifier}"
        raise BranchError(
            f"branch_merge: model {model}'s table on the parent ({'.'.join(parent)}) gained column(s) {gained} since "
            f"branch {branch} built it, and the rows the branch inserts have no values for them; nothing was merged. "
            f"Bring the parent's change to the model's code into the branch, build the model there again (dbt run "
            f"-s {info.identifier} --vars '{{branch: {branch}}}') so its rows have those columns, then merge"
        )


def _view_model(spark: SparkSession, relation: tuple[str, str]) -> bool:
    """Whether ``relation`` (a parent level's) is a view model: a view that is not a branch's view of a model built
    there (which has an overlay taking the merged rows)."""
    schema, identifier = relation
    return (spark.catalog.getTable(qualified(schema, identifier)).tableType == "VIEW"
            and not table_exists(spark, schema, overlay_table(identifier)))


def _merge_model(
    spark: SparkSession,
    plan: _Plan,
    *,
    store: BranchStore,
    record: BranchRecord,
    parent_levels: Sequence[str],
    policy: ConflictPolicy,
    wanted: list[tuple[str, str]] | None,
) -> BranchRecord:
    """Merge one model: its commit to the parent, the branch's merge base moved for it, its overlay reset (in the
    order that keeps a merge stopped anywhere correct, see the module docstring); returns the branch's record now.
    ``wanted``: for the last model, every model whose base the record then moves (and the merge time)."""
    info = plan.info
    if chain_state(spark, plan.base_schema, info.identifier, parent_levels) != plan.seen:
        # what was staged as "ours over an unchanged parent" would overwrite the other writer's commit
        raise BranchError(
            f"branch_merge: the parent of {plan.merge.model} changed while the merge ran (another writer committed "
            "to it); nothing of this model was merged: run branch_merge again to merge against the parent as it is now"
        )
    marked = not plan.merge.detached and bool(plan.merge.inserted + plan.merge.updated + plan.merge.deleted) and (
        mark_merging(spark, schema=info.schema, identifier=info.identifier, base_schema=plan.base_schema,
                     levels=parent_levels,
                     applied_sql=f"SELECT {', '.join(quote(c) for c in info.columns)}, {OP_COLUMN} "
                                 f"FROM ({plan.source}) s")
    )
    if not (plan.merge.detached and plan.merge.conflicts and policy == "theirs") and not plan.merge.kept_history:
        try:
            _apply(spark, plan, store=store, parent_levels=parent_levels)
        except Exception:
            if marked:  # the commit may have landed before the failure: the applied keys' base follows it
                settle_interrupted_merge(spark, schema=info.schema, identifier=info.identifier, columns=info.columns,
                                         key_columns=info.key_columns, base_schema=plan.base_schema,
                                         levels=parent_levels, parent=plan.parent)
            raise
    checkpoint(CRASH_POINTS[0])
    # A model whose parent's rows stay (detached, theirs) takes them before the base moves: left with its own
    # result after the move, the next merge would see no change on the parent and copy that result over it.
    # The others reset after the move: an emptied overlay under the old base would take the next build's keys'
    # base from before this merge.
    reset_first = plan.merge.detached and not plan.merge.replaced
    if reset_first:
        _reset_branch_model(spark, plan, store=store, branch=record.name)
    if wanted is not None:
        record = dataclasses.replace(record, merged_at=_dt.datetime.now(),
                                     base_snapshots=record_snapshots(spark, wanted, parent_levels))
        store.put(record)
    else:
        # the model's entries (its chain's tables and its parent branches' images) replaced by what they are now
        names = set(recorded_state(record.base_snapshots, plan.base_schema, info.identifier, parent_levels))
        moved = {k: v for k, v in record.base_snapshots.items() if k not in names}
        moved.update(record_snapshots(spark, [(plan.base_schema, info.identifier)], parent_levels))
        if moved != record.base_snapshots:
            record = dataclasses.replace(record, base_snapshots=moved)
            store.put(record)
    checkpoint(CRASH_POINTS[1])
    if not reset_first:
        _reset_branch_model(spark, plan, store=store, branch=record.name)
    return record


def _reset_branch_model(spark: SparkSession, plan: _Plan, *, store: BranchStore, branch: str) -> None:
    """After a merge the branch shows the merge result: its delta overlay empties (history kept for children), a
    detached model leaves the branch (it reads the parent; an incremental one without key takes the parent's rows,
    its history); a model whose parent's table stays dropped leaves the branch."""
    if plan.parent is None and not plan.merge.replaced:
        _remove_branch_model(spark, plan, store=store, branch=branch)
        return
    if plan.merge.detached and not plan.merge.parent_dropped:
        if plan.merge.kept_history:  # the parent's rows are its history: the branch continues from them
            _take_parent_rows(spark, plan, store=store, branch=branch)
        else:
            # merged (or the parent's rows kept): nothing of the model differs from the parent now, so the branch
            # reads the parent as it is. A copy kept as the overlay froze it: the branch missed the parent's later
            # changes, and the next merge saw them as a conflict that `ours` settled by reverting them
            remove_model(spark, store=store, branch=branch, base_schema=plan.base_schema,
                         identifier=plan.info.identifier)
        return
    # emptied before the base image goes: an overlay left full without it would merge as a fast-forward
    spark.sql(f"DELETE FROM {plan.info.table}")
    if plan.parent is not None:  # it shows the parent as it is now, with the columns it gained
        follow_parent_columns(spark, plan.info, plan.parent, emptied=True)
    purge_table(spark, plan.info.schema, base_image_table(plan.info.identifier))
    _unmaterialize(spark, plan.info.schema, plan.info.identifier)
    create_branch_view(spark, store=store, branch=branch, base_schema=plan.base_schema,
                       identifier=plan.info.identifier)


def _remove_branch_model(spark: SparkSession, plan: _Plan, *, store: BranchStore, branch: str) -> None:
    """The parent's table was dropped and stays so (``on_conflict: theirs``): the branch continues from that, without
    the model (kept as an empty model, the next merge would create an empty table on the parent)."""
    remove_model(spark, store=store, branch=branch, base_schema=plan.base_schema, identifier=plan.info.identifier)
    plan.merge.removed = True


def _take_parent_rows(spark: SparkSession, plan: _Plan, *, store: BranchStore, branch: str) -> None:
    """An incremental model without key, whose parent's rows are its history: the parent's rows stayed, and the
    branch continues from them. Left as it was, the overlay would still show the
    branch's result, and as the merge base moves on, the next merge would take it for a change made after the base
    and copy it over the parent as a fast-forward."""
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
    write_overlay(spark, frame, schema=info.schema, identifier=info.identifier, key_columns=keys, mode="detached",
                  keeps_history=info.keeps_history)
    _unmaterialize(spark, info.schema, info.identifier)  # the collapsed copy held the branch's result
    create_branch_view(spark, store=store, branch=branch, base_schema=plan.base_schema, identifier=info.identifier)
