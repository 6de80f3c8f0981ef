"""The `partialcow` command's help reads as plain text (issue 27: it printed reStructuredText markup)."""

from __future__ import annotations

import pytest

from partialcow.cli import main


@pytest.mark.parametrize("argv", [["--help"], ["doctor", "--help"], ["index", "--help"], ["inspect", "--help"]])
def test_help_is_plain_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "usage: partialcow" in out
    assert "``" not in out
