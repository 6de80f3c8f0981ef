"""Page location discovery: OffsetIndex, v2 page headers and flat v1 headers agree; nested v1 rows are unknown."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from partialcow.parquet import _format as F
from partialcow.parquet._layout import ParquetLayout

N = 5000


def _table() -> pa.Table:
    return pa.table({
        "a": pa.array(range(N), pa.int64()),
        "s": pa.array([None if i % 3 == 0 else f"v{i}" for i in range(N)]),
        "l": pa.array([[i] * (i % 4) for i in range(N)], pa.list_(pa.int64())),
    })


def _locations(path: Path) -> dict[tuple[int, int], list[tuple[int, int, int | None]]]:
    with ParquetLayout(path) as lay:
        return {(rg, leaf.index): [(p.offset, p.size, p.first_row) for p in lay.chunk(rg, leaf.index).pages]
                for rg in range(len(lay.row_groups)) for leaf in lay.leaves}


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_offset_index_and_header_scan_agree(tmp_path: Path, version: str) -> None:
    with_index, without = tmp_path / "i.parquet", tmp_path / "n.parquet"
    common = dict(row_group_size=2000, max_rows_per_page=300, data_page_version=version)
    pq.write_table(_table(), with_index, write_page_index=True, **common)
    pq.write_table(_table(), without, **common)
    a, b = _locations(with_index), _locations(without)
    with ParquetLayout(without) as lay:
        for (rg, leaf), pages in b.items():
            ch = lay.chunk(rg, leaf)
            assert F.CC_OFFSET_INDEX_OFFSET not in ch.cc
            nested = lay.leaves[leaf].nested
            rows_a = [p[2] for p in a[(rg, leaf)]]
            rows_b = [p[2] for p in pages]
            if nested and version == "1.0":
                assert not ch.rows_known and rows_b.count(None) >= 1
            else:
                assert ch.rows_known and rows_a == rows_b
            assert len(a[(rg, leaf)]) == len(pages)  # sizes differ: pyarrow puts page stats in headers only
    # independent check of the row starts: pyarrow's own OffsetIndex reader is not exposed, so use page counts
    meta = pq.ParquetFile(with_index).metadata
    for rg in range(meta.num_row_groups):
        for leaf in range(meta.num_columns):
            firsts = [p[2] for p in a[(rg, leaf)]]
            assert firsts == sorted(set(firsts)) and firsts[0] == 0
            assert len(firsts) == -(-meta.row_group(rg).num_rows // 300)


def test_dictionary_page_is_prefix(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(_table(), path, write_page_index=True, max_rows_per_page=1000)
    with ParquetLayout(path) as lay:
        ch = lay.chunk(0, 1)
        header, _ = lay.page_header(ch.start)
        assert header.val(F.PH_TYPE) == F.DICTIONARY_PAGE
        assert ch.prefix_end == ch.pages[0].offset > ch.start
        assert lay.page_count(0, 1) == len(ch.pages) == 5


def test_write_table_layout(tmp_path: Path) -> None:
    """The product's data-file layout: small pages, page index, decimals as integers, dictionaries for strings only."""
    from decimal import Decimal

    from partialcow.parquet import write_table
    from partialcow.parquet.writer import ROWS_PER_PAGE

    n = 5 * ROWS_PER_PAGE + 7
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "price": pa.array([Decimal(i % 1000) / 100 for i in range(n)], pa.decimal128(7, 2)),
        "total": pa.array([Decimal(i) / 100 for i in range(n)], pa.decimal128(18, 2)),
        "wide": pa.array([Decimal(i) for i in range(n)], pa.decimal128(30, 0)),
        "state": pa.array([["CA", "NY", "TX"][i % 3] for i in range(n)]),
    })
    path = tmp_path / "t.parquet"
    write_table(table, path)
    assert pq.read_table(path).equals(table)
    meta = pq.ParquetFile(path).metadata
    physical = {meta.schema.column(i).name: meta.schema.column(i).physical_type for i in range(5)}
    assert physical == {"id": "INT64", "price": "INT32", "total": "INT64", "wide": "FIXED_LEN_BYTE_ARRAY",
                        "state": "BYTE_ARRAY"}
    rg = meta.row_group(0)
    dictionary = {rg.column(i).path_in_schema for i in range(5) if rg.column(i).has_dictionary_page}
    assert dictionary == {"state"}
    lay = ParquetLayout(path.read_bytes())
    for leaf in range(5):
        chunk = lay.chunk(0, leaf)
        assert F.CC_OFFSET_INDEX_OFFSET in chunk.cc and F.CC_COLUMN_INDEX_OFFSET in chunk.cc
        bounds = [p.first_row for p in chunk.pages] + [n]
        assert max(b - a for a, b in zip(bounds, bounds[1:])) <= ROWS_PER_PAGE
        assert len(chunk.pages) == 6
