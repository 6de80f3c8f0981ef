"""Delta's optimistic-concurrency rules, applied to the log versions committed since a change's base version.

A concurrent removal or rewrite of a file we replace, a concurrent metadata/protocol/domain change, a concurrent
commit of a file we add, and a concurrently appended file holding a key we write (any appended file, when the change
writes more keys than it lists) are conflicts; any other append is rebased (the change commits on top of it). An
appended file compacted since (removed, its rows added again with ``dataChange: false``) is checked as the files that
took its rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from partialcow.exceptions import CommitConflictError
from partialcow.table.base import FileReplacement

__all__ = ["check_concurrent"]

#: reads one log version's actions (raises FileNotFoundError when the version is gone)
ReadEntry = Callable[[int], list[dict[str, Any]]]
#: reads columns of a data file under the table root
ReadColumns = Callable[[str, list[str]], pa.Table]


def check_concurrent(
    table_uri: str,
    change: FileReplacement,
    removed: Sequence[str],
    added: Sequence[str],
    head_version: int,
    referenced: set[str],
    *,
    read_entry: ReadEntry,
    read_columns: ReadColumns,
) -> None:
    """Apply Delta's conflict rules to versions (base, head]; record in ``referenced`` our files others use.

    ``removed`` and ``added`` are paths under the table root (decoded), as the log's paths decode.
    """
    ours_removed = set(removed)
    ours_added = set(added)
    appended: dict[str, int] = {}  # concurrently added data files still live at head -> their version
    for version in range(change.base_version + 1, head_version + 1):
        carried = False  # this version removed an appended file: its quiet adds (compaction) hold those rows
        quiet: list[str] = []
        try:
            entries = read_entry(version)
        except FileNotFoundError as exc:
            raise CommitConflictError(
                f"cannot check concurrent changes to Delta table {table_uri}: log version {version} "
                f"is gone (log cleanup). Re-run the change from the current version {head_version}"
            ) from exc
        for action in entries:
            kind, body = next(iter(action.items()))
            if kind in ("metaData", "protocol", "domainMetadata"):
                raise CommitConflictError(
                    f"concurrent {kind} change in version {version} of Delta table {table_uri} since "
                    f"base version {change.base_version}; re-run the change against the new version"
                )
            if kind not in ("add", "remove"):
                continue
            path = unquote(body["path"])
            if path in ours_removed:
                verb = "removed" if kind == "remove" else "re-added (rewritten or given a deletion vector)"
                raise CommitConflictError(
                    f"file {path} of Delta table {table_uri} was {verb} by concurrent version {version} "
                    f"after base version {change.base_version}; re-run the change against the new version"
                )
            if path in ours_added:
                referenced.add(path)  # the other commit points at it: cleanup must keep it
                raise CommitConflictError(
                    f"new file {path} was also added to Delta table {table_uri} by concurrent version "
                    f"{version}; it is kept (the table references it). Write new files under unique names"
                )
            if kind == "remove":
                carried |= appended.pop(path, None) is not None
            elif body.get("dataChange", True):
                appended[path] = version
            else:
                quiet.append(path)
        if carried:
            appended.update(dict.fromkeys(quiet, version))
    if appended and not change.conflict_keys_complete:
        path, version = next(iter(appended.items()))
        raise CommitConflictError(
            f"concurrent version {version} of Delta table {table_uri} added {path}, and this change writes more keys "
            "than it can check one by one; re-run the change against the new version"
        )
    if change.conflict_keys:
        for path, version in appended.items():
            _check_keys(table_uri, change, path, version, read_columns)


def _check_keys(table_uri: str, change: FileReplacement, path: str, version: int, read_columns: ReadColumns) -> None:
    """A concurrently added file holding any key we touch is a conflict (the row would exist twice)."""
    columns = list(change.conflict_keys)
    try:
        found = read_columns(path, columns)
    except (KeyError, pa.ArrowException, OSError) as exc:
        raise CommitConflictError(
            f"concurrent version {version} of Delta table {table_uri} added {path}, whose key columns "
            f"{columns} cannot be read to rule out a key conflict ({exc}); re-run the change"
        ) from exc
    try:
        ours = pa.table({c: pa.array(list(v)) for c, v in change.conflict_keys.items()})
        ours = ours.cast(found.select(columns).schema)
        hits = found.select(columns).join(ours, keys=columns, join_type="inner")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise CommitConflictError(
            f"cannot compare the conflict keys {columns} with file {path} added by concurrent version {version} "
            f"of Delta table {table_uri} ({exc}); re-run the change"
        ) from exc
    if hits.num_rows:
        sample = hits.slice(0, 3).to_pylist()
        raise CommitConflictError(
            f"concurrent version {version} of Delta table {table_uri} added {path} holding keys this "
            f"change also writes (for example {sample}); re-run the change against the new version"
        )
