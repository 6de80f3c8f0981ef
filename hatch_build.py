"""Build hook: what an editable install (``pip install -e .``, the README's ``.venv``) needs besides the path to the
sources.

``dbt --version`` lists the plugins whose ``dbt/adapters/<name>/__version__.py`` sits in a folder of the
``dbt.adapters`` package as Python finds it before importing it, which is site-packages only: the sources' folder
is added to that package's path when it is imported. So the editable wheel carries a copy of that one file (imports
still resolve to the sources: the package there has an ``__init__.py``, the copy's folder has none). The macros
need no copy in an editable install: the plugin finds them at the repository root.
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

VERSION_FILE = "adapter/dbt/adapters/partialcow/__version__.py"


class EditableVersionHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            build_data["force_include_editable"] = {VERSION_FILE: "dbt/adapters/partialcow/__version__.py"}
