"""rewrite_file against an independent oracle (pyarrow compute on the original), read back by pyarrow and DuckDB,
plus footer/page-index checks and "untouched pages are byte-identical to the source"."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from partialcow.metrics import WriteMetrics
from partialcow.parquet import ROW_POSITION, rewrite_file, write_table
from partialcow.parquet import _format as F
from partialcow.parquet._layout import ParquetLayout, sort_key_fn

N = 12_000


def base_table(n: int = N, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    ints = rng.integers(-5000, 5000, n)
    return pa.table({
        "k": pa.array(np.arange(n), pa.int64()),
        "i32": pa.array([None if x % 7 == 0 else int(x) for x in ints], pa.int32()),
        "i8": pa.array((ints % 100).astype(np.int8)),
        "u64": pa.array(np.abs(ints).astype(np.uint64) * (2**52), pa.uint64()),
        "f64": pa.array(rng.normal(size=n)),
        "f32": pa.array(rng.normal(size=n).astype(np.float32)),
        "s": pa.array([f"name-{x % 300}" if x % 11 else None for x in ints]),
        "bin": pa.array([bytes([x % 256]) * 3 for x in ints], pa.binary()),
        "fixed": pa.array([int(x % 256).to_bytes(1, "little") * 4 for x in ints], pa.binary(4)),
        "dec": pa.array([decimal.Decimal(int(x)) / 100 for x in ints], pa.decimal128(9, 2)),
        "dec_big": pa.array([decimal.Decimal(int(x)) * 10**20 / 1000 for x in ints], pa.decimal128(30, 3)),
        "ts": pa.array((ints * 10**6).astype(np.int64), pa.timestamp("us", tz="UTC")),
        "d": pa.array(ints.astype(np.int32), pa.int32()).cast(pa.date32()),
        "b": pa.array([None if x % 13 == 0 else bool(x % 2) for x in ints]),
    })


# Columns of base_table with few distinct values. Tests about pages copied byte for byte write only these with
# a dictionary: a dictionary holding most of a chunk's values makes the chunk cheaper to re-encode whole (see
# test_one_changed_page_under_a_dictionary_of_mostly_distinct_values_rewrites_the_chunk_plain).
FEW_DISTINCT = ["i8", "s", "bin", "fixed"]


def expected(table: pa.Table, positions: np.ndarray, new: dict[str, pa.Array], deletes: np.ndarray) -> pa.Table:
    """The oracle: patch with pyarrow take/filter on the original table (no engine code)."""
    n = table.num_rows
    keep = np.ones(n, dtype=bool)
    keep[deletes] = False
    cols = []
    for name in table.column_names:
        arr = table.column(name).combine_chunks()
        if name in new:
            idx = np.arange(n)
            idx[positions] = n + np.arange(len(positions))
            arr = pa.concat_arrays([arr, new[name].cast(arr.type)]).take(pa.array(idx))
        cols.append(arr.filter(pa.array(keep)))
    return pa.table(cols, names=table.column_names)


def read_duckdb(path: Path) -> pa.Table:
    res = duckdb.sql(f"select * from read_parquet('{path}')").arrow()
    return res.read_all() if hasattr(res, "read_all") else res


def assert_same_rows(path: Path, exp: pa.Table, *, duck_columns: list[str] | None = None) -> None:
    got = pq.read_table(path)
    assert got.num_rows == exp.num_rows
    for name in exp.column_names:
        assert got.column(name).combine_chunks().equals(exp.column(name).combine_chunks()), name
    duck = read_duckdb(path)
    assert duck.num_rows == exp.num_rows
    for name in duck_columns or exp.column_names:
        assert duck.column(name).to_pylist() == exp.column(name).to_pylist(), name


def _py_key(value, leaf, arrow_type):
    """An actual value mapped into the same order space as sort_key_fn's decoded bounds."""
    if pa.types.is_string(arrow_type):
        return value.encode()
    if pa.types.is_decimal(arrow_type):
        return int(value.scaleb(arrow_type.scale))
    if pa.types.is_timestamp(arrow_type):
        return int(pa.scalar(value, arrow_type).cast(pa.int64()).as_py())
    if pa.types.is_date(arrow_type):
        return (value - dt.date(1970, 1, 1)).days
    if isinstance(value, bool):
        return int(value)
    return value


