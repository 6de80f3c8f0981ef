"""The output side of a rewrite: column chunks as byte pieces, and the file written from them.

A ``_ChunkOut`` is one output chunk: ranges copied from the source and re-encoded bytes, with its metadata holding
offsets relative to the chunk. ``_write_output`` lays the chunks out in file order, then the page indexes, bloom
filters and the footer.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from partialcow.exceptions import ParquetRewriteError
from partialcow.parquet import _format as F
from partialcow.parquet._column_index import PageBounds
from partialcow.parquet._layout import ParquetLayout, SortKey
from partialcow.parquet._offset_index import PageLocations, encode_offset_indexes
from partialcow.parquet._thrift import T_I32, T_I64, T_LIST, T_STRUCT, TList, TStruct

if TYPE_CHECKING:
    from partialcow.parquet._rewriter import _Stats


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
    expect: _Expected | None = None  # set on rewritten chunks: what the post-write check decodes and compares


@dataclass
class _Expected:
    """What a rewritten chunk must decode to (checked by ``_verify`` once the file is written).

    ``pages``: a sample of its re-encoded data pages (see ``sample_runs``) as (offset relative to the chunk start,
    size, values the page encodes): only those values are kept until the check, not the chunk's;
    ``field_values``: the values of a top-level field of several leaves re-encoded whole (on its first leaf's chunk
    only; such fields are decoded whole).
    """

    top: int
    pages: list[tuple[int, int, pa.Array]] = field(default_factory=list)
    field_values: pa.Array | None = None


SAMPLE_RUNS = 8  # re-encoded runs per chunk whose first and last pages the post-write check decodes


def sample_runs(runs: list[list[tuple[int, int, pa.Array]]]) -> list[tuple[int, int, pa.Array]]:
    """The pages to check of a chunk's re-encoded ``runs`` (each: its pages as in _Expected.pages, in file order):
    the first and last page of at most SAMPLE_RUNS runs spread over the chunk, its first and last run included.
    Splices go wrong at run boundaries; the pages in between are pyarrow's, laid out by pyarrow."""
    if len(runs) > SAMPLE_RUNS:
        picks = np.unique(np.linspace(0, len(runs) - 1, SAMPLE_RUNS).round().astype(int))
        runs = [runs[i] for i in picks]
    out = []
    for pages in runs:
        out.extend(pages[:1] + pages[1:][-1:])
    return out


def run_pages(base: int, pages: list[tuple[int, int, int]], values: pa.Array) -> list[tuple[int, int, pa.Array]]:
    """A run's first and last page for ``sample_runs``: ``pages`` are (offset, size, first row) relative to the run,
    which starts ``base`` bytes into the chunk and encodes ``values``."""
    picked = sorted({0, len(pages) - 1})
    out = []
    for i in picked:
        offset, size, first = pages[i]
        end = pages[i + 1][2] if i + 1 < len(pages) else len(values)
        # a copy: a slice would keep the whole chunk's values alive until the check
        out.append((base + offset, size, pa.concat_arrays([values.slice(first, end - first)])))
    return out


#: the source row group number ``_write_output`` takes for a row group of appended rows (no source row group)
APPENDED = -1


@dataclass
class _Written:
    """A rewritten chunk as placed in the output: output row group ordinal, source row group, the chunk."""

    ordinal: int
    src_rg: int
    out: _ChunkOut


def _copy_chunk(lay: ParquetLayout, rg: int, leaf: int) -> _ChunkOut:
    """An untouched chunk: one byte range; its OffsetIndex only moves (no page headers are read)."""
    cc = lay.column_chunk(rg, leaf)
    cmd = cc.val(F.CC_META_DATA).copy()
    start, end = lay.chunk_range(rg, leaf)
    dictionary_page, first_data_page = lay.chunk_head(rg, leaf)
    rel = _page_offsets(cmd, start, dictionary_page, first_data_page)
    # the OffsetIndex is decoded when the output is written, while rewritten chunks are still being encoded
    locs = _MovedOffsetIndex(cc) if F.CC_OFFSET_INDEX_OFFSET in cc else None
    ci = None
    if F.CC_COLUMN_INDEX_OFFSET in cc:
        off = cc.val(F.CC_COLUMN_INDEX_OFFSET)
        ci = bytes(lay.buf[off:off + cc.val(F.CC_COLUMN_INDEX_LENGTH)])
    return _ChunkOut(leaf, cc, cmd, [("copy", start, end - start)], end - start, rel, locs, ci,
                     _bloom_bytes(lay, cmd), start)


