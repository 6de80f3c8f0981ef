"""The README's main job end to end: `dbt build` of models_example twice, each a fresh process (the second run is
incremental: three more customer change events, an update, a delete and an insert, arrive in between), then the
tables and the customers' snapshot read back with Spark and checked against DuckDB over the same seed files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

# change events arriving between the two builds: 5 changes email, 9 (no orders) is deleted, 10 is new
LATER_CHANGES = (
    "5,Barbara Liskov,liskov@example.com,US,U,2026-01-07 09:00:00",
    "9,Margaret Hamilton,margaret@example.com,US,D,2026-01-07 09:05:00",
    "10,Katherine Johnson,katherine@example.com,US,I,2026-01-07 09:10:00",
)

READ_BACK = """
import json, sys
from partialcow.spark.session import get_or_create_session
spark = get_or_create_session(table_format="iceberg", warehouse=sys.argv[1], master="local[1]")
out = {t: sorted(tuple(r) for r in spark.sql(f"select customer_id from shop.{t}").collect())
       for t in ("customers", "customer_revenue")}
out["provider"] = [r[1] for r in spark.sql("describe table extended shop.customers").collect() if r[0] == "Provider"]
out["current"] = sorted(tuple(r) for r in spark.sql(
    "select customer_id, customer_name, email, country_code from shop.customers").collect())
out["history"] = sorted(tuple(r) for r in spark.sql(
    "select customer_id, customer_name, email, country_code, dbt_valid_to is null, dbt_is_deleted "
    "from shop.customers_history").collect())
print("RESULT" + json.dumps(out))
"""


def _dbt(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # as `.venv/bin/dbt` run without activating the virtualenv: no PYSPARK_PYTHON, and a `python3` on the PATH that
    # lacks dbt-partialcow; Python workers must start with dbt's own interpreter all the same
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DBT_", "PYSPARK_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir)
    return subprocess.run(
        [sys.executable, "-m", "dbt.cli.main", *args, "--project-dir", str(project), "--profiles-dir", str(project)],
        capture_output=True, text=True, timeout=900, env=env,
    )


def test_models_example_builds_twice_and_reads_back(tmp_path: Path) -> None:
    project = tmp_path / "models_example"
    shutil.copytree(REPO_ROOT / "models_example", project, ignore=shutil.ignore_patterns("warehouse*", "target", "logs"))
    seed = project / "seeds" / "raw_customer_changes.csv"
    for attempt in ("first", "incremental"):
        if attempt == "incremental":
            with seed.open("a") as changes:
                changes.write("".join(f"{line}\n" for line in LATER_CHANGES))
        run = _dbt(project, "build")
        assert run.returncode == 0, f"{attempt} dbt build failed:\n{run.stdout[-4000:]}"
        results = json.loads((project / "target" / "run_results.json").read_text())["results"]
        assert results and all(r["status"] in ("success", "pass") for r in results)
    # each fresh process started its Spark session while dbt parsed the project
    assert (project / "logs" / "dbt.log").read_text().count("Spark session started early, while dbt parsed") == 2

    read = subprocess.run([sys.executable, "-c", READ_BACK, str(project / "warehouse")], capture_output=True,
                          text=True, timeout=600)
    assert read.returncode == 0, read.stderr[-3000:]
    got = json.loads(read.stdout.split("RESULT", 1)[1])

    expected = duckdb.sql(
        f"""
        select customer_id from (
          select *, row_number() over (partition by customer_id order by _ts desc) as rn
          from read_csv_auto('{seed}')
        ) where rn = 1 and upper(_op) <> 'D' order by customer_id
        """
    ).fetchall()
    assert [tuple(r) for r in got["customers"]] == [tuple(r) for r in expected]

    # the snapshot: the first build's versions, then customer 5's change and 9's deletion (a deletion record)
    current = [tuple(r) for r in got["current"]]
    history = [tuple(r) for r in got["history"]]
    assert sorted(r[:4] for r in history if r[4] and r[5] == "False") == current
    versions = {key: sum(1 for r in history if r[0] == key) for key, *_ in current}
    assert versions == {key: 2 if key == 5 else 1 for key, *_ in current}
    assert [r[:4] for r in history if r[0] == 5 and not r[4]] == [(5, "Barbara Liskov", "barbara@example.com", "US")]
    assert [(r[0], r[4], r[5]) for r in history if r[0] == 9] == [(9, False, "False"), (9, True, "True")]
    assert got["customer_revenue"] == got["customers"]
    assert got["provider"] == ["iceberg"]
