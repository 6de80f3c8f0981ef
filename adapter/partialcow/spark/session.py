"""The embedded SparkSession: one local Spark with Iceberg (or Delta) in ``spark_catalog`` and a Derby metastore.

Static settings (jars, extensions, catalogs, warehouse) only apply to the call that *creates* the session, so
whoever starts Spark first must pass them: :func:`get_or_create_session` does, and later ``getOrCreate()`` calls
(dbt-spark's, user code's) reuse that session.

``spark_catalog`` stays Spark's session catalog wrapped by Iceberg's ``SparkSessionCatalog`` (tables and views live
in one Hive metastore; non-Iceberg tables keep working): a Hadoop catalog as the default catalog breaks dbt-spark's
relation listing. The metastore is embedded Derby inside the warehouse folder, so nothing lands in the working folder.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from partialcow.exceptions import ConfigurationError
from partialcow.formats import TABLE_FORMATS, TableFormat
from partialcow.spark.class_cache import discard as discard_class_sharing
from partialcow.spark.class_cache import driver_class_sharing_options
from partialcow.spark.executors import check_executors, worker_environment, worker_python
from partialcow.spark.jars import JarSet, ensure_jars, resolve_delta_jars, resolve_iceberg_runtime
from partialcow.spark.metastore import (
    EMBEDDED_METASTORE_CONF,
    LOCK_CONF,
    prepare_embedded_metastore,
    wait_for_embedded_metastore,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "SessionSettings",
    "TableFormat",
    "get_or_create_session",
    "launch",
    "session_table_format",
    "spark_conf",
    "start_session",
    "warehouse_path",
]


# Settings that must match when a session already runs: otherwise tables would land in another catalog or folder.
_STATIC_KEYS = ("spark.sql.catalog.spark_catalog", "spark.sql.extensions", "spark.sql.warehouse.dir")

# Spark's driver log configuration: errors only (see the file).
QUIET_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")

# The driver JVM's collector, unless the user's Java options choose one (two collectors stop the JVM from starting).
# A dbt process is a short batch job: throughput matters, pauses do not, and G1's barriers also make the JIT compile
# more code in a JVM that spends much of its CPU compiling (bench/README.md, measurements behind code choices).
DRIVER_GC = "-XX:+UseParallelGC"
# The driver JVM's JIT, unless the user's Java options choose one: the optimizing compiler (C2) only for methods ten
# times hotter than its defaults ask. A fresh process spends most of its JVM's CPU compiling, C2 on a core the model
# itself needs, for code that mostly does not run long enough in one dbt process to pay that back; truly hot loops
# (a first build's scan) still get C2. The quick compiler alone slowed first builds down (bench/README.md). In a
# cluster only the driver gets these; in local mode the driver also runs the tasks.
DRIVER_JIT = ("-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
              "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000")
# option -> the pattern of the user's options that choose the same thing (ours is then left out)
_DRIVER_DEFAULTS = {
    DRIVER_GC: re.compile(r"-XX:[+]Use\w*GC\b"),
    DRIVER_JIT: re.compile(r"-XX:(TieredStopAtLevel=|[+-]TieredCompilation\b|Tier\w*Threshold=|"
                           r"CompileThresholdScaling=)|-X(int|comp|mixed)\b"),
}
# where else a JVM takes options from: Spark's driver defaults and the variables every JVM reads
_JAVA_OPTION_SOURCES = ("spark.driver.defaultJavaOptions", "spark.driver.extraJavaOptions")
_JAVA_OPTION_VARIABLES = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")


def warehouse_path(warehouse: str) -> Path:
    """The absolute local folder of ``warehouse`` (a path or a ``file:`` URI).

    >>> warehouse_path("file:///tmp/wh").as_posix()
    '/tmp/wh'
    """
    if warehouse.startswith("file:"):
        warehouse = warehouse[len("file:") :]
        warehouse = "/" + warehouse.lstrip("/")
    elif "://" in warehouse:
        raise ConfigurationError(
            f"warehouse {warehouse!r}: the embedded session keeps its metastore in a local warehouse folder; use a "
            "local path, or point spark_config at your own catalog"
        )
    return Path(warehouse).expanduser().absolute()


def resolve_warehouse(warehouse: str, project_dir: str | os.PathLike[str] | None) -> str:
    """The folder a profile's ``warehouse`` names: a ``file:`` URI's folder, a relative path in the dbt project's
    folder (not the current one); a remote URI is refused (see :func:`warehouse_path`).

    >>> resolve_warehouse("file:///tmp/wh", "/proj"), resolve_warehouse("wh", "/proj"), resolve_warehouse("/w", "/p")
    ('/tmp/wh', '/proj/wh', '/w')
    """
    if warehouse.startswith("file:") or "://" in warehouse:
        return warehouse_path(warehouse).as_posix()
    path = Path(warehouse).expanduser()
    if not path.is_absolute() and project_dir:
        path = Path(project_dir) / path
    return os.path.abspath(path)


def _jars(table_format: str, iceberg_runtime: str, delta_jars: Sequence[str] | None) -> JarSet:
    if table_format == "iceberg":
        return resolve_iceberg_runtime(iceberg_runtime)
    return resolve_delta_jars(delta_jars)


@dataclass(frozen=True)
class SessionSettings:
    """Everything the embedded session is started with: the profile's fields, typed once.

    ``extra`` entries win over ours, except ``spark.jars`` and ``spark.jars.packages``, which are appended to ours.
    ``iceberg_runtime`` is ``auto``, ``offline``, ``maven``, Maven coordinates or a jar path (see
    :func:`partialcow.spark.jars.resolve_iceberg_runtime`); ``delta_jars`` lists jar paths or Maven coordinates (or
    ``maven``) for delta-spark, which ``table_format="delta"`` requires. ``class_cache`` lets the driver JVM map the
    classes an earlier process loaded (:mod:`partialcow.spark.class_cache`).

    >>> SessionSettings(table_format="iceberg", warehouse="/tmp/wh").master
    'local[*]'
    """

    table_format: TableFormat
    warehouse: str
    master: str = "local[*]"
    extra: Mapping[str, str] = field(default_factory=dict)
    iceberg_runtime: str = "auto"
    delta_jars: tuple[str, ...] = ()
    class_cache: bool = True

    def __post_init__(self) -> None:
        if self.table_format not in TABLE_FORMATS:
            raise ConfigurationError(
                f"table_format {self.table_format!r} is not supported: use one of {', '.join(TABLE_FORMATS)}"
            )
        object.__setattr__(self, "extra", {str(k): str(v) for k, v in self.extra.items()})
        object.__setattr__(self, "delta_jars", tuple(self.delta_jars))


def spark_conf(settings: SessionSettings) -> dict[str, str]:
    """Every static Spark setting of the embedded session (no side effects: nothing is built or started).

    >>> conf = spark_conf(SessionSettings(table_format="iceberg", warehouse="/tmp/wh", master="local[2]",
    ...                                   extra={"spark.sql.shuffle.partitions": "8"}))
    >>> conf["spark.sql.catalog.spark_catalog"], conf["spark.sql.shuffle.partitions"]
    ('org.apache.iceberg.spark.SparkSessionCatalog', '8')
    """
    jars = _jars(settings.table_format, settings.iceberg_runtime, settings.delta_jars)
    return _conf(settings.table_format, warehouse_path(settings.warehouse), settings.master, settings.extra, jars)


def _conf(
    table_format: str, folder: Path, master: str, extra: Mapping[str, str] | None, jars: JarSet
) -> dict[str, str]:
    conf = {
        "spark.master": master,
        "spark.app.name": "partialcow",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Spark's default of 200 shuffle partitions makes every small local query schedule 200 tasks.
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.memory": "2g",
        # Hive-backed session catalog: dbt's schemas and views and Iceberg's tables share one persistent metastore.
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(folder),
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true"
        ),
        "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
        **EMBEDDED_METASTORE_CONF,
        # derby.log goes next to the metastore instead of the working folder; Spark's own log shows errors only.
        # Spark's launcher splits these options as a shell would: a space in the warehouse's path would stop the JVM.
        "spark.driver.extraJavaOptions": shlex.quote(f"-Dderby.stream.error.file={folder / 'derby.log'}")
        + " " + shlex.quote(f"-Dlog4j2.configurationFile={QUIET_LOG_CONFIG.as_uri()}"),
        # PySpark's daemon with zip import caches kept and the task modules imported before forking (worker_daemon)
        "spark.python.daemon.module": "partialcow.spark.worker_daemon",
    }
    if master.startswith("local"):
        # A container's hostname often does not resolve; the local driver only needs loopback.
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.driver.host"] = "127.0.0.1"
    if table_format == "iceberg":
        conf.update(
            {
                "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
                "spark.sql.catalog.spark_catalog": "org.apache.iceberg.spark.SparkSessionCatalog",
                "spark.sql.catalog.spark_catalog.type": "hive",
                # Hive locks around every commit (see partialcow.spark.metastore, which creates their tables)
                **LOCK_CONF,
                # Iceberg's table cache misses DROP SCHEMA ... CASCADE through the session catalog: a re-created
                # table of the same name would be reported as existing (dbt drops and re-creates schemas often).
                "spark.sql.catalog.spark_catalog.cache-enabled": "false",
                # Pin v2: our partial rewrites refuse v3 row lineage and deletion vectors, so a future runtime
                # defaulting to v3 must not silently create tables we cannot update.
                "spark.sql.catalog.spark_catalog.table-default.format-version": "2",
            }
        )
    else:
        conf.update(
            {
                "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
                # Delta rebuilds a table's state from its log in this many partitions (default 50): as with shuffle
                # partitions, a local process's first read of each table would schedule 50 tasks
                "spark.databricks.delta.snapshotPartitions": "4",
            }
        )
    user = {str(k): str(v) for k, v in (extra or {}).items()}
    users_java = user.get("spark.driver.extraJavaOptions", "")
    chosen = [user.get(k, "") for k in _JAVA_OPTION_SOURCES] + [os.environ.get(v, "") for v in _JAVA_OPTION_VARIABLES]
    for option, pattern in _DRIVER_DEFAULTS.items():
        if not any(pattern.search(options) for options in chosen):
            conf["spark.driver.extraJavaOptions"] += f" {option}"
    # Java options are appended: the last -D of a property wins, so the user's override ours one by one.
    if users_java:
        user["spark.driver.extraJavaOptions"] = f"{conf['spark.driver.extraJavaOptions']} {users_java}"
    # Lists are merged, not replaced: a user adding a JDBC driver jar, or a session extension of another library
    # (Sedona's), must not silently lose the table format's runtime or its SQL (MERGE, CALL).
    extensions = [e for e in conf.get("spark.sql.extensions", "").split(",") if e]
    for key, ours in (("spark.jars", jars.jars), ("spark.jars.packages", jars.packages),
                      ("spark.sql.extensions", extensions)):
        items = [*ours, *(i.strip() for i in user.pop(key, "").split(",") if i.strip())]
        if items:
            conf[key] = ",".join(dict.fromkeys(items))
    conf.update(user)
    return conf


def _local_folder(warehouse: str) -> Path | None:
    """The local folder a ``spark.sql.warehouse.dir`` names; None for a remote URI (a profile's own storage, set
    through ``spark_config``).

    >>> _local_folder("file:/tmp/wh").as_posix(), _local_folder("s3a://bucket/wh")
    ('/tmp/wh', None)
    """
    return warehouse_path(warehouse) if warehouse.startswith("file:") or "://" not in warehouse else None


def _normalised(key: str, value: str | None) -> str | None:
    """Spark reports the warehouse as a ``file:`` URI; compare folders, not spellings (a remote URI as it is)."""
    if key == "spark.sql.warehouse.dir" and value is not None:
        folder = _local_folder(value)
        return value if folder is None else folder.as_posix()
    return value


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigurationError(
            f"warehouse {str(folder)!r} is not a writable folder ({exc.strerror or exc}): choose another warehouse path"
        ) from exc


def get_or_create_session(
    *,
    table_format: TableFormat,
    warehouse: str,
    master: str = "local[*]",
    extra: Mapping[str, str] | None = None,
    iceberg_runtime: str = "auto",
    delta_jars: Sequence[str] | None = None,
    class_cache: bool = True,
) -> SparkSession:
    """:func:`start_session` with the fields of :class:`SessionSettings` as keywords.

    >>> spark = get_or_create_session(table_format="iceberg", warehouse="/tmp/partialcow-doc-wh")  # doctest: +SKIP
    >>> spark.sql("CREATE TABLE t (id BIGINT) USING iceberg")  # doctest: +SKIP
    """
    return start_session(
        SessionSettings(
            table_format=table_format,
            warehouse=warehouse,
            master=master,
            extra=extra or {},
            iceberg_runtime=iceberg_runtime,
            delta_jars=tuple(delta_jars or ()),
            class_cache=class_cache,
        )
    )


def start_session(settings: SessionSettings) -> SparkSession:
    """Start the embedded SparkSession (or return the running one if it has the same catalog and warehouse).

    Creates the warehouse folder, builds the relocated Jackson jar on first use of the offline Iceberg runtime, and
    refuses with ``ConfigurationError`` when a session already runs with another catalog, extensions or warehouse
    (static settings cannot change in a running JVM).
    """
    conf = spark_conf(settings)
    folder = _local_folder(conf["spark.sql.warehouse.dir"])
    if folder is not None:  # a remote warehouse is the user's storage: nothing to create here
        _check_writable(folder)

    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        session = SparkSession.builder.getOrCreate()
        running = session.sparkContext.getConf()
        for key in _STATIC_KEYS:
            if key in conf and _normalised(key, running.get(key)) != _normalised(key, conf[key]):
                raise ConfigurationError(
                    f"a SparkSession already runs with {key}={running.get(key)!r}, not {conf[key]!r}: stop it "
                    "(spark.stop()) or let partialcow create the session first"
                )
        return session

    ensure_jars(_jars(settings.table_format, settings.iceberg_runtime, settings.delta_jars))
    java_options = conf["spark.driver.extraJavaOptions"]
    sharing = driver_class_sharing_options(conf) if settings.class_cache else ""
    if sharing:
        conf["spark.driver.extraJavaOptions"] = f"{java_options} {sharing}"
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    python = worker_python(conf)
    wait_for_embedded_metastore(conf)
    try:
        session = launch(builder, python)
    except ConfigurationError:
        if not sharing:
            raise
        # a JVM that cannot start with the class archive (a damaged one crashes it): the archive goes, the session
        # starts without it
        discard_class_sharing(sharing)
        session = launch(builder.config("spark.driver.extraJavaOptions", java_options), python)
    if not conf["spark.master"].startswith("local") or python != sys.executable:
        # executors with another Python: one small task says what they lack before a model's tasks fail
        try:
            check_executors(session)
        except ConfigurationError:
            session.stop()
            raise
    prepare_embedded_metastore(session, locks=settings.table_format == "iceberg")
    return session


def launch(builder: Any, python: str | None) -> SparkSession:
    """``builder.getOrCreate()`` with PySpark's workers started by ``python`` (see ``worker_python``), and a JVM
    that cannot start reported in one line."""
    try:
        with worker_environment(python):
            return builder.getOrCreate()  # type: ignore[no-any-return]
    except Exception as exc:  # pyspark raises bare RuntimeError/PySparkRuntimeError when the JVM cannot start
        if "JAVA_GATEWAY_EXITED" in str(exc) or "Java gateway process exited" in str(exc):
            raise ConfigurationError(
                f"Spark could not start a JVM (JAVA_HOME={os.environ.get('JAVA_HOME', 'unset')}): install Java 17 "
                "and set JAVA_HOME; `partialcow doctor` shows what is found"
            ) from exc
        raise


_SESSION_CATALOGS = {
    "org.apache.iceberg.spark.SparkSessionCatalog": "iceberg",
    "org.apache.spark.sql.delta.catalog.DeltaCatalog": "delta",
}


def session_table_format(spark: SparkSession) -> str | None:
    """The table format the session's ``spark_catalog`` holds (``iceberg`` or ``delta``), None for neither.

    One session catalog holds one format: Iceberg's ``SparkSessionCatalog`` or Delta's ``DeltaCatalog``.
    """
    return _SESSION_CATALOGS.get(spark.sparkContext.getConf().get("spark.sql.catalog.spark_catalog") or "")
