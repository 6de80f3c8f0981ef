"""Upsert benchmark (issue 5): ``apply_changes`` (partial copy-on-write) vs Iceberg's and Delta's MERGE.

Data: TPC-DS ``store_sales`` (key ``ss_item_sk, ss_ticket_number``) from ``bench/data/sf<scale>/store_sales.parquet``,
generated on first use with ``tpcgen-cli tpcds parquet -s <scale> --tables=store_sales``.

Change batches (fractions of the table's rows, keys drawn without replacement, every changed value really changes;
one Parquet file each, decimals stored as integers and row groups of 256Ki rows, as a Spark-written source would be):

- ``a_uniform_all``: uniform random keys, every non-key column changed;
- ``b_uniform_two``: uniform random keys, two columns changed (``ss_quantity``, ``ss_net_profit``: a typical CDC update);
- ``c_recent_two``: the same two columns, 90% of the keys among the newest 10% of keys by ``ss_sold_date_sk`` (when a
  batch is larger than that pool, the whole pool plus uniform keys from the rest);
- ``d_deletes``: uniform random keys deleted.

Contenders, all in one SparkSession (local[2], the product's embedded Iceberg session), each on its own copy of the
table, loaded once per contender and reset to that base state before every batch (batches run one after the other,
every contender per batch, 1% batches first, so a run stopped early still compares every contender) (Iceberg: ``rollback_to_snapshot``
plus removal of the files the rolled-back write left; Delta: the table folder restored from a pristine copy):

- ``iceberg_cow`` / ``iceberg_mor``: Spark SQL ``MERGE INTO`` on an Iceberg table written by Spark with Iceberg's
  defaults and ``write.{merge,update,delete}.mode`` = copy-on-write / merge-on-read; the update sets the changed columns;
- ``dbt_spark_merge``: the statement dbt-spark's ``incremental`` materialization (``incremental_strategy='merge'``,
  ``unique_key``) runs on Iceberg, ``MERGE ... WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *``, issued
  through Spark directly (not through dbt); dbt-spark's merge cannot delete, so it has no ``d_deletes`` row;
- ``delta_rs``: ``deltalake.DeltaTable.merge(...).execute()`` on a Delta table written by ``write_deltalake``;
- with ``--format delta`` (a session with delta-spark in its catalog, jars from ``../shared/jars``), instead:
  ``delta_spark_cow`` / ``delta_spark_dv``: delta-spark's ``MERGE INTO`` on a table it wrote (CTAS) with deletion
  vectors off / on; ``delta_rs``; ``partialcow_delta`` on a table ``create_table`` wrote, committed through
  delta-spark; every Delta table scanned by delta-spark (deletion vectors applied);
- ``partialcow_iceberg``: ``apply_changes`` on an Iceberg table created by ``create_table`` (the product's layout);
- ``partialcow_delta``: ``apply_changes`` on the same Delta table the ``delta_rs`` contender starts from.

Timed: only the upsert (reading the change batch included, for every contender). After it: a full scan
(``count(*), sum(hash(*))`` over all columns) and a selective scan (an ``ss_item_sk`` range), both through Spark,
once every contender has written the batch: the median of ``--scan-rounds`` (3) rounds, each round scanning every
contender's table once; both results are checked against an oracle computed by Spark over plain Parquet (base
anti-join changed keys, union the changed rows), so a contender that writes wrong rows is flagged in the ``check``
column.

    PYTHONPATH=adapter python bench/upsert_bench.py                 # SF1, everything (tens of minutes)
    PYTHONPATH=adapter python bench/upsert_bench.py --quick         # 1% and 10%, patterns a, b, d
    PYTHONPATH=adapter python bench/upsert_bench.py --quick --rows 200000   # smoke run on a prefix of the table

Writes ``bench/results/upsert_sf<scale>[_quick|_r<rows>].{md,json,png}`` and prints the markdown table.
"""

from __future__ import annotations

import argparse
import cProfile
import decimal
import io
import json
import os
import platform
import pstats
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
KEYS = ("ss_item_sk", "ss_ticket_number")
CDC_COLUMNS = ("ss_quantity", "ss_net_profit")
DATE_COLUMN = "ss_sold_date_sk"
SELECTIVE_ITEMS = (5000, 5099)  # 100 of SF1's 18,000 items: ~0.6% of the rows
PATTERNS = ("a_uniform_all", "b_uniform_two", "c_recent_two", "d_deletes")
QUICK_PATTERNS = ("a_uniform_all", "b_uniform_two", "d_deletes")
SIZES = (0.01, 0.05, 0.1, 0.3, 0.5)
QUICK_SIZES = (0.01, 0.1)
DELETE_SIZES = (0.001, 0.01)
QUICK_DELETE_SIZES = (0.01,)
CONTENDERS = (
    "iceberg_cow", "iceberg_mor", "dbt_spark_merge", "delta_rs", "partialcow_iceberg", "partialcow_delta",
)
DELTA_CONTENDERS = ("delta_spark_cow", "delta_spark_dv", "delta_rs", "partialcow_delta")
ORDER = tuple(dict.fromkeys(CONTENDERS + DELTA_CONTENDERS))  # one colour and row order per contender
# `×CoW`: each session format's copy-on-write MERGE
BASELINES = {"iceberg": "iceberg_cow", "delta": "delta_spark_cow"}
SIZE_PRIORITY = {0.01: 0, 0.001: 0, 0.1: 1, 0.05: 2, 0.3: 3, 0.5: 4}
NAMESPACE = "upsert_bench"
BATCH_ROW_GROUP_ROWS = 256 * 1024


