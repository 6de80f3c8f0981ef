"""The docstring examples of partialcow.spark run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["partialcow.spark.jars", "partialcow.spark.session", "partialcow.spark.doctor",
                                    "partialcow.spark.partitioning", "partialcow.spark.worker_daemon"])
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
