"""Metrics every write returns; the same object feeds the CLI, dbt's adapter response and the benchmark."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields

__all__ = ["PhaseClock", "WriteMetrics"]


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
    # on_schema_change: columns the write added to the table and dropped from it (a commit of their own)
    columns_added: int = 0
    columns_dropped: int = 0
    duration_ms: int = 0
    # wall time per phase of the write (stage, locate, rewrite, commit, index...), see PhaseClock
    phase_ms: dict[str, int] = field(default_factory=dict)

    def __add__(self, other: WriteMetrics) -> WriteMetrics:
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self) if f.name != "phase_ms"}
        phases = dict(self.phase_ms)
        for name, ms in other.phase_ms.items():
            phases[name] = phases.get(name, 0) + ms
        return WriteMetrics(**summed, phase_ms=phases)

    def as_dict(self) -> dict[str, int]:
        """Plain dict (for JSON, commit summaries and dbt's adapter response)."""
        return asdict(self)

    def as_commit_summary(self) -> dict[str, str]:
        """String properties for a table-format commit (Iceberg snapshot summary, Delta commitInfo)."""
        return {f"partialcow.{k}": str(v) for k, v in asdict(self).items() if k != "phase_ms"}


class PhaseClock:
    """Wall time per named phase of one write, summed over repeats (a retried attempt adds to its phases).

    >>> clock = PhaseClock()
    >>> with clock("stage"):
    ...     pass
    >>> sorted(clock.ms)
    ['stage']
    """

    def __init__(self) -> None:
        self.ms: dict[str, int] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.ms[phase] = self.ms.get(phase, 0) + int((time.perf_counter() - started) * 1000)
