"""Property-based tests of ``rewrite_file``: random schemas, writer settings and change sets against the oracle.

Deterministic for CI: derandomized, no example database. ``HYPOTHESIS_PROFILE=dev`` explores more (random seed).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corpus import ALL_FLAT, NESTED, fresh_column, make_table
from oracle import apply_changes, assert_same_rows, check_metadata, check_pages, check_report, read_duckdb
from partialcow.parquet import ROW_POSITION, rewrite_file

# Applied to this module's test only (no global load_profile: other modules keep their own settings).
settings.register_profile(
    "parquet-ci",
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("parquet-dev", parent=settings.get_profile("parquet-ci"), max_examples=300, derandomize=False)
PROFILE = settings.get_profile("parquet-dev" if os.environ.get("HYPOTHESIS_PROFILE") == "dev" else "parquet-ci")

CODECS = ("none", "snappy", "zstd", "gzip", "lz4_raw", "brotli")


@st.composite
def source_files(draw: st.DrawFn) -> dict:
    columns = draw(st.lists(st.sampled_from(ALL_FLAT + NESTED), min_size=1, max_size=5, unique=True))
    return {
        "n": draw(st.integers(1, 3000)),
        "columns": tuple(columns),
        "null_density": draw(st.sampled_from([0.0, 0.05, 0.5, 1.0])),
        "low_cardinality": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**31)),
        "opts": {
            "compression": draw(st.sampled_from(CODECS)),
            "data_page_version": draw(st.sampled_from(["1.0", "2.0"])),
            "max_rows_per_page": draw(st.sampled_from([30, 100, 700, 20_000])),
            "use_dictionary": draw(st.booleans()),
            "write_page_index": draw(st.booleans()),
            "row_group_size": draw(st.sampled_from([400, 1_000_000])),
            "write_page_checksum": draw(st.booleans()),
        },
    }


@st.composite
def change_sets(draw: st.DrawFn, table: pa.Table) -> tuple[pa.Table | None, np.ndarray | None]:
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
            arrays.append(table.column(c).take(pa.array(pos)).combine_chunks())
        else:
            arrays.append(fresh_column(table.column(c), table.schema.field(c), len(pos), rng))
    return pa.Table.from_arrays(arrays, names=[ROW_POSITION, *cols]), deletes


@PROFILE
@given(spec=source_files(), data=st.data())
def test_rewrite_equals_oracle(spec: dict, data: st.DataObject) -> None:
    table = make_table(spec["n"], columns=spec["columns"], seed=spec["seed"], null_density=spec["null_density"],
                       low_cardinality=spec["low_cardinality"])
    with tempfile.TemporaryDirectory() as folder:
        src, dst = Path(folder) / "src.parquet", Path(folder) / "dst.parquet"
        pq.write_table(table, src, **spec["opts"])
        original = pq.read_table(src)
        updates, deletes = data.draw(change_sets(original))
        report = rewrite_file(src, dst, updates=updates, deletes=deletes)
        expected = apply_changes(original, updates, deletes, ROW_POSITION)
        assert_same_rows(pq.read_table(dst, page_checksum_verification=True), expected, "pyarrow")
        assert_same_rows(read_duckdb(dst), expected, "duckdb")
        exempt = {(rg, col) for rg, col, _ in report.full_chunk_rewrites}
        full_file = report.full_file_rewrite is not None
        pages = check_pages(src, dst, original, updates, deletes, ROW_POSITION, exempt=exempt, full_file_rewrite=full_file)
        check_report(report, original, expected, updates, deletes, ROW_POSITION, pages)
        check_metadata(src, dst, expected, same_writer=not full_file)
