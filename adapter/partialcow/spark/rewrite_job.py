"""The executor side of a partial copy-on-write: one rewrite per touched file, new files for inserts.

These functions run inside Spark's Python workers (``mapInArrow``); they see Arrow batches and local files and
return one small row per file, so only file-level results ever reach the driver.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from partialcow.exceptions import InvalidChangeError
from partialcow.parquet import ROW_POSITION, rewrite_file, write_table

__all__ = ["REWRITE_RESULT_SCHEMA", "INSERT_RESULT_SCHEMA", "rewrite_partition", "write_partition", "new_file_name"]

FILE = "_pcow_file"
POS = "_pcow_pos"
DELETE = "_pcow_delete"

REWRITE_RESULT_SCHEMA = (
    "src string, dst string, moved_dst string, moved_rows long, rows_before long, rows_after long, "
    "rows_updated long, rows_deleted long, "
    "pages_rewritten long, pages_copied long, bytes_copied long, bytes_reencoded long, duration_ms long, "
    "removed_positions array<long>"
)
INSERT_RESULT_SCHEMA = "dst string, rows long"


def new_file_name() -> str:
    """A fresh data file name (never reused, so an aborted attempt cannot clash with a later one)."""
    return f"pcow-{uuid.uuid4().hex}.parquet"


def _local(uri: str) -> str:
    from partialcow.spark.tables import local_path

    return local_path(uri)


def _moves(upserts: pa.Table, absent: Sequence[str]) -> pa.Array:
    """Rows that set a value in a column their file lacks (added to the table after the file was written)."""
    mask = pa.array([False] * upserts.num_rows, type=pa.bool_())  # typed: a delete-only file has no upserts
    for column in absent:
        mask = pc.or_(mask, pc.is_valid(upserts[column]))
    return mask


def rewrite_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    update_columns: Sequence[str],
    moved_schema: pa.Schema | None = None,
    data_dir: str | None = None,
    threads: int = 1,
) -> Iterator[pa.RecordBatch]:
    """Rewrite every file named in this partition's rows (``_pcow_file``, ``_pcow_pos``, ``_pcow_delete``, keys,
    values).

    The new file goes next to the old one; it is not yet part of the table (the driver commits all files at once).
    A row that sets a column its file does not have (the table gained it later) cannot be patched in place: it is
    deleted from its file and written, whole, to a new file with ``moved_schema``. ``threads``: column chunks each
    file rewrite works on at once.
    """
    batch_list = list(batches)
    if not batch_list:
        return
    rows = pa.Table.from_batches(batch_list)
    for src in pc.unique(rows[FILE]).to_pylist():
        mine = rows.filter(pc.equal(rows[FILE], src))
        local_src = _local(src)
        in_file = set(pq.read_schema(local_src).names)
        absent = [c for c in update_columns if c not in in_file]
        is_delete = mine[DELETE].combine_chunks().fill_null(False)
        upserts = mine.filter(pc.invert(is_delete))
        move = _moves(upserts, absent)
        moved = upserts.filter(move)
        upserts = upserts.filter(pc.invert(move))
        deletes = pa.concat_arrays([mine.filter(is_delete)[POS].combine_chunks(), moved[POS].combine_chunks()])
        moved_dst = None
        if moved.num_rows:
            if moved_schema is None or data_dir is None:
                raise InvalidChangeError(
                    f"{src}: {moved.num_rows} row(s) set column(s) {absent} this file lacks; moving them needs whole "
                    "rows (do not restrict merge_update_columns/merge_exclude_columns in that run)"
                )
            moved_dst = write_table(
                moved.select(moved_schema.names).cast(moved_schema), os.path.join(data_dir, new_file_name())
            ).path
        updates = None
        present = [c for c in update_columns if c in in_file]
        if upserts.num_rows and present:
            updates = upserts.select([POS, *present]).rename_columns([ROW_POSITION, *present])
        dst = os.path.join(os.path.dirname(local_src), new_file_name())
        report = rewrite_file(local_src, dst, updates=updates, deletes=deletes if len(deletes) else None,
                              threads=threads)
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "src": src,
                    "dst": dst,
                    "moved_dst": moved_dst,
                    "moved_rows": moved.num_rows,
                    "rows_before": report.rows_before,
                    "rows_after": report.rows_after,
                    "rows_updated": report.rows_updated,
                    "rows_deleted": report.rows_deleted,
                    "pages_rewritten": report.pages_rewritten,
                    "pages_copied": report.pages_copied,
                    "bytes_copied": report.bytes_copied,
                    "bytes_reencoded": report.bytes_reencoded,
                    "duration_ms": int(report.elapsed_seconds * 1000),
                    # rows of src missing from dst (deleted or moved), so the row index can shift its entries
                    "removed_positions": np.unique(deletes.to_numpy(zero_copy_only=False)).tolist(),
                }
            ],
            schema=_REWRITE_ARROW,
        )


def write_partition(batches: Iterator[pa.RecordBatch], *, schema: pa.Schema, data_dir: str) -> Iterator[pa.RecordBatch]:
    """Write this partition's inserted rows as one new data file with the product's layout."""
    batch_list = [b for b in batches if b.num_rows]
    if not batch_list:
        return
    table = pa.Table.from_batches(batch_list).select(schema.names).cast(schema)
    written = write_table(table, os.path.join(data_dir, new_file_name()))
    yield pa.RecordBatch.from_pylist([{"dst": written.path, "rows": written.num_rows}], schema=_INSERT_ARROW)


_REWRITE_ARROW = pa.schema(
    [("src", pa.string()), ("dst", pa.string()), ("moved_dst", pa.string())]
    + [(name, pa.int64()) for name in (
        "moved_rows", "rows_before", "rows_after", "rows_updated", "rows_deleted", "pages_rewritten", "pages_copied",
        "bytes_copied", "bytes_reencoded", "duration_ms",
    )]
    + [("removed_positions", pa.list_(pa.int64()))]
)
_INSERT_ARROW = pa.schema([("dst", pa.string()), ("rows", pa.int64())])
