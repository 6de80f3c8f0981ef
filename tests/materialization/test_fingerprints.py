"""Row fingerprints through ``apply_changes`` (issue 25, "full row images as cheap as named columns"): batches of full
row images leave each rewritten file a sidecar that matches it, the replaced files' sidecars go, and nothing else
is left behind; contents read by Spark (and its time travel) and by pyiceberg."""

from __future__ import annotations

import os
import uuid
from decimal import Decimal
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from independent_read import iceberg_rows
from partialcow.parquet._fingerprints import column_hashes, fingerprint, load_sidecar, sidecar_path, signature
from partialcow.parquet._layout import ParquetLayout
from partialcow.parquet._pagecodec import _read_schema
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import local_path, open_table
from tablestate import leftovers, location

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="fingerprinted")
SCHEMA = "k bigint, q int, p decimal(7,2), s string, d double, _op string"
N = 4000


def _row(k: int, batch: int, op: str = "U") -> tuple:
    """Key ``k`` after ``batch`` batches: batch b changes q and p of every 7th key, counted from b; every other
    value stays."""
    bump = sum(b for b in range(1, batch + 1) if k % 7 == b % 7)
    return (k, k % 50 + bump, f"{(k % 900) + bump}.25", f"s{k}", k / 8, op)


def _data_files(spark, name: str) -> list[str]:
    return sorted(local_path(r[0]) for r in spark.sql(f"select file_path from {name}.files").collect())


def _assert_matches(path: str) -> None:
    with ParquetLayout(path) as lay:
        sc = load_sidecar(path, lay.num_rows, _read_schema(lay))
    assert sc is not None, f"{path}: no sidecar matching the file"
    table = pq.read_table(path)
    hashes = [column_hashes(table.column(c), sc.salt(j)) for j, c in enumerate(sc.columns)]
    assert np.array_equal(sc.fp, fingerprint(hashes)) and np.array_equal(sc.sig, signature(hashes, len(hashes)))
    assert set(sc.columns) == {"q", "p", "s", "d"}


def _frame(spark, rows):
    return spark.createDataFrame([(k, q, Decimal(p), s, d, op) for k, q, p, s, d, op in rows], SCHEMA)


@pytest.fixture
def created(spark):
    """(name, table) of a new table with every key at batch 0; dropped afterwards."""
    schema = f"pcow_fp_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    try:
        create_table(spark, name, _frame(spark, [_row(k, 0, "I") for k in range(N)]), SPEC)
        yield name, open_table(spark, name, table_format="iceberg")
    finally:
        spark.sql(f"drop schema {schema} cascade")


def test_full_row_images_keep_fingerprints_beside_the_files(spark, created):
    name, table = created
    frame = partial(_frame, spark)
    removed: list[str] = []
    for batch in (1, 2, 3):
        before = _data_files(spark, name)
        # full row images of every other key, plus one new key; a seventh of them really change
        rows = [_row(k, batch) for k in range(0, N, 2)] + [(N + batch, 1, "1.00", "new", 0.5, "I")]
        metrics = apply_changes(spark, table, frame(rows), SPEC)
        assert metrics.rows_updated == len([k for k in range(0, N, 2) if k % 7 == batch % 7])
        assert metrics.rows_inserted == 1
        removed += [f for f in before if f not in _data_files(spark, name)]
    files = _data_files(spark, name)
    # a file gets one where its rewrite screened full row images (an append-only rewrite of a file without one
    # does not); each must match its file
    with_sidecar = [f for f in files if os.path.exists(sidecar_path(f))]
    assert with_sidecar, f"no current file has a sidecar: {files}"
    for path in with_sidecar:
        _assert_matches(path)
    assert removed and not any(os.path.exists(sidecar_path(f)) for f in removed)
    assert leftovers(spark, name) == []
    expected = {k: _row(k, 3 if k % 2 == 0 else 0) for k in range(N)}
    expected.update({N + b: (N + b, 1, "1.00", "new", 0.5, "I") for b in (1, 2, 3)})
    want = sorted((k, q, str(p), s, d) for k, q, p, s, d, _ in expected.values())
    got = sorted((r.k, r.q, str(r.p), r.s, r.d) for r in spark.table(name).collect())
    assert got == want
    ice = iceberg_rows(Path(location(spark, name)), ("k", "q", "p", "s", "d"))
    assert sorted((k, q, str(p), s, d) for k, q, p, s, d in ice) == want
    # time travel: the snapshot before the last batch lacks its change
    snaps = [r[0] for r in spark.sql(f"select snapshot_id from {name}.snapshots order by committed_at").collect()]
    prior = spark.sql(f"select count(*) from {name} version as of {snaps[-2]} where k = {N + 3}").first()[0]
    assert prior == 0


def test_sidecars_of_files_another_writer_replaced_go_with_the_next_batch(spark, created):
    """Spark's own UPDATE replaces a file that has a sidecar; the next batch's index repair removes that sidecar."""
    name, table = created
    frame = partial(_frame, spark)
    apply_changes(spark, table, frame([_row(k, 1) for k in range(0, N, 2)]), SPEC)
    with_sidecar = [f for f in _data_files(spark, name) if os.path.exists(sidecar_path(f))]
    assert with_sidecar
    spark.sql(f"update {name} set s = 'other writer' where k % 2 = 1")  # every file: copy-on-write rewrites
    replaced = [f for f in with_sidecar if f not in _data_files(spark, name)]
    assert replaced and all(os.path.exists(sidecar_path(f)) for f in replaced)
    apply_changes(spark, table, frame([_row(k, 2) for k in range(0, N, 2)]), SPEC)
    assert not any(os.path.exists(sidecar_path(f)) for f in replaced)
    assert leftovers(spark, name) == []
    got = {r.k: (r.q, r.s) for r in spark.table(name).collect()}
    assert all(got[k] == (_row(k, 2)[1], f"s{k}") for k in range(0, N, 2))
    assert all(got[k][1] == "other writer" for k in range(1, N, 2))

