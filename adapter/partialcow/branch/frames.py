"""Small DataFrame helpers the branch modules share: how two rows' keys match and how two values compare.

Key matching is null-safe everywhere on a branch (build, image, diff, merge, batches): a parent's row whose key has
a null part is a row like any other, which the branch can change or delete, and whose deletion a merge carries to
the parent. With ``=`` such a row matched nothing and could never be removed. :func:`same_key` and
:func:`same_key_sql` build every key join condition of the package; :func:`key_join` joins two frames with it.

Values compare as the bits the reader gets back: ``-0.0`` differs from ``0.0`` (Spark's ``=`` and ``<=>`` take them
for equal, so a branch whose result held ``-0.0`` where the parent held ``0.0`` kept showing ``0.0``).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING

from partialcow.branch.naming import quote
from partialcow.spark.map_values import comparable_text, holds_map

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

__all__ = [
    "all_of", "comparable", "compare_exactly", "holds_map", "key_join", "key_string", "same_key", "same_key_sql",
    "same_types", "same_value", "value_text",
]


def all_of(conditions: Sequence[Column]) -> Column:
    """The conjunction of ``conditions`` (true for none)."""
    from pyspark.sql import functions as F

    return functools.reduce(operator.and_, conditions) if conditions else F.lit(True)


def same_key(left: Sequence[Column], right: Sequence[Column]) -> Column:
    """The condition that matches a row of one side with a row of the other by key (the key columns of each side,
    in the same order): null-safe, so that a null key part matches a null."""
    return all_of([a.eqNullSafe(b) for a, b in zip(left, right, strict=True)])


def same_key_sql(keys: Sequence[str], left: str, right: str) -> str:
    """:func:`same_key` as SQL, for relations aliased ``left`` and ``right``.

    >>> same_key_sql(["id", "k 2"], "p", "o")
    'p.`id` <=> o.`id` AND p.`k 2` <=> o.`k 2`'
    """
    return " AND ".join(f"{left}.{quote(k)} <=> {right}.{quote(k)}" for k in keys) or "TRUE"


def key_join(left: DataFrame, right: DataFrame, keys: Sequence[str], how: str, *, broadcast: bool = False) -> DataFrame:
    """``left`` joined with ``right`` on ``keys`` (columns both have) by :func:`same_key`, ``how`` being
    ``left_semi`` or ``left_anti``: ``left``'s columns only (a join on column names would compare with ``=``).
    ``broadcast``: ``right`` is small (a batch's keys, an overlay's)."""
    from pyspark.sql import functions as F

    if how not in ("left_semi", "left_anti"):
        raise ValueError(f"key_join takes left_semi or left_anti joins, not {how!r}")
    renamed = right.select(*[F.col(quote(k)).alias(f"_pcow_key{i}") for i, k in enumerate(keys)])
    renamed = F.broadcast(renamed) if broadcast else renamed
    condition = same_key([left[quote(k)] for k in keys], [renamed[f"_pcow_key{i}"] for i in range(len(keys))])
    return left.join(renamed, condition, how)


def _holds(data_type: DataType, kinds: tuple[type, ...]) -> bool:
    """Whether ``data_type`` is, or holds somewhere inside arrays, maps and structs, a type of ``kinds``."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, kinds):
        return True
    if isinstance(data_type, ArrayType):
        return _holds(data_type.elementType, kinds)
    if isinstance(data_type, MapType):
        return _holds(data_type.keyType, kinds) or _holds(data_type.valueType, kinds)
    if isinstance(data_type, StructType):
        return any(_holds(f.dataType, kinds) for f in data_type.fields)
    return False


def _has_floats(data_type: DataType) -> bool:
    from pyspark.sql.types import DoubleType, FloatType

    return _holds(data_type, (FloatType, DoubleType))


