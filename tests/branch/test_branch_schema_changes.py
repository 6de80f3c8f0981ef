"""Branch reads after the root table's schema changed on main (a column widened, dropped and added again): the
branch shows what its model built, and a branch whose image cannot be built falls back to the view that joins the
overlay with its live parent; it never loses the model's relation (``ref()`` would then read main's table)."""

from __future__ import annotations

import dataclasses
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


def test_a_column_retyped_on_main_refuses_batches_diff_and_refresh(spark, meta):
    """Regression: main rebuilt the model with ``v`` as int where the branch's model holds strings; the branch's
    next batch set key 2 to ``'8.9'``, which Spark compared with main's 8 by casting it ('equal to the parent'), so
    the change left the overlay and the branch showed 8; ``branch_diff`` reported no difference. A batch, a diff and
    a refresh now refuse, naming the column and both types, with nothing changed."""
    from partialcow.branch import diff_branch, refresh_branch
    from partialcow.branch.incremental import apply_changes_on_branch
    from partialcow.exceptions import BranchError
    from partialcow.spark.changes import ChangeSpec

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, '07'), (2, '08'), (3, '09')")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    spec = ChangeSpec(key_columns=("id",), op_column="_op", model="items")

    def batch(rows):
        return apply_changes_on_branch(spark, spark.createDataFrame(rows, "id bigint, v string, _op string"), spec,
                                       branch="dev", base_schema=meta, identifier="items", meta_schema=meta)

    batch([(1, "7a", "U")])
    spark.sql(f"CREATE OR REPLACE TABLE {root} USING iceberg AS SELECT id, CAST(v AS int) AS v FROM {root}")
    dev, main = _rows(spark, f"{meta}__br_dev.items"), _rows(spark, root)
    assert dev[1] == (1, "7a") and main[2] == (2, 8)
    for run in (lambda: batch([(2, "8.9", "U")]), lambda: diff_branch(spark, name="dev", meta_schema=meta),
                lambda: refresh_branch(spark, name="dev", meta_schema=meta)):
        with pytest.raises(BranchError, match=r"items on branch dev has column\(s\) whose type its parent .* changed "
                                              r".*v \(string on the branch, int there\).*nothing was done"):
            run()
        assert _rows(spark, f"{meta}__br_dev.items") == dev and _rows(spark, root) == main
    drop_branch(spark, name="dev", meta_schema=meta)


@pytest.mark.parametrize("parent_built", [True, False], ids=["parent-built-it", "parent-built-nothing"])
def test_a_child_merged_into_a_parent_branch_keeps_the_columns_the_parent_gained(spark, meta, parent_built):
    """Regression: child ``c`` of branch ``p`` built the model as ``(id, v)``, then main gained ``w``. Merging ``c``
    into ``p`` wrote its changed key into ``p``'s overlay with ``w`` null (``p`` had built the model with ``w``), and
    ``p``'s next merge into main wrote that null over main's value as a clean fast-forward; where ``p`` had built
    nothing, ``p`` lost column ``w`` altogether. ``p`` now shows the parent's ``w`` for the key ``c`` changed, and main
    gets it back unchanged."""
    from partialcow.branch import merge_branch

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    create_branch(spark, name="p", meta_schema=meta, models=[(meta, "items")])
    create_branch(spark, name="c", parent="p", meta_schema=meta, models=[(meta, "items")])

    def build(branch, rows, schema):
        build_model(spark, spark.createDataFrame(rows, schema), branch=branch, base_schema=meta, identifier="items",
                    key_columns=["id"], meta_schema=meta)

    try:
        build("c", [(1, "a"), (2, "X"), (3, "c")], "id bigint, v string")
        spark.sql(f"ALTER TABLE {root} ADD COLUMN w string")
        spark.sql(f"UPDATE {root} SET w = concat('m', id)")
        wide = "id bigint, v string, w string"
        p_first = "a"
        if parent_built:
            build("p", [(1, "p", "m1"), (2, "b", "m2"), (3, "c", "m3")], wide)
            merge_branch(spark, name="p", meta_schema=meta, on_conflict="ours")  # p's merge base is main now
            build("p", [(1, "q", "m1"), (2, "b", "m2"), (3, "c", "m3")], wide)
            p_first = "q"
        merge_branch(spark, name="c", meta_schema=meta)
        expected = [(1, p_first, "m1"), (2, "X", "m2"), (3, "c", "m3")]
        assert spark.table(f"{meta}__br_p.items").columns == ["id", "v", "w"]
        assert sorted(tuple(r) for r in spark.table(f"{meta}__br_p.items").collect()) == expected
        # where p built nothing, its base of key 2 predates w: unknown, so the merge asks (nothing lost)
        merge_branch(spark, name="p", meta_schema=meta, on_conflict="fail" if parent_built else "ours")
        assert sorted(tuple(r) for r in spark.table(root).collect()) == expected
    finally:
        drop_branch(spark, name="c", meta_schema=meta)
        drop_branch(spark, name="p", meta_schema=meta)
        for branch in ("c", "p"):
            spark.sql(f"DROP SCHEMA IF EXISTS {meta}__br_{branch} CASCADE")


