"""Regression cases, one per engine bug found by the cross-reader tests (named after the bug).

Each case is the smallest input that showed the bug; the oracle is plain pyarrow.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus import make_table
from oracle import apply_changes, assert_same_rows, check_metadata, check_pages, read_duckdb
from partialcow.exceptions import InvalidChangeError
from partialcow.parquet import ROW_POSITION, rewrite_file


def _write(table: pa.Table, path: Path, **opts: object) -> Path:
    pq.write_table(table, path, **{"write_page_index": True, "max_rows_per_page": 100, **opts})
    return path


def test_bug_equal_value_updates_rewrite_pages(tmp_path: Path) -> None:
    """Updates that set cells to the values they already hold change nothing: no page rewritten, rows_updated 0."""
    src = _write(make_table(1000, columns=("i32", "str", "dec15_3", "ts_us"), seed=11), tmp_path / "src.parquet")
    original = pq.read_table(src)
    pos = np.arange(0, 1000, 10)
    upd = pa.table({ROW_POSITION: pa.array(pos), **{c: original.column(c).take(pa.array(pos)) for c in ("i32", "str", "dec15_3", "ts_us")}})
    report = rewrite_file(src, tmp_path / "out.parquet", updates=upd)
    assert report.rows_updated == 0
    assert report.pages_rewritten == 0 and report.full_file_rewrite is None
    pages = check_pages(src, tmp_path / "out.parquet", original, upd, None, ROW_POSITION)
    assert pages.must_copy == pages.source_data_pages


def test_bug_string_view_columns_crash(tmp_path: Path) -> None:
    """Files whose ARROW:schema says string_view (parquet-rs, tpcgen-cli) must accept updates and deletes."""
    table = make_table(600, columns=("str", "i32"), seed=12)
    table = table.set_column(1, pa.field("str", pa.string_view()), table.column("str").cast(pa.string_view()))
    src = _write(table, tmp_path / "src.parquet")
    original = pq.read_table(src)
    assert original.schema.field("str").type == pa.string_view()
    upd = pa.table({ROW_POSITION: pa.array([3, 250], pa.int64()), "str": pa.array(["neu", None], pa.string_view())})
    dst = tmp_path / "out.parquet"
    rewrite_file(src, dst, updates=upd, deletes=[7, 599])
    expected = apply_changes(original, upd, [7, 599], ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    assert_same_rows(read_duckdb(dst), expected, "duckdb")


def _force_full_file(n: int) -> np.ndarray:
    # Deleting one row in every page touches every page of every column: the cost model rewrites the whole file.
    return np.arange(0, n, 50)


def test_bug_full_file_fallback_renames_list_items(tmp_path: Path) -> None:
    """The whole-file fallback must keep the Arrow schema, e.g. a list's child named ``item``."""
    src = _write(make_table(800, columns=("list_i32", "map", "str"), seed=13), tmp_path / "src.parquet")
    original = pq.read_table(src)
    dst = tmp_path / "out.parquet"
    deletes = _force_full_file(800)
    report = rewrite_file(src, dst, deletes=deletes)
    expected = apply_changes(original, None, deletes, ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    check_metadata(src, dst, expected, same_writer=report.full_file_rewrite is None)


def test_bug_full_file_fallback_adds_arrow_schema(tmp_path: Path) -> None:
    """A file without ARROW:schema (DuckDB, Spark) must not gain one (it changes how pyarrow types the columns)."""
    import duckdb

    src = tmp_path / "src.parquet"
    con = duckdb.connect()
    con.register("t", make_table(800, columns=("i32", "str"), seed=14))
    con.execute(f"COPY t TO '{src}' (FORMAT parquet)")
    con.close()
    original = pq.read_table(src)
    dst = tmp_path / "out.parquet"
    deletes = np.arange(0, 800, 3)
    report = rewrite_file(src, dst, deletes=deletes)
    expected = apply_changes(original, None, deletes, ROW_POSITION)
    assert_same_rows(read_duckdb(dst), expected, "duckdb")
    check_metadata(src, dst, expected, same_writer=report.full_file_rewrite is None)


def _float_update(tmp_path: Path, old: float, new: float) -> None:
    values = np.linspace(-5, 5, 300)
    values[123] = old
    src = _write(pa.table({"f": pa.array(values)}), tmp_path / "src.parquet")
    dst = tmp_path / "out.parquet"
    upd = pa.table({ROW_POSITION: pa.array([123], pa.int64()), "f": pa.array([new])})
    report = rewrite_file(src, dst, updates=upd)
    got = pq.read_table(dst).column("f").to_numpy()[123]
    assert (np.isnan(got) and np.isnan(new)) or (got == new and np.signbit(got) == np.signbit(new))
    assert report.rows_updated == 1


@pytest.mark.parametrize(("old", "new"), [(0.0, -0.0), (-0.0, 0.0)])
def test_bug_signed_zero_update_dropped(tmp_path: Path, old: float, new: float) -> None:
    """-0.0 and 0.0 compare equal but are different values (sign bit; 1/x differs): the update must be written."""
    _float_update(tmp_path, old, new)


@pytest.mark.parametrize(("old", "new"), [(float("nan"), 1.5), (1.5, float("nan"))])
def test_nan_updates_are_applied(tmp_path: Path, old: float, new: float) -> None:
    _float_update(tmp_path, old, new)


_NESTED_ZEROS = [
    (pa.list_(pa.float64()), [0.0], [-0.0]),
    (pa.list_(pa.float32()), [-0.0, 1.0], [0.0, 1.0]),
    (pa.struct([("x", pa.float64())]), {"x": 0.0}, {"x": -0.0}),
    (pa.map_(pa.string(), pa.float64()), [("k", -0.0)], [("k", 0.0)]),
    (pa.list_(pa.struct([("x", pa.float64())])), [{"x": 0.0}], [{"x": -0.0}]),
]


@pytest.mark.parametrize(("type_", "old", "new"), _NESTED_ZEROS, ids=["list", "list32", "struct", "map", "deep"])
def test_bug_signed_zero_inside_nested_update_dropped(tmp_path: Path, type_: pa.DataType, old, new) -> None:
    """A -0.0 inside a list, struct or map is not 0.0 either: nested values compare float bits as flat ones do."""
    rows = [old if i == 7 else None for i in range(20)]
    src = _write(pa.table({"v": pa.array(rows, type_)}), tmp_path / "src.parquet")
    dst = tmp_path / "out.parquet"
    report = rewrite_file(src, dst, updates=pa.table({ROW_POSITION: pa.array([7], pa.int64()),
                                                      "v": pa.array([new], type_)}))
    got = pq.read_table(dst).column("v").to_pylist()[7]
    flat = got if isinstance(got, list) else [got]
    signs = [np.signbit(x["x"] if isinstance(x, dict) else x[1] if isinstance(x, tuple) else x) for x in flat]
    expected = new if isinstance(new, list) else [new]
    assert signs == [np.signbit(x["x"] if isinstance(x, dict) else x[1] if isinstance(x, tuple) else x)
                     for x in expected], (got, new)
    assert report.rows_updated == 1


def test_bug_plain_page_between_dictionary_pages(tmp_path: Path) -> None:
    """Layout twin of the Spark vectorized-reader bug (test_readers_spark.py), checkable without Spark: after an
    update of a middle page, no dictionary-encoded page may follow a non-dictionary page in the chunk."""
    src = _write(pa.table({"id": pa.array(range(1000), pa.int64())}), tmp_path / "src.parquet")
    dst = tmp_path / "out.parquet"
    upd = pa.table({ROW_POSITION: pa.array([450], pa.int64()), "id": pa.array([-1], pa.int64())})
    rewrite_file(src, dst, updates=upd)
    expected = apply_changes(pq.read_table(src), upd, None, ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    check_metadata(src, dst, expected)


def test_bug_delete_all_rows_leaves_empty_row_group(tmp_path: Path) -> None:
    """Deleting every row gives a readable file with no rows and no (empty) row group."""
    src = _write(make_table(300, columns=("i8", "str"), seed=15), tmp_path / "src.parquet", row_group_size=100)
    dst = tmp_path / "out.parquet"
    report = rewrite_file(src, dst, deletes=np.arange(300))
    assert report.rows_after == 0
    expected = apply_changes(pq.read_table(src), None, np.arange(300), ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    assert_same_rows(read_duckdb(dst), expected, "duckdb")
    check_metadata(src, dst, expected, same_writer=report.full_file_rewrite is None)



def test_bug_full_row_images_force_whole_file(tmp_path: Path) -> None:
    """Full row images (every column given, one really changed) must not count the unchanged columns' pages.

    The cost model compared values per row, then treated every given column of a changed row as changed: a few
    updated cells in one column rewrote the whole file.
    """
    columns = ("i32", "str", "dec15_3", "ts_us")
    src = _write(make_table(1000, columns=columns, seed=14), tmp_path / "src.parquet")
    original = pq.read_table(src)
    pos = np.arange(5, 1000, 100)  # one row in each 100-row page of every column
    upd = original.take(pa.array(pos)).select(list(columns))
    upd = upd.set_column(1, "str", pa.array([f"new-{p}" for p in pos])).append_column(ROW_POSITION, pa.array(pos))
    dst = tmp_path / "out.parquet"
    report = rewrite_file(src, dst, updates=upd)
    assert report.full_file_rewrite is None and report.columns_rewritten == ("str",)
    assert report.rows_updated == len(pos)
    expected = apply_changes(original, upd, None, ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    assert_same_rows(read_duckdb(dst), expected, "duckdb")
    pages = check_pages(src, dst, original, upd, None, ROW_POSITION)
    assert pages.must_copy == pages.source_data_pages - 10  # the str chunk's 10 pages are the only ones rewritten


def test_bug_repeated_dictionary_entry_and_a_new_value(tmp_path: Path) -> None:
    """A dictionary page may repeat a value (valid Parquet, rare writers). pyarrow merges the repeat while it
    appends a new value: the entry count stays the same, so only comparing the entries shows the renumbering."""
    from partialcow.parquet._layout import ParquetLayout

    src = _write(pa.table({"s": ["a", "b", "c"] * 40}), tmp_path / "src.parquet", compression="none",
                 use_dictionary=True, max_rows_per_page=10)
    with ParquetLayout(src) as lay:
        ch = lay.chunk(0, 0)
        h, hs = lay.page_header(ch.start)
        start = ch.start + hs
        end = start + h.val(3)  # compressed page size: the body of the dictionary page
    raw = bytearray(src.read_bytes())
    body = bytes(raw[start:end])
    assert body == b"\x01\x00\x00\x00a\x01\x00\x00\x00b\x01\x00\x00\x00c"
    raw[start:end] = body.replace(b"\x00b", b"\x00a")  # dictionary [a, a, c]: "b" rows now read as "a"
    src.write_bytes(bytes(raw))
    original = pq.read_table(src)
    upd = pa.table({ROW_POSITION: pa.array([4], pa.int64()), "s": ["zz"]})
    dst = tmp_path / "dst.parquet"
    rewrite_file(src, dst, upd, threads=1)
    expected = apply_changes(original, upd, np.zeros(0, dtype=np.int64), ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    assert_same_rows(read_duckdb(dst), expected, "duckdb")


def test_bug_column_index_shorter_than_pages(tmp_path: Path) -> None:
    """A source ColumnIndex with fewer entries than the chunk has pages is not spliced into a misaligned index: the
    rewritten chunk gets none (readers then skip page filtering for it)."""
    from partialcow.parquet import _format as F
    from partialcow.parquet._layout import ParquetLayout
    from partialcow.parquet._thrift import T_I32, T_I64, decode_struct, encode

    src = _write(pa.table({"v": pa.array(range(100), pa.int64())}), tmp_path / "src.parquet", use_dictionary=False,
                 max_rows_per_page=10)
    raw = src.read_bytes()
    with ParquetLayout(src) as lay:
        fmd, cc = lay.fmd, lay.column_chunk(0, 0)
        ci_off, ci_len = cc.val(F.CC_COLUMN_INDEX_OFFSET), cc.val(F.CC_COLUMN_INDEX_LENGTH)
        oi_off, oi_len = cc.val(F.CC_OFFSET_INDEX_OFFSET), cc.val(F.CC_OFFSET_INDEX_LENGTH)
        assert ci_off + ci_len == oi_off
        ci = decode_struct(raw[ci_off:ci_off + ci_len])[0]
        for fid in (F.CI_NULL_PAGES, F.CI_MIN_VALUES, F.CI_MAX_VALUES, F.CI_NULL_COUNTS):
            ci.val(fid).items = ci.val(fid).items[:-1]  # one entry short
        short = encode(ci)
        cc.put(F.CC_COLUMN_INDEX_LENGTH, T_I32, len(short))
        cc.put(F.CC_OFFSET_INDEX_OFFSET, T_I64, ci_off + len(short))
        footer = encode(fmd)
    src.write_bytes(raw[:ci_off] + short + raw[oi_off:oi_off + oi_len] + footer + len(footer).to_bytes(4, "little")
                    + b"PAR1")
    original = pq.read_table(src)
    upd = pa.table({ROW_POSITION: pa.array([55], pa.int64()), "v": pa.array([-1], pa.int64())})
    dst = tmp_path / "dst.parquet"
    report = rewrite_file(src, dst, upd)
    assert report.pages_rewritten == 1
    expected = apply_changes(original, upd, np.zeros(0, dtype=np.int64), ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    assert_same_rows(read_duckdb(dst), expected, "duckdb")
    with ParquetLayout(dst) as out:
        cc = out.column_chunk(0, 0)
        assert out.page_bounds(cc) is None and len(out.page_locations(cc)) == 10


def _assert_dictionary_offsets_stated(path: Path) -> None:
    """Every chunk that starts with a dictionary page says so in the footer; data_page_offset is the first data page."""
    from pagewalk import DICTIONARY_PAGE, read_file_view

    for rg in read_file_view(path).chunks:
        for chunk in rg:
            first_data = next(p.offset for p in chunk.pages if p.is_data)
            assert chunk.meta[9] == first_data, f"{chunk.path}: data_page_offset {chunk.meta[9]} != {first_data}"
            if chunk.pages[0].page_type == DICTIONARY_PAGE:
                assert chunk.meta.get(11) == chunk.pages[0].offset, f"{chunk.path}: dictionary page not in the footer"
            else:
                assert not chunk.meta.get(11), f"{chunk.path}: dictionary_page_offset without a dictionary page"


@pytest.mark.parametrize("change", ["one_page", "new_dictionary_value", "most_rows", "deletes"])
@pytest.mark.parametrize(("version", "index"), [("1.0", True), ("1.0", False), ("2.0", True), ("2.0", False)])
def test_bug_dictionary_page_missing_from_footer_is_orphaned(tmp_path: Path, change: str, version: str, index: bool) -> None:
    """parquet-mr 1.12-era footers leave dictionary_page_offset unset and point data_page_offset at the dictionary
    page. Patching pages of such a chunk wrote a footer pointing at the first data page and no dictionary offset:
    the dictionary page was orphaned and pyarrow ("Dictionary page must be before data page"), DuckDB and Spark
    failed to read the column."""
    from corpus import legacy_dictionary_offsets

    n = 3000
    table = pa.table({"id": pa.array(np.arange(n), pa.int64()), "s": pa.array([f"v{i % 17}" for i in range(n)]),
                      "d": pa.array(np.arange(n) % 5 * 1.5)})
    src = _write(table, tmp_path / "src.parquet", data_page_version=version, write_page_index=index,
                 row_group_size=2000, max_rows_per_page=250)
    assert legacy_dictionary_offsets(src) == 6
    original = pq.read_table(src)
    assert original.equals(table)  # the legacy footer is one readers accept
    rng = np.random.default_rng(5)
    deletes = None
    if change == "one_page":
        upd = pa.table({ROW_POSITION: pa.array([260, 270], pa.int64()), "s": ["v3", "v4"], "d": [3.0, 4.5]})
    elif change == "new_dictionary_value":
        upd = pa.table({ROW_POSITION: pa.array([10, 2100], pa.int64()), "s": ["brand-new", "v1"], "d": [9.25, 0.0]})
    elif change == "most_rows":
        pos = np.sort(rng.choice(n, 2500, replace=False))
        upd = pa.table({ROW_POSITION: pa.array(pos), "s": pa.array([f"w{i % 3}" for i in range(len(pos))]),
                        "d": pa.array(np.arange(len(pos)) % 4 * 0.5)})
    else:
        upd, deletes = None, np.array([1, 500, 2999])
    dst = tmp_path / "dst.parquet"
    rewrite_file(src, dst, upd, deletes)
    expected = apply_changes(original, upd, deletes, ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    assert_same_rows(read_duckdb(dst), expected, "duckdb")
    _assert_dictionary_offsets_stated(dst)


def _spark_null_structs(flags: list[bool], zips: list[str | None]) -> pa.StructArray:
    """Structs as Spark hands them over: a null struct's fields are null too, also one its type says is not."""
    return pa.StructArray.from_arrays([pa.array(zips)], names=["zip"], mask=pa.array(flags))


def test_bug_null_struct_with_a_required_field_refused(tmp_path: Path) -> None:
    """A nullable struct with a non-nullable field (Iceberg: a required field of an optional struct) may be null,
    but updating or appending a null one failed the cast ("field 'zip' ... has nulls. Can't cast to non-nullable
    field"): Spark hands a null struct over with null fields, and those are never written. A null field under a
    struct that is not null is still refused."""
    addr = pa.struct([pa.field("zip", pa.string(), nullable=False)])
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("addr", addr),
                        pa.field("tags", pa.list_(pa.field("element", addr)))])
    original = pa.table({"k": pa.array(range(20), pa.int64()),
                         "addr": pa.array([{"zip": f"z{i}"} if i % 3 else None for i in range(20)], addr),
                         "tags": pa.array([[{"zip": "t"}, None]] * 20, pa.list_(pa.field("element", addr)))},
                        schema=schema)
    src = _write(original, tmp_path / "src.parquet")
    # a struct slice, as a batch's chunk is: offsets into the children must be kept
    null_addr = _spark_null_structs([False, True, True, False], ["x", None, None, "y"]).slice(1)
    null_tag = pa.ListArray.from_arrays(pa.array([0, 2, 3, 3]),
                                        _spark_null_structs([True, False, True], [None, "u", None]))
    updates = pa.table({ROW_POSITION: pa.array([1, 3, 4], pa.int64()), "addr": null_addr, "tags": null_tag})
    append = pa.table({"k": pa.array([20, 21], pa.int64()), "addr": null_addr.slice(1),
                       "tags": null_tag.slice(1)})
    dst = tmp_path / "out.parquet"
    rewrite_file(src, dst, updates=updates, append=append)
    got = pq.read_table(dst)
    assert got.schema.field("addr").type == addr  # the field stays required
    rows = {r["k"]: (r["addr"], r["tags"]) for r in got.to_pylist()}
    assert rows[1] == (None, [None, {"zip": "u"}]) and rows[3] == (None, [None]) and rows[4] == ({"zip": "y"}, [])
    assert rows[20] == (None, [None]) and rows[21] == ({"zip": "y"}, [])
    assert rows[2] == ({"zip": "z2"}, [{"zip": "t"}, None])  # rows not updated keep their values
    assert_same_rows(read_duckdb(dst), got, "duckdb")
    bad = pa.table({ROW_POSITION: pa.array([1], pa.int64()), "addr": _spark_null_structs([False], [None])})
    with pytest.raises(InvalidChangeError, match="zip"):
        rewrite_file(src, tmp_path / "bad.parquet", updates=bad)


def test_bug_sliced_list_with_null_lists_of_structs_with_a_required_field(tmp_path: Path) -> None:
    """A list (or map) column of structs with a required field, holding null lists, failed to write when the rows
    were a slice (``Null bitmap with offsets slice not supported``): the insert writers write a large batch in
    slices, so a part after the first failed where the whole batch would have been written."""
    from partialcow.parquet.writer import conform

    addr = pa.struct([pa.field("zip", pa.string(), nullable=False)])
    tags_type = pa.list_(pa.field("element", addr))
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("tags", tags_type),
                        pa.field("m", pa.map_(pa.string(), addr))])
    loose = pa.struct([pa.field("zip", pa.string())])  # as Spark hands it over: every field nullable
    rows = pa.table({"k": pa.array(range(4), pa.int64()),
                     "tags": pa.array([[{"zip": "a"}], None, [{"zip": "b"}, None], None], pa.list_(loose)),
                     "m": pa.array([[("x", {"zip": "a"})], None, [("y", None)], None], pa.map_(pa.string(), loose))})
    for start in range(4):
        part = conform(rows.slice(start), schema)
        assert part.schema == schema
        assert part.to_pylist() == rows.slice(start).to_pylist()
        path = tmp_path / f"part{start}.parquet"
        pq.write_table(part, path)
        assert_same_rows(read_duckdb(path), pq.read_table(path), "duckdb")


def test_bug_int96_timestamps_outside_nanosecond_range_wrapped(tmp_path: Path) -> None:
    """INT96 timestamps (Spark's and delta-spark's default) were decoded as nanoseconds, which wrap silently outside
    1677-2262: every re-encoded page stored 9999-12-31 as 1816-03-29 and 1500-01-01 as 2084-07-20, and the
    post-write check, comparing against the same wrapped values, passed."""
    far, old = dt.datetime(9999, 12, 31), dt.datetime(1500, 1, 1, 12, 30, 0, 123456)
    n = 300
    table = pa.table({"k": pa.array(range(n), pa.int64()),
                      "ts": pa.array([old if i % 7 == 0 else far for i in range(n)], pa.timestamp("us"))})
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(table, src, use_deprecated_int96_timestamps=True, write_page_index=True, data_page_size=512)
    updates = pa.table({ROW_POSITION: pa.array([8, 150], pa.int64()),
                        "ts": pa.array([old, dt.datetime(2500, 6, 1)], pa.timestamp("us"))})
    rewrite_file(src, dst, updates=updates, deletes=[3, 200])
    expected = apply_changes(table, updates, pa.array([3, 200]), ROW_POSITION)
    got = pq.read_table(dst, coerce_int96_timestamp_unit="us")
    assert got.column("ts").to_pylist() == expected.column("ts").to_pylist()
