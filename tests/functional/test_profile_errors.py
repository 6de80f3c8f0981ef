"""Wrong profile values stop dbt with one clear line each, before any JVM starts (no Java stack trace)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dbt]

CASES = {
    "unknown_format": ({"table_format": "hudi"}, "Unknown table_format `hudi` in profile: use one of iceberg, delta"),
    "delta_without_jars": ({"table_format": "delta"}, "table_format 'delta' in Spark needs the delta-spark jars"),
    "unwritable_warehouse": ({"warehouse": "/proc/partialcow_wh"}, "is not a writable folder"),
    "thrift_method": ({"method": "thrift", "host": "h"}, "profile `method` must be `session`"),
    "missing_runtime": ({"iceberg_runtime": "/nonexistent/iceberg-runtime.jar"},
                        "iceberg_runtime: jar '/nonexistent/iceberg-runtime.jar' does not exist"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_profile_value_gives_one_clear_line(case: str, tmp_path: Path) -> None:
    overrides, expected = CASES[case]
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.sql").write_text("select 1 as id\n")
    (tmp_path / "dbt_project.yml").write_text('name: bad\nversion: "1.0"\nconfig-version: 2\nprofile: bad\n')
    output = {"type": "partialcow", "schema": "s", "warehouse": str(tmp_path / "wh"), **overrides}
    lines = "".join(f"      {k}: {v}\n" for k, v in output.items())
    (tmp_path / "profiles.yml").write_text(f"bad:\n  target: t\n  outputs:\n    t:\n{lines}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBT_")}
    run = subprocess.run(
        [sys.executable, "-m", "dbt.cli.main", "run", "--project-dir", str(tmp_path), "--profiles-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert expected in out
    assert "Traceback" not in out and "py4j" not in out and "at org.apache" not in out
    # one dbt error, not the same one wrapped in "Runtime Error" at every level it passed (issue 27)
    assert out.count("Runtime Error") <= 1
