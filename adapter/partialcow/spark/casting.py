"""Store assignment: which value types a batch may deliver for a table column, and which values must be checked.

The rules are those of a strict database under ANSI store assignment, tightened to "never store a value other than
the one delivered":

- the same type, or a batch column of NULLs (``NullType``), is stored as it is;
- a **widening** conversion that can never lose information is applied silently: a narrower integer into a wider
  one, ``float`` into ``double``, an integer or decimal into a decimal with at least as many integer and fraction
  digits, small integers into ``float``/``double`` (exactly representable), ``date`` into ``timestamp`` or
  ``timestamp_ntz`` (midnight);
- a **checked** conversion is applied value by value and fails, naming the column, the values and sample keys, when
  a value does not survive it: numbers into integers and decimals must be exact (``2.9`` into ``int``, ``1.235`` into
  ``decimal(12,2)``, ``2^40`` into ``int`` fail; ``2.0`` into ``int`` is stored), large integers into ``float`` or
  ``double`` must be exactly representable, and numbers into ``float``/``double`` round to the nearest
  representable value but must not overflow. Key columns are always checked exactly: a conversion must never
  change which row a key names;
- ``timestamp`` and ``timestamp_ntz`` convert through the wall clock in the session's time zone (as Spark casts
  them), checked: a wall clock skipped or repeated by a daylight-saving change fails;
- arrays, maps and structs (the same field names in the same order) **widen** where every part is the same or
  widens (``array<smallint>`` into ``array<int>``: Iceberg stores no smallint, so a first build of such a column made
  it ``array<int>``); a part that needs a check or is refused refuses the whole value, and so does a date part
  into a timestamp (Spark casts it only into a part that may hold null);
- anything else (strings into numbers, numbers into timestamps, booleans, binary, other nested types) is
  **refused**: cast it in the model, or change the column's type with ``--full-refresh``.

>>> from pyspark.sql.types import IntegerType, LongType, DoubleType, StringType, DecimalType
>>> conversion(IntegerType(), LongType()), conversion(LongType(), IntegerType()), conversion(StringType(), LongType())
('widen', 'checked', 'refuse')
>>> conversion(DecimalType(10, 2), DecimalType(12, 2)), conversion(DoubleType(), DecimalType(12, 2))
('widen', 'checked')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType

__all__ = ["ORDERABLE_SEQUENCE_TYPES", "Conversion", "cast_type", "conversion", "is_orderable_sequence",
           "lossy_value"]

Conversion = Literal["same", "widen", "checked", "refuse"]

# integer digits a value of each integral type may need
_INTEGRAL_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19}
_INTEGRAL_RANK = {"tinyint": 0, "smallint": 1, "int": 2, "bigint": 3}
_INTEGRAL_BITS = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}
_MANTISSA_BITS = {"float": 24, "double": 53}
# integral types every value of which a float (24-bit mantissa) or double (53-bit) represents exactly
_EXACT_IN = {"float": {"tinyint", "smallint"}, "double": {"tinyint", "smallint", "int"}}

ORDERABLE_SEQUENCE_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal", "date",
                            "timestamp", "timestamp_ntz")


def _name(t: DataType) -> str:
    from pyspark.sql.types import DecimalType

    return "decimal" if isinstance(t, DecimalType) else t.simpleString()


def _same_ignoring_nullability(a: DataType, b: DataType) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(a, StructType) and isinstance(b, StructType):
        return len(a.fields) == len(b.fields) and all(
            x.name == y.name and _same_ignoring_nullability(x.dataType, y.dataType) for x, y in zip(a.fields, b.fields))
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return _same_ignoring_nullability(a.elementType, b.elementType)
    if isinstance(a, MapType) and isinstance(b, MapType):
        return (_same_ignoring_nullability(a.keyType, b.keyType)
                and _same_ignoring_nullability(a.valueType, b.valueType))
    return a == b


def _nested_parts(source: DataType, target: DataType) -> list[tuple[DataType, DataType]] | None:
    """The (source, target) types of the parts of two arrays, two maps or two structs of the same field names in
    the same order; ``[(source, target)]`` made to refuse for structs of other fields; None when not both nested alike.
    """
    from pyspark.sql.types import ArrayType, MapType, StringType, StructType

    if isinstance(source, ArrayType) and isinstance(target, ArrayType):
        return [(source.elementType, target.elementType)]
    if isinstance(source, MapType) and isinstance(target, MapType):
        return [(source.keyType, target.keyType), (source.valueType, target.valueType)]
    if isinstance(source, StructType) and isinstance(target, StructType):
        if [f.name for f in source.fields] != [f.name for f in target.fields]:
            return [(StringType(), source)]  # other fields: a pair conversion() refuses
        return [(a.dataType, b.dataType) for a, b in zip(source.fields, target.fields)]
    return None


def cast_type(source: DataType, target: DataType) -> DataType:
    """The type a widening cast of ``source`` values goes to: ``target``'s types with ``source``'s nullability inside
    arrays, maps and structs (a cast may not make a part that holds nulls non-nullable; whether the values fit the
    table's nullability is checked where they are written, as for values of the same type).

    >>> from pyspark.sql.types import ArrayType, ShortType, IntegerType
    >>> cast_type(ArrayType(ShortType(), True), ArrayType(IntegerType(), False)).simpleString()
    'array<int>'
    """
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(source, ArrayType) and isinstance(target, ArrayType):
        return ArrayType(cast_type(source.elementType, target.elementType), source.containsNull)
    if isinstance(source, MapType) and isinstance(target, MapType):
        return MapType(cast_type(source.keyType, target.keyType), cast_type(source.valueType, target.valueType),
                       source.valueContainsNull)
    if isinstance(source, StructType) and isinstance(target, StructType):
        return StructType([StructField(b.name, cast_type(a.dataType, b.dataType), a.nullable, b.metadata)
                           for a, b in zip(source.fields, target.fields)])
    return target


def conversion(source: DataType, target: DataType) -> Conversion:
    """How a value of ``source`` type is stored into a column of ``target`` type (see the module docstring).

    >>> from pyspark.sql.types import DateType, TimestampType, TimestampNTZType, FloatType, DoubleType, LongType
    >>> conversion(DateType(), TimestampNTZType()), conversion(TimestampType(), TimestampNTZType())
    ('widen', 'checked')
    >>> conversion(FloatType(), DoubleType()), conversion(LongType(), DoubleType()), conversion(LongType(), DateType())
    ('widen', 'checked', 'refuse')
    """
    from pyspark.sql.types import DecimalType, NullType

    if _same_ignoring_nullability(source, target):
        return "same"
    if isinstance(source, NullType):
        return "widen"
    parts = _nested_parts(source, target)
    if parts is not None:
        kinds = {conversion(a, b) for a, b in parts}
        # Spark casts a date inside an array, map or struct to a timestamp only into a part that may hold null
        dates = any(_name(a) == "date" and _name(b) != "date" for a, b in parts)
        return "widen" if kinds <= {"same", "widen"} and not dates else "refuse"
    s, t = _name(source), _name(target)
    numeric = {*_INTEGRAL_RANK, "float", "double", "decimal"}
    if s in numeric and t in numeric:
        if s in _INTEGRAL_RANK and t in _INTEGRAL_RANK:
            return "widen" if _INTEGRAL_RANK[s] <= _INTEGRAL_RANK[t] else "checked"
        if t == "decimal":
            assert isinstance(target, DecimalType)
            if s in _INTEGRAL_DIGITS:
                return "widen" if target.precision - target.scale >= _INTEGRAL_DIGITS[s] else "checked"
            if s == "decimal":
                assert isinstance(source, DecimalType)
                wider = (target.scale >= source.scale
                         and target.precision - target.scale >= source.precision - source.scale)
                return "widen" if wider else "checked"
            return "checked"  # float/double into decimal
        if t in ("float", "double"):
            if s == "float" and t == "double":
                return "widen"
            if s in _INTEGRAL_RANK and s in _EXACT_IN[t]:
                return "widen"
            return "checked"
        return "checked"  # float/double/decimal into an integer
    if s == "date" and t in ("timestamp", "timestamp_ntz"):
        return "widen"
    if {s, t} == {"timestamp", "timestamp_ntz"}:
        # the wall clock in the session's time zone: exact, except around a daylight-saving change (a wall clock
        # that does not exist, or exists twice), which the round trip catches
        return "checked"
    return "refuse"


def lossy_value(quoted: str, source: DataType, target: DataType, *, exact: bool) -> Column:
    """A boolean Spark expression: True where the value of column ``quoted`` (a quoted identifier, of type
    ``source``) does not survive the checked conversion to ``target``. ``exact`` (key columns) also refuses
    rounding into ``float``/``double``; integers are always converted exactly.

    The cast is evaluated as ``try_cast`` (NULL where it fails, whatever ``spark.sql.ansi.enabled`` says), and its
    result cast back: a value is stored only if it comes back unchanged.
    """
    from pyspark.sql import functions as F

    column = F.col(quoted)
    casted = F.expr(f"try_cast({quoted} as {target.simpleString()})")
    failed = column.isNotNull() & casted.isNull()
    t = _name(target)
    if t in ("float", "double") and not exact and _name(source) not in _INTEGRAL_RANK:
        # rounding to the nearest float is the nature of a float column; overflow to infinity is not
        finite = ~F.isnan(column.cast("double")) & (F.abs(column.cast("double")) != F.lit(float("inf")))
        overflow = finite & (F.isnan(casted) | (F.abs(casted.cast("double")) == F.lit(float("inf"))))
        return failed | overflow
    # NaN != NaN would flag every NaN; NaN into an integer or decimal already fails the cast
    changed = ~casted.cast(source.simpleString()).eqNullSafe(column)
    # Casts clamp at the integer range's end, so a round trip can come back to the value it started from:
    s = _name(source)
    if s in _INTEGRAL_RANK and t in _MANTISSA_BITS:
        # the integers above the largest one the float holds below 2**(bits-1) round to it (changed, which the round
        # trip sees) or up to 2**(bits-1), which casts back clamped to the largest integer (tested on the integer:
        # Spark's optimizer folds a test of the float against 2**(bits-1) to false)
        top = _INTEGRAL_BITS[s] - 1
        changed = changed | (column > F.lit(2**top - 2 ** max(0, top - _MANTISSA_BITS[t])).cast(s))
    elif t in _INTEGRAL_RANK and s in _MANTISSA_BITS:
        # 2**(bits-1) passes the cast's overflow test where the largest integer rounds to it, and is clamped
        changed = changed | (column.cast("double") >= F.lit(float(2 ** (_INTEGRAL_BITS[t] - 1))))
    return failed | (column.isNotNull() & changed)


def is_orderable_sequence(t: DataType) -> bool:
    """Can ``t`` order changes (the sequence column)? Numbers, dates and timestamps; strings compare as text
    ('9' > '10'), so they are refused.

    >>> from pyspark.sql.types import StringType, LongType, TimestampType
    >>> is_orderable_sequence(LongType()), is_orderable_sequence(TimestampType()), is_orderable_sequence(StringType())
    (True, True, False)
    """
    return _name(t) in ORDERABLE_SEQUENCE_TYPES
