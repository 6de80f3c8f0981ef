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


@pytest.mark.spark
@pytest.mark.slow
def test_doctor_probe_of_a_delta_profile_starts_delta_with_its_spark_config(tmp_path: Path) -> None:
    from delta_env import NO_DELTA_SPARK, delta_spark_jars

    jars = delta_spark_jars()
    if not jars:
        pytest.skip(NO_DELTA_SPARK)
    (tmp_path / "dbt_project.yml").write_text('name: shop\nversion: "1.0"\nconfig-version: 2\nprofile: shop\n')
    (tmp_path / "profiles.yml").write_text(json.dumps({"shop": {"target": "t", "outputs": {"t": {
        "type": "partialcow", "schema": "s", "table_format": "delta", "delta_jars": jars, "master": "local[2]",
        "spark_config": {"spark.sql.shuffle.partitions": "3", "spark.sql.warehouse.dir": str(tmp_path / "lake")}}}}}))
    done = _python(
        "import sys; from partialcow.cli import main; sys.exit(main(['doctor', '--probe', '--output', 'json', "
        f"'--profiles-dir', {str(tmp_path)!r}]))",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    probe = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "probe")
    assert probe["status"] == "ok", probe
    assert probe["detail"].startswith("started Spark, created, wrote, read and dropped a Delta table (master local[2], "
                                      "profile spark_config applied: spark.sql.shuffle.partitions; left out"), probe
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dbt_project.yml", "profiles.yml"]  # no lake, no metastore


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


@pytest.mark.spark
@pytest.mark.slow
def test_a_view_a_delta_session_wrote_is_replaced_by_an_iceberg_session(tmp_path: Path) -> None:
    """Iceberg's SparkSessionCatalog drops Iceberg views only: a view model built under a Delta profile could not be
    rebuilt after the profile moved to Iceberg (``DROP VIEW IF EXISTS`` left it, ``CREATE OR REPLACE VIEW`` failed
    with VIEW_NOT_FOUND in every run). The view is dropped from the metastore; a table of that name never is."""
    from delta_env import NO_DELTA_SPARK, delta_spark_jars

    jars = delta_spark_jars()
    if not jars:
        pytest.skip(NO_DELTA_SPARK)
    start = ("from partialcow.spark.session import get_or_create_session\n"
             f"spark = get_or_create_session(warehouse={str(tmp_path / 'wh')!r}, master='local[1]', ")
    written = _python(start + f"table_format='delta', delta_jars={jars!r})\n"
                      "spark.sql('create schema r')\n"
                      "spark.sql('create view r.v as select 1 as id')\n", cwd=tmp_path)
    assert written.returncode == 0, written.stderr[-2000:]
    replaced = _python(start + "table_format='iceberg')\n"
                       "from partialcow.spark.metastore import drop_leftover_view\n"
                       "spark.sql('create table r.t (id int) using iceberg')\n"
                       "spark.sql('drop view if exists r.v')\n"
                       "print(spark.catalog.tableExists('r.v'), drop_leftover_view(spark, 'r', 'V'),\n"
                       "      drop_leftover_view(spark, 'r', 'v'), drop_leftover_view(spark, 'r', 't'))\n"
                       "spark.sql('create or replace view r.v as select 2 as id')\n"
                       "print(spark.table('r.v').first()[0], spark.catalog.tableExists('r.t'))\n", cwd=tmp_path)
    assert replaced.returncode == 0, replaced.stderr[-2000:]
    assert replaced.stdout.split() == ["True", "True", "False", "False", "2", "True"]
