"""Finding our own commit in a Delta log after delta-spark's commit call failed: did it land?

Regression case: the search read versions from the base's next one on and stopped at the first missing file. Log
cleanup after a checkpoint removes the oldest commit files, so a commit that had landed was taken for one that did
not, and its new files were deleted under it.
"""

from __future__ import annotations

import json
from pathlib import Path

from partialcow.table.delta.spark_table import COMMIT_ID_TAG, DeltaSparkTable


def _commit_file(log: Path, version: int, commit_id: str) -> None:
    info = {"commitInfo": {"operation": "WRITE", "tags": {COMMIT_ID_TAG: commit_id}}}
    (log / f"{version:020d}.json").write_text(json.dumps(info) + "\n")


def test_a_commit_past_versions_removed_by_log_cleanup_is_found(tmp_path: Path) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    (log / f"{6:020d}.checkpoint.parquet").write_bytes(b"")
    for version, commit_id in ((6, "theirs"), (7, "other"), (8, "ours")):
        _commit_file(log, version, commit_id)
    table = object.__new__(DeltaSparkTable)
    table.root = str(tmp_path)
    assert table._find_commit("ours", 4) == 8  # versions 4 and 5 are gone
    assert table._find_commit("never", 4) is None
    assert table._find_commit("theirs", 7) is None  # only from `first` on
