"""Independent checks for the row-index tests: pyarrow reads of data files and index bucket files."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from partialcow.table.paths import local_path


def row_at(path: str, pos: int, columns: Sequence[str]) -> tuple:
    """The values of ``columns`` at row ``pos`` of a data file, read with pyarrow (not Spark)."""
    table = pq.read_table(local_path(path) or path, columns=list(columns))
    assert 0 <= pos < table.num_rows, f"position {pos} outside {path} ({table.num_rows} rows)"
    row = table.slice(pos, 1).to_pylist()[0]
    return tuple(row[c] for c in columns)


def keys_of(paths: Iterable[str], columns: Sequence[str]) -> dict[tuple, tuple[str, int]]:
    """Every key of the given data files -> (file, position), read with pyarrow."""
    out: dict[tuple, tuple[str, int]] = {}
    for path in paths:
        table = pq.read_table(local_path(path) or path, columns=list(columns))
        for pos, row in enumerate(table.to_pylist()):
            out[tuple(row[c] for c in columns)] = (path, pos)
    return out


def corrupt_bucket(index_root: str, relative: str, *, shift_first_pos: int = 0, duplicate_first: bool = False) -> tuple:
    """Rewrite one bucket file in place: move its first row's position, or repeat its first row. Returns that key."""
    path = os.path.join(index_root, relative)
    table = pq.read_table(path)
    first = table.slice(0, 1)
    if shift_first_pos:
        pos = table.column("_pos").to_pylist()
        pos[0] += shift_first_pos
        table = table.set_column(table.schema.get_field_index("_pos"), "_pos", pa.array(pos, pa.int64()))
    if duplicate_first:
        table = pa.concat_tables([table, first])
    pq.write_table(table, path)
    return tuple(v for k, v in first.to_pylist()[0].items() if not k.startswith("_"))
