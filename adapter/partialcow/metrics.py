"""Metrics every write returns; the same object feeds the CLI, dbt's adapter response and the benchmark."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

__all__ = ["WriteMetrics"]


@dataclass
class WriteMetrics:
    """Counts of one write (a model run, a merge, a file rewrite), summable across files.

    >>> a = WriteMetrics(rows_updated=2, pages_rewritten=1)
    >>> b = WriteMetrics(rows_updated=3, pages_copied=7)
    >>> (a + b).rows_updated, (a + b).pages_copied
    (5, 7)
    """

    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    files_added: int = 0
    files_removed: int = 0
    files_rewritten: int = 0
    pages_rewritten: int = 0
    pages_copied: int = 0
    bytes_copied: int = 0
    bytes_reencoded: int = 0
    commit_retries: int = 0  # commits beaten by another writer, then located and committed again
    duration_ms: int = 0

    def __add__(self, other: WriteMetrics) -> WriteMetrics:
        return WriteMetrics(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def as_dict(self) -> dict[str, int]:
        """Plain dict (for JSON, commit summaries and dbt's adapter response)."""
        return asdict(self)

    def as_commit_summary(self) -> dict[str, str]:
        """String properties for a table-format commit (Iceberg snapshot summary, Delta commitInfo)."""
        return {f"partialcow.{k}": str(v) for k, v in asdict(self).items()}
