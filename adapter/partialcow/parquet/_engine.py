"""Partial copy-on-write of one Parquet file: re-encode only the pages holding changed or deleted rows.

How a rewrite runs (see ``rewrite_file``):

1. Plan: for every column chunk, find the pages holding a candidate change (a position to update in that column, or a
   position to delete) from the OffsetIndex or the page headers.
2. Decode only those pages: they are copied with the chunk's dictionary page into a small in-memory Parquet file
   (a "sub-file", same schema element, one row group) that pyarrow decodes.
3. Compare with the new values; pages whose rows really change (or lose rows) are re-encoded by writing the patched
   rows with pyarrow into another small in-memory file (a "mini file") whose data pages replace them. Runs of
   untouched pages are copied as single byte ranges.
4. Rebuild chunk/row-group/file metadata and the page indexes; write ``dst`` through a temporary file and rename.

Steps 2-3 run per touched column chunk in a thread pool (one thread per core by default) while step 4 writes the
output in file order, copying untouched ranges as soon as the chunks before them are done; the bytes do not depend
on the thread count. A per-chunk cost model switches to a full-chunk re-encode when most of a chunk is touched, or
when patching would re-encode a dictionary that holds most of the chunk's values (the chunk is then written PLAIN),
and, with a single thread, to a whole-file pyarrow rewrite when nearly everything is touched.
"""

from __future__ import annotations

import bisect
import copy
import math
import os
import secrets
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from partialcow.exceptions import InvalidChangeError, ParquetRewriteError
from partialcow.metrics import WriteMetrics
from partialcow.parquet import _format as F
from partialcow.parquet._column_index import PageBounds, encode_column_index
from partialcow.parquet._layout import Chunk, Page, ParquetLayout, ThriftClock, TopField, sort_key_fn
from partialcow.parquet._offset_index import PageLocations, encode_offset_indexes
from partialcow.parquet._thrift import T_BINARY, T_I32, T_I64, T_LIST, T_STRUCT, TList, TStruct

__all__ = ["ROW_POSITION", "RewriteReport", "rewrite_file"]

ROW_POSITION = "_partialcow_row_position"

_CODEC_TO_ARROW = {0: "none", 1: "snappy", 2: "gzip", 4: "brotli", 6: "zstd", 7: "lz4"}
_PAGE_NAME = {F.DATA_PAGE: "DATA_PAGE", F.DATA_PAGE_V2: "DATA_PAGE_V2"}


@dataclass(frozen=True)
class RewriteReport:
    """What one :func:`rewrite_file` call did.

    Page counts are data pages of the source: ``pages_rewritten`` were replaced by re-encoded pages,
    ``pages_copied`` were copied byte for byte. ``thrift_seconds`` is the part of ``elapsed_seconds`` spent
    (de)serialising Thrift (footer, page headers, page indexes).
    """

    src: str
    dst: str
    rows_before: int
    rows_after: int
    rows_updated: int
    rows_deleted: int
    pages_total: int
    pages_rewritten: int
    pages_copied: int
    bytes_copied: int
    bytes_reencoded: int
    columns_rewritten: tuple[str, ...]
    full_chunk_rewrites: tuple[tuple[int, str, str], ...]
    full_file_rewrite: str | None
    bloom_filters_dropped: tuple[tuple[int, str], ...]
    elapsed_seconds: float
    thrift_seconds: float

    def to_metrics(self) -> WriteMetrics:
        """The counts as :class:`partialcow.metrics.WriteMetrics` (one file rewritten)."""
        return WriteMetrics(
            rows_updated=self.rows_updated, rows_deleted=self.rows_deleted, files_rewritten=1,
            pages_rewritten=self.pages_rewritten, pages_copied=self.pages_copied, bytes_copied=self.bytes_copied,
            bytes_reencoded=self.bytes_reencoded, duration_ms=int(self.elapsed_seconds * 1000))


class _NeedFullFile(Exception):
    """Raised inside the page path when a page cannot be re-encoded faithfully; the caller rewrites the file."""


# ---------------------------------------------------------------------------------------------------------------
# change validation


@dataclass
class _Changes:
    upd_pos: np.ndarray  # sorted global positions
    upd: dict[str, pa.Array]  # top-level name -> new values, aligned with upd_pos, cast to the file's read type
    del_pos: np.ndarray  # sorted unique global positions
    # per column, the positions whose value really differs (known once compared, see _real_changes)
    changed: dict[str, np.ndarray] | None = None

    def candidate_rows(self, name: str) -> np.ndarray:
        """Global positions where column ``name`` may change (deletes excluded)."""
        if name not in self.upd:
            return self.upd_pos[:0]
        return self.upd_pos if self.changed is None else self.changed[name]


def _distinct_rows(parts: list[np.ndarray], num_rows: int) -> int:
    """How many distinct positions the parts hold (a mask, not a sort: parts may total many times ``num_rows``)."""
    if not parts:
        return 0
    seen = np.zeros(num_rows, dtype=bool)
    for part in parts:
        seen[part] = True
    return int(np.count_nonzero(seen))


def _unique(a: np.ndarray) -> np.ndarray:
    """Sorted unique values (numpy 2's hash-based np.unique is far slower on large int arrays)."""
    a = np.sort(a)
    if a.size < 2:
        return a
    return a[np.concatenate(([True], a[1:] != a[:-1]))]


def _positions(values: Any, what: str, path: str) -> np.ndarray:
    if isinstance(values, (pa.ChunkedArray, pa.Array)):
        if values.null_count:
            raise InvalidChangeError(f"{what} for {path} contain nulls; give a row position for every entry")
        values = values.to_numpy(zero_copy_only=False)
    arr = np.asarray(values)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise InvalidChangeError(f"{what} for {path} must be integers, got {arr.dtype}")
    return arr.astype(np.int64, copy=False).ravel()


def _check_range(pos: np.ndarray, n: int, what: str, path: str) -> None:
    if pos.size and (pos.min() < 0 or pos.max() >= n):
        bad = pos[(pos < 0) | (pos >= n)]
        raise InvalidChangeError(
            f"{what} for {path} are out of range: {bad.size} position(s) outside [0, {n}), e.g. {int(bad[0])}")


def _prepare(lay: ParquetLayout, read_schema: pa.Schema, updates: pa.Table | None, deletes: Any) -> _Changes:
    path = lay.path
    n = lay.num_rows
    del_pos = _unique(_positions(deletes if deletes is not None else [], "deletes", path))
    _check_range(del_pos, n, "deletes", path)
    upd: dict[str, pa.Array] = {}
    upd_pos = np.zeros(0, dtype=np.int64)
    if updates is not None:
        if isinstance(updates, pa.RecordBatch):
            updates = pa.Table.from_batches([updates])
        if not isinstance(updates, pa.Table):
            raise InvalidChangeError(f"updates for {path} must be a pyarrow.Table, got {type(updates).__name__}")
        if ROW_POSITION not in updates.column_names:
            raise InvalidChangeError(f"updates for {path} lack the {ROW_POSITION!r} column (0-based row positions)")
        pos = _positions(updates.column(ROW_POSITION), "update positions", path)
        _check_range(pos, n, "update positions", path)
        order = np.argsort(pos, kind="stable")
        upd_pos = pos[order]
        if upd_pos.size > 1 and (dup := upd_pos[1:][upd_pos[1:] == upd_pos[:-1]]).size:
            raise InvalidChangeError(
                f"updates for {path} repeat row position(s) {sorted(set(dup.tolist()))[:5]}: give each row once")
        both = upd_pos[np.isin(upd_pos, del_pos, kind="sort")] if del_pos.size else upd_pos[:0]
        if both.size:
            raise InvalidChangeError(f"row position(s) {both[:5].tolist()} of {path} are both updated and deleted; "
                                     "pass each row to one of them")
        take = pa.array(order)
        for name in updates.column_names:
            if name == ROW_POSITION:
                continue
            idx = read_schema.get_field_index(name)
            if idx < 0:
                raise InvalidChangeError(f"updates name column {name!r}, which {path} does not have; "
                                         f"its columns are {read_schema.names}")
            target = read_schema.field(idx)
            col = updates.column(name)
            if col.type in _VIEW_TYPES:  # no take kernel for view types
                col = col.cast(_VIEW_TYPES[col.type])
            col = col.take(take).combine_chunks()
            try:
                col = col.cast(target.type, safe=True) if col.type != target.type else col
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise InvalidChangeError(f"cannot cast the new values of column {name!r} ({col.type}) to the type "
                                         f"of {path} ({target.type}): {exc}") from exc
            if not target.nullable and col.null_count:
                raise InvalidChangeError(f"column {name!r} of {path} is required (non-nullable) but the updates "
                                         f"set {col.null_count} row(s) to null")
            upd[name] = col
    return _Changes(upd_pos, upd, del_pos)


# ---------------------------------------------------------------------------------------------------------------
# in-memory Parquet files: decoding pages (sub-files) and encoding pages (mini files)


def _page_num_values(lay: ParquetLayout, page: Page) -> int:
    h = lay.ensure_header(page)
    if h.val(F.PH_TYPE) == F.DATA_PAGE_V2:
        return h.val(F.PH_DATA_PAGE_HEADER_V2).val(F.DPH2_NUM_VALUES)
    return h.val(F.PH_DATA_PAGE_HEADER).val(F.DPH_NUM_VALUES)


def _stats_key(page_type: int, encoding: int) -> tuple[int, int]:
    # Writers disagree on the page type of v2 pages in encoding_stats (pyarrow declares DATA_PAGE): match both.
    return (F.DATA_PAGE if page_type == F.DATA_PAGE_V2 else page_type), encoding


def _page_type_for_stats(kind: int, ch: Chunk, lay: ParquetLayout) -> int:
    if kind != F.DATA_PAGE:
        return kind
    return lay.ensure_header(ch.pages[0]).val(F.PH_TYPE)


def _page_encoding(lay: ParquetLayout, page: Page) -> tuple[int, int]:
    h = lay.ensure_header(page)
    ptype = h.val(F.PH_TYPE)
    sub = h.val(F.PH_DATA_PAGE_HEADER_V2 if ptype == F.DATA_PAGE_V2 else F.PH_DATA_PAGE_HEADER)
    return ptype, sub.val(F.DPH2_ENCODING if ptype == F.DATA_PAGE_V2 else F.DPH_ENCODING)


