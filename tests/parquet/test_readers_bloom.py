"""Bloom filters after a rewrite: never a false negative (our own XXH64 + split-block check, and DuckDB's reader)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus import make_table
from oracle import apply_changes, assert_same_rows, read_duckdb
from pagewalk import read_bloom_filter, read_file_view
from partialcow.parquet import ROW_POSITION, rewrite_file

BLOOM_COLUMNS = ("str", "i64", "i32")
PLAIN = {"str": lambda v: v.encode(), "i64": lambda v: struct.pack("<q", v), "i32": lambda v: struct.pack("<i", v)}


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bloom") / "src.parquet"
    table = make_table(2000, columns=("str", "i64", "i32", "f64"), seed=21)
    opts = {c: {"ndv": 2000, "fpp": 0.01} for c in BLOOM_COLUMNS}
    pq.write_table(table, path, write_page_index=True, max_rows_per_page=100, row_group_size=1000, bloom_filter_options=opts)
    return path


def _assert_no_false_negatives(path: Path, expected: pa.Table) -> set[tuple[int, str]]:
    """Every value of a Bloom-filtered chunk is 'maybe present'; returns the (row group, column) pairs with a filter."""
    view = read_file_view(path)
    with_filter = set()
    start = 0
    for rg_i, rg in enumerate(view.chunks):
        n = rg[0].num_rows
        for chunk in rg:
            bloom = read_bloom_filter(path, chunk)
            if bloom is None:
                continue
            with_filter.add((rg_i, chunk.path))
            values = expected.column(chunk.path).slice(start, n).to_pylist()
            missing = [v for v in values if v is not None and not bloom.might_contain(PLAIN[chunk.path](v))]
            assert not missing, f"{path}: row group {rg_i} column {chunk.path}: Bloom filter misses {missing[:3]}"
        start += n
    return with_filter


def test_source_filters_are_readable(src: Path) -> None:
    """Guards the checker: the writer's own filters pass it, and all three columns have one per row group."""
    assert _assert_no_false_negatives(src, pq.read_table(src)) == {(rg, c) for rg in (0, 1) for c in BLOOM_COLUMNS}


def test_deletes_keep_bloom_filters(src: Path, tmp_path: Path) -> None:
    """A delete-only change leaves a superset of values behind: filters stay valid and are kept."""
    dst = tmp_path / "out.parquet"
    deletes = np.array([5, 6, 1234])
    report = rewrite_file(src, dst, deletes=deletes)
    expected = apply_changes(pq.read_table(src), None, deletes, ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    kept = _assert_no_false_negatives(dst, expected)
    assert kept == {(rg, c) for rg in (0, 1) for c in BLOOM_COLUMNS}, f"filters dropped on delete only: {report.bloom_filters_dropped}"
    assert not report.bloom_filters_dropped


def test_updates_never_leave_a_stale_filter(src: Path, tmp_path: Path) -> None:
    """New values in a filtered column: the filter is dropped (and reported) or rebuilt; never stale."""
    dst = tmp_path / "out.parquet"
    original = pq.read_table(src)
    pos = np.array([5, 900, 1500], dtype=np.int64)
    new_strings = ["brand-new-1", "brand-new-2", "brand-new-3"]
    upd = pa.table({ROW_POSITION: pa.array(pos), "str": pa.array(new_strings), "i64": pa.array([-1, -2, -3], pa.int64())})
    report = rewrite_file(src, dst, updates=upd)
    expected = apply_changes(original, upd, None, ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    with_filter = _assert_no_false_negatives(dst, expected)
    all_pairs = {(rg, c) for rg in (0, 1) for c in BLOOM_COLUMNS}
    dropped = all_pairs - with_filter
    assert dropped <= set(report.bloom_filters_dropped), f"filters dropped without saying so: {dropped - set(report.bloom_filters_dropped)}"
    assert {(rg, "i32") for rg in (0, 1)} <= with_filter, "filters of an untouched column were dropped"
    # DuckDB applies Bloom filters to equality predicates: a stale filter would hide these rows.
    import duckdb

    con = duckdb.connect()
    for value in new_strings:
        (count,) = con.execute(f"SELECT count(*) FROM read_parquet('{dst}') WHERE str = ?", [value]).fetchone()
        assert count == 1, f"duckdb finds {count} rows with str = {value!r}"
    assert read_duckdb(dst).num_rows == 2000


def test_whole_file_fallback_reports_lost_filters(src: Path, tmp_path: Path) -> None:
    """Deleting a row in every page makes the engine rewrite the whole file: filters it loses must be reported."""
    dst = tmp_path / "out.parquet"
    deletes = np.arange(0, 2000, 37)
    report = rewrite_file(src, dst, deletes=deletes)
    expected = apply_changes(pq.read_table(src), None, deletes, ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    with_filter = _assert_no_false_negatives(dst, expected)
    lost = {(rg, c) for rg in (0, 1) for c in BLOOM_COLUMNS} - with_filter
    assert lost <= set(report.bloom_filters_dropped), f"filters lost without saying so: {sorted(lost - set(report.bloom_filters_dropped))}"


@pytest.mark.spark
def test_a_boolean_columns_filter_is_dropped_not_a_failure(spark, tmp_path: Path) -> None:
    """Regression: parquet-java writes bloom filters of boolean columns (Spark with ``parquet.bloom.filter.enabled``,
    Iceberg's ``write.parquet.bloom-filter-enabled.column.<c>``); pyarrow builds none, and an update of such a column
    failed with a raw ``OSError`` (every batch of the table). The filter is dropped and reported."""
    folder = tmp_path / "spark"
    (spark.range(200).selectExpr("id", "id % 2 = 0 as b").coalesce(1).write
     .option("parquet.bloom.filter.enabled#b", "true").option("parquet.bloom.filter.enabled#id", "true")
     .parquet(str(folder)))
    [src] = folder.glob("part-*.parquet")
    [group] = read_file_view(src).chunks
    assert {chunk.path for chunk in group if read_bloom_filter(src, chunk) is not None} == {"id", "b"}
    dst = tmp_path / "out.parquet"
    upd = pa.table({ROW_POSITION: pa.array([3, 150], pa.int64()), "b": pa.array([True, False])})
    report = rewrite_file(src, dst, updates=upd)
    assert_same_rows(pq.read_table(dst), apply_changes(pq.read_table(src), upd, None, ROW_POSITION), "pyarrow")
    assert (0, "b") in report.bloom_filters_dropped and (0, "id") not in report.bloom_filters_dropped
