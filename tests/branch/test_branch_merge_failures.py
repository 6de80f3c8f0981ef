"""A merge of several models that is refused, fails part way, or meets a parent table dropped since the branch built a
model: what the parent and the branch are left with, and that the next merge is right.

Regression cases:

- a merge applied model ``aaa``, then failed on model ``bbb`` (a key its overlay held twice): ``aaa`` was merged and
  its overlay emptied, but the branch kept its old merge base; when the branch then changed ``aaa``'s key 1 back to
  its value before the merge, the next merge compared against the stale base and silently kept main's value;
- the branch changed key 2 of a 3-row model (an overlay of changed rows over main's table); main's table was then
  dropped; a merge with ``on_conflict: ours`` recreated main's table from the overlay alone, losing keys 1 and 3,
  which the branch showed.

Killed merges (``PARTIALCOW_CRASH_AT``) are in ``test_branch_merge_crashes.py``.
"""

from __future__ import annotations

import datetime as _dt
import uuid

import pytest
from budget import in_turn
from partialcow.branch import build_model, create_branch, merge_branch
from partialcow.branch import merge as merge_module
from partialcow.branch.store import BranchStore
from partialcow.exceptions import BranchError, ParentTableDroppedError, RepeatedKeysError

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

COLS = "id bigint, v string"


def _rows(spark, relation: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.table(relation).collect())


def _two_models(spark, prefix: str, branch: str) -> tuple[str, dict]:
    """Main's ``aaa`` (1 a, 2 b) and ``bbb`` (1 p); the branch changes aaa's key 1 to x and bbb's key 1 to q."""
    meta = f"{prefix}_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.createDataFrame([(1, "a"), (2, "b")], COLS).writeTo(f"{meta}.aaa").using("iceberg").create()
    spark.createDataFrame([(1, "p")], COLS).writeTo(f"{meta}.bbb").using("iceberg").create()
    create_branch(spark, name=branch, meta_schema=meta, models=[(meta, "aaa"), (meta, "bbb")])
    kw = dict(branch=branch, base_schema=meta, key_columns=["id"], meta_schema=meta)
    build_model(spark, spark.createDataFrame([(1, "x"), (2, "b")], COLS), identifier="aaa", **kw)
    build_model(spark, spark.createDataFrame([(1, "q")], COLS), identifier="bbb", **kw)
    return meta, kw


def _state(spark, meta: str, branch: str) -> tuple:
    """Main's rows, the branch's rows and overlays, and the branch's record."""
    schema = f"{meta}__br_{branch}"
    record = BranchStore(spark, meta_schema=meta).require(branch)
    return (
        {t: _rows(spark, f"{meta}.{t}") for t in ("aaa", "bbb")},
        {t: _rows(spark, f"{schema}.{t}") for t in ("aaa", "bbb")},
        {t: _rows(spark, f"{schema}.{t}__pcow_overlay") for t in ("aaa", "bbb")},
        (record.base_snapshots, record.merged_at),
    )


def test_a_key_repeated_on_the_branch_refuses_the_merge_before_any_model_is_written(spark):
    meta, kw = _two_models(spark, "mrep", "rep")
    # a second row for bbb's key 1 in its overlay (build_model refuses a result that repeats a key; an overlay can
    # still get one from elsewhere: a hand-made insert, a build by an older version)
    spark.sql(f"INSERT INTO {meta}__br_rep.bbb__pcow_overlay VALUES (1, 'r', 'U', 1)")
    before = _state(spark, meta, "rep")
    with pytest.raises(RepeatedKeysError) as info:
        merge_branch(spark, name="rep", meta_schema=meta)
    message = str(info.value)
    assert f"{meta}.bbb" in message and "id=1" in message and "nothing was merged" in message, message
    assert info.value.keys == "(id=1)"
    assert _state(spark, meta, "rep") == before  # aaa was not merged either

    build_model(spark, spark.createDataFrame([(1, "q")], COLS), identifier="bbb", **kw)
    result = merge_branch(spark, name="rep", meta_schema=meta)
    assert result.applied, result.describe()
    assert _rows(spark, f"{meta}.aaa") == [(1, "x"), (2, "b")]
    assert _rows(spark, f"{meta}.bbb") == [(1, "q")]


