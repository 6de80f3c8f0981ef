"""``partialcow doctor``: what this machine offers the embedded Spark (Java, pyspark, Iceberg and Delta runtimes).

Fast by default (no JVM start: only files are looked at and ``java -version`` is run); ``--probe`` starts Spark as the
profile would (its table format, runtime jars, master and ``spark_config``) in a temporary warehouse and creates,
writes and drops a table, showing each step on a terminal. The warehouse and runtime checked are the dbt project's
(its profile, found as dbt finds it: see :mod:`partialcow.project`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from partialcow.exceptions import PartialCowError
from partialcow.progress import Progress
from partialcow.spark.jars import pyspark_jars_dir, resolve_delta_jars, resolve_iceberg_runtime

if TYPE_CHECKING:
    from partialcow.spark.session import SessionSettings

__all__ = ["Check", "DoctorSettings", "add_arguments", "collect", "probe_settings", "run"]

Status = Literal["ok", "warn", "fail", "info"]
# Java versions Spark 3.5 supports.
_SUPPORTED_JAVA = (8, 11, 17)


@dataclass(frozen=True)
class Check:
    """One line of the report: ``status`` ``fail`` on a check Iceberg needs makes the exit code 1."""

    name: str
    status: Status
    detail: str
    needed_for_iceberg: bool = False


@dataclass(frozen=True)
class DoctorSettings:
    """What the checks look at: the arguments, else the project profile's, else the defaults."""

    warehouse: str = "warehouse"
    iceberg_runtime: str = "auto"
    delta_jars: tuple[str, ...] = ()
    table_format: str = "iceberg"
    # the profile's master and spark_config, as the probe starts Spark; None: the profile sets no master
    master: str | None = None
    spark_config: Mapping[str, str] = field(default_factory=dict)
    class_cache: bool = True


def _where_data_lives(key: str) -> bool:
    """Settings that point Spark at the user's warehouse, metastore or catalogs: the probe keeps its own."""
    return (key == "spark.sql.warehouse.dir" or key.startswith("spark.sql.catalog.")
            or any(part in key for part in ("javax.jdo.", "hive.metastore.", "datanucleus.")))


def probe_settings(settings: DoctorSettings, warehouse: str) -> tuple[SessionSettings, list[str]]:
    """The session the probe starts in ``warehouse``: the profile's, with its own warehouse and metastore; and the
    profile's ``spark_config`` keys left out for that.

    >>> session, left_out = probe_settings(DoctorSettings(table_format="delta", master="local[2]", spark_config={
    ...     "spark.sql.shuffle.partitions": "3", "spark.sql.warehouse.dir": "/lake",
    ...     "spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:derby:/lake/db"}), "/tmp/probe")
    >>> session.table_format, session.master, dict(session.extra), session.warehouse
    ('delta', 'local[2]', {'spark.sql.shuffle.partitions': '3'}, '/tmp/probe')
    >>> left_out
    ['spark.hadoop.javax.jdo.option.ConnectionURL', 'spark.sql.warehouse.dir']
    """
    from partialcow.spark.session import SessionSettings

    extra = {k: v for k, v in settings.spark_config.items() if not _where_data_lives(k)}
    session = SessionSettings(
        table_format=settings.table_format,  # type: ignore[arg-type]  # checked by SessionSettings
        warehouse=warehouse,
        master=settings.master or "local[1]",  # one core is enough for a two-row table
        extra=extra,
        iceberg_runtime=settings.iceberg_runtime,
        delta_jars=settings.delta_jars,
        class_cache=settings.class_cache,
    )
    return session, sorted(set(settings.spark_config) - set(extra))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project-dir", help="dbt project whose profile to check (default: DBT_PROJECT_DIR, else the "
                        "current folder or the nearest parent with a dbt_project.yml)")
    parser.add_argument(
        "--profiles-dir", help="folder of profiles.yml (default: DBT_PROFILES_DIR, the project, ~/.dbt)"
    )
    parser.add_argument("--target", help="profile target (default: the profile's)")
    parser.add_argument("--iceberg-runtime", help="auto|offline|maven|group:artifact:version|/path/to.jar "
                        "(default: the profile's, else auto)")
    parser.add_argument("--delta-jar", action="append", default=[], help="delta-spark jar path or Maven coordinates")
    parser.add_argument("--warehouse", help="warehouse folder to check (default: the profile's, else ./warehouse)")
    parser.add_argument("--probe", action="store_true", help="start Spark as the profile would and create, write "
                        "and drop a table of its format (in a temporary warehouse)")
    parser.add_argument("--output", choices=("text", "json"), default="text")


