"""First builds and full refreshes: write a whole table and its row index in one pass, and commit atomically.

An incremental batch must find its keys in the table; a first build has nothing to find, so it skips everything
the incremental pipeline does to locate rows (and its shuffle of every row by key). One Spark job writes it:

1. each task validates its rows (null and NaN keys, op codes, sequence ties), writes them with our Parquet layout
   into data files of at most ``ROW_GROUP_ROWS`` rows, named after the task, and writes each row's key, key hash,
   file and position (a few bytes per row) to an entry file of its own in the write's scratch folder;
2. the entries are grouped by index bucket (from the hash Spark computed on the way in) and sorted by key, on the
   driver with pyarrow, or by a Spark job over the entry files when there are very many: a key that appears twice
   is found there (a batch without a sequence column may not repeat a key) and each bucket file is written.

Only then is the table committed with its files. Iceberg: created or replaced in one commit (its create-or-replace
transaction, see ``partialcow.table.iceberg_create``): bad input or a crash leaves no table, or the old table as
it was. Delta: an existing table is replaced by one delta-spark transaction that removes its files and carries the
new schema, properties and files, so readers see the old table until that commit and bad input or a crash leave it
as it was. A new table is created first (an empty version marked ``PENDING_CREATE``; a failed build drops it again)
and the same transaction fills it and removes the mark; a crash before it leaves a marked table, which the next run
builds again (see ``partialcow.spark.create``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from partialcow.exceptions import CommitStateUnknownError, ConfigurationError, DuplicateKeyError, PartialCowError
from partialcow.faults import checkpoint
from partialcow.index.bucket_files import key_hash_expr
from partialcow.index.hashing import SUPPORTED_KEY_TYPES
from partialcow.metrics import PhaseClock, WriteMetrics
from partialcow.parquet.writer import ROW_GROUP_ROWS, conform, open_writer
from partialcow.spark.decimal_transfer import Decimals, restore_decimals, send_unscaled, unscaled_decimals
from partialcow.spark.rewrite_job import DELETE
from partialcow.spark.spec import ChangeSpec
from partialcow.spark.staging import (
    BAD_OP,
    NAN_KEY,
    NULL_KEY,
    NULL_SEQUENCE,
    SAMPLE,
    batch_spelling,
    check_sequence_type,
    keys_text,
    problem_error,
    problem_flags,
    refuse_unlistable_fields,
    refuse_untyped,
    repeated_keys_error,
    require_columns,
    zero_normalized,
)
from partialcow.table.base import FILE_ID, POS, quote_identifier
from partialcow.table.iceberg import parquet_writer_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from partialcow.table.base import CommitResult, TableSource

__all__ = ["bulk_create"]

_FLAGS = ("_pcow_null_key", "_pcow_nan_key", "_pcow_bad_op", "_pcow_null_seq", "_pcow_tie")
# A row's problems and whether it is a delete travel to the writing tasks as the bits of one int column (bit i for
# _FLAGS[i], then the delete): Spark converts every value it hands to Python one by one, so six boolean columns
# cost six times one int column.
_BITS = "_pcow_bits"
_DELETE_BIT = 1 << len(_FLAGS)
# a task's files are numbered task * _FILES_PER_TASK + k: ids stay unique without coordination
_FILES_PER_TASK = 1 << 16
# Each row's index key hash, computed by Spark on the way into the writing tasks: the bucket files are then built
# from the tasks' entry files without the shuffle a Spark job would need to compute it (see _write_index).
_KEY_HASH = "_pcow_key_hash"
# What a writing task reports: one row per data file (its rows), and one naming its entry file (``run``, entries).
_DONE_DDL = "file_id int, rows bigint, run string"
# Up to this many index entries the bucket files are built on the driver from the entry files (about 40 bytes each
# in memory), beyond it by a Spark job over them.
DRIVER_INDEX_ENTRIES = 20_000_000


def driver_index_entries() -> int:
    """The most index entries a first build sorts on the driver: :data:`DRIVER_INDEX_ENTRIES`, or 0 (a Spark job
    always) when ``PARTIALCOW_DRIVER_MAX_ROWS`` is 0, as the test suite sets it to run both paths."""
    from partialcow.spark.small_batch import DRIVER_ROWS_ENV

    return 0 if os.environ.get(DRIVER_ROWS_ENV) == "0" else DRIVER_INDEX_ENTRIES


def bulk_create(spark: SparkSession, name: str, changes: DataFrame, spec: ChangeSpec, *,
                properties: dict[str, str], table_format: str = "iceberg", nullable: bool = False,
                not_null: Sequence[str] = ()) -> WriteMetrics:
    """Create (or replace) table ``name`` from a first batch of changes, with its row index.

    The batch's latest change per key is written (deletes dropped); errors are those of ``apply_changes``.
    """
    from partialcow.index.storage import IndexStore
    from partialcow.spark.journal import WriteLease

    clock = PhaseClock()
    with clock("stage"):
        spec = batch_spelling(changes, spec)
        frame, values = _validated(changes, spec)
        refuse_untyped([f for f in frame.schema.fields if f.name in values], spec)
        if table_format == "iceberg":
            refuse_unlistable_fields([f for f in frame.schema.fields if f.name in values], spec)
        key_types = tuple(dict(frame.dtypes)[c] for c in spec.key_columns)
        unsupported = [f"{c} {t}" for c, t in zip(spec.key_columns, key_types) if t not in SUPPORTED_KEY_TYPES]
        if unsupported:
            raise ConfigurationError(
                f"model {spec.model}: key column(s) {unsupported} have types the row index cannot hash; supported: "
                f"{sorted(SUPPORTED_KEY_TYPES)}"
            )
    with clock("create"):
        schema = frame.select(*map(quote_identifier, values)).schema
        schema = as_nullable(schema) if nullable else schema
        if not_null:
            from pyspark.sql.types import StructField, StructType

            required = {c.lower() for c in not_null}
            schema = StructType([StructField(f.name, f.dataType, f.nullable and f.name.lower() not in required,
                                             f.metadata) for f in schema.fields])
        target: _Target = (_IcebergTarget(spark, name, schema, properties) if table_format == "iceberg"
                           else _DeltaTarget(spark, name, schema, properties, spec))
    os.makedirs(target.data_dir, exist_ok=True)
    try:
        with WriteLease(target.location, [target.data_dir], referenced=target.referenced) as lease:
            checkpoint("leased")
            prefix = f"pcow-{lease.write_id}-"
            scratch = lease.scratch_dir()
            decimals = unscaled_decimals(frame.schema)
            job = partial(_write_partition, key_columns=list(spec.key_columns), values=values,
                          schema=target.file_schema, data_dir=target.data_dir, prefix=prefix, runs_dir=scratch,
                          spec=spec, emit_deletes=spec.sequence_column is None, decimals=decimals,
                          # the codec a model's tblproperties give the table
                          write_options=parquet_writer_options(properties) if table_format == "iceberg" else {})
            written: list[str] = []
            try:
                with clock("write"):
                    hashed = frame.withColumn(_KEY_HASH, key_hash_expr(spec.key_columns))
                    done = send_unscaled(hashed, decimals).mapInArrow(job, _DONE_DDL).collect()
                checkpoint("rewritten")
                with clock("index"):
                    store = IndexStore(target.location)
                    per_file = {int(r["file_id"]): int(r["rows"]) for r in done if r["run"] is None}
                    written = [os.path.join(target.data_dir, _file_name(prefix, i)) for i in sorted(per_file)]
                    rows = sum(per_file.values())
                    runs = sorted(str(r["run"]) for r in done if r["run"] is not None)
                    n, buckets = _write_index(spark, store, spec, name, runs, rows,
                                              entries=sum(int(r["rows"]) for r in done if r["run"] is not None))
                metrics = WriteMetrics(rows_inserted=rows, files_added=len(written))
                with clock("commit"):
                    result = _commit(target, written, metrics, name)
            except CommitStateUnknownError:
                raise  # the commit may have landed with these files: they stay (the lease stays for the next run)
            except Exception:  # not an interrupt, which may come once the commit landed (the lease stays then too)
                for path in written or _own_files(target.data_dir, prefix):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(path)
                raise
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            checkpoint("committed")
            with clock("index"):
                _publish(store, target.source(), name, spec, key_types, n, per_file, written, buckets, result)
            checkpoint("indexed")
    except BaseException:
        target.abandon()
        raise
    with clock("commit"):
        target.finish()
    metrics.phase_ms = clock.ms
    metrics.duration_ms = sum(clock.ms.values())
    return metrics


def _commit(target: _Target, paths: list[str], metrics: WriteMetrics, name: str) -> CommitResult:
    """``target.commit``, where any error that is not one of our refusals (a lost connection to the JVM, a catalog
    failing in a way the format does not name) is an unknown outcome: the catalog may have taken the commit, so the
    files stay for the next run to settle (deleting them broke a table whose commit had landed)."""
    try:
        return target.commit(paths, metrics)
    except PartialCowError:
        raise
    except Exception as exc:
        raise CommitStateUnknownError(
            f"the first commit of table {name} may or may not have landed: {type(exc).__name__}: {exc}; its "
            "files are kept, and the next run settles it") from exc


class _Target(Protocol):
    """The table a first build fills: where its files go, how they are written and committed."""

    location: str  # local path of the table's root
    data_dir: str
    file_schema: pa.Schema

    def referenced(self) -> set[str]: ...
    def commit(self, paths: list[str], metrics: WriteMetrics) -> CommitResult: ...
    def source(self) -> TableSource: ...
    def abandon(self) -> None: ...
    def finish(self) -> None: ...


class _IcebergTarget:
    """A create-or-replace transaction: the table appears (or is replaced) only at :meth:`commit`."""

    def __init__(self, spark: SparkSession, name: str, schema: StructType, properties: dict[str, str]) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        from partialcow.spark.tables import local_path, with_iceberg_field_ids
        from partialcow.table.iceberg import data_folder
        from partialcow.table.iceberg_create import NewIcebergTable

        self._spark, self._name = spark, name
        self._new = NewIcebergTable(spark, name, _java_schema(spark, schema), properties)
        ids = {f["name"]: f for f in self._new.schema_json["fields"]}
        self.file_schema = pa.schema([with_iceberg_field_ids(f, ids[f.name]["id"], ids[f.name]["type"])
                                      for f in to_arrow_schema(schema)])
        self.location = local_path(self._new.location)
        self.data_dir = local_path(data_folder(self._new.location, self._new.properties))

    def referenced(self) -> set[str]:
        from partialcow.spark.tables import iceberg_referenced

        return iceberg_referenced(self._spark, self._name) if self._spark.catalog.tableExists(self._name) else set()

    def commit(self, paths: list[str], metrics: WriteMetrics) -> CommitResult:
        spelled = [f"file:{p}" if self._new.location.startswith("file:") else p for p in paths]
        return self._new.commit(spelled, metrics)

    def source(self) -> TableSource:
        from partialcow.table.iceberg import IcebergTable

        return IcebergTable(self._spark, self._name)

    def abandon(self) -> None:
        pass  # nothing was committed

    def finish(self) -> None:
        pass


class _DeltaTarget:
    """A Delta table filled (and, if it existed, replaced) by one delta-spark transaction that carries the new
    schema, properties and files. A new table is created first, empty and marked ``PENDING_CREATE``; that mark
    leaves with the files."""

    def __init__(self, spark: SparkSession, name: str, schema: StructType, properties: dict[str, str],
                 spec: ChangeSpec) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        from partialcow.exceptions import UnsupportedTableFeatureError
        from partialcow.spark.tables import delta_root
        from partialcow.table.delta.features import ENFORCED_BY_SPARK, DeltaTableInfo, unsupported_features

        self._spark, self._name, self._spec = spark, name, spec
        self._properties = properties
        self._schema = json.loads(schema.json())
        self._ddl = _java_schema(spark, schema).toDDL()
        # refused before anything is written or replaced (the created table is checked again at commit)
        problems = unsupported_features(DeltaTableInfo(1, 2, configuration=properties), removing=False,
                                        enforced=ENFORCED_BY_SPARK)
        if problems:
            raise UnsupportedTableFeatureError(
                f"model {spec.model}: Delta table {name} would use features partial copy-on-write cannot honour: "
                f"{'; '.join(problems)}; remove them from the model's tblproperties")
        self._created = False
        root = None
        if spark.catalog.tableExists(name):
            with contextlib.suppress(ConfigurationError):  # not a Delta table: CREATE OR REPLACE says what it says
                root = delta_root(spark, name)
        if root is None:
            self._create()
            self._created = True
            root = delta_root(spark, name)
        self.location = self.data_dir = root
        self.file_schema = to_arrow_schema(schema)
        self._table: Any = None

    def _create(self) -> None:
        from partialcow.spark.create import PENDING_CREATE, sql_string

        listed = ", ".join(f"{sql_string(k)} = {sql_string(v)}"
                           for k, v in {**self._properties, PENDING_CREATE: "true"}.items())
        self._spark.sql(f"CREATE OR REPLACE TABLE {quote_identifier(self._name)} ({self._ddl}) USING delta "
                        f"TBLPROPERTIES ({listed})")

    def referenced(self) -> set[str]:
        from partialcow.spark.tables import delta_referenced

        return delta_referenced(self.location)

    def commit(self, paths: list[str], metrics: WriteMetrics) -> CommitResult:
        from partialcow.spark.delta_checks import check_new_files
        from partialcow.spark.tables import open_table
        from partialcow.table.delta.features import DeltaTableInfo
        from partialcow.table.delta.spark_table import DeltaSparkTable

        table = self._table = open_table(self._spark, self._name, table_format="delta")
        # the rules of the table as committed (the replaced table's constraints go with it)
        check_new_files(table, paths, self._spec, info=DeltaTableInfo(
            3, 7, configuration=self._properties, schema=self._schema))
        delta = table.format_table
        assert isinstance(delta, DeltaSparkTable)  # a session with Delta: open_table's commit path
        return delta.replace_table(
            paths, schema=self._schema, configuration=self._properties, metrics=metrics,
            operation="partial_cow_create")

    def source(self) -> TableSource:
        return self._table.format_table  # type: ignore[no-any-return]

    def abandon(self) -> None:
        if self._created and self._table is None:
            # a new table that never got its rows: gone again, as after a failed Iceberg build
            with contextlib.suppress(Exception):
                self._spark.sql(f"DROP TABLE IF EXISTS {quote_identifier(self._name)}")

    def finish(self) -> None:
        pass  # the commit removed the pending mark


def as_nullable(data_type: Any) -> Any:
    """``data_type`` with every field, element and map value nullable, at any depth: the schema Spark's CREATE TABLE
    AS SELECT gives a table (whatever its query can or cannot yield).

    >>> from pyspark.sql.types import ArrayType, LongType, StructField, StructType
    >>> as_nullable(StructType([StructField("a", ArrayType(LongType(), False), False)])).simpleString()
    'struct<a:array<bigint>>'
    >>> as_nullable(StructType([StructField("a", ArrayType(LongType(), False), False)]))[0].nullable
    True
    """
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, as_nullable(f.dataType), True, f.metadata) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(as_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(as_nullable(data_type.keyType), as_nullable(data_type.valueType), True)
    return data_type


def _java_schema(spark: SparkSession, schema: StructType) -> Any:
    from partialcow.table.java import jvm

    return jvm(spark).org.apache.spark.sql.types.DataType.fromJson(schema.json())


def _validated(changes: DataFrame, spec: ChangeSpec) -> tuple[DataFrame, list[str]]:
    """The batch with its problem flags as columns, the latest change per key (with a sequence column), and the
    names of the columns the table stores."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = require_columns(changes.columns, spec)
    if spec.sequence_column:
        check_sequence_type(spec, changes.schema[spec.sequence_column].dataType, "the model delivers")
    # keys as every write stores them (-0.0 as 0.0), as an incremental batch's are
    changes = changes.select(*[zero_normalized(F.col(quote_identifier(c)), f.dataType).alias(c)
                               if c in spec.key_columns else F.col(quote_identifier(c)) for c, f in
                               zip(changes.columns, changes.schema.fields)])
    flags = problem_flags(changes, spec)
    frame = changes.select("*", *[flag.cast("boolean").alias(n) for n, flag in zip(_FLAGS[:4], flags[:4])],
                           flags[4].cast("boolean").alias(DELETE))
    if spec.sequence_column:
        seq = F.col(quote_identifier(spec.sequence_column))
        by_key = Window.partitionBy(*[F.col(quote_identifier(c)) for c in spec.key_columns])
        if spec.op_column:
            # an op code outside the configured ones anywhere in a key's changes is the batch's error, as in
            # apply_changes, though only the latest change is kept: the kept row carries it (and one of the codes)
            op = F.col(quote_identifier(spec.op_column))
            bad_in_key = F.max(F.col(_FLAGS[2]).cast("int")).over(by_key) > 0
            frame = (frame.withColumn(spec.op_column, F.when(bad_in_key & ~F.col(_FLAGS[2]),
                                                             F.max(F.when(F.col(_FLAGS[2]), op)).over(by_key))
                                      .otherwise(op))
                     .withColumn(_FLAGS[2], bad_in_key))
        # rows with a null sequence stay: their task reports them (see _check)
        frame = (frame.withColumn("_pcow_latest", F.max(seq).over(by_key))
                 .where((seq == F.col("_pcow_latest")) | seq.isNull())
                 .withColumn(_FLAGS[4], F.count(F.lit(1)).over(by_key) > 1).drop("_pcow_latest"))
    else:
        frame = frame.withColumn(_FLAGS[4], F.lit(False))
    bits = F.lit(0)
    for i, name in enumerate((*_FLAGS, DELETE)):
        bits = bits.bitwiseOR(F.when(F.coalesce(F.col(name), F.lit(False)), F.lit(1 << i)).otherwise(F.lit(0)))
    frame = frame.withColumn(_BITS, bits).drop(*_FLAGS, DELETE)
    values = [c for c in columns if c != spec.op_column]
    return frame, values