def test_a_merge_failing_part_way_moves_the_base_of_the_models_it_merged(spark, monkeypatch):
    """aaa is merged, bbb fails (a Spark job fails, here provoked): the branch continues from aaa's merge
    result, so reverting aaa's key 1 on the branch afterwards is a change the next merge applies. The error names
    Spark's reason (py4j's first line, "An error occurred while calling o73.sql.", named none)."""
    meta, kw = _two_models(spark, "mmid", "mid")
    real = merge_module._apply_with_partial_cow

    def failing(spark_, table, *args, **kwargs):
        if table.endswith(".bbb"):
            spark_.range(1).selectExpr("raise_error(concat('boom', id))").collect()  # a failing job: Py4JJavaError
        return real(spark_, table, *args, **kwargs)

    monkeypatch.setattr(merge_module, "_apply_with_partial_cow", failing)
    with pytest.raises(BranchError) as info:
        merge_branch(spark, name="mid", meta_schema=meta)
    message = str(info.value)
    assert f"merged before it: {meta}.aaa" in message and f"not merged: {meta}.bbb" in message, message
    assert "boom0" in message, message  # the cause, not only that it failed
    monkeypatch.setattr(merge_module, "_apply_with_partial_cow", real)

    assert _rows(spark, f"{meta}.aaa") == [(1, "x"), (2, "b")]  # aaa merged
    assert _rows(spark, f"{meta}.bbb") == [(1, "p")]  # bbb not
    assert _rows(spark, f"{meta}__br_mid.aaa__pcow_overlay") == []  # the branch continues from aaa's merge result
    assert _rows(spark, f"{meta}__br_mid.aaa") == [(1, "x"), (2, "b")]
    assert _rows(spark, f"{meta}__br_mid.bbb") == [(1, "q")]

    # the branch reverts aaa's key 1: a change against the merge result, which the next merge applies
    build_model(spark, spark.createDataFrame([(1, "a"), (2, "b")], COLS), identifier="aaa", **kw)
    result = merge_branch(spark, name="mid", meta_schema=meta)
    assert _rows(spark, f"{meta}.aaa") == [(1, "a"), (2, "b")], result.describe()
    assert _rows(spark, f"{meta}.bbb") == [(1, "q")], result.describe()
    models = {m.model: m for m in result.models}
    assert models[f"{meta}.aaa"].updated == 1 and not models[f"{meta}.aaa"].conflicts


def _dropped_parent(spark, prefix: str, branch: str, *, image_mode: str = "copy-on-write") -> str:
    """Main's items (1 a, 2 b, 3 c); the branch changes key 2 to B; then main's table is dropped."""
    meta = f"{prefix}_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], COLS).writeTo(f"{meta}.items").using("iceberg").create()
    create_branch(spark, name=branch, meta_schema=meta, models=[(meta, "items")], image_mode=image_mode)
    build_model(spark, spark.createDataFrame([(1, "a"), (2, "B"), (3, "c")], COLS), branch=branch, base_schema=meta,
                identifier="items", key_columns=["id"], meta_schema=meta)
    assert _rows(spark, f"{meta}__br_{branch}.items") == [(1, "a"), (2, "B"), (3, "c")]
    return meta


# CI runs one image mode, PARTIALCOW_TESTS_LONG=1 both
@pytest.mark.parametrize("image_mode", in_turn(["copy-on-write", "merge-on-read"], 1))
def test_a_dropped_parent_table_is_recreated_from_the_rows_the_branch_shows(spark, image_mode):
    """The branch's image still holds every row it shows (a DROP TABLE keeps the files): ours recreates them all."""
    branch = "dropi" + image_mode[0]
    meta = _dropped_parent(spark, "mdrop", branch, image_mode=image_mode)
    spark.sql(f"DROP TABLE {meta}.items")
    with pytest.raises(BranchError, match="conflicting") as info:
        merge_branch(spark, name=branch, meta_schema=meta)
    assert "parent's table dropped" in str(info.value)
    assert not spark.catalog.tableExists(f"{meta}.items")

    result = merge_branch(spark, name=branch, meta_schema=meta, on_conflict="ours")
    (model,) = result.models
    assert model.parent_dropped and model.replaced, result.describe()
    assert "recreated the parent's table" in result.describe()
    assert _rows(spark, f"{meta}.items") == [(1, "a"), (2, "B"), (3, "c")]
    assert _rows(spark, f"{meta}__br_{branch}.items") == [(1, "a"), (2, "B"), (3, "c")]
    again = merge_branch(spark, name=branch, meta_schema=meta)
    assert _rows(spark, f"{meta}.items") == [(1, "a"), (2, "B"), (3, "c")], again.describe()


