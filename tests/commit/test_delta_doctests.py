"""The runnable examples in the docstrings of partialcow.commit.delta's modules."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

pytest.importorskip("deltalake")

import partialcow.commit.delta as delta_package  # noqa: E402


def test_docstring_examples_run() -> None:
    attempted = 0
    for info in pkgutil.iter_modules(delta_package.__path__):
        module = importlib.import_module(f"{delta_package.__name__}.{info.name}")
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.__name__
        attempted += result.attempted
    assert attempted >= 5
