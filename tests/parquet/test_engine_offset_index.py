"""The bulk OffsetIndex codec: byte-identical to the generic Thrift codec, on real files and on random arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partialcow.parquet import _format as F
from partialcow.parquet._layout import ParquetLayout
from partialcow.parquet import ROW_POSITION, rewrite_file
from partialcow.parquet._offset_index import (PageLocations, count_page_locations, decode_page_locations,
                                              encode_offset_index, encode_offset_indexes)
from partialcow.parquet._thrift import T_I64, T_LIST, T_STRUCT, TList, TStruct, decode_struct, encode


def _generic(locations: PageLocations, unencoded: list[int] | None = None) -> bytes:
    """The same OffsetIndex built as structs and encoded by the generic codec."""
    items = []
    for offset, size, first in zip(locations.offsets.tolist(), locations.sizes.tolist(),
                                   locations.first_rows.tolist()):
        loc = TStruct()
        loc.put(F.PL_OFFSET, T_I64, offset)
        loc.put(F.PL_COMPRESSED_PAGE_SIZE, 5, size)  # i32
        loc.put(F.PL_FIRST_ROW_INDEX, T_I64, first)
        items.append(loc)
    oi = TStruct()
    oi.put(F.OI_PAGE_LOCATIONS, T_LIST, TList(T_STRUCT, items))
    if unencoded is not None:
        oi.put(F.OI_UNENCODED_BYTE_ARRAY_DATA_BYTES, T_LIST, TList(T_I64, unencoded))
    return encode(oi)


@pytest.mark.parametrize("pages", [0, 1, 14, 15, 32, 33, 500])
@pytest.mark.parametrize("unencoded", [False, True])
def test_matches_generic_codec(pages: int, unencoded: bool) -> None:
    rng = np.random.default_rng(pages)
    offsets = np.cumsum(rng.integers(1, 1 << 20, pages)) + 4
    sizes = rng.integers(20, 1 << 20, pages)
    firsts = np.cumsum(rng.integers(1, 20_000, pages)) - 1
    extra = rng.integers(0, 1 << 40, pages).tolist() if unencoded else None
    generic = _generic(PageLocations(offsets, sizes, firsts), extra)
    decoded = decode_page_locations(generic)
    assert decoded is not None
    assert decoded.offsets.tolist() == offsets.tolist()
    assert decoded.sizes.tolist() == sizes.tolist()
    assert decoded.first_rows.tolist() == firsts.tolist()
    assert encode_offset_index(decoded) == generic  # the later field survives as bytes
    assert decode_struct(encode_offset_index(decoded)) == decode_struct(generic)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 31), (1 << 31) - 1),
                          st.integers(-(1 << 63), (1 << 63) - 1)), max_size=80))
def test_round_trip_any_values(rows: list[tuple[int, int, int]]) -> None:
    offsets, sizes, firsts = (np.array([r[i] for r in rows], dtype=np.int64) for i in range(3))
    locations = PageLocations(offsets, sizes, firsts)
    data = encode_offset_index(locations)
    assert data == _generic(locations)
    back = decode_page_locations(data)
    assert back is not None and back.tail == b"\x00"
    assert (back.offsets.tolist(), back.sizes.tolist(), back.first_rows.tolist()) == (
        offsets.tolist(), sizes.tolist(), firsts.tolist())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(0, (1 << 31) - 1),
                                             st.integers(0, 1 << 40)), max_size=40),
                          st.booleans()), max_size=12))
def test_batch_encoding_matches_one_at_a_time(chunks: list[tuple[list[tuple[int, int, int]], bool]]) -> None:
    """The whole file's OffsetIndexes in one pass: each equal to the generic codec's, tails (later fields) kept."""
    all_locations, expected = [], []
    for rows, unencoded in chunks:
        offsets, sizes, firsts = (np.array([r[i] for r in rows], dtype=np.int64) for i in range(3))
        generic = _generic(PageLocations(offsets, sizes, firsts), list(range(len(rows))) if unencoded else None)
        decoded = decode_page_locations(generic)
        assert decoded is not None
        all_locations.append(decoded)
        expected.append(generic)
    assert encode_offset_indexes(all_locations) == expected


@pytest.mark.parametrize("pages", [0, 1, 14, 15, 300])
@pytest.mark.parametrize("unencoded", [False, True])
def test_count_reads_the_list_header(pages: int, unencoded: bool) -> None:
    locations = PageLocations(np.arange(pages) * 100 + 4, np.full(pages, 100), np.arange(pages) * 10)
    data = _generic(locations, [7] * pages if unencoded else None)
    assert count_page_locations(data) == pages == len(decode_page_locations(data))


def test_other_layouts_are_left_to_the_generic_codec() -> None:
    loc = TStruct()
    loc.put(F.PL_OFFSET, T_I64, 4)
    loc.put(F.PL_COMPRESSED_PAGE_SIZE, 5, 100)
    loc.put(F.PL_FIRST_ROW_INDEX, T_I64, 0)
    loc.put(4, T_I64, 7)  # a PageLocation field this codec does not know
    oi = TStruct()
    oi.put(F.OI_PAGE_LOCATIONS, T_LIST, TList(T_STRUCT, [loc] * 40))
    assert decode_page_locations(encode(oi)) is None
    oi = TStruct()
    oi.put(F.OI_PAGE_LOCATIONS, T_LIST, TList(T_STRUCT, [loc] * 3))
    assert decode_page_locations(encode(oi)) is None


@pytest.mark.parametrize("options", [dict(max_rows_per_page=50), dict(max_rows_per_page=3000)])
def test_real_files(tmp_path: Path, options: dict) -> None:
    n = 6000
    table = pa.table({"k": pa.array(range(n), pa.int64()), "s": pa.array([f"v{i % 97}" for i in range(n)])})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, write_page_index=True, **options)
    with ParquetLayout(path) as lay:
        for leaf in lay.leaves:
            cc = lay.column_chunk(0, leaf.index)
            off, length = cc.val(F.CC_OFFSET_INDEX_OFFSET), cc.val(F.CC_OFFSET_INDEX_LENGTH)
            data = bytes(lay.buf[off:off + length])
            decoded = decode_page_locations(data)
            assert decoded is not None and encode_offset_index(decoded) == data
            generic = lay.offset_index(cc).val(F.OI_PAGE_LOCATIONS).items
            assert decoded.offsets.tolist() == [g.val(F.PL_OFFSET) for g in generic]
            assert decoded.first_rows.tolist() == [g.val(F.PL_FIRST_ROW_INDEX) for g in generic]


def test_row_groups_before_the_first_change_keep_their_offset_index_bytes(tmp_path: Path) -> None:
    """An untouched chunk that does not move keeps the source's OffsetIndex bytes; one that moves is shifted."""
    n = 3000
    table = pa.table({"k": pa.array(range(n), pa.int64()), "v": pa.array(np.arange(n) * 7 % 1000, pa.int64())})
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(table, src, row_group_size=1000, write_page_index=True, max_rows_per_page=100, use_dictionary=False)
    # row group 1 is re-encoded (its size changes): row group 0 stays where it was, row group 2 moves
    updates = pa.table({ROW_POSITION: pa.array([1500], pa.int64()), "v": pa.array([2**62], pa.int64())})
    rewrite_file(src, dst, updates=updates)
    with ParquetLayout(src) as old, ParquetLayout(dst) as new:
        def index(lay: ParquetLayout, rg: int, leaf: int) -> bytes:
            cc = lay.column_chunk(rg, leaf)
            off = cc.val(F.CC_OFFSET_INDEX_OFFSET)
            return bytes(lay.buf[off:off + cc.val(F.CC_OFFSET_INDEX_LENGTH)])

        for leaf in (0, 1):
            assert old.chunk_range(0, leaf) == new.chunk_range(0, leaf)
            assert index(new, 0, leaf) == index(old, 0, leaf)
            shift = new.chunk_range(2, leaf)[0] - old.chunk_range(2, leaf)[0]
            assert shift != 0
            moved, source = decode_page_locations(index(new, 2, leaf)), decode_page_locations(index(old, 2, leaf))
            assert (moved.offsets == source.offsets + shift).all()
            assert moved.first_rows.tolist() == source.first_rows.tolist()
            assert new.page_count(2, leaf) == old.page_count(2, leaf) == len(source) > 1
    assert pq.read_table(dst).column("v")[1500].as_py() == 2**62
