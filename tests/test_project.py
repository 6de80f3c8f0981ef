"""Which profile ``partialcow doctor`` and ``partialcow index`` read (``partialcow.project``): found and rendered as dbt
finds and renders it. No Spark: every case fails or is decided before a session starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from partialcow.cli import main
from partialcow.exceptions import ConfigurationError
from partialcow.project import profile_target

PROJECT = "name: p\nversion: '1.0'\nconfig-version: 2\nprofile: p\n"


def _output(warehouse: str) -> dict:
    return {"type": "partialcow", "schema": "s", "warehouse": warehouse}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A dbt project, run from a folder of its own, with no profile found anywhere else."""
    for name in ("DBT_PROFILES_DIR", "DBT_PROJECT_DIR", "DBT_TARGET", "PCOW_WH", "PCOW_OTHER_PW"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "dbt_project.yml").write_text(PROJECT)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return folder


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_profiles_dir_without_profiles_yml_is_an_error(project: Path, tmp_path: Path, how: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: --profiles-dir (or DBT_PROFILES_DIR) naming a folder without profiles.yml was passed over and the
    current folder's profiles.yml read instead (another warehouse's, perhaps); dbt refuses it."""
    (Path.cwd() / "profiles.yml").write_text(json.dumps({"p": {"target": "t", "outputs": {"t": _output("/other")}}}))
    empty = tmp_path / "empty"
    empty.mkdir()
    if how == "env":
        monkeypatch.setenv("DBT_PROFILES_DIR", str(empty))
    with pytest.raises(ConfigurationError, match=f"no profiles.yml in {empty}") as raised:
        profile_target(project, profiles_dir=str(empty) if how == "flag" else None)
    assert ("--profiles-dir" if how == "flag" else "DBT_PROFILES_DIR") in str(raised.value)


def test_the_profiles_dir_flag_wins_over_dbt_profiles_dir(project: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    (chosen / "profiles.yml").write_text(json.dumps({"p": {"target": "t", "outputs": {"t": _output("/chosen")}}}))
    monkeypatch.setenv("DBT_PROFILES_DIR", str(tmp_path / "empty"))
    assert profile_target(project, profiles_dir=str(chosen)).warehouse == "/chosen"


PROFILES = """\
p:
  target: "{{ env_var('PCOW_TARGET', 'dev') }}"
  outputs:
    dev: {type: partialcow, schema: s, warehouse: "{{ env_var('PCOW_WH', '/default_wh') }}"}
    prod: {type: partialcow, schema: s, warehouse: /prod, token: "{{ env_var('PCOW_PROD_TOKEN') }}"}
other:
  target: t
  outputs:
    t: {type: snowflake, password: "{{ env_var('PCOW_OTHER_PW') }}"}
"""


def test_only_the_chosen_profile_and_target_are_rendered(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: env_var() was rendered across the whole profiles.yml before it was parsed, so a variable unset
    for another profile (or target) failed the command, where dbt renders only the profile it uses."""
    (project / "profiles.yml").write_text(PROFILES)
    assert profile_target(project).warehouse == "/default_wh"
    monkeypatch.setenv("PCOW_WH", "/from_env")
    assert profile_target(project).warehouse == "/from_env"
    with pytest.raises(ConfigurationError, match="PCOW_PROD_TOKEN is not set"):
        profile_target(project, target="prod")  # the chosen target's own variables are still required


def test_the_default_target_and_dbt_target_are_rendered_and_honoured(project: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "profiles.yml").write_text(PROFILES)
    monkeypatch.setenv("PCOW_PROD_TOKEN", "x")
    monkeypatch.setenv("PCOW_TARGET", "prod")
    assert profile_target(project).target == "prod"
    monkeypatch.setenv("DBT_TARGET", "dev")
    assert profile_target(project).target == "dev"


def test_a_malformed_profiles_yml_is_a_configuration_error(project: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: a YAML syntax error in profiles.yml ended the command with a Python traceback."""
    (project / "profiles.yml").write_text("p:\n  target: t\n  outputs: [unclosed\n")
    assert main(["index", "verify", "s.t", "--project-dir", str(project)]) == 2
    err = capsys.readouterr().err
    assert f"{project / 'profiles.yml'} is not valid YAML" in err
    assert "line 4" in err or "line 3" in err  # yaml's own description of where


def test_a_profiles_yml_that_is_not_a_mapping_is_a_configuration_error(project: Path) -> None:
    (project / "profiles.yml").write_text("- p\n")
    with pytest.raises(ConfigurationError, match="expected a mapping at the top level"):
        profile_target(project)
