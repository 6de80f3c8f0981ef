"""Atomic table-format commits: replace data files by new ones with optimistic concurrency (Iceberg, Delta)."""

from partialcow.commit.base import CommitResult, DataFile, FileReplacement, TableCommitter

__all__ = ["CommitResult", "DataFile", "FileReplacement", "TableCommitter"]
