"""Cross-reader correctness of ``rewrite_file`` over the writer corpus (pyarrow, DuckDB, parquet-rs/delta-rs, tpcgen).

Every case: expected table computed with plain pyarrow from the original; the rewritten file read back by pyarrow
and by DuckDB; untouched pages byte-identical (page walker of our own); statistics, page index and footer checked.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from corpus import CHANGE_PATTERNS, DUCKDB_CASES, PARQUET_RS_CASES, PYARROW_CASES, SourceCase, make_changes
from oracle import apply_changes, assert_same_rows, check_metadata, check_pages, check_report, read_duckdb
from partialcow.parquet import ROW_POSITION, rewrite_file

CASES = PYARROW_CASES + DUCKDB_CASES + PARQUET_RS_CASES
# Small, local changes: the engine must patch pages here, never fall back to rewriting whole flat chunks or the file.
PAGE_LEVEL_PATTERNS = {"one_cell", "equal_values", "contiguous_all_cols", "contiguous_deletes", "delete_first_row_group"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("corpus")
    return {case.id: case.build(folder) for case in CASES}


def run_case(src: Path, dst: Path, pattern: str, seed: int, *, flat_page_level: bool, layout_fallback_ok: bool = False) -> None:
    original = pq.read_table(src)
    md = pq.ParquetFile(src).metadata
    rg_rows = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    changes = make_changes(original, pattern, seed=seed, row_position=ROW_POSITION, row_group_rows=rg_rows)
    report = rewrite_file(src, dst, updates=changes.updates, deletes=changes.deletes)
    expected = apply_changes(original, changes.updates, changes.deletes, ROW_POSITION)

    actual = pq.read_table(dst, page_checksum_verification=True)  # re-encoded pages need valid CRCs too
    assert actual.schema.equals(expected.schema), f"{changes.description}: schema changed"
    assert_same_rows(actual, expected, f"pyarrow [{changes.description}]")
    assert_same_rows(read_duckdb(dst), expected, f"duckdb [{changes.description}]")

    exempt = {(rg, col) for rg, col, _reason in report.full_chunk_rewrites}
    full_file = report.full_file_rewrite is not None
    pages = check_pages(src, dst, original, changes.updates, changes.deletes, ROW_POSITION, exempt=exempt, full_file_rewrite=full_file)
    if flat_page_level:
        # Small local changes: whole-file or whole-chunk rewrites must be justified by what the oracle sees.
        if full_file and not layout_fallback_ok:
            assert pages.touched_byte_fraction >= 0.5, (
                f"{changes.description}: whole-file rewrite ({report.full_file_rewrite}) with only "
                f"{pages.touched_byte_fraction:.0%} of page bytes touched"
            )
        assert not pages.unjustified_full_chunks, f"{changes.description}: flat chunks rewritten whole with most pages untouched: {pages.unjustified_full_chunks}"
    check_report(report, original, expected, changes.updates, changes.deletes, ROW_POSITION, pages)
    check_metadata(src, dst, expected, same_writer=not full_file)


def _params() -> list:
    out = []
    for case in CASES:
        for pattern in CHANGE_PATTERNS:
            if pattern == "delete_first_row_group" and not case.multi_row_group:
                continue
            out.append(pytest.param(case, pattern, id=f"{case.id}-{pattern}"))
    return out


@pytest.mark.parametrize(("case", "pattern"), _params())
def test_rewrite_matches_oracle(case: SourceCase, pattern: str, sources: dict[str, Path], tmp_path: Path) -> None:
    seed = zlib.crc32(f"{case.id}/{pattern}".encode())
    run_case(
        sources[case.id], tmp_path / "out.parquet", pattern, seed,
        flat_page_level=pattern in PAGE_LEVEL_PATTERNS, layout_fallback_ok=case.layout_fallback_ok,
    )


def test_no_changes_copies_every_page(sources: dict[str, Path], tmp_path: Path) -> None:
    """No updates and no deletes: every page is copied and the data is identical."""
    src = sources["pa_v1_index_snappy"]
    dst = tmp_path / "same.parquet"
    report = rewrite_file(src, dst)
    original = pq.read_table(src)
    assert_same_rows(pq.read_table(dst), original, "pyarrow")
    pages = check_pages(src, dst, original, None, None, ROW_POSITION)
    assert pages.must_copy == pages.source_data_pages
    assert report.pages_rewritten == 0 and report.bytes_reencoded == 0
