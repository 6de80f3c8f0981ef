"""dbt discovers adapter plugins as ``dbt.adapters.<type>``; ours lives in ``partialcow.dbt_adapter``."""

from pathlib import Path

from dbt.adapters.base import AdapterPlugin

from partialcow.dbt_adapter.connections import PartialcowCredentials
from partialcow.dbt_adapter.impl import PartialcowAdapter, enforce_contracts_of_our_materialization


def _include_path() -> str:
    """The dbt package with our macros: bundled in the wheel, or the repository root in an editable install."""
    import partialcow

    package_dir = Path(partialcow.__file__).resolve().parent
    for candidate in (package_dir / "dbt_include", package_dir.parents[1]):
        if (candidate / "dbt_project.yml").is_file() and (candidate / "macros").is_dir():
            return str(candidate)
    raise RuntimeError(f"dbt-partialcow's macros were not found next to {package_dir}: reinstall the package")


enforce_contracts_of_our_materialization()

Plugin = AdapterPlugin(
    adapter=PartialcowAdapter,  # type: ignore[arg-type]
    credentials=PartialcowCredentials,
    include_path=_include_path(),
    dependencies=["spark"],
    # dbt names the package "dbt_<folder name>" otherwise; the folder is the repo root in editable installs
    project_name="dbt_partialcow",
)
