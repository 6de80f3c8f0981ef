"""Building a model on a branch (its overlay table) and what readers of the model on the branch query.

A model built on branch ``B`` stores only what differs from its parent (the nearest ancestor level that has the
model: a parent branch's view, or the table built without a branch):

- rows that are new or changed, with ``_pcow_op = 'U'``;
- keys the parent has and the branch result lacks, as tombstones ``_pcow_op = 'D'`` (non-key columns null).

What readers query, ``shop__br_dev.orders``, is the model's *image* when it has one (see
:mod:`partialcow.branch.image`: the overlay applied to the parent as an Iceberg branch of the root table, the parent
pinned as of the build), registered as a read-only Iceberg table: one scan and no view to resolve. Otherwise it is a
view that puts the overlay over the live parent::

    SELECT cols FROM overlay WHERE _pcow_op = 'U'
    UNION ALL
    SELECT p.cols FROM parent p LEFT ANTI JOIN overlay o ON p.key <=> o.key

Models without ``unique_key``, and models whose columns differ from the parent's, are *detached*: the overlay holds
the whole result and the view reads the overlay only.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from partialcow.branch.base import capture_base
from partialcow.branch.catalog import hive_unreadable_columns, holds_no_rows, load_iceberg, table_exists
from partialcow.branch.frames import all_of, holds_map, same_key, same_key_sql, same_types, same_value, value_text
from partialcow.branch.image import (
    ImageReport,
    drop_image,
    drop_reader_relation,
    fork_level,
    has_image,
    image_relation,
    publish_image_table,
    refresh_image,
)
from partialcow.branch.levels import follow_parent_columns, overlay_info, parent_level, resolve_parent, write_overlay
from partialcow.branch.naming import (
    OP_COLUMN,
    OP_DELETE,
    OP_UPSERT,
    SEQ_COLUMN,
    base_image_table,
    base_schema_of,
    full_table,
    overlay_schema,
    overlay_table,
    qualified,
    quote,
)
from partialcow.branch.store import BranchStore
from partialcow.branch.types import OverlayInfo, OverlayMode
from partialcow.exceptions import BranchError, RepeatedKeysError, UnfollowableParentError

_LOG = logging.getLogger("partialcow")
_RESTORE_LOCK = threading.Lock()

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "BuildSummary",
    "build_model",
    "count_ops",
    "create_branch_view",
    "follow_parent",
    "refresh_descendant_views",
    "view_sql",
]


@dataclass(frozen=True)
class BuildSummary:
    """The outcome of building one model on a branch."""

    branch: str
    model: str
    mode: OverlayMode
    parent: str | None
    upserts: int
    tombstones: int
    image: ImageReport | None = None  # None: the view reads the overlay and the parent at read time
    #: descendant branches whose model cannot be read over this build (see :func:`refresh_descendant_views`)
    behind: tuple[str, ...] = ()

    def describe(self) -> str:
        source = f"over {self.parent}" if self.parent and self.mode == "delta" else "detached (whole result)"
        image = self.image.describe() if self.image else "no image"
        return (
            f"branch {self.branch}: {self.model} overlay {source}: {self.upserts} upserted rows, "
            f"{self.tombstones} tombstones; {image}"
        ) + "".join(f"\n  {line}" for line in self.behind)


def _match_keys(model: str, columns: Sequence[str], key_columns: Sequence[str]) -> tuple[str, ...]:
    by_lower = {c.lower(): c for c in columns}
    missing = [k for k in key_columns if k.lower() not in by_lower]
    if missing:
        raise BranchError(
            f"model {model}: unique_key column(s) {', '.join(missing)} are not in its result "
            f"(columns: {', '.join(columns)}); fix the model's unique_key config"
        )
    return tuple(by_lower[k.lower()] for k in key_columns)


def _refuse_bad_keys(model: str, result: DataFrame, keys: Sequence[str], *, nulls: bool) -> None:
    """Refuse a result with a key held by more than one row (or, when ``nulls``, a key with a null part), before
    anything is written. A keyed model's branch overlay holds one row per key, which a merge applies to the parent
    per key: of two rows of one key, one would be lost (as a batch of ``partial_cow_incremental`` with a repeated key
    and no sequence column is refused on main and on a branch)."""
    from pyspark.sql import functions as F

    from partialcow.spark.staging import SAMPLE, keys_text

    columns = [F.col(quote(k)) for k in keys]
    any_null = functools.reduce(operator.or_, [c.isNull() for c in columns]) if nulls else F.lit(False)
    # one job: the result's keys grouped (null parts grouped as values), repeated or null ones sampled
    found = (
        result.groupBy(*columns)
        .agg(F.count(F.lit(1)).alias("_pcow_n"))
        .where(any_null | (F.col("_pcow_n") > 1))
        .select(*columns, any_null.alias("_pcow_null"))
        .limit(SAMPLE * 2)
        .collect()
    )
    with_null = [row for row in found if row["_pcow_null"]]
    if with_null:
        first = with_null[0]
        key = next(k for k in keys if first[k] is None)
        raise BranchError(f"model {model}: unique_key column {key} is null in some rows of its result, e.g. "
                          f"{dict(zip(keys, first[: len(keys)]))}; a keyed model needs a key value in every row")
    if found:
        sample = keys_text(found[:SAMPLE], keys)
        raise RepeatedKeysError(
            f"model {model}: unique_key {list(keys)} repeats in its result: key(s) {sample} are held by more than "
            "one row; a keyed model on a branch needs one row per key (fix the model's SQL or its unique_key)",
            sample,
        )


def _same_layout(result: DataFrame, parent: DataFrame) -> bool:
    # Same column names (case-insensitive) with the same types: the view can then union the two row sets.
    ours = {f.name.lower(): f.dataType for f in result.schema.fields}
    theirs = {f.name.lower(): f.dataType for f in parent.schema.fields}
    return ours.keys() == theirs.keys() and all(same_types(t, theirs[c]) for c, t in ours.items())


def _diff_against_parent(result: DataFrame, parent: DataFrame, keys: Sequence[str], seq: int, *,
                         keep_missing: bool = False) -> DataFrame:
    """Rows of ``result`` that are new or changed ('U') plus parent keys missing from it ('D', unless
    ``keep_missing``): one full outer join.

    ``result`` holds one row per key (:func:`_refuse_bad_keys`). A key the parent holds more than once is joined
    once (its first copy) and counts as changed, so that the branch shows the result's one row for it, not the
    parent's copies. No deduplication of the output: grouping values turns ``-0.0`` into ``0.0``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = result.columns
    parent_names = {c.lower(): c for c in parent.columns}
    key_positions = [columns.index(k) for k in keys]
    types = {f.name: f.dataType for f in result.schema.fields}
    r = result.select([F.col(quote(c)).alias(f"r{i}") for i, c in enumerate(columns)] + [F.lit(True).alias("_r")])
    per_key = Window.partitionBy(*[F.col(quote(parent_names[k.lower()])) for k in keys])
    p = (
        parent.select(
            [F.col(quote(parent_names[c.lower()])).alias(f"p{i}") for i, c in enumerate(columns)]
            + [F.lit(True).alias("_p")]
            + [F.count(F.lit(1)).over(per_key).alias("_pn"),
               F.row_number().over(per_key.orderBy(F.monotonically_increasing_id())).alias("_pr")]
        )
        .where(F.col("_pr") == 1)
    )
    joined = r.join(p, on=same_key([F.col(f"r{i}") for i in key_positions], [F.col(f"p{i}") for i in key_positions]),
                    how="full_outer")
    in_result, in_parent = F.col("_r").isNotNull(), F.col("_p").isNotNull()
    unchanged = (F.col("_pn") == 1) & all_of(
        [same_value(F.col(f"r{i}"), F.col(f"p{i}"), types[c]) for i, c in enumerate(columns) if i not in key_positions]
    )
    changed = (in_result & (~in_parent | ~unchanged)) | (F.lit(not keep_missing) & in_parent & ~in_result)
    out = [
        (F.when(in_result, F.col(f"r{i}")).otherwise(F.col(f"p{i}")) if i in key_positions else F.col(f"r{i}")).alias(c)
        for i, c in enumerate(columns)
    ]
    op = F.when(in_result, F.lit(OP_UPSERT)).otherwise(F.lit(OP_DELETE)).alias(OP_COLUMN)
    return joined.where(changed).select(out + [op]).withColumn(SEQ_COLUMN, F.lit(seq).cast("bigint"))


