"""Key -> (file, position) lookups against bucket files, in Arrow: the one join the driver and executor tasks use.

A batch's keys are matched with the index entries of their buckets by an Arrow hash join of the key columns. Float
keys are compared as values (``-0.0`` is ``0.0``): a table written by another engine may hold ``-0.0`` and Arrow
compares floats bit for bit, while the batch was normalised when it was staged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from partialcow.parquet import INT96_UNIT

__all__ = ["FILE_ID", "POS", "bucket_entries", "join_keys", "normalized_key", "read_buckets"]

FILE_ID = "_file_id"
POS = "_pos"


def normalized_key(values: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """A key column as staging leaves it: float keys with -0.0 made 0.0.

    >>> normalized_key(pa.array([-0.0, 1.5, None])).to_pylist(), normalized_key(pa.array([1, 2])).to_pylist()
    ([0.0, 1.5, None], [1, 2])
    """
    if not pa.types.is_floating(values.type):
        return values
    return pc.if_else(pc.equal(values, pa.scalar(0, values.type)), pa.scalar(0, values.type), values)


def read_buckets(paths: Iterable[str], key_columns: Sequence[str], key_schema: pa.Schema) -> pa.Table | None:
    """The entries (keys, ``_file_id``, ``_pos``) of the bucket files ``paths``, as :func:`bucket_entries` makes
    them."""
    parts = [bucket_entries(pq.read_table(p, columns=[*key_columns, FILE_ID, POS],
                                          coerce_int96_timestamp_unit=INT96_UNIT), key_columns, key_schema)
             for p in paths]
    return pa.concat_tables(parts) if parts else None


def bucket_entries(rows: pa.Table, key_columns: Sequence[str], key_schema: pa.Schema) -> pa.Table:
    """One bucket file's entries in the one schema every bucket's entries share: keys cast to ``key_schema``'s types
    (Spark may have stored them with another physical type, e.g. INT96 timestamps, or another time zone) and
    normalised, every column nullable (a file Spark wrote from a table's NOT NULL key says so, one rewritten by
    Arrow does not, and Arrow concatenates only identical schemas).

    >>> a = pa.table({"k": [1], FILE_ID: pa.array([0], pa.int32()), POS: [0]},
    ...              schema=pa.schema([pa.field("k", pa.int64(), False), pa.field(FILE_ID, pa.int32(), False),
    ...                                pa.field(POS, pa.int64(), False)]))
    >>> b = pa.table({"k": [2], FILE_ID: pa.array([1], pa.int32()), POS: [3]})
    >>> keys = pa.schema([("k", pa.int64())])
    >>> pa.concat_tables([bucket_entries(t, ["k"], keys) for t in (a, b)]).column("k").to_pylist()
    [1, 2]
    """
    fields = [pa.field(c, key_schema.field(c).type) for c in key_columns]
    fields += [pa.field(FILE_ID, pa.int32()), pa.field(POS, pa.int64())]
    columns = [normalized_key(rows.column(c).cast(key_schema.field(c).type)) for c in key_columns]
    columns += [rows.column(FILE_ID).cast(pa.int32()), rows.column(POS).cast(pa.int64())]
    return pa.table(columns, schema=pa.schema(fields))


def join_keys(entries: pa.Table | None, keys: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Match ``keys`` (the key columns of a batch, one row per change) with index ``entries``: the batch row, file
    id and position of every match (a key the table holds twice matches twice).

    >>> entries = pa.table({"k": [1, 2], FILE_ID: pa.array([0, 0], pa.int32()), POS: pa.array([0, 1], pa.int64())})
    >>> [a.tolist() for a in join_keys(entries, pa.table({"k": [2, 3]}))]
    [[0], [0], [1]]
    """
    if entries is None or not keys.num_rows:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.astype(np.int32), empty
    key_columns = keys.column_names
    # join keys and row numbers only: Arrow's hash join cannot carry every column type a batch may hold
    probe = keys.append_column("_pcow_row", pa.array(np.arange(keys.num_rows, dtype=np.int64)))
    # Arrow builds its hash table from the right side: the smaller one (a small batch against whole buckets)
    if probe.num_rows <= entries.num_rows:
        hits = entries.join(probe, list(key_columns), join_type="inner", use_threads=False)
    else:
        hits = probe.join(entries, list(key_columns), join_type="inner", use_threads=False)
    return (hits.column("_pcow_row").to_numpy(), hits.column(FILE_ID).to_numpy(),
            hits.column(POS).to_numpy())
