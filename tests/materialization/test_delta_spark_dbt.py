"""``partial_cow_incremental`` and a snapshot with ``file_format='delta'`` through fresh dbt processes, where Delta
runs inside Spark.

Needs the delta-spark jars (not on PyPI; Maven is offline here), so it is skipped unless ``PARTIALCOW_DELTA_JARS``
lists them. dbt runs in a child process: this test process's SparkSession is configured for Iceberg and a JVM cannot
switch its session catalog. The tables are read back with delta-rs; the model's is compared with the DuckDB oracle.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

from cdc_oracle import CdcOracle, sorted_rows
from delta_env import NO_DELTA_SPARK, delta_spark_jars

REPO = Path(__file__).resolve().parents[2]
JARS = delta_spark_jars()  # the PARTIALCOW_DELTA_JARS list, else ../shared/jars


def _has_delta_extension(jars: list[str]) -> bool:
    for jar in jars:
        try:
            with zipfile.ZipFile(jar) as zf:
                if "io/delta/sql/DeltaSparkSessionExtension.class" in zf.namelist():
                    return True
        except zipfile.BadZipFile:
            return False
    return False


pytestmark = [
    pytest.mark.dbt, pytest.mark.spark, pytest.mark.delta_spark, pytest.mark.slow,
    pytest.mark.skipif(
        not (JARS and _has_delta_extension(JARS) and shutil.which("java")),
        reason=NO_DELTA_SPARK,
    ),
]

COLUMNS = ("id", "v", "_ts")
BATCHES = {  # (id, v, _op, _ts)
    1: [(1, 10, "I", 1), (2, 20, "I", 1), (3, 30, "I", 1), (3, 31, "U", 2)],
    2: [(1, 11, "U", 5), (2, None, "D", 5), (4, 40, "U", 5), (9, None, "D", 5)],
}
MODEL = """
{{ config(materialized='partial_cow_incremental', file_format='delta', unique_key='id', op_column='_op',
          sequence_column='_ts') }}
{% set rows = {1: %s, 2: %s}[var('batch')] %}
select * from values {% for r in rows %}({{ r[0] }}L, cast({{ 'null' if r[1] is none else r[1] }} as int),
  '{{ r[2] }}', {{ r[3] }}L){{ ',' if not loop.last }}{% endfor %} as t(id, v, _op, _ts)
"""


SNAPSHOT = """
{% snapshot items_snapshot %}
{{ config(target_schema='cdc', unique_key='id', strategy='check', check_cols=['v'], file_format='delta') }}
select * from values {{ '(1L, "a"), (2L, "b"), (3L, "c")' if var('batch') == 1 else '(1L, "a"), (2L, "B"), (4L, "d")' }}
  as t(id, v)
{% endsnapshot %}
"""


def test_delta_model_and_snapshot_through_fresh_dbt_processes(tmp_path: Path) -> None:
    """Two ``dbt build`` processes on a Delta profile, as a scheduler runs them: each applies a CDC batch to the
    ``partial_cow_incremental`` model and snapshots a source. The second snapshot is narrowed, reads the snapshot's
    files as plain Parquet (no fallback to delta-spark in the log), closes the changed version and appends the new
    ones. One project for both keeps it to two Spark starts."""
    from deltalake import DeltaTable

    project = tmp_path / "proj"
    (project / "models").mkdir(parents=True)
    (project / "snapshots").mkdir()
    (project / "dbt_project.yml").write_text("name: delta_cdc\nversion: '1.0'\nconfig-version: 2\nprofile: p\n")
    warehouse = tmp_path / "wh"
    (project / "profiles.yml").write_text(json.dumps({"p": {"target": "t", "outputs": {"t": {
        "type": "partialcow", "schema": "cdc", "table_format": "delta", "warehouse": str(warehouse),
        "master": "local[1]", "delta_jars": JARS}}}}))
    (project / "models" / "changes.sql").write_text(
        MODEL.replace("%s", json.dumps([list(r) for r in BATCHES[1]]), 1)
        .replace("%s", json.dumps([list(r) for r in BATCHES[2]]), 1).replace("null,", "none,")
    )
    (project / "snapshots" / "items.sql").write_text(SNAPSHOT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "adapter"), os.environ.get("PYTHONPATH", "")])
    oracle = CdcOracle(key_columns=("id",), columns=COLUMNS, op_column="_op", sequence_column="_ts")

    def delta_rows(name: str) -> list[dict]:
        (location,) = [p for p in warehouse.rglob("_delta_log") if p.parent.name == name]
        return DeltaTable(str(location.parent)).to_pyarrow_table().to_pylist()

    for batch in (1, 2):
        oracle.apply(pa.Table.from_pylist([dict(zip(("id", "v", "_op", "_ts"), r)) for r in BATCHES[batch]]))
        run = subprocess.run(
            [sys.executable, "-m", "dbt.cli.main", "build", "--vars", f"batch: {batch}", "--project-dir",
             str(project), "--profiles-dir", str(project)], capture_output=True, text=True, timeout=900, env=env)
        assert run.returncode == 0, run.stdout[-4000:]
        table = delta_rows("changes")
        assert sorted_rows([tuple(r[c] for c in COLUMNS) for r in table]) == oracle.rows(), batch
    log = (project / "logs" / "dbt.log").read_text()
    # 2 changed, 4 new; 3, gone from the source, is left alone, as dbt leaves it under hard_deletes='ignore'
    assert "2 candidate records for dbt's staging query" in log
    assert "read through delta-spark" not in log
    assert sorted((r["id"], r["v"], r["dbt_valid_to"] is None) for r in delta_rows("items_snapshot")) == [
        (1, "a", True), (2, "B", True), (2, "b", False), (3, "c", True), (4, "d", True)]
