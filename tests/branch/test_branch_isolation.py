"""Branches of the same name in two meta schemas (two dbt targets on one metastore) stay apart: every operation of
one acts only on the overlay schemas its own record covers. Regression of the review finding that ``branch_merge``
wrote the other target's main table, ``branch_diff`` listed its model and ``branch_drop`` dropped its overlay schema
(they scanned every ``*__br_<name>`` schema of the catalog)."""

from __future__ import annotations

import uuid

import pytest

from partialcow.branch import (
    BranchStore,
    build_model,
    create_branch,
    diff_branch,
    drop_branch,
    list_branches,
    materialize_branch,
    merge_branch,
    refresh_branch,
)

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]
COLUMNS = "id bigint, v string"


def _rows(spark, relation: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.table(relation).collect())


def _listed(spark, meta: str) -> list[str]:
    (dev,) = [b for b in list_branches(spark, meta_schema=meta).branches if b.name == "dev"]
    return [m.model for m in dev.models]


def test_regression_branches_of_one_name_in_two_meta_schemas_stay_apart(spark):
    tag = uuid.uuid4().hex[:6]
    alice, bob, extra = f"iso_alice_{tag}", f"iso_bob_{tag}", f"iso_bobx_{tag}"
    for meta in (alice, bob, extra):
        spark.sql(f"CREATE SCHEMA {meta}")
    for meta in (alice, bob):
        spark.createDataFrame([(1, "a")], COLUMNS).writeTo(f"{meta}.items").using("iceberg").create()
        create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
        build_model(spark, spark.createDataFrame([(1, f"{meta} change")], COLUMNS), branch="dev", base_schema=meta,
                    identifier="items", key_columns=["id"], meta_schema=meta)
    # a model Bob builds in a schema his branch was not created with: the build adds it to his record
    build_model(spark, spark.createDataFrame([(7, "x")], COLUMNS), branch="dev", base_schema=extra,
                identifier="t", key_columns=["id"], meta_schema=bob)
    assert _listed(spark, alice) == [f"{alice}.items"]
    assert _listed(spark, bob) == [f"{bob}.items", f"{extra}.t"]
    assert BranchStore(spark, meta_schema=alice).require("dev").schemas == (alice,)
    assert BranchStore(spark, meta_schema=bob).require("dev").schemas == tuple(sorted((bob, extra)))
    assert [m for m, _ in refresh_branch(spark, name="dev", meta_schema=alice).models] == [f"{alice}.items"]
    assert [m for m, _ in materialize_branch(spark, name="dev", meta_schema=alice).models] == [f"{alice}.items"]
    assert not spark.catalog.tableExists(f"{bob}__br_dev.items__pcow_full")

    # a record written before branches recorded their schemas covers the schemas of its merge base
    spark.sql(f"UPDATE {alice}.partialcow_branches SET schemas = NULL")
    assert BranchStore(spark, meta_schema=alice).require("dev").schemas is None
    diff = diff_branch(spark, name="dev", meta_schema=alice)
    assert sorted(diff.counts) == [f"{alice}.items"]
    merged = merge_branch(spark, name="dev", meta_schema=alice)
    assert [m.model for m in merged.models] == [f"{alice}.items"]
    assert _rows(spark, f"{alice}.items") == [(1, f"{alice} change")]
    assert _rows(spark, f"{bob}.items") == [(1, "a")]  # Bob's main table and overlay as Bob left them
    assert _rows(spark, f"{bob}__br_dev.items") == [(1, f"{bob} change")]

    assert drop_branch(spark, name="dev", meta_schema=alice).schemas == (f"{alice}__br_dev",)
    assert spark.catalog.databaseExists(f"{bob}__br_dev")
    assert drop_branch(spark, name="dev", meta_schema=bob).schemas == tuple(
        sorted((f"{bob}__br_dev", f"{extra}__br_dev")))
    for meta in (alice, bob, extra):
        spark.sql(f"DROP SCHEMA {meta} CASCADE")
