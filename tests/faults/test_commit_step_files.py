"""Who deletes a batch's new files when its commit fails (``partialcow.spark.commit_step._commit``), with a stand-in
table format: no Spark. Before the format's commit call, the commit step deletes them (no snapshot can name them);
from that call on the format owns them: it deletes those no version references and keeps the rest (a path already
live, one a concurrent version points at), and anything it does not call a refusal keeps them all."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from partialcow.exceptions import CommitConflictError, CommitStateUnknownError
from partialcow.metrics import PhaseClock
from partialcow.spark.commit_step import _commit
from partialcow.spark.spec import ChangeSpec


def _insert(path) -> dict:
    path.write_bytes(b"parquet")
    return {"kind": "insert", "dst": str(path), "rows": 1, "index_rows": None}


def _table(error: Exception):
    def replace_files(change):
        raise error

    return SimpleNamespace(delta_spark=False,
                           format_table=SimpleNamespace(location="/", replace_files=replace_files))


@pytest.mark.parametrize(("error", "raised"), [
    (CommitConflictError("another writer changed the keys"), CommitConflictError),
    (RuntimeError("the catalog broke after writing"), CommitStateUnknownError),
])
def test_files_the_format_was_given_are_the_formats(tmp_path, error, raised):
    """Regression: a refusal made the commit step delete every new file again, those the format kept on purpose
    included (a concurrent version pointing at one: the table then named a missing file)."""
    kept = tmp_path / "kept.parquet"
    with pytest.raises(raised):
        _commit(_table(error), SimpleNamespace(), [_insert(kept)], 1, None, 1, PhaseClock(),
                ChangeSpec(key_columns=("k",)))
    assert kept.exists()
