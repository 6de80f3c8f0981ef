"""How dbt-partialcow writes new Parquet data files: laid out so later partial rewrites touch few pages."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "CALENDAR_METADATA",
    "DEFAULT_WRITE_OPTIONS",
    "ROWS_PER_PAGE",
    "ROW_GROUP_ROWS",
    "WRITER_OPTIONS",
    "WriterOptions",
    "WrittenFile",
    "conform",
    "dictionary_columns",
    "open_writer",
    "settle_nulls",
    "write_table",
]

# Rows per data page. A change at random rate p touches a page of k rows with probability 1-(1-p)^k:
# k=2,000 gives 2% of pages at p=0.001% and 18% at p=0.01%, whereas pyarrow's default 20,000 gives 18% and 86%.
# Clustered changes (recent rows, a key range) touch ceil(range/k)+1 pages, so small pages also pay off there.
# Going smaller costs ~30 header bytes + two page-index entries per page and a little compression: 2,000 keeps that
# overhead under 1% for typical 4-8 byte columns.
# Readers pay per page too: how much, against 20,000 rows per page and Iceberg's own files, is measured in
# bench/README.md ("Page size").
ROWS_PER_PAGE = 2_000
# Rows per row group. Page skipping works inside a row group, so the row group only bounds the memory and time of a
# full-chunk re-encode; ~1M rows keeps a chunk at a few MB for typical columns while footers stay small.
ROW_GROUP_ROWS = 1 << 20

@dataclass(frozen=True)
class WriterOptions:
    """The layout of the data files we write; every table format's own writer settings derive from it (Iceberg's
    ``write.parquet.*`` properties of the tables we create, see ``partialcow.spark.create``).

    >>> WriterOptions(rows_per_page=500).pyarrow_options()["max_rows_per_page"]
    500
    """

    rows_per_page: int = ROWS_PER_PAGE
    page_size_bytes: int = 256 * 1024  # wide values: keep pages small in bytes too
    # zstd: ~30% smaller than snappy at similar decode speed; re-encoding a few pages makes its slower encode cheap
    compression: str = "zstd"
    row_group_rows: int = ROW_GROUP_ROWS

    def pyarrow_options(self) -> dict[str, Any]:
        """``pyarrow.parquet`` writer options (``use_dictionary`` is replaced per schema by dictionary_columns())."""
        return {
            "write_page_index": True,  # page locations + per-page bounds: pages are found without reading headers
            # Dictionary encoding only for variable-length (BYTE_ARRAY) columns, see dictionary_columns(): numbers
            # are PLAIN, which readers scan several times faster, at the same size under zstd (bench/README.md,
            # "Measurements behind code choices"). PLAIN pages also patch without touching a dictionary.
            "use_dictionary": True,
            # Decimals of precision <= 18 as INT32/INT64 (as Spark writes them): readers decode them without
            # per-value byte-array work (FIXED_LEN_BYTE_ARRAY decimals slow a full scan down severalfold).
            "store_decimal_as_integer": True,
            "max_rows_per_page": self.rows_per_page,
            "data_page_size": self.page_size_bytes,
            "compression": self.compression,
            "write_page_checksum": True,  # a copied page keeps a valid CRC (it covers the page body only)
            "write_statistics": True,
            "row_group_size": self.row_group_rows,
        }


# Said in every file we write: its dates and timestamps are in the proleptic Gregorian calendar. Spark reads a file
# of a writer it does not know with spark.sql.parquet.datetimeRebaseModeInRead (EXCEPTION by default), so a date
# before 1582-10-15 (or a timestamp before 1900) failed every read of a Delta table holding one; a file that carries
# a Spark version from 3.0.0 on, without Spark's legacy-calendar key, is read as written, as Spark's own files are.
CALENDAR_METADATA = {b"org.apache.spark.version": b"3.0.0"}

#: the layout every new data file gets
WRITER_OPTIONS = WriterOptions()
DEFAULT_WRITE_OPTIONS: dict[str, Any] = WRITER_OPTIONS.pyarrow_options()


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The Parquet column paths of ``schema`` that :func:`write_table` dictionary-encodes: its BYTE_ARRAY leaves.

    Strings repeat (names, codes, states) and shrink a lot in a dictionary; numbers compress as well with zstd
    alone and read faster PLAIN.

    >>> import pyarrow as pa
    >>> dictionary_columns(pa.schema({"id": pa.int64(), "name": pa.string(), "tags": pa.list_(pa.string())}))
    ['name', 'tags.list.element']
    """
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink, store_schema=False)
    layout = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    return [layout.column(i).path for i in range(len(layout)) if layout.column(i).physical_type == "BYTE_ARRAY"]


@dataclass(frozen=True)
class WrittenFile:
    """A data file written by :func:`write_table`."""

    path: str
    num_rows: int
    size_bytes: int
    row_groups: int


