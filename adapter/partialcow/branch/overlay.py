"""Overlay tables and branch views: building a model on a branch, resolving parents, reconstructing merge bases.

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
    SELECT p.cols FROM parent p LEFT ANTI JOIN overlay o ON p.key = o.key

Models without ``unique_key``, and models whose columns differ from the parent's, are *detached*: the overlay holds
the whole result and the view reads the overlay only.
"""

from __future__ import annotations

import functools
import operator
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence

from partialcow.branch.catalog import iceberg_snapshot, list_tables, table_exists
from partialcow.branch.image import (
    ImageReport,
    drop_image,
    drop_reader_relation,
    image_relation,
    publish_image_table,
    refresh_image,
)
from partialcow.branch.naming import (
    MAIN,
    base_schema_of,
    OP_COLUMN,
    OP_DELETE,
    OP_UPSERT,
    SEQ_COLUMN,
    base_image_table,
    full_table,
    overlay_schema,
    overlay_table,
    qualified,
    quote,
)
from partialcow.branch.store import BranchStore
from partialcow.exceptions import BranchError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "OverlayMode",
    "OverlayInfo",
    "BuildSummary",
    "build_model",
    "overlay_info",
    "resolve_parent",
    "create_branch_view",
    "refresh_descendant_views",
    "chain_tables",
    "record_snapshots",
    "merge_base_sql",
    "branch_models",
    "write_overlay",
    "view_sql",
    "current_snapshots",
    "capture_base",
    "PRESENT_COLUMN",
]

#: In a base image: True = the parent had the key at the merge base, False = it did not, NULL = unknown.
PRESENT_COLUMN = "_pcow_present"

OverlayMode = Literal["delta", "detached"]

_PROP_KEYS = "partialcow.branch.key_columns"
_PROP_MODE = "partialcow.branch.mode"
_OVERLAY_SUFFIX = "__pcow_overlay"


@dataclass(frozen=True)
class OverlayInfo:
    """What an overlay table stores: its data columns (without ``_pcow_*``), key columns and mode."""

    schema: str
    identifier: str
    columns: tuple[str, ...]
    key_columns: tuple[str, ...]
    mode: OverlayMode

    @property
    def table(self) -> str:
        return qualified(self.schema, overlay_table(self.identifier))


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

    def describe(self) -> str:
        source = f"over {self.parent}" if self.parent and self.mode == "delta" else "detached (whole result)"
        image = self.image.describe() if self.image else "no image"
        return (
            f"branch {self.branch}: {self.model} overlay {source}: {self.upserts} upserted rows, "
            f"{self.tombstones} tombstones; {image}"
        )


def _level_schema(base_schema: str, level: str) -> str:
    return overlay_schema(base_schema, level)


def _parent_level(spark: SparkSession, levels: Sequence[str], base_schema: str, identifier: str) -> str | None:
    for level in levels:
        if table_exists(spark, _level_schema(base_schema, level), identifier):
            return level
    return None


def resolve_parent(
    spark: SparkSession, levels: Sequence[str], base_schema: str, identifier: str
) -> tuple[str, str] | None:
    """The first level in ``levels`` (a parent chain, nearest first) that has the model, as ``(schema, name)``."""
    level = _parent_level(spark, levels, base_schema, identifier)
    return None if level is None else (_level_schema(base_schema, level), identifier)


def overlay_info(spark: SparkSession, schema: str, identifier: str) -> OverlayInfo | None:
    """Read an overlay table's layout from its schema and table properties; None if it does not exist."""
    name = overlay_table(identifier)
    if not table_exists(spark, schema, name):
        return None
    table = qualified(schema, name)
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    columns = tuple(c for c in spark.table(table).columns if c not in (OP_COLUMN, SEQ_COLUMN))
    keys = tuple(k for k in props.get(_PROP_KEYS, "").split(",") if k)
    mode: OverlayMode = "delta" if props.get(_PROP_MODE) == "delta" else "detached"
    return OverlayInfo(schema=schema, identifier=identifier, columns=columns, key_columns=keys, mode=mode)