def check_metadata(path: Path) -> None:
    """Footer and page-index invariants, verified against the values pyarrow decodes."""
    pf = pq.ParquetFile(path)
    data = Path(path).read_bytes()
    with ParquetLayout(path) as lay:
        total = 0
        for rg in range(len(lay.row_groups)):
            table = pf.read_row_group(rg)
            nrows = lay.rg_rows(rg)
            total += nrows
            assert table.num_rows == nrows
            comp = 0
            for leaf in lay.leaves:
                cc = lay.column_chunk(rg, leaf.index)
                cmd = cc.val(F.CC_META_DATA)
                start, end = lay.chunk_range(rg, leaf.index)
                comp += end - start
                # walk the headers: sizes, num_values and encoding stats must add up
                pos, nvals, counts, data_pages = start, 0, {}, []
                while pos < end:
                    h, hs = lay.page_header(pos)
                    ptype = h.val(F.PH_TYPE)
                    sub = h.val({F.DATA_PAGE: F.PH_DATA_PAGE_HEADER, F.DATA_PAGE_V2: F.PH_DATA_PAGE_HEADER_V2,
                                 F.DICTIONARY_PAGE: F.PH_DICTIONARY_PAGE_HEADER}[ptype])
                    if ptype != F.DICTIONARY_PAGE:
                        nvals += sub.val(1)
                        data_pages.append((pos, hs + h.val(F.PH_COMPRESSED_SIZE)))
                    enc = sub.val(4 if ptype == F.DATA_PAGE_V2 else 2)
                    kind = F.DATA_PAGE if ptype == F.DATA_PAGE_V2 else ptype  # pyarrow declares v2 pages as DATA_PAGE
                    counts[(kind, enc)] = counts.get((kind, enc), 0) + 1
                    pos += hs + h.val(F.PH_COMPRESSED_SIZE)
                assert pos == end
                assert nvals == cmd.val(F.CMD_NUM_VALUES)
                # regression (Spark vectorized reader, "Index out of bounds" in PlainIntegerDictionary): once a
                # chunk has a non-dictionary data page, no dictionary-encoded page may follow
                kinds = [_page_kind(lay, off) for off, _ in data_pages]
                assert "dict" not in kinds[kinds.index("plain"):] if "plain" in kinds else True, leaf.path
                if F.CMD_ENCODING_STATS in cmd:
                    declared: dict = {}
                    for e in cmd.val(F.CMD_ENCODING_STATS).items:
                        kind = F.DATA_PAGE if e.val(1) == F.DATA_PAGE_V2 else e.val(1)
                        declared[(kind, e.val(2))] = declared.get((kind, e.val(2)), 0) + e.val(3)
                    assert declared == counts
                if leaf.nested:
                    continue
                col = table.column(leaf.path[0]).combine_chunks()
                st = cmd.val(F.CMD_STATISTICS)
                key = sort_key_fn(leaf)
                if st is not None and st.val(F.ST_NULL_COUNT) is not None:
                    assert st.val(F.ST_NULL_COUNT) == col.null_count, leaf.path
                valid = col.drop_null()
                if pa.types.is_floating(col.type):
                    valid = valid.filter(pc.invert(pc.is_nan(valid)))
                if st is not None and F.ST_MIN_VALUE in st and len(valid) and key is not None:
                    keys = [_py_key(v, leaf, col.type) for v in valid.to_pylist()]
                    assert key(st.val(F.ST_MIN_VALUE)) <= min(keys), leaf.path
                    assert key(st.val(F.ST_MAX_VALUE)) >= max(keys), leaf.path
                    # bounds not flagged inexact are values: table formats publish them as MIN/MAX
                    if st.val(F.ST_IS_MIN_VALUE_EXACT, True) and st.val(F.ST_IS_MAX_VALUE_EXACT, True):
                        assert key(st.val(F.ST_MIN_VALUE)) == min(keys), leaf.path
                        assert key(st.val(F.ST_MAX_VALUE)) == max(keys), leaf.path
                oi = lay.offset_index(cc)
                if oi is None:
                    continue
                locs = oi.val(F.OI_PAGE_LOCATIONS).items
                assert [(loc.val(1), loc.val(2)) for loc in locs] == data_pages
                firsts = [loc.val(3) for loc in locs]
                assert firsts[0] == 0 and all(a < b for a, b in zip(firsts, firsts[1:])) and firsts[-1] < nrows
                ci = lay.column_index(cc)
                if ci is None:
                    continue
                bounds = firsts + [nrows]
                for i in range(len(locs)):
                    page = col.slice(bounds[i], bounds[i + 1] - bounds[i])
                    if ci.val(F.CI_NULL_COUNTS) is not None:
                        assert ci.val(F.CI_NULL_COUNTS).items[i] == page.null_count
                    assert (ci.val(F.CI_NULL_PAGES).items[i] == 1) == (page.null_count == len(page))
                    pv = page.drop_null()
                    if pa.types.is_floating(pv.type):
                        pv = pv.filter(pc.invert(pc.is_nan(pv)))
                    if len(pv) and key is not None and ci.val(F.CI_NULL_PAGES).items[i] != 1:
                        keys = [_py_key(v, leaf, col.type) for v in pv.to_pylist()]
                        assert key(ci.val(F.CI_MIN_VALUES).items[i]) <= min(keys)
                        assert key(ci.val(F.CI_MAX_VALUES).items[i]) >= max(keys)
            rgs = lay.row_groups[rg]
            if F.RG_TOTAL_COMPRESSED_SIZE in rgs:
                assert rgs.val(F.RG_TOTAL_COMPRESSED_SIZE) == comp
        assert total == lay.num_rows
    assert data[:4] == b"PAR1" and data[-4:] == b"PAR1"


def _page_kind(lay: ParquetLayout, offset: int) -> str:
    h, _ = lay.page_header(offset)
    v2 = h.val(F.PH_TYPE) == F.DATA_PAGE_V2
    enc = h.val(F.PH_DATA_PAGE_HEADER_V2 if v2 else F.PH_DATA_PAGE_HEADER).val(4 if v2 else 2)
    return "dict" if enc in (F.PLAIN_DICTIONARY, F.RLE_DICTIONARY) else "plain"


