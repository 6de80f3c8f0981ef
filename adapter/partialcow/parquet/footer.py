"""What a Parquet footer says about each column: its type annotations, field id, and per row group its size, value
count and statistics, exactly as stored (min/max stay encoded bytes).

The table formats build their file metrics from this instead of asking a second Parquet reader to parse the footer
again (see ``partialcow.table.iceberg_metrics``).

>>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
>>> p = os.path.join(tempfile.mkdtemp(), "t.parquet")
>>> pq.write_table(pa.table({"a": pa.array([3, None, 1], pa.int32())}), p)
>>> footer = read_footer(p)
>>> column = footer.columns[0]
>>> column.path, column.physical_type, column.chunks[0].null_count, column.chunks[0].min_value
(('a',), 'INT32', 1, b'\\x01\\x00\\x00\\x00')
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from partialcow.parquet import _format as F
from partialcow.parquet._layout import ParquetLayout
from partialcow.parquet._thrift import TStruct

__all__ = ["ChunkStatistics", "FooterColumn", "ParquetFooter", "read_footer"]

# union LogicalType: the member ids of parquet.thrift, by name
LOGICAL_TYPE_NAMES = {
    1: "STRING", 2: "MAP", 3: "LIST", 4: "ENUM", 5: "DECIMAL", 6: "DATE", 7: "TIME", 8: "TIMESTAMP", 10: "INTEGER",
    11: "UNKNOWN", 12: "JSON", 13: "BSON", 14: "UUID", 15: "FLOAT16", 16: "VARIANT", 17: "GEOMETRY", 18: "GEOGRAPHY",
}
# union TimeUnit
TIME_UNIT_NAMES = {1: "MILLIS", 2: "MICROS", 3: "NANOS"}


@dataclass(frozen=True)
class ChunkStatistics:
    """One column chunk: its footer sizes and counts, and its ``Statistics`` as stored."""

    total_compressed_size: int
    num_values: int  # values including nulls (ColumnMetaData.num_values)
    has_statistics: bool  # the chunk carries a Statistics struct at all
    null_count: int | None
    min_value: bytes | None  # Statistics.min_value / max_value (encoded as PLAIN, without length prefix)
    max_value: bytes | None
    legacy_min_max: bool  # only the deprecated min/max fields are set (their order depends on the writer)


@dataclass(frozen=True)
class FooterColumn:
    """One leaf column of the schema with its chunks, one per row group."""

    path: tuple[str, ...]
    field_id: int | None
    physical_type: str  # BOOLEAN, INT32, INT64, INT96, FLOAT, DOUBLE, BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY
    type_length: int | None
    converted_type: int | None  # enum ConvertedType as stored
    logical_type: str | None  # a LOGICAL_TYPE_NAMES value
    decimal_scale: int | None
    int_bit_width: int | None
    int_signed: bool | None
    timestamp_unit: str | None  # MILLIS, MICROS or NANOS
    nested: bool  # below a group or repeated
    type_defined_order: bool  # min/max follow the type's order (ColumnOrder TYPE_ORDER, or no orders declared)
    chunks: tuple[ChunkStatistics, ...]


@dataclass(frozen=True)
class ParquetFooter:
    num_rows: int
    created_by: str | None
    columns: tuple[FooterColumn, ...]


def read_footer(path: str | os.PathLike[str]) -> ParquetFooter:
    """The footer facts of the local Parquet file ``path`` (reads the footer only)."""
    with ParquetLayout(path) as lay:
        orders = lay.fmd.val(F.FMD_COLUMN_ORDERS)
        order_items = orders.items if orders is not None else None
        columns = []
        for leaf in lay.leaves:
            el = leaf.element
            logical: TStruct | None = el.val(F.SE_LOGICAL_TYPE)
            member = next(iter(logical)) if logical else None
            detail = logical.val(member) if logical and member is not None else None
            scale = el.val(F.SE_SCALE)
            bit_width = signed = unit = None
            if member == F.LT_DECIMAL and detail is not None:
                scale = detail.val(1, scale)
            elif member == F.LT_INTEGER and detail is not None:
                bit_width, signed = detail.val(F.INTTYPE_BIT_WIDTH), bool(detail.val(F.INTTYPE_IS_SIGNED, True))
            elif member == 8 and detail is not None:  # TimestampType {1: isAdjustedToUTC, 2: unit}
                unit_union = detail.val(2)
                unit = TIME_UNIT_NAMES.get(next(iter(unit_union))) if unit_union else None
            chunks = []
            for rg in lay.row_groups:
                cmd = rg.val(F.RG_COLUMNS).items[leaf.index].val(F.CC_META_DATA)
                st = cmd.val(F.CMD_STATISTICS)
                has_v2 = st is not None and F.ST_MIN_VALUE in st and F.ST_MAX_VALUE in st
                chunks.append(ChunkStatistics(
                    total_compressed_size=cmd.val(F.CMD_TOTAL_COMPRESSED_SIZE),
                    num_values=cmd.val(F.CMD_NUM_VALUES),
                    has_statistics=st is not None,
                    null_count=None if st is None else st.val(F.ST_NULL_COUNT),
                    min_value=bytes(st.val(F.ST_MIN_VALUE)) if has_v2 else None,
                    max_value=bytes(st.val(F.ST_MAX_VALUE)) if has_v2 else None,
                    legacy_min_max=st is not None and not has_v2 and F.ST_MIN in st and F.ST_MAX in st,
                ))
            raw_id = el.val(F.SE_FIELD_ID)
            # ColumnOrder is a union whose member 1 is TYPE_ORDER; without the list, readers assume it
            ordered = order_items is None or (leaf.index < len(order_items) and 1 in order_items[leaf.index])
            columns.append(FooterColumn(
                path=leaf.path,
                field_id=None if raw_id is None else int(raw_id),
                physical_type=F.TYPE_NAMES[leaf.physical_type],
                type_length=leaf.type_length,
                converted_type=el.val(F.SE_CONVERTED_TYPE),
                logical_type=LOGICAL_TYPE_NAMES.get(member) if member is not None else None,
                decimal_scale=scale,
                int_bit_width=bit_width,
                int_signed=signed,
                timestamp_unit=unit,
                nested=leaf.nested,
                type_defined_order=ordered,
                chunks=tuple(chunks),
            ))
        created_by = lay.fmd.val(F.FMD_CREATED_BY)
        return ParquetFooter(
            num_rows=lay.num_rows,
            created_by=created_by.decode("utf-8", "replace") if created_by else None,
            columns=tuple(columns),
        )