def same_value(a: Column, b: Column, data_type: DataType) -> Column:
    """Whether two values of type ``data_type`` are the same, nulls included: ``<=>``, and for floating values (also
    inside arrays, maps and structs) their text, which tells ``-0.0`` from ``0.0`` (every NaN is the same NaN). Values
    holding a map compare as JSON, each map's entries sorted by key (:func:`canonical_maps`: Spark cannot compare
    maps)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType

    if holds_map(data_type):
        return value_text(a, data_type).eqNullSafe(value_text(b, data_type))
    equal = a.eqNullSafe(b)
    if not _has_floats(data_type):
        return equal
    if isinstance(data_type, (FloatType, DoubleType)):
        return equal & a.cast("string").eqNullSafe(b.cast("string"))
    # nested: JSON writes doubles as Java's shortest round-trip text; <=> above still compares everything else
    return equal & F.to_json(F.array(a)).eqNullSafe(F.to_json(F.array(b)))


def same_types(a: DataType, b: DataType) -> bool:
    """Whether two column types are the same apart from the nullability of what they hold: Spark's CTAS makes array
    elements, map values and struct fields nullable, while a query's ``array(id)`` or ``named_struct`` says they are
    not; a model read back from its table and the same SQL run again must count as one layout.

    >>> from pyspark.sql.types import ArrayType, LongType
    >>> same_types(ArrayType(LongType(), False), ArrayType(LongType(), True))
    True
    >>> same_types(LongType(), ArrayType(LongType()))
    False
    """
    return _nullable(a) == _nullable(b)


def compare_exactly(a: DataType, b: DataType) -> bool:
    """Whether values of a column of type ``a`` compare with those of type ``b`` without losing anything: the same
    type (:func:`same_types`), integers of any width, decimals of one scale. Elsewhere Spark converts one side first
    (the string ``'8.9'`` against an int column is 8; a float widened to double is another number), so a branch's value
    and its parent's could read as equal when they are not.

    >>> from pyspark.sql.types import DecimalType, DoubleType, FloatType, IntegerType, LongType, StringType
    >>> compare_exactly(IntegerType(), LongType()), compare_exactly(DecimalType(10, 2), DecimalType(12, 2))
    (True, True)
    >>> compare_exactly(StringType(), IntegerType()), compare_exactly(FloatType(), DoubleType())
    (False, False)
    """
    from pyspark.sql.types import DecimalType, IntegralType

    if same_types(a, b) or (isinstance(a, IntegralType) and isinstance(b, IntegralType)):
        return True
    return isinstance(a, DecimalType) and isinstance(b, DecimalType) and a.scale == b.scale


def _nullable(data_type: DataType) -> DataType:
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in data_type.fields])
    return data_type


def comparable(frame: DataFrame) -> DataFrame:
    """``frame`` with each column holding a map as JSON text, for set operations (see :func:`same_value`)."""
    from pyspark.sql import functions as F

    return frame.select(*[
        value_text(F.col(quote(f.name)), f.dataType).alias(f.name) if holds_map(f.dataType) else F.col(quote(f.name))
        for f in frame.schema.fields
    ])


def value_text(column: Column, data_type: DataType) -> Column:
    """A value holding a map as JSON text that equal values share (maps' entries sorted by key, timestamps to the
    microsecond), nulls inside kept apart from absent fields: :func:`partialcow.spark.map_values.comparable_text`."""
    return comparable_text(column, data_type)


def row_hash(columns: Sequence[str], types: dict[str, DataType]) -> Column:
    """A 64-bit hash of a row's ``columns`` that tells apart what ``xxhash64`` alone does not: a null in one column
    from a null in another (it skips nulls), and inside arrays, maps and structs null elements and fields in other
    places (hashed through their JSON text too; maps only so, Spark cannot hash them). Integers of any width, and
    decimals of one scale at any precision, hash alike: a parent that retyped a column so (which the branch's
    checks let through) holds the same values, and its rows must hash as the base image's."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        ArrayType,
        ByteType,
        DecimalType,
        IntegerType,
        LongType,
        MapType,
        ShortType,
        StructType,
    )

    if not columns:
        return F.lit(0).cast("bigint")
    parts: list[Column] = []
    for name in columns:
        column, data_type = F.col(quote(name)), types[name]
        if isinstance(data_type, (ByteType, ShortType, IntegerType, LongType)):
            column = column.cast("bigint")
        elif isinstance(data_type, DecimalType):
            column = column.cast(DecimalType(38, data_type.scale))
        if isinstance(data_type, (ArrayType, MapType, StructType)):
            parts.append(value_text(column, data_type))
            if holds_map(data_type):
                continue
        parts += [column, column.isNull()]
    return F.xxhash64(*parts)


def key_string(keys: Sequence[str], prefix: str) -> Column:
    """One readable string per key: the value itself, or JSON for composite keys, null parts written as null
    (``prefix``: a column qualifier such as ``"o."``)."""
    from pyspark.sql import functions as F

    if len(keys) == 1:
        return F.col(f"{prefix}{quote(keys[0])}").cast("string")
    return F.to_json(F.struct(*[F.col(f"{prefix}{quote(k)}").alias(k) for k in keys]), {"ignoreNullFields": "false"})
