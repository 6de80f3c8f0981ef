"""The driver JVM's class-sharing archive: when one is written, when one is used, and never a truncated one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from budget import LONG
from partialcow.spark import class_cache
from partialcow.spark.class_cache import archive_key, driver_class_sharing_options

ADAPTER = Path(__file__).resolve().parents[2] / "adapter"
CONF = {"spark.jars": "/nonexistent/runtime.jar"}
KEY = archive_key(CONF)


@pytest.fixture(autouse=True)
def _java_17(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The option tests describe a Java 17 machine, whatever Java runs them (the JVM test uses the real one)."""
    if "fresh_processes" not in request.node.name and "java_version" not in request.node.name:
        monkeypatch.setattr(class_cache, "java_feature_version", lambda java=None: 17)


def _options(folder: Path, conf: dict[str, str] | None = None, **kwargs: int) -> str:
    return driver_class_sharing_options(conf or CONF, folder=folder, **kwargs)


def _finish_dump(options: str, *, size: int, announced: int | None = None) -> Path:
    """Do what the JVM does at exit: write the archive named in ``options`` and log that it is written."""
    dump = Path(options.split("-XX:ArchiveClassesAtExit=")[1].split()[0])
    log = Path(options.split("file=")[1].split()[0])
    dump.write_bytes(b"\0" * size)
    log.write_text(
        "[1.0s][info][cds,dynamic] Copying 10 klasses and 20 symbols\n"
        f"[1.2s][info][cds,dynamic] Written dynamic archive 0x0 - 0x1 [984 bytes header, {announced or size} bytes"
        " total]\n"
    )
    return dump


def test_first_session_marks_second_writes_third_maps(tmp_path: Path) -> None:
    assert _options(tmp_path) == ""  # a cache folder that has not outlived a process gets no dump
    writing = _options(tmp_path)
    assert "-XX:ArchiveClassesAtExit=" in writing and "-Xlog:cds*=off" in writing
    assert _options(tmp_path) == ""  # one dump per key at a time
    _finish_dump(writing, size=4096)
    mapped = _options(tmp_path)
    assert mapped == f"-XX:SharedArchiveFile={tmp_path / f'{KEY}.jsa'} -Xlog:cds*=off " \
        f"-XX:ErrorFile={tmp_path / 'hs_err_pid%p.log'}"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{KEY}.jsa", f"{KEY}.seen"]  # claim and log are gone
    assert _options(tmp_path) == mapped


def test_truncated_archive_is_never_used(tmp_path: Path) -> None:
    """A JVM maps an archive shorter than its header says and crashes (SIGBUS): such a file is discarded."""
    _options(tmp_path)
    writing = _options(tmp_path)
    dump = _finish_dump(writing, size=1000, announced=4096)
    assert "-XX:SharedArchiveFile" not in _options(tmp_path)
    assert not dump.exists() and not (tmp_path / f"{KEY}.jsa").exists()


def test_unfinished_dump_is_waited_for_then_taken_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _options(tmp_path)
    writing = _options(tmp_path)
    dump = Path(writing.split("-XX:ArchiveClassesAtExit=")[1].split()[0])
    dump.write_bytes(b"\0" * 4096)  # the JVM is still writing: no line in the log yet
    assert _options(tmp_path) == ""
    monkeypatch.setattr(class_cache, "STALE_DUMP_SECONDS", -1.0)  # its JVM died
    again = _options(tmp_path)
    assert "-XX:ArchiveClassesAtExit=" in again and again != writing


