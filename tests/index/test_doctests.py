"""The docstring examples of the index modules that run without Spark."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "module", ["partialcow.index", "partialcow.index.hashing", "partialcow.index.storage", "partialcow.table.base"]
)
def test_doctests(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
