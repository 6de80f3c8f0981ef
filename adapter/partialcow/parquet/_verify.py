"""The post-write check: a rewritten file must read back before it replaces anything.

``rewrite_file`` writes to a temporary file; before it is renamed (and so before any table commit sees it), this
module re-opens it and checks what a reader relies on, for every chunk that was rewritten rather than copied:

- the footer decodes, its schema is the source's, and the row groups' row counts add up to the file's;
- the page headers walk exactly over [chunk start, start + total_compressed_size); the chunk starts with a
  dictionary page iff dictionary_page_offset is set (and points at it); data_page_offset points at the first data
  page; the data pages' num_values add up to the chunk's (and their rows to the row group's where pages say);
- the OffsetIndex lists exactly the walked data pages, first rows strictly increasing from 0, matching the rows
  the pages hold; a ColumnIndex has one entry per data page;
- pyarrow decodes re-encoded pages, with the chunk's dictionary page as written, to the values the rewrite meant to
  write, compared value by value (NaN equals NaN, -0.0 differs from 0.0), for a sample of pages (below).

Copied chunks are only checked to lie inside the file: their pages are the source's, byte for byte.

Cost: the walk reads every page header of a rewritten chunk with a lean decoder (no objects built). Decoding every
re-encoded value again would cost a good part of the rewrite (a whole-chunk re-encode decodes and encodes the
chunk; its check would decode it once more), and keeping those values until the file is written would hold every
re-encoded chunk in memory, so the rewriter keeps the values of a sample of pages (``_output.sample_runs``: the
first and last page of at most ``SAMPLE_RUNS`` re-encoded runs per chunk, where splices go wrong), decoded here
together with the dictionary page as written. Top-level fields of several leaves (structs, maps) re-encoded whole
are decoded whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from partialcow.exceptions import ParquetRewriteError
from partialcow.parquet import _format as F
from partialcow.parquet._changes import _changed_mask
from partialcow.parquet._layout import Page, ParquetLayout, ThriftClock
from partialcow.parquet._output import _Written
from partialcow.parquet._pagecodec import _decode_pages
from partialcow.parquet._thrift import ThriftError, TStruct, _read_value, _varint

__all__ = ["verify_output"]


class _Failed(Exception):
    """One check failed (message: which)."""


@dataclass
class _Walked:
    """A rewritten chunk's pages as its headers say: start/prefix end, and per data page offset, size, values,
    rows (None where the page does not say: v1 pages of repeated columns)."""

    start: int
    prefix_end: int
    offsets: np.ndarray
    sizes: np.ndarray
    values: list[int]
    rows: list[int] | None


def verify_output(path: str, dst: str, src: ParquetLayout, written: list[_Written], *,
                  clock: ThriftClock | None = None) -> None:
    """Check the file at ``path`` (the rewrite of ``src`` about to become ``dst``); ``written``: its rewritten
    chunks. Raises ParquetRewriteError naming the file, row group, column and the check that failed."""
    where = ""
    try:
        try:
            out = ParquetLayout(path, clock=clock)
        except Exception as exc:
            raise _Failed(f"the footer does not decode ({exc})") from exc
        with out:
            if out.fmd.val(F.FMD_SCHEMA).items != src.fmd.val(F.FMD_SCHEMA).items:
                raise _Failed("the schema differs from the source's")
            _check_chunk_bounds(out)
            walked = []
            for w in written:
                where = _where(out, w)
                walked.append(_check_pages(out, w))
            for w, pages in zip(written, walked):
                where = _where(out, w)
                _check_values(out, w, pages)
    except _Failed as exc:
        raise ParquetRewriteError(
            f"{dst}: the rewrite of {src.path} failed its post-write check and was not written "
            f"({where}{exc}). Nothing was changed; this is a bug in the page engine, please report it with the "
            "source file.") from exc


def _where(out: ParquetLayout, w: _Written) -> str:
    if w.src_rg < 0:
        rg = f"appended row group (row group {w.ordinal} of the output)"
    else:
        rg = f"row group {w.src_rg}" + (f" (row group {w.ordinal} of the output)" if w.ordinal != w.src_rg else "")
    return f"{rg}, column {'.'.join(out.leaves[w.out.leaf].path)}: "


def _check_chunk_bounds(out: ParquetLayout) -> None:
    for rg in range(len(out.row_groups)):
        for leaf in out.leaves:
            start, end = out.chunk_range(rg, leaf.index)
            if start < 4 or end > out.footer_start:
                raise _Failed(f"row group {rg}, column {'.'.join(leaf.path)}: the chunk [{start}, {end}) lies "
                              f"outside the file's data [4, {out.footer_start})")


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _skip(b: bytes, pos: int, ttype: int) -> int:
    """The position after a compact-protocol value of ``ttype`` at ``pos`` (structs and binaries are skipped, not
    built: page statistics sit in most headers)."""
    if ttype == 8:  # binary
        n, pos = _varint(b, pos)
        return pos + n
    if ttype == 12:  # struct
        while True:
            head = b[pos]
            pos += 1
            if head == 0:
                return pos
            if not head >> 4:  # long-form field id
                _, pos = _varint(b, pos)
            ftype = head & 0x0F
            if ftype in (4, 5, 6):
                _, pos = _varint(b, pos)
            elif ftype not in (1, 2):
                pos = _skip(b, pos, ftype)
    return _read_value(b, pos, ttype)[1]


def _ints(b: bytes, pos: int, wanted: tuple[int, ...]) -> tuple[dict[int, int], int]:
    """The integer fields ``wanted`` of the compact struct at ``pos`` (others skipped); returns them and its end."""
    found: dict[int, int] = {}
    last = 0
    while True:
        head = b[pos]
        pos += 1
        if head == 0:
            return found, pos
        ttype, delta = head & 0x0F, head >> 4
        if delta:
            fid = last + delta
        else:
            raw, pos = _varint(b, pos)
            fid = _zigzag(raw)
        last = fid
        if ttype in (4, 5, 6):  # i16 / i32 / i64
            raw = b[pos]
            if raw < 0x80:  # one-byte varint: the common case
                pos += 1
            else:
                raw, pos = _varint(b, pos)
            if fid in wanted:
                found[fid] = (raw >> 1) ^ -(raw & 1)
        elif ttype not in (1, 2):  # bools carry no payload
            pos = _skip(b, pos, ttype)


_SUB_HEADER = {F.DATA_PAGE: F.PH_DATA_PAGE_HEADER, F.DICTIONARY_PAGE: F.PH_DICTIONARY_PAGE_HEADER,
               F.DATA_PAGE_V2: F.PH_DATA_PAGE_HEADER_V2}


def _header(b: bytes, pos: int) -> tuple[int, int, int, int, int | None]:
    """(page type, compressed size, header length, num_values, num_rows or None) of the page header at ``pos``."""
    found: dict[int, int] = {}
    sub: dict[int, int] = {}
    start, last = pos, 0
    while True:
        head = b[pos]
        pos += 1
        if head == 0:
            break
        ttype, delta = head & 0x0F, head >> 4
        if delta:
            fid = last + delta
        else:
            raw, pos = _varint(b, pos)
            fid = _zigzag(raw)
        last = fid
        if ttype in (4, 5, 6):
            raw = b[pos]
            if raw < 0x80:
                pos += 1
            else:
                raw, pos = _varint(b, pos)
            found[fid] = (raw >> 1) ^ -(raw & 1)
        elif ttype == 12 and fid == _SUB_HEADER.get(found.get(F.PH_TYPE, -1)):
            sub, pos = _ints(b, pos, (1, 3))
        elif ttype not in (1, 2):
            pos = _skip(b, pos, ttype)
    ptype = found.get(F.PH_TYPE)
    csize = found.get(F.PH_COMPRESSED_SIZE)
    if ptype is None or csize is None or csize < 0 or ptype not in (0, 1, 2, 3):
        raise _Failed(f"byte {start} holds no page header (type {ptype}, compressed size {csize})")
    return ptype, csize, pos - start, sub.get(1, 0), sub.get(3) if ptype == F.DATA_PAGE_V2 else None


def _check_pages(out: ParquetLayout, w: _Written) -> _Walked:
    rg, leaf = w.ordinal, out.leaves[w.out.leaf]
    cc = out.column_chunk(rg, leaf.index)
    cmd = cc.val(F.CC_META_DATA)
    start, end = out.chunk_range(rg, leaf.index)
    b = bytes(out.buf[start:end])
    pages: list[tuple[int, int, int, int, int | None]] = []  # (offset, size, type, num_values, num_rows)
    pos = 0
    while pos < len(b):
        try:
            ptype, csize, hsize, nvals, nrows = _header(b, pos)
        except (ThriftError, IndexError) as exc:
            raise _Failed(f"the page header at byte {start + pos} does not decode") from exc
        pages.append((start + pos, hsize + csize, ptype, nvals, nrows))
        pos += hsize + csize
    if pos != len(b):
        raise _Failed(f"the page headers walk to byte {start + pos}, not to the chunk's end {end} (start {start} + "
                      f"total_compressed_size {cmd.val(F.CMD_TOTAL_COMPRESSED_SIZE)})")
    data = [p for p in pages if p[2] in (F.DATA_PAGE, F.DATA_PAGE_V2)]
    if not data:
        raise _Failed("the chunk has no data pages")
    dict_off = cmd.val(F.CMD_DICTIONARY_PAGE_OFFSET)
    starts_with_dict = pages[0][2] == F.DICTIONARY_PAGE
    if starts_with_dict != bool(dict_off) or (starts_with_dict and dict_off != pages[0][0]):
        raise _Failed(f"dictionary_page_offset is {dict_off} but the chunk starts with a "
                      f"{F.PAGE_TYPE_NAMES[pages[0][2]]} page at byte {pages[0][0]}")
    if any(p[2] == F.DICTIONARY_PAGE for p in pages[1:]):
        raise _Failed("a dictionary page follows the chunk's first page")
    if cmd.val(F.CMD_DATA_PAGE_OFFSET) != data[0][0]:
        raise _Failed(f"data_page_offset is {cmd.val(F.CMD_DATA_PAGE_OFFSET)} but the first data page is at "
                      f"byte {data[0][0]}")
    values = [p[3] for p in data]
    if sum(values) != cmd.val(F.CMD_NUM_VALUES):
        raise _Failed(f"the data pages hold {sum(values)} values but num_values is {cmd.val(F.CMD_NUM_VALUES)}")
    rg_rows = out.rg_rows(rg)
    if all(p[4] is not None for p in data):
        rows: list[int] | None = [p[4] for p in data if p[4] is not None]  # the filter only narrows the type
    elif leaf.max_rep == 0:
        rows = values  # a flat column holds one value (or null) per row
    else:
        rows = None
    if rows is not None and sum(rows) != rg_rows:
        raise _Failed(f"the data pages hold {sum(rows)} rows but the row group has {rg_rows}")
    walked = _Walked(start, data[0][0], np.array([p[0] for p in data], dtype=np.int64),
                     np.array([p[1] for p in data], dtype=np.int64), values, rows)
    if F.CC_OFFSET_INDEX_OFFSET in cc:
        _check_offset_index(out, cc, walked, rg_rows)
    if F.CC_COLUMN_INDEX_OFFSET in cc:
        try:
            bounds = out.page_bounds(cc)
        except Exception as exc:
            raise _Failed(f"the ColumnIndex does not decode ({exc})") from exc
        if bounds is not None and len(bounds) != len(data):
            raise _Failed(f"the ColumnIndex has {len(bounds)} entries for {len(data)} data pages")
    return walked


def _check_offset_index(out: ParquetLayout, cc: TStruct, walked: _Walked, rg_rows: int) -> None:
    try:
        locs = out.page_locations(cc)
    except Exception as exc:
        raise _Failed(f"the OffsetIndex does not decode ({exc})") from exc
    if locs is None:  # the caller checks that the chunk has one
        raise _Failed("the OffsetIndex is missing")
    offsets, sizes = walked.offsets, walked.sizes
    if len(locs) != len(offsets) or not np.array_equal(locs.offsets, offsets) or not np.array_equal(locs.sizes, sizes):
        n = min(len(locs), len(offsets))
        bad = next((i for i in range(n) if (locs.offsets[i], locs.sizes[i]) != (offsets[i], sizes[i])), n)
        raise _Failed(f"the OffsetIndex lists {len(locs)} pages for {len(offsets)} data pages; page {bad} differs")
    firsts = locs.first_rows
    if firsts[0] != 0 or (len(firsts) > 1 and not (np.diff(firsts) > 0).all()) or firsts[-1] >= max(rg_rows, 1):
        raise _Failed(f"the OffsetIndex first rows are not strictly increasing from 0 below {rg_rows}: "
                      f"{firsts[:8].tolist()}...")
    if walked.rows is not None and not np.array_equal(firsts, np.cumsum([0] + walked.rows[:-1])):
        raise _Failed("the OffsetIndex first rows disagree with the rows the pages hold")


def _check_values(out: ParquetLayout, w: _Written, walked: _Walked) -> None:
    expect = w.out.expect
    if expect is None or (expect.field_values is None and not expect.pages):
        return
    top = out.tops[expect.top]
    try:
        if expect.field_values is not None:
            got = _decode_pages(out, top, w.ordinal, None, out.rg_rows(w.ordinal))
            want = expect.field_values
        else:
            picked = []
            for rel, size, _ in expect.pages:
                a = walked.start + rel
                i = int(np.searchsorted(walked.offsets, a))
                if i == len(walked.offsets) or walked.offsets[i] != a or walked.sizes[i] != size:
                    raise _Failed(f"a re-encoded page of {size} bytes at byte {a} is not where the chunk's page "
                                  "headers are")
                picked.append(i)
            want = pa.concat_arrays([values for _, _, values in expect.pages])
            pages = [Page(int(walked.offsets[i]), int(walked.sizes[i]), None) for i in picked]
            got = _decode_pages(out, top, w.ordinal, {w.out.leaf: pages}, len(want),
                                prefixes={w.out.leaf: (walked.start, walked.prefix_end)},
                                num_values={w.out.leaf: sum(walked.values[i] for i in picked)})
    except _Failed:
        raise
    except Exception as exc:
        raise _Failed(f"the re-encoded pages do not decode ({exc})") from exc
    problem = _difference(got, want)
    if problem is not None:
        raise _Failed(f"the re-encoded pages decode to other values than written: {problem}")


def _has_floats(t: pa.DataType) -> bool:
    if pa.types.is_floating(t):
        return True
    return any(_has_floats(t.field(i).type) for i in range(t.num_fields)) if t.num_fields else False


def _difference(got: pa.Array, want: pa.Array) -> str | None:
    """None if ``got`` holds the values of ``want`` (NaN equals NaN; -0.0 differs from 0.0), else what differs."""
    if len(got) != len(want):
        return f"{len(got)} values where {len(want)} were written"
    if got.type != want.type:
        try:
            want = want.cast(got.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return f"type {got.type} where {want.type} was written"
    if pa.types.is_nested(got.type):
        if _has_floats(got.type) or got.equals(want):  # NaN != NaN for equals: floats inside are checked by count
            return None
        return "nested values differ"
    mask = _changed_mask(want, got)
    if mask.any():
        i = int(np.argmax(mask))
        return f"value {i} is {got[i].as_py()!r} where {want[i].as_py()!r} was written"
    return None
