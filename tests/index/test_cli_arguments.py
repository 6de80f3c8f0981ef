"""``partialcow index`` arguments as the command reads them (``partialcow.cli.index``), before any Spark session."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from partialcow.cli import index, main
from partialcow.exceptions import ConfigurationError


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    index.add_arguments(parser)
    return parser.parse_args(["verify", *argv])


def _format_opened(monkeypatch: pytest.MonkeyPatch, *argv: str) -> str:
    """The table format ``partialcow index verify`` starts its session for (stopped there: no Spark)."""
    formats = []

    def stop(args: argparse.Namespace, table_format: str) -> None:
        formats.append(table_format)
        raise ConfigurationError("stopped before Spark")

    monkeypatch.setattr(index, "_session", stop)
    assert main(["index", "verify", *argv]) == 2
    (table_format,) = formats
    return table_format


@pytest.mark.parametrize("name", ["data/events", "./data/events", "data/events/"])
def test_a_relative_delta_folder_is_a_delta_table(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: a relative table folder was not recognised as a Delta table, so it was looked up as an Iceberg
    table of that name."""
    (tmp_path / "data" / "events" / "_delta_log").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert _format_opened(monkeypatch, name) == "delta"
    # opened by its absolute folder: the table is the same whatever folder the Spark side resolves against
    assert index._locate(_args(name)) == ("delta", str(tmp_path / "data" / "events"))
    assert index._locate(_args(name, "--format", "delta")) == ("delta", str(tmp_path / "data" / "events"))


def test_a_name_that_is_no_delta_folder_is_an_iceberg_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shop.orders").mkdir()  # a folder of the table's name, but without _delta_log
    monkeypatch.chdir(tmp_path)
    assert _format_opened(monkeypatch, "shop.orders") == "iceberg"
    assert index._locate(_args("shop.orders")) == ("iceberg", "shop.orders")


def test_the_help_says_where_the_profile_is_looked_for() -> None:
    """The help listed DBT_PROFILES_DIR, the project, ~/.dbt; the profile is looked for in DBT_PROFILES_DIR, else the
    current folder, ~/.dbt and then the project (as dbt, see ``partialcow.project``); --target honours DBT_TARGET."""
    parser = argparse.ArgumentParser()
    index.add_arguments(parser)
    helps = {a.dest: " ".join((a.help or "").split()) for a in parser._actions}
    assert helps["profiles_dir"].endswith("(default: DBT_PROFILES_DIR; else the current folder, ~/.dbt, then the "
                                          "project's folder)")
    assert "DBT_TARGET" in helps["target"]


def test_a_profile_flag_rendered_from_env_var_text_is_read_as_a_boolean() -> None:
    """Regression: `class_cache: "{{ env_var('PCOW_CACHE', 'false') }}"` reached the command as the text "false",
    and `bool("false")` turned the class cache on."""
    from partialcow.cli.index import profile_flag
    from partialcow.exceptions import ConfigurationError

    assert profile_flag("false", "class_cache") is False
    assert profile_flag("TRUE", "class_cache") is True
    with pytest.raises(ConfigurationError, match="class_cache: 'maybe'"):
        profile_flag("maybe", "class_cache")
