"""Deterministic interleaving of two writers: one runs to completion right before the other commits."""

from __future__ import annotations


class CommitsAfter:
    """A committer (wrapping a table's ``format_table``) that lets ``other_writer`` run right before each commit."""

    def __init__(self, inner, other_writer) -> None:
        self._inner = inner
        self._other_writer = other_writer

    def replace_files(self, change):
        self._other_writer()
        return self._inner.replace_files(change)

    def __getattr__(self, name):
        return getattr(self._inner, name)
