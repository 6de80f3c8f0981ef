"""Partial copy-on-write of one Parquet file: re-encode only the pages holding changed or deleted rows.

How a rewrite runs (see ``rewrite_file``):

1. Plan: for every column chunk, find the pages holding a candidate change (a position to update in that column, or a
   position to delete) from the OffsetIndex or the page headers.
2. Decode only those pages: they are copied with the chunk's dictionary page into a small in-memory Parquet file
   (a "sub-file", same schema element, one row group) that pyarrow decodes.
3. Compare with the new values; pages whose rows really change (or lose rows) are re-encoded by writing the patched
   rows with pyarrow into another small in-memory file (a "mini file") whose data pages replace them. Runs of
   untouched pages are copied as single byte ranges.
4. Rebuild chunk/row-group/file metadata and the page indexes under the source's schema (kept exactly); write
   ``dst`` through a temporary file.
5. Verify the temporary file (``_verify``): footer, page headers and offsets of every rewritten chunk, and a decode
   of the re-encoded pages against the values meant; only then rename it to ``dst``.

Steps 2-3 run per touched column chunk in a thread pool (one thread per core by default) while step 4 writes the
output in file order, copying untouched ranges as soon as the chunks before them are done; the bytes do not depend
on the thread count. A per-chunk cost model switches to a full-chunk re-encode when most of a chunk is touched, or
when patching would re-encode a dictionary that holds most of the chunk's values (the chunk is then written PLAIN),
and, with a single thread, re-encodes every touched chunk whole when nearly everything is touched (the "whole-file"
mode: untouched chunks are still copied). Re-encoded pages keep the source's physical layout (``_physical``);
where pyarrow cannot write it the rewrite fails rather than change the file's schema.

Before step 1, the real changes of widely updated columns (full row images) are worked out in bulk (``_screen``),
with the source's row fingerprints where it has them (``_fingerprints``), so unchanged columns are copied whole.

Modules: ``_changes`` (validating the change, patching rows), ``_screen`` and ``_fingerprints`` (which updated
values really change), ``_pagecodec`` (in-memory files through which pyarrow decodes and encodes pages),
``_physical`` (the source's physical layout), ``_rewriter`` (per chunk: what to copy, what to re-encode),
``_output`` (chunk pieces and the file written from them), ``_verify``.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from partialcow.metrics import WriteMetrics
from partialcow.parquet import _format as F
from partialcow.parquet._changes import ROW_POSITION, _appended_rows, _Changes, _distinct_rows, _prepare
from partialcow.parquet._fingerprints import remove_sidecar, store_sidecar
from partialcow.parquet._layout import ParquetLayout, ThriftClock, _pages_holding
from partialcow.parquet._output import APPENDED, _ChunkOut, _write_output
from partialcow.parquet._pagecodec import _read_schema
from partialcow.parquet._rewriter import _Rewriter, _Task
from partialcow.parquet._screen import screen_columns
from partialcow.parquet._verify import verify_output

__all__ = ["MERGE_TAIL_ROWS", "ROW_POSITION", "RewriteReport", "rewrite_file"]

# a last row group below this many rows is re-encoded with rows appended after it (see rewrite_file's merge_tail_rows)
MERGE_TAIL_ROWS = 65_536


@dataclass(frozen=True)
class RewriteReport:
    """What one :func:`rewrite_file` call did.

    Page counts are data pages of the source: ``pages_rewritten`` were replaced by re-encoded pages,
    ``pages_copied`` were copied byte for byte. ``rows_appended`` rows follow the source's rows (positions from
    ``rows_after - rows_appended``), in a row group of their own. ``full_chunk_rewrites`` lists (row group, column,
    reason) of chunks re-encoded whole; ``full_file_rewrite`` says why every touched chunk was (the cost model's
    whole-file mode), or None. ``thrift_seconds`` is the part of ``elapsed_seconds`` spent (de)serialising Thrift
    (footer, page headers, page indexes). ``screening`` says how the real changes of widely updated columns were
    found before any page was touched: "none", "decode" (those columns decoded), "fingerprints" (the source's row
    fingerprints named the changed columns; only those were decoded) or "fingerprints+decode";
    ``fingerprints_written``: ``dst`` got its fingerprints sidecar.
    """

    src: str
    dst: str
    rows_before: int
    rows_after: int
    rows_updated: int
    rows_deleted: int
    rows_appended: int
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
    screening: str = "none"
    fingerprints_written: bool = False

    def to_metrics(self) -> WriteMetrics:
        """The counts as :class:`partialcow.metrics.WriteMetrics` (one file rewritten)."""
        return WriteMetrics(
            rows_updated=self.rows_updated, rows_deleted=self.rows_deleted, files_rewritten=1,
            pages_rewritten=self.pages_rewritten, pages_copied=self.pages_copied, bytes_copied=self.bytes_copied,
            bytes_reencoded=self.bytes_reencoded, duration_ms=int(self.elapsed_seconds * 1000))


def rewrite_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    updates: pa.Table | None = None,
    deletes: Sequence[int] | np.ndarray | pa.Array | pa.ChunkedArray | None = None,
    *,
    append: pa.Table | None = None,
    merge_tail_rows: int = MERGE_TAIL_ROWS,
    full_chunk_threshold: float = 0.6,
    full_file_threshold: float | None = None,
    writer_options: dict[str, Any] | None = None,
    fsync: bool = True,
    threads: int | None = None,
    fingerprints: bool = False,
) -> RewriteReport:
    """Write ``dst``: ``src`` with ``updates`` applied and ``deletes`` removed, re-encoding only touched pages.

    ``updates`` holds an int64 column :data:`ROW_POSITION` (0-based position in ``src``) and the top-level columns
    to set; values equal to the old ones change nothing. ``deletes`` lists positions to remove. ``append``: rows
    (every top-level field of ``src``) added after the others as one more row group, its columns encoded like the
    last row group's (codec, page version, page size, dictionary or plain), with their own statistics and page
    index; the source's pages are still copied byte for byte. The source must have a row group. When it has
    several and the last holds fewer than ``merge_tail_rows`` rows, that row group is re-encoded with the appended
    rows after it as one (so a file that gains a few rows per batch does not gain a row group per batch; 0: never).

    Options: ``full_chunk_threshold`` (fraction of a chunk's page bytes touched above which the chunk is re-encoded
    whole, with a dictionary), ``full_file_threshold`` (fraction of all page bytes holding candidate changes above
    which every touched chunk is re-encoded whole without decoding candidate pages first; default 0.85 with one
    thread, never with more), ``writer_options`` (extra ``pyarrow.parquet.ParquetWriter`` options for re-encoded
    pages, e.g. ``{"compression_level": 3}``), ``fsync``, ``threads`` (column chunks rewritten at once; default: the
    machine's cores, at most 8), ``fingerprints`` (keep a sidecar of row fingerprints next to the files, so that
    later full row images find their few real changes without decoding every column: see ``_fingerprints``; the
    sidecar of ``src`` is used when it matches the file, and ``dst``'s is written when its fingerprints are known).

    ``dst`` appears only when the rewrite succeeded and the written file passed verification (written to a
    temporary name, verified, fsynced, renamed); otherwise ParquetRewriteError names the file, row group, column
    and what failed.

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> from partialcow.parquet import write_table
    >>> d = tempfile.mkdtemp(); src, dst = os.path.join(d, "a.parquet"), os.path.join(d, "b.parquet")
    >>> write_table(pa.table({"k": list(range(10)), "v": ["x"] * 10}), src)  # doctest: +ELLIPSIS
    WrittenFile(...)
    >>> upd = pa.table({ROW_POSITION: pa.array([3], pa.int64()), "v": ["y"]})
    >>> r = rewrite_file(src, dst, upd, deletes=[0])
    >>> pq.read_table(dst).column("v").to_pylist()[:3], r.rows_updated, r.rows_deleted
    (['x', 'x', 'y'], 1, 1)
    >>> r = rewrite_file(dst, src, append=pa.table({"k": [10], "v": ["z"]}))
    >>> pq.read_table(src).column("k").to_pylist()[-2:], r.rows_after, r.rows_appended, r.pages_copied
    ([9, 10], 10, 1, 2)
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
        screening = screen_columns(lay, _prepare(lay, read_schema, updates, deletes), threads=threads,
                                   read_schema=read_schema, fingerprints=fingerprints)
        changes = screening.changes
        appended = _appended_rows(lay, read_schema, append) if append is not None and append.num_rows else None
        reason = None
        if full_file_threshold < math.inf:
            reason = _full_file_reason(lay, changes, full_file_threshold, full_chunk_threshold)
        # the whole-file mode re-encodes every touched chunk whole; untouched chunks are still copied
        rw = _Rewriter(lay, changes, read_schema, full_chunk_threshold=0.0 if reason else full_chunk_threshold,
                       writer_options=opts)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            planned: list[tuple[int, list[_ChunkOut | _Task], int]] = []
            # a file's only row group is its body, never a tail: its unchanged pages are copied as always
            merge_tail = (appended is not None and len(lay.row_groups) > 1
                          and lay.rg_rows(len(lay.row_groups) - 1) < merge_tail_rows)
            row = 0
            for rg in range(len(lay.row_groups) - int(merge_tail)):
                res = rw.row_group(rg, row)
                row += lay.rg_rows(rg)
                if res is not None:
                    planned.append((rg, res[0], res[1]))
            if appended is not None and merge_tail:
                planned.append((APPENDED, *rw.merged_tail(len(lay.row_groups) - 1, row, appended)))
            elif appended is not None:
                planned.append((APPENDED, rw.appended(appended), appended.num_rows))
            _size, rewritten = _write_output(lay, fd, rw.run(planned, threads), rw.stats)
            verify_output(tmp, dst, lay, rewritten, clock=clock)
            if fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
    # A sidecar of an earlier file of that name goes, whether or not this rewrite writes one: it is tied to its file
    # by the size and the footer, which a rewrite changing a value within its page's bounds may keep as they were.
    remove_sidecar(dst)
    try:
        os.replace(tmp, dst)
    except BaseException:
        os.unlink(tmp)
        raise
    if fsync:
        _fsync_dir(os.path.dirname(os.path.abspath(dst)))
    written = False
    if screening.lineage is not None:
        # after the file: a crash in between leaves the file without a sidecar, which only costs speed
        store_sidecar(dst, screening.lineage.derive(changes.del_pos, appended))
        written = True
    st = rw.stats
    rows_after = sum(rows for _, _, rows in planned)
    rows_updated = _distinct_rows(rw.changed_parts, lay.num_rows)
    return RewriteReport(
        src, dst, lay.num_rows, rows_after, rows_updated, int(changes.del_pos.size),
        appended.num_rows if appended is not None else 0, st.pages_total,
        st.pages_rewritten, st.pages_copied, st.bytes_copied, st.bytes_reencoded, tuple(sorted(st.columns)),
        tuple(st.full_chunks), reason, tuple(st.blooms_dropped), time.perf_counter() - t0, clock.seconds,
        screening.method, written)


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
    """Why every touched chunk is re-encoded whole: the pages holding candidate changes are nearly all page bytes
    (then decoding candidate pages first, to patch only some, would cost more than it saves)."""
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
