"""The merge base of a nested branch (feat, created from branch dev) is what dev showed when feat was created or
last merged. dev's model reads its image, which pins main as of dev's last build or refresh: neither main's
snapshot at feat's creation nor main's moves since are what feat saw, and a refresh of dev changes what dev shows
without committing to any table of the chain. Expected rows are plain Python dicts; each case runs in both image
modes (the image ref is what the base records, whatever the image holds)."""

from __future__ import annotations

import uuid

import pytest
from budget import LONG, in_turn
from partialcow.branch import build_model, create_branch, merge_branch, refresh_branch
from partialcow.branch.types import IMAGE_MODES
from partialcow.exceptions import BranchError

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

COLUMNS = "id bigint, v string"
ROOT = {1: "a", 2: "a", 3: "a"}


def _rows(spark, relation: str) -> dict:
    return {r[0]: r[1] for r in spark.table(relation).collect()}


def _build(spark, meta: str, branch: str, rows: dict) -> None:
    build_model(spark, spark.createDataFrame(sorted(rows.items()), COLUMNS), branch=branch, base_schema=meta,
                identifier="items", key_columns=["id"], meta_schema=meta)


def _setup(spark, prefix: str, mode: str, *, main_before_feat: dict) -> tuple[str, dict]:
    """main ROOT; dev (``mode`` images) inserts key 4; main then changes ``main_before_feat`` (dev stays pinned);
    feat is created from dev. Returns the meta schema and what dev showed at feat's creation."""
    meta = f"{prefix}_{uuid.uuid4().hex[:8]}"
    root = f"{meta}.items"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.createDataFrame(sorted(ROOT.items()), COLUMNS).writeTo(root).using("iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")], image_mode=mode)
    _build(spark, meta, "dev", {**ROOT, 4: "dev"})
    for key, value in main_before_feat.items():
        spark.sql(f"UPDATE {root} SET v = '{value}' WHERE id = {key}")
    dev_shown = {**ROOT, 4: "dev"}
    assert _rows(spark, f"{meta}__br_dev.items") == dev_shown  # the image pins main as of dev's build
    create_branch(spark, name="feat", parent="dev", meta_schema=meta, models=[(meta, "items")], image_mode=mode)
    return meta, dev_shown


@pytest.mark.parametrize("mode", in_turn(IMAGE_MODES, 0))
def test_nested_base_is_what_the_parent_branch_showed(spark, mode):
    """Regression case: feat's merge base was rebuilt from main's snapshot at feat's creation with dev's overlay on
    top, not from dev's image. Key 1: main had b then, dev showed a, feat sets b: with base b the merge took feat's
    b for "unchanged" and silently kept dev's a. Key 3: main had c then, feat sets f: a false conflict. main moves
    again after feat's creation (keys 1 and 2), which dev does not show until it is rebuilt."""
    meta, dev_shown = _setup(spark, "nbase", mode, main_before_feat={1: "b", 3: "c"})
    root = f"{meta}.items"
    spark.sql(f"UPDATE {root} SET v = 'd' WHERE id = 1")
    spark.sql(f"UPDATE {root} SET v = 'm' WHERE id = 2")
    ours = {**dev_shown, 1: "b", 3: "f"}
    _build(spark, meta, "feat", ours)
    assert _rows(spark, f"{meta}__br_feat.items") == ours
    # the base captured for feat's changed keys is what dev showed at feat's creation
    assert _rows(spark, f"{meta}__br_feat.items__pcow_base") == {1: "a", 3: "a"}

    result = merge_branch(spark, name="feat", meta_schema=meta)
    (merged,) = result.models
    assert (merged.updated, merged.inserted, merged.deleted, merged.conflicts) == (2, 0, 0, 0), result.describe()
    # dev takes feat's keys; its image is rebuilt from main as it is now (keys 1 and 2 moved), key 4 is dev's own
    assert _rows(spark, f"{meta}__br_dev.items") == {1: "b", 2: "m", 3: "f", 4: "dev"}
    assert _rows(spark, f"{meta}__br_feat.items") == _rows(spark, f"{meta}__br_dev.items")
    assert _rows(spark, root) == {1: "d", 2: "m", 3: "c"}  # main is never written by a merge into dev