def test_after_a_merge_the_branch_shows_the_columns_the_parent_gained(spark, meta):
    """Regression: a model built on the branch as ``(id, v)``, merged after main gained ``w``: the branch's emptied
    overlay kept its columns, so the branch showed main's rows without ``w`` (``ref()`` there lacked a column main
    has), after the merge and after ``branch_refresh``. An empty overlay now takes the parent's new columns, at the
    merge and at a refresh; one holding the branch's changes keeps its own."""
    from partialcow.branch import merge_branch, refresh_branch

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a'), (2, 'b')")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    _build(spark, meta, {1: (1, "a"), 2: (2, "B")}, "id bigint, v string")
    spark.sql(f"ALTER TABLE {root} ADD COLUMN w string")
    spark.sql(f"UPDATE {root} SET w = concat('m', id)")
    merge_branch(spark, name="dev", meta_schema=meta)
    merged = {1: (1, "a", "m1"), 2: (2, "B", "m2")}
    assert _rows(spark, root) == merged == _rows(spark, f"{meta}__br_dev.items")
    spark.sql(f"ALTER TABLE {root} ADD COLUMN x int")
    spark.sql(f"UPDATE {root} SET x = 7")
    refresh_branch(spark, name="dev", meta_schema=meta)
    assert _rows(spark, f"{meta}__br_dev.items") == {k: (*r, 7) for k, r in merged.items()} == _rows(spark, root)
    drop_branch(spark, name="dev", meta_schema=meta)


def test_a_parent_branch_write_its_child_cannot_follow_completes_and_names_the_child(spark, meta):
    """Regression: branch ``p`` dropped column ``b`` from the model (the merge of its child ``c`` that did, then a
    build there) while its child ``d`` still built the model with ``b``. Refreshing ``d``'s view over ``p`` raised
    after ``p``'s commit had landed: the merge or build read as failed though applied, and a merged ``c`` kept its
    overlay and base (merging it again reported its own change as a conflict). Each write now completes and names
    ``d`` in its summary, ``d`` keeps showing what it showed, and ``d``'s own operations are refused by name until
    it is built again."""
    from partialcow.branch import merge_branch
    from partialcow.exceptions import BranchError

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, a string, b string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a1', 'b1'), (2, 'a2', 'b2')")
    create_branch(spark, name="p", meta_schema=meta, models=[(meta, "items")])
    for child in ("c", "d"):
        create_branch(spark, name=child, parent="p", meta_schema=meta, models=[(meta, "items")])

    def build(branch, rows, schema="id bigint, a string"):
        return build_model(spark, spark.createDataFrame(rows, schema), branch=branch, base_schema=meta,
                           identifier="items", key_columns=["id"], meta_schema=meta)

    try:
        d_rows = {1: (1, "d1", "b1"), 2: (2, "a2", "b2")}
        build("d", sorted(d_rows.values()), "id bigint, a string, b string")
        build("c", [(1, "c1"), (2, "a2")])
        merged = merge_branch(spark, name="c", meta_schema=meta)
        assert merged.applied
        again = merge_branch(spark, name="c", meta_schema=meta)  # c continues from the merge result
        assert again.applied and again.conflicts == 0
        built = build("p", [(1, "p1"), (2, "a2")])
        for summary in (merged.describe(), built.describe()):
            assert "items on branch d cannot be read over its parent" in summary, summary
        assert _rows(spark, f"{meta}__br_p.items") == {1: (1, "p1"), 2: (2, "a2")}
        assert _rows(spark, f"{meta}__br_d.items") == d_rows
        with pytest.raises(BranchError, match=r"model .*items on branch d has column\(s\) \['b'\]"):
            merge_branch(spark, name="d", meta_schema=meta)
        build("d", [(1, "d1"), (2, "a2")])  # a rebuild on d mends it
        # key 1 changed on both since d's base (a1 -> p1 on p, a1 -> d1 on d): d's rows win
        merge_branch(spark, name="d", meta_schema=meta, on_conflict="ours")
        assert _rows(spark, f"{meta}__br_p.items") == {1: (1, "d1"), 2: (2, "a2")}
    finally:
        for branch in ("c", "d", "p"):
            drop_branch(spark, name=branch, meta_schema=meta)
            spark.sql(f"DROP SCHEMA IF EXISTS {meta}__br_{branch} CASCADE")


