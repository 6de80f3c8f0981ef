"""Exact placement of rewrite tasks: our port of Spark's hash against Spark itself."""

from __future__ import annotations

import random

import pytest

from partialcow.spark.partitioning import routes, spark_hash_int

pytestmark = [pytest.mark.spark]


def test_hash_matches_spark(spark) -> None:
    values = [0, 1, -1, 7, -7, 42, 2**31 - 1, -(2**31), *random.Random(3).sample(range(-(2**31), 2**31), 40)]
    row = spark.sql("SELECT " + ", ".join(f"hash(CAST({v} AS INT)) AS h{i}" for i, v in enumerate(values))).first()
    assert list(row) == [spark_hash_int(v) for v in values]


@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 9, 64])
def test_each_route_lands_in_its_own_partition(spark, partitions: int) -> None:
    values = routes(partitions)
    frame = spark.createDataFrame([(v, i) for i, v in enumerate(values)], "route int, wanted int")
    placed = frame.repartition(partitions, "route").rdd.glom().collect()
    assert [[row.wanted for row in rows] for rows in placed] == [[i] for i in range(partitions)]
