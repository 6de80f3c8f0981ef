"""The docstring examples run through pytest's ``--doctest-modules`` (pyproject.toml: every module of
``adapter/partialcow``, habit 8). This test only guards that the modules below keep examples, so a module losing
them is noticed; running them is pytest's job.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

# modules whose docstrings must keep runnable examples (at least one example that is not skipped)
WITH_EXAMPLES = [
    "partialcow.parquet._thrift",
    "partialcow.parquet._layout",
    "partialcow.parquet._engine",
    "partialcow.parquet._offset_index",
    "partialcow.parquet._column_index",
    "partialcow.parquet._physical",
    "partialcow.parquet.writer",
    "partialcow.parquet.inspect",
    "partialcow.metrics",
    "partialcow.spark.changes",
    "partialcow.spark.rewrite_job",
    "partialcow.spark.decimal_transfer",
    "partialcow.spark.tables",
    "partialcow.dbt_adapter.materialization",
    "partialcow.dbt_adapter.python_models",
    "partialcow.branch.naming",
    "partialcow.branch.image",
]


def _runnable_examples(name: str) -> int:
    tests = doctest.DocTestFinder().find(importlib.import_module(name))
    return sum(1 for t in tests for ex in t.examples if not ex.options.get(doctest.SKIP))


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_module_keeps_examples(name: str) -> None:
    assert _runnable_examples(name) > 0, f"{name} lost its docstring examples"
