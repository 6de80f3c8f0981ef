"""Hypothesis strategies shared by the property tests: source files (writer, schema, layout) and change sets."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

from corpus import SOURCE_WRITERS, WRITER_CODECS, fresh_column, writer_columns
from oracle import take
from partialcow.parquet import ROW_POSITION

__all__ = ["change_sets", "source_files"]


@st.composite
def source_files(draw: st.DrawFn, writers: tuple[str, ...] = SOURCE_WRITERS,
                 allowed: tuple[str, ...] | None = None, no_codecs: tuple[str, ...] = ()) -> dict:
    """A source file's recipe: writer, column types (a random schema; ``allowed`` narrows it), rows, nulls and the
    writer's layout options (page version, codec but ``no_codecs``, page size, dictionary, page index, row groups,
    checksums)."""
    writer = draw(st.sampled_from(writers))
    v2 = draw(st.booleans()) if writer != "arrow-rs" else False
    pool = [c for c in writer_columns(writer, v2) if allowed is None or c in allowed]
    columns = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=5, unique=True))
    return {
        "writer": writer,
        "n": draw(st.integers(1, 3000)),
        "columns": tuple(columns),
        "null_density": draw(st.sampled_from([0.0, 0.05, 0.5, 1.0])),
        "low_cardinality": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**31)),
        "opts": {
            "codec": draw(st.sampled_from([c for c in WRITER_CODECS[writer] if c.lower() not in no_codecs])),
            "v2": v2,
            "page_rows": draw(st.sampled_from([30, 100, 700, 20_000])),
            "dictionary": draw(st.booleans()),
            "page_index": draw(st.booleans()),
            "row_group_rows": draw(st.sampled_from([400, 1_000_000])),
            "crc": draw(st.booleans()),
        },
    }


@st.composite
def change_sets(draw: st.DrawFn, table: pa.Table) -> tuple[pa.Table | None, np.ndarray | None]:
    """Random updates (none, random rows, a range, values equal to the current ones; one column or all) and deletes
    (none, random, a range, every row) for ``table``."""
    n = table.num_rows
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    update_kind = draw(st.sampled_from(["none", "random", "range", "equal"]))
    delete_kind = draw(st.sampled_from(["none", "random", "range", "all"]))
    frac = draw(st.sampled_from([0.001, 0.01, 0.1, 0.5]))
    k = max(1, int(n * frac))
    free = np.arange(n)
    deletes = None
    if delete_kind == "random":
        deletes = np.sort(rng.choice(n, size=min(k, n), replace=False))
    elif delete_kind == "range":
        start = int(rng.integers(0, n))
        deletes = np.arange(start, min(n, start + k))
    elif delete_kind == "all":
        deletes = np.arange(n)
    if deletes is not None:
        free = np.setdiff1d(free, deletes)
    if update_kind == "none" or len(free) == 0:
        return None, deletes
    which = draw(st.sampled_from(["one", "all"]))
    cols = table.column_names if which == "all" else [table.column_names[int(rng.integers(0, table.num_columns))]]
    if update_kind == "range":
        start = int(rng.integers(0, len(free)))
        pos = free[start : start + k]
    else:
        pos = rng.choice(free, size=min(k, len(free)), replace=False)
    arrays = [pa.array(pos.astype(np.int64))]
    for c in cols:
        if update_kind == "equal":
            arrays.append(take(table.column(c), pos))
        else:
            arrays.append(fresh_column(table.column(c), table.schema.field(c), len(pos), rng))
    return pa.Table.from_arrays(arrays, names=[ROW_POSITION, *cols]), deletes
