"""Where a model lives on a branch chain: the levels that built it, its overlay tables and their layout.

A *level* is ``main`` (the tables built without a branch, in the base schema) or a branch (its overlay schema).
A model's parent on branch ``B`` is the nearest level above ``B`` that has the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from partialcow.branch.catalog import list_tables, table_exists
from partialcow.branch.naming import (
    MAIN,
    OP_COLUMN,
    SEQ_COLUMN,
    base_schema_of,
    full_table,
    model_of_overlay,
    overlay_schema,
    overlay_table,
    qualified,
    quote,
)
from partialcow.branch.types import OverlayInfo, OverlayMode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "branch_models",
    "chain_tables",
    "distinct_models",
    "follow_parent_columns",
    "overlay_info",
    "parent_level",
    "require_parent_columns",
    "resolve_parent",
    "shows_its_parent",
    "write_overlay",
]

_PROP_KEYS = "partialcow.branch.key_columns"
_PROP_MODE = "partialcow.branch.mode"
_PROP_HISTORY = "partialcow.branch.keeps_history"


def distinct_models(models: Sequence[Sequence[str]]) -> list[tuple[str, str]]:
    """Distinct ``(base schema, identifier)`` pairs, lower case; overlay schemas are mapped to their base.

    >>> distinct_models([("shop", "Orders"), ("shop__br_dev", "orders"), ("shop", "items")])
    [('shop', 'orders'), ('shop', 'items')]
    """
    seen: dict[tuple[str, str], None] = {}
    for schema, identifier in models:
        seen[(base_schema_of(str(schema)).lower(), str(identifier).lower())] = None
    return list(seen)


def parent_level(spark: SparkSession, levels: Sequence[str], base_schema: str, identifier: str) -> str | None:
    """The first level in ``levels`` (a parent chain, nearest first) that has the model; None if none has it."""
    for level in levels:
        if table_exists(spark, overlay_schema(base_schema, level), identifier):
            return level
    return None


def shows_its_parent(spark: SparkSession, schema: str, identifier: str) -> bool:
    """True when the model's overlay in ``schema`` changes nothing (an empty delta overlay) and is not materialized
    (a materialized model shows its parent as of its materialization): that level's rows of the model are its parent
    level's as they are now."""
    from partialcow.branch.catalog import holds_no_rows

    info = overlay_info(spark, schema, identifier)
    return (info is not None and info.mode == "delta" and holds_no_rows(spark, schema, overlay_table(identifier))
            and not table_exists(spark, schema, full_table(identifier)))


def resolve_parent(
    spark: SparkSession, levels: Sequence[str], base_schema: str, identifier: str
) -> tuple[str, str] | None:
    """The first level in ``levels`` (a parent chain, nearest first) that has the model, as ``(schema, name)``."""
    level = parent_level(spark, levels, base_schema, identifier)
    return None if level is None else (overlay_schema(base_schema, level), identifier)


def require_parent_columns(spark: SparkSession, info: OverlayInfo, parent: tuple[str, str], *, branch: str,
                           operation: str) -> None:
    """Refuse ``operation`` (diff, merge, a batch, a refresh) of a model whose overlay on ``branch`` has columns its
    ``parent`` lost since (``on_schema_change='sync_all_columns'`` there) or holds with a type its values cannot be
    compared with exactly (:func:`partialcow.branch.frames.compare_exactly`; a ``--full-refresh`` there): the rows
    cannot be compared column by column, and a merge would drop the branch's values of those columns, fail to write
    them, or take a changed value for an unchanged one."""
    from partialcow.branch.frames import compare_exactly
    from partialcow.exceptions import BranchError

    theirs = {f.name.lower(): f.dataType for f in spark.table(qualified(*parent)).schema.fields}
    ours = {f.name.lower(): f.dataType for f in spark.table(info.table).schema.fields}
    lost = [c for c in info.columns if c.lower() not in theirs]
    retyped = [f"{c} ({ours[c.lower()].simpleString()} on the branch, {theirs[c.lower()].simpleString()} there)"
               for c in info.columns if c.lower() in theirs and c.lower() in ours
               and not compare_exactly(ours[c.lower()], theirs[c.lower()])]
    if not lost and not retyped:
        return
    model = f"{base_schema_of(info.schema)}.{info.identifier}"
    why = []
    if lost:
        why.append(f"column(s) {lost} that its parent {'.'.join(parent)} no longer has (dropped there since the "
                   "branch built it)")
    if retyped:
        why.append(f"column(s) whose type its parent {'.'.join(parent)} changed since the branch built it: "
                   f"{', '.join(retyped)}")
    raise BranchError(
        f"{operation}: model {model} on branch {branch} has {'; and '.join(why)}, so the rows cannot be compared; "
        "nothing was done. Build the model on the branch again with the parent's columns (a partial_cow_incremental "
        "model with --full-refresh), or drop the branch"
    )