def page_bytes(path: Path) -> dict[tuple[int, int], list[bytes]]:
    """(row group, leaf) -> raw bytes of every data page (header included)."""
    data = Path(path).read_bytes()
    out = {}
    with ParquetLayout(path) as lay:
        for rg in range(len(lay.row_groups)):
            for leaf in lay.leaves:
                out[(rg, leaf.index)] = [data[p.offset:p.offset + p.size] for p in lay.chunk(rg, leaf.index).pages]
    return out


def random_changes(table: pa.Table, rng: np.random.Generator, n_upd: int, n_del: int, columns: list[str]):
    n = table.num_rows
    pos = np.sort(rng.choice(n, n_upd, replace=False))
    dels = np.setdiff1d(rng.choice(n, n_del, replace=False), pos) if n_del else np.zeros(0, np.int64)
    new = {}
    for name in columns:
        # new values drawn from other rows of the same column (so types and value ranges are realistic)
        src_rows = rng.integers(0, n, len(pos))
        new[name] = table.column(name).combine_chunks().take(pa.array(src_rows))
    upd = pa.table({ROW_POSITION: pa.array(pos, pa.int64()), **new})
    return upd, pos, new, dels


WRITERS = {
    "v1_dict_index": dict(write_page_index=True),
    "v2_zstd_index_crc": dict(data_page_version="2.0", compression="zstd", write_page_index=True,
                             write_page_checksum=True),
    "v1_plain_gzip_noindex": dict(use_dictionary=False, compression="gzip"),
    "v2_lz4_noindex": dict(data_page_version="2.0", compression="lz4"),
    "v1_brotli_int_decimals": dict(compression="brotli", store_decimal_as_integer=True, write_page_index=True),
    "v1_uncompressed_dict_fallback": dict(compression="none", dictionary_pagesize_limit=2048,
                                          write_page_index=True),
}


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return base_table()


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("pattern", ["few_updates", "updates_and_deletes", "deletes_only", "many_updates"])
def test_rewrite_matches_oracle(tmp_path: Path, table: pa.Table, writer: str, pattern: str) -> None:
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(table, src, row_group_size=5000, max_rows_per_page=400, **WRITERS[writer])
    rng = np.random.default_rng(abs(hash((writer, pattern))) % 2**32)
    n_upd, n_del, cols = {
        "few_updates": (15, 0, ["i32", "s", "dec"]),
        "updates_and_deletes": (40, 25, ["k", "f64", "s", "ts", "b", "fixed", "dec_big", "u64"]),
        "deletes_only": (0, 30, []),
        "many_updates": (9000, 100, ["f32", "s", "i8", "d", "bin"]),
    }[pattern]
    upd, pos, new, dels = random_changes(table, rng, n_upd, n_del, cols)
    report = rewrite_file(src, dst, upd if cols else None, dels)
    exp = expected(table, pos, new, dels)
    assert_same_rows(dst, exp)
    check_metadata(dst)
    assert report.rows_before == N and report.rows_after == exp.num_rows
    assert report.rows_deleted == len(dels)
    # rows_updated counts rows whose value really changed: compare old and new with pyarrow
    changed = np.zeros(len(pos), dtype=bool)
    for name, vals in new.items():
        old = table.column(name).combine_chunks().take(pa.array(pos))
        changed |= np.array([a != b for a, b in zip(old.to_pylist(), vals.to_pylist())])
    if report.full_file_rewrite is None:
        assert report.rows_updated == int(changed.sum())
        assert report.pages_rewritten + report.pages_copied == report.pages_total
    assert pq.ParquetFile(dst).metadata.metadata == pq.ParquetFile(src).metadata.metadata


@pytest.mark.parametrize("pattern", ["updates_and_deletes", "many_updates"])
def test_threads_write_the_same_bytes_and_report(tmp_path: Path, table: pa.Table, pattern: str) -> None:
    """Chunks rewritten in parallel threads: the file and the report do not depend on the thread count."""
    src = tmp_path / "src.parquet"
    pq.write_table(table, src, row_group_size=3000, max_rows_per_page=400, write_page_index=True)
    n_upd, n_del = {"updates_and_deletes": (60, 25), "many_updates": (9000, 0)}[pattern]
    upd, _, _, dels = random_changes(table, np.random.default_rng(5), n_upd, n_del, ["i32", "s", "dec", "f64"])
    reports, files = [], []
    for threads in (1, 2, 5):
        dst = tmp_path / f"dst{threads}.parquet"
        reports.append(rewrite_file(src, dst, upd, dels, threads=threads, full_file_threshold=math.inf))
        files.append(dst.read_bytes())
    assert files[0] == files[1] == files[2]
    fields = ("rows_after", "rows_updated", "pages_rewritten", "pages_copied", "bytes_copied", "bytes_reencoded",
              "columns_rewritten", "full_chunk_rewrites")
    assert len({tuple(getattr(r, f) for f in fields) for r in reports}) == 1
    assert reports[0].pages_rewritten > 0


