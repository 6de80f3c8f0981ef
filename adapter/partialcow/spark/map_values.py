"""Values holding maps in a form Spark can compare: every map, at any depth, as its entries sorted by key.

Spark refuses ``=``, ``<=>``, grouping and set operations on maps, so code that compares rows turns such values
into text (``to_json``). JSON writes a map's entries in the order the map holds them, and two equal maps built in
another order (``map('b', 2, 'a', 1)`` and ``map('a', 1, 'b', 2)``) then compare as different: a row counted as new
on a branch that keeps history, a change reported where there is none. :func:`canonical_maps` sorts the entries
first; arrays keep their order (it is part of the value) and structs their fields.

The two forms, :class:`~pyspark.sql.Column` and SQL text, build the same expression. :func:`comparable_text`
turns such a value into JSON text that equal values share: entries sorted, null fields written, and timestamps to
the microsecond (JSON's default writes milliseconds, so two values a microsecond apart read as equal).

>>> from pyspark.sql.types import MapType, StringType, IntegerType
>>> print(canonical_maps_sql("m", MapType(StringType(), IntegerType())))
array_sort(transform(map_entries(m), e0 -> named_struct('key', e0.key, 'value', e0.value)))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType

__all__ = ["canonical_maps", "canonical_maps_sql", "comparable_text", "comparable_text_sql", "holds_map"]

# to_json's options for comparable text: every null field written, timestamps with all six fraction digits
_TEXT_OPTIONS = {
    "ignoreNullFields": "false",
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
}


def holds_map(data_type: DataType) -> bool:
    """Whether ``data_type`` is, or holds inside arrays, maps and structs, a map."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, MapType):
        return True
    if isinstance(data_type, ArrayType):
        return holds_map(data_type.elementType)
    if isinstance(data_type, StructType):
        return any(holds_map(f.dataType) for f in data_type.fields)
    return False


def canonical_maps(column: Column, data_type: DataType) -> Column:
    """``column`` (of ``data_type``) with every map inside it replaced by its entries sorted by key (an array of
    ``struct<key, value>``); nulls stay null at every level. Unchanged when it holds no map."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    if not holds_map(data_type):
        return column
    if isinstance(data_type, MapType):
        key_type, value_type = data_type.keyType, data_type.valueType
        return F.array_sort(F.transform(F.map_entries(column), lambda e: F.struct(
            canonical_maps(e["key"], key_type).alias("key"), canonical_maps(e["value"], value_type).alias("value"))))
    if isinstance(data_type, ArrayType):
        element_type = data_type.elementType
        return F.transform(column, lambda e: canonical_maps(e, element_type))
    assert isinstance(data_type, StructType)
    fields = [canonical_maps(column[f.name], f.dataType).alias(f.name) for f in data_type.fields]
    return F.when(column.isNull(), F.lit(None)).otherwise(F.struct(*fields))


def canonical_maps_sql(expr: str, data_type: DataType, depth: int = 0) -> str:
    """:func:`canonical_maps` as SQL text over the SQL expression ``expr`` (``depth`` names nested lambda
    variables apart)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if not holds_map(data_type):
        return expr
    var = f"e{depth}"
    if isinstance(data_type, MapType):
        key = canonical_maps_sql(f"{var}.key", data_type.keyType, depth + 1)
        value = canonical_maps_sql(f"{var}.value", data_type.valueType, depth + 1)
        return f"array_sort(transform(map_entries({expr}), {var} -> named_struct('key', {key}, 'value', {value})))"
    if isinstance(data_type, ArrayType):
        return f"transform({expr}, {var} -> {canonical_maps_sql(var, data_type.elementType, depth + 1)})"
    assert isinstance(data_type, StructType)
    fields = ", ".join(
        f"'{_sql_string(f.name)}', "
        f"{canonical_maps_sql(f'{expr}.`' + f.name.replace('`', '``') + '`', f.dataType, depth + 1)}"
        for f in data_type.fields)
    return f"IF({expr} IS NULL, NULL, named_struct({fields}))"


def _sql_string(text: str) -> str:
    """``text`` inside a single-quoted SQL string literal."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


def comparable_text(column: Column, data_type: DataType) -> Column:
    """``column`` as JSON text that equal values share and different values do not (see the module docstring)."""
    from pyspark.sql import functions as F

    return F.to_json(F.array(canonical_maps(column, data_type)), _TEXT_OPTIONS)


def comparable_text_sql(expr: str, data_type: DataType) -> str:
    """:func:`comparable_text` as SQL text over the SQL expression ``expr``.

    >>> from pyspark.sql.types import IntegerType
    >>> comparable_text_sql("x", IntegerType())[:31]
    "to_json(array(x), map('ignoreNu"
    """
    options = ", ".join(f"'{_sql_string(k)}', '{_sql_string(v)}'" for k, v in _TEXT_OPTIONS.items())
    return f"to_json(array({canonical_maps_sql(expr, data_type)}), map({options}))"
