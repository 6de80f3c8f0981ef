"""``partialcow index verify|rebuild TABLE``: check or rebuild a table's row-level index.

How a table is named on the command line:

- a Delta table by its folder (a path, relative or absolute, or a ``file:`` URI whose folder holds ``_delta_log``),
  e.g. ``partialcow index verify /data/events``; read with a plain local SparkSession (no Delta jar needed);
- an Iceberg table by its name in the embedded catalog, with the warehouse that catalog lives in, e.g.
  ``partialcow index verify analytics.events --warehouse ./warehouse``; without ``--warehouse``, the warehouse of the
  dbt project's profile (``--project-dir``, or the project around the current folder; see :mod:`partialcow.project`).

``verify`` exits 0 when index and table agree (versions that changed no file, such as a property set, included) and
1 otherwise: an index behind the table's files (``BEHIND``: the next write brings it up to date), or missing,
extra or misplaced entries and duplicate keys (``FAILED``); ``rebuild`` re-indexes the current snapshot (``--key`` is
needed only when no index exists yet).
This module is an entry point: it starts the Spark session the index layer itself never creates.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from partialcow.cli import emit
from partialcow.exceptions import ConfigurationError, UnusableIndexError
from partialcow.formats import TABLE_FORMATS, TableFormat
from partialcow.index.row_index import RowIndex, VerifyReport
from partialcow.progress import Progress
from partialcow.table.base import TableSource
from partialcow.table.delta import DeltaRsTable
from partialcow.table.iceberg import IcebergTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from partialcow.spark.journal import WriteLease

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
    parser.add_argument("--profiles-dir", help="folder of profiles.yml (default: DBT_PROFILES_DIR; else the current "
                        "folder, ~/.dbt, then the project's folder)")
    parser.add_argument("--target", help="profile target (default: DBT_TARGET, else the profile's)")
    parser.add_argument("--key", help="comma-separated key columns (rebuild of a table without an index)")
    parser.add_argument("--buckets", type=int, help="bucket count (rebuild; default: from the table's row count)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--output", choices=["text", "json"], default="text")


def _delta_folder(table: str) -> str | None:
    """The absolute local folder of ``table`` when it names a Delta table (its folder holds ``_delta_log``)."""
    from partialcow.table.paths import uri_local_path

    local = uri_local_path(table)  # a Delta root given as a file: URI is percent-encoded, as delta-rs spells it
    if local is None and "://" not in table and not table.startswith("file:"):
        # a relative folder (``data/events``): taken against the current folder, as a shell user means it
        local = os.path.abspath(table)
    return local if local is not None and os.path.isdir(os.path.join(local, "_delta_log")) else None


def _session(args: argparse.Namespace, table_format: str) -> SparkSession:
    if table_format == "delta":
        from pyspark.sql import SparkSession

        from partialcow.spark.executors import worker_python
        from partialcow.spark.session import launch

        # Delta is read with Spark's own Parquet reader: no catalog or extra jars needed. Its workers run this
        # interpreter, as the embedded session's do (PySpark's default, `python3` on the PATH, may lack pyarrow).
        builder = (SparkSession.builder.master(args.master).appName("partialcow-index")
                   .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "8"))
        return launch(builder, worker_python({"spark.master": args.master}))
    warehouse, runtime = args.warehouse, "auto"
    extra: dict[str, str] = {}
    class_cache = True
    if warehouse and not (Path(warehouse) / "metastore_db").is_dir():
        # the session would create an empty catalog there, and the table would be reported missing from it
        raise ConfigurationError(
            f"--warehouse {warehouse}: no embedded catalog there (no metastore_db folder); pass the warehouse folder "
            "dbt's embedded session uses (the profile's `warehouse`), or --project-dir"
        )
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
        class_cache = profile_flag(target.settings.get("class_cache", True), "class_cache")
    from partialcow.spark.session import get_or_create_session

    return get_or_create_session(table_format="iceberg", warehouse=warehouse, master=args.master,
                                 iceberg_runtime=runtime, extra=extra, class_cache=class_cache)


def _locate(args: argparse.Namespace) -> tuple[TableFormat, str]:
    """The table's format and the name to open it by (a Delta table's folder made absolute)."""
    delta_folder = _delta_folder(args.table)
    table_format: TableFormat = args.format if args.format != "auto" else "delta" if delta_folder else "iceberg"
    if table_format == "delta" and delta_folder:
        return table_format, delta_folder
    return table_format, args.table


def _source(spark: SparkSession, table_format: TableFormat, name: str) -> TableSource:
    if table_format == "delta":
        return DeltaRsTable(name, spark=spark)
    return IcebergTable(spark, name)


def _write_lease(spark: SparkSession, table_format: TableFormat, name: str, source: TableSource) -> WriteLease:
    """The lease a rebuild holds while it writes index files, so that writers of the table leave them alone.

    Taking a lease recovers dead writes, so it is a write's own (``LakehouseTable.write_lease``): with the table's
    data folders and referenced files. Without them a dead write's lease went while its data files stayed,
    unreferenced, with nothing left to find them.
    """
    from partialcow.spark.journal import WriteLease
    from partialcow.table.paths import local_path

    if local_path(source.location) is None:
        # partial copy-on-write writes local tables only: a remote one has no write leases to recover (and
        # WriteLease takes none there)
        return WriteLease(source.location, [], referenced=set)
    from partialcow.spark.tables import open_table

    return open_table(spark, name, table_format=table_format).write_lease()


def _columns(spark: SparkSession, table_format: TableFormat, name: str) -> list[str]:
    if table_format == "iceberg":
        return list(spark.table(name).columns)
    from deltalake import DeltaTable

    return [field.name for field in DeltaTable(name).schema().fields]


def _check_keys(table: str, keys: Sequence[str], columns: Sequence[str]) -> None:
    """``--key`` columns the table lacks, named with the table's columns (the index would fail deep in a Spark job).

    >>> _check_keys("t", ["ID"], ["id", "v"])
    Traceback (most recent call last):
    ...
    partialcow.exceptions.ConfigurationError: table t has no column(s) ID (--key; did you mean id?); its columns: id, v
    """
    missing = [k for k in keys if k not in columns]
    if missing:
        by_lower = {c.lower(): c for c in columns}
        hints = [by_lower[k.lower()] for k in missing if k.lower() in by_lower]
        hint = f"; did you mean {', '.join(hints)}?" if hints else ""
        raise ConfigurationError(f"table {table} has no column(s) {', '.join(missing)} (--key{hint}); its columns: "
                                 f"{', '.join(columns)}")


def profile_flag(value: object, name: str) -> bool:
    """A profile's boolean setting, also as text (what ``{{ env_var(...) }}`` renders: ``bool("false")`` is true).

    >>> profile_flag("false", "class_cache"), profile_flag(" Yes", "class_cache"), profile_flag(False, "class_cache")
    (False, True, False)
    """
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("false", "0", "no", "off"):
            return False
        if text in ("true", "1", "yes", "on"):
            return True
        raise ConfigurationError(f"profile setting {name}: {value!r} is not true or false")
    return bool(value)


def _render_report(report: VerifyReport) -> str:
    lines = [
        f"table            {report.table}",
        f"index version    {report.index_version}",
        f"table version    {report.table_version}",
        f"rows in table    {report.rows_in_table if report.checked else '-'} (at the index's version)",
        f"rows in index    {report.rows_in_index}",
        f"missing          {report.missing_from_index}",
        f"extra            {report.extra_in_index}",
        f"wrong bucket     {report.wrong_bucket}",
        f"duplicate keys   {report.duplicate_keys}",
        f"stale files      {len(report.stale_files)}",
        *[f"  {s}" for s in report.samples],
        *[f"  stale: {p}" for p in report.stale_files[:5]],
        _verdict(report),
    ]
    return "\n".join(lines)


def _verdict(report: VerifyReport) -> str:
    if report.ok:
        return "OK: index and table agree"
    if report.behind and not report.checked:
        return (f"BEHIND: the index's table version {report.index_version} is no longer in the table (expired), so "
                "it was not compared; the next write of the table brings the index up to date")
    if report.behind:
        return (f"BEHIND: the index is right at table version {report.index_version}, and {len(report.stale_files)} "
                "file(s) changed since (another writer); the next write of the table brings it up to date")
    return "FAILED: index and table disagree (run `partialcow index rebuild`)"


def run(args: argparse.Namespace) -> int:
    """Run ``verify`` or ``rebuild``; the exit code is 0 on success, 1 when verification fails (errors: 2, by main)."""
    progress = Progress()
    table_format, name = _locate(args)
    with progress.step("starting Spark"):
        spark = _session(args, table_format)
    progress.watch(spark)
    source = _source(spark, table_format, name)
    if args.action == "verify":
        with progress.step(f"verifying the row index of {args.table} against a scan of the table"):
            report = RowIndex.open(source).verify()
        if args.output == "json":
            emit(json.dumps({**asdict(report), "ok": report.ok, "behind": report.behind}, indent=1))
        else:
            emit(_render_report(report))
        return 0 if report.ok else 1
    keys = [k.strip() for k in args.key.split(",") if k.strip()] if args.key else None
    with _write_lease(spark, table_format, name, source), progress.step(f"rebuilding the row index of {args.table}"):
        try:
            existing = RowIndex.open(source) if RowIndex.exists(source) and keys is None else None
        except UnusableIndexError as exc:  # built again from the table, keyed as before when that is known
            if not exc.key_columns:
                raise ConfigurationError(f"{exc}: pass --key <col1,col2,...> to build it again") from None
            existing, keys = None, list(exc.key_columns)
        if existing is not None:
            metrics = existing.rebuild(num_buckets=args.buckets)
        else:
            if not keys:
                raise ConfigurationError(f"table {args.table} has no row index yet: pass --key <col1,col2,...>")
            _check_keys(args.table, keys, _columns(spark, table_format, name))
            index = RowIndex.create(source, key_columns=keys, num_buckets=args.buckets)
            assert index.last_metrics is not None
            metrics = index.last_metrics
    if args.output == "json":
        emit(json.dumps(asdict(metrics), indent=1))
    else:
        emit(
            f"rebuilt index of {source.name}: {metrics.rows_total} rows, {metrics.num_buckets} buckets, "
            f"{len(metrics.files_reindexed)} files, {metrics.duration_ms} ms"
        )
    return 0
