"""Where an index lives and how its state file is switched: ``<table location>/_partialcow_index/``.

Layout::

    _partialcow_index/
        _state/v00000001.json     one immutable state file per index version; the highest number is current
        data/b00003-<uuid>.parquet  immutable bucket files (key columns, _file_id, _pos), each sorted by key
        _tmp/<uuid>/               Spark's output before its files are moved into data/

A bucket's entries are the union of its files: a base file, and delta files holding entries a commit added since
the base was written. A commit that only adds a few entries to a bucket writes them as a delta file instead of
rewriting the bucket; any other change to the bucket, or too many deltas, merges its files into a new base
(``partialcow.index.local``).

A new index version is written to a temporary name and moved to ``_state/v<n+1>.json`` without overwriting: on a
local file system the move is an ``os.link`` (fails if the name exists), so two maintainers racing for the same
version cannot both win; on object stores (pyarrow's S3/GCS file systems) the move is a check-then-copy and the
last writer wins, which is safe for the single-writer setups this project targets (only local file systems are
tested here). Files no longer referenced by the last two states are garbage-collected after the switch, so a
reader that loaded the previous state keeps working; unreferenced files younger than an hour are kept, since they
may belong to a maintainer that has not yet published.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pyarrow.fs as pafs

from partialcow.exceptions import IndexError_, StaleIndexError, UnusableIndexError
from partialcow.table.paths import local_path

__all__ = [
    "BUCKET_WRITE_OPTIONS",
    "INDEX_DIR",
    "IndexState",
    "IndexStore",
    "IndexedFile",
]

INDEX_DIR = "_partialcow_index"
STATE_FORMAT_VERSION = 2
_READABLE_FORMATS = (1, 2)  # 1: before delta files
_STATE_NAME = re.compile(r"^v(\d{8})\.json$")
# How every bucket file is written (pyarrow.parquet.write_table options). Keys are nearly all distinct, so a
# dictionary would be built and then abandoned for each column: writing PLAIN halves the write (bench/README.md).
BUCKET_WRITE_OPTIONS: dict[str, Any] = {"compression": "zstd", "use_dictionary": False}


@dataclass(frozen=True)
class IndexedFile:
    """A table data file the index covers.

    ``file_id`` is what the bucket files store (a small int instead of a long path); ``deletes`` is a signature of
    the delete files (Iceberg) applied to the file, so a data file that gains deletes is noticed; ``buckets`` lists
    the buckets holding the file's rows, or None when it spans all buckets.
    """

    file_id: int
    path: str
    record_count: int
    indexed_rows: int
    deletes: str | None = None
    buckets: tuple[int, ...] | None = None


@dataclass(frozen=True)
class IndexState:
    """The content of one state file: what the index reflects and where its bucket files are."""

    table: str
    table_format: str
    location: str
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]
    num_buckets: int
    table_version: int
    files: tuple[IndexedFile, ...]
    buckets: tuple[str | None, ...]  # bucket -> base file name relative to the index folder (None: empty bucket)
    next_file_id: int
    state_version: int = 0
    hash: str = "spark-xxhash64(seed=42), pmod num_buckets"
    created_by: str = "partialcow.index"
    extra: Mapping[str, Any] = field(default_factory=dict)
    # bucket -> its delta files, oldest first (only a bucket with a base file has any); () when no bucket has one
    deltas: tuple[tuple[str, ...], ...] = ()

    def bucket_files(self, bucket: int) -> tuple[str, ...]:
        """Every file holding entries of ``bucket``: its base file, then its delta files.

        >>> state = IndexState("t", "iceberg", "/t", ("k",), ("bigint",), 2, 1, (), ("b0", None), 0,
        ...                    deltas=(("d0",), ()))
        >>> state.bucket_files(0), state.bucket_files(1), state.all_bucket_files()
        (('b0', 'd0'), (), ['b0', 'd0'])
        """
        base = self.buckets[bucket]
        return ((base,) if base is not None else ()) + (self.deltas[bucket] if self.deltas else ())

    def all_bucket_files(self) -> list[str]:
        return [name for b in range(len(self.buckets)) for name in self.bucket_files(b)]

    def with_bucket_files(self, changes: Mapping[int, Sequence[str]]) -> IndexState:
        """This state with the files of the buckets in ``changes`` replaced: the first named file becomes the base,
        the others its deltas; no file leaves the bucket empty.

        >>> state = IndexState("t", "iceberg", "/t", ("k",), ("bigint",), 2, 1, (), ("b0", "b1"), 0)
        >>> changed = state.with_bucket_files({1: ["b1", "d1"]})
        >>> changed.buckets, changed.deltas, changed.with_bucket_files({1: []}).deltas
        (('b0', 'b1'), ((), ('d1',)), ())
        """
        buckets = list(self.buckets)
        deltas = [list(d) for d in self.deltas] if self.deltas else [[] for _ in buckets]
        for bucket, names in changes.items():
            buckets[bucket] = names[0] if names else None
            deltas[bucket] = list(names[1:])
        kept = tuple(tuple(d) for d in deltas) if any(deltas) else ()
        return replace(self, buckets=tuple(buckets), deltas=kept)

    def to_json(self) -> str:
        body = asdict(self)
        body["format_version"] = STATE_FORMAT_VERSION
        return json.dumps(body, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, *, source: str) -> IndexState:
        body = json.loads(text)
        if body.pop("format_version", None) not in _READABLE_FORMATS:
            raise IndexError_(
                f"index state {source} has an unknown format; rebuild the index with `partialcow index rebuild`"
            )
        body["files"] = tuple(
            IndexedFile(**{**f, "buckets": None if f["buckets"] is None else tuple(f["buckets"])})
            for f in body["files"]
        )
        for name in ("key_columns", "key_types", "buckets"):
            body[name] = tuple(body[name])
        body["deltas"] = tuple(tuple(names) for names in body.get("deltas", ()))
        return cls(**body)

    def by_path(self) -> dict[str, IndexedFile]:
        return {f.path: f for f in self.files}


class IndexStore:
    """File operations on one index folder, through pyarrow's file systems (local, S3, GCS, HDFS).

    >>> import tempfile
    >>> store = IndexStore(tempfile.mkdtemp())
    >>> store.latest_state_version() is None
    True
    """

    def __init__(self, table_location: str) -> None:
        local = local_path(table_location)
        if local is not None:
            self.fs: pafs.FileSystem = pafs.LocalFileSystem()
            self.root = os.path.join(local, INDEX_DIR)
        else:
            self.fs, base = pafs.FileSystem.from_uri(table_location)
            self.root = f"{base.rstrip('/')}/{INDEX_DIR}"
        self._local = local is not None

    # -- paths ------------------------------------------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        """True when the index lives on the local file system (plain paths work everywhere)."""
        return self._local

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def uri(self, relative: str) -> str:
        """A URI Spark can read (local paths stay plain paths)."""
        p = self.path(relative)
        if self._local:
            return p
        return f"{self.fs.type_name}://{p}"

    def new_tmp_dir(self) -> str:
        return f"_tmp/{uuid.uuid4().hex}"

    # -- state files ------------------------------------------------------------------------------------------
    def _state_versions(self) -> list[int]:
        info = self.fs.get_file_info(self.path("_state"))
        if info.type == pafs.FileType.NotFound:
            return []
        found = self.fs.get_file_info(pafs.FileSelector(self.path("_state")))
        return sorted(int(m.group(1)) for f in found if (m := _STATE_NAME.match(f.base_name)))

    def latest_state_version(self) -> int | None:
        versions = self._state_versions()
        return versions[-1] if versions else None

    def read_state(self, version: int | None = None) -> IndexState | None:
        """State ``version`` (the latest when None; None when there is none), numbered by its file's name: a file
        copied in from an older state carries that state's number inside. ``UnusableIndexError`` when it cannot
        be read (torn, emptied, of an unknown format)."""
        if version is None:
            version = self.latest_state_version()
            if version is None:
                return None
        name = self.path(f"_state/v{version:08d}.json")
        with self.fs.open_input_stream(name) as stream:
            text = stream.read()
        try:
            state = IndexState.from_json(text.decode("utf-8"), source=name)
        except (ValueError, KeyError, TypeError, IndexError_) as exc:  # JSON, UTF-8, fields, format
            raise UnusableIndexError(
                f"index state {name} cannot be read ({type(exc).__name__}: {exc}); the next write, or `partialcow "
                "index rebuild --key <columns>`, builds the index again") from None
        return replace(state, state_version=version)

    def unusable_files(self, state: IndexState) -> list[str]:
        """The bucket files ``state`` names that are missing or not whole Parquet files (damaged by hand or by
        the disk; a write publishes a state only after its files are complete)."""
        bad = []
        for name in state.all_bucket_files():
            try:
                with self.fs.open_input_file(self.path(name)) as f:
                    size = f.size()
                    head = f.read(4)
                    f.seek(max(size - 4, 0))
                    whole = size >= 12 and head == b"PAR1" and f.read(4) == b"PAR1"
            except (FileNotFoundError, OSError):
                whole = False
            if not whole:
                bad.append(name)
        return bad

    def write_state(self, state: IndexState) -> None:
        """Publish ``state`` as version ``state.state_version``; refuse if another writer published it first."""
        self.fs.create_dir(self.path("_state"), recursive=True)
        final = self.path(f"_state/v{state.state_version:08d}.json")
        tmp = self.path(f"_state/.tmp-{uuid.uuid4().hex}.json")
        with self.fs.open_output_stream(tmp) as out:
            out.write(state.to_json().encode("utf-8"))
        try:
            if self._local:
                os.link(tmp, final)  # atomic, and fails if the version already exists
                os.unlink(tmp)
            else:
                if self.fs.get_file_info(final).type != pafs.FileType.NotFound:
                    raise FileExistsError(final)
                self.fs.move(tmp, final)
        except FileExistsError:
            self.fs.delete_file(tmp)
            raise StaleIndexError(
                f"index of table {state.table} was updated concurrently (state v{state.state_version} exists); "
                "re-run to refresh from the new state"
            ) from None

    # -- data files ---------------------------------------------------------------------------------------------
    def list_dir(self, relative: str, *, recursive: bool = False) -> list[pafs.FileInfo]:
        info = self.fs.get_file_info(self.path(relative))
        if info.type == pafs.FileType.NotFound:
            return []
        return list(self.fs.get_file_info(pafs.FileSelector(self.path(relative), recursive=recursive)))

    def move_in(self, src_relative: str, dst_relative: str) -> None:
        self.fs.create_dir(os.path.dirname(self.path(dst_relative)), recursive=True)
        self.fs.move(self.path(src_relative), self.path(dst_relative))

    def delete_dir(self, relative: str) -> None:
        if self.fs.get_file_info(self.path(relative)).type != pafs.FileType.NotFound:
            self.fs.delete_dir(self.path(relative))

    def delete_all(self) -> None:
        self.delete_dir("")

    def garbage_collect(self, *, keep_states: int = 2, min_age_seconds: float = 3600.0,
                        keep: Iterable[str] = ()) -> list[str]:
        """Delete state files older than the last ``keep_states``, and data files none of those reference.

        Unreferenced data files and leftover temporary folders younger than ``min_age_seconds`` are kept: they may
        belong to another maintainer that has written its buckets but not yet published its state (a write that
        knows no other is running passes 0). ``keep``: temporary folders (``_tmp/<name>``) in use by the caller.
        """
        keep = set(keep)
        versions = self._state_versions()
        kept = versions[-keep_states:]
        referenced: set[str] = set()
        for v in kept:
            try:
                state = self.read_state(v)
            except FileNotFoundError:
                state = None
            except UnusableIndexError:
                continue  # a damaged state references nothing a reader could use
            if state is None:
                return []  # another collection removed it, so newer states exist: theirs to collect
            referenced.update(state.all_bucket_files())
        cutoff = time.time() - min_age_seconds
        deleted: list[str] = []
        # another collection may remove the same files at the same time: a file already gone is fine
        for v in versions[: len(versions) - len(kept)]:
            if _gone(self.fs.delete_file, self.path(f"_state/v{v:08d}.json")):
                deleted.append(f"_state/v{v:08d}.json")
        for info in self.list_dir("data"):
            rel = f"data/{info.base_name}"
            if rel not in referenced and _older(info, cutoff) and _gone(self.fs.delete_file, info.path):
                deleted.append(rel)
        for info in self.list_dir("_tmp"):
            if f"_tmp/{info.base_name}" not in keep and _older(info, cutoff) and _gone(self.fs.delete_dir, info.path):
                deleted.append(f"_tmp/{info.base_name}")
        return deleted


def _gone(delete: Callable[[str], None], path: str) -> bool:
    """Delete ``path``; False when it was not there any more."""
    try:
        delete(path)
    except FileNotFoundError:
        return False
    return True


def _older(info: pafs.FileInfo, cutoff: float) -> bool:
    return info.mtime is None or info.mtime.timestamp() < cutoff


def unique_names(prefix: str, buckets: Iterable[int]) -> dict[int, str]:
    """A fresh data-file name per bucket (never reused, so files stay immutable)."""
    tag = uuid.uuid4().hex[:12]
    return {b: f"data/{prefix}{b:05d}-{tag}.parquet" for b in buckets}
