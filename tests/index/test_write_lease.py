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


def _v2_checkpoint_log(root: Path, files: list[str], *, top_level: str) -> None:
    """A Delta log as delta-spark leaves it with ``delta.checkpointPolicy=v2`` after its log cleanup: no commit
    JSON, a top-level V2 checkpoint (JSON, as delta-spark 3.3 writes it, or Parquet) naming sidecars under
    ``_delta_log/_sidecars`` that hold the ``add`` actions."""
    import json
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq

    log = root / "_delta_log"
    (log / "_sidecars").mkdir(parents=True)
    add_type = pa.struct([("path", pa.string()), ("size", pa.int64()), ("dataChange", pa.bool_())])
    sidecars = []
    for part, names in enumerate([files[:1], files[1:], []], start=1):  # an empty part, as delta-spark writes
        name = f"00000000000000000004.checkpoint.{part:010d}.0000000003.{uuid.uuid4()}.parquet"
        adds = pa.array([{"path": n, "size": 1, "dataChange": False} for n in names], add_type)
        removes = pa.nulls(len(names), pa.struct([("path", pa.string())]))
        pq.write_table(pa.table({"add": adds, "remove": removes}), log / "_sidecars" / name)
        sidecars.append({"path": name, "sizeInBytes": 1, "modificationTime": 0})
    actions = [{"checkpointMetadata": {"version": 4}}] + [{"sidecar": s} for s in sidecars]
    stem = f"00000000000000000004.checkpoint.{uuid.uuid4()}"
    if top_level == "json":
        (log / f"{stem}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    else:
        table = pa.table({"checkpointMetadata": [actions[0]["checkpointMetadata"], None, None, None],
                          "sidecar": [None, *sidecars]})
        pq.write_table(table, log / f"{stem}.parquet")
    (log / "_last_checkpoint").write_text(json.dumps({"version": 4, "size": len(actions)}))


@pytest.mark.parametrize("top_level", ["json", "parquet"])
def test_delta_files_named_only_in_v2_checkpoint_sidecars_are_referenced(tmp_path: Path, top_level: str) -> None:
    """Regression: ``delta_referenced`` read the log's top level only, so with V2 checkpoints (whose adds live in
    ``_delta_log/_sidecars``) it missed every live file once the commit JSONs were cleaned up, and a top-level
    Parquet checkpoint without an ``add`` column failed it. Relative names are percent-decoded, as the log spells
    them."""
    from partialcow.spark.tables import delta_referenced

    _v2_checkpoint_log(tmp_path, ["part-0.parquet", "p%3D1/part%201.parquet"], top_level=top_level)
    assert delta_referenced(str(tmp_path)) == {str(tmp_path / "part-0.parquet"), str(tmp_path / "p=1" / "part 1.parquet")}


def test_a_dead_writes_committed_file_named_in_a_sidecar_is_kept(tmp_path: Path) -> None:
    """A write that died after its commit landed (its lease left behind) and whose file the log names only in a V2
    checkpoint's sidecar: the next write's recovery keeps the file (deleting it would lose committed rows) and
    removes the dead write's uncommitted one."""
    from partialcow.spark.tables import delta_referenced

    data = tmp_path / "data"
    data.mkdir()
    dead = WriteLease(str(tmp_path), [str(data)], referenced=set)
    with dead:
        committed, lost = dead.new_file_name(), dead.new_file_name()
        for name in (committed, lost):
            (data / name).write_bytes(b"PAR1")
        dead.keep_for_recovery = True  # the lease stays, as after a kill
    _v2_checkpoint_log(tmp_path, [f"data/{committed}"], top_level="json")
    with WriteLease(str(tmp_path), [str(data)], referenced=lambda: delta_referenced(str(tmp_path))) as lease:
        assert lease.recovered.writes == [dead.write_id]
        assert lease.recovered.kept_referenced == [str(data / committed)]
    assert sorted(os.listdir(data)) == [committed]


def test_a_write_starting_while_another_recovers_is_seen_alive(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: a lease's lock file was created, then locked. A recovery listing the leases in between could lock
    it, take the write for a dead one and delete its lease files; that write then ran unseen, and a later write's
    clean-up removed its scratch folder and unpublished index files."""
    (tmp_path / "data").mkdir()
    flock = journal.fcntl.flock
    recoveries: list[list[str]] = []

    def another_write_recovers_first(fd: int, operation: int) -> None:
        if operation == journal.fcntl.LOCK_EX and not recoveries:  # the starting write's own lock, once
            recoveries.append([])
            with _lease(tmp_path) as other:
                recoveries[0] = other.recovered.writes
        flock(fd, operation)

    monkeypatch.setattr(journal.fcntl, "flock", another_write_recovers_first)
    with _lease(tmp_path) as lease:
        monkeypatch.setattr(journal.fcntl, "flock", flock)
        assert recoveries == [[]]  # the other write saw no dead write
        with _lease(tmp_path) as later:
            assert later.recovered.writes == []
            assert later._others_alive()  # the first write is seen while it runs
        assert lease.write_id not in later.recovered.writes
    folder = tmp_path / "_partialcow_index" / JOURNAL_DIR
    assert not [n for n in os.listdir(folder) if n.endswith((".lock", ".json"))]  # both released


def test_a_lock_file_left_before_it_was_listed_goes_after_an_hour(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    folder = tmp_path / "_partialcow_index" / JOURNAL_DIR
    folder.mkdir(parents=True)
    old, new = folder / ".a.lock.tmp", folder / ".b.lock.tmp"
    old.touch(), new.touch()
    os.utime(old, (0, 0))
    with _lease(tmp_path) as lease:
        assert lease.recovered.writes == []
    assert sorted(os.listdir(folder)) == [".b.lock.tmp"]
