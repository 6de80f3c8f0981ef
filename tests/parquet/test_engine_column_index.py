"""The bulk ColumnIndex codec: the same entries as the generic Thrift codec, on real files and on random values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partialcow.parquet import _format as F
from partialcow.parquet._column_index import PageBounds, decode_column_index, encode_column_index, from_struct
from partialcow.parquet._layout import ParquetLayout
from partialcow.parquet._thrift import T_BINARY, T_I32, T_I64, T_LIST, T_TRUE, TList, TStruct, decode_struct, encode


def _generic(bounds: PageBounds, false_byte: int = 2, histograms: bool = False) -> bytes:
    """The same ColumnIndex built as a struct and encoded by the generic codec."""
    ci = TStruct()
    ci.put(F.CI_NULL_PAGES, T_LIST, TList(T_TRUE, [1 if v else false_byte for v in bounds.null_pages.tolist()]))
    ci.put(F.CI_MIN_VALUES, T_LIST, TList(T_BINARY, list(bounds.mins)))
    ci.put(F.CI_MAX_VALUES, T_LIST, TList(T_BINARY, list(bounds.maxs)))
    ci.put(F.CI_BOUNDARY_ORDER, T_I32, bounds.boundary_order)
    if bounds.null_counts is not None:
        ci.put(F.CI_NULL_COUNTS, T_LIST, TList(T_I64, bounds.null_counts.tolist()))
    if histograms:
        ci.put(F.CI_DEF_LEVEL_HISTOGRAMS, T_LIST, TList(T_I64, [1, 2] * len(bounds)))
    return encode(ci)


def _same(a: PageBounds, b: PageBounds) -> None:
    assert a.null_pages.tolist() == b.null_pages.tolist()
    assert a.mins == b.mins and a.maxs == b.maxs and a.boundary_order == b.boundary_order
    assert (a.null_counts is None) == (b.null_counts is None)
    if a.null_counts is not None:
        assert a.null_counts.tolist() == b.null_counts.tolist()


entries = st.lists(st.tuples(st.booleans(), st.binary(max_size=200), st.binary(max_size=200),
                             st.integers(0, (1 << 63) - 1)), max_size=60)


@settings(max_examples=80, deadline=None)
@given(entries, st.booleans(), st.sampled_from([0, 1, 2]), st.sampled_from([0, 2]), st.booleans())
def test_any_entries_match_the_generic_codec(rows, with_counts: bool, order: int, false_byte: int,
                                             histograms: bool) -> None:
    bounds = PageBounds(np.array([r[0] for r in rows], dtype=np.uint8), [r[1] for r in rows],
                        [r[2] for r in rows], np.array([r[3] for r in rows], dtype=np.int64) if with_counts else None,
                        order)
    generic = _generic(bounds, false_byte, histograms)
    decoded = decode_column_index(generic)
    assert decoded is not None
    _same(decoded, bounds)
    ours = encode_column_index(bounds)
    assert ours == _generic(bounds)  # true as 1, false as 2, like pyarrow's Thrift
    _same(from_struct(decode_struct(ours)[0]), bounds)


@pytest.mark.parametrize("width", [1, 4, 8, 16, 127, 128, 300])
@pytest.mark.parametrize("pages", [0, 1, 14, 15, 200])
def test_fixed_width_values(width: int, pages: int) -> None:
    rng = np.random.default_rng(width * 1000 + pages)
    values = [rng.bytes(width) for _ in range(2 * pages)]
    bounds = PageBounds(rng.integers(0, 2, pages).astype(np.uint8), values[:pages], values[pages:],
                        rng.integers(0, 1 << 40, pages))
    decoded = decode_column_index(_generic(bounds))
    assert decoded is not None
    _same(decoded, bounds)
    assert encode_column_index(bounds) == _generic(bounds)


def test_a_width_byte_inside_values_is_not_taken_for_a_fixed_layout() -> None:
    # first length 2, but the second element is 3 bytes long: the fixed-width shortcut must not apply
    bounds = PageBounds(np.zeros(3, np.uint8), [b"ab", b"\x02\x02\x02", b"cd"], [b"x", b"y", b"z"], None)
    decoded = decode_column_index(_generic(bounds))
    assert decoded is not None and decoded.mins == bounds.mins


def test_other_layouts_are_left_to_the_generic_codec() -> None:
    ci = TStruct()
    ci.put(F.CI_MIN_VALUES, T_LIST, TList(T_BINARY, [b"a"]))  # field 1 missing
    ci.put(F.CI_MAX_VALUES, T_LIST, TList(T_BINARY, [b"b"]))
    ci.put(F.CI_BOUNDARY_ORDER, T_I32, 0)
    assert decode_column_index(encode(ci)) is None
    assert decode_column_index(b"\x19") is None  # truncated


def test_slice_and_concat() -> None:
    a = PageBounds(np.array([0, 1, 0], np.uint8), [b"a", b"", b"c"], [b"b", b"", b"d"], np.array([0, 5, 1]))
    b = PageBounds(np.array([0], np.uint8), [b"e"], [b"f"], None)
    joined = PageBounds.concat([a.slice(1, 3), a.slice(0, 1)])
    assert joined.mins == [b"", b"c", b"a"] and joined.null_counts.tolist() == [5, 1, 0]
    assert PageBounds.concat([a, b]).null_counts is None  # unknown for one part: left out


@pytest.mark.parametrize("options", [dict(max_rows_per_page=50), dict(max_rows_per_page=3000)])
def test_real_files(tmp_path: Path, options: dict) -> None:
    n = 6000
    rng = np.random.default_rng(3)
    table = pa.table({
        "k": pa.array(range(n), pa.int64()),
        "s": pa.array([None if i % 7 == 0 else f"v{i % 97}" * (i % 5) for i in range(n)]),
        "d": pa.array(rng.normal(size=n)),
        "dec": pa.array([None] * 100 + [i / 100 for i in range(n - 100)]).cast(pa.decimal128(12, 2)),
    })
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, write_page_index=True, **options)
    with ParquetLayout(path) as lay:
        for leaf in lay.leaves:
            cc = lay.column_chunk(0, leaf.index)
            data = lay.column_index_bytes(cc)
            decoded = decode_column_index(data)
            assert decoded is not None
            _same(decoded, from_struct(lay.column_index(cc)))
            # pyarrow writes this layout, plus level histograms for nullable columns: rebuilt indexes leave them
            # out (they describe the old pages, like the chunk's SizeStatistics, which are dropped too)
            ours = encode_column_index(decoded)
            assert data.startswith(ours[:-1])
            generic = lay.column_index(cc)
            generic.drop(F.CI_REP_LEVEL_HISTOGRAMS, F.CI_DEF_LEVEL_HISTOGRAMS)
            assert decode_struct(ours)[0] == generic
