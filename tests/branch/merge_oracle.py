"""The row-level three-way merge by key, written from its definition (not from the implementation)."""

from __future__ import annotations


def three_way(base: dict, ours: dict, theirs: dict, *, policy: str) -> tuple[dict, set]:
    """Merged rows and conflicting keys; ``policy`` ('ours' or 'theirs') decides conflicts."""
    merged, conflicts = {}, set()
    for key in set(base) | set(ours) | set(theirs):
        b, o, t = base.get(key), ours.get(key), theirs.get(key)
        if o == t or o == b:
            value = t
        elif t == b:
            value = o
        else:
            conflicts.add(key)
            value = o if policy == "ours" else t
        if value is not None:
            merged[key] = value
    return merged, conflicts
