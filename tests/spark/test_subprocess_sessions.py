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


from delta_env import NO_DELTA_SPARK, delta_spark_jars  # noqa: E402

_DELTA_JARS = delta_spark_jars()


@pytest.mark.spark
@pytest.mark.delta_spark
@pytest.mark.skipif(
    not _DELTA_JARS,
    reason=NO_DELTA_SPARK,
)
def test_delta_session_creates_and_merges(tmp_path: Path) -> None:
    code = f"""
from partialcow.spark.session import get_or_create_session
spark = get_or_create_session(table_format="delta", warehouse={str(tmp_path / 'wh')!r}, master="local[1]",
                              delta_jars={_DELTA_JARS!r})
spark.sql("CREATE TABLE default.d (id BIGINT, v STRING) USING delta")
spark.sql("INSERT INTO default.d VALUES (1, 'a'), (2, 'b')")
spark.sql("MERGE INTO default.d t USING (SELECT 2 AS id, 'B' AS v) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET *")
print(sorted((r.id, r.v) for r in spark.sql("SELECT * FROM default.d").collect()))
spark.stop()
"""
    done = _python(code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[(1, 'a'), (2, 'B')]"
