"""spark_conf and the checks get_or_create_session makes before starting Spark (no JVM here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from partialcow.exceptions import ConfigurationError, JarNotFoundError
from partialcow.spark import jars
from partialcow.spark.session import DRIVER_JIT, SessionSettings, get_or_create_session, spark_conf


def _conf(**kwargs: object) -> dict[str, str]:
    options = {"table_format": "iceberg", "warehouse": "/tmp/wh", "master": "local[2]", "iceberg_runtime": "maven"}
    options.update(kwargs)
    return spark_conf(SessionSettings(**options))  # type: ignore[arg-type]


def test_iceberg_defaults() -> None:
    conf = _conf()
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.iceberg.spark.SparkSessionCatalog"
    assert conf["spark.sql.catalog.spark_catalog.type"] == "hive"
    assert conf["spark.sql.extensions"] == "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    assert conf["spark.sql.catalog.spark_catalog.lock-enabled"] == "true"
    assert conf["spark.hadoop.iceberg.engine.hive.lock-enabled"] == "true"
    assert conf["spark.sql.catalog.spark_catalog.table-default.format-version"] == "2"
    assert conf["spark.sql.warehouse.dir"] == "/tmp/wh"
    assert conf["spark.hadoop.javax.jdo.option.ConnectionURL"] == "jdbc:derby:;databaseName=/tmp/wh/metastore_db;create=true"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.ui.enabled"] == "false"
    assert int(conf["spark.sql.shuffle.partitions"]) <= 8
    assert conf["spark.jars.packages"] == jars.ICEBERG_MAVEN
    assert "spark.jars" not in conf


def test_user_settings_win() -> None:
    conf = _conf(extra={"spark.sql.shuffle.partitions": "64", "spark.driver.memory": "6g", "spark.x.custom": "1"})
    assert conf["spark.sql.shuffle.partitions"] == "64"
    assert conf["spark.driver.memory"] == "6g"
    assert conf["spark.x.custom"] == "1"


@pytest.mark.parametrize(("users", "parallel"), [
    (None, True),
    ("-Xss4m -Dx=1", True),  # options that choose no collector keep ours
    ("-XX:+UseG1GC", False),  # a second collector would stop the JVM from starting
    ("-Xss4m -XX:+UseZGC", False),
])
def test_driver_collector_unless_the_user_chooses_one(users: str | None, parallel: bool) -> None:
    extra = {"spark.driver.extraJavaOptions": users} if users else {}
    options = _conf(extra=extra)["spark.driver.extraJavaOptions"].split()
    assert ("-XX:+UseParallelGC" in options) is parallel
    assert sum(o.startswith("-XX:+Use") and o.endswith("GC") for o in options) == 1
    if users:
        assert options[-len(users.split()):] == users.split()  # the user's options come last


@pytest.mark.parametrize("variable", ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"])
def test_no_driver_collector_when_the_environment_chooses_one(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(variable, "-Xss4m -XX:+UseSerialGC")
    assert "-XX:+UseParallelGC" not in _conf()["spark.driver.extraJavaOptions"]
    monkeypatch.setenv(variable, "-Xss4m")
    assert "-XX:+UseParallelGC" in _conf()["spark.driver.extraJavaOptions"]


def test_no_driver_collector_when_spark_defaults_choose_one() -> None:
    conf = _conf(extra={"spark.driver.defaultJavaOptions": "-XX:+UseZGC"})
    assert "-XX:+UseParallelGC" not in conf["spark.driver.extraJavaOptions"]


@pytest.mark.parametrize(("users", "late"), [
    (None, True),
    ("-Xss4m -XX:+UseG1GC", True),  # a collector is not a JIT choice
    ("-XX:TieredStopAtLevel=1", False),  # the user's own JIT choice
    ("-XX:-TieredCompilation", False),
    ("-XX:Tier3InvocationThreshold=100", False),
    ("-Xint", False),
])
def test_driver_late_c2_unless_the_user_chooses_a_jit(users: str | None, late: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"spark.driver.extraJavaOptions": users} if users else {}
    options = _conf(extra=extra)["spark.driver.extraJavaOptions"].split()
    assert all((o in options) is late for o in DRIVER_JIT.split())
    monkeypatch.setenv("JDK_JAVA_OPTIONS", "-XX:+TieredCompilation")  # the environment's choice counts too
    assert "-XX:Tier4CompileThreshold=150000" not in _conf()["spark.driver.extraJavaOptions"]


def test_user_jars_are_added_to_ours(tmp_path: Path) -> None:
    driver = tmp_path / "postgresql.jar"
    driver.write_bytes(b"PK")
    conf = _conf(extra={"spark.jars": str(driver), "spark.jars.packages": f"org.x:y:1, {jars.ICEBERG_MAVEN}"})
    assert conf["spark.jars"] == str(driver)
    assert conf["spark.jars.packages"] == f"{jars.ICEBERG_MAVEN},org.x:y:1"  # ours first, no duplicates


def test_user_can_override_the_format_version() -> None:
    conf = _conf(extra={"spark.sql.catalog.spark_catalog.table-default.format-version": "1"})
    assert conf["spark.sql.catalog.spark_catalog.table-default.format-version"] == "1"


def test_warehouse_is_made_absolute_and_file_uris_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _conf(warehouse="wh")["spark.sql.warehouse.dir"] == str(tmp_path / "wh")
    assert _conf(warehouse=f"file://{tmp_path}/w2")["spark.sql.warehouse.dir"] == str(tmp_path / "w2")
    with pytest.raises(ConfigurationError, match="s3a://bucket/wh"):
        _conf(warehouse="s3a://bucket/wh")


def test_offline_runtime_goes_to_spark_jars() -> None:
    if jars._wheel_runtime_jar() is None:
        pytest.skip("snowpark-connect-deps-iceberg is not installed")
    conf = _conf(iceberg_runtime="offline")
    listed = conf["spark.jars"].split(",")
    assert listed[0].endswith("iceberg-spark-runtime-3.5_2.12-1.10.2.jar")
    assert Path(listed[1]).name.startswith("iceberg-jackson-")
    assert "spark.jars.packages" not in conf


def test_delta_without_jars_is_refused() -> None:
    with pytest.raises(JarNotFoundError, match="delta_jars"):
        _conf(table_format="delta")
    with pytest.raises(JarNotFoundError, match="delta_jars"):
        _conf(table_format="delta", delta_jars=[])


def test_delta_with_jars(tmp_path: Path) -> None:
    jar = tmp_path / "delta-spark_2.12-3.3.2.jar"
    jar.write_bytes(b"PK")
    conf = _conf(table_format="delta", delta_jars=[str(jar)])
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.jars"] == str(jar)
    assert "iceberg" not in " ".join(conf.values())


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="hudi"):
        _conf(table_format="hudi")


def test_unwritable_warehouse_is_refused_before_spark_starts(tmp_path: Path) -> None:
    # A folder below a regular file can never be created (works as root too, unlike chmod).
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ConfigurationError, match="a-file/wh"):
        get_or_create_session(table_format="iceberg", warehouse=str(blocker / "wh"), iceberg_runtime="maven")


def test_a_users_session_extension_is_added_to_ours() -> None:
    """Regression: a profile adding another library's extension (Sedona's) replaced Iceberg's, and MERGE and CALL
    then failed to parse, far from the setting that caused it."""
    conf = _conf(extra={"spark.sql.extensions": "org.apache.sedona.sql.SedonaSqlExtensions"})
    assert conf["spark.sql.extensions"].split(",") == [
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions", "org.apache.sedona.sql.SedonaSqlExtensions"]


def test_a_profiles_warehouse_is_found_from_the_project_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the adapter joined a ``file:`` warehouse to the project folder (``<project>/file:/data/wh``: a
    second metastore, silently) and resolved ``dbt debug``'s against the current folder."""
    from partialcow.spark.session import resolve_warehouse

    monkeypatch.chdir(tmp_path)
    assert resolve_warehouse(f"file://{tmp_path}/wh", "/proj") == f"{tmp_path}/wh"
    assert resolve_warehouse("wh", "/proj") == "/proj/wh"
    assert resolve_warehouse("~/wh", "/proj") == str(Path.home() / "wh")
    assert resolve_warehouse("wh", None) == str(tmp_path / "wh")
    with pytest.raises(ConfigurationError, match="s3a://b/wh"):
        resolve_warehouse("s3a://b/wh", "/proj")


