"""How dbt connections get their SparkSession: started early while dbt parses, reused while the same settings' session
runs, started again when the settings or the running context changed. Fakes stand in for Spark: what is checked is
which session each open returns and how many times one was started."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark import SparkContext

from partialcow.dbt_adapter import connections
from partialcow.dbt_adapter.connections import PartialcowConnectionManager, PartialcowCredentials, start_session_early

pytestmark = [pytest.mark.dbt]

REAL_CONFIGURED_SESSION = connections.configured_session


class FakeSession:
    def __init__(self, context: object) -> None:
        self.sparkContext = context


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Each start of a session: (thread name, warehouse). A started session becomes the active context, as Spark's
    does; a warehouse named 'broken' fails to start."""
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.setattr(PartialcowConnectionManager, "_sessions", {})
    monkeypatch.setattr(connections, "_early", {})
    monkeypatch.delenv("PARTIALCOW_EARLY_SESSION", raising=False)

    def configured_session(credentials: PartialcowCredentials) -> FakeSession:
        calls.append((threading.current_thread().name, Path(credentials.warehouse).name))
        if Path(credentials.warehouse).name == "broken":
            raise RuntimeError("cannot start")
        if SparkContext._active_spark_context is None:
            SparkContext._active_spark_context = object()  # type: ignore[assignment]
        return FakeSession(SparkContext._active_spark_context)

    monkeypatch.setattr(connections, "configured_session", configured_session)
    return calls


def _credentials(tmp_path: Path, warehouse: str = "wh", **extra: Any) -> PartialcowCredentials:
    return PartialcowCredentials(schema="s", warehouse=str(tmp_path / warehouse), **extra)


def test_open_reuses_the_running_session_of_the_same_settings(starts: list[tuple[str, str]], tmp_path: Path) -> None:
    credentials = _credentials(tmp_path)
    first = PartialcowConnectionManager._profile_session(credentials)
    assert PartialcowConnectionManager._profile_session(credentials) is first
    assert PartialcowConnectionManager._profile_session(_credentials(tmp_path)) is first
    assert len(starts) == 1


def test_open_starts_again_when_settings_or_context_changed(starts: list[tuple[str, str]], tmp_path: Path) -> None:
    PartialcowConnectionManager._profile_session(_credentials(tmp_path))
    # same profile key (master and warehouse), other settings: checked against the running session again
    PartialcowConnectionManager._profile_session(_credentials(tmp_path, spark_config={"spark.x": "1"}))
    assert len(starts) == 2
    SparkContext._active_spark_context = object()  # type: ignore[assignment]  # someone stopped and restarted Spark
    PartialcowConnectionManager._profile_session(_credentials(tmp_path, spark_config={"spark.x": "1"}))
    assert len(starts) == 3


@pytest.mark.parametrize("command", ["run", "build", "snapshot", "run-operation", "test", "seed", "show"])
def test_commands_with_sql_start_the_session_while_dbt_parses(starts: list[tuple[str, str]], tmp_path: Path,
                                                              command: str) -> None:
    credentials = _credentials(tmp_path)
    assert start_session_early(credentials, command)
    assert not start_session_early(credentials, command)  # once per profile
    session = PartialcowConnectionManager._profile_session(credentials)
    assert starts == [("partialcow-session-start", "wh")]
    assert PartialcowConnectionManager._profile_session(credentials) is session


@pytest.mark.parametrize("command", ["ls", "parse", "deps", "debug", "serve", None])
def test_commands_without_sql_start_nothing(starts: list[tuple[str, str]], tmp_path: Path,
                                            command: str | None) -> None:
    assert not start_session_early(_credentials(tmp_path), command)
    assert starts == []


