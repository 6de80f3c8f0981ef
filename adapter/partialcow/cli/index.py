"""``partialcow index verify|rebuild TABLE``: check or rebuild a table's row-level index.

How a table is named on the command line:

- a Delta table by its folder (a path or URI whose folder holds ``_delta_log``), e.g. ``partialcow index verify
  /data/events``; read with a plain local SparkSession (no Delta jar needed);
- an Iceberg table by its name in the embedded catalog, with the warehouse that catalog lives in, e.g.
  ``partialcow index verify analytics.events --warehouse ./warehouse``; without ``--warehouse``, the warehouse of the
  dbt project's profile (``--project-dir``, or the project around the current folder; see :mod:`partialcow.project`).

``verify`` exits 0 when index and table agree and 1 otherwise (stale index, missing/extra/misplaced entries,
duplicate keys); ``rebuild`` re-indexes the current snapshot (``--key`` is needed only when no index exists yet).
This module is an entry point: it starts the Spark session the index layer itself never creates.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from typing import TYPE_CHECKING

from partialcow.exceptions import ConfigurationError
from partialcow.formats import TABLE_FORMATS
from partialcow.index.row_index import RowIndex, VerifyReport
from partialcow.progress import Progress
from partialcow.table.base import TableSource
from partialcow.table.delta import DeltaRsTable
from partialcow.table.iceberg import IcebergTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", choices=["verify", "rebuild"], help="verify: compare with a fresh scan; rebuild: re-index"
    )
    parser.add_argument("table", help="Delta: the table folder; Iceberg: the table name (with --warehouse)")
    parser.add_argument("--format", choices=["auto", *TABLE_FORMATS], default="auto",
                        help="table format (auto: Delta if the folder has _delta_log, else Iceberg)")
    parser.add_argument("--warehouse", help="warehouse folder of the embedded Iceberg catalog (default: the dbt "
                        "project's, from its profile)")
    parser.add_argument("--project-dir", help="dbt project whose profile names the warehouse (default: "
                        "DBT_PROJECT_DIR, else the current folder or the nearest parent with a dbt_project.yml)")
    parser.add_argument(
        "--profiles-dir", help="folder of profiles.yml (default: DBT_PROFILES_DIR, the project, ~/.dbt)"
    )
    parser.add_argument("--target", help="profile target (default: the profile's)")
    parser.add_argument("--key", help="comma-separated key columns (rebuild of a table without an index)")
    parser.add_argument("--buckets", type=int, help="bucket count (rebuild; default: from the table's row count)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--output", choices=["text", "json"], default="text")


def _is_delta(table: str) -> bool:
    from partialcow.table.paths import local_path

    local = local_path(table)
    return local is not None and os.path.isdir(os.path.join(local, "_delta_log"))


def _session(args: argparse.Namespace, table_format: str) -> SparkSession:
    if table_format == "delta":
        from pyspark.sql import SparkSession

        # Delta is read with Spark's own Parquet reader: no catalog or extra jars needed.
        return (
            SparkSession.builder.master(args.master)
            .appName("partialcow-index")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "8")
            .getOrCreate()
        )
    warehouse, runtime = args.warehouse, "auto"
    extra: dict[str, str] = {}
    class_cache = True
    if not warehouse:
        from partialcow.project import find_project, profile_target

        project = find_project(args.project_dir)
        if project is None:
            raise ConfigurationError(
                f"Iceberg table {args.table}: pass --warehouse <folder of the embedded catalog> or --project-dir "
                "<dbt project> (or a Delta table folder)"
            )
        target = profile_target(project, profiles_dir=args.profiles_dir, target=args.target)
        warehouse, runtime = target.warehouse, str(target.settings.get("iceberg_runtime") or "auto")
        # the session dbt runs with: a profile's own metastore or catalog (spark_config) is where its tables are
        extra = {str(k): str(v) for k, v in (target.settings.get("spark_config") or {}).items()}
        class_cache = bool(target.settings.get("class_cache", True))
    from partialcow.spark.session import get_or_create_session

    return get_or_create_session(table_format="iceberg", warehouse=warehouse, master=args.master,
                                 iceberg_runtime=runtime, extra=extra, class_cache=class_cache)


def _source(args: argparse.Namespace, progress: Progress) -> TableSource:
    table_format = args.format
    if table_format == "auto":
        table_format = "delta" if _is_delta(args.table) else "iceberg"
    with progress.step("starting Spark"):
        spark = _session(args, table_format)
    progress.watch(spark)
    if table_format == "delta":
        return DeltaRsTable(args.table, spark=spark)
    return IcebergTable(spark, args.table)


def _render_report(report: VerifyReport) -> str:
    lines = [
        f"table            {report.table}",
        f"index version    {report.index_version}",
        f"table version    {report.table_version}",
        f"rows in table    {report.rows_in_table}",
        f"rows in index    {report.rows_in_index}",
        f"missing          {report.missing_from_index}",
        f"extra            {report.extra_in_index}",
        f"wrong bucket     {report.wrong_bucket}",
        f"duplicate keys   {report.duplicate_keys}",
        f"stale files      {len(report.stale_files)}",
        *[f"  {s}" for s in report.samples],
        *[f"  stale: {p}" for p in report.stale_files[:5]],
        "OK: index and table agree"
        if report.ok
        else "FAILED: index and table disagree (run `partialcow index rebuild`)",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run ``verify`` or ``rebuild``; the exit code is 0 on success, 1 when verification fails."""
    progress = Progress()
    source = _source(args, progress)
    if args.action == "verify":
        with progress.step(f"verifying the row index of {args.table} against a scan of the table"):
            report = RowIndex.open(source).verify()
        if args.output == "json":
            print(json.dumps({**asdict(report), "ok": report.ok}, indent=1))
        else:
            print(_render_report(report))
        return 0 if report.ok else 1
    keys = [k.strip() for k in args.key.split(",") if k.strip()] if args.key else None
    from partialcow.spark.journal import WriteLease

    # a rebuild writes index files: it holds a write lease so that writers of the table leave them alone
    with WriteLease(source.location, [], referenced=set), progress.step(f"rebuilding the row index of {args.table}"):
        if RowIndex.exists(source) and keys is None:
            index = RowIndex.open(source)
            metrics = index.rebuild(num_buckets=args.buckets)
        else:
            if not keys:
                raise ConfigurationError(f"table {args.table} has no row index yet: pass --key <col1,col2,...>")
            index = RowIndex.create(source, key_columns=keys, num_buckets=args.buckets)
            assert index.last_metrics is not None
            metrics = index.last_metrics
    if args.output == "json":
        print(json.dumps(asdict(metrics), indent=1))
    else:
        print(
            f"rebuilt index of {source.name}: {metrics.rows_total} rows, {metrics.num_buckets} buckets, "
            f"{len(metrics.files_reindexed)} files, {metrics.duration_ms} ms"
        )
    return 0
