"""The runnable examples in partialcow.commit.delta's docstrings."""

from __future__ import annotations

import doctest

import pytest

pytest.importorskip("deltalake")

import partialcow.commit.delta as delta_module  # noqa: E402


def test_docstring_examples_run() -> None:
    result = doctest.testmod(delta_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5
    assert result.failed == 0
