"""The dbt project a command line tool works for, and the ``partialcow`` output of its profile.

``partialcow doctor`` and ``partialcow index`` look at the warehouse (and Iceberg runtime) of the project's profile,
as ``dbt`` would, instead of a ``./warehouse`` of whatever folder they were started in. The project is found like
dbt finds it: ``--project-dir``, else ``DBT_PROJECT_DIR``, else the current folder or the nearest parent holding a
``dbt_project.yml``; its profile in ``--profiles-dir`` or ``DBT_PROFILES_DIR`` (only there, as dbt), else the
current folder, ``~/.dbt`` or the project folder. Profiles are read as YAML, then ``{{ env_var('NAME') }}`` /
``{{ env_var('NAME', 'default') }}`` are replaced in the values of the chosen profile and target only (as dbt renders
only the profile it uses); other Jinja is left as it is (this module does not import dbt).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partialcow.exceptions import ConfigurationError

__all__ = ["ProfileTarget", "find_project", "profile_target", "render_env_vars"]

_ENV_VAR = re.compile(r"""\{\{\s*env_var\(\s*(['"])(\w+)\1\s*(?:,\s*(['"])(.*?)\3\s*)?\)\s*\}\}""")


def render_env_vars(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with dbt's ``{{ env_var('NAME'[, 'default']) }}`` replaced by the variable (or the default).

    >>> render_env_vars("wh: {{ env_var('WH', 'warehouse') }}/{{ env_var('X') }}", {"X": "1"})
    'wh: warehouse/1'
    """
    environ = os.environ if environ is None else environ

    def value(match: re.Match[str]) -> str:
        name, default = match.group(2), match.group(4)
        if name in environ:
            return environ[name]
        if default is None:
            raise ConfigurationError(f"profile: environment variable {name} is not set and has no default")
        return default

    return _ENV_VAR.sub(value, text)


def find_project(project_dir: str | None = None, *, start: Path | None = None) -> Path | None:
    """The dbt project folder: ``project_dir``, ``DBT_PROJECT_DIR``, or the nearest folder from ``start`` (the current
    one) upwards whose ``dbt_project.yml`` names a profile; None when there is none."""
    explicit = project_dir or os.environ.get("DBT_PROJECT_DIR")
    if explicit:
        folder = Path(explicit).expanduser().absolute()
        if not (folder / "dbt_project.yml").is_file():
            raise ConfigurationError(f"--project-dir {explicit}: no dbt_project.yml in {folder}")
        return folder
    here = (start or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        # a dbt package without a profile (such as this adapter's own macros) is not a project one runs
        if (folder / "dbt_project.yml").is_file() and _project_profile(folder):
            return folder
    return None


@dataclass(frozen=True)
class ProfileTarget:
    """The output of a profile that a ``partialcow`` command needs, and where it came from."""

    project_dir: Path
    profile: str
    target: str
    profiles_file: Path
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def warehouse(self) -> str:
        """The warehouse folder, a relative one resolved against the project folder (as the adapter does)."""
        from partialcow.spark.session import resolve_warehouse

        return resolve_warehouse(str(self.settings.get("warehouse") or "warehouse"), self.project_dir)

    def describe(self) -> str:
        return f"profile {self.profile}, target {self.target} ({self.profiles_file})"


def _yaml(path: Path) -> dict[str, Any]:
    """The YAML mapping in ``path``, unrendered: Jinja is rendered later, and only in the values that are used."""
    import yaml  # type: ignore[import-untyped]  # dbt-core's dependency; no stubs installed

    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{path} is not valid YAML: {exc}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigurationError(f"{path}: expected a mapping at the top level, found a {type(loaded).__name__}")
    return loaded


def _rendered(value: Any) -> Any:
    """``value`` (a parsed YAML value) with ``env_var`` rendered in every string in it."""
    if isinstance(value, str):
        return render_env_vars(value)
    if isinstance(value, dict):
        return {k: _rendered(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rendered(v) for v in value]
    return value


def _project_profile(project_dir: Path) -> str | None:
    """The profile ``dbt_project.yml`` names (rendered: dbt allows ``env_var`` there), None when it names none."""
    name = _rendered(_yaml(project_dir / "dbt_project.yml").get("profile"))
    return str(name) if name else None


def _profiles_file(project_dir: Path, profiles_dir: str | None) -> Path:
    """The profiles.yml dbt would read for the project at ``project_dir``."""
    for origin, folder in (("--profiles-dir", profiles_dir), ("DBT_PROFILES_DIR", os.environ.get("DBT_PROFILES_DIR"))):
        if folder:
            # dbt looks nowhere else when told where: falling back would read another warehouse's profile
            path = Path(folder).expanduser().absolute() / "profiles.yml"
            if not path.is_file():
                raise ConfigurationError(f"{origin} {folder}: no profiles.yml in {path.parent} (dbt reads the "
                                         "profile only there): point it at the folder that holds profiles.yml")
            return path
    # dbt's default (the current folder, then ~/.dbt), so that both read the same profile; then the project's
    # folder, where dbt would need --profiles-dir
    files = [Path(f) / "profiles.yml" for f in (os.getcwd(), Path.home() / ".dbt", project_dir)]
    found = next((f for f in files if f.is_file()), None)
    if found is None:
        raise ConfigurationError(f"no profiles.yml for project {project_dir} (looked in {', '.join(map(str, files))}; "
                                 "pass --profiles-dir)")
    return found


def profile_target(project_dir: Path, *, profiles_dir: str | None = None, target: str | None = None) -> ProfileTarget:
    """The profile output the project at ``project_dir`` runs with (``target``: the profile's default target)."""
    name = _project_profile(project_dir)
    if not name:
        raise ConfigurationError(f"{project_dir / 'dbt_project.yml'} names no profile")
    found = _profiles_file(project_dir, profiles_dir)
    profiles = _yaml(found)
    profile = profiles.get(name)
    if not isinstance(profile, dict):
        raise ConfigurationError(f"{found} has no profile {name!r} (the profile of {project_dir / 'dbt_project.yml'})")
    chosen = target or os.environ.get("DBT_TARGET") or _rendered(profile.get("target"))
    outputs = profile.get("outputs") or {}
    if chosen not in outputs or not isinstance(outputs[chosen], dict):
        raise ConfigurationError(
            f"profile {name} in {found} has no target {chosen!r} (targets: {', '.join(map(str, outputs))})")
    settings = _rendered(outputs[chosen])
    if settings.get("type") != "partialcow":
        raise ConfigurationError(f"profile {name}, target {chosen} in {found} is of type {settings.get('type')!r}, "
                                 "not partialcow")
    return ProfileTarget(project_dir=project_dir, profile=name, target=chosen, profiles_file=found, settings=settings)
