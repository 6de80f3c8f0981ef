"""Sessions that cannot share this test process's JVM (one SparkSession per JVM): run in a child process."""

from __future__ import annotations

import json
import signal
import os
import subprocess
import sys
from pathlib import Path

import pytest

ADAPTER = Path(__file__).resolve().parents[2] / "adapter"


def _python(code: str, *, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ADAPTER), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.spark
@pytest.mark.iceberg
@pytest.mark.slow
def test_doctor_probe_starts_spark_and_leaves_nothing_behind(tmp_path: Path) -> None:
    done = _python(
        "import sys; from partialcow.cli import main; sys.exit(main(['doctor', '--probe', '--output', 'json']))",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    probe = next(c for c in report["checks"] if c["name"] == "probe")
    assert probe["status"] == "ok", probe
    assert list(tmp_path.iterdir()) == []  # no metastore_db, derby.log or spark-warehouse in the working folder


_EXIT_WITH_THE_JVM_FROZEN = """
import atexit, os, signal, sys
from partialcow.spark.session import get_or_create_session

jvm = []
# registered first, so it runs last: the JVM is frozen as a busy machine leaves it, alive after Python has gone
atexit.register(lambda: os.kill(jvm[0], signal.SIGSTOP))
spark = get_or_create_session(table_format="iceberg", warehouse=sys.argv[1], master="local[2]")
spark.sql("CREATE SCHEMA IF NOT EXISTS first").collect()
jvm.append(spark._jvm.java.lang.ProcessHandle.current().pid())
print(jvm[0], flush=True)
"""


@pytest.mark.spark
@pytest.mark.iceberg
@pytest.mark.slow
def test_the_next_process_boots_the_metastore_while_the_last_jvm_still_ends(tmp_path: Path) -> None:
    """Regressions: a warehouse whose path holds a space stopped the JVM from starting. The driver JVM outlives its Python process while it shuts down, holding the embedded Derby
    metastore's lock; a dbt command started right after one ended (a scheduler's next job) failed to boot Derby,
    and Hive retried for seconds with thousands of lines of stack traces ("Another instance of Derby may have
    already booted the database")."""
    # a warehouse path with a space and a quote: the JVM's options name derby.log in it (the JVM did not start)
    warehouse = str(tmp_path / "a wh's")
    first = tmp_path / "first.py"
    first.write_text(_EXIT_WITH_THE_JVM_FROZEN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ADAPTER), os.environ.get("PYTHONPATH", "")])}
    out, err = tmp_path / "first.out", tmp_path / "first.err"
    with out.open("w") as stdout, err.open("w") as stderr:  # files, not pipes: the frozen JVM keeps them open
        done = subprocess.run([sys.executable, str(first), warehouse], cwd=tmp_path, env=env, stdout=stdout,
                              stderr=stderr, timeout=600)
    assert done.returncode == 0, err.read_text()[-2000:]
    jvm = int(out.read_text().split()[-1])
    try:
        second = _python(
            "from partialcow.spark.session import get_or_create_session; "
            f"spark = get_or_create_session(table_format='iceberg', warehouse={warehouse!r}, master='local[2]'); "
            "print(sorted(r[0] for r in spark.sql('SHOW SCHEMAS').collect()))",
            cwd=tmp_path, timeout=300,
        )
    finally:
        os.kill(jvm, signal.SIGKILL)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "'first'" in second.stdout, second.stdout
    assert "Another instance of Derby" not in second.stderr, second.stderr[-2000:]
    assert (Path(warehouse) / "derby.log").is_file()
