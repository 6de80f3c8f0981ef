"""Branch reads after the root table's schema changed on main (a column widened, dropped and added again): the
branch shows what its model built, and a branch whose image cannot be built falls back to the view that joins the
overlay with its live parent; it never loses the model's relation (``ref()`` would then read main's table)."""

from __future__ import annotations

import uuid

import pytest

from partialcow.branch import build_model, create_branch, drop_branch

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]


@pytest.fixture
def meta(spark):
    name = f"bsc_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {name}")
    yield name
    spark.sql(f"DROP SCHEMA IF EXISTS {name}__br_dev CASCADE")
    spark.sql(f"DROP SCHEMA {name} CASCADE")


def _rows(spark, relation: str) -> dict:
    return {r[0]: tuple(r) for r in spark.table(relation).collect()}


def _build(spark, meta: str, rows: dict, schema: str) -> None:
    frame = spark.createDataFrame(sorted(rows.values()), schema)
    build_model(spark, frame, branch="dev", base_schema=meta, identifier="items", key_columns=["id"],
                meta_schema=meta)


def test_a_value_only_the_widened_column_holds(spark, meta):
    """Regression: main widened ``qty`` from int to bigint (old files keep int32); a branch build giving a key of an
    old file a value only bigint holds failed the image's rewrite, and the model's branch relation was gone."""
    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, name string, qty int) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30)")
    spark.sql(f"ALTER TABLE {root} ALTER COLUMN qty TYPE bigint")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    dev = {1: (1, "a", 10), 2: (2, "b", 5_000_000_000), 3: (3, "c", 30)}
    _build(spark, meta, dev, "id bigint, name string, qty bigint")
    assert _rows(spark, f"{meta}__br_dev.items") == dev
    assert _rows(spark, root) == {1: (1, "a", 10), 2: (2, "b", 20), 3: (3, "c", 30)}
    drop_branch(spark, name="dev", meta_schema=meta)


def test_a_column_dropped_and_added_again_on_main(spark, meta):
    """Regression: main dropped ``status`` and added it again (old files hold the dropped column under its old
    field id); a branch update of ``status`` for a key of an old file patched the dropped column, and the branch
    read null."""
    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, status string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'old1'), (2, 'old2')")
    spark.sql(f"ALTER TABLE {root} DROP COLUMN status")
    spark.sql(f"ALTER TABLE {root} ADD COLUMN status string")
    assert _rows(spark, root) == {1: (1, None), 2: (2, None)}
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    dev = {1: (1, "new1"), 2: (2, None)}
    _build(spark, meta, dev, "id bigint, status string")
    assert _rows(spark, f"{meta}__br_dev.items") == dev
    drop_branch(spark, name="dev", meta_schema=meta)
