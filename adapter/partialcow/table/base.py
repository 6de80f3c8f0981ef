"""The one interface both table formats implement: "replace these files by those, based on version S"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from partialcow.metrics import WriteMetrics

__all__ = ["CommitResult", "DataFile", "FileReplacement", "TableCommitter"]

OPERATION = "partial_cow_upsert"


@dataclass(frozen=True)
class DataFile:
    """A live data file of a table snapshot, as the table format refers to it."""

    path: str
    record_count: int
    file_size_bytes: int


@dataclass(frozen=True)
class FileReplacement:
    """One atomic change: remove ``removed`` (live at ``base_version``) and add ``added`` (already written).

    ``conflict_keys`` maps each key column to the key values this change touches; committers use it to tell a
    concurrent change of the same keys (a conflict) from an unrelated concurrent append (rebased).
    """

    base_version: int
    removed: Sequence[str] = ()
    added: Sequence[str] = ()
    conflict_keys: Mapping[str, Sequence[object]] = field(default_factory=dict)
    metrics: WriteMetrics = field(default_factory=WriteMetrics)
    operation: str = OPERATION


@dataclass(frozen=True)
class CommitResult:
    """What a commit produced: the new table version and the files it removed and added."""

    version: int
    previous_version: int
    removed: tuple[str, ...]
    added: tuple[str, ...]


@runtime_checkable
class TableCommitter(Protocol):
    """A table format's commit path. Implementations: ``IcebergCommitter`` and ``DeltaCommitter``."""

    def current_version(self) -> int:
        """The table's current snapshot id (Iceberg) or version (Delta)."""
        ...

    def live_files(self, version: int | None = None) -> list[DataFile]:
        """The data files live at ``version`` (default: current)."""
        ...

    def replace_files(self, change: FileReplacement) -> CommitResult:
        """Commit ``change`` atomically or raise ``CommitConflictError`` / ``UnsupportedTableFeatureError``."""
        ...
