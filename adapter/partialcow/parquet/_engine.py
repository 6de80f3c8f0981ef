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

import math
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from partialcow.metrics import WriteMetrics
from partialcow.parquet._changes import ROW_POSITION, _distinct_rows, _prepare, _real_changes
from partialcow.parquet._layout import ParquetLayout, ThriftClock
from partialcow.parquet._output import _write_output
from partialcow.parquet._pagecodec import _NeedFullFile, _read_schema
from partialcow.parquet._rewriter import _Rewriter
from partialcow.parquet._wholefile import _full_file_reason, _rewrite_whole

__all__ = ["ROW_POSITION", "RewriteReport", "rewrite_file"]


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
