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


def _branch_over_columns_a_b(spark, meta: str, dev: dict) -> str:
    """Main's ``items`` (id, a, b) with two rows, and branch ``dev`` built with the rows ``dev``; returns its name."""
    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, a string, b string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a1', 'b1'), (2, 'a2', 'b2')")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    _build(spark, meta, dev, "id bigint, a string, b string")
    return root


def test_a_refresh_after_main_lost_a_column_keeps_the_branch_readable(spark, meta):
    """Regression: main rebuilt the model without column ``b``; ``refresh_branch`` dropped the branch's image and its
    relation, then failed to create the view (``p.b`` unresolved): the model was gone from the branch and ``ref()``
    read main's table. The refresh now refuses with the reason, before anything changes."""
    from partialcow.branch import refresh_branch
    from partialcow.exceptions import BranchError

    dev = {1: (1, "dev", "b1"), 2: (2, "a2", "b2")}
    root = _branch_over_columns_a_b(spark, meta, dev)
    spark.sql(f"CREATE OR REPLACE TABLE {root} USING iceberg AS SELECT id, a FROM {root}")
    with pytest.raises(BranchError, match=r"(?s)items.*dev.*b"):
        refresh_branch(spark, name="dev", meta_schema=meta)
    assert _rows(spark, f"{meta}__br_dev.items") == dev
    _build(spark, meta, {1: (1, "dev2"), 2: (2, "a2")}, "id bigint, a string")  # a rebuild on the branch mends it
    assert _rows(spark, f"{meta}__br_dev.items") == {1: (1, "dev2"), 2: (2, "a2")}
    drop_branch(spark, name="dev", meta_schema=meta)


def test_an_image_that_cannot_be_built_leaves_the_view_over_the_parent(spark, meta, monkeypatch):
    """Whatever makes an image build fail, the build publishes the view that joins the overlay with the live parent
    (the same rows) instead of leaving the model without a relation on the branch."""
    from partialcow.branch import overlay

    def broken(*args, **kwargs):
        raise RuntimeError("image writer broke")

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, name string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a'), (2, 'b')")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    monkeypatch.setattr(overlay, "refresh_image", broken)
    dev = {1: (1, "dev"), 2: (2, "b"), 3: (3, "new")}
    _build(spark, meta, dev, "id bigint, name string")
    assert _rows(spark, f"{meta}__br_dev.items") == dev
    assert "LEFT ANTI JOIN" in spark.sql(f"SHOW CREATE TABLE {meta}__br_dev.items").collect()[0][0]
    assert {r["name"] for r in spark.sql(f"SELECT name FROM {root}.refs").collect()} == {"main"}
    drop_branch(spark, name="dev", meta_schema=meta)


def test_dropping_a_branch_whose_model_lost_its_relation_removes_its_image_ref(spark, meta):
    """Regression: ``drop_branch`` found models by their reader relation, so a model whose relation was gone (dropped
    by hand, or by a failed build before this fix) kept its image ref on the root table for good, which holds old
    snapshots and files past ``expire_snapshots``."""
    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, name string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a'), (2, 'b')")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    _build(spark, meta, {1: (1, "dev"), 2: (2, "b")}, "id bigint, name string")
    refs = lambda: {r["name"] for r in spark.sql(f"SELECT name FROM {root}.refs").collect()}  # noqa: E731
    assert refs() == {"main", "partialcow_dev"}
    spark.sql(f"DROP TABLE {meta}__br_dev.items")  # the image table: unregistered, its files are the root's
    drop_branch(spark, name="dev", meta_schema=meta)
    assert refs() == {"main"}
    assert not spark.catalog.databaseExists(f"{meta}__br_dev")


def test_a_column_name_with_a_dot_gets_an_image(spark, meta):
    """Regression: the image's appended rows were selected by bare column names, so a column named ``a.b`` was read
    as field ``b`` of a struct ``a`` and the image build failed."""
    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, `a.b` string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'x'), (2, 'y')")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    frame = spark.createDataFrame([(1, "dev"), (2, "y"), (3, "new")], "id bigint, `a.b` string")
    summary = build_model(spark, frame, branch="dev", base_schema=meta, identifier="items", key_columns=["id"],
                          meta_schema=meta)
    assert summary.image is not None
    assert _rows(spark, f"{meta}__br_dev.items") == {1: (1, "dev"), 2: (2, "y"), 3: (3, "new")}
    drop_branch(spark, name="dev", meta_schema=meta)


def test_diff_and_merge_after_main_lost_a_column_refuse_by_name(spark, meta):
    """Regression: main dropped column ``b`` that the branch's model still has; ``branch_diff`` and ``branch_merge``
    (any policy) failed with Spark's raw UNRESOLVED_COLUMN. Both now refuse, naming the column, with nothing
    changed; a rebuild on the branch with main's columns mends it."""
    from partialcow.branch import diff_branch, merge_branch
    from partialcow.exceptions import BranchError

    dev = {1: (1, "a1", "dev"), 2: (2, "a2", "b2")}
    root = _branch_over_columns_a_b(spark, meta, dev)
    spark.sql(f"ALTER TABLE {root} DROP COLUMN b")
    main = _rows(spark, root)
    for run in (lambda: diff_branch(spark, name="dev", meta_schema=meta),
                lambda: merge_branch(spark, name="dev", meta_schema=meta),
                lambda: merge_branch(spark, name="dev", meta_schema=meta, on_conflict="ours")):
        with pytest.raises(BranchError, match=r"model .*items on branch dev has column\(s\) \['b'\] that its parent "
                                              r".*no longer has .*nothing was done"):
            run()
        assert _rows(spark, root) == main and _rows(spark, f"{meta}__br_dev.items") == dev
    _build(spark, meta, {1: (1, "dev2"), 2: (2, "a2")}, "id bigint, a string")
    assert diff_branch(spark, name="dev", meta_schema=meta).counts == {f"{meta}.items": {"updated": 1}}
    drop_branch(spark, name="dev", meta_schema=meta)