def _decode_pages(lay: ParquetLayout, top: TopField, rg: int, pages: dict[int, list[Page]] | None, nrows: int,
                  ) -> pa.Array:
    """Decode rows of one top-level field: ``pages`` maps each leaf to the pages to decode (None: whole chunks)."""
    buf = bytearray(b"PAR1")
    ccs = []
    for leaf in top.leaves:
        ch = lay.chunk(rg, leaf)
        start = len(buf)
        buf += lay.buf[ch.start:ch.prefix_end]
        data_start = len(buf)
        cmd = ch.cmd.copy()
        if pages is None:
            buf += lay.buf[ch.prefix_end:ch.end]
        else:
            nvals = 0
            for p in pages[leaf]:
                buf += lay.buf[p.offset:p.offset + p.size]
                nvals += _page_num_values(lay, p)
            cmd.put(F.CMD_NUM_VALUES, T_I64, nvals)
        cmd.drop(F.CMD_INDEX_PAGE_OFFSET, F.CMD_STATISTICS, F.CMD_ENCODING_STATS, F.CMD_BLOOM_FILTER_OFFSET,
                 F.CMD_BLOOM_FILTER_LENGTH, F.CMD_SIZE_STATISTICS, F.CMD_GEOSPATIAL_STATISTICS,
                 F.CMD_DICTIONARY_PAGE_OFFSET)
        if data_start > start:
            cmd.put(F.CMD_DICTIONARY_PAGE_OFFSET, T_I64, start)
        cmd.put(F.CMD_DATA_PAGE_OFFSET, T_I64, data_start)
        cmd.put(F.CMD_TOTAL_COMPRESSED_SIZE, T_I64, len(buf) - start)
        cmd.put(F.CMD_TOTAL_UNCOMPRESSED_SIZE, T_I64, len(buf) - start)
        cc = TStruct()
        cc.put(F.CC_FILE_OFFSET, T_I64, 0)
        cc.put(F.CC_META_DATA, T_STRUCT, cmd)
        ccs.append(cc)
    fmd = _schema_only_footer(lay, top)
    rgs = TStruct()
    rgs.put(F.RG_COLUMNS, T_LIST, TList(T_STRUCT, ccs))
    rgs.put(F.RG_TOTAL_BYTE_SIZE, T_I64, len(buf))
    rgs.put(F.RG_NUM_ROWS, T_I64, nrows)
    fmd.put(F.FMD_NUM_ROWS, T_I64, nrows)
    fmd.put(F.FMD_ROW_GROUPS, T_LIST, TList(T_STRUCT, [rgs]))
    footer = lay.clock.encode(fmd)
    buf += footer + len(footer).to_bytes(4, "little") + b"PAR1"
    table = pq.ParquetFile(pa.BufferReader(bytes(buf))).read_row_group(0, use_threads=False)
    return table.column(0).combine_chunks()


def _schema_only_footer(lay: ParquetLayout, top: TopField | None) -> TStruct:
    """A footer with no row groups; with ``top`` only that top-level field's schema subtree."""
    root = lay.schema[0].copy()
    if top is None:
        schema = lay.schema
    else:
        root.put(F.SE_NUM_CHILDREN, T_I32, 1)
        schema = [root] + lay.schema[top.schema_start:top.schema_end]
    fmd = TStruct()
    fmd.put(F.FMD_VERSION, T_I32, lay.fmd.val(F.FMD_VERSION, 1))
    fmd.put(F.FMD_SCHEMA, T_LIST, TList(T_STRUCT, schema))
    fmd.put(F.FMD_NUM_ROWS, T_I64, 0)
    fmd.put(F.FMD_ROW_GROUPS, T_LIST, TList(T_STRUCT, []))
    if F.FMD_CREATED_BY in lay.fmd:  # readers key per-writer workarounds on it
        fmd.put(F.FMD_CREATED_BY, T_BINARY, lay.fmd.val(F.FMD_CREATED_BY))
    return fmd


def _read_schema(lay: ParquetLayout) -> pa.Schema:
    """The Arrow schema pyarrow derives from the Parquet schema alone (what sub-files decode to)."""
    fmd = _schema_only_footer(lay, None)
    footer = lay.clock.encode(fmd)
    buf = b"PAR1" + footer + len(footer).to_bytes(4, "little") + b"PAR1"
    return pq.ParquetFile(pa.BufferReader(buf)).schema_arrow


@dataclass
class _Mini:
    lay: ParquetLayout
    chunks: list[list[Chunk]]  # per row group (one per encoded group), per leaf


def _encode_mini(lay: ParquetLayout, top: TopField, groups: list[pa.Array], nullable: bool, *, codec: int,
                 dictionary: bool, v2: bool, crc: bool, rows_per_page: int | None, opts: dict[str, Any]) -> _Mini:
    """Encode ``groups`` (one row group each) as a one-column Parquet file in memory, laid out like ``top``'s chunks.

    One writer and one footer parse for every group: a fixed cost paid per chunk, not per run of touched pages.
    """
    leaves = [lay.leaves[i] for i in top.leaves]
    ptypes = {leaf.physical_type for leaf in leaves}
    sink = pa.BufferOutputStream()
    schema = pa.schema([pa.field(top.name, groups[0].type, nullable=nullable)])
    kwargs: dict[str, Any] = dict(
        compression=_CODEC_TO_ARROW.get(codec, "lz4"), use_dictionary=dictionary, write_statistics=True,
        data_page_version="2.0" if v2 else "1.0", write_page_checksum=crc, write_page_index=True,
        store_schema=False, version="2.6",
        store_decimal_as_integer=bool(ptypes & {F.INT32, F.INT64}),
        use_deprecated_int96_timestamps=F.INT96 in ptypes)
    if rows_per_page:
        kwargs["max_rows_per_page"] = max(1, int(rows_per_page))
    kwargs.update(opts)
    with pq.ParquetWriter(sink, schema, **kwargs) as writer:
        for arr in groups:
            writer.write_table(pa.table([arr], schema=schema), row_group_size=max(1, len(arr)))
    mini = ParquetLayout(sink.getvalue().to_pybytes(), clock=lay.clock, name="<re-encoded pages>")
    if len(mini.leaves) != len(leaves):
        raise _NeedFullFile(f"column {top.name!r} re-encodes to {len(mini.leaves)} leaves, not {len(leaves)}")
    for src, new in zip(leaves, mini.leaves):
        a = (src.physical_type, src.type_length if src.physical_type == F.FIXED_LEN_BYTE_ARRAY else None,
             src.max_def, src.max_rep)
        b = (new.physical_type, new.type_length if new.physical_type == F.FIXED_LEN_BYTE_ARRAY else None,
             new.max_def, new.max_rep)
        if a != b:
            raise _NeedFullFile(f"pyarrow cannot re-encode column {'.'.join(src.path)} with the same physical "
                                f"layout (type/length/def/rep {a} vs {b})")
    return _Mini(mini, [[mini.chunk(rg, i) for i in range(len(leaves))] for rg in range(len(groups))])


_VIEW_TYPES = {pa.string_view(): pa.large_string(), pa.binary_view(): pa.large_binary()}


def _patch(arr: pa.Array, base: int, upd_rows: np.ndarray, upd_vals: pa.Array | None, del_rows: np.ndarray
           ) -> pa.Array:
    """Rows ``base .. base+len(arr)`` of a chunk with updates applied and deleted rows removed."""
    n = len(arr)
    if not upd_rows.size and not del_rows.size:
        return arr
    if arr.type in _VIEW_TYPES:  # pyarrow has no take kernel for view types
        vals = upd_vals.cast(_VIEW_TYPES[arr.type]) if upd_vals is not None else None
        return _patch(arr.cast(_VIEW_TYPES[arr.type]), base, upd_rows, vals, del_rows).cast(arr.type)
    if upd_rows.size and (patched := _patch_fixed_width(arr, upd_rows - base, upd_vals)) is not None:
        if not del_rows.size:
            return patched
        arr, upd_rows = patched, upd_rows[:0]
    idx = np.arange(n, dtype=np.int64)
    if upd_rows.size:
        idx[upd_rows - base] = n + np.arange(upd_rows.size, dtype=np.int64)
        arr = pa.concat_arrays([arr, upd_vals])
    if del_rows.size:
        keep = np.ones(n, dtype=bool)
        keep[del_rows - base] = False
        idx = idx[keep]
    return arr.take(pa.array(idx))


def _patch_fixed_width(arr: pa.Array, rows: np.ndarray, vals: pa.Array) -> pa.Array | None:
    """``arr`` with ``vals`` written at ``rows`` by copying its value buffer (a gather of every row costs ~10x more
    when few rows change); None for types without one fixed-width value buffer (strings, booleans, nested)."""
    t = arr.type
    if (isinstance(t, pa.ExtensionType) or pa.types.is_boolean(t) or pa.types.is_dictionary(t)
            or arr.offset or vals.offset or vals.type != t or len(arr.buffers()) != 2):
        return None
    try:
        width = t.byte_width
    except ValueError:  # not a fixed-width type
        return None
    n = len(arr)
    unit = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(width)
    if unit is None and rows.size * 8 > n:  # wide values scattered over many rows: the gather is faster
        return None
    if unit is not None:
        data = np.frombuffer(arr.buffers()[1], dtype=unit, count=n).copy()
        data[rows] = np.frombuffer(vals.buffers()[1], dtype=unit, count=len(vals))
    else:
        data = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=n * width).reshape(n, width).copy()
        data[rows] = np.frombuffer(vals.buffers()[1], dtype=np.uint8, count=len(vals) * width).reshape(-1, width)
    validity = None
    if arr.null_count or vals.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False).copy()
        valid[rows] = vals.is_valid().to_numpy(zero_copy_only=False)
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(data)])


def _float_bits(arr: pa.Array) -> np.ndarray:
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[arr.type.byte_width]
    return arr.fill_null(0).to_numpy(zero_copy_only=False).view(width)


def _same_values(a: pa.Array, b: pa.Array) -> bool:
    """Exact equality, floats compared bit for bit (NaN equals NaN, -0.0 differs from 0.0)."""
    if a.type != b.type or len(a) != len(b):
        return False
    if pa.types.is_floating(a.type):
        return a.is_null().equals(b.is_null()) and bool((_float_bits(a) == _float_bits(b)).all())
    return a.equals(b)


def _changed_mask(old: pa.Array, new: pa.Array) -> np.ndarray:
    """True where ``new`` differs from ``old`` (nulls equal nulls; floats bit for bit, except any NaN equals NaN)."""
    if not len(old):
        return np.zeros(0, dtype=bool)
    t = old.type
    if pa.types.is_floating(t):
        o_null = old.is_null().to_numpy(zero_copy_only=False)
        n_null = new.is_null().to_numpy(zero_copy_only=False)
        o, n = old.fill_null(0).to_numpy(zero_copy_only=False), new.fill_null(0).to_numpy(zero_copy_only=False)
        same = (_float_bits(old) == _float_bits(new)) | (np.isnan(o) & np.isnan(n))
        return np.where(o_null | n_null, o_null != n_null, ~same)
    if pa.types.is_nested(t) or pa.types.is_dictionary(t) or isinstance(t, pa.ExtensionType):
        return np.array([a != b for a, b in zip(old.to_pylist(), new.to_pylist())], dtype=bool)
    try:
        same = pc.fill_null(pc.equal(old, new), False)
    except pa.ArrowNotImplementedError:
        return np.array([a != b for a, b in zip(old.to_pylist(), new.to_pylist())], dtype=bool)
    same = pc.or_(same, pc.and_(pc.is_null(old), pc.is_null(new)))
    return ~same.to_numpy(zero_copy_only=False)


