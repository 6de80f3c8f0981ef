"""The write lease (``partialcow.spark.journal.WriteLease``) among writes that come and go: no Spark, a table folder
on disk and leases taken and released as concurrent writes take them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from partialcow.spark import journal
from partialcow.spark.journal import JOURNAL_DIR, WriteLease


def _lease(root: Path) -> WriteLease:
    return WriteLease(str(root), [str(root / "data")], referenced=set)


def test_a_lease_that_ends_while_the_next_write_recovers_is_passed_over(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: a write's recovery listed the leases, and one finished (removing its lock file) before it was
    opened: the recovery failed with FileNotFoundError before doing anything, and its own lease stayed held, so every
    later write in the process took it for a live one."""
    (tmp_path / "data").mkdir()
    listdir = os.listdir

    def with_a_ghost(path: str) -> list[str]:
        names = listdir(path)
        return [*names, "ghost.lock"] if path.endswith(JOURNAL_DIR) else names

    monkeypatch.setattr(journal.os, "listdir", with_a_ghost)
    with _lease(tmp_path) as lease:
        assert lease.recovered.writes == []
    monkeypatch.undo()
    folder = tmp_path / "_partialcow_index" / JOURNAL_DIR
    assert not [n for n in os.listdir(folder) if n.endswith(".lock")]  # released


def test_a_recovery_that_fails_releases_its_own_lease(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data").mkdir()

    def broken(self: WriteLease) -> None:
        raise OSError("disk went away")

    monkeypatch.setattr(WriteLease, "_recover", broken)
    with pytest.raises(OSError, match="disk went away"):
        with _lease(tmp_path):
            pass
    monkeypatch.undo()
    folder = tmp_path / "_partialcow_index" / JOURNAL_DIR
    assert not [n for n in os.listdir(folder) if n.endswith((".lock", ".json"))]
    with _lease(tmp_path) as lease:  # the next write finds no write alive and nothing to recover
        assert lease.recovered.writes == []