def test_early_start_is_off_when_spark_runs_or_when_turned_off(starts: list[tuple[str, str]], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTIALCOW_EARLY_SESSION", "0")
    assert not start_session_early(_credentials(tmp_path), "run")
    monkeypatch.delenv("PARTIALCOW_EARLY_SESSION")
    SparkContext._active_spark_context = object()  # type: ignore[assignment]
    assert not start_session_early(_credentials(tmp_path), "run")
    assert starts == []


def test_a_failed_early_start_is_started_again_and_reported_by_open(starts: list[tuple[str, str]],
                                                                     tmp_path: Path) -> None:
    credentials = _credentials(tmp_path, "broken")
    assert start_session_early(credentials, "run")
    with pytest.raises(RuntimeError, match="cannot start"):
        PartialcowConnectionManager._profile_session(credentials)
    assert starts == [("partialcow-session-start", "broken"), ("MainThread", "broken")]


def test_an_early_session_of_other_settings_is_not_used(starts: list[tuple[str, str]], tmp_path: Path) -> None:
    assert start_session_early(_credentials(tmp_path), "run")
    PartialcowConnectionManager._profile_session(_credentials(tmp_path, spark_config={"spark.x": "1"}))
    assert [name for name, _ in starts].count("MainThread") == 1


def test_threads_opening_at_once_start_one_session(starts: list[tuple[str, str]], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # a slow start: without one opener at a time, every thread would find no session and start its own
    started = connections.configured_session
    gate = threading.Event()

    def slow(credentials: PartialcowCredentials) -> FakeSession:
        gate.wait(0.2)
        return started(credentials)

    monkeypatch.setattr(connections, "configured_session", slow)
    credentials = _credentials(tmp_path)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(PartialcowConnectionManager._profile_session(credentials)))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(starts) == 1 and len(got) == 4 and all(g is got[0] for g in got)


def test_an_early_start_that_waited_for_the_metastore_is_not_started_again(
        starts: list[tuple[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: with the embedded metastore held by another process, the early start waited 15 s for it, and
    ``open`` then started again and waited 15 s more before the same error."""
    from dbt_common.exceptions import DbtRuntimeError

    from partialcow.exceptions import MetastoreInUseError

    def start_session(settings: Any) -> FakeSession:
        starts.append((threading.current_thread().name, Path(settings.warehouse).name))
        raise MetastoreInUseError("the embedded metastore /wh/metastore_db is in use by another process")

    monkeypatch.setattr(connections, "configured_session", REAL_CONFIGURED_SESSION)  # the real error handling
    monkeypatch.setattr("partialcow.spark.session.start_session", start_session)
    credentials = _credentials(tmp_path)
    assert start_session_early(credentials, "run")
    with pytest.raises(DbtRuntimeError, match="is in use by another process"):
        PartialcowConnectionManager._profile_session(credentials)
    assert starts == [("partialcow-session-start", "wh")]


_EXIT_SCRIPT = """
import logging, sys
from partialcow.dbt_adapter.connections import skip_final_collection
logging.basicConfig(filename=sys.argv[2], level=logging.INFO)

class Cycle:
    def __del__(self):
        print("collected at exit", flush=True)

cycle = Cycle()
cycle.self = cycle
del cycle
if sys.argv[1] == "skip":
    skip_final_collection()
logging.getLogger("t").info("written before exit")
sys.exit(3)
"""


@pytest.mark.parametrize("skip", [False, True])
def test_a_dbt_process_skips_the_last_collection_but_keeps_its_exit_code_and_logs(tmp_path: Path, skip: bool) -> None:
    """The interpreter's last garbage collection over a dbt process's heap took about 0.45 s of every fresh
    `dbt run` (bench/README); a dbt process skips it. Without the skip the cycle's finalizer runs at exit, which is
    what shows the collection happened."""
    import subprocess
    import sys

    log = tmp_path / "log.txt"
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, "skip" if skip else "keep", str(log)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert ("collected at exit" in done.stdout) is not skip
    assert "written before exit" in log.read_text()


def test_loading_the_plugin_leaves_the_branch_machinery_and_pyarrow_unloaded() -> None:
    """dbt loads the plugin before the Spark session can start: whatever it imports delays the session of every
    dbt process (the branch package pulled in pyarrow and the page engine: 0.3 s)."""
    import subprocess
    import sys

    script = (
        "import sys, dbt.adapters.partialcow\n"
        "print(sorted(m for m in sys.modules if m == 'pyarrow' or m.startswith('partialcow.branch.')))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["['partialcow.branch.naming']"]
