"""The wheel users install: it carries the plugin and the macros as its include path; and the editable install of
the README's `.venv`, which `dbt --version` lists too (see hatch_build.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist),
                    str(REPO_ROOT)], check=True, capture_output=True, timeout=300)
    wheel = next(dist.glob("dbt_partialcow-*.whl"))
    target = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


def _run(site: Path, code: str) -> str:
    # the unpacked wheel first on the path, the dependencies from this environment after it
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-S", "-c", f"import site; site.main(); {code}"], env=env,
                          capture_output=True, text=True, check=True, timeout=120).stdout


def test_wheel_carries_macros_and_dbt_project(installed_wheel: Path) -> None:
    include = installed_wheel / "partialcow" / "dbt_include"
    assert (include / "dbt_project.yml").is_file()
    shipped = sorted(p.relative_to(include / "macros").as_posix() for p in (include / "macros").rglob("*.sql"))
    in_repo = sorted(p.relative_to(REPO_ROOT / "macros").as_posix() for p in (REPO_ROOT / "macros").rglob("*.sql"))
    assert shipped == in_repo


def test_installed_plugin_uses_the_bundled_include_path(installed_wheel: Path) -> None:
    out = _run(installed_wheel, "import dbt.adapters.partialcow as p; print(p.Plugin.include_path, p.Plugin.project_name)")
    path, name = out.split()
    assert Path(path) == installed_wheel / "partialcow" / "dbt_include"
    assert name == "dbt_partialcow"



def test_dbt_version_lists_the_plugin() -> None:
    """`dbt --version` in this environment (the README's editable `.venv` in CI) names the plugin and its version."""
    from partialcow import __version__

    out = subprocess.run([sys.executable, "-m", "dbt.cli.main", "--version"], capture_output=True, text=True,
                         timeout=120).stdout
    plugins = out.split("Plugins:", 1)[1]
    assert f"- partialcow: {__version__}" in plugins
