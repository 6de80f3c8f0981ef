"""Every error dbt-partialcow raises, under one base class.

Each message names the offending object (model, table, file, column, key) and, when the fix is the user's,
says what to do.
"""

from __future__ import annotations

__all__ = [
    "BranchError",
    "ChangeFeedError",
    "CommitConflictError",
    "CommitError",
    "CommitStateUnknownError",
    "ConfigurationError",
    "DuplicateKeyError",
    "IndexError_",
    "InvalidChangeError",
    "JarNotFoundError",
    "LostCommitError",
    "MetastoreInUseError",
    "ParentTableDroppedError",
    "ParquetRewriteError",
    "PartialCowError",
    "PartitionedTableError",
    "RepeatedKeysError",
    "SparkJobError",
    "StaleIndexError",
    "TableFormatMismatchError",
    "UnsupportedFileError",
    "UnsupportedTableFeatureError",
    "UnusableIndexError",
]


class PartialCowError(Exception):
    """Base class of every dbt-partialcow error."""


class ConfigurationError(PartialCowError):
    """A profile or model setting is wrong (unknown format, unwritable warehouse, ...)."""


class MetastoreInUseError(ConfigurationError):
    """Another process holds the embedded metastore of the warehouse, and kept it for the whole wait."""


class JarNotFoundError(ConfigurationError):
    """A JVM dependency (Iceberg or Delta runtime) cannot be found; the message says how to provide it."""


class ParquetRewriteError(PartialCowError):
    """A Parquet file could not be rewritten; the destination was not created."""


class InvalidChangeError(ParquetRewriteError):
    """The requested changes are invalid for this file (position out of range, unknown column, bad cast, ...)."""


class UnsupportedFileError(ParquetRewriteError):
    """The file uses a feature the page engine refuses (for example Parquet modular encryption)."""


class CommitError(PartialCowError):
    """A table-format commit failed; nothing was committed."""


class CommitConflictError(CommitError):
    """Another writer changed what this commit read or replaces; nothing was committed. Re-run to retry."""


class LostCommitError(CommitConflictError):
    """The commit was accepted, then replaced by another writer's commit made from the same base (a catalog without
    compare-and-swap): nothing of it is in the table. Its files are kept until no snapshot can reference them."""


class CommitStateUnknownError(CommitError):
    """The commit may or may not have landed; its files are kept (never deleted) so the table stays readable."""


class UnsupportedTableFeatureError(CommitError):
    """The table uses a table-format feature this writer cannot honour; the message names the feature."""


class TableFormatMismatchError(UnsupportedTableFeatureError, ConfigurationError):
    """The table exists, but in another table format than the one asked for (or as a plain Parquet or Hive table)."""


class PartitionedTableError(UnsupportedTableFeatureError):
    """A change to a partitioned table that partial rewrites cannot make: files of several partitions replaced in one
    change, files added beside none replaced, rows moved between partitions, a partition transform other than
    identity."""


class IndexError_(PartialCowError):
    """The row-level index cannot answer (named with a trailing underscore to keep the builtin IndexError)."""


class StaleIndexError(IndexError_):
    """The index does not reflect the table's current snapshot and could not be repaired."""


class UnusableIndexError(IndexError_):
    """The stored index cannot be used: its state is unreadable, belongs to a table elsewhere, or names bucket files
    that are gone or damaged. It is derived data: a write builds it again from the table. ``key_columns``: the
    state's keys when it could be read."""

    def __init__(self, message: str, key_columns: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.key_columns = key_columns


class DuplicateKeyError(IndexError_):
    """The table holds the same record key more than once; the message names the table and sample keys."""


class ChangeFeedError(PartialCowError):
    """A batch of model changes is invalid (null keys, duplicate keys, unknown op codes, ...)."""


class RepeatedKeysError(ChangeFeedError):
    """A batch changes the same key more than once and nothing says which change wins; the message names the keys,
    as does ``keys`` (text, empty when unknown)."""

    def __init__(self, message: str, keys: str = "") -> None:
        super().__init__(message)
        self.keys = keys


class BranchError(PartialCowError):
    """A branch operation was refused (invalid name, unknown branch, conflicts, ...)."""


class UnfollowableParentError(BranchError):
    """A branch's model cannot be read over its parent level any more (the parent lost or retyped one of its
    columns); the branch keeps showing what it showed until the model is built on it again."""


class ParentTableDroppedError(BranchError):
    """A merge was refused because the parent's table of a model the branch changed key by key was dropped since
    the branch built it, and no copy of the rows the branch showed is left to recreate it from; nothing was merged.
    ``model`` names the model (``schema.identifier``)."""

    def __init__(self, message: str, model: str = "") -> None:
        super().__init__(message)
        self.model = model


class SparkJobError(PartialCowError):
    """A Spark job of the pipeline failed for a reason none of our checks names; the message carries Spark's."""
