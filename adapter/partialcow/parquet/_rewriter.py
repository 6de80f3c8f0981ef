"""The page path of a rewrite: for each touched column chunk, decode the candidate pages, keep the real changes,
re-encode the pages that change and splice them between copied page ranges (or re-encode the chunk whole where the
cost model says so).
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partialcow.exceptions import ParquetRewriteError
from partialcow.parquet import _format as F
from partialcow.parquet._changes import _changed_mask, _Changes, _patch
from partialcow.parquet._column_index import PageBounds, encode_column_index
from partialcow.parquet._layout import Chunk, Leaf, ParquetLayout, TopField, _max_page_rows, _pages_holding, sort_key_fn
from partialcow.parquet._output import (
    _bloom_bytes,
    _boundary_order,
    _chunk_bounds,
    _ChunkOut,
    _copy_chunk,
    _Expected,
    _page_offsets,
    run_pages,
    sample_runs,
)
from partialcow.parquet._pagecodec import (
    _CODEC_TO_ARROW,
    _DICTIONARY_TOO_LARGE,
    _decode_pages,
    _dictionary_encoded_pages,
    _dictionary_pays,
    _dictionary_size,
    _dictionary_too_large,
    _dictionary_values,
    _encode_mini,
    _encode_runs,
    _Encoded,
    _Mini,
    _page_encoding,
    _page_num_values,
    _page_type_for_stats,
    _stats_key,
    _value_encoding,
)
from partialcow.parquet._thrift import T_BINARY, T_I32, T_I64, T_LIST, T_STRUCT, TList, TStruct

_DICT = -1  # page kind of dictionary-encoded pages (others: their value encoding)
#: the reason ``full_chunk_rewrites`` gives for a last row group re-encoded together with appended rows
MERGED_TAIL = "last row group merged with the appended rows"


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


@dataclass
class _Task:
    """A chunk rewrite to run later, possibly in another thread: ``fn(rewriter, *args)``."""

    fn: Callable[..., _ChunkOut | list[_ChunkOut]]
    args: tuple[Any, ...]


def _values(vals: pa.Array | None) -> pa.Array:
    """The new values of updated rows: None only comes with no updated rows, so here it is a bug."""
    if vals is None:
        raise ParquetRewriteError("updated rows came without their new values")
    return vals


# parquet-java and arrow-rs cut column-index entries longer than this many bytes by default
_INDEX_TRUNCATION = 64


def _whole_index_values(lay: ParquetLayout, element: TStruct) -> bool:
    """Whether the column-index entries of a column are whole values, not cut short: any fixed-width type, a
    FIXED_LEN_BYTE_ARRAY no wider than writers cut, or any column of Arrow's writer, which never cuts them."""
    kind = element.val(F.SE_TYPE)
    if kind not in (F.BYTE_ARRAY, F.FIXED_LEN_BYTE_ARRAY):
        return True
    if kind == F.FIXED_LEN_BYTE_ARRAY and element.val(F.SE_TYPE_LENGTH, 0) <= _INDEX_TRUNCATION:
        return True
    return bytes(lay.fmd.val(F.FMD_CREATED_BY, b"")).startswith(b"parquet-cpp")


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
            for dropped in lay.leaves:
                self.stats.pages_total += lay.page_count(rg, dropped.index)
                self.stats.pages_rewritten += lay.page_count(rg, dropped.index)
            return None  # every row deleted: drop the row group
        ulo, uhi = np.searchsorted(self.ch.upd_pos, [rg_start, rg_start + nrows])
        outs: list[_ChunkOut | _Task] = []
        for top in lay.tops:
            t_ups, t_vals = self.ch.column_updates(top.name, rg_start, rg_start + nrows, int(ulo), int(uhi))
            t_ups = t_ups - rg_start
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
            vals = _values(vals).filter(pa.array(mask))
            self._record_changes(top, rg, rg_start, changed)
        if not changed.size and not dels.size:
            outs = []
            for ch in chunks:
                outs.append(_copy_chunk(lay, ch.rg, ch.leaf))
                self._count_copy(ch.rg, ch.leaf)
            return outs
        new = _patch(old, 0, changed, vals, dels)
        # an updated chunk's bloom filter is rebuilt where pyarrow can (flat columns); deletes keep it valid
        rebuild_bloom = bool(changed.size) and len(chunks) == 1 and F.CMD_BLOOM_FILTER_OFFSET in chunks[0].cmd
        mini = self._encode_like(top, chunks, new, bloom=rebuild_bloom)
        outs = []
        for ch, (out, mini_bloom) in zip(chunks, self._mini_outs(top, chunks, mini, new)):
            name = ".".join(lay.leaves[ch.leaf].path)
            self.stats.full_chunks.append((rg, name, reason))
            self.stats.pages_total += len(ch.pages)
            self.stats.pages_rewritten += len(ch.pages)
            self.stats.bytes_reencoded += out.length
            out.bloom = _bloom_bytes(lay, ch.cmd)
            if out.bloom is not None and changed.size:
                out.bloom = mini_bloom if rebuild_bloom else None
                if out.bloom is None:
                    self.stats.blooms_dropped.append((rg, name))
            outs.append(out)
        return outs

    def appended(self, rows: pa.Table) -> list[_ChunkOut | _Task]:
        """Tasks (see ``run``) encoding a new row group of ``rows`` (the file's top-level fields in its read
        types), each column like its chunk in the source's last row group."""
        return [_Task(_Rewriter._appended_field, (top, rows.column(top.name).combine_chunks()))
                for top in self.lay.tops]

    def merged_tail(self, rg: int, rg_start: int, rows: pa.Table) -> tuple[list[_ChunkOut | _Task], int]:
        """Tasks encoding row group ``rg`` (the last), with its changes applied, and ``rows`` after it as one row
        group; and that row group's row count. Keeps a file that gains a few rows per batch from gaining a row group
        per batch."""
        lo, hi = np.searchsorted(self.ch.del_pos, [rg_start, rg_start + self.lay.rg_rows(rg)])
        dels = self.ch.del_pos[lo:hi] - rg_start
        ulo, uhi = np.searchsorted(self.ch.upd_pos, [rg_start, rg_start + self.lay.rg_rows(rg)])
        tasks: list[_ChunkOut | _Task] = []
        for top in self.lay.tops:
            ups, vals = self.ch.column_updates(top.name, rg_start, rg_start + self.lay.rg_rows(rg), int(ulo), int(uhi))
            tasks.append(_Task(_Rewriter._merged_field, (top, rg, rg_start, ups - rg_start, vals, dels,
                                                         rows.column(top.name).combine_chunks())))
        return tasks, self.lay.rg_rows(rg) - int(dels.size) + rows.num_rows

    def _merged_field(self, top: TopField, rg: int, rg_start: int, ups: np.ndarray, vals: pa.Array | None,
                      dels: np.ndarray, appended: pa.Array) -> list[_ChunkOut]:
        chunks = [self.lay.chunk(rg, i) for i in top.leaves]
        old = _decode_pages(self.lay, top, rg, None, self.lay.rg_rows(rg))
        if ups.size:
            mask = _changed_mask(old.take(pa.array(ups)), vals)
            ups, vals = ups[mask], _values(vals).filter(pa.array(mask))
            self._record_changes(top, rg, rg_start, ups)
        kept = _patch(old, 0, ups, vals, dels)
        for ch in chunks:
            self.stats.full_chunks.append((rg, ".".join(self.lay.leaves[ch.leaf].path), MERGED_TAIL))
            self.stats.pages_total += len(ch.pages)
            self.stats.pages_rewritten += len(ch.pages)
        return self._appended_field(top, pa.concat_arrays([kept, appended.cast(kept.type)]))

    def _appended_field(self, top: TopField, values: pa.Array) -> list[_ChunkOut]:
        last = len(self.lay.row_groups) - 1
        chunks = [self.lay.chunk(last, i) for i in top.leaves]
        single = len(chunks) == 1 and not self.lay.leaves[chunks[0].leaf].nested
        mini = self._encode_like(top, chunks, values, bloom=single and F.CMD_BLOOM_FILTER_OFFSET in chunks[0].cmd)
        outs = []
        for out, mini_bloom in self._mini_outs(top, chunks, mini, values):
            out.bloom = mini_bloom
            self.stats.bytes_reencoded += out.length
            outs.append(out)
        return outs

    def _encode_like(self, top: TopField, chunks: list[Chunk], values: pa.Array, *, bloom: bool) -> _Mini:
        """``values`` encoded as one chunk per leaf, with ``chunks``' codec, page version and value encoding."""
        lay = self.lay
        setup = self._chunk_setup(chunks[0])
        nullable = lay.schema[top.schema_start].val(F.SE_REPETITION, F.REQUIRED) != F.REQUIRED
        # a chunk written without a dictionary (PLAIN) stays PLAIN; one with a dictionary keeps it if it pays
        dictionary = any(_dictionary_pays(lay, ch) for ch in chunks)
        return _encode_mini(lay, top, [values], nullable, codec=setup["codec"], dictionary=dictionary,
                            v2=setup["v2"], crc=setup["crc"], rows_per_page=setup["rows_per_page"], opts=self.opts,
                            encoding=None if dictionary else _value_encoding(lay, chunks[0]), bloom=bloom)

    def _mini_outs(self, top: TopField, chunks: list[Chunk], mini: _Mini, values: pa.Array
                   ) -> list[tuple[_ChunkOut, bytes | None]]:
        """Output chunks taking the bytes of ``mini`` (``values`` encoded) in place of ``chunks``: metadata with
        the source chunks' path and key-value metadata, page indexes where the source chunks have them, and what
        the post-write check decodes; each with the bloom filter ``mini`` wrote for it, if any."""
        outs = []
        for k, (ch, mch) in enumerate(zip(chunks, mini.chunks[0])):
            cmd = mch.cmd.copy()
            cmd.put(F.CMD_PATH, T_LIST, ch.cmd.val(F.CMD_PATH))
            cmd.drop(F.CMD_KV, F.CMD_BLOOM_FILTER_OFFSET, F.CMD_BLOOM_FILTER_LENGTH)
            if F.CMD_KV in ch.cmd:
                cmd.put(F.CMD_KV, T_LIST, ch.cmd.val(F.CMD_KV))
            rel = {fid: cmd.val(fid) - mch.start for fid in (F.CMD_DATA_PAGE_OFFSET, F.CMD_DICTIONARY_PAGE_OFFSET)
                   if cmd.val(fid) is not None}
            locs = ci = None
            if F.CC_OFFSET_INDEX_OFFSET in ch.cc:
                # pages of the mini file have an OffsetIndex: (offset, size, first row) from its arrays
                offsets, sizes, first_rows = (a.tolist() for a in mch.page_arrays)
                locs = [(o - mch.start, s, r) for o, s, r in zip(offsets, sizes, first_rows)]
                if F.CC_COLUMN_INDEX_OFFSET in ch.cc:
                    ci = mini.lay.column_index_bytes(mch.cc)
            data = bytes(mini.lay.buf[mch.start:mch.end])
            if len(chunks) == 1:  # pages of the mini file start at row boundaries (it has an OffsetIndex)
                pages = [(int(o), int(s), int(r)) for o, s, r in zip(*mch.page_arrays)]
                expect = _Expected(top.index, pages=sample_runs([run_pages(-mch.start, pages, values)]))
            else:
                expect = _Expected(top.index, field_values=values if k == 0 else None)
            outs.append((_ChunkOut(ch.leaf, ch.cc, cmd, [("data", data, len(data))], len(data), rel, locs, ci, None,
                                   ch.start, expect), _bloom_bytes(mini.lay, mch.cmd)))
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
        bounds = [(ch.page_rows(a)[0], ch.page_rows(b)[1]) for a, b in runs]  # the caller checked rows_known
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
                v = _values(vals).slice(lo, hi - lo)
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

    def _splice(self, top: TopField, ch: Chunk, leaf: Leaf, decoded: list[tuple[int, int, int, pa.Array]],
                touched: np.ndarray, changed: np.ndarray, new_vals: pa.Array | None, dels: np.ndarray,
                rg_start: int) -> _ChunkOut:
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
        # a touched page is re-encoded like the source page: dictionary-encoded, or with its value encoding
        kinds = {i: _DICT if dict_pages[i] else _page_encoding(lay, ch.pages[i])[1] for i in touched.tolist()}
        # sub-runs of consecutive touched pages of the same kind
        subruns: list[list[int]] = []
        for i in touched.tolist():
            if subruns and subruns[-1][1] == i - 1 and kinds[i] == kinds[i - 1]:
                subruns[-1][1] = i
            else:
                subruns.append([i, i])
        offsets, sizes, first_rows = ch.page_arrays
        deleted_before = np.searchsorted(dels, first_rows)  # rows deleted before each page
        patched: list[pa.Array] = []
        removed_nulls = 0
        for a, b in subruns:
            r0, r1 = ch.page_rows(a)[0], ch.page_rows(b)[1]
            _da, _db, dr0, arr = next(d for d in decoded if d[0] <= a and b <= d[1])
            old = arr.slice(r0 - dr0, r1 - r0)
            removed_nulls += old.null_count
            ulo, uhi = np.searchsorted(changed, [r0, r1])
            dlo, dhi = np.searchsorted(dels, [r0, r1])
            patched.append(_patch(old, r0, changed[ulo:uhi],
                                  _values(new_vals).slice(ulo, uhi - ulo) if uhi > ulo else None, dels[dlo:dhi]))
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
                    lo, hi = np.searchsorted(changed, [ch.page_rows(a)[0], ch.page_rows(b)[1]])
                    in_dict_runs[lo:hi] = True
            # One run: pyarrow appends the values the dictionary lacks itself (see _encode_runs), no search
            # needed. Not for floats: pyarrow may merge NaN payloads the dictionary keeps apart, and a merge
            # plus a new value would leave the entry count unchanged.
            extend = (sum(1 for (a, _), p in zip(subruns, patched) if dict_pages[a] and len(p)) == 1
                      and not pa.types.is_floating(dictionary.type))
            if in_dict_runs.any() and not extend:
                fresh = pc.unique(_values(new_vals).filter(pa.array(in_dict_runs)).drop_null())
                # hash the few new values and scan the dictionary, not the other way round: a dictionary can hold
                # a whole chunk's distinct values, and hashing it cost more than the rest of a small patch
                known = dictionary.filter(pc.is_in(dictionary, value_set=fresh.cast(dictionary.type)))
                fresh = fresh.filter(pc.invert(pc.is_in(fresh, value_set=known.cast(fresh.type))))
                if len(fresh):
                    dictionary = pa.concat_arrays([dictionary, fresh.cast(dictionary.type)])
        encoded: dict[int, _Encoded | None] = {a: None for a, _ in subruns}
        for kind in dict.fromkeys(kinds[a] for a, _ in subruns):  # one in-memory file per kind of page
            in_dict = kind == _DICT
            todo = [(a, new) for (a, _), new in zip(subruns, patched) if len(new) and kinds[a] == kind]
            if not todo:
                continue
            encs = _encode_runs(lay, top, [new for _, new in todo], nullable, setup, self.opts,
                                dictionary if in_dict else None, extend=in_dict and extend,
                                encoding=None if in_dict else kind)
            if encs is None:  # pyarrow did not reproduce the dictionary order: re-encode the chunk
                old = _decode_pages(lay, top, ch.rg, None, ch.num_rows)
                return self._reencode_field(top, [ch], old, changed, new_vals, dels, rg_start,
                                            "dictionary could not be extended", compared=True)[0]
            for (a, _), run in zip(todo, encs):
                if run.dict_page is not None:
                    new_dict_page = new_dict_page or run.dict_page
                encoded[a] = run
        subrun_end = {a: b for a, b in subruns}
        subrun_starts = sorted(subrun_end)
        patched_at = {a: new for (a, _), new in zip(subruns, patched)}
        run_samples: list[list[tuple[int, int, pa.Array]]] = []

        # assemble pieces, page locations and column-index entries
        src_ci = lay.page_bounds(ch.cc) if F.CC_COLUMN_INDEX_OFFSET in ch.cc else None
        if src_ci is not None and len(src_ci) != len(ch.pages):  # a malformed index: rebuild none rather than misalign
            src_ci = None
        want_oi = F.CC_OFFSET_INDEX_OFFSET in ch.cc
        unc = ch.cmd.val(F.CMD_TOTAL_UNCOMPRESSED_SIZE)
        pieces: list[tuple[str, Any, int]] = []
        enc_delta: dict[tuple[int, int], int] = {}  # encoding_stats: pages gained (lost) per page type, encoding
        new_encodings: list[int] = []
        if new_dict_page is not None and new_dict_page[2] > _dictionary_size(lay, ch):
            h, hs = lay.page_header(ch.start)
            unc += new_dict_page[1] - hs - h.val(F.PH_UNCOMPRESSED_SIZE)
            old_encoding = h.val(F.PH_DICTIONARY_PAGE_HEADER).val(F.DICT_ENCODING)
            if old_encoding != new_dict_page[3]:
                enc_delta = {(F.DICTIONARY_PAGE, old_encoding): -1, (F.DICTIONARY_PAGE, new_dict_page[3]): 1}
                new_encodings.append(new_dict_page[3])
            pieces.append(("data", new_dict_page[0], len(new_dict_page[0])))
            if ch.prefix_end > ch.start + hs + h.val(F.PH_COMPRESSED_SIZE):  # keep anything after the dictionary
                rest = ch.start + hs + h.val(F.PH_COMPRESSED_SIZE)
                pieces.append(("copy", rest, ch.prefix_end - rest))
            self.stats.bytes_reencoded += len(new_dict_page[0])
        elif ch.prefix_end > ch.start:
            pieces.append(("copy", ch.start, ch.prefix_end - ch.start))
            self.stats.bytes_copied += ch.prefix_end - ch.start
        pos = prefix_len = sum(p[2] for p in pieces)
        loc_blocks: list[np.ndarray] = []  # (offset in the chunk, size, first row) per page, a block per run
        ci_parts: list[PageBounds] | None = [] if src_ci is not None else None
        copied_bounds: list[PageBounds] | None = []  # of the chunk statistics; None: a copied page has no entry
        num_values = ch.cmd.val(F.CMD_NUM_VALUES)
        new_bounds: list[PageBounds] | None = []  # of the re-encoded pages; None: a run without them
        added_nulls = 0

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
                    new_first = int(first_rows[i]) - int(deleted_before[i])
                    run_samples.append(run_pages(pos, enc.pages, patched_at[i]))
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
                    # their column index, not the run's statistics: a run encoded after the dictionary's values
                    # has statistics that bound those values too (see _encode_runs)
                    new_bounds = None if new_bounds is None or enc.bounds is None else new_bounds + [enc.bounds]
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
            if src_ci is None:
                copied_bounds = None
            else:
                run_bounds = src_ci.slice(i, j + 1)
                if ci_parts is not None:
                    ci_parts.append(run_bounds)
                if copied_bounds is not None:
                    copied_bounds.append(run_bounds)
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
        encodings = list(cmd.val(F.CMD_ENCODINGS).items)
        encodings += [e for e in dict.fromkeys(new_encodings) if e not in encodings]
        cmd.put(F.CMD_ENCODINGS, T_LIST, TList(T_I32, encodings))
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
            bounds = _chunk_bounds(key, old_st, copied_bounds, new_bounds,
                                   copied_exact=_whole_index_values(lay, leaf.element))
            nulls = st.val(F.ST_NULL_COUNT)
            if bounds is not None:
                st.put(F.ST_MAX_VALUE, T_BINARY, bounds[1])
                st.put(F.ST_MIN_VALUE, T_BINARY, bounds[0])
            if bounds is None and (nulls is None or nulls < num_values):
                # values without bounds: no statistics at all. A null count alone reads as "no value here" to
                # parquet-java, and Iceberg would then take the file's bounds from the other row groups only
                cmd.drop(F.CMD_STATISTICS)
            else:
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
        locs = np.concatenate(loc_blocks) if loc_blocks else np.zeros((0, 3), dtype=np.int64)
        # the prefix (dictionary page, new or copied) starts the chunk; the first data page follows it
        first_data = ch.start + (int(locs[0, 0]) if len(locs) else prefix_len)
        rel = _page_offsets(cmd, ch.start, ch.dictionary_page, first_data)
        ci = None
        if ci_parts is not None and want_oi:
            page_bounds = PageBounds.concat(ci_parts)
            page_bounds.boundary_order = _boundary_order(key, page_bounds.null_pages.tolist(), page_bounds.mins,
                                                         page_bounds.maxs)
            ci = encode_column_index(page_bounds)
        return _ChunkOut(ch.leaf, ch.cc, cmd, pieces, pos, rel, locs if want_oi else None, ci, bloom, ch.start,
                         _Expected(top.index, pages=sample_runs(run_samples)))