def test_dumps_that_never_finish_stop_being_tried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: where every JVM is killed before it writes its archive (a container runtime ending the process
    group at exit), each hour another session paid for a dump that never came."""
    _options(tmp_path)
    monkeypatch.setattr(class_cache, "STALE_DUMP_SECONDS", -1.0)  # every claim is old at once
    for _ in range(2):
        writing = _options(tmp_path)
        assert "-XX:ArchiveClassesAtExit=" in writing
        Path(writing.split("file=")[1].split()[0]).write_text("[1.0s][info][cds,dynamic] Regenerate MethodHandle\n")
    assert _options(tmp_path) == ""  # two dumps died unfinished: none tried until they are a day old
    day_old = time.time() - 2 * 86400
    for log in tmp_path.glob(f"{KEY}.*.dump.log"):
        os.utime(log, (day_old, day_old))
    assert "-XX:ArchiveClassesAtExit=" in _options(tmp_path)


def test_what_other_keys_left_is_swept_after_a_day(tmp_path: Path) -> None:
    """Regression: dumps, claims and marks of keys no session uses any more (an older set of jars, another Java)
    stayed for good (dumps of up to 160 MB)."""
    old = {name: tmp_path / name for name in ("0123456789abcdef.1-2.dump.jsa", "0123456789abcdef.1-2.dump.log",
                                              "0123456789abcdef.claim", "0123456789abcdef.seen")}
    recent = tmp_path / "fedcba9876543210.seen"
    for path in [*old.values(), recent]:
        path.write_bytes(b"x")
    day_old = time.time() - 2 * 86400
    for path in old.values():
        os.utime(path, (day_old, day_old))
    _options(tmp_path)
    _finish_dump(_options(tmp_path), size=10)
    assert "-XX:SharedArchiveFile" in _options(tmp_path)
    assert not any(p.exists() for p in old.values()) and recent.exists()
    assert (tmp_path / f"{KEY}.seen").exists()


def test_other_keys_are_evicted_beyond_keep(tmp_path: Path) -> None:
    for n in range(3):
        conf = {"spark.jars": f"/nonexistent/{n}.jar"}
        _options(tmp_path, conf)
        _finish_dump(_options(tmp_path, conf), size=10)
        assert "-XX:SharedArchiveFile" in _options(tmp_path, conf, keep=2)
        time.sleep(0.01)
    archives = sorted(p.name for p in tmp_path.glob("*.jsa"))
    assert archives == sorted(f"{archive_key({'spark.jars': f'/nonexistent/{n}.jar'})}.jsa" for n in (1, 2))


def test_user_class_sharing_options_and_switch_turn_it_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _options(tmp_path)
    user = {**CONF, "spark.driver.extraJavaOptions": "-Xshare:off"}
    assert _options(tmp_path, user) == ""
    monkeypatch.setenv("PARTIALCOW_CLASS_CACHE", "0")
    assert _options(tmp_path) == ""
    monkeypatch.delenv("PARTIALCOW_CLASS_CACHE")
    assert "-XX:ArchiveClassesAtExit=" in _options(tmp_path)


@pytest.mark.parametrize("variable", ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"])
def test_class_sharing_options_in_the_jvms_variables_turn_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """Regression: only the session's extraJavaOptions were looked at; an -Xshare:on of the user's in a variable every
    JVM reads, with an archive the JVM refuses, stops the JVM."""
    _options(tmp_path)
    monkeypatch.setenv(variable, "-Xshare:on")
    assert _options(tmp_path) == ""
    monkeypatch.delenv(variable)
    assert "-XX:ArchiveClassesAtExit=" in _options(tmp_path)


def test_a_non_empty_folder_on_the_class_path_turns_it_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: with a non-empty folder on the class path (a SPARK_CONF_DIR holding spark-defaults.conf, a folder in
    spark.driver.extraClassPath) the JVM refuses to write the archive when the process ends ("Cannot have non-empty
    directory in paths", printed after dbt has exited), every hour again."""
    cache, conf_dir = tmp_path / "cache", tmp_path / "conf"
    conf_dir.mkdir()
    _options(cache)
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    assert "-XX:ArchiveClassesAtExit=" in _options(cache)  # an empty folder is no obstacle
    (cache / f"{KEY}.claim").unlink()
    (conf_dir / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    assert _options(cache) == ""
    monkeypatch.delenv("SPARK_CONF_DIR")
    assert _options(cache, {**CONF, "spark.driver.extraClassPath": str(conf_dir)}) == ""
    assert "-XX:ArchiveClassesAtExit=" in _options(cache)


def test_key_follows_the_jars(tmp_path: Path) -> None:
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"one")
    before = archive_key({"spark.jars": str(jar)})
    jar.write_bytes(b"three")  # an upgraded jar at the same path
    assert archive_key({"spark.jars": str(jar)}) != before


_SESSION = """
import sys
from partialcow.spark.session import get_or_create_session
spark = get_or_create_session(table_format="iceberg", warehouse=sys.argv[1], master="local[1]",
                              extra={"spark.driver.extraJavaOptions": "-Xlog:class+load=info:file=" + sys.argv[2]})
assert spark.sql("select 41 + 1").collect()[0][0] == 42
"""


def _session(tmp_path: Path, name: str) -> str:
    """A fresh process's session; the origin the JVM logged for a Spark class it loaded."""
    classes = tmp_path / f"{name}.classes.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ADAPTER), os.environ.get("PYTHONPATH", "")]),
        "PARTIALCOW_CLASS_CACHE_DIR": str(tmp_path / "cache"),
    }
    env.pop("PARTIALCOW_CLASS_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-c", _SESSION, str(tmp_path / "wh"), str(classes)],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cds" not in done.stdout + done.stderr  # the JVM's class-sharing messages stay off dbt's output
    line = next(x for x in classes.read_text().splitlines() if " org.apache.spark.SparkContext " in x)
    return line.split("source: ", 1)[1]


