"""CDC batches on a Delta table through the library (``apply_changes``), verified with delta-rs, not Spark.

The table is created by delta-rs (``write_deltalake``); delta-spark's jar is not available offline, so Spark only
reads the data files as Parquet while delta-rs commits. Every version is compared with the DuckDB oracle, time travel
to the previous version must return the previous expected rows, and the history names our operation.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from cdc_oracle import CdcOracle, sorted_rows

deltalake = pytest.importorskip("deltalake")

from partialcow.spark.changes import ChangeSpec, apply_changes  # noqa: E402
from partialcow.spark.tables import open_table  # noqa: E402

pytestmark = [pytest.mark.spark]

COLUMNS = ("id", "region", "name", "score")
ARROW = pa.schema([("id", pa.int64()), ("region", pa.string()), ("name", pa.string()), ("score", pa.float64())])
CHANGE_SCHEMA = "id bigint, region string, name string, score double, _op string, _ts bigint"
SPEC = ChangeSpec(key_columns=("id", "region"), op_column="_op", sequence_column="_ts", model="delta_feed")

# (op, id, region, name, score, ts); batch 3 runs with merge_update_columns=('score',)
BATCHES = [
    [("U", 5, "eu", "five-b", 5.5, 10), ("D", 6, "us", None, None, 10), ("D", 9999, "eu", None, None, 10),
     ("U", 5000, "eu", "new-by-update", 1.0, 10), ("I", 5001, "us", "new", 2.0, 10),
     ("I", 7, "eu", "x", 0.0, 12), ("D", 7, "eu", None, None, 11)],  # latest wins whatever the row order
    [("I", 6, "us", "six-again", 6.6, 20), ("U", 5001, "us", "new-updated", 3.0, 20), ("D", 8, "eu", None, None, 20),
     ("U", 8, "us", "eight-us", 8.8, 20)],
    [("U", 10, "eu", "ignored-name", 100.0, 30), ("U", 5002, "us", "inserted-whole", 4.0, 30)],
]


def _rows_of(table) -> list[tuple]:
    return sorted_rows([tuple(r[c] for c in COLUMNS) for r in table.to_pylist()])


def test_delta_batches_versions_time_travel_history(spark, tmp_path):
    from deltalake import DeltaTable, write_deltalake

    path = str(tmp_path / "delta_table")
    initial = pa.Table.from_pylist(
        [{"id": i, "region": r, "name": f"n{i}{r}", "score": i / 2} for i in range(2000) for r in ("eu", "us")],
        schema=ARROW,
    )
    write_deltalake(path, initial)
    oracle = CdcOracle(key_columns=("id", "region"), columns=COLUMNS, op_column="_op", sequence_column="_ts")
    oracle.apply(initial.append_column("_op", pa.array(["I"] * initial.num_rows))
                 .append_column("_ts", pa.array([0] * initial.num_rows, pa.int64())))
    previous = oracle.rows()
    assert _rows_of(DeltaTable(path).to_pyarrow_table()) == previous

    for number, batch in enumerate(BATCHES, start=1):
        update_columns = ("score",) if number == 3 else None
        changes = [dict(zip(("_op", "id", "region", "name", "score", "_ts"), row)) for row in batch]
        expected = oracle.apply(pa.Table.from_pylist(changes), update_columns=update_columns)
        spec = SPEC if update_columns is None else ChangeSpec(**{**SPEC.__dict__, "update_columns": update_columns})
        frame = spark.createDataFrame([tuple(c[k] for k in CHANGE_SCHEMA_NAMES) for c in changes], CHANGE_SCHEMA)
        metrics = apply_changes(spark, open_table(spark, path, table_format="delta"), frame, spec)

        assert (metrics.rows_inserted, metrics.rows_updated, metrics.rows_deleted) == (
            expected.inserted, expected.updated, expected.deleted), f"batch {number}: {metrics}"
        table = DeltaTable(path)
        assert table.version() == number
        assert _rows_of(table.to_pyarrow_table()) == oracle.rows(), f"batch {number}"
        # delta-rs fixes commitInfo.operation to WRITE: our label is in userMetadata
        [commit] = table.history(1)
        assert commit["userMetadata"] == "partial_cow_upsert", commit
        old = DeltaTable(path)
        old.load_as_version(number - 1)
        assert _rows_of(old.to_pyarrow_table()) == previous, f"time travel to version {number - 1}"
        previous = oracle.rows()
        # an update-only rewrite keeps the untouched columns' pages (a delete shifts every page after it)
        if metrics.files_rewritten and not expected.deleted:
            assert metrics.pages_copied > 0, metrics


CHANGE_SCHEMA_NAMES = tuple(part.split()[0] for part in CHANGE_SCHEMA.split(", "))
