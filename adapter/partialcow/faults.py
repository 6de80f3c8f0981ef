"""Crash injection for the fault suite (imported by every layer: it depends on nothing): ``PARTIALCOW_CRASH_AT=<point>``
kills the process at that point.

The kill is a ``SIGKILL`` of the driver process: no ``finally`` block, ``except`` clause or exit handler runs, which is
what a crash (power loss, an OOM kill, a scheduler's ``kill -9``) does to a write. The JVM follows (PySpark's gateway
exits when its parent's pipe closes). The points, in the order a write passes them, are listed in ``POINTS``.
"""

from __future__ import annotations

import os
import signal

__all__ = ["CRASH_ENV", "POINTS", "checkpoint"]

CRASH_ENV = "PARTIALCOW_CRASH_AT"
POINTS = (
    "leased",  # the write holds its lease; nothing else done
    "staged",  # the batch is validated
    "located",  # the locate job left its fragments in the scratch folder
    "rewritten",  # new data files written, not committed
    "committed",  # the table commit landed; the index not yet maintained
    "index-written",  # the index's new bucket files are written, its new state not yet published
    "indexed",  # the index reflects the commit; the lease not yet released
)


def checkpoint(point: str) -> None:
    """Kill this process if ``PARTIALCOW_CRASH_AT`` names ``point``."""
    if os.environ.get(CRASH_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
