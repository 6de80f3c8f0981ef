"""Making pyarrow write a column with the source's physical layout.

Re-encoded pages are spliced under the source's footer, whose schema is kept exactly (Iceberg, Delta and the row
index read it): pages must have the physical type, type length and definition/repetition levels the schema
declares. pyarrow derives them from the Arrow type, so a few source layouts need a nudge:

- decimals: pyarrow sizes a FIXED_LEN_BYTE_ARRAY decimal by its precision (decimal(20, 4) takes 9 bytes), other
  writers do not (DuckDB stores every wide decimal in 16 bytes; INT64 may hold a small precision). The unscaled
  value's bytes do not depend on the declared precision, so the column is written with the largest precision
  that the source's width holds: the same bytes, statistics and page index.
- value encodings: BYTE_STREAM_SPLIT and the DELTA_* encodings are asked for by name (dictionary-encoded columns
  keep their dictionary); where pyarrow cannot write one, PLAIN is the closest layout every reader accepts.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from partialcow.exceptions import ParquetRewriteError
from partialcow.parquet import _format as F
from partialcow.parquet._layout import Leaf

# value encodings pyarrow writes when asked by name (use_dictionary off)
_WRITABLE_ENCODINGS = {5: "DELTA_BINARY_PACKED", 6: "DELTA_LENGTH_BYTE_ARRAY", 7: "DELTA_BYTE_ARRAY",
                       9: "BYTE_STREAM_SPLIT"}


def decimal_precision_for(leaf: Leaf) -> int | None:
    """The largest decimal precision pyarrow stores with ``leaf``'s physical type and width; None for BYTE_ARRAY.

    >>> from partialcow.parquet._thrift import T_I32, TStruct
    >>> el = TStruct(); el.put(F.SE_TYPE, T_I32, F.FIXED_LEN_BYTE_ARRAY); el.put(F.SE_TYPE_LENGTH, T_I32, 16)
    >>> decimal_precision_for(Leaf(0, ("d",), 0, el, 1, 0, False))
    38
    """
    ptype = leaf.physical_type
    if ptype == F.INT32:
        return 9
    if ptype == F.INT64:
        return 18
    if ptype == F.FIXED_LEN_BYTE_ARRAY and leaf.type_length:
        # digits of the largest positive two's-complement value of that many bytes
        return math.floor(math.log10(2 ** (8 * leaf.type_length - 1) - 1))
    return None


def _natural_width(precision: int) -> int:
    """The bytes pyarrow gives a FIXED_LEN_BYTE_ARRAY decimal of ``precision`` (the fewest that hold it)."""
    width = 1
    while 10 ** precision - 1 >= 2 ** (8 * width - 1):
        width += 1
    return width


def _decimal(t: pa.DataType, leaf: Leaf) -> pa.DataType:
    ptype, p = leaf.physical_type, t.precision
    if ((ptype == F.INT32 and p <= 9) or (ptype == F.INT64 and 9 < p <= 18)
            or (ptype == F.FIXED_LEN_BYTE_ARRAY and leaf.type_length == _natural_width(p))):
        return t  # pyarrow chooses this layout itself: no cast
    precision = decimal_precision_for(leaf)
    if precision is None or precision < p:
        return t  # a source precision its width cannot hold is left for the layout check to report
    if precision <= 38:
        return pa.decimal128(precision, t.scale)
    if precision <= 76:
        return pa.decimal256(precision, t.scale)
    return t


def _writable(t: pa.DataType, leaves: Iterator[Leaf]) -> pa.DataType:
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = t.value_field.with_type(_writable(t.value_type, leaves))
        if pa.types.is_fixed_size_list(t):
            return pa.list_(item, t.list_size)
        return pa.large_list(item) if pa.types.is_large_list(t) else pa.list_(item)
    if pa.types.is_map(t):
        key = t.key_field.with_type(_writable(t.key_type, leaves))
        item = t.item_field.with_type(_writable(t.item_type, leaves))
        return pa.map_(key, item, keys_sorted=t.keys_sorted)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_writable(f.type, leaves)) for f in t])
    leaf = next(leaves)
    return _decimal(t, leaf) if pa.types.is_decimal(t) else t


def writable_type(t: pa.DataType, leaves: list[Leaf]) -> pa.DataType:
    """``t`` with each decimal leaf re-declared so that pyarrow writes it with that leaf's physical type and width.

    >>> from partialcow.parquet._thrift import T_I32, TStruct
    >>> el = TStruct(); el.put(F.SE_TYPE, T_I32, F.FIXED_LEN_BYTE_ARRAY); el.put(F.SE_TYPE_LENGTH, T_I32, 16)
    >>> writable_type(pa.decimal128(20, 4), [Leaf(0, ("d",), 0, el, 1, 0, False)])
    Decimal128Type(decimal128(38, 4))
    """
    it = iter(leaves)
    try:
        out = _writable(t, it)
    except StopIteration:  # the Arrow type has more leaves than the schema: let the layout check report it
        return t
    return out


def column_encoding(leaf: Leaf, encoding: int | None) -> str | None:
    """The pyarrow ``column_encoding`` name that reproduces the source's value ``encoding``, or None for PLAIN
    (and for encodings pyarrow cannot write: PLAIN is then the closest layout readers accept)."""
    if encoding is None:
        return None
    if encoding == F.RLE and leaf.physical_type == F.BOOLEAN:
        return "RLE"
    return _WRITABLE_ENCODINGS.get(encoding)


def describe(leaf: Leaf) -> str:
    """A leaf's physical layout in words, for error messages."""
    ptype = F.TYPE_NAMES[leaf.physical_type] if leaf.physical_type is not None else "group"
    if leaf.physical_type == F.FIXED_LEN_BYTE_ARRAY:
        ptype += f"({leaf.type_length})"
    return f"{ptype}, max definition level {leaf.max_def}, max repetition level {leaf.max_rep}"


def check_same_layout(path: str, column: str, src: list[Leaf], new: list[Leaf]) -> None:
    """Raise when the re-encoded leaves differ from the source's in physical type, width or levels."""

    def key(leaf: Leaf) -> tuple[Any, ...]:
        width = leaf.type_length if leaf.physical_type == F.FIXED_LEN_BYTE_ARRAY else None
        return leaf.physical_type, width, leaf.max_def, leaf.max_rep

    problem = None
    if len(src) != len(new):
        problem = f"pyarrow writes {len(new)} leaf column(s) where the file has {len(src)}"
    else:
        for a, b in zip(src, new):
            if key(a) != key(b):
                problem = f"its leaf {'.'.join(a.path)} is {describe(a)}; pyarrow writes {describe(b)}"
                break
    if problem is not None:
        raise ParquetRewriteError(
            f"{path}: column {column!r} cannot be re-encoded with the file's physical layout ({problem}). The page "
            "engine never changes a file's schema (table formats and the row index read it). Rewrite the file "
            "with a full writer (e.g. Spark) and retry.")
