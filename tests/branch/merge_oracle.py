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


def apply_cdc(table: dict, batch: list[tuple], *, key: int = 0, op: int = -2, seq: int = -1) -> dict:
    """``partial_cow_incremental``'s contract on plain dicts: per key the change with the highest sequence wins; an
    upsert ('I'/'U') stores the row, a delete ('D') removes the key if present (else nothing). Batch rows are tuples
    ``(key, values..., op, seq)``; a stored row is the batch row without its op (the sequence is a stored column)."""
    latest: dict = {}
    for row in batch:
        current = latest.get(row[key])
        if current is None or row[seq] > current[seq]:
            latest[row[key]] = row
    out = dict(table)
    for k, row in latest.items():
        stored = tuple(v for i, v in enumerate(row) if i != len(row) + op)
        if row[op] == "D":
            out.pop(k, None)
        else:
            out[k] = stored
    return out
