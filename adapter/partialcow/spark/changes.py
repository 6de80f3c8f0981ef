"""Apply a batch of CDC changes to a lakehouse table with partial copy-on-write.

The pipeline, on the driver unless said otherwise:

1. **Stage**: validate the batch (key columns present and non-null, op codes known, values castable) and collapse it to
   the last change per key (by ``sequence_column``; without one, a key may appear once).
2. **Locate** (executors): the batch is routed by the row index's key bucket (or, when it is large against the table,
   taken as it is partitioned), and each task joins its keys with its buckets' index files (no table scan): keys
   found are updates or deletes of (file, position); keys not found are inserts (or no-op deletes). Tasks leave
   their rows per touched file in a scratch folder.
3. **Rewrite** (executors, one task per touched file): the Parquet page engine re-encodes only the pages holding
   changed values and copies every other page; inserts become new files written with the product's layout.
4. **Commit** once: old files replaced by new ones in one optimistic-concurrency commit of the table format.
5. **Maintain** the index for the new version.

A failure before the commit deletes the files written for it: the table never sees them.

The batch contract is :class:`partialcow.spark.spec.ChangeSpec`; staging and the casting rules live in
:mod:`partialcow.spark.staging` and :mod:`partialcow.spark.casting`.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from partialcow.exceptions import (
    ChangeFeedError,
    CommitConflictError,
    LostCommitError,
    UnsupportedTableFeatureError,
    UnusableIndexError,
)
from partialcow.faults import checkpoint
from partialcow.index import RowIndex
from partialcow.metrics import PhaseClock, WriteMetrics
from partialcow.spark.commit_step import _MAX_CONFLICT_KEYS, _commit, _conflict_keys, _discard, conflict_keys_of
from partialcow.spark.create import (
    create_pending,
    create_table,
)
from partialcow.spark.decimal_transfer import send_unscaled, unscaled_decimals
from partialcow.spark.errors import named_errors
from partialcow.spark.journal import WriteLease, data_file_prefix
from partialcow.spark.partitioning import routes
from partialcow.spark.rewrite_job import (
    BUCKET,
    DELETE,
    LOCATE_RESULT_SCHEMA,
    FileTask,
    locate_partition,
    run_file_tasks,
)
from partialcow.spark.small_batch import append_target, collect_small_batch
from partialcow.spark.spec import ChangeSpec, OnSchemaChange
from partialcow.spark.staging import (
    SAMPLE,
    batch_spelling,
    keys_text,
    refuse_unlistable_fields,
    refuse_untyped,
    repeated_keys_error,
    stage,
    stage_changes,
    table_spelling,
)
from partialcow.spark.tables import LakehouseTable, local_path
from partialcow.table.base import quote_identifier

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["ChangeSpec", "OnSchemaChange", "apply_changes", "create_pending", "create_table", "stage_changes"]

# A commit beaten by another writer that changed none of the batch's keys is located and committed again.
_MAX_COMMIT_RETRIES = 3
_ROWS_PER_INSERT_FILE = 1_000_000
_MIN_ROWS_PER_INSERT_FILE = 250_000
# A locate task holds this many changed rows at most (as Arrow, with their index buckets), unless the index has
# fewer buckets than that would need tasks.
_ROWS_PER_LOCATE_TASK = 250_000
# Locating a batch in place (no shuffle) makes every task read the index buckets its rows hit, often all of them;
# routing it by bucket sends every changed row through Spark's shuffle, which costs about twenty times more per row
# than reading and joining an index row (bench/README.md, "Measurements behind code choices").
_INDEX_ROWS_PER_SHUFFLED_ROW = 20
# what a task locating in place may hold: its changed rows and the index rows of its buckets, as Arrow
_IN_PLACE_MAX_TASK_ROWS = 1_000_000
_IN_PLACE_MAX_INDEX_ROWS = 10_000_000
# Spark hands decimals to Arrow one java.math.BigDecimal at a time; passing their unscaled longs instead
# (partialcow.spark.decimal_transfer) costs a fixed plan of py4j calls per column, which only large batches win
# back. Smaller batches convert their decimals as they are.
_UNSCALED_DECIMALS_MIN_ROWS = 250_000


def _evolve_schema(spark: SparkSession, table: LakehouseTable, changes_schema,  # type: ignore[no-untyped-def]
                   spec: ChangeSpec) -> tuple[int, int]:
    """``append_new_columns`` / ``sync_all_columns``: add the batch's new columns (and drop the table's columns the
    batch no longer has, for sync) before applying it, in the table format's metadata (Iceberg: schema update;
    Delta: a metadata commit); returns how many it added and dropped. Existing files keep their columns; a row that
    gets a value in a column its file lacks is moved to a new file (see ``rewrite_changed_file``)."""
    new_names, dropped = _schema_delta(changes_schema.names, table.spark_schema().fieldNames(), spec)
    if not new_names and not dropped:
        return 0, 0
    new = [f for f in changes_schema.fields if f.name in new_names]
    if table.table_format != "iceberg" and not table.delta_spark:
        raise ChangeFeedError(
            f"model {spec.model}: on_schema_change={spec.on_schema_change!r} needs schema evolution, a Delta metadata "
            f"commit, which needs Delta inside Spark: Delta table {table.name} is written through delta-rs here"
        )
    if dropped and table.table_format == "delta":
        # Without column mapping a Delta table names columns in its files by name: a dropped column's values stay
        # in the files and come back if a column of that name is added again, which is why Delta allows DROP
        # COLUMN only with column mapping (which these rewrites do not support). dbt-spark refuses it on Delta too.
        raise ChangeFeedError(
            f"model {spec.model}: on_schema_change='sync_all_columns' would drop column(s) {dropped} of Delta table "
            f"{table.name}; Delta drops columns only under column mapping, which partial copy-on-write does not "
            "support. Keep the columns in the model, or rebuild the table with --full-refresh"
        )
    name = table.sql_name
    if new:
        refuse_untyped(new, spec)  # Delta would add a column of type void
        if table.table_format == "iceberg":
            refuse_unlistable_fields(new, spec)
        columns = ", ".join(f"{quote_identifier(f.name)} {f.dataType.simpleString()}" for f in new)
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({columns})")
    for column in dropped:  # never a key column: stage_changes required every key column in the batch
        spark.sql(f"ALTER TABLE {name} DROP COLUMN {quote_identifier(column)}")
    return len(new), len(dropped)


def _schema_delta(columns: Sequence[str], table_columns: Sequence[str],
                  spec: ChangeSpec) -> tuple[list[str], list[str]]:
    """The columns ``on_schema_change`` adds to the table (the batch's new ones) and drops from it (``sync``: the
    ones the batch no longer has); none under ``ignore`` and ``fail``.

    >>> _schema_delta(["k", "v", "extra", "_op"], ["k", "v", "w"], ChangeSpec(key_columns=("k",), op_column="_op",
    ...               on_schema_change="sync_all_columns"))
    (['extra'], ['w'])
    """
    if spec.on_schema_change not in ("append_new_columns", "sync_all_columns"):
        return [], []
    control = {*spec.control_columns, DELETE}
    new = [c for c in columns if c not in table_columns and c not in control]
    dropped = [c for c in table_columns if c not in columns] if spec.on_schema_change == "sync_all_columns" else []
    return new, dropped


def _value_columns(spec: ChangeSpec, table_columns: Sequence[str], staged_columns: Sequence[str]) -> list[str]:
    candidates = [c for c in table_columns if c not in spec.key_columns and c in staged_columns]
    if spec.update_columns is not None:
        unknown = [c for c in spec.update_columns if c not in table_columns]
        if unknown:
            raise ChangeFeedError(f"model {spec.model}: merge_update_columns {unknown} are not columns of the table")
        candidates = [c for c in candidates if c in spec.update_columns]
    return [c for c in candidates if not spec.excludes(c)]


def _check_key_columns(spec: ChangeSpec, table_columns: Sequence[str]) -> None:
    """A key column the table lacks (a renamed or new ``unique_key``) names no row of it: refused before the index is
    built on it (which failed with Spark's UNRESOLVED_COLUMN) or the column is added under ``append_new_columns``
    (every row's key then null).

    >>> _check_key_columns(ChangeSpec(key_columns=("uid",), model="m"), ["id", "v"])
    Traceback (most recent call last):
    ...
    partialcow.exceptions.ChangeFeedError: model m: unique_key column(s) ['uid'] are not columns of the table (its columns: id, v): the rows it holds have no such key. Run `dbt run --full-refresh --select m` to rebuild it with the new key
    """  # noqa: E501 - a doctest line cannot wrap
    missing = [k for k in spec.key_columns if k not in table_columns]
    if missing:
        raise ChangeFeedError(
            f"model {spec.model}: unique_key column(s) {missing} are not columns of the table (its columns: "
            f"{', '.join(table_columns)}): the rows it holds have no such key. Run `dbt run --full-refresh --select "
            f"{spec.model}` to rebuild it with the new key"
        )


def _open_index(table: LakehouseTable, spec: ChangeSpec, table_schema: StructType) -> RowIndex:
    if RowIndex.exists(table.format_table):
        try:
            index: RowIndex | None = RowIndex.open(table.format_table)
        except UnusableIndexError:
            index = None  # derived from the table: built again below
        if index is not None and tuple(index.key_columns) == tuple(spec.key_columns):
            # a key column of another type now (Iceberg's int -> bigint promotion, which commits no snapshot, or a
            # table re-created by another writer) leaves every entry hashed and typed as before: a new generation
            types = {f.name.lower(): f.dataType.simpleString() for f in table_schema.fields}
            now = tuple(types.get(c.lower()) for c in spec.key_columns)
            if index.state.key_types and None not in now and now != tuple(index.state.key_types):
                index.rebuild()
            else:
                index.ensure_fresh()
            return index
    return RowIndex.create(table.format_table, key_columns=spec.key_columns)


def apply_changes(spark: SparkSession, table: LakehouseTable, changes: DataFrame, spec: ChangeSpec) -> WriteMetrics:
    """Upsert and delete ``changes`` into ``table`` in one commit; returns what was written.

    ``changes`` holds the key columns, value columns and, per ``spec``, an op code and a sequence column.
    Keys present in the table are updated in place (only changed pages re-encoded) or deleted; keys absent are
    inserted; deletes of absent keys are no-ops. A batch that changes no value commits nothing.

    When another writer commits first (Iceberg; Delta inside Spark), the batch is located again on the new snapshot
    and committed again, up to ``_MAX_COMMIT_RETRIES`` times, as long as that writer changed none of the batch's keys
    (``WriteMetrics.commit_retries`` counts the retries); if it changed one, ``CommitConflictError`` names it.
    Every error a batch can cause is a ``PartialCowError`` naming the model (see ``partialcow.spark.errors``).
    """
    with named_errors(model=spec.model, table=table.name):
        return _apply(spark, table, changes, spec)


def _apply(spark: SparkSession, table: LakehouseTable, changes: DataFrame, spec: ChangeSpec) -> WriteMetrics:
    started = time.monotonic()
    clock = PhaseClock()
    with ExitStack() as stack:
        with clock("lease"):
            lease = stack.enter_context(table.write_lease())
        checkpoint("leased")
        # refused before any Spark job; the commit checks again
        table.check_supported(removing=False, partitioned_ok=False)
        with clock("schema"):
            table_schema = table.spark_schema()
            changes = table_spelling(changes, spec, table_schema.fieldNames())
            spec = batch_spelling(changes, spec)
            _check_key_columns(spec, table_schema.fieldNames())
        with clock("index_open"):
            index = _open_index(table, spec, table_schema)
        small = None
        evolved = (0, 0)  # columns added, dropped
        # a batch small enough for the driver takes no Spark job beyond its own query (see small_batch); schema
        # evolution needs the Spark path
        layout = _bucket_layout(index)
        if spec.on_schema_change in ("ignore", "fail"):
            with clock("stage"):
                bucket = index.bucket_column() if index.state.key_types else None
                small = collect_small_batch(changes, spec, table_schema=table_schema, bucket=bucket)
        if small is not None:
            batch, batch_rows = small
            staged = None
        else:
            # a batch that changes the table's schema is checked for repeated keys before: the locate job, which
            # checks them otherwise, runs after the schema change
            evolves = any(_schema_delta(changes.columns, table_schema.fieldNames(), spec))
            with clock("stage"):
                staged, batch_rows = stage(changes, spec, table_schema=table_schema, check_unique=evolves)
            # only a batch that passed every check may change the table's schema
            if evolves:
                _check_before_schema_change(table, index, staged, spec, table_schema)
            evolved = _evolve_schema(spark, table, staged.schema, spec)
            if any(evolved):
                table_schema = table.spark_schema()
                # on Delta the ALTER is a version of its own: the batch is based on it, or the commit would take it
                # for another writer's change and do the batch again
                with clock("index_open"):
                    index = _open_index(table, spec, table_schema)
        checkpoint("staged")
        retries = 0
        rebuilt = False
        while True:
            base_version = index.state.table_version
            try:
                if staged is None:
                    metrics = _attempt_small(spark, table, index, batch, spec, table_schema, lease, clock)
                else:
                    metrics = _attempt(spark, table, index, staged, spec, table_schema, batch_rows, lease, clock)
                break
            except _UnknownFilesError:
                # entries the index's state does not know (a bucket file of another generation), found before
                # anything was written: the index is built again from the table, once
                if rebuilt:
                    raise
                rebuilt = True
                with clock("index_open"):
                    index = RowIndex.create(table.format_table, key_columns=spec.key_columns)
                if staged is None and BUCKET in batch.column_names and _bucket_layout(index) != layout:
                    batch = batch.drop_columns([BUCKET])
            except CommitConflictError as exc:
                if isinstance(exc, LostCommitError):
                    lease.keep_for_recovery = True  # its files stay unreferenced: the next write removes them
                # Delta through delta-rs: its committer already re-checks and rebases on other writers' commits
                if retries >= _MAX_COMMIT_RETRIES or not (table.table_format == "iceberg" or table.delta_spark):
                    raise
                keys = staged if staged is not None else _key_frame(spark, batch, spec)
                changed = _keys_changed_since(spark, table, keys, spec, base_version)
                if changed:
                    raise CommitConflictError(
                        f"model {spec.model}: another writer changed key(s) {changed} of table {table.name} since "
                        f"snapshot {base_version}, which this batch also changes; nothing was committed. Re-run the "
                        "model to apply the batch on top of those changes"
                    ) from exc
                retries += 1
                with clock("index_open"):
                    index = _open_index(table, spec, table_schema)
                if staged is None and BUCKET in batch.column_names and _bucket_layout(index) != layout:
                    # the repair laid the index out again: the buckets hashed with the batch are stale. Without
                    # them every bucket is read, and the new files are indexed by reading them
                    batch = batch.drop_columns([BUCKET])
        checkpoint("indexed")
    metrics.phase_ms = clock.ms
    metrics.commit_retries = retries
    metrics.columns_added, metrics.columns_dropped = evolved
    metrics.duration_ms = int((time.monotonic() - started) * 1000)
    return metrics


def _bucket_layout(index: RowIndex) -> tuple[int, tuple[str, ...]]:
    """What a key's bucket number depends on: the index's bucket count and key types."""
    return index.state.num_buckets, tuple(index.state.key_types)


def _attempt(spark: SparkSession, table: LakehouseTable, index: RowIndex, staged: DataFrame, spec: ChangeSpec,
             table_schema: StructType, batch_rows: int, lease: WriteLease, clock: PhaseClock) -> WriteMetrics:
    """Locate, rewrite and commit the staged batch once with Spark jobs, from the index's snapshot, then maintain
    the index."""
    table_columns = [f.name for f in table_schema.fields]
    value_columns = _value_columns(spec, table_columns, staged.columns)
    base_version = index.state.table_version
    cores = spark.sparkContext.defaultParallelism
    scratch = lease.scratch_dir()
    try:
        with clock("locate"):
            in_place = _locates_in_place(staged, index, spec, batch_rows, cores)
            located = _locate(index, staged, spec, value_columns, table_columns, scratch, batch_rows, cores, in_place)
        checkpoint("located")
        paths = index.file_paths()
        _require_known_files(index, located.file_rows, paths)
        _require_own_files(spec, table, located.file_rows, paths)
        if located.inserts:
            _check_required_columns(spec, table_schema, staged.columns)
        # one task per touched file, the most changed first, then the insert writers
        ids = sorted(located.file_rows, key=lambda i: (-located.file_rows[i], i))
        threads = _threads_per_file(cores, len(ids)) if ids else 1
        # an insert writer also runs for deletes of absent keys only: it checks them for repeats (see run_file_tasks)
        parts = _insert_files(located.inserts, cores) if located.insert_fragments else 0
        vectors = table.deletion_vectors(base_version) if ids else {}
        tasks = [FileTask(src=paths[i], fragments=located.fragments[i], threads=threads,
                          deletion_vector=json.dumps(vectors[paths[i]]) if paths[i] in vectors else None,
                          table_root=local_path(table.format_table.location)) for i in ids]
        tasks += [FileTask(src=None, fragments=located.insert_fragments, part=p, parts=parts) for p in range(parts)]
        results: list[dict[str, Any]] = []
        if tasks:
            insert_schema = table.file_schema(table_schema)
            job = partial(
                run_file_tasks,
                update_columns=value_columns,
                # rows whose new values land in columns their file lacks move to a new file with the table schema
                moved_schema=insert_schema,
                insert_schema=insert_schema,
                data_dir=table.data_dir,
                check_keys=spec.key_columns if in_place else (),
                file_prefix=data_file_prefix(lease.write_id),
                # with index rows of every new file the index is maintained without Spark (needs its buckets)
                key_columns=spec.key_columns if index.state.key_types else (),
                write_options=table.parquet_options(),
            )
            with clock("rewrite"), _removing_written_on_failure(lease):
                results = spark.sparkContext.parallelize(tasks, len(tasks)).mapPartitions(job).collect()
        repeated = [r for r in results if r["kind"] == "repeated"]
        if repeated:
            _discard([p for r in results for p in (r.get("dst"), r.get("moved_dst")) if p])
            raise repeated_keys_error(spec, ", ".join([s for r in repeated for s in r["samples"]][:SAMPLE]))
        return _commit(table, index, results, located.inserts, located.conflict_keys, base_version, clock, spec)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _attempt_small(spark: SparkSession, table: LakehouseTable, index: RowIndex, batch: pa.Table, spec: ChangeSpec,
                   table_schema: StructType, lease: WriteLease, clock: PhaseClock) -> WriteMetrics:
    """The same as :func:`_attempt` for a batch collected on the driver (see ``partialcow.spark.small_batch``): the
    index's bucket files are joined with pyarrow and the touched files rewritten in driver threads, no Spark job."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    import pyarrow.compute as pc

    from partialcow.spark.rewrite_job import POS, rewrite_changed_file, whole_rows, write_index_rows, write_partition
    from partialcow.table.delta.dv import deleted_positions

    table_columns = [f.name for f in table_schema.fields]
    value_columns = _value_columns(spec, table_columns, batch.column_names)
    keys = list(spec.key_columns)
    base_version = index.state.table_version
    cores = spark.sparkContext.defaultParallelism
    scratch = lease.scratch_dir()
    prefix = data_file_prefix(lease.write_id)
    indexable = bool(index.state.key_types) and BUCKET in batch.column_names
    try:
        with clock("locate"):
            buckets = batch.column(BUCKET).to_numpy(zero_copy_only=False) if BUCKET in batch.column_names else None
            at, file_ids, positions = index.locate_local(batch.select(keys), buckets)
            is_delete = pc.fill_null(batch.column(DELETE), False).to_numpy(zero_copy_only=False)
            found = np.zeros(batch.num_rows, dtype=bool)
            found[at] = True
            insert_rows = batch.filter(pa.array(~found & ~is_delete))
            conflict_keys = conflict_keys_of(batch.select(keys), spec)
        checkpoint("located")
        paths = index.file_paths()
        _require_known_files(index, np.unique(file_ids).tolist(), paths)
        _require_own_files(spec, table, np.unique(file_ids).tolist(), paths)
        if insert_rows.num_rows:
            _check_required_columns(spec, table_schema, batch.column_names)
        carried = [*keys, *value_columns, *([BUCKET] if BUCKET in batch.column_names else [])]
        order = np.argsort(file_ids, kind="stable")
        at, file_ids, positions = at[order], file_ids[order], positions[order]
        ids, starts, sizes = np.unique(file_ids, return_index=True, return_counts=True)
        located = batch.select(carried).take(pa.array(at))
        located = pa.table([pa.array(positions, pa.int64()), pa.array(is_delete[at]), *located.columns],
                           names=[POS, DELETE, *located.column_names])
        insert_schema = table.file_schema(table_schema)
        threads = _threads_per_file(cores, len(ids)) if len(ids) else 1

        vectors = table.deletion_vectors(base_version) if len(ids) else {}
        root = local_path(table.format_table.location)
        append_to = append_target(index.state.files, paths, ids.tolist(), insert_rows.num_rows, insert_schema)
        write_options = table.parquet_options()

        def rewrite(item: tuple[int, int, int]) -> dict[str, Any]:
            file_id, start, size = item
            vector = vectors.get(paths[file_id])
            append = whole_rows(insert_rows, insert_schema) if file_id == append_to else None
            report = rewrite_changed_file(paths[file_id], located.slice(start, size), update_columns=value_columns,
                                          moved_schema=insert_schema, table_schema=insert_schema,
                                          data_dir=table.data_dir, threads=threads,
                                          file_prefix=prefix, key_columns=keys if indexable else (),
                                          index_dir=scratch if indexable else None,
                                          dropped=deleted_positions(vector, root) if vector is not None else None,
                                          append=append, write_options=write_options)
            appended_index = write_index_rows(insert_rows, keys, scratch) if append is not None and indexable \
                else None
            return {"kind": "rewrite", **report, "appended_index_rows": appended_index}

        def insert(part: pa.Table) -> list[dict[str, Any]]:
            out = []
            for written in write_partition(iter(part.to_batches()), schema=insert_schema, data_dir=table.data_dir,
                                           file_prefix=prefix, write_options=write_options):
                index_rows = write_index_rows(part, keys, scratch) if indexable else None
                out += [{"kind": "insert", **r, "index_rows": index_rows} for r in written.to_pylist()]
            return out

        parts = _insert_files(insert_rows.num_rows, cores) if insert_rows.num_rows and append_to is None else 0
        slices = [insert_rows.slice(insert_rows.num_rows * p // parts,
                                    insert_rows.num_rows * (p + 1) // parts - insert_rows.num_rows * p // parts)
                  for p in range(parts)]
        with clock("rewrite"), _removing_written_on_failure(lease):
            # the most changed files first; each rewrite already uses ``threads`` engine threads
            work = sorted(zip(ids.tolist(), starts.tolist(), sizes.tolist()), key=lambda t: -t[2])
            with ThreadPoolExecutor(max_workers=max(1, min(cores, len(work) + len(slices)))) as pool:
                rewrites = list(pool.map(rewrite, work))
                inserts = [r for rs in pool.map(insert, slices) for r in rs]
        return _commit(table, index, rewrites + inserts, insert_rows.num_rows, conflict_keys, base_version, clock,
                       spec)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _removing_written_on_failure(lease: WriteLease) -> Iterator[None]:
    """A rewrite that fails in one file (task or thread) while the others finish leaves their files: removed here,
    before any commit was attempted. An interrupt keeps them with the lease (the next write's recovery removes what
    no snapshot took)."""
    try:
        yield
    except Exception:
        if not lease.keep_for_recovery:  # after a lost commit its files are among them: recovery sorts them out
            lease.remove_written()
        raise


class _UnknownFilesError(UnusableIndexError):
    """Raised by :func:`_require_known_files` only, before anything is written (an attempt may be repeated)."""


def _require_own_files(spec: ChangeSpec, table: LakehouseTable, file_ids: Iterable[int],
                       paths: Mapping[int, str]) -> None:
    """Refuse to rewrite data files outside the table's folder (a Delta shallow clone's, as ``dbt clone`` makes; an
    Iceberg table given another table's files): a rewrite is written next to the file it replaces, so it would land
    in another table's folder (a Parquet table there would even read it as its own)."""
    outside = [paths[int(i)] for i in file_ids if not _inside(table, paths[int(i)])]
    if outside:
        root = _root(table)
        folders = root if table.data_dir.rstrip("/") == root.rstrip("/") else f"{root} and data folder {table.data_dir}"
        raise UnsupportedTableFeatureError(
            f"model {spec.model}: the batch changes rows of data file(s) outside table {table.name}'s folder "
            f"{folders} (a shallow clone's, or files added from another table), e.g. {outside[0]}; a partial rewrite "
            "is written next to the file it replaces, which is another table's folder. Nothing was written. Rebuild "
            "the table with its own files (`dbt run --full-refresh` of the model)"
        )


def _root(table: LakehouseTable) -> str:
    location = table.format_table.location
    return local_path(location) or location


def _inside(table: LakehouseTable, path: str) -> bool:
    """Whether data file ``path`` lies in the table's folder or in the data folder its properties name (an Iceberg
    table's ``write.data.path``; see :func:`_require_own_files`)."""
    local = local_path(path) or path
    return any(local.startswith(folder.rstrip("/") + "/") for folder in (_root(table), table.data_dir))


def _require_known_files(index: RowIndex, file_ids: Iterable[int], paths: Mapping[int, str]) -> None:
    """Refuse entries of files the index's state does not list: its buckets are not the ones it wrote."""
    unknown = sorted(int(i) for i in file_ids if int(i) not in paths)
    if unknown:
        raise _UnknownFilesError(
            f"the row index of table {index.state.table} holds entries of file id(s) {unknown[:3]} its state does "
            "not list (a bucket file of another generation); `partialcow index rebuild` builds it again",
            key_columns=index.state.key_columns)


def _required_missing(table_schema: StructType, staged_columns: Sequence[str]) -> list[str]:
    return [f.name for f in table_schema.fields if not f.nullable and f.name not in staged_columns]


def _check_required_columns(spec: ChangeSpec, table_schema: StructType, staged_columns: Sequence[str],
                            new_keys: str = "") -> None:
    """New rows get null in columns the batch lacks: refuse if one of those is required (NOT NULL)."""
    required = _required_missing(table_schema, staged_columns)
    if required:
        raise ChangeFeedError(
            f"model {spec.model}: the batch inserts new keys{f' {new_keys}' if new_keys else ''} but lacks required "
            f"(NOT NULL) column(s) {required}; deliver them in the model"
        )


def _check_before_schema_change(table: LakehouseTable, index: RowIndex, staged: DataFrame, spec: ChangeSpec,
                                table_schema: StructType) -> None:
    """The refusals a batch meets once located (:func:`_check_required_columns` for its inserts,
    :func:`_require_own_files` for the files it changes), for a batch about to change the table's schema: its keys are
    found through the index here, since the locate runs after the schema change, which a refusal then would leave
    behind. Columns ``sync_all_columns`` drops are no longer required."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    late = getattr(table.format_table, "late_refusals", None)
    rules = late() if late is not None else []
    if rules:
        raise UnsupportedTableFeatureError(
            f"model {spec.model}: the batch changes the columns of table {table.name} "
            f"(on_schema_change={spec.on_schema_change}), whose {', '.join(rules)} are checked at the commit, after "
            "the schema change, which a refusal would leave behind. Nothing was written. Change the table's "
            "columns yourself (ALTER TABLE), then run the model again, or rebuild it (`dbt run --full-refresh` of "
            "the model)"
        )
    dropped = set(_schema_delta(staged.columns, table_schema.fieldNames(), spec)[1])
    kept = StructType([f for f in table_schema.fields if f.name not in dropped])
    keys = [F.col(quote_identifier(k)) for k in spec.key_columns]
    paths = index.file_paths()
    # delete files on Iceberg (a rewrite would bring their rows back); Delta's deletion vectors are applied
    deleted = {f.file_id for f in index.state.files if f.deletes} if table.table_format == "iceberg" else set()
    if deleted or any(not _inside(table, p) for p in paths.values()):
        found = index.lookup(staged.select(*keys), check_duplicates=False, file_ids=True).found
        changed = [int(r[0]) for r in found.select("file").distinct().collect()]
        _require_own_files(spec, table, changed, paths)
        if deleted & set(changed):
            raise UnsupportedTableFeatureError(
                f"model {spec.model}: the batch changes rows of data file {paths[min(deleted & set(changed))]} of "
                f"table {table.name}, which has delete files attached (another writer's merge-on-read DELETE, "
                "UPDATE or MERGE); a partial rewrite would bring deleted rows back. Nothing was written. Compact the "
                "table first (CALL system.rewrite_data_files) or use copy-on-write deletes"
            )
    if _required_missing(kept, staged.columns):
        upserts = staged.where(~F.coalesce(F.col(DELETE), F.lit(False))).select(*keys)
        new = index.lookup(upserts, check_duplicates=False).missing.limit(SAMPLE).collect()
        if new:
            _check_required_columns(spec, kept, staged.columns, keys_text(new, spec.key_columns))


def _key_frame(spark: SparkSession, batch: pa.Table, spec: ChangeSpec) -> DataFrame:
    """The keys of a driver-side batch as a DataFrame of their own types: a ``timestamp_ntz`` key stays one (through
    pandas, without a schema, it became a zoned timestamp read in the Python process's time zone, and matched no row
    where that is not the session's)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    keys = batch.select(list(spec.key_columns))
    return spark.createDataFrame(keys.to_pylist(), schema=from_arrow_schema(keys.schema, prefer_timestamp_ntz=True))


def _keys_changed_since(spark: SparkSession, table: LakehouseTable, staged: DataFrame, spec: ChangeSpec,
                        base_version: int) -> str:
    """The batch's keys (a sample, as text) whose rows differ between snapshot ``base_version`` and now: what a
    concurrent writer changed that this batch also changes. Empty when it changed none of them (a retry is safe)."""
    keys = [quote_identifier(c) for c in spec.key_columns]
    batch_keys = staged.select(*keys).distinct()
    now = table.read()
    # base -1: the table was empty, so any row of one of our keys is someone else's
    before = now.limit(0) if base_version == -1 else table.read(base_version)
    columns = [c for c in now.columns if c in before.columns]
    now = _comparable(now, columns).join(batch_keys, list(spec.key_columns), "left_semi")
    before = _comparable(before, columns).join(batch_keys, list(spec.key_columns), "left_semi")
    differ = now.exceptAll(before).unionByName(before.exceptAll(now)).select(*keys).limit(SAMPLE).collect()
    return keys_text(differ, spec.key_columns)


def _comparable(frame: DataFrame, columns: Sequence[str]) -> DataFrame:
    """``frame``'s ``columns``, those holding a map as JSON, each map's entries sorted by key: Spark refuses set
    operations on map columns."""
    from pyspark.sql import functions as F

    from partialcow.spark.map_values import comparable_text, holds_map

    types = {f.name: f.dataType for f in frame.schema.fields}
    return frame.select(*[comparable_text(F.col(quote_identifier(c)), types[c]).alias(c) if holds_map(types[c])
                          else F.col(quote_identifier(c)) for c in columns])


@dataclass(frozen=True)
class _Located:
    """Where a batch's changes go, from the locate job: per touched file id its rows and the fragments holding them,
    the inserted rows and their fragments, the commit's conflict filter."""

    file_rows: dict[int, int]
    fragments: dict[int, tuple[str, ...]]
    inserts: int
    insert_fragments: tuple[str, ...]
    conflict_keys: dict[str, list[object]] | None  # None: too many to list (see conflict_keys_of)


def _locate(
    index: RowIndex,
    staged: DataFrame,
    spec: ChangeSpec,
    value_columns: Sequence[str],
    table_columns: Sequence[str],
    scratch: str,
    batch_rows: int,
    cores: int,
    in_place: bool,
) -> _Located:
    """Run the locate job: the batch routed by index bucket (one Spark shuffle), or taken as it is partitioned
    (``in_place``, see :func:`_locates_in_place`), each task joining its keys with its buckets' index files in Arrow
    and leaving its rows in ``scratch`` per touched file (see ``locate_partition``).

    Raises ``ChangeFeedError`` (nothing written to the table) for a key changed more than once in the batch (no
    sequence column, or a tie on the latest sequence value), and for null keys the validation did not see (a query
    that is not deterministic produced them on this second read).
    """
    from pyspark.sql import functions as F

    buckets = index.bucket_paths() if index.state.files else {}
    if buckets and in_place:
        routed = staged.withColumn(BUCKET, index.bucket_column())
    elif buckets:
        # every bucket's rows in one task, as few buckets per task as the batch's size calls for
        tasks = min(index.state.num_buckets, max(cores, math.ceil(batch_rows / _ROWS_PER_LOCATE_TASK)))
        route = F.element_at(F.array(*[F.lit(r) for r in routes(tasks)]), F.pmod(F.col(BUCKET), F.lit(tasks)) + 1)
        routed = staged.withColumn(BUCKET, index.bucket_column()).repartition(tasks, route)
    else:  # no rows in the table yet: every key is new; rows are still routed by key, so a task sees all of a key's
        tasks = max(cores, math.ceil(batch_rows / _ROWS_PER_LOCATE_TASK))
        # the new entries' buckets: an index emptied by deletes keeps its layout, and lookups hash into it
        bucket = index.bucket_column() if index.state.key_types else F.lit(0)
        routed = staged.withColumn(BUCKET, bucket).repartition(
            tasks, *[F.col(quote_identifier(c)) for c in spec.key_columns]
        )
    unscaled = unscaled_decimals(routed.schema) if batch_rows >= _UNSCALED_DECIMALS_MIN_ROWS else {}
    routed = send_unscaled(routed, unscaled)
    job = partial(
        locate_partition,
        key_columns=list(spec.key_columns),
        bucket_paths=buckets,
        carried=[*spec.key_columns, *value_columns],
        insert_columns=list(table_columns),
        scratch=scratch,
        keys_limit=_MAX_CONFLICT_KEYS,
        unscaled_decimals=unscaled,
    )
    results = routed.mapInArrow(job, LOCATE_RESULT_SCHEMA).collect()
    null_keys = sum(r["null_keys"] for r in results)
    if null_keys:
        samples = ", ".join(s for r in results for s in r["samples"])
        raise ChangeFeedError(
            f"model {spec.model}: {null_keys} change(s) with null keys {list(spec.key_columns)} appeared after the "
            f"batch was validated (e.g. {samples}): the model's query is not deterministic; make it deterministic "
            "(or materialise its input first)"
        )
    if any(r["repeated_keys"] for r in results):
        raise repeated_keys_error(spec, ", ".join([s for r in results for s in r["samples"]][:SAMPLE]))
    file_rows: dict[int, int] = {}
    fragments: dict[int, tuple[str, ...]] = {}
    for r in results:
        for file_id, count, fragment in zip(r["file_ids"], r["file_rows"], r["fragments"]):
            file_rows[file_id] = file_rows.get(file_id, 0) + count
            fragments[file_id] = (*fragments.get(file_id, ()), fragment)
    return _Located(
        file_rows=file_rows,
        fragments=fragments,
        inserts=sum(r["inserts"] for r in results),
        insert_fragments=tuple(r["inserts_file"] for r in results if r["inserts_file"]),
        conflict_keys=_conflict_keys([r["keys_file"] for r in results], spec),
    )


def _locates_in_place(staged: DataFrame, index: RowIndex, spec: ChangeSpec, batch_rows: int, cores: int) -> bool:
    """Whether the locate tasks take the batch as it is partitioned instead of routing it by bucket.

    In place, a key's changes may reach several tasks: repeated keys are then checked by the rewrite job, before
    anything is committed. Chosen when the shuffle would cost more than every task reading the index buckets its rows
    hit (``_INDEX_ROWS_PER_SHUFFLED_ROW``), the batch has a partition per core (a routed batch is spread over the
    cores) and the tasks stay small enough to hold their rows and the index in memory. A batch with a sequence
    column is routed: it was shuffled by key to pick each key's latest change, into as many partitions as Spark's
    shuffles make, too many for each to read the index.
    """
    index_rows = sum(f.indexed_rows for f in index.state.files)
    if spec.sequence_column or not 0 < index_rows <= min(
        _IN_PLACE_MAX_INDEX_ROWS, _INDEX_ROWS_PER_SHUFFLED_ROW * batch_rows
    ):
        return False
    tasks = staged.rdd.getNumPartitions()  # plans the batch's query: only asked when in place is likely
    return (tasks >= cores and batch_rows <= tasks * _IN_PLACE_MAX_TASK_ROWS
            and tasks * index_rows <= _INDEX_ROWS_PER_SHUFFLED_ROW * batch_rows)


def _insert_files(rows: int, cores: int) -> int:
    """How many files ``rows`` inserted rows are written to: at most ``_ROWS_PER_INSERT_FILE`` rows each and, once
    every core can have a file of ``_MIN_ROWS_PER_INSERT_FILE`` rows, a multiple of the cores.

    A full scan reads a file this size in one task: 3 files on 2 cores left one core idle for the last third of
    the scan (store_sales SF1: 0.99 s, against 0.93 s with 4 files; Iceberg's MERGE output, 4 files: 0.95 s).

    >>> _insert_files(2_880_404, 2), _insert_files(300_000, 2), _insert_files(10, 8), _insert_files(28_800_000, 8)
    (4, 1, 1, 32)
    """
    files = max(1, math.ceil(rows / _ROWS_PER_INSERT_FILE))
    if rows >= cores * _MIN_ROWS_PER_INSERT_FILE:
        files = math.ceil(files / cores) * cores
    return files


def _threads_per_file(cores: int, files: int) -> int:
    """Engine threads for each file's rewrite task (a file's column chunks are rewritten in parallel).

    Tasks run in waves of ``cores``. Full waves keep every core busy with one thread per task; a partial wave (the
    last ``files % cores`` tasks, or all of them when there are fewer files than cores) would leave cores idle, so
    then every task gets threads enough to fill the cores on its own, and full waves are oversubscribed, which costs
    little (bench/README.md, "Measurements behind code choices").

    >>> _threads_per_file(2, 1), _threads_per_file(2, 3), _threads_per_file(2, 4), _threads_per_file(8, 2)
    (2, 2, 1, 4)
    """
    if files >= cores and files % cores == 0:
        return 1
    return math.ceil(cores / (files % cores))