def _match_keys(model: str, columns: Sequence[str], key_columns: Sequence[str]) -> tuple[str, ...]:
    by_lower = {c.lower(): c for c in columns}
    missing = [k for k in key_columns if k.lower() not in by_lower]
    if missing:
        raise BranchError(
            f"model {model}: unique_key column(s) {', '.join(missing)} are not in its result "
            f"(columns: {', '.join(columns)}); fix the model's unique_key config"
        )
    return tuple(by_lower[k.lower()] for k in key_columns)


def _refuse_null_keys(model: str, result: DataFrame, keys: Sequence[str]) -> None:
    """A null key matches no parent row: it would show up twice in the view and could never be merged."""
    from pyspark.sql import functions as F

    any_null = functools.reduce(operator.or_, [F.col(quote(k)).isNull() for k in keys])
    sample = result.where(any_null).select(*[quote(k) for k in keys]).limit(1).collect()
    if sample:
        key = next(k for k, value in zip(keys, sample[0]) if value is None)
        raise BranchError(f"model {model}: unique_key column {key} is null in some rows of its result, e.g. "
                          f"{dict(zip(keys, sample[0]))}; a keyed model needs a key value in every row")


def _same_layout(result: DataFrame, parent: DataFrame) -> bool:
    # Same column names (case-insensitive) with the same types: the view can then union the two row sets.
    ours = {f.name.lower(): f.dataType for f in result.schema.fields}
    theirs = {f.name.lower(): f.dataType for f in parent.schema.fields}
    return ours == theirs


def _and(conditions: Sequence[Column]) -> Column:
    from pyspark.sql import functions as F

    return functools.reduce(operator.and_, conditions) if conditions else F.lit(True)


def _diff_against_parent(result: DataFrame, parent: DataFrame, keys: Sequence[str], seq: int) -> DataFrame:
    """Rows of ``result`` that are new or changed ('U') plus parent keys missing from it ('D'): one full outer join."""
    from pyspark.sql import functions as F

    columns = result.columns
    parent_names = {c.lower(): c for c in parent.columns}
    key_positions = [columns.index(k) for k in keys]
    r = result.select([F.col(quote(c)).alias(f"r{i}") for i, c in enumerate(columns)] + [F.lit(True).alias("_r")])
    p = parent.select(
        [F.col(quote(parent_names[c.lower()])).alias(f"p{i}") for i, c in enumerate(columns)] + [F.lit(True).alias("_p")]
    )
    joined = r.join(p, on=_and([F.col(f"r{i}") == F.col(f"p{i}") for i in key_positions]), how="full_outer")
    in_result, in_parent = F.col("_r").isNotNull(), F.col("_p").isNotNull()
    unchanged = _and(
        [F.col(f"r{i}").eqNullSafe(F.col(f"p{i}")) for i in range(len(columns)) if i not in key_positions]
    )
    changed = (in_result & (~in_parent | ~unchanged)) | (in_parent & ~in_result)
    out = [
        (F.when(in_result, F.col(f"r{i}")).otherwise(F.col(f"p{i}")) if i in key_positions else F.col(f"r{i}")).alias(c)
        for i, c in enumerate(columns)
    ]
    op = F.when(in_result, F.lit(OP_UPSERT)).otherwise(F.lit(OP_DELETE)).alias(OP_COLUMN)
    # a key the parent holds more than once joins once per copy: one overlay row for it, not one per copy
    return joined.where(changed).select(out + [op]).dropDuplicates().withColumn(
        SEQ_COLUMN, F.lit(seq).cast("bigint")
    )


def write_overlay(
    spark: SparkSession,
    frame: DataFrame,
    *,
    schema: str,
    identifier: str,
    key_columns: Sequence[str],
    mode: OverlayMode,
) -> None:
    """(Re)write the overlay table of ``identifier`` in ``schema`` from ``frame`` (data columns + ``_pcow_*``).

    ``CREATE OR REPLACE`` keeps the table's snapshot history, so child branches can still time-travel to it.
    """
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
    (
        frame.writeTo(f"{schema}.{overlay_table(identifier)}")
        .using("iceberg")
        .tableProperty(_PROP_KEYS, ",".join(key_columns))
        .tableProperty(_PROP_MODE, mode)
        .createOrReplace()
    )