def test_a_purged_parent_table_refuses_ours_and_theirs_removes_the_model(spark):
    """DROP TABLE ... PURGE deleted the rows the branch did not change: ours cannot recreate what the branch showed,
    and is refused with nothing changed; theirs keeps the drop and the model leaves the branch."""
    meta = _dropped_parent(spark, "mpurge", "purged")
    spark.sql(f"DROP TABLE {meta}.items PURGE")
    overlay = f"{meta}__br_purged.items__pcow_overlay"
    before = (_rows(spark, overlay), BranchStore(spark, meta_schema=meta).require("purged"))
    with pytest.raises(ParentTableDroppedError) as info:
        merge_branch(spark, name="purged", meta_schema=meta, on_conflict="ours")
    message = str(info.value)
    assert info.value.model == f"{meta}.items"
    assert f"{meta}.items" in message and "dropped" in message and "Nothing was merged" in message, message
    assert not spark.catalog.tableExists(f"{meta}.items")
    assert (_rows(spark, overlay), BranchStore(spark, meta_schema=meta).require("purged")) == before

    result = merge_branch(spark, name="purged", meta_schema=meta, on_conflict="theirs")
    (model,) = result.models
    assert model.parent_dropped and model.removed and not model.replaced, result.describe()
    assert not spark.catalog.tableExists(f"{meta}.items")
    assert not spark.catalog.tableExists(overlay)
    assert not spark.catalog.tableExists(f"{meta}__br_purged.items")
    # nothing left to merge: the next merge does not bring the model back (as an empty table)
    again = merge_branch(spark, name="purged", meta_schema=meta)
    assert again.models == [] and not spark.catalog.tableExists(f"{meta}.items"), again.describe()


def test_a_child_keyed_otherwise_than_its_parent_branch_is_refused_before_anything_is_merged(spark):
    """Regression: a nested branch that changed the model's ``unique_key`` merged into its parent's overlay matching
    on its own key while the parent's overlay is keyed on another, so the parent showed the child's row and a row
    the child had removed (main holds (1, eu) and (1, us); the parent keys by (id, region), the child by id)."""
    meta = f"keys_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    cols = "id bigint, region string, v string"
    spark.createDataFrame([(1, "eu", "a"), (1, "us", "b")], cols).writeTo(f"{meta}.items").using("iceberg").create()
    create_branch(spark, name="p", meta_schema=meta, models=[(meta, "items")])
    build_model(spark, spark.createDataFrame([(1, "eu", "A"), (1, "us", "b")], cols), branch="p", base_schema=meta,
                identifier="items", key_columns=["id", "region"], meta_schema=meta)
    create_branch(spark, name="c", parent="p", meta_schema=meta, models=[(meta, "items")])
    build_model(spark, spark.createDataFrame([(1, "eu", "Z")], cols), branch="c", base_schema=meta,
                identifier="items", key_columns=["id"], meta_schema=meta)
    parent_before = _rows(spark, f"{meta}__br_p.items")
    with pytest.raises(BranchError, match="key"):
        merge_branch(spark, name="c", meta_schema=meta)
    assert _rows(spark, f"{meta}__br_p.items") == parent_before == [(1, "eu", "A"), (1, "us", "b")]
    assert _rows(spark, f"{meta}__br_c.items") == [(1, "eu", "Z")]


