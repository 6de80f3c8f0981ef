"""Merge bases: the parent's snapshots a branch records, and the parent's rows at that base for each changed key.

A branch records ``schema.table -> snapshot id`` of every table in its models' parent chains when it is created or
merged, and of every parent branch's image of them (:func:`image_snapshots`): a parent branch with an image shows
its parent pinned as of its last build or refresh, not the parent's tables as they are. When a key enters a branch's
overlay, the parent's row for it at that base is kept in the base image ``<model>__pcow_base`` (the three-way merge
reads it, so it survives a parent table being replaced).

A base image belongs to the merge base it was captured against: its table property ``partialcow.base-snapshots``
holds the branch's recorded merge base of the model's parent chain at that time (:func:`recorded_state`: its
tables' snapshots and its parent branches' images). A merge moves the branch's base per model right after the
model's commit, then empties the overlay and drops the image; a merge stopped in between (a crash, a failure)
leaves an image of the old base behind, which :func:`stale_base_image` recognises: the next merge reads the model
three-way from that image (not as a fast-forward), and the next capture drops it and captures the overlay's keys
again at the base the branch records.

While a merge applies a model, its base image carries ``partialcow.merging`` (:func:`mark_merging`): the parent
chain's state (:func:`chain_state`) before the merge's commit and the rows it applies. A merge stopped there
(killed after its commit, before moving the branch's base) leaves it behind; :func:`settle_interrupted_merge` (the
next merge, the next capture) then gives each applied key the base the merge's commit made it, when the parent moved
since and holds the applied row, unknown when it holds another (the merge reports such a key as a conflict unless
both sides agree).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from partialcow.branch.catalog import iceberg_snapshot, iceberg_state, list_tables, load_iceberg, table_exists
from partialcow.branch.frames import _has_floats, holds_map, key_join, same_key, same_key_sql
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
from partialcow.spark.map_values import comparable_text_sql
from partialcow.table.iceberg_create import purge_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from partialcow.branch.store import BranchStore

__all__ = [
    "BASE_OF_PROPERTY",
    "MERGING_PROPERTY",
    "base_token",
    "capture_base",
    "chain_state",
    "current_snapshots",
    "image_key",
    "image_snapshots",
    "mark_merging",
    "merge_base_sql",
    "record_snapshots",
    "recorded_snapshots",
    "recorded_state",
    "schema_key",
    "schema_moved",
    "settle_interrupted_merge",
    "stale_base_image",
]

#: Suffix of the merge-base entries holding a chain table's schema id at the base (:func:`schema_key`).
SCHEMA_SUFFIX = "#schema"
#: Table property of a base image: the merge base (:func:`recorded_state` of the model's parent chain, as JSON) its
#: rows were captured against.
BASE_OF_PROPERTY = "partialcow.base-snapshots"
#: Table property of a base image while a merge applies the model (JSON): ``chain``, the parent chain's state
#: (:func:`chain_state`) before the merge's commit; ``applied``, the SELECT of the rows the merge applies (model
#: columns and ``_pcow_op``).
MERGING_PROPERTY = "partialcow.merging"


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
            state = iceberg_state(spark, schema, table)
            if state is not None:
                snapshots[f"{schema}.{table}".lower()], snapshots[schema_key(f"{schema}.{table}")] = state
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


def schema_key(name: str) -> str:
    """The merge-base entry holding the schema id ``schema.table`` had at the base (beside its snapshot id).

    >>> schema_key("Shop.Orders")
    'shop.orders#schema'
    """
    return f"{name}{SCHEMA_SUFFIX}".lower()


def schema_moved(
    spark: SparkSession, base_snapshots: dict[str, int], base_schema: str, identifier: str, levels: Sequence[str]
) -> list[str]:
    """The tables of the model's parent chain ``levels`` whose schema changed since the recorded merge base.

    ``ALTER TABLE`` (a column added, dropped, renamed or widened; also an incremental run that only adds a column)
    commits no snapshot, so the snapshot ids of :func:`chain_state` call such a parent unchanged, and a merge that
    replaces the parent's rows with the branch's columns would undo the change. A merge base recorded before schema
    ids were (no entry) falls back to the schema of the base snapshot, which also counts an ALTER made before the
    base (a conflict to resolve, never a lost column)."""
    moved = []
    recorded = recorded_snapshots(base_snapshots, chain_tables(base_schema, identifier, levels))
    for name, snapshot_id in recorded.items():
        schema, table = name.split(".", 1)
        loaded = load_iceberg(spark, schema, table)
        if loaded is None:
            continue  # no longer an Iceberg table: the snapshot ids tell
        at_base = base_snapshots.get(schema_key(name))
        if at_base is not None:
            if at_base != int(loaded.schema().schemaId()):
                moved.append(name)
        elif snapshot_id >= 0:  # an older record: the base snapshot's schema (unknown if it expired: moved)
            snapshot = loaded.snapshot(snapshot_id)
            old = None if snapshot is None or snapshot.schemaId() is None else loaded.schemas().get(snapshot.schemaId())
            if old is None or not old.sameSchema(loaded.schema()):
                moved.append(name)
    return moved


def recorded_snapshots(base_snapshots: dict[str, int], tables: Sequence[tuple[str, str]]) -> dict[str, int]:
    """The part of a branch's recorded merge base that concerns ``tables``.

    >>> recorded_snapshots({"shop.orders": 7, "shop.items": 9}, [("shop", "orders")])
    {'shop.orders': 7}
    """
    names = {f"{s}.{t}".lower() for s, t in tables}
    return {name: snap for name, snap in base_snapshots.items() if name in names}


def base_token(base_snapshots: dict[str, int], base_schema: str, identifier: str, levels: Sequence[str]) -> str:
    """The merge base recorded for the model's parent chain ``levels`` (:func:`recorded_state`: its tables and its
    parent branches' images) as text: what a base image is marked with.

    >>> base_token({"shop.orders": 7, "shop.items": 9, "shop__br_dev.orders": 4}, "shop", "orders", ["dev", "main"])
    '{"shop.orders": 7, "shop__br_dev.orders": 4}'
    """
    return json.dumps(recorded_state(base_snapshots, base_schema, identifier, levels), sort_keys=True)


def stale_base_image(
    spark: SparkSession, base_snapshots: dict[str, int], *, schema: str, identifier: str, base_schema: str,
    levels: Sequence[str],
) -> bool:
    """Whether the model's base image in ``schema`` was captured against another merge base than ``base_snapshots``
    (the branch's record) holds for the parent chain ``levels``: a merge moved the base and stopped before dropping
    the image. An image without the mark (captured before images were marked) counts as current."""
    loaded = load_iceberg(spark, schema, base_image_table(identifier))
    if loaded is None:
        return False
    token = loaded.properties().get(BASE_OF_PROPERTY)
    return token is not None and str(token) != base_token(base_snapshots, base_schema, identifier, levels)


def mark_merging(
    spark: SparkSession, *, schema: str, identifier: str, base_schema: str, levels: Sequence[str], applied_sql: str
) -> bool:
    """Mark the model's base image as being merged (see :data:`MERGING_PROPERTY`), before the merge's commit; False
    (nothing marked) when the model has no base image. ``levels``: the parent chain."""
    loaded = load_iceberg(spark, schema, base_image_table(identifier))
    if loaded is None:
        return False
    state = {"chain": chain_state(spark, base_schema, identifier, levels), "applied": applied_sql}
    loaded.updateProperties().set(MERGING_PROPERTY, json.dumps(state, sort_keys=True)).commit()
    return True


def _same_value_sql(a: str, b: str, data_type: Any) -> str:
    """:func:`partialcow.branch.frames.same_value` as SQL (``a``, ``b``: qualified columns)."""
    from pyspark.sql.types import DoubleType, FloatType

    if holds_map(data_type):
        return f"{comparable_text_sql(a, data_type)} <=> {comparable_text_sql(b, data_type)}"
    if not _has_floats(data_type):
        return f"{a} <=> {b}"
    if isinstance(data_type, (FloatType, DoubleType)):
        return f"({a} <=> {b} AND CAST({a} AS STRING) <=> CAST({b} AS STRING))"
    return f"({a} <=> {b} AND to_json(array({a})) <=> to_json(array({b})))"


def settle_interrupted_merge(
    spark: SparkSession,
    *,
    schema: str,
    identifier: str,
    columns: Sequence[str],
    key_columns: Sequence[str],
    base_schema: str,
    levels: Sequence[str],
    parent: tuple[str, str] | None,
) -> None:
    """Settle what a merge stopped during its commit left in the model's base image (see :func:`mark_merging`).

    Parent chain ``levels`` unchanged since the mark (:func:`chain_state`: its tables and its parent branches'
    images): the commit did not land, the image stays as it was. Otherwise, for each key the merge applied: the
    parent (``parent``, as it is now) holds the applied row, so the merge's commit is in it and the key's base is
    that row (absent for an applied delete the parent lacks); or it holds another (another writer changed it since),
    and the base is unknown. Without the applied rows (their staging table gone), every key's base is unknown. Then
    the mark is removed.
    """
    loaded = load_iceberg(spark, schema, base_image_table(identifier))
    raw = None if loaded is None else loaded.properties().get(MERGING_PROPERTY)
    if raw is None:
        return
    state = json.loads(str(raw))
    image = qualified(schema, base_image_table(identifier))
    if chain_state(spark, base_schema, identifier, levels) != state.get("chain"):
        values = [c for c in columns if c not in key_columns]
        types = {f.name: f.dataType for f in spark.table(image).schema.fields}
        same = " AND ".join([_same_value_sql(f"a.{quote(c)}", f"p.{quote(c)}", types[c]) for c in values] or ["TRUE"])
        upsert = f"a.{OP_COLUMN} = '{OP_UPSERT}' AND p._pcow_found IS NOT NULL AND {same}"
        gone = f"a.{OP_COLUMN} <> '{OP_UPSERT}' AND p._pcow_found IS NULL"
        cols = ", ".join(quote(c) for c in columns)
        parent_rows = (f"SELECT {cols}, TRUE AS _pcow_found FROM {qualified(*parent)}" if parent is not None else
                       f"SELECT {cols}, TRUE AS _pcow_found FROM {image} WHERE FALSE")
        rebased = (
            f"SELECT {', '.join(f'a.{quote(k)}' for k in key_columns)}"
            + "".join(f", CASE WHEN {upsert} THEN a.{quote(c)} END AS {quote(c)}" for c in values)
            + f", CASE WHEN {upsert} THEN TRUE WHEN {gone} THEN FALSE END AS {PRESENT_COLUMN} "
            f"FROM ({state.get('applied')}) a LEFT JOIN ({parent_rows}) p ON {same_key_sql(key_columns, 'a', 'p')}"
        )
        match = same_key_sql(key_columns, "t", "s")
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


def _columns_at(spark: SparkSession, schema: str, table: str, snapshot: int, columns: Sequence[str]) -> str:
    """The select list reading today's ``columns`` of ``schema.table`` at ``snapshot``.

    Iceberg reads a snapshot with the columns it had then: a column renamed since is read by its old name (the same
    field id), one dropped and added again by the name it had (what the table showed under it then), one added
    since reads null (what the table's rows written before it show). Columns the table does not have today keep
    their names (the read fails: a base that cannot be read is unknown)."""
    from partialcow.table.java import jvm

    plain = [quote(c) for c in columns]
    loaded = load_iceberg(spark, schema, table) if snapshot >= 0 else None
    if loaded is None:
        return ", ".join(plain)
    then = loaded.snapshot(snapshot)
    schema_id = None if then is None else then.schemaId()
    old = None if schema_id is None else loaded.schemas().get(schema_id)
    if old is None:
        return ", ".join(plain)
    now = loaded.schema().asStruct()
    to_spark = jvm(spark).org.apache.iceberg.spark.SparkSchemaUtil.convert
    selected = []
    for column, name in zip(columns, plain):
        field = now.caseInsensitiveField(column)
        was = None if field is None else old.asStruct().field(field.fieldId())
        if field is not None and was is None:
            # dropped and added again since (an overlay that followed its parent's retyped column): by name
            was = old.asStruct().caseInsensitiveField(column)
        if field is None or (was is not None and was.name() == field.name()):
            selected.append(name)
        elif was is None:
            selected.append(f"CAST(NULL AS {to_spark(field.type()).sql()}) AS {name}")
        else:
            selected.append(f"{quote(was.name())} AS {name}")
    return ", ".join(selected)


def merge_base_sql(
    spark: SparkSession, info: OverlayInfo, *, levels: Sequence[str], base_snapshots: dict[str, int], base_schema: str
) -> str | None:
    """SELECT of the model's parent content at the merge base (recorded snapshots), or None if it was empty.

    Rebuilds the parent chain from the bottom (root table, then each ancestor's overlay on top), every table read
    ``VERSION AS OF`` its recorded snapshot. A table recorded without a snapshot (``-1``) was empty. An ancestor
    recorded with an image showed that image (its parent pinned as of its build, not the tables below as they were
    at the base): the root table read ``VERSION AS OF`` the image's snapshot replaces the levels below it.
    """
    on = same_key_sql(info.key_columns, "p", "o")
    below: str | None = None
    for level in reversed(levels):
        schema = overlay_schema(base_schema, level)
        if level == MAIN:
            snap = base_snapshots.get(f"{schema}.{info.identifier}".lower())
            if snap is not None:
                below = (f"SELECT {_columns_at(spark, schema, info.identifier, snap, info.columns)} "
                         f"FROM {_at(schema, info.identifier, snap)}" if snap >= 0 else None)
            continue
        full = base_snapshots.get(f"{schema}.{full_table(info.identifier)}".lower())
        if full is not None:
            full_cols = _columns_at(spark, schema, full_table(info.identifier), full, info.columns)
            below = f"SELECT {full_cols} FROM {_at(schema, full_table(info.identifier), full)}" if full >= 0 else None
            continue
        image = base_snapshots.get(image_key(base_schema, info.identifier, level))
        if image is not None:
            image_cols = _columns_at(spark, base_schema, info.identifier, image, info.columns)
            below = f"SELECT {image_cols} FROM {_at(base_schema, info.identifier, image)}"
            continue
        snap = base_snapshots.get(f"{schema}.{overlay_table(info.identifier)}".lower())
        if snap is None:
            continue
        level_info = overlay_info(spark, schema, info.identifier)  # modes are not versioned: use today's
        overlay = _at(schema, overlay_table(info.identifier), snap)
        upserts = (f"SELECT {_columns_at(spark, schema, overlay_table(info.identifier), snap, info.columns)} "
                   f"FROM {overlay} WHERE {OP_COLUMN} = '{OP_UPSERT}'" if snap >= 0 else None)
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

    An image captured against an older merge base (a merge stopped after moving the branch's base, before dropping
    the image: see :func:`stale_base_image`), or with other columns than the model has now (a column added on both
    sides), is dropped first, and every key of the overlay captured again.
    """
    from pyspark.sql import functions as F

    # the keys as ``columns`` spell them: a child's merge passes its own spelling with the parent branch's columns
    spelled = {c.lower(): c for c in columns}
    key_columns = [spelled.get(k.lower(), k) for k in key_columns]
    record = store.require(branch)
    levels = store.chain(branch)
    schema = overlay_schema(base_schema, branch)
    image = f"{schema}.{base_image_table(identifier)}"
    keys = [quote(k) for k in key_columns]
    parent_levels = levels[1:]
    settle_interrupted_merge(spark, schema=schema, identifier=identifier, columns=columns, key_columns=key_columns,
                             base_schema=base_schema, levels=parent_levels,
                             parent=resolve_parent(spark, parent_levels, base_schema, identifier))
    wanted = keys_frame.select(*keys)
    if stale_base_image(spark, record.base_snapshots, schema=schema, identifier=identifier, base_schema=base_schema,
                        levels=parent_levels) or _other_columns(spark, image, columns):
        purge_table(spark, schema, base_image_table(identifier))
        if table_exists(spark, schema, overlay_table(identifier)):
            wanted = wanted.unionByName(spark.table(qualified(schema, overlay_table(identifier))).select(*keys))
    wanted = wanted.distinct()
    image_exists = table_exists(spark, schema, base_image_table(identifier))
    if image_exists:
        wanted = key_join(wanted, spark.table(image), key_columns, "left_anti")
    source: DataFrame | None = None
    known = True
    if chain_state(spark, base_schema, identifier, parent_levels) == recorded_state(
        record.base_snapshots, base_schema, identifier, parent_levels
    ):
        parent = resolve_parent(spark, parent_levels, base_schema, identifier)
        source = None if parent is None else spark.table(qualified(*parent))
    else:
        info = OverlayInfo(schema=schema, identifier=identifier, columns=tuple(columns),
                           key_columns=tuple(key_columns), mode="delta")
        sql = merge_base_sql(spark, info, levels=parent_levels, base_snapshots=record.base_snapshots,
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
    if image_exists:
        writer.append()
    else:
        writer.using("iceberg").tableProperty(
            BASE_OF_PROPERTY, base_token(record.base_snapshots, base_schema, identifier, parent_levels)).create()


def _other_columns(spark: SparkSession, image: str, columns: Sequence[str]) -> bool:
    """Whether the base image ``image`` exists with other columns than ``columns`` (keys entering the overlay could
    not be appended to it)."""
    schema, table = image.split(".", 1)
    if not table_exists(spark, schema, table):
        return False
    held = [c.lower() for c in spark.table(image).columns if c != PRESENT_COLUMN]
    return held != [c.lower() for c in columns]


def _types(frame: DataFrame, columns: Sequence[str]) -> list[tuple[str, str]]:
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    return [(c, types[c]) for c in columns]