def _java() -> Check:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        return Check("java", "fail", f"no java found (JAVA_HOME={java_home or 'unset'}): install Java 17", True)
    try:
        banner = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("java", "fail", f"{java} -version failed: {exc}", True)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', banner)
    if match is None:
        return Check("java", "fail", f"cannot read the version of {java}: {banner.strip()[:120]}", True)
    major = int(match.group(2)) if match.group(1) == "1" else int(match.group(1))  # "1.8.0" means Java 8
    line = banner.strip().splitlines()[0]
    detail = f"{line} at {java} (JAVA_HOME={java_home or 'unset'})"
    if major not in _SUPPORTED_JAVA:
        return Check("java", "warn", f"{detail}: Spark 3.5 supports Java {', '.join(map(str, _SUPPORTED_JAVA))}", True)
    return Check("java", "ok", detail, True)


def _pyspark() -> Check:
    try:
        version = metadata.version("pyspark")
        scala = sorted(p.name for p in pyspark_jars_dir().glob("scala-library-*.jar"))
    except (metadata.PackageNotFoundError, PartialCowError) as exc:
        return Check("pyspark", "fail", f"not installed ({exc}): pip install 'pyspark==3.5.*'", True)
    scala_version = scala[-1][len("scala-library-") : -len(".jar")] if scala else "unknown"
    status: Status = "ok" if version.startswith("3.5.") else "warn"
    return Check("pyspark", status, f"{version} (Scala {scala_version})", True)


def _iceberg(runtime: str) -> Check:
    try:
        jar_set = resolve_iceberg_runtime(runtime)
    except PartialCowError as exc:
        return Check("iceberg runtime", "fail", str(exc), True)
    return Check("iceberg runtime", "ok", jar_set.source, True)


def _delta(delta_jars: list[str]) -> list[Check]:
    checks = []
    if delta_jars:
        try:
            checks.append(Check("delta-spark", "ok", resolve_delta_jars(delta_jars).source))
        except PartialCowError as exc:
            checks.append(Check("delta-spark", "fail", str(exc)))
    else:
        checks.append(
            Check("delta-spark", "info", "no jar configured (not on PyPI): set delta_jars to use Delta in Spark")
        )
    try:
        checks.append(Check("delta-rs", "ok", f"deltalake {metadata.version('deltalake')}"))
    except metadata.PackageNotFoundError:
        checks.append(Check("delta-rs", "info", "deltalake not installed: pip install 'dbt-partialcow[delta]'"))
    return checks


def _warehouse(warehouse: str) -> Check:
    folder = Path(warehouse).expanduser().absolute()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if os.access(existing, os.W_OK):
        state = "exists" if folder.exists() else "will be created"
        return Check("warehouse", "ok", f"{folder} ({state})")
    return Check("warehouse", "warn", f"{folder}: {existing} is not writable; choose another warehouse path")


def _probe(settings: DoctorSettings, progress: Progress) -> Check:
    from partialcow.spark.session import start_session

    label = "Delta" if settings.table_format == "delta" else "Iceberg"
    table = "default.partialcow_doctor"
    with tempfile.TemporaryDirectory(prefix="partialcow-doctor-") as folder:
        session, left_out = probe_settings(settings, folder)
        applied = ", ".join(sorted(session.extra)) or "none"
        ignored = f"; left out (the probe's own warehouse and metastore): {', '.join(left_out)}" if left_out else ""
        what = f"master {session.master}, profile spark_config applied: {applied}{ignored}"
        try:
            with progress.step(f"starting Spark for {label} tables ({what}; a temporary warehouse)"):
                spark = start_session(session)
            progress.watch(spark)
            try:
                with progress.step(f"creating a {label} table"):
                    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING {settings.table_format}")
                with progress.step("writing and reading it"):
                    spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
                    rows = spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0]
                with progress.step("dropping it"):
                    spark.sql(f"DROP TABLE {table}" + (" PURGE" if settings.table_format == "iceberg" else ""))
            finally:
                progress.watch(None)
                spark.stop()
        except Exception as exc:  # noqa: BLE001 - report any failure of the probe as a failed check, not a traceback
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return Check("probe", "fail", f"{type(exc).__name__}: {first_line[:300]} ({what})", True)
    if rows != 2:
        return Check("probe", "fail", f"wrote 2 rows to a {label} table but read back {rows} ({what})", True)
    return Check("probe", "ok", f"started Spark, created, wrote, read and dropped a {label} table ({what})", True)


