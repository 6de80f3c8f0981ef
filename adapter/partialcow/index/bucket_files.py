"""The index's bucket files: how keys map to buckets, how bucket files are written, and how a bucket file is
patched when its data file lost rows (the executor side of ``RowIndex``). Split from ``row_index``."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from partialcow.exceptions import DuplicateKeyError, IndexError_
from partialcow.index.sources import FILE_ID, POS, quote_identifier
from partialcow.index.storage import IndexStore, unique_names

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

BUCKET = "_bucket"
_RESERVED = {FILE_ID, POS, BUCKET}
_MAX_BUCKETS = 4096
_ROWS_PER_BUCKET = 500_000  # a bucket file of two bigint keys is then ~10 MB: one Spark task reads it quickly
_DUPLICATE_SAMPLE = 5
_DUP_MARKER = "partialcow-duplicate-key: "
# the bucket column of ``apply_commit``'s ``added_rows`` (the writer's locate job computed it with the index's hash)
_ADDED_BUCKET = "_pcow_bucket"


def _bucket_expr(key_columns: Sequence[str], num_buckets: int) -> Column:
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(*[F.col(quote_identifier(c)) for c in key_columns]), F.lit(num_buckets)).cast("int")


def _choose_buckets(total_rows: int, rows_per_bucket: int) -> int:
    return max(1, min(_MAX_BUCKETS, math.ceil(max(total_rows, 0) / rows_per_bucket)))



def _shift_bucket_files(tasks: Iterable[tuple[int, str, str]], *, remap: Mapping[int, tuple[int, np.ndarray]]
                        ) -> Iterator[tuple[int, dict[int, int], int]]:
    """Executor side of :meth:`RowIndex._shift`: rewrite each ``(bucket, src, dst)`` bucket file with the entries of
    the files in ``remap`` (old file id -> (new file id, sorted removed positions)) shifted; yields the bucket, the
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


def write_bucket_files(spark: SparkSession, store: IndexStore, key_columns: Sequence[str], key_types: Sequence[str],
                       table: str, merged: DataFrame, buckets: Sequence[int], *, keep_negative_ids: bool = True
                       ) -> dict[int, str]:
    """Write one key-sorted Parquet file per bucket of ``merged`` (key columns, ``_file_id``, ``_pos``, ``_bucket``)
    under a fresh name; refuse duplicate keys. ``keep_negative_ids=False``: rows with a negative file id take part
    in the duplicate check only (a first build's deletes) and are not written.

    One shuffle serves both: rows clustered by bucket and sorted by key put duplicates next to each other, so a
    ``lag`` over the same partitioning and order (no further exchange) finds them inside the write job, which
    then fails with a marked error that becomes ``DuplicateKeyError``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = [F.col(quote_identifier(c)) for c in key_columns]
    shown = [
        F.concat(F.lit("'"), k, F.lit("'")) if t == "string" else F.coalesce(k.cast("string"), F.lit("None"))
        for k, t in zip(keys, key_types)
    ]
    message = F.concat(F.lit(_DUP_MARKER + "("), F.concat_ws(", ", *shown), F.lit(")"))
    previous = F.lag(F.struct(*keys)).over(Window.partitionBy(BUCKET).orderBy(*keys))
    laid_out = (
        merged.repartition(max(1, len(buckets)), BUCKET)
        .sortWithinPartitions(BUCKET, *keys)
        .withColumn("_previous", previous)
        .where(F.when(F.struct(*keys).eqNullSafe(F.col("_previous")), F.raise_error(message)).isNull())
        .drop("_previous")
    )
    if not keep_negative_ids:
        laid_out = laid_out.where(F.col(FILE_ID) >= 0)
    tmp = store.new_tmp_dir()
    try:
        laid_out.write.option("maxRecordsPerFile", 0).partitionBy(BUCKET).parquet(store.uri(tmp))
    except Exception as exc:
        store.delete_dir(tmp)
        if _DUP_MARKER not in str(exc):
            raise
        # error path only: one more pass to name a sample of the duplicated keys
        sample = merged.groupBy(*key_columns).count().where("count > 1").limit(_DUPLICATE_SAMPLE).collect()
        raise duplicate_error(table, key_columns, sample) from None
    names = unique_names("b", buckets)
    written: dict[int, str] = {}
    for info in store.list_dir(tmp, recursive=True):
        if not info.base_name.endswith(".parquet"):
            continue
        folder = info.path.rsplit("/", 2)[-2]
        bucket = int(folder.split("=", 1)[1])
        if bucket in written:
            raise IndexError_(f"index of {table}: Spark wrote bucket {bucket} as more than one file")
        store.move_in(info.path[len(store.root) + 1:], names[bucket])
        written[bucket] = names[bucket]
    store.delete_dir(tmp)
    return written
