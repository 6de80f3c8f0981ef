"""A batch's keys are looked up and indexed in the buckets of the index's current layout.

Two regressions, each of which left keys in a bucket their hash does not lead to: the next batch did not find them,
so an update inserted the key a second time and a delete did nothing.
"""

from __future__ import annotations

import uuid

import pytest

from partialcow.index import RowIndex, bucket_files
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table
from tablestate import OtherWriterFirst

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="buckets")
SCHEMA = "k bigint, v bigint, _op string"


def _apply(spark, name: str, rows: list[tuple]):
    return apply_changes(spark, open_table(spark, name, table_format="iceberg"), spark.createDataFrame(rows, SCHEMA),
                         SPEC)


def _check(spark, name: str, expected: dict[int, int]) -> None:
    rows = [(r["k"], r["v"]) for r in spark.table(name).collect()]
    assert len(rows) == len({k for k, _ in rows}), "a key is in the table twice"
    assert dict(rows) == expected
    assert RowIndex.open(open_table(spark, name, table_format="iceberg").format_table).verify().ok


@pytest.mark.usefixtures("spark_path_only")
def test_new_keys_of_an_emptied_index_go_to_their_buckets(spark, schema, monkeypatch):
    """The Spark path gave every new key bucket 0 when the index held no entry, though an index emptied by deletes
    keeps its buckets (three here) and lookups hash into them."""
    monkeypatch.setattr(bucket_files, "_ROWS_PER_BUCKET", 100)
    name = f"{schema}.emptied_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, k, "I") for k in range(300)], SCHEMA), SPEC)
    spark.sql(f"DELETE FROM {name}")
    _apply(spark, name, [(k, k, "I") for k in range(1000, 1050)])
    _apply(spark, name, [(k, -k, "U") for k in range(1000, 1050)])
    _check(spark, name, {k: -k for k in range(1000, 1050)})


def test_a_retried_small_batch_uses_the_layout_the_repair_chose(spark, schema, monkeypatch):
    """A driver-path batch hashes its keys to buckets when it is collected. Its commit lost to a writer of other keys
    whose rows made the index's repair lay it out again (one bucket to several); the retry looked the keys up in
    the new buckets with the old numbers and found half of them missing."""
    monkeypatch.delenv("PARTIALCOW_DRIVER_MAX_ROWS", raising=False)
    monkeypatch.setattr(bucket_files, "_ROWS_PER_BUCKET", 250)
    name = f"{schema}.relayout_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, k, "I") for k in range(0, 400, 2)], SCHEMA), SPEC)
    # odd keys around ours: the new file's bounds cover our keys, so Iceberg calls it a conflict
    insert = f"INSERT INTO {name} SELECT id * 2 + 1, 0 FROM range(400)"
    table = open_table(spark, name, table_format="iceberg")
    table.format_table = OtherWriterFirst(table.format_table, lambda: spark.sql(insert))
    ours = [(k, -k - 1, "U") for k in range(0, 400, 20)]
    metrics = apply_changes(spark, table, spark.createDataFrame(ours, SCHEMA), SPEC)
    assert metrics.commit_retries == 1 and metrics.rows_updated == len(ours) and metrics.rows_inserted == 0
    expected = {k: k for k in range(0, 400, 2)} | {k * 2 + 1: 0 for k in range(400)} | {k: v for k, v, _ in ours}
    _check(spark, name, expected)
