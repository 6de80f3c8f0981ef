"""Where things are in a Parquet file: footer, schema leaves, column chunks, pages, page indexes.

Everything here reads raw bytes (an ``mmap`` of the file) and decodes Thrift with :mod:`._thrift`; values are never
decoded here.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, overload

import numpy as np

from partialcow.exceptions import ParquetRewriteError, UnsupportedFileError
from partialcow.parquet import _format as F
from partialcow.parquet._column_index import PageBounds, decode_column_index
from partialcow.parquet._column_index import from_struct as column_index_from_struct
from partialcow.parquet._offset_index import PageLocations, count_page_locations, decode_page_locations, from_struct
from partialcow.parquet._thrift import ThriftError, TStruct, decode_struct, encode

__all__ = ["Chunk", "Leaf", "Page", "ParquetLayout", "SortKey", "ThriftClock", "sort_key_fn"]

# an encoded min/max statistic -> a Python value ordered as Parquet orders the column (see sort_key_fn)
SortKey = Callable[[bytes], Any]


class ThriftClock:
    """Accumulates the CPU time spent (de)serialising Thrift, for the rewrite report.

    Thread CPU time, not wall time: chunks are rewritten in parallel threads, and a thread waiting for the GIL is
    not serialising anything.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def _add(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds

    def decode(self, buf: Any, pos: int = 0) -> tuple[TStruct, int]:
        t = time.thread_time()
        try:
            return decode_struct(buf, pos)
        finally:
            self._add(time.thread_time() - t)

    def encode(self, st: TStruct) -> bytes:
        t = time.thread_time()
        try:
            return encode(st)
        finally:
            self._add(time.thread_time() - t)


@dataclass
class Leaf:
    """One primitive column of the schema (a column chunk per row group)."""

    index: int
    path: tuple[str, ...]
    top: int  # index of the top-level field this leaf belongs to
    element: TStruct
    max_def: int
    max_rep: int
    nested: bool

    @property
    def physical_type(self) -> int:
        ptype: int = self.element.val(F.SE_TYPE)
        return ptype

    @property
    def type_length(self) -> int | None:
        length: int | None = self.element.val(F.SE_TYPE_LENGTH)
        return length


@dataclass
class TopField:
    """A top-level field: its schema subtree and its leaves."""

    index: int
    name: str
    schema_start: int
    schema_end: int
    leaves: list[int] = field(default_factory=list)


@dataclass
class Page:
    """A data page: absolute offset, size including header, first row within the row group (None if unknown)."""

    offset: int
    size: int
    first_row: int | None
    header: TStruct | None = None
    header_size: int = 0


class PageList(Sequence[Page]):
    """A chunk's data pages from its OffsetIndex arrays; a :class:`Page` is made on first access and kept (it caches
    its header). A rewrite touches a few pages of chunks that have thousands."""

    def __init__(self, locations: PageLocations) -> None:
        self.arrays = (locations.offsets, locations.sizes, locations.first_rows)
        self._made: dict[int, Page] = {}

    def __len__(self) -> int:
        return len(self.arrays[0])

    @overload
    def __getitem__(self, i: int) -> Page: ...

    @overload
    def __getitem__(self, i: slice) -> list[Page]: ...

    def __getitem__(self, i: int | slice) -> Page | list[Page]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        page = self._made.get(i)
        if page is None:
            if not 0 <= i < len(self):
                raise IndexError(i)
            offsets, sizes, first_rows = self.arrays
            page = self._made[i] = Page(int(offsets[i]), int(sizes[i]), int(first_rows[i]))
        return page


@dataclass
class Chunk:
    """One column chunk with its page list (data pages only; the dictionary page sits in ``prefix``)."""

    rg: int
    leaf: int
    cc: TStruct  # ColumnChunk
    cmd: TStruct  # ColumnMetaData
    start: int
    end: int
    prefix_end: int  # start of the first data page: [start, prefix_end) holds dictionary/index pages
    pages: Sequence[Page]
    rows_known: bool  # every page's first row is known (OffsetIndex, v2 pages, or flat v1 pages)
    num_rows: int
    # absolute offset of the dictionary page, found from the first page header (not the footer: parquet-mr 1.12
    # and others leave dictionary_page_offset unset and point data_page_offset at the dictionary page)
    dictionary_page: int | None = None

    @cached_property
    def page_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(offsets, sizes, first rows) of the data pages as int64 arrays (for whole-chunk arithmetic)."""
        if isinstance(self.pages, PageList):
            return self.pages.arrays
        return (np.fromiter((p.offset for p in self.pages), np.int64, len(self.pages)),
                np.fromiter((p.size for p in self.pages), np.int64, len(self.pages)),
                np.fromiter((p.first_row if p.first_row is not None else -1 for p in self.pages), np.int64,
                            len(self.pages)))

    def page_rows(self, i: int) -> tuple[int, int]:
        first = self.pages[i].first_row
        nxt = self.pages[i + 1].first_row if i + 1 < len(self.pages) else self.num_rows
        return first, nxt  # type: ignore[return-value]


def _read_schema(schema: list[TStruct]) -> tuple[list[Leaf], list[TopField]]:
    leaves: list[Leaf] = []
    tops: list[TopField] = []
    pos = 1

    def walk(path: tuple[str, ...], d: int, r: int, top: int, depth: int) -> None:
        nonlocal pos
        el = schema[pos]
        pos += 1
        rep = el.val(F.SE_REPETITION, F.REQUIRED)
        d += rep != F.REQUIRED
        r += rep == F.REPEATED
        name = el.val(F.SE_NAME).decode("utf-8", "replace")
        n = el.val(F.SE_NUM_CHILDREN)
        if n is None or (n == 0 and el.val(F.SE_TYPE) is not None):
            leaves.append(Leaf(len(leaves), path + (name,), top, el, d, r, depth > 0 or r > 0))
            tops[top].leaves.append(len(leaves) - 1)
            return
        for _ in range(n):
            walk(path + (name,), d, r, top, depth + 1)

    for t in range(schema[0].val(F.SE_NUM_CHILDREN, 0)):
        start = pos
        name = schema[pos].val(F.SE_NAME).decode("utf-8", "replace")
        tops.append(TopField(t, name, start, start))
        walk((), 0, 0, t, 0)
        tops[t].schema_end = pos
    return leaves, tops


def sort_key_fn(leaf: Leaf) -> SortKey | None:
    """A function mapping an encoded min/max statistic of ``leaf`` to a Python value ordered as Parquet orders it,
    or None when the type has no usable order here (INT96, INTERVAL, ...)."""
    el = leaf.element
    ptype = el.val(F.SE_TYPE)
    conv = el.val(F.SE_CONVERTED_TYPE)
    logical = el.val(F.SE_LOGICAL_TYPE)
    unsigned = conv in (F.CT_UINT_8, F.CT_UINT_16, F.CT_UINT_32, F.CT_UINT_64)
    if logical is not None and F.LT_INTEGER in logical:
        unsigned = not logical.val(F.LT_INTEGER).val(F.INTTYPE_IS_SIGNED, True)
    decimal = conv == F.CT_DECIMAL or (logical is not None and F.LT_DECIMAL in logical)
    float16 = logical is not None and 15 in logical
    if ptype == F.BOOLEAN:
        return lambda b: b[0]
    if ptype == F.INT32:
        fmt = struct.Struct("<I" if unsigned else "<i")
        return lambda b: fmt.unpack(b[:4])[0]
    if ptype == F.INT64:
        fmt = struct.Struct("<Q" if unsigned else "<q")
        return lambda b: fmt.unpack(b[:8])[0]
    if ptype in (F.FLOAT, F.DOUBLE) or (ptype == F.FIXED_LEN_BYTE_ARRAY and float16):
        fmt = struct.Struct("<e" if float16 else "<f" if ptype == F.FLOAT else "<d")

        def fkey(b: bytes) -> float:
            v: float = fmt.unpack(b)[0]
            if math.isnan(v):
                raise ValueError("NaN bound")  # no order: a caller leaves such bounds out
            return v

        return fkey
    if ptype in (F.BYTE_ARRAY, F.FIXED_LEN_BYTE_ARRAY):
        if decimal:
            return lambda b: int.from_bytes(b, "big", signed=True)
        if ptype == F.FIXED_LEN_BYTE_ARRAY and conv == 21:  # INTERVAL: undefined order
            return None
        return bytes
    return None  # INT96


class ParquetLayout:
    """The decoded footer of one Parquet file, opened read-only through ``mmap``.

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pq.write_table(pa.table({"a": [1, 2, 3]}), p, write_page_index=True)
    >>> with ParquetLayout(p) as lay:
    ...     [pg.first_row for pg in lay.chunk(0, 0).pages]
    [0]
    """

    def __init__(self, path: str | os.PathLike[str] | bytes, *, clock: ThriftClock | None = None,
                 name: str = "<memory>") -> None:
        self.clock = clock or ThriftClock()
        self._fh = None
        self.buf: Any = None
        if isinstance(path, bytes):  # an in-memory file (the engine's re-encoded mini files)
            self.path, self.buf, size = name, path, len(path)
        else:
            self.path = os.fspath(path)
            self._fh = open(self.path, "rb")  # noqa: SIM115 - the reader owns it; close() closes it
            size = os.fstat(self._fh.fileno()).st_size
        try:
            if size < 12:
                raise UnsupportedFileError(f"{self.path} is not a Parquet file (only {size} bytes)")
            if self._fh is not None:  # exactly when buf is still None: a file, not bytes
                self.buf = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)
            self.size = size
            tail = self.buf[size - 8:size]
            if tail[4:] == b"PARE":
                raise UnsupportedFileError(
                    f"{self.path} uses Parquet modular encryption (encrypted footer); the page engine refuses "
                    "encrypted files because copied pages would break their AAD. Rewrite it with a full writer.")
            if tail[4:] != b"PAR1" or self.buf[0:4] != b"PAR1":
                raise UnsupportedFileError(f"{self.path} is not a Parquet file (missing PAR1 magic)")
            flen = struct.unpack("<I", tail[:4])[0]
            self.footer_start = size - 8 - flen
            try:
                self.fmd, _ = self.clock.decode(bytes(self.buf[self.footer_start:size - 8]), 0)
            except (ThriftError, IndexError) as exc:
                raise ParquetRewriteError(f"{self.path}: corrupt footer ({exc})") from exc
            if F.FMD_ENCRYPTION_ALGORITHM in self.fmd:
                raise UnsupportedFileError(
                    f"{self.path} uses Parquet modular encryption (plaintext footer); the page engine refuses "
                    "encrypted files. Rewrite it with a full writer.")
            self.schema: list[TStruct] = self.fmd.val(F.FMD_SCHEMA).items
            self.leaves, self.tops = _read_schema(self.schema)
            self.row_groups: list[TStruct] = self.fmd.val(F.FMD_ROW_GROUPS).items
            self.num_rows: int = self.fmd.val(F.FMD_NUM_ROWS)
            rg_rows = [rg.val(F.RG_NUM_ROWS) for rg in self.row_groups]
            if sum(rg_rows) != self.num_rows:
                shown = ", ".join(map(str, rg_rows[:8])) + (", ..." if len(rg_rows) > 8 else "")
                raise ParquetRewriteError(
                    f"{self.path} has an inconsistent footer: FileMetaData.num_rows is {self.num_rows} but its "
                    f"{len(rg_rows)} row group(s) hold {sum(rg_rows)} rows ({shown}); readers disagree on such a "
                    "file, so it is not changed in place. Rewrite it with a full writer (e.g. Spark) first.")
            for rg in self.row_groups:
                for cc in rg.val(F.RG_COLUMNS).items:
                    if F.CC_CRYPTO_METADATA in cc or F.CC_ENCRYPTED_COLUMN_METADATA in cc:
                        raise UnsupportedFileError(f"{self.path} has encrypted column chunks; the page engine "
                                                   "refuses encrypted files. Rewrite it with a full writer.")
                    if cc.val(F.CC_FILE_PATH):
                        raise UnsupportedFileError(f"{self.path} keeps column data in another file "
                                                   f"({cc.val(F.CC_FILE_PATH)!r}); only self-contained files "
                                                   "can be rewritten.")
        except BaseException:
            self.close()
            raise
        self._chunks: dict[tuple[int, int], Chunk] = {}
        self._offset_indexes: dict[int, TStruct] = {}
        self._page_locations: dict[int, PageLocations] = {}

    def close(self) -> None:
        buf = getattr(self, "buf", None)
        if isinstance(buf, mmap.mmap):
            buf.close()
        self.buf = None
        if self._fh is not None:
            self._fh.close()

    def __enter__(self) -> ParquetLayout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- row groups and chunks ---------------------------------------------------------------------------------
    def rg_rows(self, rg: int) -> int:
        rows: int = self.row_groups[rg].val(F.RG_NUM_ROWS)
        return rows

    def column_chunk(self, rg: int, leaf: int) -> TStruct:
        cc: TStruct = self.row_groups[rg].val(F.RG_COLUMNS).items[leaf]
        return cc

    def read_struct(self, offset: int, length: int | None = None) -> tuple[TStruct, int]:
        """Decode the struct at ``offset``; ``length`` (when known) lets it decode from a bytes copy (faster)."""
        if length is None:  # page headers: try a small window first, an mmap index is slow per byte
            window = bytes(self.buf[offset:min(offset + 512, self.size)])
            try:
                st, end = self.clock.decode(window, 0)
                return st, end
            except (ThriftError, IndexError):
                pass
            st, end = self.clock.decode(self.buf, offset)
            return st, end - offset
        st, end = self.clock.decode(bytes(self.buf[offset:offset + length]), 0)
        return st, end

    def offset_index(self, cc: TStruct) -> TStruct | None:
        off = cc.val(F.CC_OFFSET_INDEX_OFFSET)
        return None if off is None else self._offset_index_at(off, cc)

    def _offset_index_at(self, off: int, cc: TStruct) -> TStruct:
        """The OffsetIndex struct of ``cc``, which has one at byte ``off`` (cached)."""
        if off not in self._offset_indexes:
            self._offset_indexes[off] = self.read_struct(off, cc.val(F.CC_OFFSET_INDEX_LENGTH))[0]
        return self._offset_indexes[off]

    def page_locations(self, cc: TStruct) -> PageLocations | None:
        """The chunk's OffsetIndex as arrays (cached; bulk-decoded, see ``_offset_index``)."""
        off = cc.val(F.CC_OFFSET_INDEX_OFFSET)
        return None if off is None else self._page_locations_at(off, cc)

    def _page_locations_at(self, off: int, cc: TStruct) -> PageLocations:
        """:meth:`page_locations` of ``cc``, which has an OffsetIndex at byte ``off``."""
        if off not in self._page_locations:
            data = bytes(self.buf[off:off + cc.val(F.CC_OFFSET_INDEX_LENGTH)])
            locations = decode_page_locations(data)
            if locations is None:  # an uncommon layout: the generic codec
                locations = from_struct(self._offset_index_at(off, cc), self.clock.encode)
            self._page_locations[off] = locations
        return self._page_locations[off]

    def column_index(self, cc: TStruct) -> TStruct | None:
        off = cc.val(F.CC_COLUMN_INDEX_OFFSET)
        return None if off is None else self.read_struct(off, cc.val(F.CC_COLUMN_INDEX_LENGTH))[0]

    def column_index_bytes(self, cc: TStruct) -> bytes | None:
        off = cc.val(F.CC_COLUMN_INDEX_OFFSET)
        return None if off is None else bytes(self.buf[off:off + cc.val(F.CC_COLUMN_INDEX_LENGTH)])

    def page_bounds(self, cc: TStruct) -> PageBounds | None:
        """The chunk's ColumnIndex entries (bulk-decoded, see ``_column_index``)."""
        data = self.column_index_bytes(cc)
        if data is None:
            return None
        t = time.thread_time()
        bounds = decode_column_index(data)
        self.clock._add(time.thread_time() - t)
        if bounds is None:  # an uncommon layout: the generic codec (the chunk has a ColumnIndex: data is not None)
            bounds = column_index_from_struct(
                self.read_struct(cc.val(F.CC_COLUMN_INDEX_OFFSET), cc.val(F.CC_COLUMN_INDEX_LENGTH))[0])
        return bounds

    def page_header(self, offset: int) -> tuple[TStruct, int]:
        try:
            return self.read_struct(offset)
        except (ThriftError, IndexError) as exc:
            raise ParquetRewriteError(f"{self.path}: corrupt page header at byte {offset} ({exc})") from exc

    def chunk(self, rg: int, leaf: int) -> Chunk:
        """The pages of one column chunk (cached)."""
        key = (rg, leaf)
        if key not in self._chunks:
            self._chunks[key] = self._discover(rg, leaf)
        return self._chunks[key]

    def _discover(self, rg: int, leaf_idx: int) -> Chunk:
        cc = self.column_chunk(rg, leaf_idx)
        cmd = cc.val(F.CC_META_DATA)
        leaf = self.leaves[leaf_idx]
        start, end = self.chunk_range(rg, leaf_idx)
        nrows = self.rg_rows(rg)
        locations = self.page_locations(cc)
        pages: Sequence[Page]
        if locations is not None:
            pages = PageList(locations)
            rows_known = True
        else:
            pages = walked = []
            # No OffsetIndex: walk the page headers. Rows per page are known for v2 pages and for flat v1 pages.
            pos, row, rows_known = start, 0, True
            while pos < end:
                header, hsize = self.page_header(pos)
                size = hsize + header.val(F.PH_COMPRESSED_SIZE)
                ptype = header.val(F.PH_TYPE)
                if ptype == F.DATA_PAGE_V2:
                    walked.append(Page(pos, size, row, header, hsize))
                    row += header.val(F.PH_DATA_PAGE_HEADER_V2).val(F.DPH2_NUM_ROWS)
                elif ptype == F.DATA_PAGE:
                    walked.append(Page(pos, size, row if leaf.max_rep == 0 else None, header, hsize))
                    if leaf.max_rep == 0:
                        row += header.val(F.PH_DATA_PAGE_HEADER).val(F.DPH_NUM_VALUES)
                    else:
                        rows_known = False
                elif pages:
                    raise ParquetRewriteError(
                        f"{self.path}: row group {rg}, column {'.'.join(leaf.path)} has a "
                        f"{F.PAGE_TYPE_NAMES[ptype] if ptype < 4 else ptype} page after its data pages")
                pos += size
            if pos != end:
                raise ParquetRewriteError(f"{self.path}: pages of row group {rg}, column {'.'.join(leaf.path)} "
                                          f"overrun the chunk ({pos} != {end})")
        if not pages:
            raise ParquetRewriteError(f"{self.path}: row group {rg}, column {'.'.join(leaf.path)} has no data pages")
        dictionary_page = None
        if pages[0].offset > start:
            dictionary_page = self._dictionary_page_at(start)
        return Chunk(rg, leaf_idx, cc, cmd, start, end, pages[0].offset, pages, rows_known, nrows, dictionary_page)

    def _dictionary_page_at(self, start: int) -> int | None:
        header, _ = self.page_header(start)
        return start if header.val(F.PH_TYPE) == F.DICTIONARY_PAGE else None

    def chunk_head(self, rg: int, leaf: int) -> tuple[int | None, int]:
        """(dictionary page offset or None, first data page offset) of a chunk, from its page headers.

        Reads one or two headers, not the whole chunk: what a copied chunk needs to get a footer any reader accepts.
        No header is read where the footer leaves no doubt: a dictionary offset before the data page offset, or no
        dictionary offset and no dictionary encoding among the chunk's encodings.
        """
        if (rg, leaf) in self._chunks:
            ch = self._chunks[(rg, leaf)]
            return ch.dictionary_page, ch.prefix_end
        cmd = self.column_chunk(rg, leaf).val(F.CC_META_DATA)
        data_off = cmd.val(F.CMD_DATA_PAGE_OFFSET)
        dict_off = cmd.val(F.CMD_DICTIONARY_PAGE_OFFSET)
        start, end = self.chunk_range(rg, leaf)
        if not cmd.val(F.CMD_INDEX_PAGE_OFFSET):
            if dict_off and dict_off == start < data_off:
                return dict_off, data_off
            encodings = cmd.val(F.CMD_ENCODINGS)
            if not dict_off and encodings is not None and not {F.PLAIN_DICTIONARY, F.RLE_DICTIONARY} & set(
                    encodings.items):
                return None, data_off
        pos, dictionary_page = start, None
        while pos < end:
            header, hsize = self.page_header(pos)
            ptype = header.val(F.PH_TYPE)
            if ptype in (F.DATA_PAGE, F.DATA_PAGE_V2):
                return dictionary_page, pos
            if ptype == F.DICTIONARY_PAGE and pos == start:
                dictionary_page = pos
            pos += hsize + header.val(F.PH_COMPRESSED_SIZE)
        path = ".".join(self.leaves[leaf].path)
        raise ParquetRewriteError(f"{self.path}: row group {rg}, column {path} has no data pages")

    def chunk_range(self, rg: int, leaf: int) -> tuple[int, int]:
        """[start, end) of a column chunk's pages (dictionary page included), from the footer alone."""
        cmd = self.column_chunk(rg, leaf).val(F.CC_META_DATA)
        data_off = cmd.val(F.CMD_DATA_PAGE_OFFSET)
        dict_off = cmd.val(F.CMD_DICTIONARY_PAGE_OFFSET)
        start = data_off if not dict_off or dict_off > data_off else dict_off  # 0 means absent for some writers
        idx_off = cmd.val(F.CMD_INDEX_PAGE_OFFSET)
        if idx_off:
            start = min(start, idx_off)
        return start, start + cmd.val(F.CMD_TOTAL_COMPRESSED_SIZE)

    def page_count(self, rg: int, leaf: int) -> int:
        """Number of data pages of a chunk, read as cheaply as possible (OffsetIndex, encoding stats, headers)."""
        if (rg, leaf) in self._chunks:
            return len(self._chunks[(rg, leaf)].pages)
        cc = self.column_chunk(rg, leaf)
        if F.CC_OFFSET_INDEX_OFFSET in cc:
            off = cc.val(F.CC_OFFSET_INDEX_OFFSET)
            if off in self._page_locations:
                return len(self._page_locations[off])
            count = count_page_locations(bytes(self.buf[off:off + min(12, cc.val(F.CC_OFFSET_INDEX_LENGTH))]))
            return count if count is not None else len(self._page_locations_at(off, cc))
        stats = cc.val(F.CC_META_DATA).val(F.CMD_ENCODING_STATS)
        if stats is not None:
            return sum(e.val(F.PES_COUNT) for e in stats.items
                       if e.val(F.PES_PAGE_TYPE) in (F.DATA_PAGE, F.DATA_PAGE_V2))
        return len(self.chunk(rg, leaf).pages)

    def ensure_header(self, page: Page) -> TStruct:
        if page.header is None:
            page.header, page.header_size = self.page_header(page.offset)
        return page.header


# -- chunk geometry ----------------------------------------------------------------------------------------


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
