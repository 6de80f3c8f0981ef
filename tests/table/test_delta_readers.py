"""The readers-agree checker (``delta_readers``) must be able to fail: wrong stats, a wrong value, a key twice.

These run without delta-spark (its reads are exercised by the type matrix); each corrupts one thing in a table our
committer wrote and expects the checker to name it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("polars")

from delta_readers import DeltaCheck, assert_readers_agree  # noqa: E402

from partialcow.table.base import FileReplacement  # noqa: E402
from partialcow.table.delta import DeltaRsTable  # noqa: E402

ROWS = [{"id": 1, "name": "a", "n": 10}, {"id": 2, "name": "\U0010ffff-2", "n": 20}]


def _table(tmp_path: Path) -> str:
    """Version 0 by delta-rs (one row), version 1 our commit adding a file with both rows' successors."""
    from deltalake import write_deltalake

    root = str(tmp_path / "t")
    write_deltalake(root, pa.table({"id": pa.array([0], pa.int64()), "name": ["z"], "n": pa.array([0], pa.int64())}))
    committer = DeltaRsTable(root)
    pq.write_table(pa.Table.from_pylist(ROWS, schema=pa.schema([("id", pa.int64()), ("name", pa.string()),
                                                                ("n", pa.int64())])), os.path.join(root, "new.parquet"))
    committer.replace_files(FileReplacement(base_version=0, removed=[committer.live_files()[0].path],
                                            added=["new.parquet"]))
    return root


def _expected() -> dict[int, list[dict]]:
    return {0: [{"id": 0, "name": "z", "n": 0}], 1: ROWS}


def _edit_stats(root: str, edit) -> None:  # type: ignore[no-untyped-def]
    path = os.path.join(root, "_delta_log", "00000000000000000001.json")
    with open(path, encoding="utf-8") as f:
        actions = [json.loads(line) for line in f if line.strip()]
    for action in actions:
        if "add" in action:
            stats = json.loads(action["add"]["stats"])
            edit(stats)
            action["add"]["stats"] = json.dumps(stats, ensure_ascii=False)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(a, ensure_ascii=False) for a in actions) + "\n")


def test_a_correct_table_passes(tmp_path: Path) -> None:
    assert_readers_agree([DeltaCheck(_table(tmp_path), expected=_expected())], delta_spark=False)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["maxValues"].update(n=15), "max of n"),  # not a bound: a filter on n = 20 skips the file
        (lambda s: s["minValues"].update(name="b"), "min of name"),  # not a prefix of the true min
        (lambda s: s["nullCount"].update(n=1), "nullCount of n"),
        (lambda s: s.update(numRecords=3), "numRecords"),
    ],
)
def test_wrong_stats_are_named(tmp_path: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    root = _table(tmp_path)
    _edit_stats(root, edit)
    with pytest.raises(AssertionError, match=message):
        assert_readers_agree([DeltaCheck(root, expected=_expected())], delta_spark=False)


def test_a_wrong_value_and_a_key_twice_are_named(tmp_path: Path) -> None:
    root = _table(tmp_path)
    wrong = {0: _expected()[0], 1: [ROWS[0], {**ROWS[1], "n": 21}]}
    with pytest.raises(AssertionError, match=r"differing .*\(2, 'n', 20, 21\)"):
        assert_readers_agree([DeltaCheck(root, expected=wrong)], delta_spark=False)
    twice = {0: _expected()[0], 1: [*ROWS, ROWS[1]]}
    with pytest.raises(AssertionError, match="appears twice"):
        assert_readers_agree([DeltaCheck(root, expected=twice)], delta_spark=False)
