"""Footer details a rewrite must keep or fix: sorting_columns, field ids, column order of the schema."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oracle import apply_changes, assert_same_rows, check_metadata
from pagewalk import read_file_view
from partialcow.parquet import ROW_POSITION, rewrite_file


@pytest.fixture()
def sorted_src(tmp_path: Path) -> Path:
    n = 1000
    table = pa.table({"k": pa.array(np.arange(n) * 10, pa.int64()), "v": pa.array([f"v{i}" for i in range(n)])})
    path = tmp_path / "sorted.parquet"
    pq.write_table(table, path, sorting_columns=[pq.SortingColumn(0)], write_page_index=True, max_rows_per_page=100)
    assert read_file_view(path).footer[4][0].get(4), "writer did not record sorting_columns"
    return path


@pytest.mark.parametrize(
    ("column", "value", "keeps_order"),
    [("v", "changed", True), ("k", 4551, True), ("k", -5, False)],
    ids=["other-column", "sort-key-in-order", "sort-key-out-of-order"],
)
def test_sorting_columns_stay_true(sorted_src: Path, tmp_path: Path, column: str, value: object, keeps_order: bool) -> None:
    """sorting_columns may stay only while the data is still sorted; updating another column keeps them."""
    dst = tmp_path / "out.parquet"
    upd = pa.table({ROW_POSITION: pa.array([455], pa.int64()), column: pa.array([value], pq.read_schema(sorted_src).field(column).type)})
    rewrite_file(sorted_src, dst, updates=upd)
    expected = apply_changes(pq.read_table(sorted_src), upd, None, ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    check_metadata(sorted_src, dst, expected)  # includes: declared sorting_columns hold
    if column == "v":
        assert read_file_view(dst).footer[4][0].get(4), "sorting_columns dropped although the sort key did not change"


def test_field_ids_survive(tmp_path: Path) -> None:
    """Iceberg/Delta column mapping relies on Parquet field ids: patched and whole-file rewrites keep them."""
    schema = pa.schema(
        [pa.field("a", pa.int32(), metadata={"PARQUET:field_id": "7"}), pa.field("b", pa.string(), metadata={"PARQUET:field_id": "11"})]
    )
    table = pa.table({"a": pa.array(range(500), pa.int32()), "b": [str(i) for i in range(500)]}, schema=schema)
    src = tmp_path / "ids.parquet"
    pq.write_table(table, src, write_page_index=True, max_rows_per_page=50)
    for i, deletes in enumerate(([3], np.arange(0, 500, 7))):  # one page touched; every page touched
        dst = tmp_path / f"out{i}.parquet"
        report = rewrite_file(src, dst, deletes=deletes)
        expected = apply_changes(pq.read_table(src), None, deletes, ROW_POSITION)
        check_metadata(src, dst, expected, same_writer=report.full_file_rewrite is None)
        ids = [(e.get(4), e.get(9)) for e in read_file_view(dst).footer[2]]
        assert ids[1:] == [(b"a", 7), (b"b", 11)]