def follow_parent_columns(spark: SparkSession, info: OverlayInfo, parent: tuple[str, str], *,
                          emptied: bool = False) -> tuple[OverlayInfo, bool]:
    """Give an empty delta overlay the columns its ``parent`` has now, in its order; returns the overlay's layout
    and whether it changed.

    An empty overlay changes none of the parent's rows: the branch shows the parent as it is. ``ALTER TABLE`` there
    (a column added, dropped, renamed, widened) commits nothing the branch records, and the overlay's old columns
    would hide a new column, or break the view over the parent that lists them. An overlay holding rows keeps its
    columns (its rows have values for those only; :func:`require_parent_columns` refuses what cannot be compared),
    and so do key columns the parent lost. ``emptied``: the caller just emptied it (no check)."""
    if info.mode != "delta":
        return info, False
    from partialcow.branch.catalog import holds_no_rows
    from partialcow.branch.frames import same_types

    theirs = [(f.name, f.dataType) for f in spark.table(qualified(*parent)).schema.fields]
    ours = {f.name.lower(): f for f in spark.table(info.table).schema.fields if f.name not in (OP_COLUMN, SEQ_COLUMN)}
    wanted = {n.lower(): t for n, t in theirs}

    def moved(name: str, held: Any) -> bool:  # lost or retyped there (nullability inside a type is no change)
        return name not in wanted or not same_types(wanted[name], held)

    if [n.lower() for n, _ in theirs] == list(ours) and not any(moved(n, f.dataType) for n, f in ours.items()):
        return info, False
    kept = {k.lower() for k in info.key_columns}
    if not kept <= wanted.keys() or not (emptied or holds_no_rows(spark, *info.table.split(".", 1))):
        return info, False
    drop = [f.name for n, f in ours.items() if n not in wanted and n not in kept]
    for n, f in ours.items():
        if n in wanted and moved(n, f.dataType):
            if _widens(f.dataType, wanted[n]):  # keeps the field id: a child branch's base reads old values by it
                spark.sql(f"ALTER TABLE {info.table} ALTER COLUMN {quote(f.name)} TYPE {_type_sql(spark, wanted[n])}")
            elif n not in kept:  # another change: the (empty) column is dropped and added; a key stays (refused)
                drop.append(f.name)
    if drop:
        spark.sql(f"ALTER TABLE {info.table} DROP COLUMNS ({', '.join(quote(c) for c in drop)})")
    dropped = {c.lower() for c in drop}
    order = [f.name for n, f in ours.items() if n not in dropped]
    gained = [(n, t) for n, t in theirs if n.lower() not in {c.lower() for c in order}]
    if gained:
        listed = ", ".join(f"{quote(n)} {_type_sql(spark, t)}" for n, t in gained)
        spark.sql(f"ALTER TABLE {info.table} ADD COLUMNS ({listed})")
        order += [n for n, _ in gained]
    # move only the columns out of the parent's order (one ALTER each), so a column gained at its end costs one
    spelled = {c.lower(): c for c in order}
    for position, (name, _) in enumerate(theirs):
        if [c.lower() for c in order].index(name.lower()) == position:
            continue
        where = "FIRST" if position == 0 else f"AFTER {quote(spelled[theirs[position - 1][0].lower()])}"
        spark.sql(f"ALTER TABLE {info.table} ALTER COLUMN {quote(spelled[name.lower()])} {where}")
        order.remove(spelled[name.lower()])
        order.insert(position, spelled[name.lower()])
    after = [(f.name.lower(), f.dataType) for f in spark.table(info.table).schema.fields]
    before = [(f.name.lower(), f.dataType) for f in ours.values()]
    changed = [(n, t) for n, t in after if n not in (OP_COLUMN, SEQ_COLUMN)] != before
    return (overlay_info(spark, info.schema, info.identifier) or info) if changed else info, changed