def test_untouched_pages_are_copied_byte_for_byte(tmp_path: Path, table: pa.Table) -> None:
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(table, src, row_group_size=6000, max_rows_per_page=500, write_page_index=True,
                   use_dictionary=FEW_DISTINCT)
    # update rows 1200 and 1300 of one column: one page of that column changes, nothing else
    upd = pa.table({ROW_POSITION: pa.array([1200, 1300], pa.int64()), "i32": pa.array([99999, None], pa.int32())})
    report = rewrite_file(src, dst, upd)
    before, after = page_bytes(src), page_bytes(dst)
    i32 = table.column_names.index("i32")
    for key, pages in before.items():
        if key == (0, i32):
            assert len(after[key]) == len(pages)
            changed = [i for i, (a, b) in enumerate(zip(pages, after[key])) if a != b]
            assert changed == [2]  # rows 1000..1499
        else:
            assert after[key] == pages
    assert report.pages_rewritten == 1 and report.columns_rewritten == ("i32",)
    assert report.pages_copied == report.pages_total - 1
    exp = expected(table, np.array([1200, 1300]), {"i32": upd.column("i32").combine_chunks()}, np.zeros(0, int))
    assert_same_rows(dst, exp)
    check_metadata(dst)


def test_deletes_shift_rows_but_copy_later_pages(tmp_path: Path, table: pa.Table) -> None:
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(table, src, row_group_size=N, max_rows_per_page=1000, write_page_index=True,
                   use_dictionary=FEW_DISTINCT)
    dels = np.array([10, 11, 2500])
    report = rewrite_file(src, dst, deletes=dels)
    before, after = page_bytes(src), page_bytes(dst)
    for key, pages in before.items():
        # pages 0 and 2 hold the deleted rows; every other page is copied unchanged
        assert [i for i, p in enumerate(pages) if p not in after[key]] == [0, 2], key
    assert report.pages_rewritten == 2 * len(table.column_names)
    assert_same_rows(dst, expected(table, np.zeros(0, int), {}, dels))
    check_metadata(dst)


def test_equal_values_rewrite_nothing(tmp_path: Path, table: pa.Table) -> None:
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(table, src, write_page_index=True, max_rows_per_page=1000)
    pos = np.arange(0, N, 97)
    upd = pa.table({ROW_POSITION: pa.array(pos, pa.int64()), "s": table.column("s").take(pa.array(pos)),
                    "f64": table.column("f64").take(pa.array(pos))})
    report = rewrite_file(src, dst, upd)
    assert report.rows_updated == 0 and report.pages_rewritten == 0 and report.columns_rewritten == ()
    assert page_bytes(src) == page_bytes(dst)
    assert pq.read_table(dst).equals(table)


def test_all_rows_of_a_row_group_deleted(tmp_path: Path, table: pa.Table) -> None:
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(table, src, row_group_size=4000, write_page_index=True)
    dels = np.arange(4000, 8000)
    report = rewrite_file(src, dst, deletes=dels)
    assert pq.ParquetFile(dst).metadata.num_row_groups == 2
    assert report.rows_after == N - 4000
    assert_same_rows(dst, expected(table, np.zeros(0, int), {}, dels))
    check_metadata(dst)


def test_product_layout_and_metrics(tmp_path: Path, table: pa.Table) -> None:
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    written = write_table(table, src)
    assert written.num_rows == N and written.size_bytes == src.stat().st_size
    meta = pq.ParquetFile(src).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    with ParquetLayout(src) as lay:
        ch = lay.chunk(0, 0)
        assert F.CC_OFFSET_INDEX_OFFSET in ch.cc and F.PH_CRC in lay.ensure_header(ch.pages[0])
        assert max(b - a for a, b in zip([p.first_row for p in ch.pages], [p.first_row for p in ch.pages[1:]])) \
            <= 2000
    upd = pa.table({ROW_POSITION: pa.array([5], pa.int64()), "k": pa.array([-1], pa.int64())})
    report = rewrite_file(src, dst, upd, [7])
    m = report.to_metrics()
    assert isinstance(m, WriteMetrics)
    assert (m.rows_updated, m.rows_deleted, m.files_rewritten) == (1, 1, 1)
    assert m.pages_rewritten == report.pages_rewritten and m.bytes_copied == report.bytes_copied
    assert report.thrift_seconds <= report.elapsed_seconds
    check_metadata(dst)


