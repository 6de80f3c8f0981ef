"""The index's bucket files: how keys map to buckets, how bucket files are written, and how a bucket file is
patched when its data file lost rows (the executor side of ``RowIndex``). Split from ``row_index``."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from partialcow.exceptions import DuplicateKeyError, IndexError_
from partialcow.index.storage import BUCKET_WRITE_OPTIONS, IndexStore, unique_names
from partialcow.table.base import FILE_ID, POS, quote_identifier

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

BUCKET = "_bucket"
_RESERVED = {FILE_ID, POS, BUCKET}
_MAX_BUCKETS = 4096
_ROWS_PER_BUCKET = 500_000  # a bucket file of two bigint keys is then ~10 MB: one Spark task reads it quickly
_DUPLICATE_SAMPLE = 5
# the bucket column of ``apply_commit``'s ``added_rows`` (the writer's locate job computed it with the index's hash)
_ADDED_BUCKET = "_pcow_bucket"


def key_hash_expr(key_columns: Sequence[str]) -> Column:
    """The index's 64-bit key hash (Spark's ``xxhash64`` over the key columns): a key's bucket is its ``pmod`` by
    the bucket count (see :func:`buckets_of`)."""
    from pyspark.sql import functions as F

    return F.xxhash64(*[F.col(quote_identifier(c)) for c in key_columns])


def _bucket_expr(key_columns: Sequence[str], num_buckets: int) -> Column:
    from pyspark.sql import functions as F

    return F.pmod(key_hash_expr(key_columns), F.lit(num_buckets)).cast("int")


def buckets_of(key_hashes: np.ndarray, num_buckets: int) -> np.ndarray:
    """The buckets of keys with these :func:`key_hash_expr` values, as Spark's ``pmod`` computes them.

    >>> buckets_of(np.array([-7, 7, 0], dtype=np.int64), 4).tolist()
    [1, 3, 0]
    """
    buckets: np.ndarray = np.mod(key_hashes, num_buckets).astype(np.int32)  # the divisor's sign, as pmod
    return buckets


def _choose_buckets(total_rows: int, rows_per_bucket: int) -> int:
    return max(1, min(_MAX_BUCKETS, math.ceil(max(total_rows, 0) / rows_per_bucket)))



def _shift_bucket_files(tasks: Iterable[tuple[Any, str, str]], *, remap: Mapping[int, tuple[int, np.ndarray]]
                        ) -> Iterator[tuple[Any, dict[int, int], int]]:
    """Executor side of :meth:`RowIndex._shift`: rewrite each ``(tag, src, dst)`` bucket file with the entries of
    the files in ``remap`` (old file id -> (new file id, sorted removed positions)) shifted; yields the tag, the
    entries removed per old file id and the entries left."""

    import pyarrow as pa
    import pyarrow.parquet as pq

    from partialcow.index.local import removed_entries
    from partialcow.parquet import ROW_POSITION, rewrite_file

    for bucket, src, dst in tasks:
        entries = pq.read_table(src, columns=[FILE_ID, POS])
        file_ids = entries.column(FILE_ID).to_numpy()
        positions = entries.column(POS).to_numpy()
        rows, new_ids, new_positions, gone_rows = [], [], [], []
        counts: dict[int, int] = {}
        for old_id, (new_id, gone) in remap.items():
            mine, hit, before = removed_entries(file_ids, positions, old_id, gone)
            if not mine.size:
                continue
            pos = positions[mine]
            gone_rows.append(mine[hit])
            counts[old_id] = int(hit.sum())
            rows.append(mine[~hit])
            new_ids.append(np.full(int((~hit).sum()), new_id, dtype=np.int32))
            new_positions.append(pos[~hit] - before[~hit])
        updates = None
        if rows:
            updates = pa.table({
                ROW_POSITION: pa.array(np.concatenate(rows), pa.int64()),
                FILE_ID: pa.array(np.concatenate(new_ids)).cast(entries.schema.field(FILE_ID).type),
                POS: pa.array(np.concatenate(new_positions)).cast(entries.schema.field(POS).type),
            })
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        report = rewrite_file(src, dst, updates=updates, deletes=np.concatenate(gone_rows) if gone_rows else None,
                              threads=1)
        yield bucket, counts, report.rows_after


def duplicate_error(table: str, key_columns: Sequence[str], rows: Iterable) -> DuplicateKeyError:  # type: ignore[type-arg]
    sample = [tuple(r[c] for c in key_columns) for r in rows]
    err = DuplicateKeyError(
        f"table {table} holds key(s) {list(key_columns)} more than once, e.g. {sample}; "
        "deduplicate the table (or choose a unique key) before using the row index"
    )
    err.samples = sample  # type: ignore[attr-defined]
    return err


def write_bucket_files(spark: SparkSession, store: IndexStore, key_columns: Sequence[str], table: str,
                       merged: DataFrame, buckets: Sequence[int], *, keep_negative_ids: bool = True
                       ) -> dict[int, str]:
    """Write one key-sorted Parquet file per bucket of ``merged`` (key columns, ``_file_id``, ``_pos``, ``_bucket``)
    under a fresh name; refuse duplicate keys. ``keep_negative_ids=False``: rows with a negative file id take part
    in the duplicate check only (a first build's deletes) and are not written.

    One shuffle clusters the rows by bucket; each task then sorts its buckets with pyarrow, finds repeated keys
    next to each other, and writes the files through the index store's file system. (Spark's own sort, a ``lag``
    window to find the duplicates and its Parquet writer did the same in one job, at about three times the cost:
    the window buffers a whole bucket.) Nothing is published here: on a duplicate every file written is deleted.
    """
    names = unique_names("b", buckets)
    job = partial(_write_bucket_task, store=store, names=names, key_columns=list(key_columns),
                  keep_negative_ids=keep_negative_ids)
    try:
        rows = (merged.repartition(max(1, len(buckets)), BUCKET)
                .mapInArrow(job, "bucket int, rows bigint, duplicate string").collect())
    except BaseException:
        _delete_quietly(store, names.values())
        raise
    return _written(store, table, key_columns, names, [r.asDict() for r in rows])


def write_bucket_files_local(store: IndexStore, key_columns: Sequence[str], table: str, entries: pa.Table,
                             num_buckets: int, key_hashes: np.ndarray, *, keep_negative_ids: bool = True,
                             threads: int = 2) -> dict[int, str]:
    """:func:`write_bucket_files` without Spark, for entries the driver holds (key columns, ``_file_id``, ``_pos``)
    with their :func:`key_hash_expr` values: grouped by bucket once, each bucket sorted and written by one of
    ``threads`` threads (pyarrow's sort and writer release the GIL). Same files, same refusal of repeated keys."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    buckets = buckets_of(key_hashes, num_buckets)
    order = np.argsort(buckets, kind="stable")
    grouped = entries.take(pa.array(order)).append_column(BUCKET, pa.array(buckets[order]))
    ordered = buckets[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if ordered.size else np.array([], int)
    ends = np.r_[starts[1:], ordered.size]
    names = unique_names("b", range(num_buckets))
    write = partial(_sorted_bucket_files, store=store, names=names, key_columns=list(key_columns),
                    keep_negative_ids=keep_negative_ids)
    try:
        with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="partialcow-index") as pool:
            results = [r for rows in pool.map(lambda se: write(grouped.slice(se[0], se[1] - se[0])),
                                              zip(starts.tolist(), ends.tolist())) for r in rows]
    except BaseException:
        _delete_quietly(store, names.values())
        raise
    return _written(store, table, key_columns, names, results)


def _written(store: IndexStore, table: str, key_columns: Sequence[str], names: Mapping[int, str],
             results: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """The bucket files the tasks' ``results`` name; a repeated key deletes them all and is the error."""
    duplicates = [json.loads(r["duplicate"]) for r in results if r["duplicate"] is not None]
    if duplicates:
        _delete_quietly(store, names.values())
        sample = [dict(zip(key_columns, d)) for d in duplicates[:_DUPLICATE_SAMPLE]]
        raise duplicate_error(table, key_columns, sample)
    written = {int(r["bucket"]): names[int(r["bucket"])] for r in results}
    if len(written) != len(results):
        raise IndexError_(f"index of {table}: a bucket was written by more than one task")
    return written


def _write_bucket_task(batches: Iterator[pa.RecordBatch], *, store: IndexStore, names: Mapping[int, str],
                       key_columns: list[str], keep_negative_ids: bool) -> Iterator[pa.RecordBatch]:
    """Executor side of :func:`write_bucket_files`: this task's buckets, each sorted by key and written as one file;
    yields ``(bucket, rows, None)`` per file, or ``(bucket, 0, keys as JSON)`` per repeated key found (and then
    writes nothing)."""
    import pyarrow as pa

    schema = pa.schema([("bucket", pa.int32()), ("rows", pa.int64()), ("duplicate", pa.string())])
    parts = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    if not parts:
        return
    out = _sorted_bucket_files(pa.concat_tables(parts), store=store, names=names, key_columns=key_columns,
                               keep_negative_ids=keep_negative_ids)
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=schema)


def _sorted_bucket_files(entries: pa.Table, *, store: IndexStore, names: Mapping[int, str], key_columns: list[str],
                         keep_negative_ids: bool) -> list[dict[str, object]]:
    """Sort ``entries`` (one or more whole buckets) by bucket and key and write one file per bucket; returns
    ``{bucket, rows, duplicate: None}`` per file, or only ``{bucket, 0, keys as JSON}`` per repeated key found (and
    then writes nothing)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from partialcow.index.local import duplicate_samples

    entries = entries.sort_by([(BUCKET, "ascending"), *[(c, "ascending") for c in key_columns]])
    repeated = duplicate_samples(entries, [BUCKET, *key_columns], limit=_DUPLICATE_SAMPLE)
    if repeated:
        return [{"bucket": r[0], "rows": 0, "duplicate": json.dumps(r[1:], default=str)} for r in repeated]
    if not keep_negative_ids:
        entries = entries.filter(pc.greater_equal(entries.column(FILE_ID), 0))
    bucket_ids = entries.column(BUCKET).to_numpy()
    starts = np.flatnonzero(np.r_[True, bucket_ids[1:] != bucket_ids[:-1]]) if bucket_ids.size else np.array([], int)
    ends = np.r_[starts[1:], bucket_ids.size]
    columns = [*key_columns, FILE_ID, POS]
    out: list[dict[str, object]] = []
    for start, end in zip(starts.tolist(), ends.tolist()):
        bucket = int(bucket_ids[start])
        path = store.path(names[bucket])
        store.fs.create_dir(os.path.dirname(path), recursive=True)
        with store.fs.open_output_stream(path) as sink:
            pq.write_table(entries.slice(start, end - start).select(columns), sink, **BUCKET_WRITE_OPTIONS)
        out.append({"bucket": bucket, "rows": end - start, "duplicate": None})
    return out


def _delete_quietly(store: IndexStore, names: Iterable[str]) -> None:
    for name in names:
        with contextlib.suppress(OSError):  # never written (another task's bucket, or none at all)
            store.fs.delete_file(store.path(name))
