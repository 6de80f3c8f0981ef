"""The docstring examples of the page engine run (habit 8: examples are tested).

Every module of ``partialcow.parquet`` is collected (no hand-kept list); the modules named in ``WITH_EXAMPLES``
must have examples, so that a module losing them is noticed.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import partialcow.parquet

MODULES = sorted(m.name for m in pkgutil.iter_modules(partialcow.parquet.__path__, "partialcow.parquet."))
WITH_EXAMPLES = {"partialcow.parquet._thrift", "partialcow.parquet._layout", "partialcow.parquet._engine",
                 "partialcow.parquet._offset_index", "partialcow.parquet._column_index", "partialcow.parquet._physical",
                 "partialcow.parquet.writer", "partialcow.parquet.inspect"}


def test_modules_with_examples_exist() -> None:
    assert WITH_EXAMPLES <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0 or name not in WITH_EXAMPLES, f"{name} lost its examples"
