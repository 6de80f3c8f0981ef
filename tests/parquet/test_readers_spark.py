"""Spark (parquet-mr) as writer and as reader of rewritten files.

Few, small cases: Spark-written sources (INT96, decimals, nested, three codecs) and Spark-readable files from the
other writers, each rewritten by the engine and read back by pyarrow, DuckDB and Spark.
"""

from __future__ import annotations

import itertools
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


# ---------------------------------------------------------------------------------------------------------------
# Property test read by Spark: many rewritten files from every writer, read in one Spark job per reader


def read_spark_many(spark, paths: list[Path], *, vectorized: bool) -> dict[Path, pa.Table]:  # noqa: ANN001
    """Each file's rows as Spark reads them, all files in one scan (columns carry per-file names, so the union
    schema never conflicts); rows keep file order (one split per small file, read in order)."""
    from pyspark.sql.types import StructType

    fields: dict[str, object] = {}
    for path in paths:  # a footer read on the driver per file, no job
        for f in spark.read.parquet(str(path)).schema.fields:
            fields.setdefault(f.name, f)
    spark.conf.set("spark.sql.parquet.enableVectorizedReader", str(vectorized).lower())
    try:
        df = spark.read.schema(StructType(list(fields.values()))).parquet(*[str(p) for p in paths])
        df = df.selectExpr("input_file_name() AS _file", "monotonically_increasing_id() AS _order", "*")
        table = pa.Table.from_batches(df._collect_as_arrow())  # noqa: SLF001 - pyspark 3.5's Arrow collect
    finally:
        spark.conf.unset("spark.sql.parquet.enableVectorizedReader")
    files = table.column("_file").to_pylist()
    out = {}
    for path in paths:
        mask = pa.array([f.endswith(str(path)) for f in files])
        part = table.filter(mask).sort_by("_order")
        out[path] = part.select([c for c in part.column_names if c not in ("_file", "_order")])
    return out


def _spark_differences(got: pa.Table, expected: pa.Table) -> str | None:
    if got.num_rows != expected.num_rows:
        return f"{got.num_rows} rows, expected {expected.num_rows}"
    for name in expected.column_names:
        want = _expected_for_spark(expected.column(name))
        col = got.column(name)
        have = canon_arrow(col, pa.timestamp("us")) if pa.types.is_timestamp(col.type) else \
            [None if v is None else {k: canon_value(x) for k, x in v} for v in col.to_pylist()] \
            if pa.types.is_map(col.type) else canon_arrow(col)
        if have != want:
            i = next(i for i, (a, b) in enumerate(zip(have, want)) if a != b)
            return f"column {name} row {i}: {have[i]!r}, expected {want[i]!r}"
    return None


# examples per source kind: each writer of strategies.source_files, each Spark layout of spark_property_sources
EXAMPLES_PER_WRITER, EXAMPLES_PER_SPARK_LAYOUT = 4, 2


def test_spark_readers_agree_with_the_oracle_on_random_rewrites(utc_spark, tmp_path: Path) -> None:  # noqa: ANN001
    """Random sources from every writer (pyarrow with and without the parquet-mr 1.12 footer, DuckDB, arrow-rs,
    parquet-mr through Spark in six layouts), random schemas with nulls, random updates and deletes: each rewritten
    file reads identically in pyarrow, DuckDB, Spark's vectorized and Spark's row-based reader (all files in one
    Spark scan per reader)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from corpus import SOURCE_WRITERS, make_table, spark_property_sources, write_source
    from strategies import change_sets, source_files

    spark_sources = spark_property_sources(utc_spark, tmp_path)
    examples: list[tuple[str, Path, pa.Table]] = []
    runs = itertools.count()
    allowed = SPARK_READABLE_FLAT + ("list_i32", "struct", "map")

    def rewrite(kind: str, spec: dict | None, data: st.DataObject) -> None:
        run = next(runs)
        folder = tmp_path / f"example{run}"
        folder.mkdir()
        if spec is None:
            src, label = spark_sources[kind], kind
        else:
            table = make_table(spec["n"], columns=spec["columns"], seed=spec["seed"],
                               null_density=spec["null_density"], low_cardinality=spec["low_cardinality"])
            table = table.rename_columns([f"e{run}_{c}" for c in table.column_names])
            src, label = write_source(spec["writer"], table, folder / "src.parquet", **spec["opts"]), repr(spec)
        original = pq.read_table(src)
        updates, deletes = data.draw(change_sets(original))
        updates = _micro_precision(updates)
        dst = folder / "dst.parquet"
        rewrite_file(src, dst, updates=updates, deletes=deletes)
        expected = apply_changes(original, updates, deletes, ROW_POSITION)
        assert_same_rows(pq.read_table(dst), expected, f"pyarrow [{label}]")
        assert_same_rows(read_duckdb(dst), expected, f"duckdb [{label}]")
        examples.append((label, dst, expected))

    plan = [(w, EXAMPLES_PER_WRITER) for w in SOURCE_WRITERS]
    plan += [(name, EXAMPLES_PER_SPARK_LAYOUT) for name in sorted(spark_sources)]
    def examples_of(kind: str, count: int):  # noqa: ANN202 - a hypothesis test for one kind of source
        # this Spark has no Hadoop Brotli codec: it cannot read brotli files, before or after a rewrite
        specs = (source_files(writers=(kind,), allowed=allowed, no_codecs=("brotli",)) if kind in SOURCE_WRITERS
                 else st.none())

        @settings(max_examples=count, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(spec=specs, data=st.data())
        def run(spec: dict | None, data: st.DataObject) -> None:
            rewrite(kind, spec, data)

        return run

    for kind, count in plan:
        examples_of(kind, count)()
    assert len(examples) >= len(plan)
    failures = []
    for vectorized in (True, False):
        got = read_spark_many(utc_spark, [dst for _, dst, _ in examples], vectorized=vectorized)
        for label, dst, expected in examples:
            problem = _spark_differences(got[dst], expected)
            if problem is not None:
                failures.append(f"vectorized={vectorized} {dst.parent.name} [{label}]: {problem}")
    assert not failures, "\n".join(failures)


def test_a_spliced_chunks_string_bounds_are_values_of_the_chunk(spark, tmp_path: Path) -> None:
    """Regression: parquet-java cuts binary column-index entries to 64 bytes. When the row holding a chunk's min
    was deleted, the new chunk min came from a copied page's cut entry and was published as a value (Iceberg and
    Delta answer MIN from such bounds). Now such a chunk has no bounds unless they are values of it."""
    # 104 characters each; the first page holds the chunk's min (row 0) and otherwise values above every later page
    long = lambda i: (f"{i:04d}" if i == 0 or i >= 500 else f"9{i:04d}") + "x" * 100  # noqa: E731
    folder = tmp_path / "spark"
    (spark.createDataFrame([(i, long(i)) for i in range(4000)], "k int, s string").coalesce(1)
     .write.option("parquet.page.size", "4096").option("parquet.page.row.count.limit", "500").parquet(str(folder)))
    (src,) = folder.glob("*.parquet")
    assert pq.ParquetFile(src).metadata.created_by.startswith("parquet-mr")
    dst = tmp_path / "out.parquet"
    rewrite_file(src, dst, deletes=[0])  # the row holding the min of s
    stats = pq.ParquetFile(dst).metadata.row_group(0).column(1).statistics
    values = set(pq.read_table(dst, columns=["s"])["s"].to_pylist())
    assert stats is None or not stats.has_min_max or (stats.min in values and stats.max in values), (
        stats.min, stats.max)
