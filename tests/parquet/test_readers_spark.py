"""Spark (parquet-mr) as writer and as reader of rewritten files.

Few, small cases: Spark-written sources (INT96, decimals, nested, three codecs) and Spark-readable files from the
other writers, each rewritten by the engine and read back by pyarrow, DuckDB and Spark.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus import DELTA_FLAT, SPARK_READABLE_FLAT, delta_case, duckdb_case, pyarrow_case, make_changes, spark_write_cases
from oracle import apply_changes, assert_same_rows, canon_arrow, canon_value, check_metadata, check_pages, check_report, read_duckdb
from partialcow.parquet import ROW_POSITION, rewrite_file

pytestmark = [pytest.mark.spark, pytest.mark.slow]

OTHER_WRITERS = [
    pyarrow_case("pa_for_spark", 1200, SPARK_READABLE_FLAT + ("list_i32", "struct", "map"), compression="zstd", write_page_index=True, max_rows_per_page=100),
    duckdb_case("duckdb_for_spark", 2500, tuple(c for c in SPARK_READABLE_FLAT if c not in ("i32", "u32", "dec30_5")), "CODEC 'snappy', ROW_GROUP_SIZE 2048"),
    delta_case("deltars_for_spark", 1500, DELTA_FLAT, compression="ZSTD", data_page_row_count_limit=100, write_batch_size=100),
]
SPARK_SOURCES = ["spark_int96_snappy", "spark_micros_gzip", "spark_nested_zstd"]
PATTERNS = ["contiguous_all_cols", "mixed"]  # the other writers' files get the first one only


@pytest.fixture(scope="module")
def utc_spark(spark):  # noqa: ANN001 - the shared session fixture from tests/conftest.py
    """The shared session with a UTC session time zone while this module runs (timestamps compare as UTC micros)."""
    saved = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", saved)


@pytest.fixture(scope="module")
def sources(utc_spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:  # noqa: ANN001
    folder = tmp_path_factory.mktemp("spark_corpus")
    out = spark_write_cases(utc_spark, folder)
    out.update({case.id: case.build(folder) for case in OTHER_WRITERS})
    return out


def read_spark(spark, path: Path) -> tuple[list[str], list[list]]:  # noqa: ANN001
    """Rows as Spark reads them; timestamps as UTC epoch microseconds (independent of Python's local zone)."""
    from pyspark.sql.types import TimestampNTZType, TimestampType

    df = spark.read.parquet(str(path))
    exprs = []
    for f in df.schema.fields:
        if isinstance(f.dataType, (TimestampType, TimestampNTZType)):
            exprs.append(f"unix_micros(CAST(`{f.name}` AS TIMESTAMP)) AS `{f.name}`")
        else:
            exprs.append(f"`{f.name}`")
    rows = df.selectExpr(*exprs).collect()
    names = df.schema.names
    return names, [[canon_value(r[i]) for r in rows] for i in range(len(names))]


def _expected_for_spark(col: pa.ChunkedArray) -> list:
    t = col.type
    if pa.types.is_timestamp(t):
        return canon_arrow(col, pa.timestamp("us"))
    if pa.types.is_map(t):
        return [None if v is None else {k: canon_value(x) for k, x in v} for v in col.to_pylist()]
    return canon_arrow(col, t)


def _micro_precision(updates: pa.Table | None) -> pa.Table | None:
    """Spark keeps microseconds: truncate new nanosecond timestamps so that all three readers can agree."""
    if updates is None:
        return None
    for i, f in enumerate(updates.schema):
        if pa.types.is_timestamp(f.type) and f.type.unit == "ns":
            col = updates.column(i).cast(pa.timestamp("us", tz=f.type.tz), safe=False).cast(f.type)
            updates = updates.set_column(i, f, col)
    return updates


CASES = [(s, p) for s in SPARK_SOURCES for p in PATTERNS] + [(c.id, "contiguous_all_cols") for c in OTHER_WRITERS]


@pytest.mark.parametrize(("source", "pattern"), CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_three_readers_agree(utc_spark, sources: dict[str, Path], source: str, pattern: str, tmp_path: Path) -> None:  # noqa: ANN001
    src = sources[source]
    dst = tmp_path / "out.parquet"
    original = pq.read_table(src)
    md = pq.ParquetFile(src).metadata
    changes = make_changes(
        original, pattern, seed=zlib.crc32(f"{source}/{pattern}".encode()), row_position=ROW_POSITION,
        row_group_rows=[md.row_group(i).num_rows for i in range(md.num_row_groups)],
    )
    updates = _micro_precision(changes.updates)
    report = rewrite_file(src, dst, updates=updates, deletes=changes.deletes)
    expected = apply_changes(original, updates, changes.deletes, ROW_POSITION)

    assert_same_rows(pq.read_table(dst, page_checksum_verification=True), expected, f"pyarrow [{changes.description}]")
    assert_same_rows(read_duckdb(dst), expected, f"duckdb [{changes.description}]")
    names, columns = read_spark(utc_spark, dst)
    assert names == expected.column_names
    for name, got in zip(names, columns):
        want = _expected_for_spark(expected.column(name))
        assert got == want, f"spark [{changes.description}]: column {name} differs at row {next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)}"

    full_file = report.full_file_rewrite is not None
    exempt = {(rg, col) for rg, col, _ in report.full_chunk_rewrites}
    pages = check_pages(src, dst, original, updates, changes.deletes, ROW_POSITION, exempt=exempt, full_file_rewrite=full_file)
    check_report(report, original, expected, updates, changes.deletes, ROW_POSITION, pages)
    check_metadata(src, dst, expected, same_writer=not full_file)


def test_spark_sources_have_what_we_asked_for(sources: dict[str, Path]) -> None:
    """Guards the corpus itself: INT96 and several pages per chunk really are in the Spark files."""
    from pagewalk import read_file_view

    pf = pq.ParquetFile(sources["spark_int96_snappy"])
    assert pf.schema.column(pf.schema_arrow.get_field_index("ts")).physical_type == "INT96"
    assert b"parquet-mr" in (pf.metadata.created_by or "").encode()
    view = read_file_view(sources["spark_micros_gzip"])
    assert max(len(c.data_pages) for c in view.chunks[0]) >= 5


def test_bug_spark_vectorized_reader_plain_page_between_dictionary_pages(utc_spark, tmp_path: Path) -> None:  # noqa: ANN001
    """Re-encoded PLAIN pages between dictionary-encoded pages of one chunk are read as zeros by Spark's vectorized
    reader (it assumes dictionary fallback is one-way). Updating a middle page must not produce that layout."""
    src = tmp_path / "src.parquet"
    pq.write_table(pa.table({"id": pa.array(range(1000), pa.int64())}), src, write_page_index=True, max_rows_per_page=100)
    dst = tmp_path / "out.parquet"
    upd = pa.table({ROW_POSITION: pa.array([450], pa.int64()), "id": pa.array([-1], pa.int64())})
    rewrite_file(src, dst, updates=upd)
    expected = list(range(1000))
    expected[450] = -1
    for vectorized in ("true", "false"):
        utc_spark.conf.set("spark.sql.parquet.enableVectorizedReader", vectorized)
        try:
            got = [r[0] for r in utc_spark.read.parquet(str(dst)).collect()]
        finally:
            utc_spark.conf.unset("spark.sql.parquet.enableVectorizedReader")
        bad = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
        assert not bad, f"vectorized={vectorized}: {len(bad)} wrong rows, first {bad[:3]}: {[got[i] for i in bad[:3]]}"