def test_a_merge_replacing_the_parent_does_not_undo_an_alter_table_on_it(spark, meta):
    """Regression: ``ALTER TABLE ... ADD COLUMN`` on main commits no Iceberg snapshot, so a detached model (no
    ``unique_key``) merged afterwards counted as a fast-forward and replaced main's table with the branch's columns:
    main lost ``note``. Main's schema change since the base is now a change of the parent: the merge reports the
    conflict (``ours`` still replaces, by choice), also for a branch recorded before schema ids were. An ALTER made
    before the branch was created is part of its base: that merge stays a fast-forward."""
    from partialcow.branch import BranchStore, merge_branch
    from partialcow.branch.base import SCHEMA_SUFFIX
    from partialcow.exceptions import BranchError

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a'), (2, 'b')")

    def build_detached(rows):
        build_model(spark, spark.createDataFrame(rows, "id bigint, v string"), branch="dev", base_schema=meta,
                    identifier="items", key_columns=[], meta_schema=meta)

    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    build_detached([(1, "a"), (2, "B"), (3, "c")])
    spark.sql(f"ALTER TABLE {root} ADD COLUMN note string")
    store = BranchStore(spark, meta_schema=meta)
    for recorded in ("with schema ids", "without"):
        if recorded == "without":  # as a branch created by an older version recorded it
            record = store.require("dev")
            store.put(dataclasses.replace(record, base_snapshots={
                k: v for k, v in record.base_snapshots.items() if not k.endswith(SCHEMA_SUFFIX)}))
        with pytest.raises(BranchError, match=rf"1 conflicting key(?s:.*)schema changed since the branch's base "
                                              rf"\({meta}\.items\)"):
            merge_branch(spark, name="dev", meta_schema=meta)
        assert spark.table(root).columns == ["id", "v", "note"], recorded
        assert _rows(spark, root) == {1: (1, "a", None), 2: (2, "b", None)}
    drop_branch(spark, name="dev", meta_schema=meta)

    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])  # after the ALTER
    build_detached([(1, "a"), (2, "B")])
    merged = merge_branch(spark, name="dev", meta_schema=meta)
    assert merged.applied and merged.conflicts == 0 and merged.models[0].fast_forward
    assert _rows(spark, root) == {1: (1, "a"), 2: (2, "B")}  # the branch's own code has no note: its change
    drop_branch(spark, name="dev", meta_schema=meta)


def test_a_child_merged_into_a_parent_branch_that_spells_the_key_otherwise(spark, meta):
    """Regression: branch ``p`` built the model with column ``Id``, its child ``c`` with ``id`` (Spark's names are
    case-insensitive); merging ``c`` into ``p`` failed with a raw ``KeyError: 'id'`` while capturing ``p``'s base
    image, which matched the child's key spelling against the parent's columns case-sensitively."""
    from partialcow.branch import merge_branch

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a'), (2, 'b'), (3, 'c')")

    def build(branch, rows, schema):
        build_model(spark, spark.createDataFrame(rows, schema), branch=branch, base_schema=meta, identifier="items",
                    key_columns=["id"], meta_schema=meta)

    create_branch(spark, name="p", meta_schema=meta, models=[(meta, "items")])
    build("p", [(1, "a"), (2, "p2"), (3, "c")], "Id bigint, v string")
    create_branch(spark, name="c", parent="p", meta_schema=meta, models=[(meta, "items")])
    try:
        build("c", [(1, "c1"), (2, "p2"), (3, "c")], "id bigint, v string")
        assert merge_branch(spark, name="c", meta_schema=meta).applied
        assert _rows(spark, f"{meta}__br_p.items") == {1: (1, "c1"), 2: (2, "p2"), 3: (3, "c")}
        assert merge_branch(spark, name="p", meta_schema=meta).applied
        assert _rows(spark, root) == {1: (1, "c1"), 2: (2, "p2"), 3: (3, "c")}
    finally:
        for branch in ("c", "p"):
            drop_branch(spark, name=branch, meta_schema=meta)
            spark.sql(f"DROP SCHEMA IF EXISTS {meta}__br_{branch} CASCADE")