def _with_history(result: DataFrame, parent: DataFrame) -> DataFrame:
    """The parent's rows plus the rows of ``result`` the parent does not hold, counted with repeats: what an
    incremental model without ``unique_key`` holds after a run on the parent that appends what its sources gained.
    ``result`` is the model's full result (on a branch ``is_incremental()`` is false), so its rows the parent already
    holds are not appended twice. Rows are matched on values as Spark compares them (``-0.0`` equals ``0.0``, NaN
    equals NaN; values holding maps by their text, entries sorted by key: ``value_text``), but stored as they
    were: no grouping, which would turn ``-0.0`` into ``0.0``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = result.columns
    names = {c.lower(): c for c in parent.columns}
    theirs = parent.select([F.col(quote(names[c.lower()])).alias(c) for c in columns])

    def numbered(frame: DataFrame, prefix: str) -> DataFrame:
        # the n-th copy of a row in one frame matches the n-th copy in the other
        values = [value_text(F.col(quote(f.name)), f.dataType) if holds_map(f.dataType) else F.col(quote(f.name))
                  for f in frame.schema.fields]
        copy = F.row_number().over(Window.partitionBy(*values).orderBy(F.monotonically_increasing_id()))
        return frame.select(*[F.col(quote(c)) for c in columns], *[v.alias(f"{prefix}{i}") for i, v in
                                                                   enumerate(values)], copy.alias(f"{prefix}n"))

    ours = numbered(result, "_pcow_r")
    parents = numbered(theirs, "_pcow_p").select(*[f"_pcow_p{i}" for i in range(len(columns))], "_pcow_pn")
    on = [F.col(f"_pcow_r{i}").eqNullSafe(F.col(f"_pcow_p{i}")) for i in range(len(columns))]
    appended = ours.join(parents, on=[*on, F.col("_pcow_rn") == F.col("_pcow_pn")], how="left_anti")
    return theirs.unionByName(appended.select(*[F.col(quote(c)) for c in columns]))


def refresh_history(spark: SparkSession, info: OverlayInfo, parent: tuple[str, str] | None) -> bool:
    """Bring what ``parent`` appended since the branch's build into the overlay of a model that keeps its history
    (:func:`_with_history`: the parent's rows as they are now plus the overlay's rows it lacks); returns whether
    it did. Such an overlay holds every row the branch shows (it is detached), the parent's as of the build
    included, so re-pinning the view alone never showed the parent's later appends. Rows the parent dropped since
    stay on the branch, as rows only it holds."""
    from pyspark.sql import functions as F

    if not info.keeps_history or info.mode != "detached" or parent is None:
        return False
    table = qualified(info.schema, overlay_table(info.identifier))
    snapshot = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").collect()
    # read as of its current snapshot: the rewrite below replaces the table it reads
    overlay = spark.read.option("snapshot-id", snapshot[0][0]).table(table) if snapshot else spark.table(table)
    rows = overlay.select(*[quote(c) for c in info.columns])
    parent_frame = spark.table(qualified(*parent))
    if not _same_layout(rows, parent_frame):
        return False
    seq = overlay.agg(F.max(SEQ_COLUMN)).collect()[0][0] or time.time_ns() // 1_000_000
    frame = _with_history(rows, parent_frame).select(
        *[F.col(quote(c)) for c in info.columns],
        F.lit(OP_UPSERT).alias(OP_COLUMN), F.lit(seq).cast("bigint").alias(SEQ_COLUMN))
    write_overlay(spark, frame, schema=info.schema, identifier=info.identifier, key_columns=(), mode="detached",
                  keeps_history=True)
    return True


def count_ops(spark: SparkSession, table: str) -> tuple[int, int]:
    """(upserted rows, tombstones) of an overlay table."""
    counts = {r[0]: r[1] for r in spark.sql(f"SELECT {OP_COLUMN}, count(*) FROM {table} GROUP BY 1").collect()}
    return counts.get(OP_UPSERT, 0), counts.get(OP_DELETE, 0)


def build_model(
    spark: SparkSession,
    result: DataFrame,
    *,
    branch: str,
    base_schema: str,
    identifier: str,
    key_columns: Sequence[str],
    meta_schema: str,
    keep_missing: bool = False,
) -> BuildSummary:
    """Store ``result`` (the model's full new content) on ``branch`` as an overlay and (re)create the branch view.

    ``keep_missing``: a parent key missing from ``result`` keeps the parent's row instead of becoming a tombstone
    (an incremental model: on the parent its runs upsert and never delete, so rows the source no longer has stay).
    Without ``key_columns`` (the model's runs append), the branch shows the parent's rows plus those of ``result``
    the parent lacks, and ``branch_merge`` leaves the parent's rows, its history, as they are.

    A build that fails leaves the branch showing what it showed: dbt-spark's table materialization drops the
    model's relation before building it (dbt lists a branch's image table as a view), so a build refused for its
    keys published the relation again from the unchanged overlay; otherwise ``ref()`` fell back to the parent
    while the overlay still held the branch's changes.

    >>> build_model(spark, spark.sql("select 1 as id, 'x' as v"), branch="dev", base_schema="shop",
    ...             identifier="items", key_columns=["id"], meta_schema="shop").upserts   # doctest: +SKIP
    1
    """
    store = BranchStore(spark, meta_schema=meta_schema)
    try:
        return _build_model(spark, result, store=store, branch=branch, base_schema=base_schema,
                            identifier=identifier, key_columns=key_columns, keep_missing=keep_missing)
    except Exception:
        schema = overlay_schema(base_schema, branch)
        if table_exists(spark, schema, overlay_table(identifier)) and not table_exists(spark, schema, identifier):
            with contextlib.suppress(Exception):  # the build's own error is the one to report
                create_branch_view(spark, store=store, branch=branch, base_schema=base_schema, identifier=identifier)
        raise


def _build_model(spark: SparkSession, result: DataFrame, *, store: BranchStore, branch: str, base_schema: str,
                 identifier: str, key_columns: Sequence[str], keep_missing: bool = False) -> BuildSummary:
    from pyspark.sql import functions as F

    levels = store.chain(branch)
    model = f"{base_schema}.{identifier}"
    schema = overlay_schema(base_schema, branch)
    seq = time.time_ns() // 1_000_000
    parent = resolve_parent(spark, levels[1:], base_schema, identifier)
    parent_frame = None if parent is None else spark.table(qualified(*parent))
    # an incremental model without keys appends: the parent's rows are its history (see _with_history)
    keeps_history = keep_missing and not key_columns and parent_frame is not None
    if key_columns and parent_frame is not None and _same_layout(result, parent_frame):
        keys = _match_keys(model, result.columns, key_columns)
        _refuse_bad_keys(model, result, keys, nulls=True)
        frame = _diff_against_parent(result, parent_frame, keys, seq, keep_missing=keep_missing)
        mode: OverlayMode = "delta"
    else:
        keys = _match_keys(model, result.columns, key_columns) if key_columns else ()
        if keys:
            _refuse_bad_keys(model, result, keys, nulls=False)
        shown = result
        if keeps_history and parent_frame is not None and _same_layout(result, parent_frame):
            shown = _with_history(result, parent_frame)
        frame = shown.select(
            [F.col(quote(c)) for c in result.columns]
            + [F.lit(OP_UPSERT).alias(OP_COLUMN), F.lit(seq).cast("bigint").alias(SEQ_COLUMN)]
        )
        mode = "detached"
    write_overlay(spark, frame, schema=schema, identifier=identifier, key_columns=keys, mode=mode,
                  keeps_history=keeps_history)
    if mode == "delta":
        capture_base(
            spark,
            store=store,
            branch=branch,
            base_schema=base_schema,
            identifier=identifier,
            columns=result.columns,
            key_columns=keys,
            keys_frame=spark.table(qualified(schema, overlay_table(identifier))),
        )
    if table_exists(spark, schema, full_table(identifier)):
        # a materialized model keeps its collapsed table in step with the newest build
        shown = result if mode == "delta" else spark.table(qualified(schema, overlay_table(identifier))).select(
            *[quote(c) for c in result.columns])
        shown.writeTo(f"{schema}.{full_table(identifier)}").using("iceberg").createOrReplace()
    upserts, tombstones = count_ops(spark, qualified(schema, overlay_table(identifier)))
    image = create_branch_view(spark, store=store, branch=branch, base_schema=base_schema, identifier=identifier)
    behind = refresh_descendant_views(spark, store=store, branch=branch, base_schema=base_schema, identifier=identifier)
    return BuildSummary(
        branch=branch,
        model=model,
        mode=mode,
        parent=None if parent is None else ".".join(parent),
        upserts=upserts,
        tombstones=tombstones,
        image=image,
        behind=behind,
    )


def view_sql(
    info: OverlayInfo, parent: tuple[str, str] | None, *, materialized: bool, source: str | None = None
) -> str:
    """The SELECT of a branch view (see the module docstring for the forms); ``source``: one relation that already
    holds the branch's rows (the model's image, or the parent when the overlay is empty)."""
    cols = ", ".join(quote(c) for c in info.columns)
    if materialized:
        return f"SELECT {cols} FROM {qualified(info.schema, full_table(info.identifier))}"
    if source is not None:
        return f"SELECT {cols} FROM {source}"
    upserts = f"SELECT {cols} FROM {info.table} WHERE {OP_COLUMN} = '{OP_UPSERT}'"
    if info.mode == "detached" or parent is None:
        return upserts
    parent_cols = ", ".join(f"p.{quote(c)}" for c in info.columns)
    on = same_key_sql(info.key_columns, "p", "o")
    return (
        f"{upserts}\nUNION ALL\nSELECT {parent_cols} FROM {qualified(*parent)} p LEFT ANTI JOIN {info.table} o ON {on}"
    )


def create_branch_view(spark: SparkSession, *, store: BranchStore, branch: str, base_schema: str,
                       identifier: str) -> ImageReport | None:
    """(Re)create what readers of ``identifier`` on ``branch`` query (no-op without an overlay): the model's image
    table when it has an image (see :func:`~partialcow.branch.image.publish_image_table`), else the branch view;
    returns what the image build wrote, None when there is no image."""
    schema = overlay_schema(base_schema, branch)
    info = overlay_info(spark, schema, identifier)
    if info is None:
        return None
    # every path that gives a branch an overlay (a build, an incremental model's first batch, a child's merge into
    # it) ends here: the branch's record covers the overlay's schema from now on, so its operations find the model
    store.cover(branch, base_schema)
    branches = {record.name: record for record in store.all()}
    levels = store.chain(branch, branches)
    above = parent_level(spark, levels[1:], base_schema, identifier)
    parent = None if above is None else (overlay_schema(base_schema, above), identifier)
    materialized = table_exists(spark, schema, full_table(identifier))
    source, image = None, None
    if not materialized and parent is not None:
        # before anything is dropped: a parent that lost one of the model's columns cannot be read through, and the
        # branch keeps showing what it shows until the model is built on it again (ref() must never fall back to
        # the parent's table while the overlay holds the branch's changes)
        _require_readable(spark, view_sql(info, parent, materialized=False), branch, base_schema, identifier,
                          ".".join(parent))
    # parent is None exactly when above is: testing both narrows both names for the type checker
    if materialized or parent is None or above is None:
        drop_image(spark, base_schema, identifier, branch)
    else:
        try:
            start = fork_level(spark, levels[1:], base_schema, identifier) or above
            image = refresh_image(spark, info=info, branch=branch, parent_level=start, base_schema=base_schema,
                                  identifier=identifier, mode=branches[branch].image_mode)
        except Exception as exc:  # noqa: BLE001 - the view over the live parent shows the same rows, only slower
            _LOG.warning("model %s.%s on branch %s: its image was not built (%s); it is read through the view over "
                         "its parent, and the next build tries again", base_schema, identifier, branch,
                         str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            drop_image(spark, base_schema, identifier, branch)
        if image is not None:
            root_columns = [c.lower() for c in spark.table(qualified(base_schema, identifier)).columns]
            if root_columns == [c.lower() for c in info.columns]:
                publish_image_table(spark, schema=schema, base_schema=base_schema, identifier=identifier,
                                    branch=branch)
                return image
            source = image_relation(base_schema, identifier, branch)  # same columns, another order: a view
        elif info.mode == "delta" and holds_no_rows(spark, schema, overlay_table(identifier)):
            source = qualified(*parent)  # nothing changed on the branch: the parent as it is, no join
    sql = view_sql(info, parent, materialized=materialized, source=source)
    unreadable = hive_unreadable_columns(spark, sql)
    # Not CREATE OR REPLACE: through Iceberg's SparkSessionCatalog on a Hive metastore, replacing an Iceberg
    # view keeps the old SQL text in the metastore, which is what reads use (Iceberg 1.10, apache/iceberg#15490).
    drop_reader_relation(spark, schema, identifier)
    if unreadable and parent is not None and source == qualified(*parent):
        # the branch changed nothing: without a relation of its own, ref() and its children read the parent's
        _LOG.warning("model %s.%s on branch %s: no view over its parent (column(s) %s hold struct field names a "
                     "view cannot keep in the metastore); ref() on the branch reads %s", base_schema, identifier,
                     branch, unreadable, ".".join(parent))
        return image
    if unreadable:
        _LOG.warning("model %s.%s on branch %s: its view cannot be read (column(s) %s hold struct field names a view "
                     "cannot keep in the metastore)", base_schema, identifier, branch, unreadable)
    spark.sql(f"CREATE VIEW {qualified(schema, identifier)} AS\n{sql}")
    return image


def _require_readable(spark: SparkSession, sql: str, branch: str, base_schema: str, identifier: str,
                      parent: str) -> None:
    """Raise ``UnfollowableParentError`` when ``sql``, the model's view over its parent, does not analyse (no job
    runs)."""
    from pyspark.errors import AnalysisException

    try:
        spark.sql(sql).schema  # noqa: B018 - analysis is the check
    except AnalysisException as exc:
        reason = str(exc).strip().splitlines()[0]
        # an image pins the parent as of the model's last build; a view reads the parent live and fails with it
        shows = ("the branch still shows what it showed (its parent as of the model's last build there)"
                 if has_image(spark, base_schema, identifier, branch) else
                 "reads of the model on the branch fail until then")
        raise UnfollowableParentError(
            f"model {base_schema}.{identifier} on branch {branch} cannot be read over its parent {parent} as it is "
            f"now ({reason}). Build the model on the branch again (its columns changed on the parent); {shows}"
        ) from None


def follow_parent(spark: SparkSession, info: OverlayInfo, parent: tuple[str, str], *, store: BranchStore,
                  branch: str, refresh: bool = False) -> OverlayInfo:
    """Let the model's empty overlays on ``branch``'s ancestors, then on ``branch``, take the columns their parents
    have now (:func:`~partialcow.branch.levels.follow_parent_columns`); where an overlay's columns changed, publish
    what readers of the model there and on its descendants query again (the old view listed the old columns: a
    column renamed, dropped or widened by ``ALTER TABLE`` on the parent made reads of it fail). A materialized
    model is pinned until its next build or refresh: it follows at ``refresh`` only."""
    base_schema = base_schema_of(info.schema)
    _follow_chain(spark, store=store, levels=store.chain(branch)[1:], base_schema=base_schema,
                  identifier=info.identifier)
    materialized = table_exists(spark, info.schema, full_table(info.identifier))
    if materialized and not refresh:
        return info
    # a refresh rewrites a materialized table, then publishes it
    return _follow_level(spark, info, parent, store=store, branch=branch, publish=not materialized)


def _follow_chain(spark: SparkSession, *, store: BranchStore, levels: Sequence[str], base_schema: str,
                  identifier: str) -> None:
    """Let every empty, unmaterialized overlay of the model on the branch levels of ``levels`` (nearest first)
    take the columns its parent has now, the farthest first (a nearer level reads through it). One Iceberg table
    load per level when its overlay holds rows (a snapshot summary answers, no job)."""
    from partialcow.branch.naming import MAIN

    branches = [level for level in levels if level != MAIN]
    for level in reversed(branches):
        schema = overlay_schema(base_schema, level)
        loaded = load_iceberg(spark, schema, overlay_table(identifier))
        if loaded is None or not holds_no_rows(spark, schema, overlay_table(identifier), loaded=loaded):
            continue
        info = overlay_info(spark, schema, identifier)
        parent = resolve_parent(spark, levels[levels.index(level) + 1:], base_schema, identifier)
        if info is not None and parent is not None and not table_exists(spark, schema, full_table(identifier)):
            with _RESTORE_LOCK:
                _follow_level(spark, info, parent, store=store, branch=level)


def _follow_level(spark: SparkSession, info: OverlayInfo, parent: tuple[str, str], *, store: BranchStore,
                  branch: str, publish: bool = True) -> OverlayInfo:
    """:func:`~partialcow.branch.levels.follow_parent_columns` for the model on ``branch``; when its columns changed
    and ``publish``, what readers of it there and on the descendants query is published again."""
    followed, changed = follow_parent_columns(spark, info, parent)
    if changed and publish:
        base_schema = base_schema_of(info.schema)
        _LOG.info("model %s.%s on branch %s changes nothing and takes its parent's columns %s", base_schema,
                  info.identifier, branch, list(followed.columns))
        create_branch_view(spark, store=store, branch=branch, base_schema=base_schema, identifier=info.identifier)
        refresh_descendant_views(spark, store=store, branch=branch, base_schema=base_schema,
                                 identifier=info.identifier)
    return followed


def remove_model(spark: SparkSession, *, store: BranchStore, branch: str, base_schema: str, identifier: str,
                 descendants: bool = True) -> bool:
    """Take the model's rows off ``branch`` (it is a view there now, or the parent's drop of it was kept): what
    readers query, the image ref, the overlay, the base image and the materialized table go, and with
    ``descendants`` their views read their nearest ancestor again (not for a view about to replace the model: they
    keep what they pinned, and a live view of a descendant reads the new view by name). Returns whether the branch
    held rows of it (an overlay). Left in place, the overlay of a model made a view on the branch kept it in
    ``branch_diff`` and ``branch_merge``."""
    from partialcow.table.iceberg_create import purge_table

    schema = overlay_schema(base_schema, branch)
    if not table_exists(spark, schema, overlay_table(identifier)):
        return False
    drop_reader_relation(spark, schema, identifier)
    drop_image(spark, base_schema, identifier, branch)
    for table in (base_image_table(identifier), full_table(identifier), overlay_table(identifier)):
        purge_table(spark, schema, table)
    if descendants:
        refresh_descendant_views(spark, store=store, branch=branch, base_schema=base_schema, identifier=identifier)
    return True


def resolve_restoring(spark: SparkSession, *, store: BranchStore, levels: Sequence[str], base_schema: str,
                      identifier: str, follow: bool = True) -> tuple[str, str] | None:
    """:func:`~partialcow.branch.levels.resolve_parent` (where ``ref()`` reads on a branch, ``levels`` nearest
    first), after publishing again what readers query of the model on a nearer level that has the model's overlay
    but lost its relation (as ``branch_refresh`` would: against the parent as it is now). dbt's table
    materialization drops a branch model's relation before the build publishes it again: a process killed in
    between left the overlay without it, and ``ref()`` read the parent's rows, also into models built on the branch
    afterwards. One thread at a time republishes (dbt compiles models in threads).

    ``follow``: first let the model's empty overlays on the branch levels take the columns their parents have now
    (:func:`follow_parent`; one Iceberg table load per level that holds rows). dbt's adapter asks once per model and
    invocation."""
    from partialcow.branch.naming import MAIN

    if follow:
        _follow_chain(spark, store=store, levels=levels, base_schema=base_schema, identifier=identifier)
    found = resolve_parent(spark, levels, base_schema, identifier)
    for level in levels:
        schema = overlay_schema(base_schema, level)
        if level == MAIN or (found is not None and schema == found[0]):
            break
        if table_exists(spark, schema, overlay_table(identifier)):
            with _RESTORE_LOCK:
                if not table_exists(spark, schema, identifier):  # another thread may have just done it
                    from partialcow.branch.levels import shows_its_parent

                    if shows_its_parent(spark, schema, identifier):
                        continue  # the parent level's rows are the model's here (see create_branch_view)
                    _LOG.warning("model %s.%s on branch %s had lost its relation (a build stopped before "
                                 "publishing it): published again from its overlay", base_schema, identifier, level)
                    create_branch_view(spark, store=store, branch=level, base_schema=base_schema,
                                       identifier=identifier)
            return schema, identifier
    return found


def refresh_descendant_views(
    spark: SparkSession, *, store: BranchStore, branch: str, base_schema: str, identifier: str
) -> tuple[str, ...]:
    """Point descendants' views of the model at their nearest ancestor again (it may have just appeared).

    Called after ``branch``'s write committed: a descendant that cannot be read over the new parent (it keeps a
    column the parent lost) does not make that write fail. It keeps showing what it showed, its own operations are
    refused by name until the model is built on it again, and the returned messages (also logged) name it."""
    behind: list[str] = []
    pending = store.children(branch)
    while pending:
        child = pending.pop(0)
        try:
            create_branch_view(spark, store=store, branch=child, base_schema=base_schema, identifier=identifier)
        except UnfollowableParentError as exc:
            _LOG.warning("%s", exc)
            behind.append(str(exc))
        pending.extend(store.children(child))
    return tuple(behind)
