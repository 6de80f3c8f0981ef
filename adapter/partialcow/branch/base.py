"""Merge bases: the parent's snapshots a branch records, and the parent's rows at that base for each changed key.

A branch records ``schema.table -> snapshot id`` of every table in its models' parent chains when it is created or
merged. When a key enters a branch's overlay, the parent's row for it at that base is kept in the base image
``<model>__pcow_base`` (the three-way merge reads it, so it survives a parent table being replaced).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from partialcow.branch.catalog import iceberg_snapshot, list_tables, table_exists
from partialcow.branch.frames import key_join, same_key, same_key_sql
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

__all__ = ["capture_base", "current_snapshots", "merge_base_sql", "record_snapshots", "recorded_snapshots"]


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
    ``VERSION AS OF`` its recorded snapshot. A table recorded without a snapshot (``-1``) was empty.
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

    While the parent chain is unchanged since the branch's base, that is the parent's current row (no time
    travel). Otherwise it is read ``VERSION AS OF`` the recorded snapshots; if that history is gone (a parent table
    dropped and recreated), the base is stored as unknown and the merge reports such keys as conflicts unless
    both sides agree.
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