def _count_ops(spark: SparkSession, table: str) -> tuple[int, int]:
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
) -> BuildSummary:
    """Store ``result`` (the model's full new content) on ``branch`` as an overlay and (re)create the branch view.

    >>> build_model(spark, spark.sql("select 1 as id, 'x' as v"), branch="dev", base_schema="shop",
    ...             identifier="items", key_columns=["id"], meta_schema="shop").upserts   # doctest: +SKIP
    1
    """
    from pyspark.sql import functions as F

    store = BranchStore(spark, meta_schema=meta_schema)
    levels = store.chain(branch)
    model = f"{base_schema}.{identifier}"
    schema = _level_schema(base_schema, branch)
    seq = time.time_ns() // 1_000_000
    parent = resolve_parent(spark, levels[1:], base_schema, identifier)
    parent_frame = None if parent is None else spark.table(qualified(*parent))
    if key_columns and parent_frame is not None and _same_layout(result, parent_frame):
        keys = _match_keys(model, result.columns, key_columns)
        _refuse_null_keys(model, result, keys)
        frame = _diff_against_parent(result, parent_frame, keys, seq)
        mode: OverlayMode = "delta"
    else:
        keys = _match_keys(model, result.columns, key_columns) if key_columns else ()
        frame = result.select(
            [F.col(quote(c)) for c in result.columns]
            + [F.lit(OP_UPSERT).alias(OP_COLUMN), F.lit(seq).cast("bigint").alias(SEQ_COLUMN)]
        )
        mode = "detached"
    write_overlay(spark, frame, schema=schema, identifier=identifier, key_columns=keys, mode=mode)
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
        result.writeTo(f"{schema}.{full_table(identifier)}").using("iceberg").createOrReplace()
    upserts, tombstones = _count_ops(spark, qualified(schema, overlay_table(identifier)))
    image = create_branch_view(spark, store=store, branch=branch, base_schema=base_schema, identifier=identifier)
    refresh_descendant_views(spark, store=store, branch=branch, base_schema=base_schema, identifier=identifier)
    return BuildSummary(
        branch=branch,
        model=model,
        mode=mode,
        parent=None if parent is None else ".".join(parent),
        upserts=upserts,
        tombstones=tombstones,
        image=image,
    )


def view_sql(info: OverlayInfo, parent: tuple[str, str] | None, *, materialized: bool, source: str | None = None) -> str:
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
    on = " AND ".join(f"p.{quote(k)} = o.{quote(k)}" for k in info.key_columns)
    return f"{upserts}\nUNION ALL\nSELECT {parent_cols} FROM {qualified(*parent)} p LEFT ANTI JOIN {info.table} o ON {on}"


def create_branch_view(spark: SparkSession, *, store: BranchStore, branch: str, base_schema: str,
                       identifier: str) -> ImageReport | None:
    """(Re)create what readers of ``identifier`` on ``branch`` query (no-op without an overlay): the model's image
    table when it has an image (see :func:`~partialcow.branch.image.publish_image_table`), else the branch view;
    returns what the image build wrote, None when there is no image."""
    schema = _level_schema(base_schema, branch)
    info = overlay_info(spark, schema, identifier)
    if info is None:
        return None
    branches = {record.name: record for record in store.all()}
    levels = store.chain(branch, branches)
    parent_level = _parent_level(spark, levels[1:], base_schema, identifier)
    parent = None if parent_level is None else (_level_schema(base_schema, parent_level), identifier)
    materialized = table_exists(spark, schema, full_table(identifier))
    source, image = None, None
    if materialized or parent is None:
        drop_image(spark, base_schema, identifier, branch)
    else:
        image = refresh_image(spark, info=info, branch=branch, parent_level=parent_level, base_schema=base_schema,
                              identifier=identifier, mode=branches[branch].image_mode)
        if image is not None:
            root_columns = [c.lower() for c in spark.table(qualified(base_schema, identifier)).columns]
            if root_columns == [c.lower() for c in info.columns]:
                publish_image_table(spark, schema=schema, base_schema=base_schema, identifier=identifier,
                                    branch=branch)
                return image
            source = image_relation(base_schema, identifier, branch)  # same columns, another order: a view
        elif info.mode == "delta" and spark.table(info.table).isEmpty():
            source = qualified(*parent)  # nothing changed on the branch: the parent as it is, no join
    # Not CREATE OR REPLACE: through Iceberg's SparkSessionCatalog on a Hive metastore, replacing an Iceberg
    # view keeps the old SQL text in the metastore, which is what reads use (Iceberg 1.10, apache/iceberg#15490).
    drop_reader_relation(spark, schema, identifier)
    spark.sql(
        f"CREATE VIEW {qualified(schema, identifier)} AS\n"
        f"{view_sql(info, parent, materialized=materialized, source=source)}"
    )
    return image


