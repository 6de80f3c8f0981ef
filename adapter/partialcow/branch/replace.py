"""A ``main`` table replaced by a detached branch model whose columns differ from the table's (``branch_merge``).

The table stays the table its owner set up, as a rebuild of the model on ``main`` keeps it (dbt's table
materialization creates it again with the model's ``partition_by`` and ``tblproperties``): the replacement keeps
the table's partition fields and sort order (those whose source column the branch's result still has, with the
same type) and, as Iceberg's replace does, its properties, format version and other refs (the branches'
images). Its row index (``partial_cow_incremental``) indexed the replaced files, possibly under other key types: it
is removed, and the next write builds it again, as for a new table.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from partialcow.branch.catalog import load_iceberg
from partialcow.branch.naming import qualified, quote
from partialcow.table.java import jvm

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["replace_keeping_layout", "transform_sql"]

_TIME = {"year": "years", "month": "months", "day": "days", "hour": "hours"}


def transform_sql(transform: str, column: str) -> str | None:
    """Spark SQL's partition expression for the Iceberg transform ``transform`` (as Iceberg prints it) of the
    quoted ``column``; None for ``void`` (it partitions nothing) or a transform Spark's DDL cannot name.

    >>> transform_sql("bucket[16]", "`id`"), transform_sql("day", "`ts`"), transform_sql("identity", "`r`")
    ('bucket(16, `id`)', 'days(`ts`)', '`r`')
    >>> transform_sql("truncate[4]", "`s`"), transform_sql("void", "`x`")
    ('truncate(4, `s`)', None)
    """
    if transform == "identity":
        return column
    if transform in _TIME:
        return f"{_TIME[transform]}({column})"
    found = re.fullmatch(r"(bucket|truncate)\[(\d+)\]", transform)
    return None if found is None else f"{found.group(1)}({found.group(2)}, {column})"


def _column(name: str) -> str:
    return ".".join(quote(part) for part in name.split("."))


def _kept(table: Any, new_schema: Any, fields: Any) -> tuple[list[tuple[Any, str]], list[str]]:
    """``(field, source column name)`` of the partition or sort ``fields`` whose source column ``new_schema`` still
    has, with the same type, and the text of the others. A column whose type changed loses its fields: Iceberg's
    replace would carry the field's transform over as it was bound to the old type (a ``truncate`` of a string
    column then fails on the new int column)."""
    kept, dropped = [], []
    for field in fields:
        old = table.schema().findField(field.sourceId())
        name = str(table.schema().findColumnName(field.sourceId()))
        column = new_schema.caseInsensitiveFindField(name)
        if column is not None and column.type().equals(old.type()):
            kept.append((field, str(new_schema.findColumnName(column.fieldId()))))
        elif str(field.transform()) != "void":
            dropped.append(f"{field.transform()}({name})")
    return kept, dropped


def replace_keeping_layout(spark: SparkSession, schema: str, identifier: str, rows: DataFrame) -> tuple[str, ...]:
    """Replace the Iceberg table ``schema.identifier`` with ``rows`` (other columns than the table's), keeping its
    layout (see the module docstring); returns the partition and sort fields it could not keep (their column gone,
    or of another type now), as ``transform(column)``.

    The rows land in one commit (Iceberg's ``REPLACE TABLE AS SELECT``); the sort order, which Spark's DDL cannot
    state, is set again in a second, metadata-only commit right after.

    >>> replace_keeping_layout(spark, "shop", "orders", spark.table("shop__br_dev.orders__pcow_overlay")
    ...                        .drop("_pcow_op", "_pcow_seq"))  # doctest: +SKIP
    ()
    """
    java = jvm(spark)
    table = load_iceberg(spark, schema, identifier)
    if table is None:  # not an Iceberg table any more: nothing to keep
        rows.writeTo(f"{schema}.{identifier}").using("iceberg").createOrReplace()
        return ()
    new_schema = java.org.apache.iceberg.spark.SparkSchemaUtil.convert(rows._jdf.schema())
    partition, dropped = _kept(table, new_schema, table.spec().fields())
    order, dropped_order = _kept(table, new_schema, table.sortOrder().fields())
    clauses = []
    for field, name in partition:
        clause = transform_sql(str(field.transform()), _column(name))
        if clause is not None:
            clauses.append(clause)
        elif str(field.transform()) != "void":
            dropped.append(f"{field.transform()}({name})")
    partitioned = f" PARTITIONED BY ({', '.join(clauses)})" if clauses else ""
    view = f"_pcow_replace_{identifier}".replace("`", "")
    rows.createOrReplaceTempView(view)
    try:
        spark.sql(f"CREATE OR REPLACE TABLE {qualified(schema, identifier)} USING iceberg{partitioned} "
                  f"AS SELECT * FROM {quote(view)}")
    finally:
        spark.catalog.dropTempView(view)
    replaced = load_iceberg(spark, schema, identifier)
    if order:
        expressions, transforms = java.org.apache.iceberg.expressions.Expressions, java.org.apache.iceberg.transforms
        sort = replaced.replaceSortOrder()
        for field, name in order:
            term = expressions.transform(name, transforms.Transforms.fromString(str(field.transform())))
            sort = (sort.asc if str(field.direction()) == "ASC" else sort.desc)(term, field.nullOrder())
        sort.commit()
    from partialcow.index.storage import IndexStore

    store = IndexStore(str(replaced.location()))
    if store.latest_state_version() is not None:
        store.delete_all()
    return (*dropped, *dropped_order)
