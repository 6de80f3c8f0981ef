"""Property-based tests of ``rewrite_file``: random writers, schemas, layouts and change sets against the oracle.

Sources come from pyarrow (with and without the parquet-mr 1.12 footer that leaves the dictionary page out),
DuckDB and arrow-rs (through delta-rs), with v1 and v2 pages and every codec each writer has; each rewritten file
is read by pyarrow and DuckDB and its pages, report and metadata checked. Spark's readers get their own property
test in test_readers_spark.py (batched: one Spark read per reader for all examples).

Deterministic for CI: derandomized, no example database. ``HYPOTHESIS_PROFILE=dev`` explores more (random seed).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corpus import make_table, write_source
from oracle import apply_changes, assert_same_rows, check_metadata, check_pages, check_report, read_duckdb
from partialcow.parquet import ROW_POSITION, rewrite_file
from partialcow.parquet._engine import MERGE_TAIL_ROWS
from partialcow.parquet._rewriter import MERGED_TAIL
from strategies import change_sets, source_files

# Applied to this module's test only (no global load_profile: other modules keep their own settings).
settings.register_profile(
    "parquet-ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("parquet-dev", parent=settings.get_profile("parquet-ci"), max_examples=300, derandomize=False)
PROFILE = settings.get_profile("parquet-dev" if os.environ.get("HYPOTHESIS_PROFILE") == "dev" else "parquet-ci")


@PROFILE
@given(spec=source_files(), data=st.data())
def test_rewrite_equals_oracle(spec: dict, data: st.DataObject) -> None:
    _rewrite_and_check(spec, data, appended_rows=0)


@settings(parent=PROFILE, max_examples=30)
@given(spec=source_files(), data=st.data())
def test_append_equals_oracle(spec: dict, data: st.DataObject) -> None:
    """Rows appended while the file is patched: the source's rows as the oracle has them, then the appended rows in
    one more row group with sound statistics and page indexes; untouched source pages still copied byte for byte."""
    _rewrite_and_check(spec, data, appended_rows=data.draw(st.integers(1, 300), label="appended rows"),
                       merge_tail_rows=data.draw(st.sampled_from([0, MERGE_TAIL_ROWS]), label="merge_tail_rows"))


def _rewrite_and_check(spec: dict, data: st.DataObject, *, appended_rows: int,
                       merge_tail_rows: int = MERGE_TAIL_ROWS) -> None:
    table = make_table(spec["n"], columns=spec["columns"], seed=spec["seed"], null_density=spec["null_density"],
                       low_cardinality=spec["low_cardinality"])
    extra = None
    if appended_rows:
        extra = make_table(appended_rows, columns=spec["columns"], seed=spec["seed"] + 1,
                           null_density=spec["null_density"], low_cardinality=spec["low_cardinality"])
    with tempfile.TemporaryDirectory() as folder:
        src, dst = Path(folder) / "src.parquet", Path(folder) / "dst.parquet"
        write_source(spec["writer"], table, src, **spec["opts"])
        original = pq.read_table(src)
        updates, deletes = data.draw(change_sets(original))
        report = rewrite_file(src, dst, updates=updates, deletes=deletes, append=extra,
                              merge_tail_rows=merge_tail_rows)
        expected = apply_changes(original, updates, deletes, ROW_POSITION)
        if extra is not None:
            expected = pa.concat_tables([expected, extra.cast(expected.schema)])
        assert (report.rows_appended, report.rows_after) == (appended_rows, expected.num_rows)
        assert_same_rows(pq.read_table(dst, page_checksum_verification=True), expected, "pyarrow")
        assert_same_rows(read_duckdb(dst), expected, "duckdb")
        exempt = {(rg, col) for rg, col, _ in report.full_chunk_rewrites}
        full_file = report.full_file_rewrite is not None
        merged = {rg for rg, _, reason in report.full_chunk_rewrites if reason == MERGED_TAIL}
        if extra is not None:  # the sources are small: a last row group is merged exactly when asked to be
            last = pq.ParquetFile(src).metadata.num_row_groups - 1
            assert merged == ({last} if merge_tail_rows and last > 0 else set())
        pages = check_pages(src, dst, original, updates, deletes, ROW_POSITION, exempt=exempt,
                            full_file_rewrite=full_file, appended=extra is not None, merged_tail=bool(merged))
        check_report(report, original, expected, updates, deletes, ROW_POSITION, pages, merged_tail=bool(merged))
        check_metadata(src, dst, expected, same_writer=not full_file)