def refresh_descendant_views(
    spark: SparkSession, *, store: BranchStore, branch: str, base_schema: str, identifier: str
) -> None:
    """Point descendants' views of the model at their nearest ancestor again (it may have just appeared)."""
    pending = store.children(branch)
    while pending:
        child = pending.pop(0)
        create_branch_view(spark, store=store, branch=child, base_schema=base_schema, identifier=identifier)
        pending.extend(store.children(child))


def chain_tables(base_schema: str, identifier: str, levels: Sequence[str]) -> list[tuple[str, str]]:
    """Every table that can make up the model's content at ``levels``: overlays and full tables, then the root."""
    tables: list[tuple[str, str]] = []
    for level in levels:
        schema = _level_schema(base_schema, level)
        if level == MAIN:
            tables.append((schema, identifier))
        else:
            tables.extend([(schema, full_table(identifier)), (schema, overlay_table(identifier))])
    return tables


def record_snapshots(
    spark: SparkSession, models: Sequence[tuple[str, str]], levels: Sequence[str]
) -> dict[str, int]:
    """``schema.table -> snapshot id`` of every existing Iceberg table in the chains of ``models``."""
    listed: dict[str, set[str]] = {}
    snapshots: dict[str, int] = {}
    for base_schema, identifier in models:
        for schema, table in chain_tables(base_schema, identifier, levels):
            if schema not in listed:
                listed[schema] = set(list_tables(spark, schema))
            if table.lower() not in listed[schema]:
                continue
            snapshot = iceberg_snapshot(spark, schema, table)
            if snapshot is not None:
                snapshots[f"{schema}.{table}".lower()] = snapshot
    return snapshots


def _at(schema: str, table: str, snapshot: int) -> str:
    return qualified(schema, table) + (f" VERSION AS OF {snapshot}" if snapshot >= 0 else "")


def merge_base_sql(
    spark: SparkSession, info: OverlayInfo, *, levels: Sequence[str], base_snapshots: dict[str, int], base_schema: str
) -> str | None:
    """SELECT of the model's parent content at the merge base (recorded snapshots), or None if it was empty.

    Rebuilds the parent chain from the bottom (root table, then each ancestor's overlay on top), every table read
    ``VERSION AS OF`` its recorded snapshot. A table recorded without a snapshot (``-1``) was empty.
    """
    cols = ", ".join(quote(c) for c in info.columns)
    on = " AND ".join(f"p.{quote(k)} = o.{quote(k)}" for k in info.key_columns)
    below: str | None = None
    for level in reversed(levels):
        schema = _level_schema(base_schema, level)
        if level == MAIN:
            snap = base_snapshots.get(f"{schema}.{info.identifier}".lower())
            if snap is not None:
                below = f"SELECT {cols} FROM {_at(schema, info.identifier, snap)}" if snap >= 0 else None
            continue
        full = base_snapshots.get(f"{schema}.{full_table(info.identifier)}".lower())
        if full is not None:
            below = f"SELECT {cols} FROM {_at(schema, full_table(info.identifier), full)}" if full >= 0 else None
            continue
        snap = base_snapshots.get(f"{schema}.{overlay_table(info.identifier)}".lower())
        if snap is None:
            continue
        level_info = overlay_info(spark, schema, info.identifier)  # modes are not versioned: use today's
        overlay = _at(schema, overlay_table(info.identifier), snap)
        upserts = f"SELECT {cols} FROM {overlay} WHERE {OP_COLUMN} = '{OP_UPSERT}'" if snap >= 0 else None
        if level_info is None or level_info.mode == "detached" or below is None:
            below = upserts
        elif upserts is None:
            continue  # an empty overlay leaves the level below as it is
        else:
            parent_cols = ", ".join(f"p.{quote(c)}" for c in info.columns)
            below = f"{upserts} UNION ALL SELECT {parent_cols} FROM ({below}) p LEFT ANTI JOIN {overlay} o ON {on}"
    return below