def test_a_merge_through_icebergs_merge_refuses_values_the_narrowed_parent_cannot_hold(spark, meta):
    """Regression: main rebuilt ``q`` as int (a new cast, ``--full-refresh``) after the branch set key 2's ``q`` to
    5000000000, and main holds key 3 twice, so the merge goes through Iceberg's MERGE, not partial copy-on-write.
    Spark failed during the write with an overflow naming neither column nor value, after model ``aa`` had been
    merged. The merge is now refused before anything is written, naming the column, the value and the key."""
    from partialcow.branch import merge_branch
    from partialcow.exceptions import PartialCowError

    spark.sql(f"CREATE TABLE {meta}.aa (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {meta}.aa VALUES (1, 'a')")
    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, q bigint) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 1), (2, 2), (3, 3), (3, 3)")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items"), (meta, "aa")])
    build_model(spark, spark.createDataFrame([(1, "a_dev")], "id bigint, v string"), branch="dev",
                base_schema=meta, identifier="aa", key_columns=["id"], meta_schema=meta)
    _build(spark, meta, {1: (1, 1), 2: (2, 5_000_000_000), 3: (3, 33)}, "id bigint, q bigint")
    spark.sql(f"CREATE OR REPLACE TABLE {root} USING iceberg AS SELECT id, CAST(q AS int) q FROM {root}")
    before = sorted(tuple(r) for r in spark.table(root).collect()), _rows(spark, f"{meta}.aa")
    with pytest.raises(PartialCowError, match=r"(?s)column 'q' has 1 value\(s\) that the table's type int cannot hold "
                                              r"exactly.*5000000000.*id=2"):
        merge_branch(spark, name="dev", meta_schema=meta, on_conflict="ours")
    assert (sorted(tuple(r) for r in spark.table(root).collect()), _rows(spark, f"{meta}.aa")) == before
    # built again with main's type, it merges; main's rows of the branch's keys are its base's values as int,
    # which is no change of main's (conflicts before: the base's bigint rows hashed otherwise)
    _build(spark, meta, {1: (1, 1), 2: (2, 22), 3: (3, 33)}, "id bigint, q int")
    assert merge_branch(spark, name="dev", meta_schema=meta).conflicts == 0
    assert sorted(tuple(r) for r in spark.table(root).collect()) == [(1, 1), (2, 22), (3, 33)]
    assert _rows(spark, f"{meta}.aa") == {1: (1, "a_dev")}
    drop_branch(spark, name="dev", meta_schema=meta)


def test_after_a_detached_model_merged_the_branch_reads_the_parent_as_it_is(spark, meta):
    """Regression: after a model without key was merged, the branch kept the merge result as its overlay: it missed
    main's later rows, its next merge (the branch had changed nothing since) reported main's change as a conflict,
    and ``on_conflict: ours`` then took main's later row away. The merged model now leaves the branch, whose
    ``ref()`` reads main as it is (as for a model the branch never built); a build there makes it the branch's
    again."""
    from partialcow.branch import diff_branch, merge_branch
    from partialcow.branch.levels import resolve_parent

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'x'), (2, 'y')")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])

    def build_detached(rows):
        build_model(spark, spark.createDataFrame(rows, "id bigint, v string"), branch="dev", base_schema=meta,
                    identifier="items", key_columns=[], meta_schema=meta)

    build_detached([(1, "x"), (2, "Y")])
    assert merge_branch(spark, name="dev", meta_schema=meta).applied
    spark.sql(f"INSERT INTO {root} VALUES (3, 'z')")  # main moves on; the branch changes nothing
    main = {1: (1, "x"), 2: (2, "Y"), 3: (3, "z")}
    assert resolve_parent(spark, ["dev", "main"], meta, "items") == (meta, "items")
    assert not spark.catalog.tableExists(f"{meta}__br_dev.items")
    assert diff_branch(spark, name="dev", meta_schema=meta).counts == {}
    merged = merge_branch(spark, name="dev", meta_schema=meta, on_conflict="ours")
    assert merged.applied and merged.conflicts == 0 and _rows(spark, root) == main
    build_detached([(1, "x"), (2, "Y"), (3, "z"), (4, "w")])  # the branch's own again, over main as it is now
    assert merge_branch(spark, name="dev", meta_schema=meta).conflicts == 0
    assert _rows(spark, root) == {**main, 4: (4, "w")}
    drop_branch(spark, name="dev", meta_schema=meta)


