"""The docstring examples of the change pipeline, the dbt adapter's Python side and the shared modules run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "partialcow.metrics",
    "partialcow.spark.changes",
    "partialcow.spark.rewrite_job",
    "partialcow.spark.tables",
    "partialcow.dbt_adapter.materialization",
    "partialcow.dbt_adapter.python_models",
]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