def write_table(table: pa.Table, path: str | os.PathLike[str], **overrides: Any) -> WrittenFile:
    """Write ``table`` as a new data file with the product's layout (see :data:`DEFAULT_WRITE_OPTIONS`).

    ``overrides`` are ``pyarrow.parquet.write_table`` options that replace the defaults.

    >>> import pyarrow as pa, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> w = write_table(pa.table({"a": list(range(5000))}), p)
    >>> w.num_rows, w.row_groups
    (5000, 1)
    """
    path = os.fspath(path)
    options = {**DEFAULT_WRITE_OPTIONS, "use_dictionary": dictionary_columns(table.schema), **overrides}
    pq.write_table(table.replace_schema_metadata(_with_calendar(table.schema)), path, **options)
    meta = pq.ParquetFile(path).metadata
    return WrittenFile(path, meta.num_rows, os.path.getsize(path), meta.num_row_groups)


def open_writer(path: str | os.PathLike[str], schema: pa.Schema, **overrides: Any) -> pq.ParquetWriter:
    """A streaming writer with the same layout as :func:`write_table`, for rows that arrive batch by batch (pass
    ``row_group_size`` to ``write_table``/``write_batch`` calls; the writer itself takes the file-level options).

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> with open_writer(p, pa.schema({"a": pa.int64()})) as w:
    ...     w.write_table(pa.table({"a": [1, 2]}))
    >>> pq.read_table(p).num_rows
    2
    """
    options = {**DEFAULT_WRITE_OPTIONS, "use_dictionary": dictionary_columns(schema), **overrides}
    options.pop("row_group_size", None)
    return pq.ParquetWriter(os.fspath(path), schema.with_metadata(_with_calendar(schema)), **options)


def _with_calendar(schema: pa.Schema) -> dict[bytes, bytes]:
    return {**(schema.metadata or {}), **CALENDAR_METADATA}


def conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` as ``schema``'s columns, in its order and types (see :func:`settle_nulls`).

    >>> import pyarrow as pa
    >>> addr = pa.struct([pa.field("zip", pa.string(), nullable=False)])
    >>> spark_like = pa.StructArray.from_arrays([pa.array(["z", None])], names=["zip"], mask=pa.array([False, True]))
    >>> conform(pa.table({"k": [1, 2], "addr": spark_like}), pa.schema({"addr": addr})).to_pylist()
    [{'addr': {'zip': 'z'}}, {'addr': None}]
    """
    rows = rows.select(schema.names)
    columns = [pa.chunked_array([settle_nulls(c, f.type) for c in rows.column(i).chunks], rows.column(i).type)
               for i, f in enumerate(schema)]
    return pa.table(columns, names=schema.names).cast(schema)


def settle_nulls(values: pa.Array, target: pa.DataType) -> pa.Array:
    """``values`` ready to cast to ``target``, whose structs declare fields non-nullable: Spark hands a null struct
    over with null fields, also in those, and neither a cast nor the Parquet writer takes a null in a non-nullable
    field, although a null struct holds no field values in Parquet (its definition level stops above them). Where
    a null struct is the only reason a non-nullable field is null, that field's validity is dropped (its values
    there are never written); a null under a struct that is not null stays, for the cast to refuse.
    """
    t = values.type
    if not _requires_nested(target):
        return values
    if values.offset and (pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t)):
        # a slice (the insert writers' parts): from_arrays takes no validity with offsets of a slice
        values = pa.concat_arrays([values])
    if pa.types.is_struct(t) and pa.types.is_struct(target) and t.num_fields == target.num_fields:
        parent_null = values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None
        children = []
        for i in range(t.num_fields):
            child = settle_nulls(values.field(i), target.field(i).type)
            if (parent_null is not None and not target.field(i).nullable and child.null_count
                    and not (child.is_null().to_numpy(zero_copy_only=False) & ~parent_null).any()):
                child = _all_valid(child)
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=list(t),
                                          mask=None if parent_null is None else pa.array(parent_null))
    if pa.types.is_map(t) and pa.types.is_map(target):
        items = settle_nulls(values.items, target.item_type)
        return values if items is values.items else pa.MapArray.from_arrays(
            values.offsets, values.keys, items, type=t, mask=values.is_null() if values.null_count else None)
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and (pa.types.is_list(target) or
                                                                 pa.types.is_large_list(target)):
        elements = settle_nulls(values.values, target.value_type)
        kind = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        return values if elements is values.values else kind.from_arrays(
            values.offsets, elements, type=t, mask=values.is_null() if values.null_count else None)
    return values


def _requires_nested(t: pa.DataType) -> bool:
    """Whether ``t`` has a struct declaring a field non-nullable, at any depth."""
    if pa.types.is_struct(t):
        return any(not f.nullable or _requires_nested(f.type) for f in t)
    if pa.types.is_map(t):
        return _requires_nested(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _requires_nested(t.value_type)
    return False


def _all_valid(values: pa.Array) -> pa.Array:
    """``values`` with no null: its validity bitmap dropped (the values under it are whatever the buffers hold)."""
    t = values.type
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays([values.field(i) for i in range(t.num_fields)], fields=list(t))
    if pa.types.is_map(t):
        return pa.MapArray.from_arrays(values.offsets, values.keys, values.items, type=t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        kind = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        return kind.from_arrays(values.offsets, values.values, type=t)
    return pa.Array.from_buffers(t, len(values), [None, *values.buffers()[1:]], null_count=0, offset=values.offset)
