"""Index maintenance without Spark: one bucket file at a time, with pyarrow, for commits whose changes are known.

After one of our own commits the writer knows exactly what changed in the index: which files kept their rows in
place (re-pointed), which lost rows at which positions (shifted), which were dropped, and the key, position and
bucket of every row it added. Maintaining the index is then a merge per affected bucket: read its files, drop and
shift entries, append the new ones, sort, write one base file. A bucket that only gains a few entries gets them as a
delta file instead (``write_delta``): the merge happens at a later change of that bucket. Done in driver threads
this costs what reading and writing those bucket files costs; the Spark path (a shuffle of every entry of every
affected bucket) is kept for what only Spark can read: other writers' files, rebuilds, and re-layouts to more
buckets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from partialcow.exceptions import DuplicateKeyError
from partialcow.index.storage import BUCKET_WRITE_OPTIONS
from partialcow.parquet import INT96_UNIT

__all__ = ["duplicate_samples", "merge_bucket", "removed_entries", "write_delta"]

FILE_ID = "_file_id"
POS = "_pos"


def merge_bucket(
    srcs: Sequence[str],
    dst: str,
    *,
    key_columns: Sequence[str],
    remap: Mapping[int, tuple[int, np.ndarray]],
    drop_ids: frozenset[int],
    added: pa.Table | None,
    table: str,
) -> tuple[dict[int, int], int]:
    """Write bucket file ``dst``: the entries of the bucket's files ``srcs`` with ``remap`` applied (old file id ->
    new id and the sorted positions it lost: those entries go, later ones shift down), entries of ``drop_ids``
    removed, and ``added`` (key columns, ``_file_id``, ``_pos``) merged in key order. Returns the entries removed per
    remapped file id and the entries written; raises ``DuplicateKeyError`` if a key would appear twice.

    >>> import tempfile
    >>> d = tempfile.mkdtemp(); src, dst = os.path.join(d, "a.parquet"), os.path.join(d, "b.parquet")
    >>> pq.write_table(pa.table({"k": [1, 5], FILE_ID: pa.array([0, 0], pa.int32()), POS: [0, 1]}), src)
    >>> added = pa.table({"k": [3], FILE_ID: pa.array([1], pa.int32()), POS: [0]})
    >>> merge_bucket([src], dst, key_columns=["k"], remap={0: (2, np.array([0]))}, drop_ids=frozenset(), added=added,
    ...              table="t")
    ({0: 1}, 2)
    >>> pq.read_table(dst).to_pydict()
    {'k': [3, 5], '_file_id': [1, 2], '_pos': [0, 0]}
    """
    counts: dict[int, int] = {}
    int96 = False
    if srcs:
        parts = [pq.read_table(src, coerce_int96_timestamp_unit=INT96_UNIT) for src in srcs]
        int96 = any(c.physical_type == "INT96" for c in pq.ParquetFile(srcs[0]).schema)
        entries = pa.concat_tables([parts[0], *(part.cast(parts[0].schema) for part in parts[1:])])
        file_ids = entries.column(FILE_ID).to_numpy()
        positions = entries.column(POS).to_numpy().copy()
        new_ids = file_ids.astype(np.int32, copy=True)
        keep = (
            ~np.isin(file_ids, np.fromiter(drop_ids, dtype=file_ids.dtype))
            if drop_ids
            else np.ones(len(file_ids), bool)
        )
        for old_id, (new_id, gone) in remap.items():
            mine, hit, before = removed_entries(file_ids, positions, old_id, gone)
            if not mine.size:
                continue
            counts[old_id] = int(hit.sum())
            keep[mine[hit]] = False
            positions[mine] = positions[mine] - before
            new_ids[mine] = new_id
        entries = entries.set_column(entries.schema.get_field_index(FILE_ID), FILE_ID,
                                     pa.array(new_ids).cast(entries.schema.field(FILE_ID).type))
        entries = entries.set_column(entries.schema.get_field_index(POS), POS,
                                     pa.array(positions).cast(entries.schema.field(POS).type))
        entries = entries.filter(pa.array(keep))
    else:
        entries = None
    has_added = added is not None and added.num_rows > 0
    if added is not None and has_added:
        added = added.select([*key_columns, FILE_ID, POS])
        if entries is not None:
            added = added.select(entries.column_names).cast(entries.schema)
            entries = pa.concat_tables([entries, added])
        else:
            entries = added
    if entries is not None and (has_added or len(srcs) > 1):
        entries = _sorted_unique(entries, key_columns, table)
    if entries is None:
        entries = pa.table({FILE_ID: pa.array([], pa.int32()), POS: pa.array([], pa.int64())})
    _write(entries, dst, int96)
    return counts, entries.num_rows


def write_delta(base: str, dst: str, *, key_columns: Sequence[str], added: pa.Table, table: str) -> int:
    """Write ``added`` (key columns, ``_file_id``, ``_pos``) as delta file ``dst`` of the bucket whose base file is
    ``base``: sorted by key, with the base file's column types. Returns the entries written.

    The keys are new to the bucket: they are the batch's keys its lookup did not find in these same bucket files
    (under the write lease), so only repeats among them are checked here.

    >>> import tempfile
    >>> d = tempfile.mkdtemp(); base, dst = os.path.join(d, "b.parquet"), os.path.join(d, "d.parquet")
    >>> pq.write_table(pa.table({"k": [1, 5], FILE_ID: pa.array([0, 0], pa.int32()), POS: [0, 1]}), base)
    >>> write_delta(base, dst, key_columns=["k"], table="t",
    ...             added=pa.table({"k": [9, 3], FILE_ID: pa.array([1, 1], pa.int32()), POS: pa.array([0, 1])}))
    2
    >>> pq.read_table(dst).to_pydict()
    {'k': [3, 9], '_file_id': [1, 1], '_pos': [1, 0]}
    """
    source = pq.ParquetFile(base, coerce_int96_timestamp_unit=INT96_UNIT)
    int96 = any(c.physical_type == "INT96" for c in source.schema)
    schema = source.schema_arrow
    entries = added.select(schema.names).cast(schema)
    _write(_sorted_unique(entries, key_columns, table), dst, int96)
    written: int = entries.num_rows
    return written


def _sorted_unique(entries: pa.Table, key_columns: Sequence[str], table: str) -> pa.Table:
    entries = entries.sort_by([(c, "ascending") for c in key_columns])
    dups = duplicate_samples(entries, key_columns)
    if dups:
        raise DuplicateKeyError(
            f"table {table} holds key(s) {list(key_columns)} more than once, e.g. {dups}: the index was built "
            "from a table another writer changed at the same time; run `partialcow index rebuild`"
        )
    return entries


def _write(entries: pa.Table, dst: str, int96: bool) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = f"{dst}.tmp-{os.getpid()}"
    pq.write_table(entries, tmp, **BUCKET_WRITE_OPTIONS, use_deprecated_int96_timestamps=int96)
    os.replace(tmp, dst)


def removed_entries(file_ids: np.ndarray, positions: np.ndarray, file_id: int,
                    gone: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The index entries of file ``file_id`` after positions ``gone`` (sorted) were removed from it: the entries'
    indices, which of them pointed at a removed row, and how many removed positions precede each (its shift).

    >>> mine, hit, before = removed_entries(np.array([7, 7, 8, 7]), np.array([0, 1, 0, 3]), 7, np.array([1, 2]))
    >>> mine.tolist(), hit.tolist(), before.tolist()
    ([0, 1, 3], [False, True, False], [0, 0, 2])
    """
    mine = np.flatnonzero(file_ids == file_id)
    pos = positions[mine]
    before = np.searchsorted(gone, pos)
    hit = np.zeros(mine.size, dtype=bool)
    inside = before < gone.size
    hit[inside] = gone[before[inside]] == pos[inside]
    return mine, hit, before


def duplicate_samples(rows: pa.Table, key_columns: Sequence[str], limit: int = 5) -> list[tuple[Any, ...]]:
    """Keys that occur in two adjacent rows of ``rows`` (sorted by the key columns), as tuples.

    >>> duplicate_samples(pa.table({"a": [1, 1, 2], "b": ["x", "x", "x"]}), ["a", "b"])
    [(1, 'x')]
    """
    if rows.num_rows < 2:
        return []
    same = np.ones(rows.num_rows - 1, dtype=bool)
    for c in key_columns:
        column = rows.column(c).combine_chunks()
        equal = pc.equal(column.slice(1), column.slice(0, rows.num_rows - 1))
        same &= pc.fill_null(equal, False).to_numpy(zero_copy_only=False)
    at = np.flatnonzero(same)[:limit]
    return [tuple(rows.column(c)[int(i)].as_py() for c in key_columns) for i in at]
