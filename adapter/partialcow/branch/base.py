"""Merge bases: the parent's snapshots a branch records, and the parent's rows at that base for each changed key.

A branch records ``schema.table -> snapshot id`` of every table in its models' parent chains when it is created or
merged, and of every parent branch's image of them (:func:`image_snapshots`): a parent branch with an image shows
its parent pinned as of its last build or refresh, not the parent's tables as they are. When a key enters a branch's
overlay, the parent's row for it at that base is kept in the base image ``<model>__pcow_base`` (the three-way merge
reads it, so it survives a parent table being replaced).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from partialcow.branch.catalog import iceberg_snapshot, list_tables, load_iceberg, table_exists
from partialcow.branch.frames import key_join, same_key, same_key_sql
from partialcow.branch.image import image_ref
from partialcow.branch.levels import chain_tables, overlay_info, resolve_parent
from partialcow.branch.naming import (
    MAIN,
    OP_COLUMN,
    OP_UPSERT,
    base_image_table,
    full_table,
    overlay_schema,
    overlay_table,
    qualified,
    quote,
)
from partialcow.branch.types import PRESENT_COLUMN, OverlayInfo

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from partialcow.branch.store import BranchStore

__all__ = [
    "capture_base",
    "chain_state",
    "current_snapshots",
    "image_key",
    "image_snapshots",
    "merge_base_sql",
    "record_snapshots",
    "recorded_snapshots",
    "recorded_state",
]


def image_key(base_schema: str, identifier: str, level: str) -> str:
    """The merge-base entry of branch ``level``'s image of a model: the name of what readers of the model on that
    branch query (the image table, whose snapshot is the image ref's).

    >>> image_key("shop", "Orders", "dev")
    'shop__br_dev.orders'
    """
    return f"{overlay_schema(base_schema, level)}.{identifier}".lower()


def image_snapshots(table: Any, base_schema: str, identifier: str, levels: Sequence[str]) -> dict[str, int]:
    """:func:`image_key` ``-> snapshot id`` of the image of every branch level in ``levels`` that has one; ``table``:
    the model's root table (Iceberg's Java ``Table``), or None.

    A parent branch's image is what it shows of the model: its own parent pinned as of its last build or refresh.
    So the image's snapshot, not the tables below it, is the merge base's content of that level; and a refresh,
    which changes what the branch shows without committing to any of those tables, commits a new image snapshot.
    """
    if table is None:
        return {}
    refs = table.refs()
    found: dict[str, int] = {}
    for level in levels:
        ref = None if level == MAIN else refs.get(image_ref(level))
        if ref is not None:
            found[image_key(base_schema, identifier, level)] = int(ref.snapshotId())
    return found


def chain_state(spark: SparkSession, base_schema: str, identifier: str, levels: Sequence[str]) -> dict[str, int]:
    """What makes up the model's content at ``levels`` (a parent chain) now: the snapshots of its chain's tables
    and of the branch levels' images; equal to :func:`recorded_state` exactly when nothing the parent shows of the
    model changed since the branch's base."""
    state = current_snapshots(spark, chain_tables(base_schema, identifier, levels))
    if any(level != MAIN for level in levels) and f"{base_schema}.{identifier}".lower() in state:
        state.update(image_snapshots(load_iceberg(spark, base_schema, identifier), base_schema, identifier, levels))
    return state


def recorded_state(
    base_snapshots: dict[str, int], base_schema: str, identifier: str, levels: Sequence[str]
) -> dict[str, int]:
    """The part of a branch's recorded merge base that :func:`chain_state` compares with.

    >>> recorded_state({"shop.orders": 7, "shop__br_dev.orders": 9, "shop.items": 3}, "shop", "orders",
    ...                ["dev", "main"])
    {'shop.orders': 7, 'shop__br_dev.orders': 9}
    """
    tables = recorded_snapshots(base_snapshots, chain_tables(base_schema, identifier, levels))
    images = {image_key(base_schema, identifier, level) for level in levels if level != MAIN}
    return {**tables, **{name: snap for name, snap in base_snapshots.items() if name in images}}