@pytest.mark.parametrize("alter", ["ADD COLUMN w string", "RENAME COLUMN v TO v2"], ids=["added", "renamed"])
def test_a_column_altered_on_main_after_the_base_is_no_conflict_for_keys_main_left_alone(spark, meta, alter):
    """Regression: main added (or renamed) a column after the branch's base, then wrote a row; the branch built
    with main's columns, changing key 2 and inserting key 3. The parent's rows at the base (read ``VERSION AS OF``
    the recorded snapshot, with that snapshot's columns) failed to read with today's column names, so every base
    was stored unknown: both keys were reported as conflicts, and ``on_conflict: theirs`` dropped the branch's
    insert. A column the base lacked reads null there (what main's old rows show), a renamed one by its old name."""
    from partialcow.branch import merge_branch

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a'), (2, 'b')")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    spark.sql(f"ALTER TABLE {root} {alter}")
    columns = spark.table(root).columns
    extra = (None,) * (len(columns) - 2)
    spark.sql(f"INSERT INTO {root} VALUES (9, 'z'{', null' * len(extra)})")  # main moves its snapshot on
    dev = {1: (1, "a", *extra), 2: (2, "B", *extra), 3: (3, "c", *extra), 9: (9, "z", *extra)}
    _build(spark, meta, dev, ", ".join(f"{c} {t}" for c, t in zip(columns, ["bigint", "string", "string"])))
    merged = merge_branch(spark, name="dev", meta_schema=meta, on_conflict="theirs")
    assert merged.conflicts == 0
    assert _rows(spark, root) == dev
    drop_branch(spark, name="dev", meta_schema=meta)


def test_a_merged_branch_follows_alter_table_on_main(spark, meta):
    """Regression: after a keyed model merged, the branch changes nothing and shows main through a view listing the
    columns main had then; ``ALTER TABLE`` on main (a column renamed, dropped, widened; no snapshot, nothing of ours
    runs) made reads there fail with Spark's ``UNRESOLVED_COLUMN`` / ``CANNOT_UP_CAST_DATATYPE``, and ``branch_diff``,
    ``branch_merge`` and ``branch_refresh`` refused the model though the branch changed nothing. Its empty overlay
    now takes main's columns, in main's order, at ``ref()`` resolution and at each branch operation."""
    from partialcow.branch import diff_branch, merge_branch, refresh_branch
    from partialcow.branch.overlay import resolve_restoring
    from partialcow.branch.store import BranchStore

    root = f"{meta}.items"
    dev = f"{meta}__br_dev.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string, w string, q int) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a', 'x', 10), (2, 'b', 'y', 20)")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    _build(spark, meta, {1: (1, "a", "x", 10), 2: (2, "B", "y", 20)}, "id bigint, v string, w string, q int")
    assert merge_branch(spark, name="dev", meta_schema=meta).applied

    def by_id(relation):
        return {r["id"]: tuple(r) for r in spark.table(relation).collect()}

    def shown():
        assert spark.table(dev).schema == spark.table(root).schema
        return by_id(dev)

    store = BranchStore(spark, meta_schema=meta)
    spark.sql(f"ALTER TABLE {root} RENAME COLUMN v TO v2")
    assert resolve_restoring(spark, store=store, levels=["dev", "main"], base_schema=meta,
                             identifier="items") == (f"{meta}__br_dev", "items")
    assert shown() == by_id(root)
    spark.sql(f"ALTER TABLE {root} DROP COLUMN w")
    assert diff_branch(spark, name="dev", meta_schema=meta).counts == {}
    assert shown() == by_id(root)
    spark.sql(f"ALTER TABLE {root} ALTER COLUMN q TYPE bigint")  # the same column names: only a type moved
    resolve_restoring(spark, store=BranchStore(spark, meta_schema=meta), levels=["dev", "main"], base_schema=meta,
                      identifier="items")
    assert shown() == by_id(root)
    spark.sql(f"ALTER TABLE {root} ADD COLUMN z string FIRST")
    spark.sql(f"INSERT INTO {root} VALUES ('new', 3, 'c', 5000000000)")
    assert merge_branch(spark, name="dev", meta_schema=meta).conflicts == 0
    assert shown() == by_id(root)
    spark.sql(f"ALTER TABLE {root} RENAME COLUMN z TO z2")
    refresh_branch(spark, name="dev", meta_schema=meta)
    assert shown() == by_id(root)
    drop_branch(spark, name="dev", meta_schema=meta)


