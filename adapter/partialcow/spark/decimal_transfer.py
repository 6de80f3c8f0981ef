"""Decimals on their way from Spark to Arrow: sent as their unscaled 64-bit integers, turned back into decimals by
pyarrow on arrival.

Spark 3.5 converts each decimal it hands to Arrow (``mapInArrow``, a collect as Arrow) through a Java ``BigDecimal``
and its byte array, value by value: the largest single cost of handing rows over in a first build of TPC-DS
store_sales, whose 12 of 23 columns are decimals (``bench/README.md``, *Decimals as unscaled integers*). A decimal
of precision up to 18 is a 64-bit unscaled integer inside Spark already, and reading that integer (Spark's own
``UnscaledValue`` expression, which its optimizer uses for decimal sums) costs nothing; Arrow then makes the decimal
again by a cast to ``decimal128(38, 0)`` viewed with the column's scale, a reinterpretation of the same 16 bytes.

The extra projection has a fixed cost (py4j calls and its analysis, about a tenth of a second), so only the jobs
that hand many rows over use it: a first build's write job, and the locate job of a large batch.

Only top-level columns are sent this way; a decimal inside a struct, list or map, or wider than 18 digits, travels
as Spark sends it.

>>> import pyarrow as pa
>>> batch = pa.RecordBatch.from_pydict({"id": [1, 2, 3], "price": pa.array([1999, None, -5], pa.int64())})
>>> restore_decimals(batch, {"price": (7, 2)}).column(1).to_pylist()
[Decimal('19.99'), None, Decimal('-0.05')]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = ["MAX_UNSCALED_DIGITS", "Decimals", "restore_decimals", "send_unscaled", "unscaled_decimals"]

#: the widest decimal Spark keeps as a 64-bit unscaled integer (``Decimal.MAX_LONG_DIGITS``)
MAX_UNSCALED_DIGITS = 18

#: column name -> (precision, scale) of the decimal columns sent unscaled
Decimals = Mapping[str, tuple[int, int]]

_Data = TypeVar("_Data", pa.RecordBatch, pa.Table)


def unscaled_decimals(schema: StructType) -> dict[str, tuple[int, int]]:
    """The top-level decimal columns of ``schema`` that travel as unscaled integers, with precision and scale.

    >>> from pyspark.sql.types import DecimalType, StructField, StructType, IntegerType
    >>> unscaled_decimals(StructType([StructField("a", DecimalType(7, 2)), StructField("b", DecimalType(38, 2)),
    ...                               StructField("c", IntegerType())]))
    {'a': (7, 2)}
    """
    from pyspark.sql.types import DecimalType

    return {f.name: (f.dataType.precision, f.dataType.scale) for f in schema.fields
            if isinstance(f.dataType, DecimalType) and f.dataType.precision <= MAX_UNSCALED_DIGITS}


def send_unscaled(frame: DataFrame, decimals: Decimals) -> DataFrame:
    """``frame`` with each column of ``decimals`` replaced by its unscaled ``bigint`` (same name and position)."""
    if not decimals:
        return frame
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    from partialcow.table.base import quote_identifier
    from partialcow.table.java import jvm

    java = jvm(frame.sparkSession)
    # Catalyst's UnscaledValue has no Python or SQL function; each py4j call costs, so the classes are looked up once
    unscaled = java.org.apache.spark.sql.catalyst.expressions.UnscaledValue
    java_column = java.org.apache.spark.sql.Column
    columns = []
    for name in frame.columns:
        column = F.col(quote_identifier(name))
        if name in decimals:
            column = Column(java_column(unscaled(column._jc.expr()))).alias(name)
        columns.append(column)
    return frame.select(*columns)


def restore_decimals(data: _Data, decimals: Decimals) -> _Data:
    """``data`` (a record batch or table) with each column of ``decimals`` turned from unscaled integers back into
    ``decimal128(precision, scale)``; other columns, and names absent from ``data``, are left as they are."""
    if not decimals:
        return data
    columns = list(data.columns)
    fields = list(data.schema)
    for i, field in enumerate(fields):
        if field.name not in decimals or not pa.types.is_integer(field.type):
            continue
        precision, scale = decimals[field.name]
        target = pa.decimal128(precision, scale)
        column = columns[i]
        if isinstance(column, pa.ChunkedArray):
            columns[i] = pa.chunked_array([_decimal(c, target) for c in column.chunks], type=target)
        else:
            columns[i] = _decimal(column, target)
        fields[i] = pa.field(field.name, target, field.nullable, field.metadata)
    schema = pa.schema(fields, metadata=data.schema.metadata)
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    return pa.Table.from_arrays(columns, schema=schema)


def _decimal(unscaled: pa.Array, target: pa.Decimal128Type) -> pa.Array:
    # the unscaled integer as a decimal of scale 0, whose 16 bytes read with the target's scale are the value
    wide = pc.cast(unscaled, pa.decimal128(38, 0))
    return wide.view(target)