@pytest.mark.spark
@pytest.mark.iceberg
@pytest.mark.slow
# three fresh JVMs and the archive's dump (47 s): in CI, tests/warm_class_cache.py writes and promotes an archive
# before the suite runs, and every later session of the suite starts from it
@pytest.mark.skipif(not LONG, reason="CI's time budget: PARTIALCOW_TESTS_LONG=1 runs it (see tests/budget.py)")
def test_fresh_processes_write_then_map_the_archive(tmp_path: Path) -> None:
    assert _session(tmp_path, "first").startswith("file:")  # from Spark's jar
    assert _session(tmp_path, "second").startswith("file:")  # writes the archive as its JVM exits
    cache = tmp_path / "cache"
    deadline = time.monotonic() + 120
    while not list(cache.glob("*.dump.log")) or not any(
        "Written dynamic archive" in log.read_text() for log in cache.glob("*.dump.log")
    ):
        assert time.monotonic() < deadline, sorted(p.name for p in cache.iterdir())
        time.sleep(0.5)
    assert _session(tmp_path, "third") == "shared objects file (top)"
    assert len(list(cache.glob("*.jsa"))) == 1


_DAMAGED = """
import sys
from partialcow.spark import session as session_module
# what a damaged archive does to the JVM, without one: options with which it cannot start
session_module.driver_class_sharing_options = lambda conf: f"-XX:SharedArchiveFile={sys.argv[2]} -Xshare:on"
spark = session_module.get_or_create_session(table_format="iceberg", warehouse=sys.argv[1], master="local[1]")
assert spark.sql("select 41 + 1").collect()[0][0] == 42
"""


@pytest.mark.spark
@pytest.mark.iceberg
@pytest.mark.slow
def test_a_jvm_that_cannot_start_with_the_archive_starts_without_it(tmp_path: Path) -> None:
    """Regression: a truncated archive crashes every JVM that maps it (SIGBUS, an hs_err file in the dbt project),
    and every run failed with "Spark could not start a JVM ... install Java 17" until the cache was deleted by hand.
    The archive is discarded and the session starts without it."""
    archive = tmp_path / "0123456789abcdef.jsa"
    archive.write_bytes(b"\0" * 4096)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ADAPTER), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _DAMAGED, str(tmp_path / "wh"), str(archive)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not archive.exists()


@pytest.mark.parametrize(
    ("release", "expected"),
    [('JAVA_VERSION="17.0.15"\n', 17), ('JAVA_VERSION="1.8.0_392"\n', 8), ('JAVA_VERSION="11"\n', 11), ("", None)],
)
def test_java_version_from_the_release_file(tmp_path: Path, release: str, expected: int | None) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").write_text("")
    (tmp_path / "release").write_text(release)
    assert class_cache.java_feature_version(str(tmp_path / "bin" / "java")) == expected


def test_no_option_for_a_java_without_dynamic_archives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Java 8 refuses -Xlog and would not start at all."""
    monkeypatch.setattr(class_cache, "java_feature_version", lambda java=None: 8)
    _options(tmp_path)
    assert _options(tmp_path) == ""


def test_doctor_line_counts_the_archives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(class_cache, "java_feature_version", lambda java=None: 17)
    _options(tmp_path)
    _finish_dump(_options(tmp_path), size=3 << 20)
    _options(tmp_path)  # promotes it
    assert class_cache.describe(tmp_path).startswith(f"on: 1 archive(s), 3 MB in {tmp_path} ")


def test_folder_that_java_options_cannot_name_is_not_used(tmp_path: Path) -> None:
    odd = tmp_path / "with space"
    _options(odd)
    assert _options(odd) == "" and not odd.exists()


def test_profile_setting_reaches_the_session_settings() -> None:
    from partialcow.dbt_adapter.connections import PartialcowCredentials

    profile = {"schema": "s", "class_cache": False, "warehouse": "/tmp/wh", "spark_config": {"spark.x": 1}}
    settings = PartialcowCredentials.from_dict(profile).session_settings()
    assert settings.class_cache is False and settings.extra["spark.x"] == "1"
    assert PartialcowCredentials.from_dict({"schema": "s"}).session_settings().class_cache is True