def test_a_parent_branch_following_a_widened_column_keeps_its_childs_base(spark, meta):
    """Regression: ``a`` held a change of key 1 when main widened ``r`` (int to bigint); ``b`` branched from ``a``.
    ``a``'s merge emptied its overlay, which then took main's ``r`` by dropping and adding it (a new field id), so
    ``b``'s base read ``a``'s overlay at the recorded snapshot with ``r`` null: ``b``'s merge of its own change to key
    1 reported a conflict ``a`` never made. A widening now keeps the column (its field id)."""
    from pyspark.sql import functions as F

    from partialcow.branch import merge_branch, refresh_branch

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string, r int) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a', 10), (2, 'b', 20)")
    create_branch(spark, name="a", meta_schema=meta, models=[(meta, "items")])

    def build(branch, frame):
        build_model(spark, frame, branch=branch, base_schema=meta, identifier="items", key_columns=["id"],
                    meta_schema=meta)

    try:
        build("a", spark.table(root).withColumn("v", F.when(F.col("id") == 1, "A1").otherwise(F.col("v"))))
        spark.sql(f"ALTER TABLE {root} ALTER COLUMN r TYPE bigint")
        refresh_branch(spark, name="a", meta_schema=meta)
        create_branch(spark, name="b", parent="a", meta_schema=meta, models=[(meta, "items")])
        assert merge_branch(spark, name="a", meta_schema=meta).applied
        shown = spark.table(f"{meta}__br_a.items")
        build("b", shown.withColumn("v", F.when(F.col("id") == 1, "B1").otherwise(F.col("v"))))
        assert merge_branch(spark, name="b", meta_schema=meta).conflicts == 0
        assert _rows(spark, f"{meta}__br_a.items") == {1: (1, "B1", 10), 2: (2, "b", 20)}
    finally:
        for branch in ("b", "a"):
            drop_branch(spark, name=branch, meta_schema=meta)
            spark.sql(f"DROP SCHEMA IF EXISTS {meta}__br_{branch} CASCADE")


def test_a_materialized_unchanged_model_stays_pinned_until_its_refresh(spark, meta):
    """Regression: a model the branch left unchanged was materialized; main gained a column. ``ref()`` there gave
    the empty overlay the new column and re-created the view over the materialized table, which lacks it: the view
    failed, and the branch lost the model's relation. A materialized model is pinned until its next build or
    ``branch_refresh``, which takes the new column."""
    from partialcow.branch import materialize_branch, refresh_branch
    from partialcow.branch.overlay import resolve_restoring
    from partialcow.branch.store import BranchStore

    root = f"{meta}.items"
    dev = f"{meta}__br_dev.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a'), (2, 'b')")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    _build(spark, meta, {1: (1, "a"), 2: (2, "b")}, "id bigint, v string")  # changes nothing
    materialize_branch(spark, name="dev", meta_schema=meta)
    spark.sql(f"ALTER TABLE {root} ADD COLUMN z string")
    spark.sql(f"UPDATE {root} SET z = 'new'")
    resolve_restoring(spark, store=BranchStore(spark, meta_schema=meta), levels=["dev", "main"], base_schema=meta,
                      identifier="items")
    assert _rows(spark, dev) == {1: (1, "a"), 2: (2, "b")}
    refresh_branch(spark, name="dev", meta_schema=meta)
    assert _rows(spark, dev) == {1: (1, "a", "new"), 2: (2, "b", "new")}
    drop_branch(spark, name="dev", meta_schema=meta)