def test_nested_columns(tmp_path: Path) -> None:
    n = 3000
    t = pa.table({
        "k": pa.array(range(n), pa.int64()),
        "lst": pa.array([[i, i * 2] if i % 4 else None for i in range(n)], pa.list_(pa.int32())),
        "st": pa.array([{"a": i, "b": f"x{i}"} for i in range(n)],
                       pa.struct([("a", pa.int64()), ("b", pa.string())])),
        "m": pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64())),
    })
    for opts in (dict(write_page_index=True), dict(data_page_version="2.0"), dict()):
        src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
        pq.write_table(t, src, max_rows_per_page=300, **opts)
        pos = np.array([3, 1500, 2999])
        new = {"lst": pa.array([[7], None, []], pa.list_(pa.int32())),
               "st": pa.array([{"a": -1, "b": None}, None, {"a": 5, "b": "z"}], t.schema.field("st").type),
               "m": pa.array([[("q", 1)], [], None], pa.map_(pa.string(), pa.int64()))}
        dels = np.array([10, 2000])
        upd = pa.table({ROW_POSITION: pa.array(pos, pa.int64()), **new})
        report = rewrite_file(src, dst, upd, dels)
        exp = expected(t, pos, new, dels)
        assert pq.read_table(dst).equals(exp)
        duck = read_duckdb(dst)
        assert duck.column("lst").to_pylist() == exp.column("lst").to_pylist()
        assert duck.column("st").to_pylist() == exp.column("st").to_pylist()
        assert report.full_chunk_rewrites  # nested chunks are re-encoded whole
        check_metadata(dst)


def test_other_writers_as_sources(tmp_path: Path, table: pa.Table) -> None:
    """Files written by DuckDB and by parquet-rs (deltalake) are patched page by page."""
    small = table.select(["k", "i32", "f64", "s", "dec", "b"])
    sources = {}
    duckdb.register("small_t", small)
    sources["duckdb"] = tmp_path / "duck.parquet"
    duckdb.sql(f"copy (select * from small_t) to '{sources['duckdb']}' (format parquet, row_group_size 5000)")
    try:
        from deltalake import write_deltalake

        write_deltalake(str(tmp_path / "delta"), small)
        sources["parquet-rs"] = next((tmp_path / "delta").glob("*.parquet"))
    except ImportError:  # pragma: no cover
        pass
    rng = np.random.default_rng(5)
    for name, src in sources.items():
        orig = pq.read_table(src)
        # updates of two columns: page path; updates of four plus deletes: whatever the cost model picks
        for cols, n_del in ((["i32", "s"], 0), (["i32", "s", "dec", "b"], 20)):
            upd, pos, new, dels = random_changes(orig, rng, 30, n_del, cols)
            dst = tmp_path / f"{name}-{n_del}-out.parquet"
            report = rewrite_file(src, dst, upd, dels)
            assert_same_rows(dst, expected(orig, pos, new, dels))
            check_metadata(dst)
            if not n_del:
                assert report.full_file_rewrite is None, name
                with ParquetLayout(dst) as a, ParquetLayout(src) as b:
                    assert a.fmd.val(F.FMD_CREATED_BY) == b.fmd.val(F.FMD_CREATED_BY)


