"""Crash injection: a write killed (SIGKILL) at each phase leaves the table readable at its last commit, and the next
write of the table repairs whatever the kill left (stale index, unreferenced data files, scratch folders, leases).

Every step is a fresh process (``crash_driver.py``): it checks what the previous, killed process left, applies a batch
normally, then applies the next batch with a kill at the step's point. Steps alternate between the driver path and
Spark's jobs (``PARTIALCOW_DRIVER_MAX_ROWS``), so both are killed at every point over two runs of the plan. After a kill the table holds either the batch
before or the batch after (never anything else); after the next normal batch it equals the oracle, the row index
verifies against a full scan, and nothing is left over.

CI runs two points once (see ``_plan``); ``PARTIALCOW_TESTS_LONG=1`` runs every point and adds timer
kills at random moments over many seeds.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from budget import LONG
from crash_driver import expected
from partialcow.faults import POINTS

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

HERE = Path(__file__).resolve().parent


def _run(tmp_path: Path, n: int, step: dict) -> tuple[int, dict]:
    step_file = tmp_path / f"step{n}.json"
    report = tmp_path / f"report{n}.json"
    step_file.write_text(json.dumps({**step, "report": str(report)}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("PARTIALCOW_CRASH_AT", None)
    # every other step applies its batches with Spark's jobs instead of on the driver: both paths get killed
    env["PARTIALCOW_DRIVER_MAX_ROWS"] = "0" if n % 2 else "200000"
    proc = subprocess.run([sys.executable, str(HERE / "crash_driver.py"), str(step_file)], env=env,
                          capture_output=True, text=True, timeout=900)
    if not report.exists():
        raise AssertionError(f"step {n} wrote no report (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode, json.loads(report.read_text())


def _as_rows(found: dict) -> dict[int, tuple]:
    return {int(k): tuple(v) for k, v in found.items()}


def _plan() -> list[dict]:
    """(point or kill delay) per crash: every point once, then (long mode) timer kills at random moments.

    CI runs the two points where a kill leaves the most to repair in the table's own state: new files not
    committed (``rewritten``), a commit the index does not reflect (``committed``). Index files not published
    (``index-written``) are unreferenced files as after ``rewritten``; the others leave a lease and at most a
    scratch folder besides (``leased``, ``staged``, ``located``), or a finished write's lease (``indexed``); each
    step is a Spark start (tests/budget.py). Long mode runs every point."""
    plan = [{"point": p} for p in POINTS if LONG or p in ("rewritten", "committed")]
    if LONG:
        rnd = random.Random(int(os.environ.get("PARTIALCOW_FAULTS_SEED", "7")))
        plan += [{"kill_after": round(rnd.uniform(0.5, 12.0), 2)} for _ in range(12)]
        plan += [{"point": p} for p in rnd.sample(POINTS, len(POINTS))]
    return plan


def test_a_killed_write_leaves_the_last_commit_and_the_next_write_repairs(tmp_path):
    warehouse = str(tmp_path / "warehouse")
    applied = [0]  # batches the table holds, in order
    batch = 1
    plan = _plan()
    previous_crash = None
    for i, kill in enumerate(plan + [None]):
        step = {"warehouse": warehouse, "apply": batch}
        if kill is not None:
            step.update(kill, crash=batch + 1)
        code, report = _run(tmp_path, i, step)
        found = _as_rows(report["found"])
        if previous_crash is not None:
            # the killed batch either landed whole or not at all
            before, after = expected(applied), expected(applied + [previous_crash])
            assert found in (before, after), f"after a kill at {plan[i - 1]}: neither the old nor the new batch"
            if found == after and found != before:
                applied.append(previous_crash)
        elif i == 0:
            assert found == expected([0])
        applied.append(batch)
        assert _as_rows(report["after"]) == expected(applied), f"step {i}: batch {batch} not applied exactly"
        assert report["index_ok"], f"step {i}: the row index does not match the table"
        assert report["leftovers"] == [], f"step {i}: left over after a kill at {plan[i - 1] if i else None}"
        if kill is not None:
            assert code == -9, f"step {i}: the kill at {kill} did not happen (exit {code})"
        previous_crash = batch + 1 if kill is not None else None
        batch += 2