def _dictionary_encoded_pages(lay: ParquetLayout, ch: Chunk) -> list[bool]:
    """Per data page: is it dictionary-encoded? (encoding_stats answer without reading headers when uniform)"""
    if ch.prefix_end == ch.start:
        return [False] * len(ch.pages)
    stats = ch.cmd.val(F.CMD_ENCODING_STATS)
    if stats is not None:
        data = {e.val(F.PES_ENCODING) for e in stats.items if e.val(F.PES_PAGE_TYPE) != F.DICTIONARY_PAGE}
        if data and data <= {F.PLAIN_DICTIONARY, F.RLE_DICTIONARY}:
            return [True] * len(ch.pages)
    return [_page_encoding(lay, p)[1] in (F.PLAIN_DICTIONARY, F.RLE_DICTIONARY) for p in ch.pages]


def _dictionary_pays(lay: ParquetLayout, ch: Chunk) -> bool:
    """Should a chunk re-encoded whole keep dictionary encoding? Yes if it had a dictionary, unless that dictionary
    holds more entries than half the chunk's values: most values are then distinct, so the dictionary saves little
    space and costs a hash per value on write and an indirection per value on read (see ``writer.py``: PLAIN
    numbers scan faster in Spark). Pages patched in place always keep the chunk's dictionary."""
    if ch.prefix_end == ch.start:
        return False
    h, _ = lay.page_header(ch.start)
    dph = h.val(F.PH_DICTIONARY_PAGE_HEADER)
    if h.val(F.PH_TYPE) != F.DICTIONARY_PAGE or dph is None:
        return True
    return 2 * dph.val(F.DICT_NUM_VALUES) <= ch.cmd.val(F.CMD_NUM_VALUES)


def _dictionary_size(lay: ParquetLayout, ch: Chunk) -> int:
    h, _ = lay.page_header(ch.start)
    return h.val(F.PH_DICTIONARY_PAGE_HEADER).val(F.DICT_NUM_VALUES)


_FIXED_WIDTH = {F.INT32: 4, F.INT64: 8, F.FLOAT: 4, F.DOUBLE: 8}
_CODEC_TO_DECOMPRESS = {1: "snappy", 2: "gzip", 4: "brotli", 6: "zstd", 7: "lz4_raw"}


def _plain_fixed_width(body: bytes, n: int, physical_type: int, arrow_type: pa.DataType) -> pa.Array | None:
    """``n`` PLAIN values of a 4- or 8-byte physical type as ``arrow_type``, straight from the bytes; None where
    the Arrow type does not share the physical layout (narrow ints, ...)."""
    width = _FIXED_WIDTH.get(physical_type)
    if width is None or len(body) < n * width:
        return None
    t = arrow_type
    if pa.types.is_decimal128(t) and physical_type in (F.INT32, F.INT64):
        wide = np.empty((n, 2), dtype=np.int64)  # little-endian 128-bit two's complement
        wide[:, 0] = np.frombuffer(body, dtype=np.int32 if width == 4 else np.int64, count=n)
        wide[:, 1] = wide[:, 0] >> 63
        return pa.Array.from_buffers(t, n, [None, pa.py_buffer(wide.tobytes())])
    same_layout = ((pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t))
                   and not pa.types.is_interval(t) and t.bit_width == 8 * width
                   and pa.types.is_floating(t) == (physical_type in (F.FLOAT, F.DOUBLE)))
    if not same_layout:
        return None
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(body[:n * width])])


_DICTIONARY_TOO_LARGE = "dictionary too large to patch pages"