def test_a_metastore_another_process_holds_is_named_after_a_wait(tmp_path: Path) -> None:
    """Regression: a second process on the warehouse failed deep inside Hive's client after its retries, with
    thousands of lines of stack traces. The lock here is taken as Derby takes it (a POSIX lock on dbex.lck), by
    another process."""
    import subprocess
    import sys
    import time

    from partialcow.spark.metastore import wait_for_embedded_metastore

    database = tmp_path / "metastore_db"
    database.mkdir()
    (database / "dbex.lck").write_bytes(b"")
    conf = {"spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={database};create=true"}
    wait_for_embedded_metastore(conf, timeout=0.5)  # free: returns at once
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'rb+'); "
         "fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)", str(database / "dbex.lck")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(ConfigurationError, match=f"{database} is in use by another process"):
            wait_for_embedded_metastore(conf, timeout=0.5)
        assert time.monotonic() - started >= 0.5
        wait_for_embedded_metastore({**conf, "spark.hadoop.hive.metastore.uris": "thrift://hms:9083"}, timeout=0.5)
    finally:
        holder.kill()
        holder.wait()
    wait_for_embedded_metastore(conf, timeout=0.5)  # released when its process ended


def test_a_remote_warehouse_in_spark_config_is_left_to_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: with ``spark.sql.warehouse.dir: s3a://...`` in ``spark_config`` (a profile's own storage), the
    session start created a local ``s3a:/...`` folder in the current one, and every later start in the process (each
    Python model's) refused the running session's warehouse as not local."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from partialcow.spark import session as sessions

    monkeypatch.chdir(tmp_path)
    settings = sessions.SessionSettings(table_format="iceberg", warehouse=str(tmp_path / "wh"),
                                        extra={"spark.sql.warehouse.dir": "s3a://bucket/wh"})
    conf = sessions.spark_conf(settings)

    class Running:  # what a started session reports: the settings it was started with
        class sparkContext:  # noqa: N801
            @staticmethod
            def getConf():
                return conf

    monkeypatch.setattr(SparkContext, "_active_spark_context", object())
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", lambda self: Running)
    assert sessions.start_session(settings) is Running
    assert not (tmp_path / "s3a:").exists()