def test_a_build_that_died_before_its_merge_base_was_captured_merges_nothing_unseen(spark, monkeypatch):
    """Regression: a build on the branch that died after writing its overlay and before capturing the merge base of
    its keys (a kill, a failure) left no base image, and the next merge (main having moved) read the base as empty:
    the branch's delete of key 2 then looked like "both sides agree the key is absent at the base", and the merge
    reported success, applied nothing and emptied the overlay, so key 2 came back on main and on the branch. Without
    the base, every changed key is a conflict unless both sides agree."""
    from partialcow.branch import overlay as overlay_module

    meta = f"nobase_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], COLS).writeTo(f"{meta}.items").using("iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])

    def dies(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("killed before the merge base was captured")

    monkeypatch.setattr(overlay_module, "capture_base", dies)
    with pytest.raises(RuntimeError, match="killed"):
        build_model(spark, spark.createDataFrame([(1, "a"), (3, "c")], COLS), branch="dev", base_schema=meta,
                    identifier="items", key_columns=["id"], meta_schema=meta)
    monkeypatch.undo()
    spark.sql(f"UPDATE {meta}.items SET v = 'm' WHERE id = 1")
    with pytest.raises(BranchError):
        merge_branch(spark, name="dev", meta_schema=meta)
    conflicts = spark.table(f"{meta}__br_dev.partialcow_merge_conflicts").collect()
    assert {r["key"] for r in conflicts} == {"2"}, conflicts
    assert _rows(spark, f"{meta}.items") == [(1, "m"), (2, "b"), (3, "c")]
    merge_branch(spark, name="dev", meta_schema=meta, on_conflict="ours")
    assert _rows(spark, f"{meta}.items") == [(1, "m"), (3, "c")]


def test_a_column_added_on_both_sides_keeps_the_model_buildable_and_mergeable(spark):
    """Regression: main rebuilt with a new column ``w``, and the branch's model given the same column, made every
    later build of the model on the branch fail: the base image captured before had no ``w``, and the keys entering
    the overlay were appended to it with one. The image is captured again with the new columns (keys whose base
    cannot be read with them are of unknown base, so only agreement merges them silently)."""
    meta = f"widened_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], COLS).writeTo(f"{meta}.items").using("iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    build_model(spark, spark.createDataFrame([(1, "x"), (2, "b"), (3, "c")], COLS), branch="dev", base_schema=meta,
                identifier="items", key_columns=["id"], meta_schema=meta)
    spark.sql(f"CREATE OR REPLACE TABLE {meta}.items USING iceberg AS SELECT id, v, 'm' AS w FROM {meta}.items")
    wide = "id bigint, v string, w string"
    ours = [(1, "x", "m"), (2, "y", "m"), (3, "c", "m")]
    build_model(spark, spark.createDataFrame(ours, wide), branch="dev", base_schema=meta, identifier="items",
                key_columns=["id"], meta_schema=meta)
    assert _rows(spark, f"{meta}__br_dev.items") == ours
    merge_branch(spark, name="dev", meta_schema=meta, on_conflict="ours")
    assert _rows(spark, f"{meta}.items") == ours


@pytest.mark.parametrize("odd", ["null key deleted", "key held twice"])
def test_a_column_added_on_main_keeps_its_values_when_the_merge_goes_through_icebergs_merge(spark, odd):
    """Regression: a merge into main whose staged keys the row index cannot address (the branch deleted main's row of
    a null key, or changed a key main holds twice) goes through Iceberg's MERGE, which deletes a key's rows and
    inserts the branch's row with the overlay's columns only: a column main gained after the branch's build (``w``)
    became null for every merged key, where the partial copy-on-write path keeps it. The inserted row now carries
    main's values of such columns."""
    meta = f"mainwide_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    start = [(1, "a"), (2, "b"), (3, "c")] + ([(3, "c")] if odd == "key held twice" else [(None, "n")])
    spark.createDataFrame(start, COLS).writeTo(f"{meta}.items").using("iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    ours = [(1, "x"), (2, "b"), (3, "z")]
    build_model(spark, spark.createDataFrame(ours, COLS), branch="dev", base_schema=meta, identifier="items",
                key_columns=["id"], meta_schema=meta)
    spark.sql(f"ALTER TABLE {meta}.items ADD COLUMN w string")
    spark.sql(f"UPDATE {meta}.items SET w = concat('m', id)")
    merge_branch(spark, name="dev", meta_schema=meta)
    assert _rows(spark, f"{meta}.items") == [(1, "x", "m1"), (2, "b", "m2"), (3, "z", "m3")]


def test_main_changing_one_copy_of_a_key_it_holds_twice_is_a_conflict(spark):
    """Regression: a key main holds twice was compared column by column through ``first()`` of its copies, so when
    main changed its second copy after the branch's build and the branch changed the key too, the first copies of
    base and main were equal, the merge read main as unchanged and replaced both copies with the branch's row,
    silently dropping main's change. The copies are compared as a whole now: the key is a conflict."""
    meta = f"twice_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    cols = "id bigint, v string, w string"
    spark.createDataFrame([(1, "a", "p"), (3, "c", "p"), (3, "c", "p")], cols).writeTo(f"{meta}.items").using(
        "iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    build_model(spark, spark.createDataFrame([(1, "a", "p"), (3, "z", "p")], cols), branch="dev", base_schema=meta,
                identifier="items", key_columns=["id"], meta_schema=meta)
    # main's second copy changed; one file in this row order, so first() meets the unchanged copy
    changed = [(1, "a", "p"), (3, "c", "p"), (3, "d", "p")]
    spark.createDataFrame(changed, cols).coalesce(1).writeTo(f"{meta}.items").overwritePartitions()
    with pytest.raises(BranchError):
        merge_branch(spark, name="dev", meta_schema=meta)
    conflicts = spark.table(f"{meta}__br_dev.partialcow_merge_conflicts").collect()
    assert {r["key"] for r in conflicts} == {"3"}, conflicts
    assert _rows(spark, f"{meta}.items") == sorted(changed)


@pytest.mark.parametrize(("ddl", "one", "other"), [
    ("a string, b string", (None, "x"), ("x", None)),
    ("a array<int>", ([1, None],), ([None, 1],)),
    ("a array<int>", ([1],), ([1, None],)),
    ("a struct<p: int, q: int>", ((1, None),), ((None, 1),)),
    ("a map<string, int>", ({"k": 1},), ({"k": None},)),
    ("a array<timestamp>", ([_dt.datetime(2024, 1, 1, 0, 0, 0, 1)],), ([_dt.datetime(2024, 1, 1, 0, 0, 0, 2)],)),
])
def test_the_copies_hash_tells_apart_what_xxhash64_alone_does_not(spark, ddl, one, other):
    """The hash that compares a key's copies (``row_hash``) must differ where Spark's ``xxhash64`` skips nulls, and
    work on maps, which ``xxhash64`` refuses."""
    from partialcow.branch.frames import row_hash

    frame = spark.createDataFrame([one, other], ddl)
    types = {f.name: f.dataType for f in frame.schema.fields}
    hashes = [r[0] for r in frame.select(row_hash(frame.columns, types)).collect()]
    assert hashes[0] != hashes[1]


def test_a_parent_commit_between_staging_and_applying_is_not_overwritten(spark, monkeypatch):
    """Regression: a merge classified each key against the parent when it staged the model; another writer's commit
    to the parent after that (here while the merge checked its plans) was overwritten by the branch's row, and no
    conflict was reported. The merge now refuses the model, and the next merge sees the conflict."""
    meta = f"lostupd_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.createDataFrame([(1, "a"), (2, "b")], COLS).writeTo(f"{meta}.t").using("iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "t")])
    build_model(spark, spark.createDataFrame([(1, "branch"), (2, "b")], COLS), branch="dev", base_schema=meta,
                identifier="t", key_columns=["id"], meta_schema=meta)
    check = merge_module._check_plan

    def another_writer_commits(spark_, plan, **kwargs):
        spark.sql(f"UPDATE {meta}.t SET v = 'other writer' WHERE id = 1")
        monkeypatch.setattr(merge_module, "_check_plan", check)
        return check(spark_, plan, **kwargs)

    monkeypatch.setattr(merge_module, "_check_plan", another_writer_commits)
    with pytest.raises(BranchError, match="changed while the merge ran"):
        merge_branch(spark, name="dev", meta_schema=meta)
    assert _rows(spark, f"{meta}.t") == [(1, "other writer"), (2, "b")]
    with pytest.raises(BranchError, match="1 conflicting key"):
        merge_branch(spark, name="dev", meta_schema=meta)
    assert _rows(spark, f"{meta}__br_dev.t") == [(1, "branch"), (2, "b")]