def _dictionary_too_large(lay: ParquetLayout, ch: Chunk, run_rows: list[int]) -> bool:
    """Is re-encoding the whole chunk cheaper than patching runs of its dictionary-encoded pages (``run_rows``: the
    rows each run re-encodes)?

    Every dictionary-encoded run re-encodes the whole dictionary first (see _encode_runs); a whole-chunk re-encode
    decodes and encodes every row instead. pyarrow encodes a row PLAIN about ten times faster than through a
    dictionary, so where the chunk would drop its dictionary (see _dictionary_pays) the whole chunk is cheaper from
    half a chunk's worth of rows on; where it keeps it, from three.
    """
    if not run_rows:
        return False
    pays = _dictionary_pays(lay, ch)
    k = _max_page_rows(ch) or 1
    lead = -(-_dictionary_size(lay, ch) // k) * k
    return sum(lead + rows for rows in run_rows) > (3 if pays else 0.5) * ch.num_rows


def _dictionary_values(lay: ParquetLayout, top: TopField, ch: Chunk, arrow_type: pa.DataType | None = None
                       ) -> pa.Array:
    """The values of a chunk's dictionary page, in dictionary order (as ``arrow_type`` where given).

    A dictionary page body is PLAIN-encoded values. Fixed-width numbers are read straight from the decompressed
    bytes; anything else is wrapped as the body of a v1 data page of a REQUIRED column (no levels) in an in-memory
    file with the same codec, which pyarrow decodes.
    """
    h, hs = lay.page_header(ch.start)
    if h.val(F.PH_TYPE) != F.DICTIONARY_PAGE:
        raise ParquetRewriteError(f"{lay.path}: the chunk of column {top.name!r} in row group {ch.rg} does not "
                                  "start with its dictionary page")
    n = h.val(F.PH_DICTIONARY_PAGE_HEADER).val(F.DICT_NUM_VALUES)
    body = lay.buf[ch.start + hs:ch.start + hs + h.val(F.PH_COMPRESSED_SIZE)]
    codec = ch.cmd.val(F.CMD_CODEC)
    leaf = lay.leaves[top.leaves[0]]
    if arrow_type is not None and leaf.physical_type in _FIXED_WIDTH and (codec == 0 or codec in _CODEC_TO_DECOMPRESS):
        raw = bytes(body) if codec == 0 else pa.decompress(
            body, decompressed_size=h.val(F.PH_UNCOMPRESSED_SIZE), codec=_CODEC_TO_DECOMPRESS[codec], asbytes=True)
        values = _plain_fixed_width(raw, n, leaf.physical_type, arrow_type)
        if values is not None:
            return values
    dph = TStruct()
    dph.put(F.DPH_NUM_VALUES, T_I32, n)
    dph.put(F.DPH_ENCODING, T_I32, F.PLAIN)
    dph.put(F.DPH_DEF_ENCODING, T_I32, F.RLE)
    dph.put(F.DPH_REP_ENCODING, T_I32, F.RLE)
    page = TStruct()
    page.put(F.PH_TYPE, T_I32, F.DATA_PAGE)
    page.put(F.PH_UNCOMPRESSED_SIZE, T_I32, h.val(F.PH_UNCOMPRESSED_SIZE))
    page.put(F.PH_COMPRESSED_SIZE, T_I32, h.val(F.PH_COMPRESSED_SIZE))
    page.put(F.PH_DATA_PAGE_HEADER, T_STRUCT, dph)
    buf = bytearray(b"PAR1")
    buf += lay.clock.encode(page)
    buf += body
    el = lay.schema[top.schema_start].copy()
    el.put(F.SE_REPETITION, T_I32, F.REQUIRED)
    cmd = ch.cmd.copy()
    cmd.drop(F.CMD_INDEX_PAGE_OFFSET, F.CMD_STATISTICS, F.CMD_ENCODING_STATS, F.CMD_BLOOM_FILTER_OFFSET,
             F.CMD_BLOOM_FILTER_LENGTH, F.CMD_SIZE_STATISTICS, F.CMD_GEOSPATIAL_STATISTICS,
             F.CMD_DICTIONARY_PAGE_OFFSET)
    cmd.put(F.CMD_ENCODINGS, T_LIST, TList(T_I32, [F.PLAIN, F.RLE]))
    cmd.put(F.CMD_NUM_VALUES, T_I64, n)
    cmd.put(F.CMD_DATA_PAGE_OFFSET, T_I64, 4)
    cmd.put(F.CMD_TOTAL_COMPRESSED_SIZE, T_I64, len(buf) - 4)
    cmd.put(F.CMD_TOTAL_UNCOMPRESSED_SIZE, T_I64, len(buf) - 4)
    return _read_single_chunk(lay, [el], cmd, n, buf)


def _read_single_chunk(lay: ParquetLayout, elements: list[TStruct], cmd: TStruct, nrows: int, buf: bytearray
                       ) -> pa.Array:
    root = lay.schema[0].copy()
    root.put(F.SE_NUM_CHILDREN, T_I32, 1)
    cc = TStruct()
    cc.put(F.CC_FILE_OFFSET, T_I64, 0)
    cc.put(F.CC_META_DATA, T_STRUCT, cmd)
    rg = TStruct()
    rg.put(F.RG_COLUMNS, T_LIST, TList(T_STRUCT, [cc]))
    rg.put(F.RG_TOTAL_BYTE_SIZE, T_I64, len(buf))
    rg.put(F.RG_NUM_ROWS, T_I64, nrows)
    fmd = TStruct()
    fmd.put(F.FMD_VERSION, T_I32, lay.fmd.val(F.FMD_VERSION, 1))
    fmd.put(F.FMD_SCHEMA, T_LIST, TList(T_STRUCT, [root] + elements))
    fmd.put(F.FMD_NUM_ROWS, T_I64, nrows)
    fmd.put(F.FMD_ROW_GROUPS, T_LIST, TList(T_STRUCT, [rg]))
    footer = lay.clock.encode(fmd)
    buf += footer + len(footer).to_bytes(4, "little") + b"PAR1"
    return pq.ParquetFile(pa.BufferReader(bytes(buf))).read_row_group(0, use_threads=False).column(0).combine_chunks()


@dataclass
class _Encoded:
    """Re-encoded data pages for one run of rows, ready to splice (offsets relative to ``data``)."""

    data: bytes
    pages: list[tuple[int, int, int]]  # (offset in data, size, first row within the run)
    rows: int
    num_values: int
    uncompressed: int
    null_count: int
    stats: TStruct | None  # bounds of the new values (possibly wider: see _encode_runs)
    page_encodings: dict[tuple[int, int], int]
    encodings: list[int]
    bounds: PageBounds | None  # ColumnIndex entries of the pages
    dict_page: tuple[bytes, int, int] | None  # (dictionary page bytes, uncompressed size incl. header, entries)


def _encode_runs(lay: ParquetLayout, top: TopField, runs: list[pa.Array], nullable: bool, setup: dict[str, Any],
                 opts: dict[str, Any], dictionary: pa.Array | None, *, extend: bool = False) -> list[_Encoded] | None:
    """Encode each of ``runs`` as data pages like the chunk's: PLAIN, or indices into ``dictionary`` when given.

    All runs go through one in-memory file, one row group per run. pyarrow numbers dictionary entries in order of
    first appearance, so each run is preceded by the dictionary's values (padded to whole pages by repeating its
    first value) and those leading pages are dropped: the remaining pages then index ``dictionary`` in its own
    order. With ``extend``, values missing from ``dictionary`` are numbered after it, in order of first appearance
    (the dictionary page grows). Returns None if pyarrow did not lay the pages out that way.
    """
    skip = 0
    extra: dict[str, Any] = {}
    rows_per_page = setup["rows_per_page"]
    groups = runs
    if dictionary is not None:
        k = rows_per_page
        skip = -(-len(dictionary) // k) * k
        pad = dictionary.take(pa.array(np.zeros(skip - len(dictionary), dtype=np.int64)))
        groups = [pa.concat_arrays([dictionary.cast(v.type), pad.cast(v.type), v]) for v in runs]
        extra = {"dictionary_pagesize_limit": 1 << 62, "data_page_size": 1 << 62}
    mini = _encode_mini(lay, top, groups, nullable, codec=setup["codec"], dictionary=dictionary is not None,
                        v2=setup["v2"], crc=setup["crc"], rows_per_page=rows_per_page, opts={**opts, **extra})
    out = []
    for values, (mch,) in zip(runs, mini.chunks):
        first = next((i for i, p in enumerate(mch.pages) if p.first_row >= skip), None)
        if first is None or mch.pages[first].first_row != skip:
            return None
        real = mch.pages[first:]
        counts: dict[tuple[int, int], int] = {}
        num_values = unc = 0
        for p in real:
            key = _stats_key(*_page_encoding(mini.lay, p))
            counts[key] = counts.get(key, 0) + 1
            num_values += _page_num_values(mini.lay, p)
            unc += p.header_size + p.header.val(F.PH_UNCOMPRESSED_SIZE)
        dict_page = None
        if dictionary is not None:
            if any(k[1] not in (F.PLAIN_DICTIONARY, F.RLE_DICTIONARY) for k in counts) or mch.prefix_end == mch.start:
                return None  # pyarrow fell back to PLAIN
            h, hs = mini.lay.page_header(mch.start)
            # entries are numbered by first appearance and the dictionary leads the rows: the order is ours unless
            # pyarrow merged values we keep apart (NaN payloads, ...), which shows in the count
            entries = h.val(F.PH_DICTIONARY_PAGE_HEADER).val(F.DICT_NUM_VALUES)
            if entries < len(dictionary) or (entries != len(dictionary) and not extend):
                return None
            if extend:
                # a merge of two entries (a source dictionary may repeat a value) plus one appended value would
                # leave the count unchanged: compare our entries themselves
                grown = _dictionary_values(mini.lay, mini.lay.tops[0], mch, dictionary.type)
                if not grown.slice(0, len(dictionary)).equals(dictionary.cast(grown.type)):
                    return None
            dict_page = (bytes(mini.lay.buf[mch.start:mch.prefix_end]), hs + h.val(F.PH_UNCOMPRESSED_SIZE), entries)
        base = real[0].offset
        mci = mini.lay.page_bounds(mch.cc)
        out.append(_Encoded(
            data=bytes(mini.lay.buf[base:mch.end]),
            pages=[(p.offset - base, p.size, p.first_row - skip) for p in real],
            rows=len(values), num_values=num_values, uncompressed=unc, null_count=values.null_count,
            stats=mch.cmd.val(F.CMD_STATISTICS), page_encodings=counts,
            encodings=list(mch.cmd.val(F.CMD_ENCODINGS).items),
            bounds=None if mci is None else mci.slice(first, len(mch.pages)),
            dict_page=dict_page))
    return out


# ---------------------------------------------------------------------------------------------------------------
# output chunks


@dataclass
class _MovedOffsetIndex:
    """An untouched chunk's OffsetIndex: the source's, with offsets moved to where the chunk lands."""

    cc: TStruct


@dataclass
class _ChunkOut:
    """One column chunk of the output: byte pieces plus metadata with offsets relative to the chunk start."""

    leaf: int
    cc: TStruct
    cmd: TStruct
    pieces: list[tuple[str, Any, int]]  # ("copy", src_offset, length) | ("data", bytes, length)
    length: int
    rel_offsets: dict[int, int]  # ColumnMetaData field id -> offset relative to chunk start
    # when an OffsetIndex is written: (relative offset, size, first row) per page, a chunk's locations (offsets
    # relative) with the source OffsetIndex's later fields, or an untouched chunk's source OffsetIndex
    locs: list[tuple[int, int, int]] | np.ndarray | PageLocations | _MovedOffsetIndex | None
    ci: TStruct | bytes | None
    bloom: bytes | None = None
    src_start: int = 0


def _copy_chunk(lay: ParquetLayout, rg: int, leaf: int) -> _ChunkOut:
    """An untouched chunk: one byte range; its OffsetIndex only moves (no page headers are read)."""
    cc = lay.column_chunk(rg, leaf)
    cmd = cc.val(F.CC_META_DATA)
    start, end = lay.chunk_range(rg, leaf)
    rel = {fid: cmd.val(fid) - start for fid in (F.CMD_DATA_PAGE_OFFSET, F.CMD_DICTIONARY_PAGE_OFFSET,
                                                F.CMD_INDEX_PAGE_OFFSET) if cmd.val(fid)}
    # the OffsetIndex is decoded when the output is written, while rewritten chunks are still being encoded
    locs = _MovedOffsetIndex(cc) if F.CC_OFFSET_INDEX_OFFSET in cc else None
    ci = None
    if F.CC_COLUMN_INDEX_OFFSET in cc:
        off = cc.val(F.CC_COLUMN_INDEX_OFFSET)
        ci = bytes(lay.buf[off:off + cc.val(F.CC_COLUMN_INDEX_LENGTH)])
    return _ChunkOut(leaf, cc, cmd, [("copy", start, end - start)], end - start, rel, locs, ci,
                     _bloom_bytes(lay, cmd), start)


def _bloom_bytes(lay: ParquetLayout, cmd: TStruct) -> bytes | None:
    off = cmd.val(F.CMD_BLOOM_FILTER_OFFSET)
    if off is None:
        return None
    length = cmd.val(F.CMD_BLOOM_FILTER_LENGTH)
    if length is None:  # header (numBytes = field 1) followed by the bitset
        header, hsize = lay.read_struct(off)
        length = hsize + header.val(1)
    return bytes(lay.buf[off:off + length])


def _boundary_order(leaf_key, null_pages: list[int], mins: list[bytes], maxs: list[bytes]) -> int:
    if leaf_key is None:
        return F.UNORDERED
    try:
        pairs = [(leaf_key(lo), leaf_key(hi)) for n, lo, hi in zip(null_pages, mins, maxs) if n != 1]
    except (ValueError, struct.error):  # a NaN bound or a malformed entry: claim no order
        return F.UNORDERED
    if all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(pairs, pairs[1:])):
        return F.ASCENDING
    if all(a[0] >= b[0] and a[1] >= b[1] for a, b in zip(pairs, pairs[1:])):
        return F.DESCENDING
    return F.UNORDERED


def _combine_bounds(leaf_key, old: TStruct | None, old_all_null: bool, news: list[TStruct | None],
                    new_all_null: list[bool]) -> tuple[bytes, bytes] | None:
    """Union of min/max bounds (old chunk statistics and re-encoded pages), or None when unknown."""
    if leaf_key is None:
        return None
    cands = []
    if not old_all_null:
        if old is None or F.ST_MIN_VALUE not in old or F.ST_MAX_VALUE not in old:
            return None
        cands.append((old.val(F.ST_MIN_VALUE), old.val(F.ST_MAX_VALUE)))
    for st, empty in zip(news, new_all_null):
        if empty:
            continue
        if st is None or F.ST_MIN_VALUE not in st or F.ST_MAX_VALUE not in st:
            return None
        cands.append((st.val(F.ST_MIN_VALUE), st.val(F.ST_MAX_VALUE)))
    if not cands:
        return None
    try:
        lo = min((c[0] for c in cands), key=leaf_key)
        hi = max((c[1] for c in cands), key=leaf_key)
    except (ValueError, struct.error):  # a NaN bound, or a bound of the wrong width
        return None
    return lo, hi


# ---------------------------------------------------------------------------------------------------------------
# the rewrite


@dataclass
class _Stats:
    pages_total: int = 0
    pages_rewritten: int = 0
    pages_copied: int = 0
    bytes_copied: int = 0
    bytes_reencoded: int = 0
    columns: set[str] = field(default_factory=set)
    full_chunks: list[tuple[int, str, str]] = field(default_factory=list)
    blooms_dropped: list[tuple[int, str]] = field(default_factory=list)
    sort_broken: set[int] = field(default_factory=set)  # row groups whose sorting_columns no longer hold


def _pages_holding(ch: Chunk, *sorted_rows: np.ndarray) -> np.ndarray:
    """Indexes of the chunk's pages that hold any of the rows (each array sorted, chunk-relative).

    Searches page starts in the rows (pages x log rows), not rows in the pages: a 50% batch has a million rows.
    """
    bounds = np.append(ch.page_arrays[2], ch.num_rows)
    hit = np.zeros(len(ch.pages), dtype=bool)
    for rows in sorted_rows:
        if rows.size:
            hit |= np.diff(np.searchsorted(rows, bounds)) > 0
    return np.flatnonzero(hit)


def _max_page_rows(ch: Chunk) -> int | None:
    """Rows in the chunk's largest data page (None when pages' first rows are unknown: no page index, nested)."""
    if not ch.rows_known:
        return None
    return int(np.diff(np.append(ch.page_arrays[2], ch.num_rows)).max())


@dataclass
class _Task:
    """A chunk rewrite to run later, possibly in another thread: ``fn(rewriter, *args)``."""

    fn: Callable[..., _ChunkOut | list[_ChunkOut]]
    args: tuple


class _Rewriter:
    def __init__(self, lay: ParquetLayout, changes: _Changes, read_schema: pa.Schema, *, full_chunk_threshold: float,
                 writer_options: dict[str, Any]) -> None:
        self.lay = lay
        self.ch = changes
        self.read_schema = read_schema
        self.full_chunk_threshold = full_chunk_threshold
        self.opts = writer_options
        self.stats = _Stats()
        self.changed_parts: list[np.ndarray] = []  # global positions whose value really changed (per chunk)

    def _chunk_setup(self, ch: Chunk) -> dict[str, Any]:
        h = self.lay.ensure_header(ch.pages[0])
        return dict(codec=ch.cmd.val(F.CMD_CODEC), v2=h.val(F.PH_TYPE) == F.DATA_PAGE_V2, crc=F.PH_CRC in h,
                    rows_per_page=_max_page_rows(ch))

    # -- one row group -------------------------------------------------------------------------------------
    def row_group(self, rg: int, rg_start: int) -> tuple[list[_ChunkOut | _Task], int] | None:
        """Copied chunks of one row group, and tasks for the chunks to rewrite (see ``run``); None: all deleted."""
        lay = self.lay
        nrows = lay.rg_rows(rg)
        lo, hi = np.searchsorted(self.ch.del_pos, [rg_start, rg_start + nrows])
        dels = self.ch.del_pos[lo:hi] - rg_start
        if dels.size == nrows:
            for leaf in lay.leaves:
                self.stats.pages_total += lay.page_count(rg, leaf.index)
                self.stats.pages_rewritten += lay.page_count(rg, leaf.index)
            return None  # every row deleted: drop the row group
        ulo, uhi = np.searchsorted(self.ch.upd_pos, [rg_start, rg_start + nrows])
        ups = self.ch.upd_pos[ulo:uhi] - rg_start
        outs: list[_ChunkOut | _Task] = []
        for top in lay.tops:
            vals = self.ch.upd.get(top.name)
            t_ups = ups if vals is not None else np.zeros(0, dtype=np.int64)
            t_vals = vals.slice(ulo, uhi - ulo) if vals is not None else None
            if not t_ups.size and not dels.size:
                for leaf in top.leaves:
                    outs.append(_copy_chunk(lay, rg, leaf))
                    self._count_copy(rg, leaf)
                continue
            chunks = [lay.chunk(rg, i) for i in top.leaves]
            if len(chunks) == 1 and not lay.leaves[top.leaves[0]].nested and chunks[0].rows_known:
                outs.append(_Task(_Rewriter._flat_chunk, (top, chunks[0], t_ups, t_vals, dels, rg_start)))
            else:
                reason = ("nested column without page row boundaries" if not all(c.rows_known for c in chunks)
                          else "nested column")
                outs.append(_Task(_Rewriter._whole_field, (top, chunks, t_ups, t_vals, dels, rg_start, reason)))
        return outs, nrows - dels.size

    def run(self, groups: list[tuple[int, list[_ChunkOut | _Task], int]], threads: int
            ) -> Iterator[tuple[int, list[_ChunkOut], int]]:
        """Run the row groups' chunk tasks, ``threads`` at a time, yielding each row group in file order as soon as
        its chunks are done: the caller writes (copies) the output while later chunks are still being rewritten.

        Each task works on a fork of this rewriter (its own counts), merged back in file order once all are done:
        the report does not depend on which thread finished first. pyarrow's decoders and encoders release the GIL.
        """
        tasks = [t for _, outs, _ in groups for t in outs if isinstance(t, _Task)]
        forks = [self._fork() for _ in tasks]
        pool = None
        if threads > 1 and len(tasks) > 1:
            pool = ThreadPoolExecutor(max_workers=min(threads, len(tasks)), thread_name_prefix="partialcow-rewrite")
        try:
            if pool is not None:
                futures = [pool.submit(t.fn, f, *t.args) for t, f in zip(tasks, forks)]
                done = (f.result() for f in futures)
            else:
                done = (t.fn(f, *t.args) for t, f in zip(tasks, forks))
            for rg, outs, rows in groups:
                chunks: list[_ChunkOut] = []
                for item in outs:
                    if isinstance(item, _Task):
                        res = next(done)
                        chunks.extend(res if isinstance(res, list) else [res])
                    else:
                        chunks.append(item)
                yield rg, chunks, rows
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        for f in forks:
            self._absorb(f)

    def _fork(self) -> _Rewriter:
        fork = copy.copy(self)
        fork.stats = _Stats()
        fork.changed_parts = []
        return fork

    def _absorb(self, fork: _Rewriter) -> None:
        st, other = self.stats, fork.stats
        for name in ("pages_total", "pages_rewritten", "pages_copied", "bytes_copied", "bytes_reencoded"):
            setattr(st, name, getattr(st, name) + getattr(other, name))
        st.columns |= other.columns
        st.full_chunks.extend(other.full_chunks)
        st.blooms_dropped.extend(other.blooms_dropped)
        st.sort_broken |= other.sort_broken
        self.changed_parts.extend(fork.changed_parts)

    def _count_copy(self, rg: int, leaf: int) -> None:
        pages = self.lay.page_count(rg, leaf)
        start, end = self.lay.chunk_range(rg, leaf)
        self.stats.pages_total += pages
        self.stats.pages_copied += pages
        self.stats.bytes_copied += end - start

    def _record_changes(self, top: TopField, rg: int, rg_start: int, changed: np.ndarray) -> None:
        if changed.size:
            self.stats.columns.add(top.name)
            self.changed_parts.append(changed + rg_start)
            for sc in (self.lay.row_groups[rg].val(F.RG_SORTING_COLUMNS) or TList(T_STRUCT, [])).items:
                if self.lay.leaves[sc.val(F.SC_COLUMN_IDX)].top == top.index:
                    self.stats.sort_broken.add(rg)

    # -- a top-level field re-encoded as a whole (nested columns, cost model) ---------------------------------
    def _whole_field(self, top: TopField, chunks: list[Chunk], ups: np.ndarray, vals: pa.Array | None,
                     dels: np.ndarray, rg_start: int, reason: str) -> list[_ChunkOut]:
        lay = self.lay
        rg = chunks[0].rg
        old = _decode_pages(lay, top, rg, None, chunks[0].num_rows)
        return self._reencode_field(top, chunks, old, ups, vals, dels, rg_start, reason)

    def _reencode_field(self, top: TopField, chunks: list[Chunk], old: pa.Array, ups: np.ndarray,
                        vals: pa.Array | None, dels: np.ndarray, rg_start: int, reason: str, *,
                        compared: bool = False) -> list[_ChunkOut]:
        """Re-encode whole chunks (all leaves of ``top``); ``compared``: ``ups`` already hold only real changes."""
        lay = self.lay
        rg = chunks[0].rg
        changed = ups
        if ups.size and not compared:
            mask = _changed_mask(old.take(pa.array(ups)), vals)
            changed = ups[mask]
            vals = vals.filter(pa.array(mask))
            self._record_changes(top, rg, rg_start, changed)
        if not changed.size and not dels.size:
            outs = []
            for ch in chunks:
                outs.append(_copy_chunk(lay, ch.rg, ch.leaf))
                self._count_copy(ch.rg, ch.leaf)
            return outs
        new = _patch(old, 0, changed, vals, dels)
        setup = self._chunk_setup(chunks[0])
        nullable = lay.schema[top.schema_start].val(F.SE_REPETITION, F.REQUIRED) != F.REQUIRED
        # a chunk written without a dictionary (PLAIN) stays PLAIN; one with a dictionary keeps it if it pays
        dictionary = any(_dictionary_pays(lay, ch) for ch in chunks)
        mini = _encode_mini(lay, top, [new], nullable, codec=setup["codec"], dictionary=dictionary, v2=setup["v2"],
                            crc=setup["crc"], rows_per_page=setup["rows_per_page"], opts=self.opts)
        outs = []
        for ch, mch in zip(chunks, mini.chunks[0]):
            name = ".".join(lay.leaves[ch.leaf].path)
            self.stats.full_chunks.append((rg, name, reason))
            self.stats.pages_total += len(ch.pages)
            self.stats.pages_rewritten += len(ch.pages)
            self.stats.bytes_reencoded += mch.end - mch.start
            cmd = mch.cmd.copy()
            cmd.put(F.CMD_PATH, T_LIST, ch.cmd.val(F.CMD_PATH))
            cmd.drop(F.CMD_KV, F.CMD_BLOOM_FILTER_OFFSET, F.CMD_BLOOM_FILTER_LENGTH)
            if F.CMD_KV in ch.cmd:
                cmd.put(F.CMD_KV, T_LIST, ch.cmd.val(F.CMD_KV))
            rel = {fid: cmd.val(fid) - mch.start for fid in (F.CMD_DATA_PAGE_OFFSET, F.CMD_DICTIONARY_PAGE_OFFSET)
                   if cmd.val(fid) is not None}
            locs = ci = None
            if F.CC_OFFSET_INDEX_OFFSET in ch.cc:
                locs = [(p.offset - mch.start, p.size, p.first_row) for p in mch.pages]
                if F.CC_COLUMN_INDEX_OFFSET in ch.cc:
                    ci = mini.lay.column_index_bytes(mch.cc)
            bloom = _bloom_bytes(lay, ch.cmd)
            if bloom is not None and changed.size:
                self.stats.blooms_dropped.append((rg, name))
                bloom = None
            data = bytes(mini.lay.buf[mch.start:mch.end])
            outs.append(_ChunkOut(ch.leaf, ch.cc, cmd, [("data", data, len(data))], len(data), rel, locs, ci,
                                  bloom, ch.start))
        return outs

    # -- a flat column chunk patched page by page --------------------------------------------------------------
    def _flat_chunk(self, top: TopField, ch: Chunk, ups: np.ndarray, vals: pa.Array | None, dels: np.ndarray,
                    rg_start: int) -> _ChunkOut:
        lay = self.lay
        leaf = lay.leaves[ch.leaf]
        data_bytes = ch.end - ch.prefix_end
        cand = _pages_holding(ch, ups, dels)
        sizes = ch.page_arrays[1]
        cand_bytes = int(sizes[cand].sum())
        whole = cand_bytes > self.full_chunk_threshold * data_bytes
        if whole:
            runs = [(0, len(ch.pages) - 1)]
        else:
            runs = []
            for i in cand.tolist():
                if runs and runs[-1][1] == i - 1:
                    runs[-1] = (runs[-1][0], i)
                else:
                    runs.append((i, i))
        # decode candidate runs, find rows whose value really changes
        decoded: list[tuple[int, int, int, pa.Array]] = []  # (first page, last page, first row, values)
        changed_parts, vals_parts = [], []
        bounds = [(ch.pages[a].first_row, ch.page_rows(b)[1]) for a, b in runs]
        if whole:
            every = _decode_pages(lay, top, ch.rg, None, ch.num_rows)
        else:  # all runs' pages in one sub-file (pages are self-contained): one decode, sliced per run
            every = _decode_pages(lay, top, ch.rg, {ch.leaf: [p for a, b in runs for p in ch.pages[a:b + 1]]},
                                  sum(r1 - r0 for r0, r1 in bounds))
        start = 0
        for (a, b), (r0, r1) in zip(runs, bounds):
            arr = every.slice(start, r1 - r0)
            start += r1 - r0
            decoded.append((a, b, r0, arr))
            lo, hi = np.searchsorted(ups, [r0, r1])
            if hi > lo:
                rows = ups[lo:hi]
                v = vals.slice(lo, hi - lo)
                mask = _changed_mask(arr.take(pa.array(rows - r0)), v)
                changed_parts.append(rows[mask])
                vals_parts.append(v.filter(pa.array(mask)))
        changed = np.concatenate(changed_parts) if changed_parts else np.zeros(0, dtype=np.int64)
        new_vals = (pa.concat_arrays(vals_parts) if vals_parts else None)
        self._record_changes(top, ch.rg, rg_start, changed)
        touched = _pages_holding(ch, changed, dels)
        if not touched.size:
            self._count_copy(ch.rg, ch.leaf)
            return _copy_chunk(lay, ch.rg, ch.leaf)
        if int(sizes[touched].sum()) > self.full_chunk_threshold * data_bytes:
            old = decoded[0][3] if whole else _decode_pages(lay, top, ch.rg, None, ch.num_rows)
            return self._reencode_field(top, [ch], old, changed, new_vals, dels, rg_start, "most pages touched",
                                        compared=True)[0]
        return self._splice(top, ch, leaf, decoded, touched, changed, new_vals, dels, rg_start)

    def _splice(self, top: TopField, ch: Chunk, leaf: Any, decoded: list, touched: np.ndarray, changed: np.ndarray,
                new_vals: pa.Array | None, dels: np.ndarray, rg_start: int) -> _ChunkOut:
        lay = self.lay
        setup = self._chunk_setup(ch)
        if setup["codec"] not in _CODEC_TO_ARROW:  # pages of a chunk share its codec: re-encode the chunk
            old = _decode_pages(lay, top, ch.rg, None, ch.num_rows)
            return self._reencode_field(top, [ch], old, changed, new_vals, dels, rg_start,
                                        f"codec {F.CODEC_NAMES[setup['codec']]} cannot be written",
                                        compared=True)[0]
        nullable = leaf.element.val(F.SE_REPETITION, F.REQUIRED) != F.REQUIRED
        key = sort_key_fn(leaf)
        dict_pages = _dictionary_encoded_pages(lay, ch)
        # sub-runs of consecutive touched pages of the same kind (dictionary-encoded or not)
        subruns: list[list[int]] = []
        for i in touched.tolist():
            if subruns and subruns[-1][1] == i - 1 and dict_pages[i] == dict_pages[i - 1]:
                subruns[-1][1] = i
            else:
                subruns.append([i, i])
        offsets, sizes, first_rows = ch.page_arrays
        deleted_before = np.searchsorted(dels, first_rows)  # rows deleted before each page
        patched: list[pa.Array] = []
        removed_nulls = 0
        for a, b in subruns:
            r0, r1 = ch.pages[a].first_row, ch.page_rows(b)[1]
            da, db, dr0, arr = next(d for d in decoded if d[0] <= a and b <= d[1])
            old = arr.slice(r0 - dr0, r1 - r0)
            removed_nulls += old.null_count
            ulo, uhi = np.searchsorted(changed, [r0, r1])
            dlo, dhi = np.searchsorted(dels, [r0, r1])
            patched.append(_patch(old, r0, changed[ulo:uhi], new_vals.slice(ulo, uhi - ulo) if uhi > ulo else None,
                                  dels[dlo:dhi]))
        # Dictionary-encoded pages are replaced by dictionary-encoded pages over the same dictionary, extended with
        # new values at its end (old pages' indices stay valid): Spark's vectorized reader cannot read a PLAIN page
        # followed by a dictionary-encoded one, the pattern a PLAIN patch in the middle of a chunk would create.
        if _dictionary_too_large(lay, ch, [len(p) for (a, _), p in zip(subruns, patched) if dict_pages[a] and len(p)]):
            old = _decode_pages(lay, top, ch.rg, None, ch.num_rows)
            return self._reencode_field(top, [ch], old, changed, new_vals, dels, rg_start, _DICTIONARY_TOO_LARGE,
                                        compared=True)[0]
        dictionary = new_dict_page = None
        extend = False
        if any(dict_pages[a] for a, _ in subruns):
            dictionary = _dictionary_values(lay, top, ch, decoded[0][3].type)
            # only updated values can be missing from the dictionary
            in_dict_runs = np.zeros(changed.size, dtype=bool)
            for a, b in subruns:
                if dict_pages[a]:
                    lo, hi = np.searchsorted(changed, [ch.pages[a].first_row, ch.page_rows(b)[1]])
                    in_dict_runs[lo:hi] = True
            # One run: pyarrow appends the values the dictionary lacks itself (see _encode_runs), no search
            # needed. Not for floats: pyarrow may merge NaN payloads the dictionary keeps apart, and a merge
            # plus a new value would leave the entry count unchanged.
            extend = (sum(1 for (a, _), p in zip(subruns, patched) if dict_pages[a] and len(p)) == 1
                      and not pa.types.is_floating(dictionary.type))
            if in_dict_runs.any() and not extend:
                fresh = pc.unique(new_vals.filter(pa.array(in_dict_runs)).drop_null())
                # hash the few new values and scan the dictionary, not the other way round: a dictionary can hold
                # a whole chunk's distinct values, and hashing it cost more than the rest of a small patch
                known = dictionary.filter(pc.is_in(dictionary, value_set=fresh.cast(dictionary.type)))
                fresh = fresh.filter(pc.invert(pc.is_in(fresh, value_set=known.cast(fresh.type))))
                if len(fresh):
                    dictionary = pa.concat_arrays([dictionary, fresh.cast(dictionary.type)])
        encoded: dict[int, _Encoded | None] = {a: None for a, _ in subruns}
        for in_dict in (False, True):  # one in-memory file for the PLAIN runs, one for the dictionary-encoded runs
            todo = [(a, new) for (a, _), new in zip(subruns, patched) if len(new) and dict_pages[a] == in_dict]
            if not todo:
                continue
            encs = _encode_runs(lay, top, [new for _, new in todo], nullable, setup, self.opts,
                                dictionary if in_dict else None, extend=in_dict and extend)
            if encs is None:  # pyarrow did not reproduce the dictionary order: re-encode the chunk
                old = _decode_pages(lay, top, ch.rg, None, ch.num_rows)
                return self._reencode_field(top, [ch], old, changed, new_vals, dels, rg_start,
                                            "dictionary could not be extended", compared=True)[0]
            for (a, _), enc in zip(todo, encs):
                if enc.dict_page is not None:
                    new_dict_page = new_dict_page or enc.dict_page
                encoded[a] = enc
        subrun_end = {a: b for a, b in subruns}
        subrun_starts = sorted(subrun_end)

        # assemble pieces, page locations and column-index entries
        src_ci = lay.page_bounds(ch.cc) if F.CC_COLUMN_INDEX_OFFSET in ch.cc else None
        if src_ci is not None and len(src_ci) != len(ch.pages):  # a malformed index: rebuild none rather than misalign
            src_ci = None
        want_oi = F.CC_OFFSET_INDEX_OFFSET in ch.cc
        unc = ch.cmd.val(F.CMD_TOTAL_UNCOMPRESSED_SIZE)
        pieces: list[tuple[str, Any, int]] = []
        if new_dict_page is not None and new_dict_page[2] > _dictionary_size(lay, ch):
            h, hs = lay.page_header(ch.start)
            unc += new_dict_page[1] - hs - h.val(F.PH_UNCOMPRESSED_SIZE)
            pieces.append(("data", new_dict_page[0], len(new_dict_page[0])))
            if ch.prefix_end > ch.start + hs + h.val(F.PH_COMPRESSED_SIZE):  # keep anything after the dictionary
                rest = ch.start + hs + h.val(F.PH_COMPRESSED_SIZE)
                pieces.append(("copy", rest, ch.prefix_end - rest))
            self.stats.bytes_reencoded += len(new_dict_page[0])
        elif ch.prefix_end > ch.start:
            pieces.append(("copy", ch.start, ch.prefix_end - ch.start))
            self.stats.bytes_copied += ch.prefix_end - ch.start
        pos = sum(p[2] for p in pieces)
        loc_blocks: list[np.ndarray] = []  # (offset in the chunk, size, first row) per page, a block per run
        ci_parts: list[PageBounds] | None = [] if src_ci is not None else None
        enc_delta: dict[tuple[int, int], int] = {}
        num_values = ch.cmd.val(F.CMD_NUM_VALUES)
        new_stats: list[TStruct | None] = []
        new_all_null: list[bool] = []
        added_nulls = 0
        new_encodings: list[int] = []

        i = 0
        while i < len(ch.pages):
            if i in subrun_end:
                b = subrun_end[i]
                for j in range(i, b + 1):
                    p = ch.pages[j]
                    pt_enc = _stats_key(*_page_encoding(lay, p))
                    enc_delta[pt_enc] = enc_delta.get(pt_enc, 0) - 1
                    num_values -= _page_num_values(lay, p)
                    unc -= p.header_size + lay.ensure_header(p).val(F.PH_UNCOMPRESSED_SIZE)
                    self.stats.pages_rewritten += 1
                enc = encoded[i]
                if enc is not None:
                    new_first = ch.pages[i].first_row - int(deleted_before[i])
                    pieces.append(("data", enc.data, len(enc.data)))
                    self.stats.bytes_reencoded += len(enc.data)
                    loc_blocks.append(np.array(enc.pages, dtype=np.int64).reshape(-1, 3) + [pos, 0, new_first])
                    pos += len(enc.data)
                    num_values += enc.num_values
                    unc += enc.uncompressed
                    for k, count in enc.page_encodings.items():
                        enc_delta[k] = enc_delta.get(k, 0) + count
                    new_encodings.extend(enc.encodings)
                    added_nulls += enc.null_count
                    new_stats.append(enc.stats)
                    new_all_null.append(enc.null_count == enc.rows)
                    if ci_parts is not None:
                        ci_parts = None if enc.bounds is None else ci_parts + [enc.bounds]
                i = b + 1
                continue
            # a run of untouched pages up to the next touched one: one byte range
            nxt = bisect.bisect_right(subrun_starts, i)
            j = subrun_starts[nxt] - 1 if nxt < len(subrun_starts) else len(ch.pages) - 1
            start, end = ch.pages[i].offset, ch.pages[j].offset + ch.pages[j].size
            pieces.append(("copy", start, end - start))
            loc_blocks.append(np.column_stack([pos - start + offsets[i:j + 1], sizes[i:j + 1],
                                               first_rows[i:j + 1] - deleted_before[i:j + 1]]))
            if ci_parts is not None:
                ci_parts.append(src_ci.slice(i, j + 1))
            self.stats.pages_copied += j - i + 1
            self.stats.bytes_copied += end - start
            pos += end - start
            i = j + 1
        self.stats.pages_total += len(ch.pages)

        # column metadata
        cmd = ch.cmd.copy()
        cmd.put(F.CMD_NUM_VALUES, T_I64, num_values)
        cmd.put(F.CMD_TOTAL_COMPRESSED_SIZE, T_I64, pos)
        cmd.put(F.CMD_TOTAL_UNCOMPRESSED_SIZE, T_I64, unc)
        encs = list(cmd.val(F.CMD_ENCODINGS).items)
        encs += [e for e in dict.fromkeys(new_encodings) if e not in encs]
        cmd.put(F.CMD_ENCODINGS, T_LIST, TList(T_I32, encs))
        if F.CMD_ENCODING_STATS in cmd:
            entries = []
            seen = set()
            data_type = None
            for e in cmd.val(F.CMD_ENCODING_STATS).items:
                k = _stats_key(e.val(F.PES_PAGE_TYPE), e.val(F.PES_ENCODING))
                if k[0] == F.DATA_PAGE:
                    data_type = e.val(F.PES_PAGE_TYPE)
                seen.add(k)
                count = e.val(F.PES_COUNT) + enc_delta.get(k, 0)
                if count > 0:
                    ne = e.copy()
                    ne.put(F.PES_COUNT, T_I32, count)
                    entries.append(ne)
            for k, d in enc_delta.items():
                if k not in seen and d > 0:
                    ne = TStruct()
                    ne.put(F.PES_PAGE_TYPE, T_I32, data_type if k[0] == F.DATA_PAGE and data_type is not None
                           else _page_type_for_stats(k[0], ch, lay))
                    ne.put(F.PES_ENCODING, T_I32, k[1])
                    ne.put(F.PES_COUNT, T_I32, d)
                    entries.append(ne)
            cmd.put(F.CMD_ENCODING_STATS, T_LIST, TList(T_STRUCT, entries))
        old_st = ch.cmd.val(F.CMD_STATISTICS)
        if old_st is not None:
            st = TStruct()
            old_nulls = old_st.val(F.ST_NULL_COUNT)
            if old_nulls is not None:
                st.put(F.ST_NULL_COUNT, T_I64, old_nulls - removed_nulls + added_nulls)
            old_all_null = old_nulls is not None and old_nulls == ch.num_rows and F.ST_MIN_VALUE not in old_st
            bounds = _combine_bounds(key, old_st, old_all_null, new_stats, new_all_null)
            if bounds is not None:
                st.put(F.ST_MAX_VALUE, T_BINARY, bounds[1])
                st.put(F.ST_MIN_VALUE, T_BINARY, bounds[0])
            cmd.put(F.CMD_STATISTICS, T_STRUCT, st)
        cmd.drop(F.CMD_SIZE_STATISTICS)
        name = ".".join(leaf.path)
        bloom = _bloom_bytes(lay, ch.cmd)
        if changed.size:
            cmd.drop(F.CMD_GEOSPATIAL_STATISTICS)
            if bloom is not None:
                self.stats.blooms_dropped.append((ch.rg, name))
                bloom = None
        cmd.drop(F.CMD_BLOOM_FILTER_OFFSET, F.CMD_BLOOM_FILTER_LENGTH)
        rel = {fid: cmd.val(fid) - ch.start for fid in (F.CMD_DICTIONARY_PAGE_OFFSET, F.CMD_INDEX_PAGE_OFFSET)
               if cmd.val(fid)}
        locs = np.concatenate(loc_blocks) if loc_blocks else np.zeros((0, 3), dtype=np.int64)
        rel[F.CMD_DATA_PAGE_OFFSET] = int(locs[0, 0]) if len(locs) else ch.prefix_end - ch.start
        ci = None
        if ci_parts is not None and want_oi:
            bounds = PageBounds.concat(ci_parts)
            bounds.boundary_order = _boundary_order(key, bounds.null_pages.tolist(), bounds.mins, bounds.maxs)
            ci = encode_column_index(bounds)
        return _ChunkOut(ch.leaf, ch.cc, cmd, pieces, pos, rel, locs if want_oi else None, ci, bloom, ch.start)


# ---------------------------------------------------------------------------------------------------------------
# writing the output


class _Sink:
    """Sequential output: small writes are buffered; copied ranges go through ``os.copy_file_range`` when it works,
    adjacent ones (consecutive untouched chunks) in one call."""

    def __init__(self, fd: int, src: ParquetLayout) -> None:
        self.fd = fd
        self.src = src
        self.pos = 0
        self._buf = bytearray()
        self._copy: tuple[int, int] | None = None  # (source offset, length) not yet copied
        self._cfr = hasattr(os, "copy_file_range")

    def write(self, data: bytes) -> None:
        self._flush_copy()
        self._buf += data
        self.pos += len(data)
        if len(self._buf) > 1 << 22:
            self.flush()

    def flush(self) -> None:
        self._flush_copy()
        view = memoryview(self._buf)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self._buf = bytearray()

    def copy(self, offset: int, length: int) -> None:
        if length <= 0:
            return
        self.pos += length
        if self._copy is not None and self._copy[0] + self._copy[1] == offset:
            self._copy = (self._copy[0], self._copy[1] + length)
            return
        self._flush_copy()
        self._copy = (offset, length)

    def _flush_copy(self) -> None:
        if self._copy is None:
            return
        offset, length = self._copy
        self._copy = None
        if self._buf:
            self.flush()
        if self._cfr:
            done = 0
            try:
                while done < length:
                    n = os.copy_file_range(self.src._fh.fileno(), self.fd, length - done, offset + done)
                    if n == 0:
                        break
                    done += n
            except OSError:
                self._cfr = False
            offset, length = offset + done, length - done
        step = 1 << 23
        for o in range(offset, offset + length, step):
            chunk = self.src.buf[o:min(o + step, offset + length)]
            view = memoryview(chunk)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]


