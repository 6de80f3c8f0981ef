"""Small batches, applied on the driver: one Spark job collects the batch as Arrow, everything else is pyarrow.

A batch that fits in memory is cheaper without Spark's machinery: no Python worker to start (a fresh ``dbt run``
process has none warm), no jobs to schedule, no shuffle. One Spark job evaluates the batch's query with every
column assigned to the table's types, every problem flagged (null and NaN keys, op codes, null sequence values,
values a checked conversion would change) and each key's index bucket, and hands it to the driver as Arrow without
passing through a Python worker. The driver then checks the flags, keeps the latest change per key, finds the keys
in the row index's bucket files, rewrites the touched data files with the page engine in threads, writes the new
rows, commits once and maintains the index: the same steps, checks and errors as the Spark path
(``partialcow.spark.changes``), which large batches still take.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partialcow.spark.casting import lossy_value
from partialcow.spark.rewrite_job import BUCKET, DELETE, constrains, holds_column, require_parquet
from partialcow.spark.spec import ChangeSpec
from partialcow.spark.staging import (
    BAD_OP,
    NAN_KEY,
    NULL_KEY,
    NULL_SEQUENCE,
    SAMPLE,
    NestedStep,
    assigned,
    assignment_plan,
    conform_schema_names,
    keys_text,
    lossy_error,
    null_value_error,
    problem_error,
    problem_flags,
    repeated_keys_error,
    require_columns,
    required_paths,
)
from partialcow.table.base import quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from partialcow.index.storage import IndexedFile

__all__ = ["APPEND_MAX_BYTES", "MAX_DRIVER_ROWS", "append_target", "collect_small_batch", "driver_max_rows", "null_at"]

# Batches up to this many rows are applied on the driver; larger ones by Spark jobs, which a cluster spreads out. A
# 10% batch of store_sales SF1 (316,844 rows) took 10.3 s on the driver against 17.9 s through the jobs in fresh dbt
# processes on 2 cores (bench/README.md, "Measurements behind code choices").
MAX_DRIVER_ROWS = 400_000
DRIVER_ROWS_ENV = "PARTIALCOW_DRIVER_MAX_ROWS"


def driver_max_rows() -> int:
    """The largest batch applied on the driver: ``PARTIALCOW_DRIVER_MAX_ROWS`` if set (0 sends every batch, and
    every first build's index, through Spark's jobs, as the test suite does to run both paths), else
    ``MAX_DRIVER_ROWS``."""
    return int(os.environ.get(DRIVER_ROWS_ENV, MAX_DRIVER_ROWS))

# A small batch's new rows go into the smallest data file it rewrites anyway, while that file stays under this
# size (Iceberg's default write.target-file-size-bytes): no new file per batch, so the file count, and with it
# manifests, listings and scans, stay bounded as batches accumulate.
APPEND_MAX_BYTES = 512 * 1024 * 1024


def append_target(files: Sequence[IndexedFile], paths: Mapping[int, str], touched: Sequence[int], new_rows: int,
                  schema: pa.Schema) -> int | None:
    """The id of the touched data file (ids ``touched``; ``paths`` by id) a small batch's ``new_rows`` rows go into,
    or None (write a new file): the smallest local file that keeps the table's columns in their types (``schema``: a
    file written before the table gained a column, or promoted one, gets none) and stays under ``APPEND_MAX_BYTES``
    (see ``_smallest_under``)."""
    import pyarrow.parquet as pq

    from partialcow.spark.tables import local_path

    if not new_rows:
        return None
    counts = {f.file_id: f.record_count for f in files}
    sizes = {}
    for file_id in touched:
        local = local_path(paths[file_id])
        if os.path.exists(local):
            sizes[file_id] = (os.path.getsize(local), counts.get(file_id, -1))
    target = _smallest_under(sizes, new_rows)
    if target is None:
        return None
    require_parquet(local_path(paths[target]))
    written = pq.read_schema(local_path(paths[target]))
    # a file written under narrower types or required columns (see rewrite_job.unfit) may not hold the new rows
    if written.names != schema.names or any(constrains(w.type, t.type) or (t.nullable and not w.nullable)
                                            or not holds_column(written, schema, t.name)
                                            for w, t in zip(written, schema)):
        return None
    return target


def _smallest_under(sizes: Mapping[int, tuple[int, int]], new_rows: int) -> int | None:
    """Of files id -> (bytes, rows), the smallest whose estimated size after ``new_rows`` more rows (its bytes per
    row times the rows) stays under ``APPEND_MAX_BYTES``.

    >>> _smallest_under({1: (900, 9), 2: (100, 1)}, 5)
    2
    >>> _smallest_under({1: (APPEND_MAX_BYTES // 2, 10)}, 10), _smallest_under({1: (APPEND_MAX_BYTES // 2, 10)}, 11)
    (1, None)
    """
    best = None
    for file_id, (size, rows) in sizes.items():
        if rows <= 0 or size + size * new_rows // rows > APPEND_MAX_BYTES:
            continue
        if best is None or size < best[0]:
            best = (size, file_id)
    return None if best is None else best[1]


_FLAGS = ("_pcow_f_null_key", "_pcow_f_nan_key", "_pcow_f_bad_op", "_pcow_f_null_seq")


def collect_small_batch(changes: DataFrame, spec: ChangeSpec, *, table_schema: StructType, bucket: Column | None,
                        max_rows: int | None = None) -> tuple[pa.Table, int] | None:
    """The validated batch as Arrow (latest change per key, values in the table's types, ``_pcow_delete`` and, with
    ``bucket``, ``_pcow_bucket``), and its row count before collapsing; None when it has more than ``max_rows``
    rows (the caller takes the Spark path). Raises the errors ``stage`` raises, with the same messages."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    max_rows = driver_max_rows() if max_rows is None else max_rows
    if max_rows <= 0:
        return None
    columns = require_columns(changes.columns, spec)
    table_types = {f.name: f.dataType for f in table_schema.fields}
    plan = assignment_plan(changes, spec, table_types)
    flags = problem_flags(changes, spec)
    checked = [name for name, (kind, _, _) in plan.items() if kind == "checked"]
    projection = [
        assigned(name, plan, spec, changes.schema[name].dataType) for name in columns if name != spec.op_column
    ]
    projection += [flag.alias(name) for name, flag in zip(_FLAGS, flags[:4])]
    projection.append(flags[4].alias(DELETE))
    if spec.op_column:
        projection.append(F.col(quote_identifier(spec.op_column)).alias("_pcow_op"))
    for i, name in enumerate(checked):
        _, source, target = plan[name]
        projection.append(lossy_value(quote_identifier(name), source, target,
                                      exact=name in spec.key_columns).alias(f"_pcow_lossy{i}"))
        projection.append(F.col(quote_identifier(name)).alias(f"_pcow_orig{i}"))
    frame = changes.select(*projection)
    if bucket is not None:
        # over the converted keys, as the Spark path hashes its staged batch: the raw key cast as part of the same
        # query fails the job under ANSI mode where a key does not fit, before the checks can name it
        frame = frame.withColumn(BUCKET, bucket)
    batches = frame.limit(max_rows + 1)._collect_as_arrow()
    batch = pa.Table.from_batches(batches) if batches else to_arrow_schema(frame.schema).empty_table()
    if batch.num_rows > max_rows:
        return None
    rows = batch.num_rows
    _raise_problems(batch, spec, checked, plan)
    for path in required_paths(columns, spec, table_schema):
        mask = ~_flag(batch, DELETE) & null_at(batch.column(path.column).combine_chunks(), path.steps)
        if mask.any():
            bad = batch.select(list(spec.key_columns)).filter(pa.array(mask)).slice(0, SAMPLE).to_pylist()
            raise null_value_error(spec, path, int(mask.sum()), bad)
    batch = batch.drop_columns([c for c in batch.column_names if c.startswith(("_pcow_f_", "_pcow_lossy",
                                                                              "_pcow_orig", "_pcow_op"))])
    # the columns first: a batch both of another schema and with a repeated key is refused for its schema, as the
    # Spark path refuses it (its staging checks columns before the locate job checks repeats)
    keep = conform_schema_names(batch.column_names, spec, list(table_types))
    return _latest_per_key(batch, spec).select(keep), rows


def _flag(batch: pa.Table, name: str) -> np.ndarray:
    flags: np.ndarray = pc.fill_null(batch.column(name), False).to_numpy(zero_copy_only=False)
    return flags


def null_at(values: pa.Array, steps: Sequence[tuple[NestedStep, str]]) -> np.ndarray:
    """Per value: whether it is null (no ``steps``), or holds null at ``steps`` (see ``staging.RequiredPath``)
    below a parent that is not null.

    >>> addr = pa.array([{"zip": "z"}, None, {"zip": None}])
    >>> null_at(addr, [("field", "zip")]).tolist(), null_at(addr, []).tolist()
    ([False, False, True], [False, True, False])
    >>> tags = pa.array([[{"zip": "z"}, None], None, [{"zip": None}]]).slice(1)
    >>> null_at(tags, [("element", "element")]).tolist()
    [False, False]
    >>> null_at(tags, [("element", "element"), ("field", "zip")]).tolist()
    [False, True]
    """
    hit: np.ndarray
    if not steps:
        hit = values.is_null().to_numpy(zero_copy_only=False)
        return hit
    if pa.types.is_null(values.type):  # a column of nulls holds nothing nested
        return np.zeros(len(values), dtype=bool)
    valid: np.ndarray = values.is_valid().to_numpy(zero_copy_only=False)
    (kind, name), rest = steps[0], steps[1:]
    if kind == "field":
        hit = valid & null_at(values.field(name), rest)
        return hit
    # the elements (map values) of the arrays (maps) that are not null, by position in the child array, and the
    # row each belongs to
    offsets: np.ndarray = values.offsets.to_numpy(zero_copy_only=False)
    lengths = np.where(valid, np.diff(offsets), 0)
    positions = np.repeat(offsets[:-1] - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
    children = values.items if kind == "value" else values.values
    hit = null_at(children.take(pa.array(positions, pa.int64())), rest)
    rows: np.ndarray = np.bincount(np.repeat(np.arange(len(values)), lengths)[hit], minlength=len(values)) > 0
    return rows


def _raise_problems(batch: pa.Table, spec: ChangeSpec, checked: Sequence[str], plan: dict[str, Any]) -> None:
    keys = list(spec.key_columns)

    def sample(mask: np.ndarray, *extra: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = batch.select([*dict.fromkeys([*keys, *extra])]).filter(pa.array(mask)) \
            .slice(0, SAMPLE).to_pylist()
        return rows

    for problem, flag in ((NULL_KEY, _FLAGS[0]), (NAN_KEY, _FLAGS[1]), (NULL_SEQUENCE, _FLAGS[3]), (BAD_OP, _FLAGS[2])):
        mask = _flag(batch, flag)
        if mask.any():
            rows = sample(mask, "_pcow_op") if problem == BAD_OP else sample(mask)
            if problem == BAD_OP and spec.op_column:  # the op code as the model named it
                rows = [{**r, spec.op_column: r["_pcow_op"]} for r in rows]
            raise problem_error(problem, spec, int(mask.sum()), rows)
    for i, name in enumerate(checked):
        mask = _flag(batch, f"_pcow_lossy{i}")
        if mask.any():
            _, source, target = plan[name]
            # a key that does not fit is named as the model delivered it (its converted value is null)
            originals = {k: f"_pcow_orig{j}" for j, k in enumerate(checked) if k in keys}
            bad = [{**r, **{k: r[o] for k, o in originals.items()}}
                   for r in sample(mask, f"_pcow_orig{i}", *originals.values())]
            raise lossy_error(spec, name, int(mask.sum()), source, target, [r[f"_pcow_orig{i}"] for r in bad], bad)


def _latest_per_key(batch: pa.Table, spec: ChangeSpec) -> pa.Table:
    """One change per key: the latest by the sequence column; without one, a repeated key is an error."""
    keys = list(spec.key_columns)
    if batch.num_rows < 2:
        return batch
    sort = [(k, "ascending") for k in keys]
    if spec.sequence_column:
        sort.append((spec.sequence_column, "ascending"))
    ordered = batch.take(pc.sort_indices(batch, sort_keys=sort))
    same_key = np.ones(ordered.num_rows - 1, dtype=bool)  # row i has the key of row i + 1
    for k in keys:
        column = ordered.column(k).combine_chunks()
        same_key &= pc.fill_null(pc.equal(column.slice(0, len(column) - 1), column.slice(1)), False).to_numpy(
            zero_copy_only=False)
    if not same_key.any():
        return ordered
    if not spec.sequence_column:
        repeated = ordered.select(keys).take(pa.array(np.flatnonzero(same_key))).to_pylist()
        unique = list({tuple(r.values()): r for r in repeated}.values())[:SAMPLE]
        raise repeated_keys_error(spec, keys_text(unique, keys))
    seq = ordered.column(spec.sequence_column).combine_chunks()
    tie = same_key & pc.fill_null(pc.equal(seq.slice(0, len(seq) - 1), seq.slice(1)), False).to_numpy(
        zero_copy_only=False)
    last = np.append(~same_key, True)  # the last row of each key's run holds its latest sequence value
    tie_at_latest = tie & last[1:]
    if tie_at_latest.any():
        tied = ordered.select(keys).take(pa.array(np.flatnonzero(tie_at_latest))).to_pylist()
        raise repeated_keys_error(spec, keys_text(tied[:SAMPLE], keys))
    return ordered.filter(pa.array(last))
