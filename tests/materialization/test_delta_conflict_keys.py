"""A Delta batch against a concurrent append: the key check must compare whole (composite) keys, at any batch size.

Writer A's batch runs ``apply_changes`` on a delta-rs table; right before A commits, another writer appends a file
(``write_deltalake``, a blind append that Delta's own rules let pass). If that file holds a key A also writes, the key
would exist twice: A must fail with ``CommitConflictError`` and leave the table as the other writer left it. If it
holds only keys A does not write, A is rebased and commits. Keys are ``(id, region)`` pairs chosen so that the
per-column value sets pair up differently from the batch's real keys, and batches run on the driver and on Spark,
with few and with many keys. A change with more keys than a commit lists (``_MAX_CONFLICT_KEYS``, lowered here)
cannot rule a key out: any concurrent append is then a conflict.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from budget import LONG
from interleave import CommitsAfter
from partialcow.exceptions import CommitConflictError
from partialcow.spark.changes import ChangeSpec, apply_changes
from partialcow.spark.tables import open_table

deltalake = pytest.importorskip("deltalake")

pytestmark = [pytest.mark.spark]

SPEC = ChangeSpec(key_columns=("id", "region"), op_column="_op", model="delta_keys")
ARROW = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.string())])
CHANGES = "id bigint, region string, v string, _op string"



def _rows(path: str) -> list[tuple]:
    from deltalake import DeltaTable

    return sorted((r["id"], r["region"], r["v"]) for r in DeltaTable(path).to_pyarrow_table().to_pylist())


# A inserts (i, 'us') for odd i and (i, 'eu') for even i: each column's values alone also pair up as
# (odd, 'eu') and (even, 'us'), which A does not write.
_SIZES = {"few-keys": (4, None), "many-keys": (12_000, None), "too-many-to-list": (4, 2)}
_PATHS = {"spark": "0", "driver": "400000"}
_THEIRS = {"same-key": ((3, "us"), True), "other-key": ((3, "eu"), False), "same-key-even": ((2, "eu"), True)}
# every combination with PARTIALCOW_TESTS_LONG=1; in CI every case on both paths with few keys, and the other
# sizes with a conflict and without on one path each
_RUNS = [(size, path, case) for size in _SIZES for path in _PATHS for case in _THEIRS
         if LONG or size == "few-keys"
         or (case != "same-key-even" and path == ("driver" if size == "many-keys" else "spark"))]


@pytest.mark.parametrize("keys, limit, driver_rows, theirs, conflict",
                         [(*_SIZES[size], _PATHS[path], *_THEIRS[case]) for size, path, case in _RUNS],
                         ids=["-".join(run) for run in _RUNS])
def test_concurrent_append_is_checked_on_whole_keys(spark, tmp_path, monkeypatch, keys, limit, driver_rows, theirs,
                                                    conflict):
    from deltalake import write_deltalake

    monkeypatch.setenv("PARTIALCOW_DRIVER_MAX_ROWS", driver_rows)
    if limit is not None:
        monkeypatch.setattr("partialcow.spark.commit_step._MAX_CONFLICT_KEYS", limit)
        monkeypatch.setattr("partialcow.spark.changes._MAX_CONFLICT_KEYS", limit)
    path = str(tmp_path / "t")
    write_deltalake(path, pa.Table.from_pylist([{"id": -1, "region": "eu", "v": "old"}], schema=ARROW))
    mine = [(i, "us" if i % 2 else "eu", "mine", "I") for i in range(keys)]
    other = pa.Table.from_pylist([{"id": theirs[0], "region": theirs[1], "v": "theirs"}], schema=ARROW)
    writer = open_table(spark, path, table_format="delta")
    writer.format_table = CommitsAfter(writer.format_table,
                                               lambda: write_deltalake(path, other, mode="append"))
    batch = spark.createDataFrame(mine, CHANGES)
    if conflict or limit is not None:
        with pytest.raises(CommitConflictError, match="holding keys" if limit is None else "more keys than"):
            apply_changes(spark, writer, batch, SPEC)
        assert _rows(path) == sorted([(-1, "eu", "old"), (*theirs, "theirs")])
    else:
        metrics = apply_changes(spark, writer, batch, SPEC)
        assert metrics.rows_inserted == keys
        rows = _rows(path)
        assert len(rows) == keys + 2 and (*theirs, "theirs") in rows and (3, "us", "mine") in rows
