"""The row index a first build writes, on both of its paths: sorted on the driver from the writing tasks' entry
files, or by a Spark job over them (``PARTIALCOW_DRIVER_MAX_ROWS=0``, the ``pipeline_path`` fixture). Either way
the index equals a fresh scan of the table, every key sits in the bucket Spark's hash gives it, a repeated key is
refused with nothing left behind, and the write's scratch folder is gone."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest

from partialcow.exceptions import PartialCowError
from partialcow.index import RowIndex
from partialcow.index.bucket_files import buckets_of, key_hash_expr
from partialcow.index.storage import INDEX_DIR
from partialcow.spark.changes import ChangeSpec, create_table
from partialcow.table.iceberg import IcebergTable

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

SPEC = ChangeSpec(key_columns=("k", "tag"), op_column="_op", model="bulk_index")
SCHEMA = "k bigint, tag string, v int, _op string"


@pytest.fixture()
def table_name(spark):
    schema = f"pcow_bulk_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    yield f"{schema}.t"
    spark.sql(f"drop schema {schema} cascade")


def _location(spark, name: str) -> str:
    return IcebergTable(spark, name).location.removeprefix("file:")


def _scratch_left(spark, name: str) -> list[str]:
    tmp = os.path.join(_location(spark, name), INDEX_DIR, "_tmp")
    return [os.path.join(d, f) for d, _, files in os.walk(tmp) for f in files] if os.path.isdir(tmp) else []


@pytest.mark.parametrize("buckets", [1, 3, 7])
def test_buckets_of_is_sparks_pmod(spark, buckets) -> None:
    from pyspark.sql import functions as F

    keys = spark.createDataFrame([(int(k), f"t{k % 13}") for k in np.random.default_rng(buckets).integers(
        -2**62, 2**62, 2000)], "k bigint, tag string")
    rows = keys.select(key_hash_expr(["k", "tag"]).alias("h"),
                       F.pmod(key_hash_expr(["k", "tag"]), F.lit(buckets)).alias("b")).collect()
    hashes = np.array([r["h"] for r in rows], dtype=np.int64)
    assert (hashes < 0).any()  # the case a truncating modulo gets wrong
    assert buckets_of(hashes, buckets).tolist() == [r["b"] for r in rows]


def test_first_build_index_matches_the_table(spark, table_name, pipeline_path, monkeypatch) -> None:
    monkeypatch.setattr("partialcow.index.bucket_files._choose_buckets", lambda rows, per_bucket: 5)
    rows = [(i, f"t{i % 3}", i, "D" if i % 10 == 0 else "I") for i in range(4000)]
    metrics = create_table(spark, table_name, spark.createDataFrame(rows, SCHEMA).repartition(3), SPEC)
    assert metrics.rows_inserted == 3600
    index = RowIndex.open(IcebergTable(spark, table_name))
    assert index.state.num_buckets == 5
    assert sum(b is not None for b in index.state.buckets) == 5
    report = index.verify()
    assert report.ok, report.samples
    assert report.rows_in_index == 3600
    assert {r["k"] for r in spark.table(table_name).collect()} == {i for i in range(4000) if i % 10}
    assert _scratch_left(spark, table_name) == []


def test_first_build_refuses_a_repeated_key(spark, table_name, pipeline_path) -> None:
    rows = [(i, "a", i, "I") for i in range(3000)] + [(1234, "a", 0, "I"), (77, "a", 1, "D")]
    with pytest.raises(PartialCowError) as err:
        create_table(spark, table_name, spark.createDataFrame(rows, SCHEMA).repartition(4), SPEC)
    message = str(err.value)
    assert "bulk_index" in message and "1234" in message and "77" in message
    assert not spark.catalog.tableExists(table_name)
    schema, table = table_name.split(".")
    folder = os.path.join(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:"), f"{schema}.db", table)
    left = [os.path.join(d, f) for d, _, files in os.walk(folder) for f in files]
    assert left == []  # no data file, no entry file, no bucket file
