"""The branch package's shape: no import circle between its modules (issue 28 found
``store -> image -> overlay -> store``), no module over 600 lines, and the docstring examples run."""

from __future__ import annotations

import ast
import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "adapter" / "partialcow" / "branch"
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def _imports(module: str) -> set[str]:
    """Sibling modules ``module`` imports, counting imports made only for type checking."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("partialcow.branch."):
            found.add(node.module.split(".")[2])
    return found & set(MODULES)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                return path + [node, dep]
            if dep not in state:
                found = visit(dep, path + [node])
                if found:
                    return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [])
            if found:
                return found
    return None


def test_cycle_finder_finds_the_circle_of_issue_28():
    assert _cycle({"store": {"image"}, "image": {"overlay"}, "overlay": {"store"}}) == ["image", "overlay", "store",
                                                                                       "image"]


def test_no_import_circle_between_branch_modules():
    assert _cycle({m: _imports(m) for m in MODULES}) is None


@pytest.mark.parametrize("module", MODULES)
def test_modules_stay_small(module):
    assert len((PACKAGE / f"{module}.py").read_text().splitlines()) < 600


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    assert doctest.testmod(importlib.import_module(f"partialcow.branch.{module}")).failed == 0