def _bit(batch: pa.RecordBatch, bit: int) -> pa.Array:
    """Whether each row of ``batch`` has ``bit`` set in its :data:`_BITS`.

    >>> _bit(pa.RecordBatch.from_pydict({_BITS: [0, 1, 3, 32]}), 2).to_pylist()
    [False, False, True, False]
    """
    import pyarrow.compute as pc

    return pc.not_equal(pc.bit_wise_and(batch.column(_BITS), pa.scalar(bit, pa.int32())), pa.scalar(0, pa.int32()))


def _file_name(prefix: str, file_id: int) -> str:
    return f"{prefix}{file_id:010d}.parquet"


def _own_files(data_dir: str, prefix: str) -> list[str]:
    return [os.path.join(data_dir, f) for f in os.listdir(data_dir) if f.startswith(prefix)]


def _write_partition(batches: Iterator[pa.RecordBatch], *, key_columns: list[str], values: list[str],
                     schema: pa.Schema, data_dir: str, prefix: str, runs_dir: str, spec: ChangeSpec,
                     emit_deletes: bool, decimals: Decimals, write_options: Mapping[str, Any] | None = None,
                     ) -> Iterator[pa.RecordBatch]:
    """Executor side: validate this task's rows and write the kept ones; each row's key, key hash, file id and
    position go to this task's entry file in ``runs_dir``. Yields one row per data file and one naming the entry
    file (see ``_DONE_DDL``). A task run again writes the same files under the same names. The columns of
    ``decimals`` arrive as unscaled integers (see ``partialcow.spark.decimal_transfer``)."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    attempt = context.attemptNumber() if context is not None else 0
    next_file = task * _FILES_PER_TASK
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    done: list[dict[str, object]] = []
    run = os.path.join(runs_dir, f"entries-{task:05d}.parquet")
    tmp = f"{run}.{attempt}.tmp"  # an attempt's file appears whole or not at all
    entries: Any = None  # the entry file's writer, opened with the first entries
    entry_count = 0

    def add_entries(rows: pa.Table | pa.RecordBatch, file_ids: np.ndarray, positions: np.ndarray) -> None:
        nonlocal entries, entry_count
        batch = pa.RecordBatch.from_arrays(
            [*(_array(rows.column(c)) for c in (*key_columns, _KEY_HASH)), pa.array(file_ids), pa.array(positions)],
            names=[*key_columns, _KEY_HASH, FILE_ID, POS])
        if entries is None:
            entries = pq.ParquetWriter(tmp, batch.schema, compression="lz4")
        entries.write_batch(batch)
        entry_count += batch.num_rows

    def flush() -> None:
        nonlocal next_file, pending, pending_rows
        if not pending_rows:
            return
        rows = pa.Table.from_batches(pending)
        table = conform(rows.select(values).rename_columns(schema.names), schema)
        file_id = next_file
        next_file += 1
        path = os.path.join(data_dir, _file_name(prefix, file_id))
        with open_writer(path, schema, **(write_options or {})) as writer:
            writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        done.append({"file_id": file_id, "rows": table.num_rows, "run": None})
        add_entries(rows, np.full(table.num_rows, file_id, np.int32), np.arange(table.num_rows, dtype=np.int64))
        pending, pending_rows = [], 0

    for batch in batches:
        if not batch.num_rows:
            continue
        batch = restore_decimals(batch, decimals)
        _check(batch, key_columns, spec)
        deletes = _bit(batch, _DELETE_BIT)
        has_deletes = pc.any(deletes).as_py()
        if emit_deletes and has_deletes:
            gone = batch.filter(deletes)  # in the index's duplicate check only (file id -1)
            add_entries(gone, np.full(gone.num_rows, -1, np.int32), np.zeros(gone.num_rows, np.int64))
        kept = batch.filter(pc.invert(deletes)) if has_deletes else batch  # a filter copies every column
        if not kept.num_rows:
            continue
        pending.append(kept)
        pending_rows += kept.num_rows
        if pending_rows >= ROW_GROUP_ROWS:
            flush()
    flush()
    if entries is not None:
        entries.close()
        os.replace(tmp, run)
        done.append({"file_id": -1, "rows": entry_count, "run": run})
    if done:
        yield pa.RecordBatch.from_pylist(
            done, schema=pa.schema([("file_id", pa.int32()), ("rows", pa.int64()), ("run", pa.string())]))


def _array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _check(batch: pa.RecordBatch, key_columns: list[str], spec: ChangeSpec) -> None:
    """Raise the error ``apply_changes`` would raise for the first problem this batch of rows has."""
    import pyarrow.compute as pc

    if not pc.any(_bit(batch, _DELETE_BIT - 1)).as_py():  # no problem bit set: the usual case, one pass
        return
    problems = dict(zip(_FLAGS, (NULL_KEY, NAN_KEY, BAD_OP, NULL_SEQUENCE)))
    for i, flag in enumerate(_FLAGS):
        hit = _bit(batch, 1 << i)
        count = pc.sum(hit.cast(pa.int64())).as_py() or 0
        if not count:
            continue
        bad = batch.filter(hit).slice(0, SAMPLE * 4).to_pylist()
        unique = list({tuple(r[c] for c in key_columns): r for r in bad}.values())[:SAMPLE]
        if flag in problems:  # this task's rows: the batch may hold more
            raise problem_error(problems[flag], spec, f"at least {count}", unique)
        raise repeated_keys_error(spec, keys_text(unique, key_columns))


def _write_index(spark: SparkSession, store: Any, spec: ChangeSpec, name: str, runs: Sequence[str], rows: int,
                 *, entries: int) -> tuple[int, dict[int, str]]:
    """Write the bucket files of the new index (not yet published) from the writing tasks' entry files ``runs``;
    a repeated key is the batch's error."""
    import pyarrow.parquet as pq

    from partialcow.index.bucket_files import (
        _ROWS_PER_BUCKET,
        BUCKET,
        _choose_buckets,
        write_bucket_files,
        write_bucket_files_local,
    )

    n = _choose_buckets(rows, _ROWS_PER_BUCKET)
    if not runs:
        return n, {}
    try:
        if entries <= driver_index_entries():
            # no Spark job: a shuffle of the entries costs more than sorting them here (bench/README.md)
            table = pq.read_table(list(runs))
            hashes = table.column(_KEY_HASH).to_numpy()
            buckets = write_bucket_files_local(
                store, spec.key_columns, name, table.drop_columns([_KEY_HASH]), n, hashes, keep_negative_ids=False,
                threads=max(1, spark.sparkContext.defaultParallelism))
        else:
            from pyspark.sql import functions as F

            frame = spark.read.parquet(*runs)
            frame = frame.withColumn(BUCKET, F.pmod(F.col(_KEY_HASH), F.lit(n)).cast("int")).drop(_KEY_HASH)
            buckets = write_bucket_files(spark, store, spec.key_columns, name, frame, list(range(n)),
                                         keep_negative_ids=False)
    except DuplicateKeyError as exc:
        sample = [dict(zip(spec.key_columns, s)) for s in getattr(exc, "samples", [])]
        raise repeated_keys_error(spec, keys_text(sample, spec.key_columns)) from None
    return n, buckets


