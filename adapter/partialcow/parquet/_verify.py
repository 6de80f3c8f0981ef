"""The post-write check: a rewritten file must read back before it replaces anything.

``rewrite_file`` writes to a temporary file; before it is renamed (and so before any table commit sees it), this
module re-opens it and checks what a reader relies on, for every chunk that was rewritten rather than copied:

- the footer decodes, its schema is the source's, and the row groups' row counts add up to the file's;
- the page headers walk exactly over [chunk start, start + total_compressed_size); the chunk starts with a
  dictionary page iff dictionary_page_offset is set (and points at it); data_page_offset points at the first data
  page; the data pages' num_values add up to the chunk's (and their rows to the row group's where pages say);
- the OffsetIndex lists exactly the walked data pages, first rows strictly increasing from 0;
- pyarrow decodes the re-encoded pages (with the chunk's dictionary page, as written) to the values the rewrite
  meant to write: compared value by value for flat columns, by ``equals`` for nested ones without floats, by
  count otherwise.

Copied chunks are only checked to lie inside the file: their pages are the source's, byte for byte. The cost is
one header decode per page of a rewritten chunk and one pyarrow decode of its re-encoded pages (all runs of a
chunk in one in-memory file).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from partialcow.exceptions import ParquetRewriteError
from partialcow.parquet import _format as F
from partialcow.parquet._changes import _changed_mask
from partialcow.parquet._layout import ParquetLayout, ThriftClock
from partialcow.parquet._output import _Written
from partialcow.parquet._pagecodec import _decode_pages

__all__ = ["verify_output"]


class _Failed(Exception):
    """One check failed (message: which)."""


def verify_output(path: str, dst: str, src: ParquetLayout, written: list[_Written], *,
                  clock: ThriftClock | None = None) -> None:
    """Check the file at ``path`` (the rewrite of ``src`` about to become ``dst``); ``written``: its rewritten
    chunks. Raises ParquetRewriteError naming the file, row group, column and the check that failed."""
    where = ""
    try:
        try:
            out = ParquetLayout(path, clock=clock)
        except Exception as exc:  # noqa: BLE001 - any failure to open is the finding
            raise _Failed(f"the footer does not decode ({exc})") from exc
        with out:
            if out.fmd.val(F.FMD_SCHEMA).items != src.fmd.val(F.FMD_SCHEMA).items:
                raise _Failed("the schema differs from the source's")
            _check_chunk_bounds(out)
            for w in written:
                where = _where(out, w)
                _check_pages(out, w)
            for w in written:
                where = _where(out, w)
                _check_values(out, w)
    except _Failed as exc:
        raise ParquetRewriteError(
            f"{dst}: the rewrite of {src.path} failed its post-write check and was not written "
            f"({where}{exc}). Nothing was changed; this is a bug in the page engine, please report it with the "
            "source file.") from exc


def _where(out: ParquetLayout, w: _Written) -> str:
    rg = f"row group {w.src_rg}" + (f" (row group {w.ordinal} of the output)" if w.ordinal != w.src_rg else "")
    return f"{rg}, column {'.'.join(out.leaves[w.out.leaf].path)}: "


def _check_chunk_bounds(out: ParquetLayout) -> None:
    for rg in range(len(out.row_groups)):
        for leaf in out.leaves:
            start, end = out.chunk_range(rg, leaf.index)
            if start < 4 or end > out.footer_start:
                raise _Failed(f"row group {rg}, column {'.'.join(leaf.path)}: the chunk [{start}, {end}) lies "
                              f"outside the file's data [4, {out.footer_start})")


def _check_pages(out: ParquetLayout, w: _Written) -> None:
    rg, leaf = w.ordinal, out.leaves[w.out.leaf]
    cc = out.column_chunk(rg, leaf.index)
    cmd = cc.val(F.CC_META_DATA)
    start, end = out.chunk_range(rg, leaf.index)
    pages: list[tuple[int, int, int, int, int | None]] = []  # (offset, size, type, num_values, num_rows)
    pos = start
    while pos < end:
        try:
            header, hsize = out.page_header(pos)
        except ParquetRewriteError as exc:
            raise _Failed(f"the page header at byte {pos} does not decode") from exc
        ptype, csize = header.val(F.PH_TYPE), header.val(F.PH_COMPRESSED_SIZE)
        if ptype not in (F.DATA_PAGE, F.INDEX_PAGE, F.DICTIONARY_PAGE, F.DATA_PAGE_V2) or csize is None or csize < 0:
            raise _Failed(f"byte {pos} holds no page header (type {ptype}, compressed size {csize})")
        nvals = nrows = None
        if ptype == F.DATA_PAGE:
            nvals = header.val(F.PH_DATA_PAGE_HEADER).val(F.DPH_NUM_VALUES)
        elif ptype == F.DATA_PAGE_V2:
            v2 = header.val(F.PH_DATA_PAGE_HEADER_V2)
            nvals, nrows = v2.val(F.DPH2_NUM_VALUES), v2.val(F.DPH2_NUM_ROWS)
        pages.append((pos, hsize + csize, ptype, nvals or 0, nrows))
        pos += hsize + csize
    if pos != end:
        raise _Failed(f"the page headers walk to byte {pos}, not to the chunk's end {end} (start {start} + "
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
    total_values = sum(p[3] for p in data)
    if total_values != cmd.val(F.CMD_NUM_VALUES):
        raise _Failed(f"the data pages hold {total_values} values but num_values is {cmd.val(F.CMD_NUM_VALUES)}")
    rg_rows = out.rg_rows(rg)
    if all(p[4] is not None for p in data):
        page_rows = [p[4] for p in data]
    elif leaf.max_rep == 0:
        page_rows = [p[3] for p in data]  # a flat column holds one value (or null) per row
    else:
        page_rows = None
    if page_rows is not None and sum(page_rows) != rg_rows:
        raise _Failed(f"the data pages hold {sum(page_rows)} rows but the row group has {rg_rows}")
    if F.CC_OFFSET_INDEX_OFFSET in cc:
        _check_offset_index(out, cc, data, page_rows, rg_rows)
    if F.CC_COLUMN_INDEX_OFFSET in cc:
        try:
            bounds = out.page_bounds(cc)
        except Exception as exc:  # noqa: BLE001 - a ColumnIndex that does not decode is the finding
            raise _Failed(f"the ColumnIndex does not decode ({exc})") from exc
        if bounds is not None and len(bounds) != len(data):
            raise _Failed(f"the ColumnIndex has {len(bounds)} entries for {len(data)} data pages")


def _check_offset_index(out: ParquetLayout, cc, data: list, page_rows: list[int] | None, rg_rows: int) -> None:
    try:
        locs = out.page_locations(cc)
    except Exception as exc:  # noqa: BLE001 - an OffsetIndex that does not decode is the finding
        raise _Failed(f"the OffsetIndex does not decode ({exc})") from exc
    offsets = np.array([p[0] for p in data], dtype=np.int64)
    sizes = np.array([p[1] for p in data], dtype=np.int64)
    if len(locs) != len(data) or not np.array_equal(locs.offsets, offsets) or not np.array_equal(locs.sizes, sizes):
        bad = next((i for i in range(min(len(locs), len(data)))
                    if (locs.offsets[i], locs.sizes[i]) != (offsets[i], sizes[i])), min(len(locs), len(data)))
        raise _Failed(f"the OffsetIndex lists {len(locs)} pages for {len(data)} data pages; page {bad} differs")
    firsts = locs.first_rows
    if firsts[0] != 0 or (len(firsts) > 1 and not (np.diff(firsts) > 0).all()) or firsts[-1] >= max(rg_rows, 1):
        raise _Failed(f"the OffsetIndex first rows are not strictly increasing from 0 below {rg_rows}: "
                      f"{firsts[:8].tolist()}...")
    if page_rows is not None and not np.array_equal(firsts, np.cumsum([0] + page_rows[:-1])):
        raise _Failed("the OffsetIndex first rows disagree with the rows the pages hold")


def _check_values(out: ParquetLayout, w: _Written) -> None:
    expect = w.out.expect
    if expect is None:
        return
    top = out.tops[expect.top]
    try:
        if expect.field_values is not None:
            got = _decode_pages(out, top, w.ordinal, None, out.rg_rows(w.ordinal))
            want = expect.field_values
        elif expect.runs:
            ch = out.chunk(w.ordinal, w.out.leaf)
            offsets, sizes, _ = ch.page_arrays
            picked = []
            for rel, length, _values in expect.runs:
                a = ch.start + rel
                i0, i1 = np.searchsorted(offsets, [a, a + length])
                if i0 == i1 or offsets[i0] != a or offsets[i1 - 1] + sizes[i1 - 1] != a + length:
                    raise _Failed(f"re-encoded pages at [{a}, {a + length}) do not start and end at pages")
                picked.extend(ch.pages[i] for i in range(int(i0), int(i1)))
            want = pa.concat_arrays([values for _, _, values in expect.runs])
            got = _decode_pages(out, top, w.ordinal, {w.out.leaf: picked}, len(want))
        else:
            return
    except _Failed:
        raise
    except Exception as exc:  # noqa: BLE001 - pages that do not decode are the finding
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
