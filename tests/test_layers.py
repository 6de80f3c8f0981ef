"""Layers point down only (README: Layout): a module may import its own layer, lower layers and the shared top-level
leaf modules, never a higher layer. Imports are read with ``ast`` (also those inside functions and TYPE_CHECKING
blocks: a lazy import of a higher layer is still a dependency on it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "adapter" / "partialcow"

# low to high; one rank may hold several packages that do not depend on each other's rank
RANK = {"parquet": 0, "table": 1, "index": 2, "spark": 3, "branch": 4, "dbt_adapter": 5}
# top-level modules every layer may import (leaves: they import no layer above parquet)
SHARED = {"exceptions", "formats", "metrics", "faults", "progress", "__version__"}
# may import anything: entry points
ANY = {"cli", "project"}
# known exceptions, each with its reason (module -> imported package)
ALLOWED: dict[tuple[str, str], str] = {}


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {n.removeprefix("partialcow.") for n in found if n == "partialcow" or n.startswith("partialcow.")}


def violations(package: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        module = _module_name(path, package)
        if module.split(".")[0] in ANY or not module:
            continue
        top = module.split(".")[0]
        own = RANK.get(top)
        for target in sorted(_imports(path)):
            target_top = target.split(".")[0]
            if target_top in SHARED or target_top == top or (module, target_top) in ALLOWED:
                continue
            theirs = RANK.get(target_top)
            if theirs is None:
                continue  # a name imported from the package root (``from partialcow import x``) is checked as x
            if own is None:  # a shared top-level module: must stay a leaf
                out.append(f"{module} (shared) imports {target}")
            elif theirs > own:
                out.append(f"{module} ({top}) imports {target} ({target_top}, a higher layer)")
    return out


def test_layers_point_down() -> None:
    assert violations() == []


def test_a_violating_import_is_caught(tmp_path: Path) -> None:
    """The check can fail: a parquet module importing the spark layer is reported."""
    (tmp_path / "parquet").mkdir()
    (tmp_path / "parquet" / "bad.py").write_text("def f():\n    from partialcow.spark.changes import ChangeSpec\n")
    (tmp_path / "faults.py").write_text("from partialcow.index import RowIndex\n")
    found = violations(tmp_path)
    assert any("parquet.bad" in v and "spark.changes" in v for v in found), found
    assert any("faults (shared)" in v for v in found), found


@pytest.mark.parametrize("module", sorted(SHARED - {"__version__"}))
def test_shared_module_exists(module: str) -> None:
    assert (PACKAGE / f"{module}.py").exists()
