"""The docstring examples of the page engine run (habit 8: examples are tested)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["partialcow.parquet._thrift", "partialcow.parquet._layout", "partialcow.parquet._engine",
           "partialcow.parquet.writer", "partialcow.parquet.inspect"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