def branch_models(spark: SparkSession, branch: str) -> list[OverlayInfo]:
    """Every model that has an overlay on ``branch``, across all overlay schemas of the branch."""
    found: list[OverlayInfo] = []
    for database in sorted(d.name for d in spark.catalog.listDatabases()):
        if database == base_schema_of(database) or overlay_schema(base_schema_of(database), branch) != database:
            continue
        for table in sorted(list_tables(spark, database)):
            if table.endswith(_OVERLAY_SUFFIX):
                info = overlay_info(spark, database, table[: -len(_OVERLAY_SUFFIX)])
                if info is not None:
                    found.append(info)
    return found


def current_snapshots(spark: SparkSession, tables: Sequence[tuple[str, str]]) -> dict[str, int]:
    """``schema.table -> snapshot id`` of those ``tables`` that exist as Iceberg tables now."""
    found: dict[str, int] = {}
    for schema, table in tables:
        if table_exists(spark, schema, table):
            snapshot = iceberg_snapshot(spark, schema, table)
            if snapshot is not None:
                found[f"{schema}.{table}".lower()] = snapshot
    return found


def recorded_snapshots(base_snapshots: dict[str, int], tables: Sequence[tuple[str, str]]) -> dict[str, int]:
    """The part of a branch's recorded merge base that concerns ``tables``."""
    names = {f"{s}.{t}".lower() for s, t in tables}
    return {name: snap for name, snap in base_snapshots.items() if name in names}


def capture_base(
    spark: SparkSession,
    *,
    store: BranchStore,
    branch: str,
    base_schema: str,
    identifier: str,
    columns: Sequence[str],
    key_columns: Sequence[str],
    keys_frame: DataFrame,
) -> None:
    """Add to the branch's base image the parent's merge-base row of every key of ``keys_frame`` not yet in it.

    While the parent chain is unchanged since the branch's base, that is the parent's current row (no time
    travel). Otherwise it is read ``VERSION AS OF`` the recorded snapshots; if that history is gone (a parent table
    dropped and recreated), the base is stored as unknown and the merge reports such keys as conflicts unless
    both sides agree.
    """
    from pyspark.sql import functions as F

    record = store.require(branch)
    levels = store.chain(branch)
    schema = _level_schema(base_schema, branch)
    image = f"{schema}.{base_image_table(identifier)}"
    keys = [quote(k) for k in key_columns]
    wanted = keys_frame.select(*keys).distinct()
    if table_exists(spark, schema, base_image_table(identifier)):
        wanted = wanted.join(spark.table(image).select(*keys), list(key_columns), "left_anti")
    tables = chain_tables(base_schema, identifier, levels[1:])
    source: DataFrame | None = None
    known = True
    if current_snapshots(spark, tables) == recorded_snapshots(record.base_snapshots, tables):
        parent = resolve_parent(spark, levels[1:], base_schema, identifier)
        source = None if parent is None else spark.table(qualified(*parent))
    else:
        info = OverlayInfo(schema=schema, identifier=identifier, columns=tuple(columns),
                           key_columns=tuple(key_columns), mode="delta")
        sql = merge_base_sql(spark, info, levels=levels[1:], base_snapshots=record.base_snapshots,
                             base_schema=base_schema)
        try:
            source = None if sql is None else spark.sql(sql)
        except Exception:  # noqa: BLE001 - history gone (snapshot expired, table recreated): base unknown
            known = False
    if source is None:
        rows = wanted.select(
            *[F.col(quote(c)) if c in key_columns else F.lit(None).alias(c) for c in columns],
            F.lit(False if known else None).cast("boolean").alias(PRESENT_COLUMN),
        )
        # untyped NULLs take the types of the result columns
        rows = rows.select(*[F.col(quote(c)).cast(t) for c, t in _types(keys_frame, columns)], PRESENT_COLUMN)
    else:
        marked = source.select(*[quote(c) for c in columns]).withColumn("_found", F.lit(True))
        rows = wanted.join(marked, list(key_columns), "left").select(
            *[quote(c) for c in columns], F.coalesce(F.col("_found"), F.lit(False)).alias(PRESENT_COLUMN)
        )
    writer = rows.writeTo(image)
    if table_exists(spark, schema, base_image_table(identifier)):
        writer.append()
    else:
        writer.using("iceberg").create()


def _types(frame: DataFrame, columns: Sequence[str]) -> list[tuple[str, str]]:
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    return [(c, types[c]) for c in columns]
