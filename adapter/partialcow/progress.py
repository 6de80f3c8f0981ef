"""Progress of long command line steps (``partialcow doctor --probe``, ``partialcow index verify``) on stderr.

Each step is one line, redrawn while it runs with the time spent and the tasks of the Spark stages running now, and
closed with its duration. Only on a terminal: when stderr is a file or a pipe (CI logs, ``--output json`` piped into
another tool) nothing is written. ``PARTIALCOW_PROGRESS=0`` or ``1`` overrides the terminal check.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

__all__ = ["Progress", "spark_tasks"]

_FRAMES = "|/-\\"


def spark_tasks(spark: Any) -> str:
    """The running stages' tasks as text (``stage 3: 12/40 tasks``), empty when no stage runs."""
    tracker = spark.sparkContext.statusTracker()
    parts = []
    for stage_id in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks")
    return ", ".join(parts)


class Progress:
    """Steps of one command, shown on ``stream`` (stderr) when it is a terminal.

    >>> import io
    >>> progress = Progress(stream=io.StringIO())  # not a terminal: silent
    >>> with progress.step("starting Spark"):
    ...     pass
    >>> progress.stream.getvalue()
    ''
    >>> shown = Progress(stream=io.StringIO(), enabled=True)
    >>> with shown.step("starting Spark"):
    ...     pass
    >>> shown.stream.getvalue().splitlines()[-1].split("\\r")[-1].startswith("\\x1b[K  done: starting Spark (")
    True
    """

    def __init__(self, *, stream: IO[str] | None = None, enabled: bool | None = None, interval_s: float = 0.5,
                 width: int | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        if enabled is None:
            override = os.environ.get("PARTIALCOW_PROGRESS")
            enabled = override == "1" if override in ("0", "1") else _is_terminal(self.stream)
        self.enabled = enabled
        self.interval_s = interval_s
        self.width = width  # columns of the terminal (None: asked for at each line)
        self.spark: Any = None

    def watch(self, spark: Any) -> None:
        """Show the tasks of ``spark``'s running stages in the steps from now on."""
        self.spark = spark

    def _line(self, text: str, *, end: str = "") -> None:
        # A line redrawn stays on one screen row: "\r" goes back to the start of the last row only, so a wrapped
        # line would leave a copy of its first rows behind at every redraw. The final line (end="\n") is whole.
        width = max(20, self.width or _columns(self.stream)) - 1
        if not end and len(text) > width:
            text = text[: width - 3] + "..."
        self.stream.write(f"\r\x1b[K{text}{end}")
        self.stream.flush()

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        """Show ``label`` while the block runs, then ``done`` (or ``failed``) with its duration."""
        if not self.enabled:
            yield
            return
        started = time.monotonic()
        stop = threading.Event()

        def redraw() -> None:
            frame = 0
            while not stop.wait(self.interval_s if frame else 0):
                tasks = ""
                if self.spark is not None:
                    try:
                        tasks = spark_tasks(self.spark)
                    except Exception:  # noqa: BLE001 - the session may be starting or stopping: show the time alone
                        tasks = ""
                elapsed = time.monotonic() - started
                self._line(f"{_FRAMES[frame % len(_FRAMES)]} {label} ({elapsed:.0f} s{'; ' + tasks if tasks else ''})")
                frame += 1

        thread = threading.Thread(target=redraw, name="partialcow-progress", daemon=True)
        thread.start()
        outcome = "failed"
        try:
            yield
            outcome = "done"
        finally:
            stop.set()
            thread.join()
            self._line(f"  {outcome}: {label} ({time.monotonic() - started:.1f} s)", end="\n")


def _columns(stream: IO[str]) -> int:
    """The width of the terminal ``stream`` writes to (80 when it cannot tell)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size().columns


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
