"""What CI runs within its time budget (25 minutes on 2 cores), and what ``PARTIALCOW_TESTS_LONG=1`` adds.

CI runs every case, but a case that repeats the same check over variants (image modes, batch paths, key counts)
runs one variant per case, the variants taken in turn over the cases, so each variant is still run by some case;
the long mode runs every case in every variant. Within a test that is :func:`in_turn`; across a parametrized test's
items it is :func:`one_variant_each` (tests/conftest.py deselects the others). A few end-to-end tests whose every
step also runs in CI elsewhere run in the long mode only (each says where its steps run).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from typing import Any, TypeVar

__all__ = ["LONG", "VARIANTS", "in_turn", "one_variant_each"]

T = TypeVar("T")

#: every variant of every case (and the longer plans of the crash and race tests)
LONG = os.environ.get("PARTIALCOW_TESTS_LONG") == "1"


def in_turn(variants: Sequence[T], case: int) -> list[T]:
    """The variants case number ``case`` runs: all of them in the long mode, else one, in turn.

    >>> in_turn(["copy-on-write", "merge-on-read"], 3) == (["copy-on-write", "merge-on-read"] if LONG else ["merge-on-read"])
    True
    """  # noqa: E501 - a doctest line cannot wrap
    return list(variants) if LONG else [variants[case % len(variants)]]


#: Parameter values that name a variant of one check rather than a case of its own: the two ways a batch is applied
#: (``pipeline_path``) and the two image modes of a branch.
VARIANTS = frozenset({"driver", "spark", "copy-on-write", "merge-on-read"})


def _stable(value: Any) -> str:
    """A parameter value as text that is the same in every process: xdist workers collect separately and must all
    deselect the same items, and a function's repr holds its address."""
    return getattr(value, "__qualname__", None) or repr(value)


def one_variant_each(items: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(kept, deselected) test items: outside the long mode, of the items that differ only in :data:`VARIANTS`
    values, one is kept, chosen by a stable hash of the test and its other parameters, so that each variant is still
    run by some tests (as :func:`in_turn` does within a test).
    """
    if LONG:
        return list(items), []
    groups: dict[str, list[Any]] = {}
    for item in items:
        spec = getattr(item, "callspec", None)
        params = getattr(spec, "params", {})
        varying = {k for k, v in params.items() if isinstance(v, str) and v in VARIANTS}
        if not varying:
            groups.setdefault(item.nodeid, []).append(item)
            continue
        rest = sorted((k, _stable(v)) for k, v in params.items() if k not in varying)
        test = item.nodeid.split("[", 1)[0]  # with its class: two classes' checks of one name are two checks
        groups.setdefault(f"{test}::{rest}::{sorted(varying)}", []).append(item)
    kept, dropped = [], []
    for key, group in groups.items():
        chosen = zlib.crc32(key.encode()) % len(group)
        for i, item in enumerate(group):
            (kept if i == chosen else dropped).append(item)
    order = {id(item): n for n, item in enumerate(items)}
    return sorted(kept, key=lambda item: order[id(item)]), dropped
