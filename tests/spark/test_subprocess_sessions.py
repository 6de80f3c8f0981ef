"""Sessions that cannot share this test process's JVM (one SparkSession per JVM): run in a child process."""

from __future__ import annotations

import json
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