def _page_offsets(cmd: TStruct, start: int, dictionary_page: int | None, first_data_page: int) -> dict[int, int]:
    """The chunk's page offsets relative to ``start`` as the footer must state them: data_page_offset at the first
    data page, dictionary_page_offset at the dictionary page when there is one and absent otherwise (``cmd`` loses
    a stale one). Writers that leave the dictionary offset unset (parquet-mr 1.12) are read by readers that guess;
    a footer that states it is read by all."""
    rel = {F.CMD_DATA_PAGE_OFFSET: first_data_page - start}
    if dictionary_page is not None:
        rel[F.CMD_DICTIONARY_PAGE_OFFSET] = dictionary_page - start
    else:
        cmd.drop(F.CMD_DICTIONARY_PAGE_OFFSET)
    if cmd.val(F.CMD_INDEX_PAGE_OFFSET):
        rel[F.CMD_INDEX_PAGE_OFFSET] = cmd.val(F.CMD_INDEX_PAGE_OFFSET) - start
    return rel


def _bloom_bytes(lay: ParquetLayout, cmd: TStruct) -> bytes | None:
    off = cmd.val(F.CMD_BLOOM_FILTER_OFFSET)
    if off is None:
        return None
    length = cmd.val(F.CMD_BLOOM_FILTER_LENGTH)
    if length is None:  # header (numBytes = field 1) followed by the bitset
        header, hsize = lay.read_struct(off)
        length = hsize + header.val(1)
    return bytes(lay.buf[off:off + length])


def _boundary_order(leaf_key: SortKey | None, null_pages: list[int], mins: list[bytes], maxs: list[bytes]) -> int:
    if leaf_key is None:
        return F.UNORDERED
    try:
        pairs = [(leaf_key(lo), leaf_key(hi)) for n, lo, hi in zip(null_pages, mins, maxs) if n != 1]
    except (ValueError, struct.error):  # a NaN bound or a malformed entry: claim no order
        return F.UNORDERED
    if all(a[0] <= b[0] and a[1] <= b[1] for a, b in itertools.pairwise(pairs)):
        return F.ASCENDING
    if all(a[0] >= b[0] and a[1] >= b[1] for a, b in itertools.pairwise(pairs)):
        return F.DESCENDING
    return F.UNORDERED


# writers cut column-index entries to 64 bytes, fewer to end on a whole UTF-8 character: no cut is shorter than this
_SHORTEST_CUT = 61


