"""dbt-partialcow on a Spark standalone cluster (issue 27), in CI size: a master and one worker on loopback, started
from pyspark's own scripts (``bin/spark-class``).

The profile names the executors' Python with ``spark.pyspark.python`` (PySpark 3.5 itself only reads the
``PYSPARK_PYTHON`` environment variable, which the dbt processes here do not have, nor a ``PATH`` with the
virtualenv): a ``partial_cow_incremental`` model is built from a batch of changes, its staging, locate and write
tasks running in the worker's executor. An interpreter without dbt-partialcow stops the run at once with one line.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from independent_read import iceberg_rows

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

START_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    with log.open("wb") as out:
        return subprocess.Popen([str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def _wait_for(log: Path, text: str, process: subprocess.Popen, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.5)
    return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``spark://127.0.0.1:<port>`` of a running master with one registered worker (1 core, 1 GB), and the
    worker's folder of applications."""
    import pyspark

    folder = tmp_path_factory.mktemp("cluster")
    port = _free_port()
    # the executors see the PATH of a machine without this virtualenv: `python3` there lacks dbt-partialcow
    env = {**_without_this_python(), "SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(folder / "work"), "SPARK_NO_DAEMONIZE": "1"}
    master = _start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(_free_port())], folder / "master.log", env)
    worker = None
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        if not _wait_for(folder / "master.log", "I have been elected leader", master, deadline):
            pytest.skip(f"a Spark standalone master could not start here: {(folder / 'master.log').read_text()[-500:]}")
        url = f"spark://127.0.0.1:{port}"
        worker = _start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1", "--memory",
                         "1g", "--webui-port", str(_free_port()), url], folder / "worker.log", env)
        if not _wait_for(folder / "worker.log", "Successfully registered with master", worker, deadline):
            pytest.skip(f"a Spark standalone worker could not start here: {(folder / 'worker.log').read_text()[-500:]}")
        yield url, folder / "work"
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)


MODEL = """
{{ config(materialized='partial_cow_incremental', unique_key='id', op_column='_op', sequence_column='_ts') }}
select id, name, _op, _ts from {{ ref('changes') }}
{% if is_incremental() %} where _ts > (select max(_ts) from {{ this }}) {% endif %}
"""
FIRST = [(1, "ada", "I", 1), (2, "grace", "I", 1), (3, "alan", "I", 1)]
SECOND = [(2, "grace hopper", "U", 2), (3, "alan", "D", 2), (4, "edsger", "I", 2)]


def _project(root: Path, master: str, python: str) -> None:
    (root / "models").mkdir(parents=True)
    (root / "seeds").mkdir()
    (root / "models" / "people.sql").write_text(MODEL)
    (root / "dbt_project.yml").write_text(
        'name: cluster\nversion: "1.0"\nconfig-version: 2\nprofile: cluster\n'
        "seeds:\n  cluster:\n    +column_types: {id: bigint, _ts: bigint}\n")
    spark_config = {"spark.pyspark.python": python, "spark.driver.host": "127.0.0.1",
                    "spark.driver.bindAddress": "127.0.0.1", "spark.executor.memory": "512m", "spark.cores.max": "1"}
    config = "".join(f"        {k}: \"{v}\"\n" for k, v in spark_config.items())
    (root / "profiles.yml").write_text(
        f"cluster:\n  target: t\n  outputs:\n    t:\n      type: partialcow\n      schema: people\n"
        f"      master: \"{master}\"\n      spark_config:\n{config}")
    _write_seed(root, FIRST)


def _write_seed(root: Path, rows: list[tuple]) -> None:
    with (root / "seeds" / "changes.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "name", "_op", "_ts"])
        writer.writerows(rows)


def _without_this_python() -> dict[str, str]:
    """This process's environment without PYSPARK_PYTHON, dbt's variables and this virtualenv on the PATH."""
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DBT_", "PYSPARK_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bin_dir)
    return env


def _dbt(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # only the profile names the executors' Python
    env = _without_this_python()
    return subprocess.run([sys.executable, "-m", "dbt.cli.main", *args, "--project-dir", str(root),
                           "--profiles-dir", str(root)], capture_output=True, text=True, timeout=900, env=env)


def test_partial_cow_model_builds_on_the_cluster(cluster: tuple[str, Path], tmp_path: Path) -> None:
    url, work = cluster
    root = tmp_path / "project"
    _project(root, url, sys.executable)
    # one batch with updates and deletes of earlier changes: the latest change per key wins (on the executor)
    _write_seed(root, FIRST + SECOND)
    build = _dbt(root, "build")
    assert build.returncode == 0, build.stdout[-4000:]
    results = json.loads((root / "target" / "run_results.json").read_text())["results"]
    model = next(r for r in results if r["unique_id"].endswith(".people"))
    assert model["adapter_response"]["rows_inserted"] == 3
    assert iceberg_rows(root / "warehouse" / "people.db" / "people", ("id", "name")) == [(1, "ada"), (2, "grace hopper"), (4, "edsger")]
    # the run was an application of the cluster, whose worker ran its executor
    assert list(work.glob("app-*/*/stderr"))
    # Spark's start-up is quiet (no HiveConf/ObjectStore warnings, no loopback address warning)
    assert " WARN " not in build.stderr, build.stderr[-2000:]


def test_executors_without_the_package_stop_the_run_with_one_line(cluster: tuple[str, Path], tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    root = tmp_path / "project"
    _project(root, cluster[0], str(bare / "bin" / "python"))
    run = _dbt(root, "run")
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"the executors' Python ({bare / 'bin' / 'python'}) cannot import partialcow" in out
    assert "spark.pyspark.python" in out
    assert "Traceback" not in out and "at org.apache" not in out and out.count("Runtime Error") == 1
    shutil.rmtree(bare, ignore_errors=True)
