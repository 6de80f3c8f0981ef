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

from partialcow.exceptions import CommitConflictError
from partialcow.spark.changes import ChangeSpec, apply_changes
from partialcow.spark.tables import open_table

deltalake = pytest.importorskip("deltalake")

pytestmark = [pytest.mark.spark]

SPEC = ChangeSpec(key_columns=("id", "region"), op_column="_op", model="delta_keys")
ARROW = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.string())])
CHANGES = "id bigint, region string, v string, _op string"


class _AppendsBeforeCommit:
    """A committer that lets another writer append right before this writer's commit."""

    def __init__(self, inner, other_writer) -> None:
        self._inner = inner
        self._other_writer = other_writer

    def replace_files(self, change):
        self._other_writer()
        return self._inner.replace_files(change)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _rows(path: str) -> list[tuple]:
    from deltalake import DeltaTable

    return sorted((r["id"], r["region"], r["v"]) for r in DeltaTable(path).to_pyarrow_table().to_pylist())


# A inserts (i, 'us') for odd i and (i, 'eu') for even i: each column's values alone also pair up as
# (odd, 'eu') and (even, 'us'), which A does not write.
@pytest.mark.parametrize("keys, limit", [(4, None), (12_000, None), (4, 2)],
                         ids=["few-keys", "many-keys", "too-many-to-list"])
@pytest.mark.parametrize("driver_rows", ["0", "400000"], ids=["spark", "driver"])
@pytest.mark.parametrize("theirs, conflict", [((3, "us"), True), ((3, "eu"), False), ((2, "eu"), True)],
                         ids=["same-key", "other-key", "same-key-even"])
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
    writer.format_table = _AppendsBeforeCommit(writer.format_table,
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