@pytest.mark.parametrize(("column", "positions", "writer"), [
    ("fixed", list(range(0, 100)) + list(range(500, 600)), "datafusion"),  # the new bounds lie in copied pages
    ("text", [250], "datafusion"),  # a middle page: the old (cut) bounds lie in copied pages
    ("fixed", list(range(0, 100)) + list(range(500, 600)), "pyarrow"),  # whole entries: bounds kept
    ("text", [250], "pyarrow"),
])
def test_bounds_a_writer_cut_short_are_never_published_as_values(tmp_path: Path, column: str,
                                                                 positions: list[int], writer: str) -> None:
    """arrow-rs (DataFusion's writer) cuts statistics and column-index entries longer than 64 bytes and flags the
    statistics inexact. Chunk bounds rebuilt from such entries are no values (and a FIXED_LEN_BYTE_ARRAY bound of
    the wrong width is not even of the column's type), yet Iceberg and Delta publish chunk bounds as MIN/MAX: a
    rewritten chunk's statistics hold the column's true min and max, or are left out. Arrow's writer cuts nothing:
    its files keep their bounds."""
    datafusion = pytest.importorskip("datafusion")
    n = 600
    if column == "fixed":
        values = pa.array([bytes([i // 256, i % 256]) + b"A" * 98 for i in range(n)], pa.binary(100))
        new_value = values[256]
    else:
        values = pa.array([f"{i:04d}" + "y" * 100 for i in range(n)])
        new_value = pa.scalar("0250zz")
    t = pa.table({"k": pa.array(np.arange(n), pa.int64()), column: values})
    if writer == "datafusion":
        ctx = datafusion.SessionContext()
        ctx.register_record_batches("t", [t.to_batches()])
        out = tmp_path / "df"
        ctx.sql(f"copy (select * from t) to '{out}' stored as parquet options ('format.data_page_row_count_limit' "
                "'100', 'format.dictionary_enabled' 'false')").collect()
        src = out if out.is_file() else next(out.glob("*.parquet"))
    else:
        src = tmp_path / "pa.parquet"
        pq.write_table(t, src, write_page_index=True, max_rows_per_page=100, use_dictionary=False)
    dst = tmp_path / "dst.parquet"
    pos = np.array(positions)
    new = {column: pa.array([new_value.as_py()] * len(pos), values.type)}
    rewrite_file(src, dst, pa.table({ROW_POSITION: pa.array(pos, pa.int64()), **new}))
    exp = expected(t, pos, new, np.zeros(0, int))
    # pyarrow aborts the process on arrow-rs' cut FIXED_LEN_BYTE_ARRAY statistics: DuckDB reads, the footer by hand
    assert read_duckdb(dst).column(column).to_pylist() == exp.column(column).to_pylist()
    true = exp.column(column).to_pylist()
    true = [v.encode() if isinstance(v, str) else v for v in true]
    with ParquetLayout(dst) as lay:
        leaf = lay.leaves[1]
        st = lay.column_chunk(0, 1).val(F.CC_META_DATA).val(F.CMD_STATISTICS)
        assert writer == "datafusion" or (st is not None and F.ST_MIN_VALUE in st)
        if st is not None and F.ST_MIN_VALUE in st:
            assert st.val(F.ST_IS_MIN_VALUE_EXACT, True) and st.val(F.ST_IS_MAX_VALUE_EXACT, True)
            key = sort_key_fn(leaf)
            assert key is not None
            assert (key(st.val(F.ST_MIN_VALUE)), key(st.val(F.ST_MAX_VALUE))) == (min(true), max(true))


def test_int96_and_legacy_decimals(tmp_path: Path) -> None:
    """Spark-style physical types: INT96 timestamps and FLBA decimals (dictionary-encoded, the dictionaries grow)."""
    n = 4000
    t = pa.table({
        "ts": pa.array(np.arange(n, dtype=np.int64) % 300 * 10**9 + 1_600_000_000 * 10**9, pa.timestamp("ns")),
        "dec": pa.array([decimal.Decimal(i % 300) / 10 for i in range(n)], pa.decimal128(7, 1)),
    })
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(t, src, use_deprecated_int96_timestamps=True, max_rows_per_page=500, write_page_index=True)
    assert pq.ParquetFile(src).schema.column(0).physical_type == "INT96"
    pos = np.array([1, 2, 3000])
    new = {"ts": pa.array([0, 10**18, None], pa.timestamp("ns")),
           "dec": pa.array([decimal.Decimal("-1.5"), None, decimal.Decimal("99999.9")], pa.decimal128(7, 1))}
    report = rewrite_file(src, dst, pa.table({ROW_POSITION: pa.array(pos, pa.int64()), **new}))
    assert pq.ParquetFile(dst).schema.column(0).physical_type == "INT96"
    assert pq.ParquetFile(dst).schema.column(1).physical_type == "FIXED_LEN_BYTE_ARRAY"
    assert_same_rows(dst, expected(t, pos, new, np.zeros(0, int)))
    check_metadata(dst)
    assert report.full_file_rewrite is None and report.pages_rewritten == 4 and not report.full_chunk_rewrites


def test_bloom_filters_kept_for_deletes_dropped_for_updates(tmp_path: Path, table: pa.Table) -> None:
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(table, src, bloom_filter_options={"k": {"ndv": N}, "s": {"ndv": 500}}, write_page_index=True,
                   max_rows_per_page=1000)
    upd = pa.table({ROW_POSITION: pa.array([4], pa.int64()), "s": pa.array(["brand-new"])})
    report = rewrite_file(src, dst, upd, deletes=[100])
    assert report.bloom_filters_dropped == ((0, "s"),)
    with ParquetLayout(dst) as lay, ParquetLayout(src) as old:
        k = lay.column_chunk(0, 0).val(F.CC_META_DATA)
        s = lay.column_chunk(0, table.column_names.index("s")).val(F.CC_META_DATA)
        assert F.CMD_BLOOM_FILTER_OFFSET in k and F.CMD_BLOOM_FILTER_OFFSET not in s
        ok = old.column_chunk(0, 0).val(F.CC_META_DATA)
        o_off, n_off = ok.val(F.CMD_BLOOM_FILTER_OFFSET), k.val(F.CMD_BLOOM_FILTER_OFFSET)
        length = k.val(F.CMD_BLOOM_FILTER_LENGTH)
        assert bytes(lay.buf[n_off:n_off + length]) == bytes(old.buf[o_off:o_off + length])
    # DuckDB uses bloom filters for equality filters: a kept filter must still find every remaining key
    got = duckdb.sql(f"select count(*) from read_parquet('{dst}') where k = 4000").fetchall()[0][0]
    assert got == 1
    check_metadata(dst)


def test_sorting_columns_dropped_when_sort_column_updated(tmp_path: Path, table: pa.Table) -> None:
    src, dst, dst2 = tmp_path / "src.parquet", tmp_path / "dst.parquet", tmp_path / "dst2.parquet"
    pq.write_table(table, src, sorting_columns=[pq.SortingColumn(0)], write_page_index=True, max_rows_per_page=500)
    upd = pa.table({ROW_POSITION: pa.array([4], pa.int64()), "k": pa.array([10**9], pa.int64())})
    rewrite_file(src, dst, upd)
    assert pq.ParquetFile(dst).metadata.row_group(0).sorting_columns == ()
    upd = pa.table({ROW_POSITION: pa.array([4], pa.int64()), "s": pa.array(["x"])})
    report = rewrite_file(src, dst2, upd, deletes=[9])
    assert report.full_file_rewrite is None
    assert pq.ParquetFile(dst2).metadata.row_group(0).sorting_columns == (pq.SortingColumn(0),)
    # the whole-file path (single-threaded default) keeps them too when only deletes and non-sort columns change
    report = rewrite_file(src, dst2, deletes=np.arange(0, N, 3), threads=1)
    assert report.full_file_rewrite is not None
    assert pq.ParquetFile(dst2).metadata.row_group(0).sorting_columns == (pq.SortingColumn(0),)


def test_whole_file_rewrite_when_nearly_everything_changes(tmp_path: Path, table: pa.Table) -> None:
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(table, src, write_page_index=True)
    rng = np.random.default_rng(9)
    upd, pos, new, dels = random_changes(table, rng, N // 2, 10, table.column_names)
    report = rewrite_file(src, dst, upd, dels, threads=1)
    assert report.full_file_rewrite is not None
    assert_same_rows(dst, expected(table, pos, new, dels))
    # with threads, whole chunks re-encoded in parallel replace the single-threaded whole-file path
    report = rewrite_file(src, dst, upd, dels, threads=2)
    assert report.full_file_rewrite is None and report.pages_copied == 0
    assert_same_rows(dst, expected(table, pos, new, dels))


def test_bug_spark_plain_page_before_dictionary_page(tmp_path: Path) -> None:
    """New values in the middle of a dictionary-encoded chunk extend its dictionary: pages stay dictionary-encoded,
    the dictionary page grows, untouched pages (whose indices stay valid) are copied."""
    n = 10_000
    t = pa.table({"v": pa.array([i % 50 for i in range(n)], pa.int32()),
                  "s": pa.array([f"s{i % 40}" for i in range(n)])})
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(t, src, write_page_index=True, max_rows_per_page=1000)
    pos = np.array([4500, 4600])
    new = {"v": pa.array([123456, 7], pa.int32()), "s": pa.array(["brand-new", "s3"])}
    report = rewrite_file(src, dst, pa.table({ROW_POSITION: pa.array(pos, pa.int64()), **new}))
    assert_same_rows(dst, expected(t, pos, new, np.zeros(0, int)))
    check_metadata(dst)
    assert report.full_chunk_rewrites == () and report.pages_rewritten == 2
    with ParquetLayout(dst) as lay:
        for leaf in (0, 1):
            ch = lay.chunk(0, leaf)
            assert {_page_kind(lay, p.offset) for p in ch.pages} == {"dict"}
            h, _ = lay.page_header(ch.start)
            assert h.val(F.PH_DICTIONARY_PAGE_HEADER).val(F.DICT_NUM_VALUES) == (51 if leaf == 0 else 41)
    before, after = page_bytes(src), page_bytes(dst)
    for key in before:
        assert [i for i, p in enumerate(before[key]) if p != after[key][i]] == [4]


@pytest.mark.parametrize("version", ["2.6", "1.0"])
@pytest.mark.parametrize("positions", [[4500, 4600], [1500, 4500, 8500]], ids=["one_run", "three_runs"])
def test_dictionary_grows_by_the_distinct_new_values(tmp_path: Path, positions: list[int], version: str) -> None:
    """One touched run lets pyarrow append the new values; several runs (and floats) share one dictionary found by
    search: either way the page grows by exactly the distinct new values, in order of first appearance. In a format
    1.0 file the new dictionary page is PLAIN where the old one was PLAIN_DICTIONARY: encoding_stats say so."""
    n = 10_000
    t = pa.table({"v": pa.array([i % 50 for i in range(n)], pa.int64()),
                  "f": pa.array([float(i % 30) for i in range(n)]),
                  "s": pa.array([f"s{i % 40}" for i in range(n)])})
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(t, src, write_page_index=True, max_rows_per_page=1000, version=version)
    pos = np.array(positions)
    k = len(pos)
    new = {"v": pa.array([10**9 + i % 2 for i in range(k)], pa.int64()),  # two distinct new values
           "f": pa.array([0.5] * (k - 1) + [3.0]),  # one new value, one already in the dictionary
           "s": pa.array(["brand-new"] * k)}
    report = rewrite_file(src, dst, pa.table({ROW_POSITION: pa.array(pos, pa.int64()), **new}))
    assert_same_rows(dst, expected(t, pos, new, np.zeros(0, int)))
    check_metadata(dst)
    assert report.full_chunk_rewrites == ()
    entries = {0: 50 + min(k, 2), 1: 31, 2: 41}
    with ParquetLayout(dst) as lay:
        for leaf, count in entries.items():
            ch = lay.chunk(0, leaf)
            assert {_page_kind(lay, p.offset) for p in ch.pages} == {"dict"}
            h, _ = lay.page_header(ch.start)
            assert h.val(F.PH_DICTIONARY_PAGE_HEADER).val(F.DICT_NUM_VALUES) == count


def test_whole_chunk_reencode_keeps_a_dictionary_only_where_it_pays(tmp_path: Path) -> None:
    """Every page touched: each chunk is re-encoded whole. A dictionary of few values stays; one holding most of
    the chunk's values (nearly all distinct) is dropped for PLAIN; a PLAIN chunk stays PLAIN."""
    n = 6000
    t = pa.table({"few": pa.array([i % 7 for i in range(n)], pa.int64()),
                  "distinct": pa.array([i * 3 for i in range(n)], pa.int64()),
                  "plain": pa.array([i % 5 for i in range(n)], pa.int32())})
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(t, src, write_page_index=True, max_rows_per_page=500, use_dictionary=["few", "distinct"])
    pos = np.arange(0, n, 50)
    new = {name: pc.add(t.column(name).combine_chunks().take(pa.array(pos)), 1) for name in t.column_names}
    report = rewrite_file(src, dst, pa.table({ROW_POSITION: pa.array(pos, pa.int64()), **new}))
    assert {name for _, name, _ in report.full_chunk_rewrites} == set(t.column_names)
    assert_same_rows(dst, expected(t, pos, new, np.zeros(0, int)))
    check_metadata(dst)
    with ParquetLayout(dst) as lay:
        kinds = {leaf.path[0]: {_page_kind(lay, p.offset) for p in lay.chunk(0, leaf.index).pages}
                 for leaf in lay.leaves}
        has_dictionary = {leaf.path[0]: lay.chunk(0, leaf.index).prefix_end > lay.chunk(0, leaf.index).start
                          for leaf in lay.leaves}
    assert kinds == {"few": {"dict"}, "distinct": {"plain"}, "plain": {"plain"}}
    assert has_dictionary == {"few": True, "distinct": False, "plain": False}


def test_one_changed_page_under_a_dictionary_of_mostly_distinct_values_rewrites_the_chunk_plain(tmp_path: Path
                                                                                                ) -> None:
    """Patching a page re-encodes the chunk's whole dictionary ahead of it; where the dictionary holds most of the
    chunk's values a PLAIN re-encode of the whole chunk is cheaper. A dictionary of few values is patched in place."""
    n = 6000
    t = pa.table({"few": pa.array([i % 7 for i in range(n)], pa.int64()),
                  "distinct": pa.array([i * 3 for i in range(n)], pa.int64())})
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(t, src, write_page_index=True, max_rows_per_page=500)
    pos = np.array([1210, 1211])  # one page of twelve
    new = {name: pc.add(t.column(name).combine_chunks().take(pa.array(pos)), 1) for name in t.column_names}
    report = rewrite_file(src, dst, pa.table({ROW_POSITION: pa.array(pos, pa.int64()), **new}))
    assert [(name, reason) for _, name, reason in report.full_chunk_rewrites] == [
        ("distinct", "dictionary too large to patch pages")]
    assert_same_rows(dst, expected(t, pos, new, np.zeros(0, int)))
    check_metadata(dst)
    with ParquetLayout(dst) as lay:
        kinds = {leaf.path[0]: {_page_kind(lay, p.offset) for p in lay.chunk(0, leaf.index).pages}
                 for leaf in lay.leaves}
    assert kinds == {"few": {"dict"}, "distinct": {"plain"}}
    before, after = page_bytes(src)[(0, 0)], page_bytes(dst)[(0, 0)]
    assert [i for i, (a, b) in enumerate(zip(before, after)) if a != b] == [2]  # rows 1000..1499 of "few"


def test_half_float_nan_bounds_have_no_order(tmp_path: Path) -> None:
    """A NaN in a half-float column's bounds orders nothing (as for float and double): the key refuses it, so the
    chunk bounds and boundary order built from such entries are left out instead of misordered."""
    src = tmp_path / "f16.parquet"
    pq.write_table(pa.table({"h": pa.array(np.array([1.0, 2.0], dtype=np.float16))}), src)
    with ParquetLayout(src) as lay:
        key = sort_key_fn(lay.leaves[0])
    assert key is not None and key(np.float16(1.5).tobytes()) == 1.5
    with pytest.raises(ValueError):
        key(np.float16("nan").tobytes())


def test_a_cut_entry_never_stands_for_a_replaced_bound_of_its_length() -> None:
    """parquet-java cuts column-index entries to 64 bytes: the entry of a copied page holding ``x``*64 + ``a`` reads
    ``x``*64, which also spells the old chunk minimum, replaced by the rewrite. Bounds of that length prove nothing:
    the chunk's bounds are left out (a short old bound still found among the entries is kept)."""
    from partialcow.parquet._column_index import PageBounds
    from partialcow.parquet._output import _chunk_bounds
    from partialcow.parquet._thrift import T_BINARY, TStruct

    def stats(lo: bytes, hi: bytes) -> TStruct:
        st = TStruct()
        st.put(F.ST_MIN_VALUE, T_BINARY, lo)
        st.put(F.ST_MAX_VALUE, T_BINARY, hi)
        return st

    cut = b"x" * 64
    copied = [PageBounds(np.array([0, 0], np.uint8), [cut, b"y"], [b"x" * 63 + b"y", b"y"], None)]
    rewritten = [PageBounds(np.array([0], np.uint8), [b"z"], [b"z"], None)]
    assert _chunk_bounds(bytes, stats(cut, b"y"), copied, rewritten, copied_exact=False) is None
    short = [PageBounds(np.array([0, 0], np.uint8), [b"b", b"y"], [b"c", b"y"], None)]
    assert _chunk_bounds(bytes, stats(b"b", b"y"), short, rewritten, copied_exact=False) == (b"b", b"z")
