"""What the check for values a data file cannot hold (``rewrite_job._moves``) costs per rewritten file.

    PYTHONPATH=adapter python bench/move_check_cost.py

Pure pyarrow, no Spark: one file's changed rows (3,000 rows of 23 bigint columns), the check before it looked at the
file's column types (only columns the file lacks), and now, for a file of our own writer (every column nullable, as
the table) and for one with half its columns NOT NULL.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from partialcow.spark.rewrite_job import _moves

ROWS, COLUMNS, ROUNDS = 3000, 23, 200


def _absent_only(upserts: pa.Table) -> pa.Array:
    return pa.array([False] * upserts.num_rows, type=pa.bool_())  # the check before: no column is absent here


def main() -> None:
    rows = pa.table({f"c{i}": pa.array(np.arange(ROWS, dtype=np.int64)) for i in range(COLUMNS)})
    nullable = pa.schema([pa.field(f"c{i}", pa.int64()) for i in range(COLUMNS)])
    half_required = pa.schema([pa.field(f"c{i}", pa.int64(), nullable=i % 2 == 0) for i in range(COLUMNS)])
    cases = {
        "columns the file lacks only (before)": lambda: _absent_only(rows),
        "now, a file of nullable columns": lambda: _moves(rows, [], nullable, rows.column_names),
        "now, half the columns NOT NULL": lambda: _moves(rows, [], half_required, rows.column_names),
    }
    for label, check in cases.items():
        pc.sum(check())  # warm
        started = time.perf_counter()
        for _ in range(ROUNDS):
            check()
        print(f"{label}: {(time.perf_counter() - started) / ROUNDS * 1e6:.0f} us per file")


if __name__ == "__main__":
    main()
