"""Merge bases: the parent's snapshots a branch records, and the parent's rows at that base for each changed key.

A branch records ``schema.table -> snapshot id`` of every table in its models' parent chains when it is created or
merged. When a key enters a branch's overlay, the parent's row for it at that base is kept in the base image
``<model>__pcow_base`` (the three-way merge reads it, so it survives a parent table being replaced).

A base image belongs to the merge base it was captured against: its table property ``partialcow.base-snapshots``
holds the branch's recorded snapshots of the model's parent chain at that time. A merge moves the branch's base per
model right after the model's commit, then empties the overlay and drops the image; a merge stopped in between
(a crash, a failure) leaves an image of the old base behind, which :func:`stale_base_image` recognises: the next
merge reads the model three-way from that image (not as a fast-forward), and the next capture drops it and captures
the overlay's keys again at the base the branch records.

While a merge applies a model, its base image carries ``partialcow.merging`` (:func:`mark_merging`): the parent
chain's snapshots before the merge's commit and the rows it applies. A merge stopped there (killed after its commit,
before moving the branch's base) leaves it behind; :func:`settle_interrupted_merge` (the next merge, the next
capture) then gives each applied key the base the merge's commit made it, when the parent moved since and holds the
applied row, unknown when it holds another (the merge reports such a key as a conflict unless both sides agree).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from partialcow.branch.catalog import iceberg_snapshot, list_tables, load_iceberg, table_exists
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
    "BASE_OF_PROPERTY",
    "MERGING_PROPERTY",
    "base_token",
    "capture_base",
    "current_snapshots",
    "mark_merging",
    "merge_base_sql",
    "record_snapshots",
    "recorded_snapshots",
    "settle_interrupted_merge",
    "stale_base_image",
]

#: Table property of a base image: the merge base (recorded snapshots of the model's parent chain, as JSON) its rows
#: were captured against.
BASE_OF_PROPERTY = "partialcow.base-snapshots"
#: Table property of a base image while a merge applies the model (JSON): ``chain``, the parent chain's snapshots
#: before the merge's commit; ``applied``, the SELECT of the rows the merge applies (model columns and ``_pcow_op``).
MERGING_PROPERTY = "partialcow.merging"


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


def base_token(base_snapshots: dict[str, int], tables: Sequence[tuple[str, str]]) -> str:
    """The merge base recorded for ``tables`` (a model's parent chain) as text: what a base image is marked with.

    >>> base_token({"shop.orders": 7, "shop.items": 9}, [("shop", "orders")])
    '{"shop.orders": 7}'
    """
    return json.dumps(recorded_snapshots(base_snapshots, tables), sort_keys=True)


def stale_base_image(
    spark: SparkSession, base_snapshots: dict[str, int], *, schema: str, identifier: str,
    tables: Sequence[tuple[str, str]],
) -> bool:
    """Whether the model's base image in ``schema`` was captured against another merge base than ``base_snapshots``
    (the branch's record) holds for ``tables``: a merge moved the base and stopped before dropping the image. An
    image without the mark (captured before images were marked) counts as current."""
    loaded = load_iceberg(spark, schema, base_image_table(identifier))
    if loaded is None:
        return False
    token = loaded.properties().get(BASE_OF_PROPERTY)
    return token is not None and str(token) != base_token(base_snapshots, tables)


def mark_merging(
    spark: SparkSession, *, schema: str, identifier: str, tables: Sequence[tuple[str, str]], applied_sql: str
) -> bool:
    """Mark the model's base image as being merged (see :data:`MERGING_PROPERTY`), before the merge's commit; False
    (nothing marked) when the model has no base image."""
    loaded = load_iceberg(spark, schema, base_image_table(identifier))
    if loaded is None:
        return False
    state = {"chain": current_snapshots(spark, tables), "applied": applied_sql}
    loaded.updateProperties().set(MERGING_PROPERTY, json.dumps(state, sort_keys=True)).commit()
    return True


def settle_interrupted_merge(
    spark: SparkSession,
    *,
    schema: str,
    identifier: str,
    columns: Sequence[str],
    key_columns: Sequence[str],
    tables: Sequence[tuple[str, str]],
    parent: tuple[str, str] | None,
) -> None:
    """Settle what a merge stopped during its commit left in the model's base image (see :func:`mark_merging`).

    Parent chain unchanged since the mark: the commit did not land, the image stays as it was. Otherwise, for each
    key the merge applied: the parent (``parent``, as it is now) holds the applied row, so the merge's commit is in
    it and the key's base is that row (absent for an applied delete the parent lacks); or it holds another (another
    writer changed it since), and the base is unknown. Without the applied rows (their staging table gone), every
    key's base is unknown. Then the mark is removed.
    """
    loaded = load_iceberg(spark, schema, base_image_table(identifier))
    raw = None if loaded is None else loaded.properties().get(MERGING_PROPERTY)
    if raw is None:
        return
    state = json.loads(str(raw))
    image = qualified(schema, base_image_table(identifier))
    if current_snapshots(spark, tables) != state.get("chain"):
        values = [c for c in columns if c not in key_columns]
        on = " AND ".join(f"a.{quote(k)} = p.{quote(k)}" for k in key_columns)
        same = " AND ".join([f"a.{quote(c)} <=> p.{quote(c)}" for c in values] or ["TRUE"])
        upsert = f"a.{OP_COLUMN} = '{OP_UPSERT}' AND p._pcow_found IS NOT NULL AND {same}"
        gone = f"a.{OP_COLUMN} <> '{OP_UPSERT}' AND p._pcow_found IS NULL"
        cols = ", ".join(quote(c) for c in columns)
        parent_rows = (f"SELECT {cols}, TRUE AS _pcow_found FROM {qualified(*parent)}" if parent is not None else
                       f"SELECT {cols}, TRUE AS _pcow_found FROM {image} WHERE FALSE")
        rebased = (
            f"SELECT {', '.join(f'a.{quote(k)}' for k in key_columns)}"
            + "".join(f", CASE WHEN {upsert} THEN a.{quote(c)} END AS {quote(c)}" for c in values)
            + f", CASE WHEN {upsert} THEN TRUE WHEN {gone} THEN FALSE END AS {PRESENT_COLUMN} "
            f"FROM ({state.get('applied')}) a LEFT JOIN ({parent_rows}) p ON {on}"
        )
        match = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key_columns)
        sets = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in [*values, PRESENT_COLUMN])
        try:
            spark.sql(f"MERGE INTO {image} t USING ({rebased}) s ON {match} WHEN MATCHED THEN UPDATE SET {sets}")
        except Exception:  # noqa: BLE001 - applied rows gone (or a key repeated): no key's base is known any more
            unknown = ", ".join(f"{quote(c)} = NULL" for c in [*values, PRESENT_COLUMN])
            spark.sql(f"UPDATE {image} SET {unknown}")
    loaded.refresh()
    loaded.updateProperties().remove(MERGING_PROPERTY).commit()


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

    An image captured against an older merge base (a merge stopped after moving the branch's base, before dropping
    the image: see :func:`stale_base_image`) is dropped first, and every key of the overlay captured again.
    """
    from pyspark.sql import functions as F

    record = store.require(branch)
    levels = store.chain(branch)
    schema = overlay_schema(base_schema, branch)
    image = f"{schema}.{base_image_table(identifier)}"
    keys = [quote(k) for k in key_columns]
    tables = chain_tables(base_schema, identifier, levels[1:])
    settle_interrupted_merge(spark, schema=schema, identifier=identifier, columns=columns, key_columns=key_columns,
                             tables=tables, parent=resolve_parent(spark, levels[1:], base_schema, identifier))
    wanted = keys_frame.select(*keys)
    if stale_base_image(spark, record.base_snapshots, schema=schema, identifier=identifier, tables=tables):
        spark.sql(f"DROP TABLE {qualified(schema, base_image_table(identifier))} PURGE")
        if table_exists(spark, schema, overlay_table(identifier)):
            wanted = wanted.unionByName(spark.table(qualified(schema, overlay_table(identifier))).select(*keys))
    wanted = wanted.distinct()
    image_exists = table_exists(spark, schema, base_image_table(identifier))
    if image_exists:
        wanted = wanted.join(spark.table(image).select(*keys), list(key_columns), "left_anti")
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
    if image_exists:
        writer.append()
    else:
        writer.using("iceberg").tableProperty(BASE_OF_PROPERTY, base_token(record.base_snapshots, tables)).create()


def _types(frame: DataFrame, columns: Sequence[str]) -> list[tuple[str, str]]:
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    return [(c, types[c]) for c in columns]
