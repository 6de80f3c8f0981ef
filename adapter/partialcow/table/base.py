"""One table concept for both formats: a table lists the data files live in a snapshot, reads key positions from
them, and replaces files by new ones in one optimistic-concurrency commit.

``TableSource`` is the reading half (what the row index needs; ``ParquetFilesSource`` has only that half),
``Table`` adds the commit. Implementations: ``IcebergTable`` (Iceberg's Java API), ``DeltaSparkTable``
(delta-spark's transactions), ``DeltaRsTable`` (delta-rs, no JVM).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from partialcow.metrics import WriteMetrics

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "FILE_ID",
    "POS",
    "CommitResult",
    "DataFile",
    "FileReplacement",
    "Table",
    "TableSource",
    "quote_identifier",
]

#: the columns ``TableSource.read_rows`` adds to the key columns: the file's id in the index, the row's position
FILE_ID = "_file_id"
POS = "_pos"
OPERATION = "partial_cow_upsert"


@dataclass(frozen=True)
class DataFile:
    """A data file live in a table snapshot.

    ``path`` is absolute (as the table's format resolves it); ``record_count`` counts the rows in the file (-1:
    unknown); ``deletes`` is a signature of what deletes rows of it without rewriting it (Iceberg delete files, a
    Delta deletion vector; None: nothing), so a file that gained deletes is noticed although its path did not change.
    """

    path: str
    record_count: int
    file_size_bytes: int = -1
    deletes: str | None = None


@dataclass(frozen=True)
class FileReplacement:
    """One atomic change: remove ``removed`` (live at ``base_version``) and add ``added`` (already written).

    ``conflict_keys`` maps each key column to the keys this change touches, as aligned columns (the i-th values of
    all columns form one key); committers use it to tell a concurrent change of the same keys (a conflict) from an
    unrelated concurrent append (rebased). ``conflict_keys_complete`` is False when the change touches more keys
    than it lists (too many to list): then any concurrently appended data file is a conflict.
    """

    base_version: int
    removed: Sequence[str] = ()
    added: Sequence[str] = ()
    conflict_keys: Mapping[str, Sequence[object]] = field(default_factory=dict)
    conflict_keys_complete: bool = True
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
class TableSource(Protocol):
    """What the row index needs from a table: identity, location, versions, live files and positional reads."""

    spark: SparkSession
    table_format: str

    @property
    def name(self) -> str:
        """How errors and the index state name the table (catalog name or root)."""
        ...

    @property
    def location(self) -> str:
        """The table's root (where the index keeps its folder)."""
        ...

    def current_version(self) -> int:
        """The table's current snapshot id (Iceberg) or version (Delta); -1 for a table without any snapshot."""
        ...

    def live_files(self, version: int | None = None) -> list[DataFile]:
        """The data files live at ``version`` (default: current)."""
        ...

    def normalize_path(self, path: str) -> str:
        """The path as ``live_files`` spells it (a commit may report relative or differently encoded paths)."""
        ...

    def read_rows(self, key_columns: Sequence[str], *, version: int, files: Mapping[str, int]) -> DataFrame:
        """Rows of ``files`` (path -> file id) at ``version`` as ``key..., _file_id (int), _pos (bigint)``."""
        ...

    def column_ids(self) -> Mapping[str, int]:
        """Lower-cased top-level column name -> the id the format gives the column (Iceberg field ids); empty where
        columns have no id. A name can move to another column without a new version (Iceberg's renames)."""
        ...


@runtime_checkable
class Table(TableSource, Protocol):
    """A table that can also be written: ``replace_files`` is its format's atomic, optimistic-concurrency commit."""

    def replace_files(self, change: FileReplacement) -> CommitResult:
        """Commit ``change`` atomically or raise ``CommitConflictError`` / ``UnsupportedTableFeatureError``."""
        ...


def quote_identifier(name: str) -> str:
    """Backtick-quote each part of a dotted table name (embedded backticks doubled).

    >>> quote_identifier("db.my`table")
    '`db`.`my``table`'
    """
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))