def record_snapshots(
    spark: SparkSession, models: Sequence[tuple[str, str]], levels: Sequence[str]
) -> dict[str, int]:
    """``schema.table -> snapshot id`` of every existing Iceberg table in the chains of ``models``, and of the images
    the branch levels of ``levels`` have of them (:func:`image_snapshots`)."""
    listed: dict[str, set[str]] = {}
    snapshots: dict[str, int] = {}
    nested = any(level != MAIN for level in levels)
    for base_schema, identifier in models:
        for schema, table in chain_tables(base_schema, identifier, levels):
            if schema not in listed:
                listed[schema] = set(list_tables(spark, schema))
            if table.lower() not in listed[schema]:
                continue
            snapshot = iceberg_snapshot(spark, schema, table)
            if snapshot is not None:
                snapshots[f"{schema}.{table}".lower()] = snapshot
        if nested and f"{base_schema}.{identifier}".lower() in snapshots:
            root = load_iceberg(spark, base_schema, identifier)
            snapshots.update(image_snapshots(root, base_schema, identifier, levels))
    return snapshots


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
    """The part of a branch's recorded merge base that concerns ``tables``.

    >>> recorded_snapshots({"shop.orders": 7, "shop.items": 9}, [("shop", "orders")])
    {'shop.orders': 7}
    """
    names = {f"{s}.{t}".lower() for s, t in tables}
    return {name: snap for name, snap in base_snapshots.items() if name in names}


def _at(schema: str, table: str, snapshot: int) -> str:
    return qualified(schema, table) + (f" VERSION AS OF {snapshot}" if snapshot >= 0 else "")


def merge_base_sql(
    spark: SparkSession, info: OverlayInfo, *, levels: Sequence[str], base_snapshots: dict[str, int], base_schema: str
) -> str | None:
    """SELECT of the model's parent content at the merge base (recorded snapshots), or None if it was empty.

    Rebuilds the parent chain from the bottom (root table, then each ancestor's overlay on top), every table read
    ``VERSION AS OF`` its recorded snapshot. A table recorded without a snapshot (``-1``) was empty. An ancestor
    recorded with an image showed that image (its parent pinned as of its build, not the tables below as they were
    at the base): the root table read ``VERSION AS OF`` the image's snapshot replaces the levels below it.
    """
    cols = ", ".join(quote(c) for c in info.columns)
    on = same_key_sql(info.key_columns, "p", "o")
    below: str | None = None
    for level in reversed(levels):
        schema = overlay_schema(base_schema, level)
        if level == MAIN:
            snap = base_snapshots.get(f"{schema}.{info.identifier}".lower())
            if snap is not None:
                below = f"SELECT {cols} FROM {_at(schema, info.identifier, snap)}" if snap >= 0 else None
            continue
        full = base_snapshots.get(f"{schema}.{full_table(info.identifier)}".lower())
        if full is not None:
            below = f"SELECT {cols} FROM {_at(schema, full_table(info.identifier), full)}" if full >= 0 else None
            continue
        image = base_snapshots.get(image_key(base_schema, info.identifier, level))
        if image is not None:
            below = f"SELECT {cols} FROM {_at(base_schema, info.identifier, image)}"
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

    While the parent chain (its tables and images) is unchanged since the branch's base, that is the parent's
    current row (no time travel). Otherwise it is read ``VERSION AS OF`` the recorded snapshots; if that history is
    gone (a parent table dropped and recreated), the base is stored as unknown and the merge reports such keys as
    conflicts unless both sides agree.
    """
    from pyspark.sql import functions as F

    record = store.require(branch)
    levels = store.chain(branch)
    schema = overlay_schema(base_schema, branch)
    image = f"{schema}.{base_image_table(identifier)}"
    keys = [quote(k) for k in key_columns]
    wanted = keys_frame.select(*keys).distinct()
    if table_exists(spark, schema, base_image_table(identifier)):
        wanted = key_join(wanted, spark.table(image), key_columns, "left_anti")
    source: DataFrame | None = None
    known = True
    if chain_state(spark, base_schema, identifier, levels[1:]) == recorded_state(
        record.base_snapshots, base_schema, identifier, levels[1:]
    ):
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
        marked = source.select(*[F.col(quote(c)).alias(f"_pcow_v{i}") for i, c in enumerate(columns)],
                               F.lit(True).alias("_found"))
        position = {c: i for i, c in enumerate(columns)}
        condition = same_key([wanted[k] for k in keys], [marked[f"_pcow_v{position[k]}"] for k in key_columns])
        rows = wanted.join(marked, condition, "left").select(
            *[wanted[quote(c)] if c in key_columns else F.col(f"_pcow_v{i}").alias(c) for i, c in enumerate(columns)],
            F.coalesce(F.col("_found"), F.lit(False)).alias(PRESENT_COLUMN),
        )
    writer = rows.writeTo(image)
    if table_exists(spark, schema, base_image_table(identifier)):
        writer.append()
    else:
        writer.using("iceberg").create()


def _types(frame: DataFrame, columns: Sequence[str]) -> list[tuple[str, str]]:
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    return [(c, types[c]) for c in columns]
