"""The commit step of ``apply_changes``: one table commit of the rewritten and inserted files, then the index
upkeep, with the conflict keys the locate job collected. Split from ``partialcow.spark.changes``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from partialcow.exceptions import (
    CommitError,
    CommitStateUnknownError,
    LostCommitError,
    StaleIndexError,
)
from partialcow.faults import checkpoint
from partialcow.index import RowIndex
from partialcow.metrics import PhaseClock, WriteMetrics
from partialcow.parquet import remove_sidecar
from partialcow.spark.delta_checks import check_new_files
from partialcow.spark.spec import ChangeSpec
from partialcow.spark.tables import LakehouseTable, local_path
from partialcow.table.base import FileReplacement

if TYPE_CHECKING:
    import pyarrow as pa

# Up to this many keys a commit lists them for its conflict check (listing is linear in the keys and small next to
# the batch's own work); above it, any data file appended concurrently is a conflict.
_MAX_CONFLICT_KEYS = 1_000_000


def _discard(paths: Sequence[str]) -> None:
    for path in paths:
        with suppress(FileNotFoundError):
            os.remove(local_path(path))
        remove_sidecar(local_path(path))


def _commit(table: LakehouseTable, index: RowIndex, results: list[dict[str, Any]], inserts: int,
            conflict_keys: dict[str, list[object]] | None, base_version: int, clock: PhaseClock,
            spec: ChangeSpec) -> WriteMetrics:
    """Commit what the rewrite wrote (``results`` as ``run_file_tasks`` yields them) in one commit, then bring the
    index to the new version. A rewritten file none of whose rows changed is dropped (nothing to commit for it).
    ``conflict_keys`` as ``conflict_keys_of`` gives them (None: too many to list)."""
    checkpoint("rewritten")
    unchanged = [r for r in results if r["kind"] == "rewrite" and not r["rows_updated"] and not r["rows_deleted"]
                 and not r["moved_rows"] and not r.get("rows_appended")]
    _discard([r["dst"] for r in unchanged])
    rewritten = [r for r in results if r["kind"] == "rewrite" and r not in unchanged]
    new_files = [r["dst"] for r in results if r["kind"] == "insert"] + [r["dst"] for r in rewritten]
    new_files += [r["moved_dst"] for r in rewritten if r["moved_dst"]]
    committing = False  # set just before the format's commit call
    try:
        metrics = WriteMetrics(rows_inserted=inserts, files_added=len(new_files), files_removed=len(rewritten))
        for r in rewritten:
            metrics += WriteMetrics(  # a moved row is an update, though its file saw a delete
                rows_updated=r["rows_updated"] + r["moved_rows"], rows_deleted=r["rows_deleted"] - r["moved_rows"],
                files_rewritten=1,
                pages_rewritten=r["pages_rewritten"], pages_copied=r["pages_copied"],
                bytes_copied=r["bytes_copied"], bytes_reencoded=r["bytes_reencoded"],
            )
        metrics.pages_copied += sum(r["pages_copied"] for r in unchanged)
        if not new_files:
            return metrics
        table_paths = {p: _table_path(p, location=table.format_table.location) for p in new_files}
        # before the scratch folder holding them goes
        added_rows = _added_index_rows(results, table_paths)
        appended_rows = _appended_index_rows(rewritten, table_paths)
        if table.delta_spark:
            check_new_files(table, new_files, spec)
        change = FileReplacement(
            base_version=base_version,
            removed=[r["src"] for r in rewritten],
            added=[table_paths[p] for p in new_files],
            conflict_keys=conflict_keys or {},
            conflict_keys_complete=conflict_keys is not None,
            metrics=metrics,
        )
        committing = True
        with clock("commit"):
            result = table.format_table.replace_files(change)
    except (CommitStateUnknownError, LostCommitError):
        raise  # the files may be referenced now: never delete them (the next write checks, see journal)
    except Exception as exc:
        if not committing:
            _discard(new_files)
            raise
        if isinstance(exc, CommitError):
            # refused: the format deleted the new files no version references, and keeps those it must (a path
            # already live, one a concurrent version points at); the fingerprints of those it deleted go too
            for path in new_files:
                if not os.path.exists(local_path(path)):
                    remove_sidecar(local_path(path))
            raise
        # a failure the format does not say came before the commit: the files may be the table's now, so they stay
        raise CommitStateUnknownError(
            f"the commit of {len(new_files)} new file(s) may or may not have landed ({type(exc).__name__}: {exc}); "
            "they are kept, and the next write removes them if no snapshot took them"
        ) from exc
    # An interrupt (KeyboardInterrupt, SystemExit) keeps the files: it can surface after the commit call has
    # landed the commit, as a kill would; the next write removes them if no commit took them (see journal).
    checkpoint("committed")
    for r in rewritten:  # replaced: their fingerprints serve no later batch (the files stay for time travel)
        with suppress(OSError):
            remove_sidecar(local_path(r["src"]))
    # spelled as the commit reports added files, or the index would not recognise the re-pointed file
    # a file whose rows a deletion vector hid also has positions removed, though no change deleted a row
    # a file that gained rows whose entries were not reported is indexed again by reading it
    kept = [r for r in rewritten if not r.get("rows_appended") or r.get("appended_index_rows") is not None]
    same_positions = {r["src"]: table_paths[r["dst"]] for r in kept if not r["removed_positions"]}
    shifted = {r["src"]: (table_paths[r["dst"]], r["removed_positions"]) for r in kept if r["removed_positions"]}
    with clock("index_update"):
        try:
            index.apply_commit(result, same_positions=same_positions, shifted=shifted, added_rows=added_rows,
                               appended_rows=appended_rows)
        except StaleIndexError:
            # Another writer published an index state between our lookup and our commit (our commit landed):
            # continue from its state, which the repair brings to the table's current snapshot.
            RowIndex.open(table.format_table).ensure_fresh()
    return metrics


def _added_index_rows(results: Sequence[dict[str, Any]], table_paths: dict[str, str]) -> pa.Table | None:
    """The index entries of every file the rewrite job added (inserts, moved rows), each with its table path; None
    when a writer did not report them (the index then reads the new files with Spark)."""
    import pyarrow as pa

    parts = []
    for r in results:
        for dst, fragment in ((r.get("dst"), r.get("index_rows")) if r["kind"] == "insert" else
                              (r.get("moved_dst"), r.get("moved_index_rows")),):
            if dst is None:
                continue
            if fragment is None:
                return None
            rows = pa.ipc.open_file(pa.memory_map(fragment)).read_all()
            parts.append(rows.append_column("file", pa.array([table_paths[dst]] * rows.num_rows, pa.string())))
    return pa.concat_tables(parts) if parts else None


def _appended_index_rows(rewritten: Sequence[dict[str, Any]], table_paths: dict[str, str]) -> pa.Table | None:
    """The index entries of the new rows appended to rewritten files, at their positions there; None when there
    are none. Entries a writer did not report leave the file to be indexed again by reading it."""
    import pyarrow as pa

    parts = []
    for r in rewritten:
        fragment = r.get("appended_index_rows")
        if not r.get("rows_appended") or fragment is None:
            continue
        rows = pa.ipc.open_file(pa.memory_map(fragment)).read_all()
        rows = rows.set_column(rows.schema.get_field_index("pos"), "pos",
                               pa.compute.add(rows.column("pos"), pa.scalar(int(r["append_offset"]), pa.int64())))
        parts.append(rows.append_column("file", pa.array([table_paths[r["dst"]]] * rows.num_rows, pa.string())))
    return pa.concat_tables(parts) if parts else None


def _table_path(local: str, *, location: str) -> str:
    """Spell a new file the way the table spells its files (Iceberg's local tables use ``file:`` URIs).

    >>> _table_path("/wh/t/data/a.parquet", location="file:/wh/t"), _table_path("/d/a.parquet", location="/d")
    ('file:/wh/t/data/a.parquet', '/d/a.parquet')
    """
    return "file:" + local if location.startswith("file:") else local


def conflict_keys_of(keys: pa.Table, spec: ChangeSpec) -> dict[str, list[object]] | None:
    """The keys a commit lists for its conflict check: aligned columns (the i-th values form one key), each key once;
    None when there are more than ``_MAX_CONFLICT_KEYS`` (the commit then treats any concurrent append as a
    conflict). Columns listed one by one would pair values of different keys.

    >>> import pyarrow as pa
    >>> spec = ChangeSpec(key_columns=("id", "region"))
    >>> conflict_keys_of(pa.table({"id": [1, 2, 1], "region": ["us", "eu", "us"]}), spec)
    {'id': [1, 2], 'region': ['us', 'eu']}
    """
    if keys.num_rows > _MAX_CONFLICT_KEYS:
        return None
    columns = list(spec.key_columns)
    try:
        unique = keys.select(columns).group_by(columns, use_threads=False).aggregate([])
    except NotImplementedError:  # a key type Arrow cannot group (pyarrow raises ArrowNotImplementedError)
        rows = list(dict.fromkeys(zip(*(keys.column(c).to_pylist() for c in columns))))
        return {c: [row[i] for row in rows] for i, c in enumerate(columns)}
    return {c: unique.column(c).to_pylist() for c in columns}


def _conflict_keys(keys_files: Sequence[str | None], spec: ChangeSpec) -> dict[str, list[object]] | None:
    """The commit's conflict keys from the locate tasks' key files; None when a task kept none (too many keys)."""
    import pyarrow as pa

    if any(f is None for f in keys_files):
        return None
    if not keys_files:
        return {}
    return conflict_keys_of(pa.concat_tables([pa.ipc.open_file(f).read_all() for f in keys_files]), spec)