def _chunk_bounds(leaf_key: SortKey | None, old: TStruct | None, copied: list[PageBounds] | None,
                  reencoded: list[PageBounds] | None, *, copied_exact: bool = True) -> tuple[bytes, bytes] | None:
    """The min/max of a spliced chunk from its pages' column-index entries, or None when unknown (pages without
    entries, bounds that cannot be compared). ``copied``: the entries of the copied pages, whose bounds are narrowed
    by the old chunk's (a copied page's values lie within both, so a truncated entry is not widened further);
    ``reencoded``: of the re-encoded pages. Never the old chunk's bounds alone: the values that set them may have
    been replaced or deleted, and table formats publish these bounds as exact (Delta's and Iceberg's MIN/MAX
    answered from metadata). ``copied_exact=False``: the copied entries may be truncated values (parquet-java cuts
    binary column-index entries to 64 bytes), so a bound they alone give is not a value: None."""
    if leaf_key is None or copied is None or reencoded is None:
        return None
    cands: list[tuple[bytes, bytes]] = []
    try:
        for parts, narrow in ((copied, True), (reencoded, False)):
            lows = [lo for part in parts for empty, lo in zip(part.null_pages, part.mins) if empty != 1]
            if not lows:
                continue
            highs = [hi for part in parts for empty, hi in zip(part.null_pages, part.maxs) if empty != 1]
            if narrow and not copied_exact and not _exact_bounds(old):
                return None  # cut entries, and no whole old bound among them to stand for a value
            if narrow and old is not None and F.ST_MIN_VALUE in old and F.ST_MAX_VALUE in old:
                old_lo, old_hi = bytes(old.val(F.ST_MIN_VALUE)), bytes(old.val(F.ST_MAX_VALUE))
                # a copied page still starting at the old bound holds it (the usual case: no key function to run).
                # With cut entries only a bound shorter than any cut proves it: a cut entry of a longer value can
                # spell a replaced old bound of the cut's length
                if not copied_exact and (old_lo not in lows or old_hi not in highs
                                         or max(len(old_lo), len(old_hi)) >= _SHORTEST_CUT):
                    return None
                lo = old_lo if old_lo in lows else max(min(lows, key=leaf_key), old_lo, key=leaf_key)
                hi = old_hi if old_hi in highs else min(max(highs, key=leaf_key), old_hi, key=leaf_key)
            else:
                lo, hi = min(lows, key=leaf_key), max(highs, key=leaf_key)
            cands.append((lo, hi))
        if not cands:
            return None
        return min((c[0] for c in cands), key=leaf_key), max((c[1] for c in cands), key=leaf_key)
    except (ValueError, struct.error):  # a NaN bound, or a bound of the wrong width
        return None


def _exact_bounds(statistics: TStruct | None) -> bool:
    """Whether chunk statistics hold a min and a max that are values, not bounds a writer cut short (statistics'
    ``is_min_value_exact`` / ``is_max_value_exact``, when a writer sets them)."""
    return (statistics is not None and F.ST_MIN_VALUE in statistics and F.ST_MAX_VALUE in statistics
            and statistics.val(F.ST_IS_MIN_VALUE_EXACT, True) and statistics.val(F.ST_IS_MAX_VALUE_EXACT, True))


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
        if self._cfr and self.src._fh is not None:  # an in-memory source (bytes) has no file to copy from
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
                  ) -> tuple[int, list[_Written]]:
    """Write the chunks of ``groups`` (consumed once, in file order), the page indexes and the footer; returns the
    size and where the rewritten chunks went (for ``_verify``).

    ``stats`` is read only after ``groups`` is exhausted (a streaming rewriter completes it at the end)."""
    clock = lay.clock
    sink = _Sink(fd, lay)
    sink.write(b"PAR1")
    placed: list[tuple[TStruct, _ChunkOut, int]] = []  # (new ColumnChunk, chunk out, absolute start)
    new_rgs = []
    rg_sources = []
    written: list[_Written] = []
    total_rows = 0
    for ordinal, (rg_idx, outs, rows) in enumerate(groups):
        total_rows += rows
        rg_sources.append(rg_idx)
        rg = lay.row_groups[-1 if rg_idx == APPENDED else rg_idx].copy()
        if rg_idx == APPENDED:  # laid out like the last row group; its rows follow no sort order
            rg.drop(F.RG_SORTING_COLUMNS)
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
            if out.expect is not None:
                written.append(_Written(ordinal, rg_idx, out))
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
    indexed: list[TStruct] = []
    all_locations: list[PageLocations] = []
    unmoved: dict[int, bytes] = {}
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
            if src is None:  # _MovedOffsetIndex is made only for a source chunk that has an OffsetIndex
                raise ParquetRewriteError(f"{lay.path}: a copied chunk lost its OffsetIndex")
            locations = PageLocations(src.offsets + (start - out.src_start), src.sizes, src.first_rows, src.tail)
        elif isinstance(out.locs, PageLocations):
            locations = PageLocations(out.locs.offsets + start, out.locs.sizes, out.locs.first_rows, out.locs.tail)
        else:
            entries = np.array(out.locs, dtype=np.int64).reshape(-1, 3)  # (offset, size, first row) per page
            locations = PageLocations(entries[:, 0] + start, entries[:, 1], entries[:, 2])
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
    return sink.pos, written
