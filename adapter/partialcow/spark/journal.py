"""The write journal: each write registers itself while it runs, so the next write of the table can remove what a
killed one left behind.

A write (``apply_changes``, ``create_table``) holds a lease for its whole run: ``_partialcow_index/_writes/<id>.json``
(who, when) and an exclusive ``flock`` on ``<id>.lock`` (taken before the file gets that name); its scratch folder
is ``_partialcow_index/_tmp/<id>``. The operating system releases the lock when the process ends, however it ends,
so a lease whose lock can be taken belongs to a dead write. Its leftovers are then removed by the next write of the
table, before that write does anything else:

- data files it wrote (named ``pcow-<write id>-*.parquet``, temporary ``.tmp-*`` siblings included) that no snapshot
  of the table references (Iceberg: every snapshot, branch and tag; Delta: every version still in the log), so a
  commit that landed before the kill keeps its files;
- its scratch folder, and the index's temporary folders and unpublished bucket files when no other write is running.

A lease whose write is alive is left alone, and without a dead write nothing at all is removed before a write. After
a write that succeeded, with no other write running, index files older than the last two index states go at once.

Locks are ``flock``s: a write on another host sharing the folder over a network file system is not seen. The
embedded default is one machine; on a cluster the driver holds the lease for the executors' files.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType

from partialcow.exceptions import CommitStateUnknownError
from partialcow.index.storage import INDEX_DIR, IndexStore
from partialcow.parquet import remove_sidecar

__all__ = ["JOURNAL_DIR", "Recovered", "WriteLease", "data_file_prefix"]

JOURNAL_DIR = "_writes"
# a lock file before it is locked and listed; one left by a write killed in between goes after an hour
_UNLISTED_LOCK = ".lock.tmp"
_UNLISTED_MAX_AGE_SECONDS = 3600.0


def data_file_prefix(write_id: str) -> str:
    """The name prefix of every data file write ``write_id`` creates (see ``rewrite_job.new_file_name``)."""
    return f"pcow-{write_id}-"


@dataclass
class Recovered:
    """What a write removed of dead writes' leftovers before it started."""

    writes: list[str] = field(default_factory=list)
    data_files: list[str] = field(default_factory=list)
    kept_referenced: list[str] = field(default_factory=list)
    index_files: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.writes or self.data_files or self.index_files)


