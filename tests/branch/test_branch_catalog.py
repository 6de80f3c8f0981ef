"""Catalog look-ups of the branch operations: whether a table holds rows, answered from Iceberg's metadata where the
metadata can answer (no Spark job), by a scan where deletes make its record count an upper bound."""

from __future__ import annotations

import uuid

import pytest

from partialcow.branch.catalog import holds_no_rows

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]


def _jobs(spark) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup("holds_no_rows"))


def test_holds_no_rows_from_metadata_and_through_deletes(spark):
    schema = f"cat_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {schema}")
    spark.sql(f"CREATE TABLE {schema}.t (id bigint) USING iceberg TBLPROPERTIES ('format-version' = '2', "
              "'write.delete.mode' = 'merge-on-read')")
    spark.sparkContext.setJobGroup("holds_no_rows", "holds_no_rows")
    try:
        before = _jobs(spark)
        assert holds_no_rows(spark, schema, "t")  # no snapshot yet
        spark.sql(f"INSERT INTO {schema}.t SELECT /*+ REPARTITION(1) */ * FROM VALUES (1), (2), (3) AS v(id)")
        before = _jobs(spark)
        assert not holds_no_rows(spark, schema, "t")
        assert _jobs(spark) == before  # the summary answered: no job
        # position deletes (the one data file spans ids 1-3, so no delete drops it whole): the summary still counts
        # three records, so the rows are looked at
        spark.sql(f"DELETE FROM {schema}.t WHERE id = 2")
        assert not holds_no_rows(spark, schema, "t")
        spark.sql(f"DELETE FROM {schema}.t WHERE id IN (1, 3)")
        summary = spark.sql(f"SELECT summary FROM {schema}.t.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
        assert summary["total-records"] == "3" and summary["total-position-deletes"] == "3"
        assert holds_no_rows(spark, schema, "t")
        spark.sql(f"INSERT INTO {schema}.t VALUES (4)")
        assert not holds_no_rows(spark, schema, "t")
        spark.sql(f"DELETE FROM {schema}.t")  # a table that was emptied by rewriting its files
        assert holds_no_rows(spark, schema, "t")
    finally:
        spark.sparkContext.setJobGroup("", "")
        spark.sql(f"DROP SCHEMA {schema} CASCADE")
