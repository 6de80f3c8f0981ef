"""Delta's conflict rules (``partialcow.table.delta.conflicts``) over hand-written logs: which concurrent versions
since a change's base are conflicts. Pure Python: the log and the data files' key columns are given as values."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from partialcow.exceptions import CommitConflictError
from partialcow.table.base import FileReplacement
from partialcow.table.delta.conflicts import check_concurrent

# the keys each data file holds
FILES = {"x.parquet": [7], "y.parquet": [1, 7], "z.parquet": [1, 2], "w.parquet": [3]}


def _add(path: str, data_change: bool = True) -> dict[str, Any]:
    return {"add": {"path": path, "dataChange": data_change}}


def _remove(path: str, data_change: bool = True) -> dict[str, Any]:
    return {"remove": {"path": path, "dataChange": data_change}}


def _check(log: dict[int, list[dict[str, Any]]], keys: list[int]) -> None:
    change = FileReplacement(base_version=0, removed=("ours_old.parquet",), added=("ours_new.parquet",),
                             conflict_keys={"k": keys})
    check_concurrent("/t", change, change.removed, change.added, max(log), set(),
                     read_entry=lambda v: log[v], read_columns=lambda path, cols: pa.table({"k": FILES[path]}))


# (case, log versions after the base, conflict expected for a change writing key 7)
CASES = [
    ("append of another key", {1: [_add("w.parquet")]}, False),
    ("append of the key", {1: [_add("x.parquet")]}, True),
    # regression: the appended file compacted away (dataChange false) before our commit: its key was not checked
    ("append of the key, then compacted", {1: [_add("x.parquet")],
                                           2: [_remove("x.parquet", False), _add("y.parquet", False)]}, True),
    ("compaction of base files only", {1: [_remove("a.parquet", False), _add("y.parquet", False)]}, False),
    ("append, then deleted by a writer", {1: [_add("x.parquet")], 2: [_remove("x.parquet")]}, False),
]


@pytest.mark.parametrize(("case", "log", "conflict"), CASES, ids=[c[0] for c in CASES])
def test_concurrent_versions(case, log, conflict):
    if conflict:
        with pytest.raises(CommitConflictError, match="holding keys this change also writes"):
            _check(log, [7])
    else:
        _check(log, [7])
