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


def test_exit_status_tells_an_error_from_a_disagreeing_index_and_a_closed_pipe_is_success(tmp_path) -> None:
    """Regression: every error exited 1, as `index verify` does for an index that disagrees with its table (a
    script rebuilding on 1 rebuilt on a typo), and `partialcow inspect f.parquet | head` exited 1 after printing
    what `head` wanted."""
    import shlex
    import subprocess
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "many.parquet"
    pq.write_table(pa.table({f"c{i}": list(range(20000)) for i in range(20)}), path, row_group_size=500,
                   data_page_size=256)
    cli = [sys.executable, "-c", "import sys; from partialcow.cli import main; sys.exit(main())"]
    command = f"{' '.join(map(shlex.quote, cli))} inspect {path} | head -1; exit ${{PIPESTATUS[0]}}"
    piped = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert (piped.returncode, piped.stderr) == (0, ""), piped.stderr[-2000:]
    assert len(piped.stdout.splitlines()) == 1
    missing = subprocess.run([*cli, "inspect", str(tmp_path / "none.parquet")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "partialcow inspect:" in missing.stderr and "Traceback" not in missing.stderr


def test_a_progress_line_never_wraps(tmp_path) -> None:
    """Regression: a step's line longer than the terminal wrapped, and each redraw ("\\r" returns to the start of the
    last screen row only) left another copy of its first rows behind."""
    import io

    from partialcow.progress import Progress

    stream = io.StringIO()
    progress = Progress(stream=stream, enabled=True, interval_s=0.01, width=60)
    with progress.step("verifying the row index of " + "/very/long/table/path" * 10):
        import time

        time.sleep(0.05)
    lines = [part for chunk in stream.getvalue().split("\r") for part in chunk.split("\n") if part]
    redrawn, final = lines[:-1], lines[-1].replace("\x1b[K", "")
    assert redrawn and all(len(line.replace("\x1b[K", "")) < 60 for line in redrawn)
    assert final.startswith("  done: verifying the row index of /very") and final.endswith(" s)")  # whole


def test_a_closed_pipe_keeps_the_commands_exit_status_and_other_errors_exit_2(monkeypatch, capsys) -> None:
    """`index verify | head` of a long report must still say the index disagrees (1); an error that is not one of
    ours exits 2 with its traceback, never 1."""
    import subprocess
    import sys

    script = ("import sys; from partialcow.cli import emit\n"
              "for _ in range(2000):\n    emit('x' * 100)\n"
              "sys.exit(1)")
    piped = subprocess.run(["bash", "-c", f"{sys.executable} -c \"{script}\" | head -1; exit ${{PIPESTATUS[0]}}"],
                           capture_output=True, text=True, timeout=120)
    assert (piped.returncode, piped.stderr) == (1, "")

    from partialcow.parquet import inspect

    def broken(args):
        raise RuntimeError("not one of ours")

    monkeypatch.setattr(inspect, "run", broken)
    assert main(["inspect", "f.parquet"]) == 2
    assert "RuntimeError: not one of ours" in capsys.readouterr().err