@pytest.mark.parametrize("mode", in_turn(IMAGE_MODES, 1))
def test_nested_merge_after_parent_refresh_is_not_a_fast_forward(spark, mode):
    """Regression case: refreshing dev changes what dev shows (key 1: a -> main's b) without a table snapshot of
    the chain changing; feat's merge was taken as a fast-forward and overwrote dev's b with feat's x. Base a, ours
    x, theirs b is a conflict: nothing is applied."""
    meta, dev_shown = _setup(spark, "nref", mode, main_before_feat={1: "b"})
    _build(spark, meta, "feat", {**dev_shown, 1: "x"})
    refresh_branch(spark, name="dev", meta_schema=meta)
    dev_now = {**dev_shown, 1: "b"}
    assert _rows(spark, f"{meta}__br_dev.items") == dev_now

    with pytest.raises(BranchError, match="1 conflicting key") as failed:
        merge_branch(spark, name="feat", meta_schema=meta)
    assert "(three-way)" in str(failed.value)
    conflicts = spark.table(f"{meta}__br_feat.partialcow_merge_conflicts").collect()
    assert [(r["key"], r["column_name"], r["base_value"], r["ours_value"], r["theirs_value"]) for r in conflicts] == [
        ("1", "v", "a", "x", "b")]
    assert _rows(spark, f"{meta}__br_dev.items") == dev_now  # nothing applied


@pytest.mark.skipif(not LONG, reason="CI's time budget: PARTIALCOW_TESTS_LONG=1 runs it (see tests/budget.py); a "
                    "nested fast-forward merge runs in CI in test_refresh_of_an_unchanged_parent_keeps_its_image_...")
def test_nested_merge_with_the_parent_unchanged_stays_a_fast_forward(spark):
    """Recording dev's image in feat's base costs no fast-forward: while neither dev nor main changed, feat's merge
    is one, and feat's next merge (its base now dev's image after the first merge) is one again."""
    meta, dev_shown = _setup(spark, "nff", "copy-on-write", main_before_feat={1: "b"})
    for new_key, value in ((5, "x"), (6, "y")):
        ours = {**dev_shown, 2: value, new_key: "new"}
        _build(spark, meta, "feat", ours)
        result = merge_branch(spark, name="feat", meta_schema=meta)
        (merged,) = result.models
        assert merged.fast_forward and (merged.inserted, merged.updated) == (1, 1), result.describe()
        # dev's image was rebuilt by the merge, and re-pinned to main as it is now (key 1)
        dev_shown = {**ours, 1: "b"}
        assert _rows(spark, f"{meta}__br_dev.items") == dev_shown


# whether an image is rebuilt does not depend on its mode: CI runs one mode per case, in turn (tests/budget.py)
@pytest.mark.parametrize("mode", in_turn(IMAGE_MODES, 2))
def test_refresh_of_an_unchanged_parent_keeps_its_image_and_the_fast_forward(spark, mode):
    """A refresh of dev while neither main nor dev's overlay moved keeps dev's image snapshot (the same inputs give
    the same rows), so feat's merge is still a fast-forward. Rebuilding it gave a new image snapshot, which feat's
    merge base took for a change of dev: a three-way merge, and a conflict for a model merged whole."""
    meta, dev_shown = _setup(spark, "nrefu", mode, main_before_feat={})
    image = spark.sql(f"SELECT snapshot_id FROM {meta}.items.refs WHERE name = 'partialcow_dev'").collect()
    assert len(image) == 1
    refreshed = refresh_branch(spark, name="dev", meta_schema=meta)
    assert spark.sql(f"SELECT snapshot_id FROM {meta}.items.refs WHERE name = 'partialcow_dev'").collect() == image
    assert refreshed.models == ((f"{meta}.items", True),)
    assert _rows(spark, f"{meta}__br_dev.items") == dev_shown
    ours = {**dev_shown, 2: "x"}
    _build(spark, meta, "feat", ours)
    result = merge_branch(spark, name="feat", meta_schema=meta)
    (merged,) = result.models
    assert merged.fast_forward and merged.updated == 1, result.describe()
    assert _rows(spark, f"{meta}__br_dev.items") == ours