def _publish(store: Any, source: TableSource, name: str, spec: ChangeSpec, key_types: Sequence[str], n: int,
             per_file: dict[int, int], written: list[str], buckets: dict[int, str], result: CommitResult) -> None:
    """Publish the new index state for the table version ``result`` committed. The files are the commit's own (its
    only ones): listing the new version would cost a Spark job on Delta."""
    from partialcow.index.row_index import key_identity
    from partialcow.index.storage import IndexedFile, IndexState

    version = result.version
    spelled = {os.path.basename(source.normalize_path(p)): source.normalize_path(p) for p in result.added}
    files = tuple(IndexedFile(file_id, spelled[os.path.basename(path)], per_file[file_id], per_file[file_id])
                  for file_id, path in zip(sorted(per_file), written))
    store.write_state(IndexState(
        table=name, table_format=source.table_format, location=source.location,
        key_columns=tuple(spec.key_columns), key_types=tuple(key_types), num_buckets=n, table_version=version,
        files=files, buckets=tuple(buckets.get(b) for b in range(n)), next_file_id=max(per_file, default=-1) + 1,
        state_version=(store.latest_state_version() or 0) + 1, extra=key_identity(source, spec.key_columns)))
    # the replaced index's files go in the lease's clean-up, which first makes sure no other write is running