# ---------------------------------------------------------------------------------------------------------------
# data and change batches


def ensure_data(scale: int) -> Path:
    folder = REPO / "bench" / "data" / f"sf{scale}"
    path = folder / "store_sales.parquet"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["tpcgen-cli", "tpcds", "parquet", "-s", str(scale), "--tables=store_sales", f"--output-dir={folder}"],
            check=True,
        )
    if not path.exists():
        sys.exit(f"tpcgen-cli did not write {path}")
    return path


def load_base(source: Path, rows: int | None, work: Path) -> tuple[Path, pa.Table]:
    """The base table as Arrow (field ids dropped: each writer assigns its own) and a Parquet file of it."""
    table = pq.read_table(source)
    if rows is not None:
        table = table.slice(0, rows)
    table = table.replace_schema_metadata(None).cast(pa.schema([f.remove_metadata() for f in table.schema]))
    if rows is None:
        return source, table
    path = work / "base.parquet"
    pq.write_table(table, path)
    return path, table


def changed(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A different value for every row: integers +1, decimals moved 0.01 towards zero (stays in precision)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = arr.type
    if pa.types.is_integer(t):
        out = pc.add(arr, pa.scalar(1, t))
        return pc.fill_null(out, pa.scalar(1, t))
    if pa.types.is_decimal(t):
        cent = pa.scalar(decimal.Decimal(1).scaleb(-t.scale), pa.decimal128(t.precision, t.scale))
        out = pc.if_else(pc.greater_equal(arr, pa.scalar(0, t)), pc.subtract(arr, cent), pc.add(arr, cent)).cast(t)
        return pc.fill_null(out, cent.cast(t))
    raise TypeError(f"store_sales column of unexpected type {t}")


def pick_positions(base: pa.Table, pattern: str, size: float, rng: np.random.Generator) -> np.ndarray:
    n = base.num_rows
    k = max(1, int(round(n * size)))
    if pattern != "c_recent_two":
        return rng.choice(n, size=k, replace=False)
    dates = base.column(DATE_COLUMN).to_numpy(zero_copy_only=False)
    dates = np.where(np.isnan(dates), -1, dates) if dates.dtype.kind == "f" else dates
    order = np.argsort(dates, kind="stable")
    pool, rest = order[n - n // 10 :], order[: n - n // 10]
    recent = min(len(pool), int(round(k * 0.9)))
    return np.concatenate([rng.choice(pool, size=recent, replace=False), rng.choice(rest, size=k - recent, replace=False)])


@dataclass
class Case:
    pattern: str
    size: float
    rows: int
    path: Path
    columns: tuple[str, ...]  # changed columns (empty for deletes)

    @property
    def is_delete(self) -> bool:
        return self.pattern == "d_deletes"

    @property
    def label(self) -> str:
        return f"{self.pattern} {self.size:.1%}"


def write_batch(rows: pa.Table, path: Path) -> None:
    """Write a change batch as Spark's and Iceberg's writers store Parquet: decimals as integers, row groups that
    Spark's read tasks can share evenly.

    pyarrow's defaults (FIXED_LEN_BYTE_ARRAY decimals, 1Mi-row groups) made Spark's read of the 1.44M-row batch
    (pattern a, 50%) take 2.2-2.5 s instead of 0.8 s, 73% of it in one of the two read tasks: a cost of the input
    file, paid by every contender, that no Spark-written source has.
    """
    pq.write_table(rows, path, store_decimal_as_integer=True, row_group_size=BATCH_ROW_GROUP_ROWS)


def make_case(base: pa.Table, pattern: str, size: float, rng: np.random.Generator, folder: Path) -> Case:
    pos = pa.array(pick_positions(base, pattern, size, rng))
    path = folder / f"{pattern}_{size:g}.parquet"
    if pattern == "d_deletes":
        # Full row images (a CDC delete's before-image): apply_changes wants every table column in the batch.
        write_batch(base.take(pos), path)
        return Case(pattern, size, len(pos), path, ())
    columns = [c for c in base.column_names if c not in KEYS] if pattern == "a_uniform_all" else list(CDC_COLUMNS)
    rows = base.take(pos)
    for name in columns:
        rows = rows.set_column(rows.schema.get_field_index(name), name, changed(rows.column(name)))
    write_batch(rows, path)  # full row images, as a CDC feed or a dbt model delivers them
    return Case(pattern, size, len(pos), path, tuple(columns))


# ---------------------------------------------------------------------------------------------------------------
# measurements


@dataclass
class Result:
    contender: str
    pattern: str
    size: float
    changed_rows: int
    write_s: float | None = None
    bytes_written: int | None = None
    files_rewritten: int | None = None
    files_added: int | None = None
    spark_jobs: int | None = None
    full_scan_s: float | None = None
    selective_scan_s: float | None = None
    check: str = ""
    pages_rewritten: int | None = None
    pages_copied: int | None = None
    bytes_reencoded: int | None = None
    bytes_copied: int | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def full_scan_sql(relation: str) -> str:
    return f"SELECT count(*) AS n, sum(cast(hash(*) AS bigint)) AS h FROM {relation}"


def selective_scan_sql(relation: str) -> str:
    lo, hi = SELECTIVE_ITEMS
    return f"SELECT count(*) AS n, sum(ss_net_profit) AS s FROM {relation} WHERE ss_item_sk BETWEEN {lo} AND {hi}"


def oracle(spark, base_path: Path, case: Case) -> tuple[tuple, tuple]:  # type: ignore[no-untyped-def]
    """Expected scan results, from plain Parquet: base rows whose key is not in the batch, plus the batch's rows."""
    base = spark.read.parquet(str(base_path))
    batch = spark.read.parquet(str(case.path))
    expected = base.join(batch.select(*KEYS), list(KEYS), "left_anti")  # the keys of deletes and updates
    if not case.is_delete:
        expected = expected.unionByName(batch.select(*base.columns))
    expected.select(*base.columns).createOrReplaceTempView("upsert_bench_expected")
    full = tuple(spark.sql(full_scan_sql("upsert_bench_expected")).first())
    selective = tuple(spark.sql(selective_scan_sql("upsert_bench_expected")).first())
    return full, selective


class JobCounter:
    """Spark jobs started inside a ``with`` block (a job group per block; the status tracker works without the UI)."""

    def __init__(self, spark) -> None:  # type: ignore[no-untyped-def]
        self.sc = spark.sparkContext
        self.serial = 0

    def __enter__(self) -> JobCounter:
        self.serial += 1
        self.group = f"upsert-bench-{self.serial}"
        self.sc.setJobGroup(self.group, self.group)
        return self

    def __exit__(self, *exc: object) -> None:
        self.count = len(self.sc.statusTracker().getJobIdsForGroup(self.group))
        self.sc.setLocalProperty("spark.jobGroup.id", None)  # clearJobGroup is missing before pyspark 4


# ---------------------------------------------------------------------------------------------------------------
# contenders


class Contender:
    name = ""
    relation = ""

    def __init__(self, spark, work: Path, base_path: Path) -> None:  # type: ignore[no-untyped-def]
        self.spark, self.work, self.base_path = spark, work, base_path

    def supports(self, case: Case) -> str | None:
        """None, or why this contender has no result for ``case``."""
        return None

    def load(self) -> None: ...
    def reset(self) -> None: ...
    def upsert(self, case: Case, result: Result) -> None: ...
    def scan_relation(self) -> str:
        return self.relation


class IcebergContender(Contender):
    """A Spark-written Iceberg table; reset by rollback to the loaded snapshot."""

    properties: dict[str, str] = {}

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.relation = f"{NAMESPACE}.{self.name}"

    def _java_table(self):  # type: ignore[no-untyped-def]
        jvm = self.spark.sparkContext._jvm  # noqa: SLF001
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(self.spark._jsparkSession, self.relation)  # noqa: SLF001

    def _snapshot(self) -> int:
        return int(self._java_table().currentSnapshot().snapshotId())

    def _data_files_on_disk(self) -> set[str]:
        return {str(p) for p in self.data_dir.rglob("*") if p.is_file()}

    def load(self) -> None:
        props = ", ".join(f"'{k}' = '{v}'" for k, v in {"format-version": "2", **self.properties}.items())
        self.spark.sql(f"DROP TABLE IF EXISTS {self.relation}")
        self.spark.sql(
            f"CREATE TABLE {self.relation} USING iceberg TBLPROPERTIES ({props}) "
            f"AS SELECT * FROM parquet.`{self.base_path}`"
        )
        self._after_load()

    def _after_load(self) -> None:
        from partialcow.spark.tables import local_path

        self.location = Path(local_path(str(self._java_table().location())))
        self.data_dir = self.location / "data"
        self.base_snapshot = self._snapshot()
        self.base_files = self._data_files_on_disk()
        self.base_file_count = int(self.spark.sql(f"SELECT count(*) FROM {self.relation}.files").first()[0])

    def reset(self) -> None:
        if self._snapshot() != self.base_snapshot:
            self.spark.sql(f"CALL spark_catalog.system.rollback_to_snapshot('{self.relation}', {self.base_snapshot})")
        for path in self._data_files_on_disk() - self.base_files:
            os.remove(path)

    def _summary(self, result: Result) -> None:
        snapshot = self._java_table().currentSnapshot()
        if int(snapshot.snapshotId()) == self.base_snapshot:
            result.bytes_written, result.files_rewritten, result.files_added = 0, 0, 0
            return
        summary = dict(snapshot.summary())
        get = lambda key: int(summary.get(key, 0))  # noqa: E731
        result.bytes_written = get("added-files-size")
        result.files_rewritten = get("deleted-data-files")
        result.files_added = get("added-data-files") + get("added-delete-files")
        result.extra["delete_files_added"] = get("added-delete-files")

    def merge_sql(self, case: Case) -> str:
        on = " AND ".join(f"t.{k} = s.{k}" for k in KEYS)
        source = f"parquet.`{case.path}`"
        if case.is_delete:
            return f"MERGE INTO {self.relation} t USING {source} s ON {on} WHEN MATCHED THEN DELETE"
        sets = ", ".join(f"t.{c} = s.{c}" for c in case.columns)
        return (
            f"MERGE INTO {self.relation} t USING {source} s ON {on} WHEN MATCHED THEN UPDATE SET {sets} "
            "WHEN NOT MATCHED THEN INSERT *"
        )

    def upsert(self, case: Case, result: Result) -> None:
        self.spark.sql(self.merge_sql(case))

    def after(self, case: Case, result: Result) -> None:
        self._summary(result)


class IcebergCow(IcebergContender):
    name = "iceberg_cow"
    properties = {f"write.{op}.mode": "copy-on-write" for op in ("merge", "update", "delete")}


class IcebergMor(IcebergContender):
    name = "iceberg_mor"
    properties = {f"write.{op}.mode": "merge-on-read" for op in ("merge", "update", "delete")}


class DbtSparkMerge(IcebergContender):
    """dbt-spark's incremental merge: the table as its ``create table ... using iceberg as`` leaves it (defaults)."""

    name = "dbt_spark_merge"

    def supports(self, case: Case) -> str | None:
        return "n/a: dbt-spark's merge strategy has no delete clause" if case.is_delete else None

    def merge_sql(self, case: Case) -> str:
        on = " AND ".join(f"DBT_INTERNAL_DEST.{k} = DBT_INTERNAL_SOURCE.{k}" for k in KEYS)
        return (
            f"MERGE INTO {self.relation} AS DBT_INTERNAL_DEST USING parquet.`{case.path}` AS DBT_INTERNAL_SOURCE "
            f"ON {on} WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )


class PartialCowIceberg(IcebergContender):
    name = "partialcow_iceberg"

    def load(self) -> None:
        from partialcow.spark.changes import ChangeSpec, create_table

        self.spark.sql(f"DROP TABLE IF EXISTS {self.relation}")
        metrics = create_table(self.spark, self.relation, self.spark.read.parquet(str(self.base_path)), ChangeSpec(key_columns=KEYS))
        self.load_metrics = metrics
        self._after_load()
        self.index_dir = self.location / "_partialcow_index"
        self.index_backup = self.work / f"{self.name}_index_backup"
        shutil.rmtree(self.index_backup, ignore_errors=True)
        shutil.copytree(self.index_dir, self.index_backup)

    def reset(self) -> None:
        super().reset()
        shutil.rmtree(self.index_dir)
        shutil.copytree(self.index_backup, self.index_dir)

    def upsert(self, case: Case, result: Result) -> None:
        from partialcow.spark.tables import open_table

        metrics = apply_ours(self.spark, open_table(self.spark, self.relation, table_format="iceberg"), case)
        record_ours(result, metrics)


def ours_spec(case: Case):  # type: ignore[no-untyped-def]
    from partialcow.spark.changes import ChangeSpec

    columns = None if case.pattern == "a_uniform_all" or case.is_delete else case.columns
    return ChangeSpec(key_columns=KEYS, op_column="_op", update_columns=columns, model=f"upsert_bench {case.label}")


def apply_ours(spark, table, case: Case):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    from partialcow.spark.changes import apply_changes

    changes = spark.read.parquet(str(case.path)).withColumn("_op", F.lit("D" if case.is_delete else "U"))
    return apply_changes(spark, table, changes, ours_spec(case))


def record_ours(result: Result, metrics) -> None:  # type: ignore[no-untyped-def]
    result.pages_rewritten = metrics.pages_rewritten
    result.pages_copied = metrics.pages_copied
    result.bytes_reencoded = metrics.bytes_reencoded
    result.bytes_copied = metrics.bytes_copied
    result.extra["metrics"] = metrics.as_dict()


class DeltaContender(Contender):
    """A Delta table written once by ``write_deltalake``; reset by restoring the folder from a pristine copy."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.path = self.work / self.name
        self.pristine = self.work / f"{self.name}_pristine"
        self.relation = f"{self.name}_scan"

    def load(self) -> None:
        from deltalake import write_deltalake

        for folder in (self.path, self.pristine):
            shutil.rmtree(folder, ignore_errors=True)
        write_deltalake(str(self.path), pq.read_table(self.base_path))
        self._prepare()
        shutil.copytree(self.path, self.pristine)

    def _prepare(self) -> None: ...

    def reset(self) -> None:
        shutil.rmtree(self.path)
        shutil.copytree(self.pristine, self.path)

    def _files(self) -> set[str]:
        from deltalake import DeltaTable

        from partialcow.spark.tables import local_path

        return {local_path(u) for u in DeltaTable(str(self.path)).file_uris()}

    def before(self) -> None:
        self.files_before = self._files()

    def after(self, case: Case, result: Result) -> None:
        files = self._files()
        added = files - self.files_before
        result.bytes_written = sum(os.path.getsize(p) for p in added)
        result.files_rewritten = len(self.files_before - files)
        result.files_added = len(added)

    def scan_relation(self) -> str:
        # No Delta reader in this Spark: its live files (delta-rs writes no deletion vectors) read as Parquet.
        self.spark.read.parquet(*sorted(self._files())).createOrReplaceTempView(self.relation)
        return self.relation


class DeltaRs(DeltaContender):
    name = "delta_rs"

    def upsert(self, case: Case, result: Result) -> None:
        from deltalake import DeltaTable

        source = pq.read_table(case.path)
        merger = DeltaTable(str(self.path)).merge(
            source, " AND ".join(f"t.{k} = s.{k}" for k in KEYS), source_alias="s", target_alias="t"
        )
        if case.is_delete:
            merger = merger.when_matched_delete()
        else:
            merger = merger.when_matched_update({c: f"s.{c}" for c in case.columns}).when_not_matched_insert_all()
        result.extra["delta_rs_metrics"] = {
            k: v for k, v in merger.execute().items() if isinstance(v, int | float) and not isinstance(v, bool)
        }


class PartialCowDelta(DeltaContender):
    name = "partialcow_delta"

    def _prepare(self) -> None:
        from partialcow.index import RowIndex
        from partialcow.table.delta import DeltaRsTable

        RowIndex.create(DeltaRsTable(str(self.path), spark=self.spark), key_columns=KEYS)

    def upsert(self, case: Case, result: Result) -> None:
        from partialcow.spark.tables import open_table

        record_ours(result, apply_ours(self.spark, open_table(self.spark, str(self.path), table_format="delta"), case))


class DeltaSparkContender(DeltaContender):
    """With ``--format delta`` (a session with delta-spark in its catalog): every Delta table is read by delta-spark,
    so deletion vectors count; a table is reset by restoring its folder and dropping delta-spark's cached log state
    (then rebuilt, untimed, so no contender pays a cold state reconstruction in its write)."""

    def scan_relation(self) -> str:
        return f"delta.`{self.path}`"

    def reset(self) -> None:
        super().reset()
        self.spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # noqa: SLF001
        self.spark.sql(f"SELECT count(*) FROM delta.`{self.path}` WHERE false").collect()

    def _history(self) -> dict[str, Any]:
        row = self.spark.sql(f"DESCRIBE HISTORY delta.`{self.path}` LIMIT 1").first()
        return {"version": int(row["version"]), "metrics": dict(row["operationMetrics"] or {})}

    def before(self) -> None:
        self.version_before = self._history()["version"]

    def after(self, case: Case, result: Result) -> None:
        history = self._history()
        if history["version"] == self.version_before:
            result.bytes_written, result.files_rewritten, result.files_added = 0, 0, 0
            return
        get = lambda *keys: sum(int(history["metrics"].get(k, 0)) for k in keys)  # noqa: E731
        result.bytes_written = get("numTargetBytesAdded", "numAddedBytes")
        result.files_rewritten = get("numTargetFilesRemoved", "numRemovedFiles")
        result.files_added = get("numTargetFilesAdded", "numAddedFiles")
        result.extra["deletion_vectors_added"] = get("numTargetDeletionVectorsAdded", "numDeletionVectorsAdded")


class DeltaSparkMerge(DeltaSparkContender):
    """delta-spark's ``MERGE INTO`` on a table it wrote (CTAS), copy-on-write: deletion vectors off."""

    name = "delta_spark_cow"
    deletion_vectors = "false"

    def load(self) -> None:
        for folder in (self.path, self.pristine):
            shutil.rmtree(folder, ignore_errors=True)
        self.spark.sql(
            f"CREATE TABLE delta.`{self.path}` USING delta TBLPROPERTIES "
            f"('delta.enableDeletionVectors' = '{self.deletion_vectors}') AS SELECT * FROM parquet.`{self.base_path}`")
        shutil.copytree(self.path, self.pristine)

    def upsert(self, case: Case, result: Result) -> None:
        on = " AND ".join(f"t.{k} = s.{k}" for k in KEYS)
        source, target = f"parquet.`{case.path}`", f"delta.`{self.path}`"
        if case.is_delete:
            self.spark.sql(f"MERGE INTO {target} t USING {source} s ON {on} WHEN MATCHED THEN DELETE")
            return
        sets = ", ".join(f"t.{c} = s.{c}" for c in case.columns)
        self.spark.sql(f"MERGE INTO {target} t USING {source} s ON {on} WHEN MATCHED THEN UPDATE SET {sets} "
                       "WHEN NOT MATCHED THEN INSERT *")


class DeltaSparkMergeDV(DeltaSparkMerge):
    """The same MERGE with deletion vectors on (merge-on-read for the changed rows' old versions)."""

    name = "delta_spark_dv"
    deletion_vectors = "true"


class PartialCowDeltaSpark(DeltaSparkContender):
    """``apply_changes`` on a Delta table ``create_table`` wrote in a Delta session (committed by delta-spark's
    transaction API), as a ``partial_cow_incremental`` model on a Delta profile does."""

    name = "partialcow_delta"
    # we write no deletion vectors: delta-rs lists the files each write added and removed
    before = DeltaContender.before
    after = DeltaContender.after

    def load(self) -> None:
        from partialcow.spark.changes import ChangeSpec, create_table

        for folder in (self.path, self.pristine):
            shutil.rmtree(folder, ignore_errors=True)
        self.spark.sql(f"DROP TABLE IF EXISTS {NAMESPACE}.{self.name}")
        create_table(self.spark, f"{NAMESPACE}.{self.name}", self.spark.read.parquet(str(self.base_path)),
                     ChangeSpec(key_columns=KEYS), table_format="delta")
        from partialcow.spark.tables import local_path

        location = self.spark.sql(f"DESCRIBE DETAIL {NAMESPACE}.{self.name}").first()["location"]
        self.path = Path(local_path(str(location)))
        self.pristine = self.work / f"{self.name}_pristine"
        shutil.copytree(self.path, self.pristine)

    def upsert(self, case: Case, result: Result) -> None:
        from partialcow.spark.tables import open_table

        table = open_table(self.spark, f"{NAMESPACE}.{self.name}", table_format="delta")
        record_ours(result, apply_ours(self.spark, table, case))


CLASSES = {c.name: c for c in (IcebergCow, IcebergMor, DbtSparkMerge, DeltaRs, PartialCowIceberg, PartialCowDelta)}
# --format delta: a session whose catalog holds Delta (one session catalog holds one table format)
DELTA_CLASSES = {c.name: c for c in (DeltaSparkMerge, DeltaSparkMergeDV, PartialCowDeltaSpark, DeltaRs)}


def failure_text(exc: BaseException) -> str:
    """One line naming the error; for a Python worker failure, the worker's own last line (the real error)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    line = lines[-1] if "Python worker" in lines[0] else lines[0]
    return f"{type(exc).__name__}: {line[:200]}"


def run_case(contender: Contender, case: Case, jobs: JobCounter) -> Result:
    """Reset ``contender``'s table and time its write of ``case``; the table stays as written until the next reset."""
    result = Result(contender.name, case.pattern, case.size, case.rows)
    try:
        contender.reset()
        if isinstance(contender, DeltaContender):
            contender.before()
        with jobs:
            started = time.perf_counter()
            contender.upsert(case, result)
            result.write_s = time.perf_counter() - started
        result.spark_jobs = jobs.count
        contender.after(case, result)
    except Exception as exc:  # a failed run is a result too: recorded, not hidden
        result.check = "FAILED"
        result.note = failure_text(exc)
        traceback.print_exc()
    return result


def median_write(rounds: list[Result]) -> Result:
    """The last round's result (its table is the one left written) with the median write time of all rounds; the
    rounds' times are kept in ``extra``. A round that failed makes the result a failure."""
    result = rounds[-1]
    failed = next((r for r in rounds if r.check == "FAILED"), None)
    if failed is not None:
        result.check, result.note, result.write_s = "FAILED", failed.note, None
    elif len(rounds) > 1:
        times = [r.write_s for r in rounds if r.write_s is not None]
        result.write_s = statistics.median(times)
        result.extra["write_rounds_s"] = [round(t, 3) for t in times]
    return result


def scan_case(spark, written: list[tuple[Contender, Result]], expected: tuple[tuple, tuple], rounds: int) -> None:  # type: ignore[no-untyped-def]
    """Time the full and the selective scan of every written table, median over ``rounds`` interleaved rounds (each
    round scans every table once, so a slow moment of the machine falls on all contenders alike: one scan varies by
    +-30% here, more than the 5% the scan target allows), and check both results against the oracle."""
    scanned: list[tuple[Result, str]] = []
    for contender, result in written:
        if result.check == "FAILED":
            continue
        try:
            scanned.append((result, contender.scan_relation()))
        except Exception as exc:
            result.check, result.note = "FAILED", failure_text(exc)
            traceback.print_exc()
    times: dict[tuple[str, int], list[float]] = {}
    answers: dict[tuple[str, int], tuple] = {}
    for _ in range(rounds):
        for result, relation in scanned:
            for kind, sql in enumerate((full_scan_sql(relation), selective_scan_sql(relation))):
                if result.check == "FAILED":
                    continue
                try:
                    started = time.perf_counter()
                    answers[result.contender, kind] = tuple(spark.sql(sql).first())
                    times.setdefault((result.contender, kind), []).append(time.perf_counter() - started)
                except Exception as exc:
                    result.check, result.note = "FAILED", failure_text(exc)
                    traceback.print_exc()
    for result, _ in scanned:
        if result.check == "FAILED":
            continue
        result.full_scan_s = statistics.median(times[result.contender, 0])
        result.selective_scan_s = statistics.median(times[result.contender, 1])
        full, selective = answers[result.contender, 0], answers[result.contender, 1]
        if (full, selective) == expected:
            result.check = "ok"
        else:
            result.check = "WRONG"
            result.note = f"scan {full} {selective} != oracle {expected[0]} {expected[1]}"


# ---------------------------------------------------------------------------------------------------------------
# profile of apply_changes


PROFILED = (
    ("_stage", "stage (validate, latest change per key)"),
    ("_cast_to_table", "cast to table types"),
    ("_open_index", "open index + ensure_fresh"),
    ("_locate", "locate job (route by bucket, Arrow join, fragments per file)"),
    ("collect", "Spark jobs' collect (validation, locate, rewrite)"),
    ("_conflict_keys", "conflict keys (from the locate job's fragments)"),
    ("replace_files", "commit (replace_files)"),
    ("apply_commit", "index maintenance (apply_commit)"),
)


def profile_ours(contender: PartialCowIceberg, case: Case) -> str:
    """apply_changes once under cProfile: cumulative driver wall time of its steps (most of it waits on Spark)."""
    from partialcow.spark.tables import open_table

    contender.reset()
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    apply_ours(contender.spark, open_table(contender.spark, contender.relation, table_format="iceberg"), case)
    profiler.disable()
    total = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    lines = [f"apply_changes on {contender.relation}, {case.label} ({case.rows:,} keys): {total:.1f} s wall (under cProfile)", ""]
    lines.append("| step | calls | cumulative s |")
    lines.append("|---|---:|---:|")
    for func, label in PROFILED:
        calls = cumulative = 0.0
        for (filename, _, name), (_, ncalls, _, cum, callers) in stats.stats.items():  # type: ignore[attr-defined]
            if name != func:
                continue
            spark_action = name == "collect"
            in_scope = "partialcow" in filename or (spark_action and ("pyspark/sql/dataframe" in filename or "pyspark/rdd" in filename))
            if not in_scope:
                continue
            if spark_action and not any("changes.py" in c[0] for c in callers):
                continue
            calls += ncalls
            cumulative += cum
        lines.append(f"| {label} | {int(calls)} | {cumulative:.2f} |")
    buffer = io.StringIO()
    pstats.Stats(profiler, stream=buffer).sort_stats("cumulative").print_stats(r"partialcow", 25)
    return "\n".join(lines) + "\n\nTop partialcow functions by cumulative time:\n\n```\n" + buffer.getvalue() + "```\n"


# ---------------------------------------------------------------------------------------------------------------
# report


def _fmt(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _ratio(value: float | None, base: float | None) -> str:
    return "" if value is None or not base else f"{value / base:.2f}"


def _mb(value: int | None) -> str:
    return "" if value is None else f"{value / 1e6:.1f}"


def _note(r: Result) -> str:
    rounds = r.extra.get("write_rounds_s")
    written = f"writes {', '.join(f'{t:.1f}' for t in rounds)} s" if rounds else ""
    return "; ".join(n for n in (written, r.note) if n)


def markdown(results: list[Result], header: str, baseline: str = BASELINES["iceberg"]) -> str:
    base = {(r.pattern, r.size): r for r in results if r.contender == baseline}
    lines = [header, ""]
    lines.append(
        "| pattern | size | keys | contender | write s | ×CoW | MB written | files rewritten | files added | Spark jobs "
        "| full scan s | ×CoW | selective scan s | ×CoW | check | pages rewritten | pages copied | MB re-encoded "
        "| MB copied | note |"
    )
    lines.append("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")
    for r in sorted(results, key=lambda r: (PATTERNS.index(r.pattern), r.size, ORDER.index(r.contender))):
        b = base.get((r.pattern, r.size))
        lines.append(
            f"| {r.pattern} | {r.size:.1%} | {r.changed_rows:,} | {r.contender} | {_fmt(r.write_s)} "
            f"| {_ratio(r.write_s, b and b.write_s)} | {_mb(r.bytes_written)} | {'' if r.files_rewritten is None else r.files_rewritten} "
            f"| {'' if r.files_added is None else r.files_added} | {'' if r.spark_jobs is None else r.spark_jobs} "
            f"| {_fmt(r.full_scan_s, 2)} | {_ratio(r.full_scan_s, b and b.full_scan_s)} | {_fmt(r.selective_scan_s, 2)} "
            f"| {_ratio(r.selective_scan_s, b and b.selective_scan_s)} | {r.check} "
            f"| {'' if r.pages_rewritten is None else f'{r.pages_rewritten:,}'} | {'' if r.pages_copied is None else f'{r.pages_copied:,}'} "
            f"| {_mb(r.bytes_reencoded)} | {_mb(r.bytes_copied)} | {_note(r).replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: list[Result], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    patterns = [p for p in PATTERNS if any(r.pattern == p for r in results)]
    fig, axes = plt.subplots(1, len(patterns), figsize=(4.2 * len(patterns), 4), squeeze=False)
    for ax, pattern in zip(axes[0], patterns):
        for contender in ORDER:
            points = sorted((r.size, r.write_s) for r in results if r.pattern == pattern and r.contender == contender and r.write_s)
            if points:
                # one colour per contender in every panel (a panel without some contender must not shift the rest)
                ax.plot([p[0] * 100 for p in points], [p[1] for p in points], marker="o", label=contender,
                        color=f"C{ORDER.index(contender)}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(pattern)
        ax.set_xlabel("batch size (% of rows)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("upsert time (s)")
    labelled = {label: line for ax in axes[0] for line, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(labelled.values(), labelled.keys(), loc="lower center", ncol=len(labelled), fontsize=8)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1, help="TPC-DS scale factor (1 or 10)")
    parser.add_argument("--quick", action="store_true", help="sizes 1%% and 10%% (deletes 1%%), patterns a, b, d")
    parser.add_argument("--rows", type=int, help="use only the first ROWS rows of store_sales (development runs)")
    parser.add_argument("--format", choices=("iceberg", "delta"), default="iceberg",
                        help="the session's table format: delta runs delta-spark's MERGE (copy-on-write and with "
                             "deletion vectors), delta-rs and ours in a session with Delta in its catalog")
    parser.add_argument("--contenders", help="comma-separated subset of " + ",".join(CONTENDERS)
                        + " (--format delta: " + ",".join(DELTA_CONTENDERS) + ")")
    parser.add_argument("--patterns", help="comma-separated subset of " + ",".join(PATTERNS))
    parser.add_argument("--sizes", help="comma-separated fractions overriding the update sizes (e.g. 0.01,0.1)")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--scan-rounds", type=int, default=3, help="interleaved scan rounds per batch (median kept)")
    parser.add_argument("--write-rounds", type=int, default=1,
                        help="interleaved write rounds per batch (median kept; every round resets and writes each table)")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile run of apply_changes")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    if args.scan_rounds < 1 or args.write_rounds < 1:
        parser.error("--scan-rounds and --write-rounds must be at least 1")
    version = code_version()  # at start: colleagues may commit while the run goes
    command = "PYTHONPATH=adapter python bench/upsert_bench.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))

    classes = DELTA_CLASSES if args.format == "delta" else CLASSES
    tag = (f"sf{args.scale}" + ("_delta" if args.format == "delta" else "") + ("_quick" if args.quick else "")
           + (f"_r{args.rows}" if args.rows else ""))
    work = REPO / "bench" / "work" / f"upsert_{tag}"
    shutil.rmtree(work, ignore_errors=True)
    (work / "changes").mkdir(parents=True)
    args.results.mkdir(parents=True, exist_ok=True)

    base_path, base = load_base(ensure_data(args.scale), args.rows, work)
    patterns = args.patterns.split(",") if args.patterns else list(QUICK_PATTERNS if args.quick else PATTERNS)
    sizes = [float(s) for s in args.sizes.split(",")] if args.sizes else list(QUICK_SIZES if args.quick else SIZES)
    delete_sizes = list(QUICK_DELETE_SIZES if args.quick else DELETE_SIZES)
    contenders = [c for c in (args.contenders or ",".join(classes)).split(",") if c]
    for name in contenders:
        if name not in classes:
            sys.exit(f"unknown contender {name!r} with --format {args.format}: choose from {', '.join(classes)}")
    rng = np.random.default_rng(args.seed)
    cases = [
        make_case(base, p, s, rng, work / "changes")
        for p in patterns
        for s in (delete_sizes if p == "d_deletes" else sizes)
    ]
    # Case-major, small and typical batches first: a run stopped early still compares every contender.
    cases.sort(key=lambda c: (SIZE_PRIORITY.get(c.size, 9), PATTERNS.index(c.pattern)))
    print(f"{base.num_rows:,} rows, {len(cases)} change batches, contenders: {', '.join(contenders)}", flush=True)

    from partialcow.spark.session import get_or_create_session

    jars: list[str] = []
    if args.format == "delta":
        sys.path.insert(0, str(REPO / "tests"))
        from delta_env import delta_spark_jars

        jars = list(delta_spark_jars())
        if not jars:
            sys.exit("--format delta needs the delta-spark jars (../shared/jars or PARTIALCOW_DELTA_JARS)")
    spark = get_or_create_session(table_format=args.format, warehouse=str(work / "warehouse"), master="local[2]",
                                  **({"delta_jars": jars} if jars else {}))
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {NAMESPACE}")
    jobs = JobCounter(spark)
    stem = args.results / f"upsert_{tag}"

    results: list[Result] = []
    loads: dict[str, str] = {}
    loaded: list[Contender] = []
    for name in contenders:
        contender = classes[name](spark, work, base_path)
        started = time.perf_counter()
        try:
            contender.load()
        except Exception as exc:
            traceback.print_exc()
            loads[name] = f"load FAILED: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}"
            results += [Result(name, c.pattern, c.size, c.rows, check="FAILED", note=loads[name]) for c in cases]
            continue
        loads[name] = f"loaded in {time.perf_counter() - started:.1f} s"
        print(f"{name}: {loads[name]}", flush=True)
        loaded.append(contender)

    profile_text = ""
    for case in cases:
        started = time.perf_counter()
        expected = oracle(spark, base_path, case)
        print(f"{case.label}: oracle {time.perf_counter() - started:.1f} s", flush=True)
        writers = []
        for contender in loaded:
            why_not = contender.supports(case)
            if why_not:
                results.append(Result(contender.name, case.pattern, case.size, case.rows, note=why_not))
            else:
                writers.append(contender)
        rounds: dict[str, list[Result]] = {c.name: [] for c in writers}
        for _ in range(args.write_rounds):
            for contender in writers:
                result = run_case(contender, case, jobs)
                rounds[contender.name].append(result)
                print(f"  {contender.name:18s} {case.label:22s} write {_fmt(result.write_s)} s {result.note}", flush=True)
        # every round leaves the same table; the last one is scanned
        written = [(c, median_write(rounds[c.name])) for c in writers]
        scan_case(spark, written, expected, args.scan_rounds)
        for contender, result in written:
            results.append(result)
            print(
                f"  {contender.name:18s} {case.label:22s} full scan {_fmt(result.full_scan_s, 2)} s, "
                f"selective {_fmt(result.selective_scan_s, 2)} s, {result.check} {result.note}",
                flush=True,
            )
        ours = next((c for c in loaded if isinstance(c, PartialCowIceberg)), None)
        if ours is not None and not args.no_profile and not profile_text and case.pattern == "b_uniform_two":
            try:
                profile_text = profile_ours(ours, case)
            except Exception as exc:
                traceback.print_exc()
                profile_text = f"profile run FAILED: {type(exc).__name__}: {exc}"
        # after every batch, so a long run that is stopped early still leaves its results
        report(args, command, version, base.num_rows, loads, results, profile_text, stem, final=False)
    spark.stop()
    report(args, command, version, base.num_rows, loads, results, profile_text, stem, final=True)


def code_version() -> str:
    """The commit measured, and which product files had uncommitted edits (the team works in one checkout)."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--short", "--", "adapter").splitlines()
    return f"commit {git('rev-parse', '--short', 'HEAD')}" + (
        f", uncommitted edits in {', '.join(line.split()[-1] for line in dirty)}" if dirty else ""
    )


def report(
    args: argparse.Namespace, command: str, version: str, rows: int, loads: dict[str, str], results: list[Result],
    profile_text: str, stem: Path, *, final: bool,
) -> None:
    header = "\n".join(
        [
            f"# Upsert benchmark: TPC-DS store_sales SF{args.scale}" + (f" (first {args.rows:,} rows)" if args.rows else "")
            + (" on Delta, in a session with delta-spark" if args.format == "delta" else ""),
            "",
            f"Command: `{command}`",
            "",
            f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} when the report was written, "
            "Spark local[2] (driver 2g, 4 shuffle partitions), "
            f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
            f"{rows:,} rows. " + ("One write per cell" if args.write_rounds == 1 else
              f"Write s = median of {args.write_rounds} interleaved rounds (each round resets and writes every table; "
              "the rounds' times in the note)") + ": compare ratios, not absolute seconds.",
            "",
            f"Code: {version}",
            "",
            "Loads (not timed in the table): " + "; ".join(f"{k} {v}" for k, v in loads.items()),
            "",
            f"`×CoW` = time / {BASELINES[args.format]}'s time for the same batch (below 1 is faster). `MB written` = "
            "sum of the new "
            "data and delete files' sizes. `check` = both scans equal the plain-Parquet oracle. Our own metrics in "
            "the last columns."
            + (" `dbt_spark_merge` is dbt-spark's incremental merge statement run through Spark directly."
               if args.format == "iceberg" else ""),
        ]
        + ([] if final else ["", "**Partial results: the run was still going when this file was written.**"])
    )
    table = markdown(results, header, BASELINES[args.format])
    if profile_text:
        table += "\n## Where apply_changes spends its time\n\n" + profile_text
    stem.with_suffix(".md").write_text(table)
    stem.with_suffix(".json").write_text(
        json.dumps({"command": command, "rows": rows, "loads": loads, "results": [asdict(r) for r in results]}, indent=1)
    )
    plot(results, stem.with_suffix(".png"), f"upsert time, store_sales SF{args.scale}, local[2]")
    if final:
        print(table)
        print(f"wrote {stem}.md, .json, .png")


if __name__ == "__main__":
    main()
