"""The docstring examples of the dbt adapter's own modules, the CLI and the embedded metastore run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "partialcow.dbt_adapter.impl",
    "partialcow.dbt_adapter.snapshots",
    "partialcow.spark.metastore",
    "partialcow.spark.executors",
    "partialcow.progress",
    "partialcow.project",
    "partialcow.cli",
]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
