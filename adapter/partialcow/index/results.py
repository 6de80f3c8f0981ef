"""What the row index's operations return: metrics, lookup results, the verify report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass
class IndexMetrics:
    """What one index operation did. ``files_reindexed`` lists the data files whose rows were (re)read;
    ``buckets_rewritten`` counts the buckets written anew, ``delta_files_written`` those that took their new entries
    as a delta file instead (see ``partialcow.index.storage``)."""

    operation: str
    table_version: int
    rows_indexed: int = 0
    rows_total: int = 0
    num_buckets: int = 0
    buckets_rewritten: int = 0
    delta_files_written: int = 0
    files_reindexed: list[str] = field(default_factory=list)
    files_dropped: list[str] = field(default_factory=list)
    files_repointed: list[str] = field(default_factory=list)
    duration_ms: int = 0


@dataclass(frozen=True)
class LookupResult:
    """``found``: ``key..., file, pos`` of keys present in the table; ``missing``: keys absent from it (both lazy)."""

    found: DataFrame
    missing: DataFrame
    buckets_read: int


@dataclass
class VerifyReport:
    """Outcome of comparing the index with a fresh scan of the table. ``ok`` is True only if they agree."""

    table: str
    index_version: int
    table_version: int
    stale_files: list[str] = field(default_factory=list)
    rows_in_table: int = 0
    rows_in_index: int = 0
    missing_from_index: int = 0
    extra_in_index: int = 0
    wrong_bucket: int = 0
    duplicate_keys: int = 0
    samples: list[str] = field(default_factory=list)
    #: False when the index's snapshot was gone from the table (expired): nothing could be compared
    checked: bool = True

    @property
    def ok(self) -> bool:
        """The index holds every row of the table as it is now: a version the table committed since without
        changing its files (a property set, a Delta checkpoint's commit) changes nothing the index holds."""
        return not self.stale_files and self.agrees_at_its_snapshot

    @property
    def agrees_at_its_snapshot(self) -> bool:
        """The index holds exactly the rows of the table's snapshot it reflects (``index_version``)."""
        return (
            self.checked
            and self.missing_from_index == 0
            and self.extra_in_index == 0
            and self.wrong_bucket == 0
            and self.duplicate_keys == 0
        )

    @property
    def behind(self) -> bool:
        """Right at its snapshot (or that snapshot expired), but files changed since (another writer): the next write
        brings it up to date."""
        return bool(self.stale_files) and (self.agrees_at_its_snapshot or not self.checked)