class WriteLease:
    """Hold a write's lease on a table folder for the ``with`` block; on entry, clean dead writes' leftovers.

    ``data_dirs``: where the table's data files live (searched recursively); ``referenced``: returns the local paths
    of every data file any snapshot of the table references (called only when a dead write left data files).

    >>> import tempfile, os
    >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "data"))
    >>> with WriteLease(root, [os.path.join(root, "data")], referenced=set) as lease:
    ...     open(os.path.join(root, "data", lease.new_file_name()), "w").close()
    ...     len(lease.write_id)
    32
    """

    def __init__(self, table_location: str, data_dirs: Iterable[str], *, referenced: Callable[[], set[str]]) -> None:
        self.store = IndexStore(table_location)
        self.data_dirs = list(data_dirs)
        self.referenced = referenced
        self.write_id = uuid.uuid4().hex
        self.recovered = Recovered()
        # set when the write's files may outlive it unreferenced (a lost commit's, kept while a snapshot could
        # still name them): the lease then stays for the next write's recovery, as after a crash
        self.keep_for_recovery = False
        self._fd: int | None = None
        self._dir = self.store.path(JOURNAL_DIR) if self.store.is_local else None

    def new_file_name(self) -> str:
        return f"{data_file_prefix(self.write_id)}{uuid.uuid4().hex}.parquet"

    def scratch_dir(self) -> str:
        """This write's (new, empty) scratch folder inside the index folder; a dead write's is removed for it."""
        path = self.store.path(self._scratch)
        os.makedirs(path)
        return path

    @property
    def _scratch(self) -> str:
        return f"_tmp/{self.write_id}"

    def __enter__(self) -> WriteLease:
        if self._dir is None:  # remote index folders: no leases (the embedded default is local)
            return self
        os.makedirs(self._dir, exist_ok=True)
        # locked before it is visible: another write's recovery, listing the leases between the file's creation and
        # its lock, would take this write for a dead one, delete its lock file and never see it again
        unlisted = os.path.join(self._dir, f".{self.write_id}{_UNLISTED_LOCK}")
        self._fd = os.open(unlisted, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.replace(unlisted, os.path.join(self._dir, f"{self.write_id}.lock"))
        entry = {"write_id": self.write_id, "pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        tmp = os.path.join(self._dir, f".{self.write_id}.json.tmp")
        with open(tmp, "w") as out:
            json.dump(entry, out)
        os.replace(tmp, os.path.join(self._dir, f"{self.write_id}.json"))
        try:
            self.recovered = self._recover()
        except BaseException as exc:
            # __exit__ does not run for a failed __enter__: release the lease here, or every other write in this
            # process's lifetime would take this one for alive
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is None or self._dir is None:
            return
        if exc_type is None and not self._others_alive():
            # Index states older than the last two are unreferenced now; no maintainer can be about to publish one
            # (each holds a lease), so their bucket files go at once rather than after an hour.
            self.store.garbage_collect(min_age_seconds=0.0, keep={self._scratch})
        if self.keep_for_recovery or (exc_type is not None and (not issubclass(exc_type, Exception)
                                                                or issubclass(exc_type, CommitStateUnknownError))):
            # An interrupt (KeyboardInterrupt, SystemExit) may have come after the commit landed, a commit whose
            # outcome is unknown may have landed, and a lost commit's files stay while a snapshot could still name
            # them, so the write kept its files: the lease stays, and the next write
            # removes those no snapshot references, as after a killed write.
            os.close(self._fd)
            self._fd = None
            return
        for name in (f"{self.write_id}.json", f"{self.write_id}.lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self._dir, name))
        os.close(self._fd)  # releases the lock
        self._fd = None

    def _others_alive(self) -> bool:
        assert self._dir is not None
        for name in os.listdir(self._dir):
            if not name.endswith(".lock") or name == f"{self.write_id}.lock":
                continue
            try:
                fd = os.open(os.path.join(self._dir, name), os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            finally:
                os.close(fd)  # a dead write's lease is cleaned by the next write's recovery
        return False

    # -- recovery -----------------------------------------------------------------------------------------------
    def _recover(self) -> Recovered:
        assert self._dir is not None
        done = Recovered()
        others_alive = False
        for name in sorted(os.listdir(self._dir)):
            if name.endswith(_UNLISTED_LOCK):
                _remove_if_older(os.path.join(self._dir, name), _UNLISTED_MAX_AGE_SECONDS)
                continue
            if not name.endswith(".lock") or name == f"{self.write_id}.lock":
                continue
            write_id = name[: -len(".lock")]
            try:
                fd = os.open(os.path.join(self._dir, name), os.O_RDWR)
            except FileNotFoundError:
                continue  # that write finished (and removed its lease) since the listing
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    others_alive = True
                    continue
                self._clean_dead(write_id, done)
                for leftover in (f"{write_id}.json", f".{write_id}.json.tmp", name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self._dir, leftover))
            finally:
                os.close(fd)
        if done.writes and not others_alive:
            # A write died, and no other can be about to publish an index state: unpublished bucket files and
            # temporary folders are leftovers now, whatever their age. (Without a dead write there is nothing to
            # clean: a batch refused later leaves every file as it found it.)
            done.index_files = [p for p in self.store.garbage_collect(min_age_seconds=0.0, keep={self._scratch})
                                if not p.startswith("_state/")]
        return done

    def remove_written(self) -> list[str]:
        """Delete the data files (and their sidecars) this write has written so far. Only for a write whose commit
        was not attempted (a rewrite that failed in one file while others finished): no snapshot can hold them.
        Returns the removed data files."""
        removed = []
        for path in self._files_of(self.write_id):
            if not os.path.basename(path).startswith("."):
                removed.append(path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return removed

    def _files_of(self, write_id: str) -> list[str]:
        """Every file in the data folders named as write ``write_id``'s: its data files and (hidden) sidecars."""
        prefix = data_file_prefix(write_id)
        return [os.path.join(d, f) for data_dir in self.data_dirs
                for d, dirs, files in os.walk(data_dir)
                if INDEX_DIR not in d.split(os.sep) and "_delta_log" not in d.split(os.sep)
                for f in files if f.startswith(prefix) or f.startswith(f".{prefix}")]

    def _clean_dead(self, write_id: str, done: Recovered) -> None:
        done.writes.append(write_id)
        self.store.delete_dir(f"_tmp/{write_id}")
        found = self._files_of(write_id)
        # hidden: fingerprint sidecars (``partialcow.parquet``), removed with their data files; a half-written one
        # (a temporary name) whatever its file
        candidates = [p for p in found if not os.path.basename(p).startswith(".")]
        for path in found:
            if os.path.basename(path).startswith(".") and ".pcfp.tmp-" in path:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        if not candidates:
            return
        referenced = self.referenced()
        for path in candidates:
            if path in referenced:
                done.kept_referenced.append(path)
                continue
            try:
                os.unlink(path)
                done.data_files.append(path)
            except FileNotFoundError:
                pass
            remove_sidecar(path)


def _remove_if_older(path: str, seconds: float) -> None:
    with contextlib.suppress(FileNotFoundError):
        if time.time() - os.stat(path).st_mtime > seconds:
            os.unlink(path)