def _write_output(lay: ParquetLayout, fd: int, groups: Iterable[tuple[int, list[_ChunkOut], int]], stats: _Stats
                  ) -> int:
    """Write the chunks of ``groups`` (consumed once, in file order), the page indexes and the footer; the size.

    ``stats`` is read only after ``groups`` is exhausted (a streaming rewriter completes it at the end)."""
    clock = lay.clock
    sink = _Sink(fd, lay)
    sink.write(b"PAR1")
    placed: list[tuple[TStruct, _ChunkOut, int]] = []  # (new ColumnChunk, chunk out, absolute start)
    new_rgs = []
    rg_sources = []
    total_rows = 0
    for ordinal, (rg_idx, outs, rows) in enumerate(groups):
        total_rows += rows
        rg_sources.append(rg_idx)
        src_rg = lay.row_groups[rg_idx]
        rg = src_rg.copy()
        ccs = []
        rg_start = sink.pos
        total_unc = total_comp = 0
        for out in outs:
            start = sink.pos
            for kind, what, length in out.pieces:
                if kind == "copy":
                    sink.copy(what, length)
                else:
                    sink.write(what)
            assert sink.pos - start == out.length, "chunk length mismatch"
            cmd = out.cmd.copy()
            for fid, rel in out.rel_offsets.items():
                cmd.put(fid, T_I64, start + rel)
            cc = out.cc.copy()
            old_fo = out.cc.val(F.CC_FILE_OFFSET, 0)
            cc.put(F.CC_FILE_OFFSET, T_I64, old_fo + (start - out.src_start) if old_fo else 0)
            cc.drop(F.CC_OFFSET_INDEX_OFFSET, F.CC_OFFSET_INDEX_LENGTH, F.CC_COLUMN_INDEX_OFFSET,
                    F.CC_COLUMN_INDEX_LENGTH)
            cc.put(F.CC_META_DATA, T_STRUCT, cmd)
            ccs.append(cc)
            placed.append((cc, out, start))
            total_unc += cmd.val(F.CMD_TOTAL_UNCOMPRESSED_SIZE)
            total_comp += cmd.val(F.CMD_TOTAL_COMPRESSED_SIZE)
        rg.put(F.RG_COLUMNS, T_LIST, TList(T_STRUCT, ccs))
        rg.put(F.RG_NUM_ROWS, T_I64, rows)
        rg.put(F.RG_TOTAL_BYTE_SIZE, T_I64, total_unc)
        if F.RG_TOTAL_COMPRESSED_SIZE in rg:
            rg.put(F.RG_TOTAL_COMPRESSED_SIZE, T_I64, total_comp)
        if F.RG_FILE_OFFSET in rg:
            rg.put(F.RG_FILE_OFFSET, T_I64, rg_start)
        if F.RG_ORDINAL in rg:
            rg.put(F.RG_ORDINAL, rg[F.RG_ORDINAL][0], ordinal)
        new_rgs.append(rg)
    for rg_idx, rg in zip(rg_sources, new_rgs):
        if rg_idx in stats.sort_broken:
            rg.drop(F.RG_SORTING_COLUMNS)
    # page indexes: all column indexes, then all offset indexes, then bloom filters
    for cc, out, _ in placed:
        if out.ci is None or out.locs is None:
            continue
        data = out.ci if isinstance(out.ci, bytes) else clock.encode(out.ci)
        cc.put(F.CC_COLUMN_INDEX_OFFSET, T_I64, sink.pos)
        cc.put(F.CC_COLUMN_INDEX_LENGTH, T_I32, len(data))
        sink.write(data)
    indexed, all_locations, unmoved = [], [], {}
    for cc, out, start in placed:
        if out.locs is None:
            continue
        # untouched chunks keep their OffsetIndex extras; rebuilt ones drop unencoded_byte_array_data_bytes
        if isinstance(out.locs, _MovedOffsetIndex) and start == out.src_start:  # not moved: the source's bytes
            off = out.locs.cc.val(F.CC_OFFSET_INDEX_OFFSET)
            unmoved[len(indexed)] = bytes(lay.buf[off:off + out.locs.cc.val(F.CC_OFFSET_INDEX_LENGTH)])
            indexed.append(cc)
            continue
        if isinstance(out.locs, _MovedOffsetIndex):  # later OffsetIndex fields are kept (src.tail)
            src = lay.page_locations(out.locs.cc)
            locations = PageLocations(src.offsets + (start - out.src_start), src.sizes, src.first_rows, src.tail)
        elif isinstance(out.locs, PageLocations):
            locations = PageLocations(out.locs.offsets + start, out.locs.sizes, out.locs.first_rows, out.locs.tail)
        else:
            rows = np.array(out.locs, dtype=np.int64).reshape(-1, 3)
            locations = PageLocations(rows[:, 0] + start, rows[:, 1], rows[:, 2])
        indexed.append(cc)
        all_locations.append(locations)
    encoded = iter(encode_offset_indexes(all_locations))
    for i, cc in enumerate(indexed):
        data = unmoved[i] if i in unmoved else next(encoded)
        cc.put(F.CC_OFFSET_INDEX_OFFSET, T_I64, sink.pos)
        cc.put(F.CC_OFFSET_INDEX_LENGTH, T_I32, len(data))
        sink.write(data)
    for cc, out, _ in placed:
        if out.bloom is None:
            continue
        cmd = cc.val(F.CC_META_DATA)
        cmd.put(F.CMD_BLOOM_FILTER_OFFSET, T_I64, sink.pos)
        cmd.put(F.CMD_BLOOM_FILTER_LENGTH, T_I32, len(out.bloom))
        sink.write(out.bloom)
    fmd = lay.fmd.copy()
    fmd.put(F.FMD_ROW_GROUPS, T_LIST, TList(T_STRUCT, new_rgs))
    fmd.put(F.FMD_NUM_ROWS, T_I64, total_rows)
    footer = clock.encode(fmd)
    sink.write(footer + len(footer).to_bytes(4, "little") + b"PAR1")
    sink.flush()
    return sink.pos


