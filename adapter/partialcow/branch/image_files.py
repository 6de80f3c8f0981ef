"""Writing the files of a branch image (see :mod:`partialcow.branch.image`) on its staging ref: data files rewritten in
place by the Parquet page engine, and position-delete files, each committed with the image's summary marks."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections import defaultdict
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from partialcow.parquet import remove_sidecar
from partialcow.spark.journal import WriteLease
from partialcow.spark.rewrite_job import FILE, IN_PLACE_RESULT_SCHEMA, rewrite_files_in_place
from partialcow.spark.small_batch import driver_max_rows
from partialcow.table.iceberg import data_folder
from partialcow.table.iceberg_metrics import DataFileBuilder
from partialcow.table.java import jvm as java_gateway
from partialcow.table.paths import local_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["fork_files", "image_lease", "marked", "rewrite_in_place", "write_position_deletes"]

# Iceberg's reserved field ids of a position-delete file's columns (spec: "Position Delete Files").
DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": b"2147483546"}),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"2147483545"}),
    ]
)


def image_lease(spark: SparkSession, table: Any, root: str) -> WriteLease:
    """A write lease on the root table ``root`` (as SQL spells its name; see :mod:`partialcow.spark.journal`) for an
    image's build: the files it writes into the root table's folders are named after it, so a build killed midway
    leaves nothing the next write of the table (a batch on main, another image's build) does not remove, unless a
    snapshot still references it."""
    from partialcow.spark.tables import iceberg_referenced

    location = str(table.location())
    folder = local_path(location) or location
    data = data_folder(location, {str(k): str(v) for k, v in dict(table.properties()).items()})
    return WriteLease(folder, [local_path(data) or data],
                      referenced=lambda: iceberg_referenced(spark, root, quoted=True))


def fork_files(table: Any, fork: int, paths: set[str]) -> dict[str, tuple[Any, bool]]:
    """``path -> (data file, has deletes)`` for ``paths`` in snapshot ``fork``."""
    found: dict[str, tuple[Any, bool]] = {}
    tasks = table.newScan().useSnapshot(fork).planFiles()
    try:
        iterator = tasks.iterator()
        while iterator.hasNext() and len(found) < len(paths):
            task = iterator.next()
            path = str(task.file().location())
            if path in paths:
                found[path] = (task.file(), not task.deletes().isEmpty())
    finally:
        tasks.close()
    return found


def write_position_deletes(spark: SparkSession, table: Any, positions: Sequence[tuple[int, str, int]],
                           fork: int, *, file_prefix: str) -> list[Any]:
    """One position-delete file per data file for ``(spec id, data file, row position)`` rows, named with
    ``file_prefix`` (the build's lease: :func:`image_lease`).

    Each names its data file as ``referenced_data_file``, so a reader loads only the deletes of the file it reads.
    """
    jvm = java_gateway(spark)
    rows_by_file: dict[str, list[int]] = defaultdict(list)
    spec_of: dict[str, int] = {}
    for spec_id, path, pos in positions:
        rows_by_file[path].append(pos)
        spec_of[path] = spec_id
    specs = {spec_id: table.specs().get(spec_id) for spec_id in set(spec_of.values())}
    partitioned = {spec_id for spec_id, spec in specs.items() if not spec.isUnpartitioned()}
    partitions: dict[str, Any] = {}
    if partitioned:
        located = fork_files(table, fork, {p for p, s in spec_of.items() if s in partitioned})
        partitions = {path: data_file.partition() for path, (data_file, _) in located.items()}
    delete_files = []
    for path in sorted(rows_by_file):
        spec, rows = specs[spec_of[path]], sorted(rows_by_file[path])
        partition = partitions.get(path)
        name = f"{file_prefix}{uuid.uuid4().hex}-deletes.parquet"
        location = str(
            table.locationProvider().newDataLocation(name)
            if partition is None
            else table.locationProvider().newDataLocation(spec, partition, name)
        )
        # a local location is a path as it stands (a URI parser refuses its spaces and decodes its "%3A")
        local = local_path(location)
        filesystem, inner = (pafs.LocalFileSystem(), local) if local is not None else pafs.FileSystem.from_uri(location)
        filesystem.create_dir(inner.rsplit("/", 1)[0], recursive=True)
        arrays = [pa.array([path] * len(rows), pa.string()), pa.array(rows, pa.int64())]
        with filesystem.open_output_stream(inner) as sink:
            pq.write_table(pa.Table.from_arrays(arrays, schema=DELETE_SCHEMA), sink)
        builder = (
            jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(spec)
            .ofPositionDeletes()
            .withPath(location)
            .withFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
            .withFileSizeInBytes(filesystem.get_file_info(inner).size)
            .withRecordCount(len(rows))
            .withReferencedDataFile(path)
        )
        if partition is not None:
            builder = builder.withPartition(partition)
        delete_files.append(builder.build())
    return delete_files


def marked(update: Any, marks: dict[str, str]) -> Any:
    """An Iceberg snapshot update with ``marks`` set as summary properties."""
    for key, value in marks.items():
        update = update.set(key, value)
    return update


def rewrite_in_place(spark: SparkSession, table: Any, changed: Any, *, fork: int, stage: str,
                     marks: dict[str, str], update_columns: Sequence[str], table_schema: pa.Schema,
                     file_prefix: str) -> list[Any]:
    """Rewrite the data files ``changed`` touches (those that can be: see ``rewrite_files_in_place``, given
    ``table_schema``, the Arrow schema of the root table's new files) into files named with ``file_prefix`` and
    commit them to ``stage``; one result row per file (``src``, ``dst``, rows and pages counts)."""
    # As for a model's batch (partialcow.spark.small_batch): changed rows that fit the driver are collected as Arrow
    # and the files rewritten here, without a Python worker (a fresh dbt process has none warm) or a second job.
    max_rows = driver_max_rows()
    rows = None
    if max_rows:
        batches = changed.limit(max_rows + 1)._collect_as_arrow()
        if not batches:
            return []  # no row of the fork changes (the overlay only inserts)
        rows = pa.Table.from_batches(batches)
        if rows.num_rows > max_rows:
            rows = None  # too many for the driver: Spark's job
    if rows is not None:
        touched = {str(path) for path in pc.unique(rows[FILE]).to_pylist()}
    else:
        touched = {str(r[0]) for r in changed.select(FILE).distinct().collect()}
    files = {p: f for p, (f, has_deletes) in fork_files(table, fork, touched).items() if not has_deletes}
    if not files:
        return []
    job = partial(rewrite_files_in_place, rewritable=frozenset(files), update_columns=tuple(update_columns),
                  table_schema=table_schema, file_prefix=file_prefix)
    results: list[Any]
    if rows is not None:
        threads = max(1, spark.sparkContext.defaultParallelism)
        results = [row for batch in job(iter(rows.to_batches()), threads=threads) for row in batch.to_pylist()]
    else:
        parts = min(len(files), spark.sparkContext.defaultParallelism * 2)
        results = changed.repartition(parts, FILE).mapInArrow(job, IN_PLACE_RESULT_SCHEMA).collect()
    if not results:
        return []
    jvm = java_gateway(spark)
    try:
        builders: dict[int, DataFileBuilder] = {}
        rewrite = table.newRewrite().toBranch(stage)
        for result in results:
            old = files[result["src"]]
            rewrite = rewrite.deleteFile(old)
            if result["rows_after"]:
                spec_id = int(old.specId())
                if spec_id not in builders:
                    builders[spec_id] = DataFileBuilder(jvm, table, table.specs().get(spec_id))
                rewrite = rewrite.addFile(data_file(builders[spec_id], old, result["dst"]))
        marked(rewrite, marks).commit()
    except BaseException:
        for result in results:  # not referenced by any snapshot
            with contextlib.suppress(FileNotFoundError):
                os.remove(result["dst"])
            remove_sidecar(result["dst"])
        raise
    for result in results:
        if not result["rows_after"]:
            os.remove(result["dst"])
            remove_sidecar(result["dst"])
    return results


def data_file(builder: DataFileBuilder, old: Any, dst: str) -> Any:
    """The Iceberg data file of ``dst``, the rewrite of ``old`` written next to it: same spec and partition."""
    old_location = str(old.location())
    location = old_location[: old_location.rindex("/") + 1] + os.path.basename(dst)  # the table's spelling of paths
    return builder.build(location, partition=None if builder.unpartitioned else old.partition())