def collect(
    settings: DoctorSettings | None = None, *, probe: bool = False, progress: Progress | None = None
) -> list[Check]:
    """Run the checks; ``probe=True`` also starts Spark (its steps shown on ``progress``).

    >>> [c.name for c in collect()][:3]
    ['java', 'pyspark', 'iceberg runtime']
    """
    from partialcow.spark.class_cache import describe

    settings = settings or DoctorSettings()
    checks = [_java(), _pyspark(), _iceberg(settings.iceberg_runtime), *_delta(list(settings.delta_jars)),
              _warehouse(settings.warehouse), Check("class cache", "info", describe())]
    if probe:
        checks.append(_probe(settings, progress or Progress(enabled=False)))
    return checks


def _settings(args: argparse.Namespace) -> tuple[Check, DoctorSettings]:
    """The project check, and what to check: the arguments, else the project profile's, else the defaults."""
    from partialcow.project import find_project, profile_target

    project = find_project(args.project_dir)
    if project is None:
        check = Check("project", "info", "no dbt project here (no dbt_project.yml): defaults checked; pass "
                      "--project-dir to check a project's profile")
        profile: dict[str, Any] = {}
        warehouse = "warehouse"
    else:
        try:
            target = profile_target(project, profiles_dir=args.profiles_dir, target=args.target)
        except PartialCowError as exc:
            check = Check("project", "warn", f"{project}: {exc}; defaults checked")
            profile, warehouse = {}, "warehouse"
        else:
            check = Check("project", "ok", f"{project}: {target.describe()}")
            profile, warehouse = target.settings, target.warehouse
    delta = profile.get("delta_jars") or []
    spark_config = profile.get("spark_config") or {}
    return check, DoctorSettings(
        warehouse=args.warehouse or warehouse,
        iceberg_runtime=args.iceberg_runtime or str(profile.get("iceberg_runtime") or "auto"),
        delta_jars=tuple(args.delta_jar or (delta if isinstance(delta, list) else [delta])),
        table_format=str(profile.get("table_format") or "iceberg"),
        master=str(profile["master"]) if profile.get("master") else None,
        spark_config={str(k): str(v) for k, v in spark_config.items()} if isinstance(spark_config, dict) else {},
        class_cache=profile.get("class_cache") is not False,
    )


def _usable(checks: list[Check], table_format: str) -> bool:
    """Whether the profile's table format works here: Iceberg's checks, or Java, PySpark and a delta-spark jar
    found (a Delta profile's models are built through delta-spark)."""
    iceberg = not any(c.status == "fail" and c.needed_for_iceberg for c in checks)
    if table_format != "delta":
        return iceberg
    basics = not any(c.status == "fail" and c.name in ("java", "pyspark") for c in checks)
    return basics and any(c.name == "delta-spark" and c.status == "ok" for c in checks)


def run(args: argparse.Namespace) -> int:
    """Print the report; exit code 0 if the profile's table format (Iceberg by default) is usable in Spark here."""
    project, settings = _settings(args)
    table_format = settings.table_format
    checks = [project, *collect(settings, probe=args.probe, progress=Progress())]
    usable = _usable(checks, table_format)
    iceberg = _usable(checks, "iceberg")
    label = "Delta" if table_format == "delta" else "Iceberg"
    if args.output == "json":
        print(json.dumps({"table_format": table_format, "usable": usable, "iceberg_usable": iceberg,
                          "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{c.name:<{width}}  {c.status:<4}  {c.detail}")
        print(f"\n{label} in Spark: {'usable' if usable else 'NOT usable'}")
    return 0 if usable else 1
