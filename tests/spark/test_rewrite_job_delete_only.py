"""Regression: a file whose changes are all deletes (no upserts) made the rewrite of that file fail.

``_moves`` built its mask with ``pa.array([])`` for zero upserts, a null-typed array that ``Table.filter`` refuses
("Filter argument must be boolean type"). Found by bench/upsert_bench.py (pattern d_deletes). Runs the executor
function directly on Arrow (no Spark) and checks the rewritten file with pyarrow.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from partialcow.parquet import write_table
from partialcow.spark.rewrite_job import DELETE, POS, rewrite_changed_file


def test_delete_only_file_is_rewritten_without_the_deleted_rows(tmp_path):
    src = tmp_path / "src.parquet"
    original = pa.table({"k": pa.array(range(5000), pa.int64()), "v": pa.array([i * 3 for i in range(5000)], pa.int32())})
    write_table(original, src)
    deleted = [7, 2500, 4999]
    changes = pa.table(
        {
            POS: pa.array(deleted, pa.int64()),
            DELETE: pa.array([True] * len(deleted)),
            "v": pa.array([None] * len(deleted), pa.int32()),
        }
    )
    report = rewrite_changed_file(str(src), changes, update_columns=["v"])
    assert report["rows_deleted"] == len(deleted) and report["rows_updated"] == 0
    expected = original.filter(pa.array([i not in deleted for i in range(original.num_rows)]))
    assert pq.read_table(report["dst"]).equals(expected)