# ---------------------------------------------------------------------------------------------------------------
# whole-file rewrite (the cost model's last resort, and the fallback when pages cannot be re-encoded faithfully)


def _real_changes(table: pa.Table, changes: _Changes) -> _Changes:
    """``changes`` without the updates that set values equal to the current ones (``table``: the whole file)."""
    if not changes.upd_pos.size:
        return changes
    idx = pa.array(changes.upd_pos)
    changed = np.zeros(changes.upd_pos.size, dtype=bool)
    per_column = {}
    for name, vals in changes.upd.items():
        col = table.column(name)
        col = col.cast(_VIEW_TYPES[col.type]) if col.type in _VIEW_TYPES else col
        old = col.take(idx).combine_chunks()
        mask = _changed_mask(old, vals.cast(old.type))
        if mask.any():  # a column whose values all stay is no longer an update
            per_column[name] = mask
            changed |= mask
    keep = pa.array(changed)
    return _Changes(changes.upd_pos[changed], {k: changes.upd[k].filter(keep) for k in per_column},
                    changes.del_pos, {k: changes.upd_pos[m] for k, m in per_column.items()})


def _rewrite_whole(lay: ParquetLayout, table: pa.Table, fd: int, written_path: str, changes: _Changes,
                   opts: dict[str, Any]) -> tuple[int, list[tuple[int, str]]]:
    """Rewrite everything with pyarrow; returns the size and the bloom filters that could not be rebuilt."""
    n = table.num_rows
    cols = []
    for name, col in zip(table.column_names, table.columns):
        arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        if name in changes.upd:
            vals = changes.upd[name].cast(arr.type)
            arr = _patch(arr, 0, changes.upd_pos, vals, changes.del_pos)
        elif changes.del_pos.size:
            arr = _patch(arr, 0, np.zeros(0, np.int64), None, changes.del_pos)
        cols.append(arr)
    new = pa.table(cols, schema=table.schema)
    ptypes = {leaf.physical_type for leaf in lay.leaves}
    first = lay.chunk(0, 0) if lay.row_groups else None
    h = lay.ensure_header(first.pages[0]) if first else TStruct()
    has_oi = bool(lay.row_groups) and F.CC_OFFSET_INDEX_OFFSET in lay.column_chunk(0, 0)
    codec = first.cmd.val(F.CMD_CODEC) if first else 1
    kwargs: dict[str, Any] = dict(
        compression=_CODEC_TO_ARROW.get(codec, "lz4"), write_page_index=has_oi,
        data_page_version="2.0" if h.val(F.PH_TYPE) == F.DATA_PAGE_V2 else "1.0",
        write_page_checksum=F.PH_CRC in h, use_deprecated_int96_timestamps=F.INT96 in ptypes,
        # list element names as read from the source ("item" from parquet-rs, "element" from compliant writers)
        use_compliant_nested_type=False,
        store_decimal_as_integer=any(
            leaf.physical_type in (F.INT32, F.INT64) and pa.types.is_decimal(f.type)
            for leaf, f in zip(lay.leaves, table.schema)) if len(lay.leaves) == len(table.schema) else False)
    if lay.row_groups:
        # the source's layout: dictionaries where it had them, its page size in rows
        kwargs["use_dictionary"] = [".".join(leaf.path) for leaf in lay.leaves
                                    if (c := lay.chunk(0, leaf.index)).prefix_end > c.start]
        page_rows = [_max_page_rows(lay.chunk(0, leaf.index)) for leaf in lay.leaves]
        if None not in page_rows:
            kwargs["max_rows_per_page"] = max(1, *page_rows)
        sorting = pq.ParquetFile(lay.path).metadata.row_group(0).sorting_columns
        if sorting and not {lay.tops[lay.leaves[c.column_index].top].name for c in sorting} & set(changes.upd):
            kwargs["sorting_columns"] = sorting  # deletes keep the order; updated sort keys may not
    kwargs.update(opts)
    rg_size = max((lay.rg_rows(i) for i in range(len(lay.row_groups))), default=n) or 1
    # bloom filters are rebuilt for the columns that had them (sized for a row group of distinct values)
    blooms = {(rg, ".".join(leaf.path)) for rg in range(len(lay.row_groups)) for leaf in lay.leaves
              if F.CMD_BLOOM_FILTER_OFFSET in lay.column_chunk(rg, leaf.index).val(F.CC_META_DATA)}
    if blooms and "bloom_filter_options" not in kwargs:
        kwargs["bloom_filter_options"] = {path: {"ndv": rg_size} for _, path in blooms}
    with os.fdopen(os.dup(fd), "wb") as fh, pq.ParquetWriter(fh, new.schema, **kwargs) as writer:
        if new.num_rows:  # no empty row group when every row is deleted
            writer.write_table(new, row_group_size=rg_size)
    kept = set()
    with ParquetLayout(written_path, clock=lay.clock) as written:
        for rg in range(len(written.row_groups)):  # report the filters pyarrow did not write back
            for leaf in written.leaves:
                if F.CMD_BLOOM_FILTER_OFFSET in written.column_chunk(rg, leaf.index).val(F.CC_META_DATA):
                    kept.add((rg, ".".join(leaf.path)))
        # key-value metadata (ARROW:schema, Spark's schema, ...) exactly as in the source
        fmd = written.fmd.copy()
        fmd.drop(F.FMD_KV)
        if F.FMD_KV in lay.fmd:
            fmd.put(F.FMD_KV, T_LIST, lay.fmd.val(F.FMD_KV))
        footer_start = written.footer_start
    footer = lay.clock.encode(fmd)
    os.ftruncate(fd, footer_start)
    os.lseek(fd, footer_start, os.SEEK_SET)
    tail = footer + len(footer).to_bytes(4, "little") + b"PAR1"
    while tail:
        tail = tail[os.write(fd, tail):]
    dropped = sorted(b for b in blooms if b not in kept)
    return os.fstat(fd).st_size, dropped


