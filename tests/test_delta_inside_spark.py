"""The Delta-inside-Spark suite (tests/delta_spark) in a child pytest process with a Delta session.

A JVM holds one session catalog, and this process's is Iceberg's (tests/conftest.py). The child runs every test of
tests/delta_spark in one process and one SparkSession (Delta's catalog and extension, delta-spark from
``delta_env.delta_spark_jars``), which also keeps the suite's JVM start-ups to one. Each child test's outcome is
reported here; any failure or error fails this test with the child's messages. Without the jars (or Java) this is
skipped, never passed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from delta_env import DELTA_SESSION_ENV, NO_DELTA_SPARK, delta_spark_jars

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.spark, pytest.mark.delta_spark, pytest.mark.dbt, pytest.mark.slow]


def test_delta_inside_spark_suite(tmp_path: Path) -> None:
    jars = delta_spark_jars()
    if not jars:
        pytest.skip(NO_DELTA_SPARK)
    report = tmp_path / "junit.xml"
    env = {**os.environ, DELTA_SESSION_ENV: "1", "PARTIALCOW_DELTA_JARS": ",".join(jars)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "adapter"), os.environ.get("PYTHONPATH", "")])
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(REPO / "tests" / "delta_spark"), "-p", "no:cacheprovider", "-n", "0",
         "-q", "-rfEs", f"--junitxml={report}", f"--basetemp={tmp_path / 'child'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=3600,
    )
    assert report.exists(), f"the child pytest wrote no report (exit {proc.returncode}):\n{proc.stdout[-6000:]}" \
        f"\n{proc.stderr[-3000:]}"
    cases = ET.parse(report).getroot().iter("testcase")
    outcomes: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
    messages = []
    for case in cases:
        name = f"{case.get('classname')}::{case.get('name')}"
        problem = case.find("failure")
        problem = problem if problem is not None else case.find("error")
        if problem is not None:
            outcomes["failed"].append(name)
            messages.append(f"{name}: {problem.get('message', '')[:1500]}")
        elif case.find("skipped") is not None:
            outcomes["skipped"].append(f"{name}: {case.find('skipped').get('message', '')[:300]}")
        else:
            outcomes["passed"].append(name)
    print(f"delta_spark child suite: {len(outcomes['passed'])} passed, {len(outcomes['failed'])} failed, "
          f"{len(outcomes['skipped'])} skipped")
    for line in outcomes["skipped"]:
        print("  skipped:", line)
    assert not outcomes["failed"], "\n\n".join(messages) + "\n\n" + proc.stdout[-4000:]
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert outcomes["passed"], f"the child suite ran no test:\n{proc.stdout[-3000:]}"
