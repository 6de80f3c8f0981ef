"""A dbt process ends with dbt's own exit code: nothing the adapter leaves running may turn it into a crash."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

MODELS = {
    # fails at compile time, right after the connection opened: the warm-up thread (spark/prewarm.py) still runs
    "needs_var.sql": "{{ config(materialized='table') }}\nselect {{ var('missing') }} as id\n",
}


def _dbt(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBT_")}
    # the session opened with the connection, as with a profile that turns the early start off: the warm-up
    # then starts just before the model runs, which is when the process ended while it ran
    env.update(DBT_USE_COLORS="false", DBT_SEND_ANONYMOUS_USAGE_STATS="false", PARTIALCOW_EARLY_SESSION="0")
    return subprocess.run(
        [sys.executable, "-m", "dbt.cli.main", *args, "--project-dir", str(project), "--profiles-dir", str(project)],
        capture_output=True, text=True, timeout=600, env=env, cwd=project,
    )


def test_a_run_that_ends_during_the_warm_up_exits_with_dbts_code(tmp_path: Path) -> None:
    """Regression: a model failing to compile ended the process while the warm-up thread ran; the interpreter's
    teardown aborted ("Fatal Python error: PyGILState_Release"), exit code 134 instead of 1 (every run with the
    session opened with the connection, most with it started early). A scheduler reads a crash there, and any run
    that ends while the thread runs could end the same way."""
    (tmp_path / "models").mkdir()
    for name, sql in MODELS.items():
        (tmp_path / "models" / name).write_text(sql)
    (tmp_path / "dbt_project.yml").write_text('name: exits\nversion: "1.0"\nconfig-version: 2\nprofile: p\n')
    (tmp_path / "profiles.yml").write_text(
        f"p:\n  target: t\n  outputs:\n    t:\n      type: partialcow\n      schema: s\n"
        f"      warehouse: {tmp_path / 'wh'}\n      master: 'local[2]'\n")
    run = _dbt(tmp_path, "run", "-s", "needs_var")
    assert run.returncode == 1, (run.stdout + run.stderr)[-1500:]
    assert "Fatal Python error" not in run.stderr
