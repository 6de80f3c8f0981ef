"""Run several dbt-tests-adapter suites as one dbt project.

Each suite of dbt's adapter tests is a class whose fixtures (``seeds``, ``models``, ``macros``) make a project;
every class costs a project set-up, a schema, and at least one ``dbt build``. A class that subclasses several
suites and merges their fixtures builds them all at once: :func:`merged_fixture` calls each base's own fixture
function on the test instance and joins the results (renaming files where two suites use the same name).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest


def fixture_of(base: type, name: str) -> dict[str, str]:
    """What ``base``'s fixture ``name`` returns for a bare instance (empty when the suite has none)."""
    function = getattr(base, name, None)
    if function is None:
        return {}
    return dict(getattr(function, "__wrapped__", function)(base()))


def merged_fixture(name: str, bases: Sequence[type],
                   rename: Callable[[type, str, str], tuple[str, str]] | None = None,
                   extra: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """A class-scoped fixture ``name``: the union of the ``bases``' fixtures ``name`` (``rename(base, file, text)``
    may rename a file and adapt its text), plus ``extra``. Two suites giving one file different texts is an error."""

    @pytest.fixture(scope="class")
    def fixture(self):  # type: ignore[no-untyped-def]
        merged: dict[str, str] = {}
        for base in bases:
            function = getattr(base, name, None)
            if function is None:
                continue
            for key, text in getattr(function, "__wrapped__", function)(self).items():
                key, text = rename(base, key, text) if rename else (key, text)
                if key in merged and merged[key] != text:
                    raise ValueError(f"{name} {key}: {base.__name__} and another suite define it differently")
                merged[key] = text
        merged.update(extra or {})
        return merged

    fixture.__name__ = name
    return fixture