def test_a_child_of_a_parent_branch_that_changes_nothing_keeps_showing_its_rows_after_main_drops_a_column(spark, meta):
    """Regression: branch ``p`` built the model unchanged (an empty overlay, no image: it shows main through a view),
    its child ``c`` changed key 2, then main dropped column ``w``. ``c`` had no image (its parent had none to start
    from) and read ``p`` live: every read on ``c`` failed with ``UNRESOLVED_COLUMN`` until a rebuild. Its image now
    starts from what ``p`` shows (main's rows), so ``c`` keeps showing its rows as a child of main does; its
    operations are refused by name until it is built with the parent's columns again."""
    from partialcow.branch import diff_branch, merge_branch
    from partialcow.branch.overlay import resolve_restoring
    from partialcow.branch.store import BranchStore
    from partialcow.exceptions import BranchError

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string, w string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a', 'x'), (2, 'b', 'y')")

    def build(branch: str, frame) -> object:
        return build_model(spark, frame, branch=branch, base_schema=meta, identifier="items", key_columns=["id"],
                           meta_schema=meta)

    def shown() -> dict:
        found = resolve_restoring(spark, store=BranchStore(spark, meta_schema=meta), levels=["c", "p", "main"],
                                  base_schema=meta, identifier="items")
        assert found == (f"{meta}__br_c", "items")
        return {r["id"]: tuple(r) for r in spark.table(".".join(found)).collect()}

    try:
        create_branch(spark, name="p", meta_schema=meta, models=[(meta, "items")])
        create_branch(spark, name="c", parent="p", meta_schema=meta, models=[(meta, "items")])
        assert build("p", spark.table(root)).upserts == 0
        build("c", spark.table(root).selectExpr("id", "CASE WHEN id = 2 THEN 'B' ELSE v END v", "w"))
        assert shown() == {1: (1, "a", "x"), 2: (2, "B", "y")}
        spark.sql(f"ALTER TABLE {root} DROP COLUMN w")
        assert shown() == {1: (1, "a", "x"), 2: (2, "B", "y")}
        with pytest.raises(BranchError, match=r"model .*items on branch c has column\(s\) \['w'\]"):
            diff_branch(spark, name="c", meta_schema=meta)
        build("c", spark.table(root).selectExpr("id", "CASE WHEN id = 2 THEN 'B' ELSE v END v"))  # mends it
        assert shown() == {1: (1, "a"), 2: (2, "B")}
        merge_branch(spark, name="c", meta_schema=meta)
        assert {r["id"]: tuple(r) for r in spark.table(f"{meta}__br_p.items").collect()} == {1: (1, "a"), 2: (2, "B")}
    finally:
        for branch in ("c", "p"):
            drop_branch(spark, name=branch, meta_schema=meta)
            spark.sql(f"DROP SCHEMA IF EXISTS {meta}__br_{branch} CASCADE")


def test_a_child_of_a_materialized_unchanged_parent_branch_shows_the_parents_pinned_rows(spark, meta):
    """A parent branch whose model changes nothing but is materialized shows main as of its materialization, not
    main as it is: a child's image starts from the parent's table then, never from main's newer rows (key 3)."""
    from partialcow.branch import materialize_branch

    root = f"{meta}.items"
    spark.sql(f"CREATE TABLE {root} (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {root} VALUES (1, 'a'), (2, 'b')")
    try:
        create_branch(spark, name="p", meta_schema=meta, models=[(meta, "items")])
        build_model(spark, spark.table(root), branch="p", base_schema=meta, identifier="items", key_columns=["id"],
                    meta_schema=meta)
        materialize_branch(spark, name="p", meta_schema=meta)
        spark.sql(f"INSERT INTO {root} VALUES (3, 'c')")
        create_branch(spark, name="c", parent="p", meta_schema=meta, models=[(meta, "items")])
        build_model(spark, spark.createDataFrame([(1, "a"), (2, "B")], "id bigint, v string"), branch="c",
                    base_schema=meta, identifier="items", key_columns=["id"], meta_schema=meta)
        assert _rows(spark, f"{meta}__br_p.items") == {1: (1, "a"), 2: (2, "b")}
        assert _rows(spark, f"{meta}__br_c.items") == {1: (1, "a"), 2: (2, "B")}
    finally:
        for branch in ("c", "p"):
            drop_branch(spark, name=branch, meta_schema=meta)
            spark.sql(f"DROP SCHEMA IF EXISTS {meta}__br_{branch} CASCADE")