# ---------------------------------------------------------------------------------------------------------------


def rewrite_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    updates: pa.Table | None = None,
    deletes: Sequence[int] | np.ndarray | pa.Array | pa.ChunkedArray | None = None,
    *,
    full_chunk_threshold: float = 0.6,
    full_file_threshold: float | None = None,
    writer_options: dict[str, Any] | None = None,
    fsync: bool = True,
    threads: int | None = None,
) -> RewriteReport:
    """Write ``dst``: ``src`` with ``updates`` applied and ``deletes`` removed, re-encoding only touched pages.

    ``updates`` holds an int64 column :data:`ROW_POSITION` (0-based position in ``src``) and the top-level columns
    to set; values equal to the old ones change nothing. ``deletes`` lists positions to remove.

    Options: ``full_chunk_threshold`` (fraction of a chunk's page bytes touched above which the chunk is re-encoded
    whole, with a dictionary), ``full_file_threshold`` (fraction of all page bytes holding candidate changes above
    which the file is rewritten by pyarrow; default 0.85 with one thread, never with more: chunks re-encoded in
    parallel beat pyarrow's single-threaded writer), ``writer_options`` (extra ``pyarrow.parquet.ParquetWriter`` options for
    re-encoded pages, e.g. ``{"compression_level": 3}``), ``fsync``, ``threads`` (column chunks rewritten at once;
    default: the machine's cores, at most 8).

    ``dst`` appears only when the rewrite succeeded (written to a temporary name, fsynced, renamed).

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> from partialcow.parquet import write_table
    >>> d = tempfile.mkdtemp(); src, dst = os.path.join(d, "a.parquet"), os.path.join(d, "b.parquet")
    >>> write_table(pa.table({"k": list(range(10)), "v": ["x"] * 10}), src)  # doctest: +ELLIPSIS
    WrittenFile(...)
    >>> upd = pa.table({ROW_POSITION: pa.array([3], pa.int64()), "v": ["y"]})
    >>> r = rewrite_file(src, dst, upd, deletes=[0])
    >>> pq.read_table(dst).column("v").to_pylist()[:3], r.rows_updated, r.rows_deleted
    (['x', 'x', 'y'], 1, 1)
    """
    t0 = time.perf_counter()
    src, dst = os.fspath(src), os.fspath(dst)
    clock = ThriftClock()
    opts = dict(writer_options or {})
    threads = threads or min(8, os.cpu_count() or 1)
    if full_file_threshold is None:
        full_file_threshold = 0.85 if threads == 1 else math.inf
    tmp = f"{dst}.tmp-{secrets.token_hex(6)}"
    with ParquetLayout(src, clock=clock) as lay:
        read_schema = _read_schema(lay)
        changes = _prepare(lay, read_schema, updates, deletes)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            reason = None
            if full_file_threshold < math.inf:
                reason = _full_file_reason(lay, changes, full_file_threshold, full_chunk_threshold)
            table = None
            if reason is not None and changes.upd:
                # decide on the values that really change (equal-value updates must not force a rewrite)
                table = pq.read_table(src)
                changes = _real_changes(table, changes)
                reason = _full_file_reason(lay, changes, full_file_threshold, full_chunk_threshold)
            rw = _Rewriter(lay, changes, read_schema, full_chunk_threshold=full_chunk_threshold,
                           writer_options=opts)
            if reason is None:
                table = None  # the page path reads only the pages it needs
            if reason is None:
                try:
                    planned = []
                    row = 0
                    for rg in range(len(lay.row_groups)):
                        res = rw.row_group(rg, row)
                        row += lay.rg_rows(rg)
                        if res is not None:
                            planned.append((rg, res[0], res[1]))
                    size = _write_output(lay, fd, rw.run(planned, threads), rw.stats)
                except _NeedFullFile as exc:
                    reason = str(exc)
                    os.ftruncate(fd, 0)
                    os.lseek(fd, 0, os.SEEK_SET)
            if reason is not None:
                total_pages = sum(lay.page_count(rg, leaf.index) for rg in range(len(lay.row_groups))
                                  for leaf in lay.leaves)
                if table is None:  # the page path gave up (see _NeedFullFile)
                    table = pq.read_table(src)
                    changes = _real_changes(table, changes)
                size, whole_blooms_dropped = _rewrite_whole(lay, table, fd, tmp, changes, opts)
            if fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
    try:
        os.replace(tmp, dst)
    except BaseException:
        os.unlink(tmp)
        raise
    if fsync:
        _fsync_dir(os.path.dirname(os.path.abspath(dst)))
    st = rw.stats
    if reason is not None:
        pages_total = total_pages
        upd_rows = changes.upd_pos.size
        return RewriteReport(src, dst, lay.num_rows, lay.num_rows - changes.del_pos.size, upd_rows,
                             int(changes.del_pos.size), pages_total, pages_total, 0, 0, size,
                             tuple(sorted(changes.upd)), (), reason, tuple(whole_blooms_dropped),
                             time.perf_counter() - t0, clock.seconds)
    rows_after = sum(rows for _, _, rows in planned)
    rows_updated = _distinct_rows(rw.changed_parts, lay.num_rows)
    return RewriteReport(
        src, dst, lay.num_rows, rows_after, rows_updated, int(changes.del_pos.size), st.pages_total,
        st.pages_rewritten, st.pages_copied, st.bytes_copied, st.bytes_reencoded, tuple(sorted(st.columns)),
        tuple(st.full_chunks), None, tuple(st.blooms_dropped), time.perf_counter() - t0, clock.seconds)


