"""Verification of a row index against its table: what ``partialcow index verify`` and the tests rely on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from partialcow.index.bucket_files import BUCKET, _bucket_expr
from partialcow.index.results import VerifyReport
from partialcow.table.base import FILE_ID, POS

if TYPE_CHECKING:
    from partialcow.index.row_index import RowIndex

__all__ = ["verify"]


def verify(index: RowIndex) -> VerifyReport:
    """Compare the whole index with a fresh scan of the table (both sides read in full, in Spark): files whose
    deletes differ, rows missing from or extra in the index, rows in the wrong bucket, keys held twice."""
    from pyspark.sql import functions as F

    state = index.state
    version = index.source.current_version()
    live = {f.path: f.deletes for f in index.source.live_files(version)}
    recorded = {f.path: f.deletes for f in state.files}
    stale = sorted(p for p in set(live) | set(recorded) if live.get(p, "<absent>") != recorded.get(p, "<absent>"))
    report = VerifyReport(
        table=state.table, index_version=state.table_version, table_version=version, stale_files=stale
    )
    if stale and not _still_readable(index):
        report.checked = False
        report.samples.append(f"the index's snapshot {state.table_version} is no longer in the table (expired): the "
                              "next write brings the index up to date")
        return report
    cols = [*state.key_columns, FILE_ID, POS]
    if state.files:
        scan = index.source.read_rows(
            state.key_columns, version=state.table_version, files={f.path: f.file_id for f in state.files}
        )
    else:
        scan = index._empty_rows()
    names = state.all_bucket_files()
    index_rows = index._read_index(names, with_bucket=True)
    scan = scan.select(*cols).persist()
    try:
        report.rows_in_table = scan.count()
        report.rows_in_index = index_rows.count()
        missing = scan.exceptAll(index_rows.select(*cols))
        extra = index_rows.select(*cols).exceptAll(scan)
        report.missing_from_index = missing.count()
        report.extra_in_index = extra.count()
        wrong = index_rows.where(F.col(BUCKET) != _bucket_expr(state.key_columns, state.num_buckets))
        report.wrong_bucket = wrong.count()
        dups = scan.groupBy(*state.key_columns).count().where("count > 1")
        report.duplicate_keys = dups.count()
        for label, frame in (
            ("missing from index", missing),
            ("extra in index", extra),
            ("in wrong bucket", wrong),
        ):
            for row in frame.limit(3).collect():
                report.samples.append(f"{label}: {row.asDict()}")
    finally:
        scan.unpersist()
    return report


def _still_readable(index: RowIndex) -> bool:
    """Whether the table still holds the snapshot the index reflects (another writer may have expired it)."""
    try:
        index.source.live_files(index.state.table_version)
    except Exception:  # noqa: BLE001 - the formats' own errors for a version that is gone (Java or Python)
        return False
    return True
