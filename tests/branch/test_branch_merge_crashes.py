"""A merge of two models killed (SIGKILL, ``PARTIALCOW_CRASH_AT``) part way: every table stays readable at its last
commit, and the next merge is right, whether it is run again at once or the branch's model is rebuilt first.

Each step is a fresh process (``merge_crash_driver.py``) on one warehouse: it checks and goes on from what the
previous, killed step left in its schema, then sets up a new scenario in another schema and merges it with a kill:

- at ``committed`` (inside ``apply_changes``: model aaa's commit landed, its index not maintained, the branch's
  record not moved), then the branch's aaa is rebuilt with key 1 set back to its value before the merge, then merged:
  that is a change against what the killed merge committed, which the merge must apply (not take for no change).
  A kill at ``branch-merge-applied`` (after ``apply_changes`` returned) leaves the same, its index maintained;
- at ``branch-merge-recorded`` (aaa's commit landed and the branch's merge base moved for it, its overlay not yet
  emptied nor its base image dropped), then the merge is run again (not a fast-forward that would copy the branch's
  row of key 2 over the one ``on_conflict: theirs`` kept);
- at ``branch-merge-recorded``, then aaa's key 1 is set back and merged, as after the first kill.

Each time main must end up showing what the branch showed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from budget import LONG

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

HERE = Path(__file__).resolve().parent

BEFORE = {"aaa": [[1, "a"], [2, "z"], [3, "c"]], "bbb": [[1, "p"]]}
AAA_MERGED = [[1, "x"], [2, "z"], [3, "c"]]  # on_conflict theirs: main's z stays
MERGED = {"aaa": AAA_MERGED, "bbb": [[1, "q"]]}

# (crash point of the step's merge, how the next step goes on). The long mode only (tests/budget.py): each step is
# a fresh process (about a minute each); in CI a merge failing part way is test_branch_merge_failures.py's, a
# build dying before its merge base was captured too, and a kill inside apply_changes tests/faults/test_crashes.py's
PLAN = [("committed", "build_first"), ("branch-merge-recorded", "rerun"), ("branch-merge-recorded", "build_first")]


def _run(tmp_path: Path, n: int, step: dict) -> tuple[int, dict, str]:
    step_file = tmp_path / f"step{n}.json"
    report = tmp_path / f"report{n}.json"
    step_file.write_text(json.dumps({**step, "report": str(report)}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("PARTIALCOW_CRASH_AT", None)
    proc = subprocess.run([sys.executable, str(HERE / "merge_crash_driver.py"), str(step_file)], env=env,
                          capture_output=True, text=True, timeout=1200)
    if not report.exists():
        raise AssertionError(f"step {n} wrote no report (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode, json.loads(report.read_text()), proc.stderr


@pytest.mark.skipif(not LONG, reason="CI's time budget: PARTIALCOW_TESTS_LONG=1 runs it (see tests/budget.py)")
def test_a_killed_merge_leaves_readable_tables_and_the_next_merge_right(tmp_path):
    warehouse = str(tmp_path / "warehouse")
    steps = [*PLAN, None]
    for n, current in enumerate(steps):
        previous = steps[n - 1] if n else None
        step: dict = {"warehouse": warehouse}
        if previous is not None:
            step["verify"] = {"schema": f"crash{n - 1}", "how": previous[1]}
        if current is not None:
            step["crash"] = {"schema": f"crash{n}", "point": current[0]}
        code, report, stderr = _run(tmp_path, n, step)
        if previous is not None:
            where = f"after a kill at {previous[0]}, {previous[1]}"
            found = report["found"]
            # every kill point is after aaa's commit: main's aaa merged, bbb not; the branch as it was
            assert found["main"] == {"aaa": AAA_MERGED, "bbb": BEFORE["bbb"]}, (where, found)
            assert found["branch"] == {"aaa": [[1, "x"], [2, "y"], [3, "c"]], "bbb": [[1, "q"]]}, (where, found)
            if previous[1] == "rerun":
                assert report["merged"]["main"] == MERGED, (where, report["merge"], report["merged"])
                assert report["merged"]["branch"] == MERGED, (where, report["merged"])
            reverted = report["reverted"]["branch"]
            assert reverted["aaa"][0] == [1, "a"], (where, reverted)
            final = report["final"]
            # aaa's key 1 back to a is a change the merge applies. Key 2 (y on the branch, z on main): z, as
            # on_conflict theirs keeps it, or y where the branch showed y again after the base moved past z
            assert final["main"]["aaa"][0] == [1, "a"] and final["main"]["aaa"][2] == [3, "c"], (
                where, report["merge_after_revert"], final)
            assert final["main"]["aaa"][1] in ([2, "z"], [2, "y"]), (where, final)
            assert final["main"]["bbb"] == [[1, "q"]], (where, final)
            assert final["branch"] == final["main"], (where, final)
        if current is not None:
            assert report["before_crash"]["main"] == BEFORE, report["before_crash"]
            assert code == -9 and "not_killed" not in report, (
                f"step {n}: the kill at {current[0]} did not happen (exit {code}):\n{stderr[-3000:]}")