def _widens(held: Any, wanted: Any) -> bool:
    """Whether Iceberg changes a column of type ``held`` to ``wanted`` in place (a type promotion).

    >>> from pyspark.sql.types import DecimalType, IntegerType, LongType, StringType
    >>> _widens(IntegerType(), LongType()), _widens(DecimalType(8, 2), DecimalType(12, 2)), _widens(LongType(), StringType())
    (True, True, False)
    """  # noqa: E501 - a doctest line cannot wrap
    from pyspark.sql.types import DecimalType, DoubleType, FloatType, IntegerType, LongType

    if isinstance(held, DecimalType) and isinstance(wanted, DecimalType):
        return held.scale == wanted.scale and wanted.precision > held.precision
    return (isinstance(held, IntegerType) and isinstance(wanted, LongType)) or (
        isinstance(held, FloatType) and isinstance(wanted, DoubleType))


def _type_sql(spark: SparkSession, data_type: Any) -> str:
    """``data_type`` as DDL (Spark's own ``sql`` form: nested field names quoted, which ``simpleString`` leaves
    bare)."""
    return str(spark._jsparkSession.parseDataType(data_type.json()).sql())


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
    return OverlayInfo(schema=schema, identifier=identifier, columns=columns, key_columns=keys, mode=mode,
                       keeps_history=props.get(_PROP_HISTORY) == "true")


def write_overlay(
    spark: SparkSession,
    frame: DataFrame,
    *,
    schema: str,
    identifier: str,
    key_columns: Sequence[str],
    mode: OverlayMode,
    keeps_history: bool = False,
) -> None:
    """(Re)write the overlay table of ``identifier`` in ``schema`` from ``frame`` (data columns + ``_pcow_*``).

    ``CREATE OR REPLACE`` keeps the table's snapshot history, so child branches can still time-travel to it.
    ``keeps_history``: see :class:`OverlayInfo`.
    """
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
    (
        frame.writeTo(f"{schema}.{overlay_table(identifier)}")
        .using("iceberg")
        .tableProperty(_PROP_KEYS, ",".join(key_columns))
        .tableProperty(_PROP_MODE, mode)
        .tableProperty(_PROP_HISTORY, str(keeps_history).lower())
        .createOrReplace()
    )


def chain_tables(base_schema: str, identifier: str, levels: Sequence[str]) -> list[tuple[str, str]]:
    """Every table that can make up the model's content at ``levels``: overlays and full tables, then the root.

    >>> chain_tables("shop", "orders", ["dev", "main"])
    [('shop__br_dev', 'orders__pcow_full'), ('shop__br_dev', 'orders__pcow_overlay'), ('shop', 'orders')]
    """
    tables: list[tuple[str, str]] = []
    for level in levels:
        schema = overlay_schema(base_schema, level)
        if level == MAIN:
            tables.append((schema, identifier))
        else:
            tables.extend([(schema, full_table(identifier)), (schema, overlay_table(identifier))])
    return tables


def branch_models(spark: SparkSession, branch: str, base_schemas: Sequence[str]) -> list[OverlayInfo]:
    """Every model that has an overlay on ``branch`` in the overlay schemas of ``base_schemas`` (the branch's own,
    ``BranchStore.base_schemas``: a branch of the same name in another meta schema has its overlays elsewhere)."""
    found: list[OverlayInfo] = []
    for base_schema in sorted(set(base_schemas)):
        database = overlay_schema(base_schema, branch)
        for table in sorted(list_tables(spark, database)):  # none when the schema does not exist
            model = model_of_overlay(table)
            if model is not None:
                info = overlay_info(spark, database, model)
                if info is not None:
                    found.append(info)
    return found