def _fsync_dir(path: str) -> None:
    try:
        dfd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass  # some file systems refuse fsync on directories
    finally:
        os.close(dfd)


def _full_file_reason(lay: ParquetLayout, changes: _Changes, threshold: float, chunk_threshold: float
                      ) -> str | None:
    """Whole-file rewrite when the pages holding candidate changes are nearly all page bytes."""
    if not changes.upd_pos.size and not changes.del_pos.size:
        return None
    total = touched = 0
    row = 0
    for rg in range(len(lay.row_groups)):
        n = lay.rg_rows(rg)
        dlo, dhi = np.searchsorted(changes.del_pos, [row, row + n])
        dels = changes.del_pos[dlo:dhi] - row
        for leaf in lay.leaves:
            cmd = lay.column_chunk(rg, leaf.index).val(F.CC_META_DATA)
            size = cmd.val(F.CMD_TOTAL_COMPRESSED_SIZE)
            total += size
            cand_rows = changes.candidate_rows(lay.tops[leaf.top].name)
            ulo, uhi = np.searchsorted(cand_rows, [row, row + n])
            ups = cand_rows[ulo:uhi] - row
            if not ups.size and not dels.size:
                continue
            ch = lay.chunk(rg, leaf.index)
            if not ch.rows_known or leaf.nested:
                touched += size
                continue
            cand = int(ch.page_arrays[1][_pages_holding(ch, ups, dels)].sum())
            # above the chunk threshold the chunk is re-encoded whole, dictionary page included
            touched += size if cand > chunk_threshold * (ch.end - ch.prefix_end) else cand
        row += n
    if total and touched > threshold * total:
        return f"{touched / total:.0%} of the page bytes hold changes (threshold {threshold:.0%})"
    return None
