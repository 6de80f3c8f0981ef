"""What CI runs within its time budget (25 minutes on 2 cores), and what ``PARTIALCOW_TESTS_LONG=1`` adds.

CI runs every case, but a case that repeats the same check over variants (image modes, batch paths, key counts)
runs one variant per case, the variants taken in turn over the cases, so each variant is still run by some case;
the long mode runs every case in every variant.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

__all__ = ["LONG", "in_turn"]

T = TypeVar("T")

#: every variant of every case (and the longer plans of the crash and race tests)
LONG = os.environ.get("PARTIALCOW_TESTS_LONG") == "1"


def in_turn(variants: Sequence[T], case: int) -> list[T]:
    """The variants case number ``case`` runs: all of them in the long mode, else one, in turn.

    >>> in_turn(["copy-on-write", "merge-on-read"], 3) == (["copy-on-write", "merge-on-read"] if LONG else ["merge-on-read"])
    True
    """  # noqa: E501 - a doctest line cannot wrap
    return list(variants) if LONG else [variants[case % len(variants)]]
