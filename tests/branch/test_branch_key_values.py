"""Keys and values a branch must carry exactly, through build, image (both modes), diff and merge.

Regression cases:

- a parent's row whose key has a null part could not be removed on a branch: every key join compared with ``=``,
  so the tombstone matched nothing and the branch (and main after a merge) kept showing the row;
- a key the parent holds more than once: the diff counted a changed column once per copy; a result holding the key
  once with the parent's values showed the parent's copies; a merge of a change of it was refused by main's row
  index (duplicate key);
- ``-0.0`` became ``0.0`` on the branch (the overlay was deduplicated, and grouping normalises it), and a result's
  ``-0.0`` where the parent held ``0.0`` counted as unchanged (``<=>`` takes them for equal);
- a result holding one key twice was stored as is; the merge then refused it, after the branch had shown both rows.
  A keyed build now refuses it up front with ``RepeatedKeysError``, as a batch with a repeated key is refused.
"""

from __future__ import annotations

import math

import pytest
from branch_tables import fresh_schema, sorted_rows
from budget import in_turn
from partialcow.branch import build_model, create_branch, diff_branch, merge_branch
from partialcow.exceptions import RepeatedKeysError

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

MODES = ["copy-on-write", "merge-on-read"]


def _build(spark, meta: str, branch: str, rows, columns: str, keys):
    return build_model(spark, spark.createDataFrame(rows, columns), branch=branch, base_schema=meta,
                       identifier="items", key_columns=keys, meta_schema=meta)


@pytest.mark.parametrize("mode", MODES)
def test_a_parent_row_with_a_null_key_part_is_removed_and_merged(spark, mode):
    meta = fresh_schema(spark, "nullkey")
    columns = "k1 bigint, k2 string, v string"
    table = f"{meta}.items"
    spark.createDataFrame([(1, "x", "a"), (2, None, "n"), (3, "y", "c"), (None, "z", "m")], columns).writeTo(
        table).using("iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")], image_mode=mode)
    result = [(1, "x", "a"), (3, "y", "C")]
    summary = _build(spark, meta, "dev", result, columns, ["k1", "k2"])
    assert (summary.upserts, summary.tombstones) == (1, 2)
    assert summary.image is not None  # read through the image, not the live view
    assert sorted_rows(spark, f"{meta}__br_dev.items") == sorted(result, key=repr)

    diff = diff_branch(spark, name="dev", meta_schema=meta)
    assert diff.counts[f"{meta}.items"] == {"updated": 1, "deleted": 2}
    deleted = {r["key"] for r in spark.table(diff.table).where("change = 'delete'").collect()}
    assert deleted == {'{"k1":2,"k2":null}', '{"k1":null,"k2":"z"}'}

    # main moves meanwhile: a three-way merge, whose base rows of the deleted keys come from the base image
    spark.sql(f"UPDATE {table} SET v = 'main' WHERE k1 = 1")
    merged = merge_branch(spark, name="dev", meta_schema=meta)
    assert not merged.models[0].fast_forward
    assert (merged.models[0].updated, merged.models[0].deleted, merged.models[0].conflicts) == (1, 2, 0)
    assert spark.table(merged.conflict_table).collect() == []  # the report is there, and empty
    expected = sorted([(1, "x", "main"), (3, "y", "C")], key=repr)
    assert sorted_rows(spark, table) == expected
    assert sorted_rows(spark, f"{meta}__br_dev.items") == expected


# (case, the branch's result, what diff_branch counts, its changed columns)
TWICE = [
    ("changed", [(1, "x"), (2, "b")], {"updated": 1}, {"v": 1}),
    ("kept once", [(1, "a"), (2, "B")], {"updated": 1}, {"v": 1}),
    ("deleted", [(2, "b")], {"deleted": 1}, {}),
]


# CI runs each case in one image mode (in turn), PARTIALCOW_TESTS_LONG=1 in both
_TWICE_RUNS = [(mode, *c) for i, c in enumerate(TWICE) for mode in in_turn(MODES, i)]


@pytest.mark.parametrize("mode, case, result, counts, changed", _TWICE_RUNS,
                         ids=[f"{r[1]}-{r[0]}" for r in _TWICE_RUNS])
def test_a_key_the_parent_holds_twice(spark, mode, case, result, counts, changed):
    meta = fresh_schema(spark, "twice")
    columns = "id bigint, v string"
    table = f"{meta}.items"
    spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg")
    spark.createDataFrame([(1, "a"), (2, "b")], columns).writeTo(table).append()
    spark.createDataFrame([(1, "a")], columns).writeTo(table).append()  # key 1 twice, in two files
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")], image_mode=mode)
    _build(spark, meta, "dev", result, columns, ["id"])
    shown = sorted_rows(spark, f"{meta}__br_dev.items")
    assert shown == sorted(result), case  # the result's rows: key 1 once, or not at all

    diff = diff_branch(spark, name="dev", meta_schema=meta)
    assert diff.counts[f"{meta}.items"] == counts
    assert diff.columns.get(f"{meta}.items", {}) == changed
    assert spark.table(diff.table).count() == 1  # one row for key 1 or 2, not one per copy of key 1

    merge_branch(spark, name="dev", meta_schema=meta)
    assert sorted_rows(spark, table) == shown
    assert sorted_rows(spark, f"{meta}__br_dev.items") == shown


@pytest.mark.parametrize("mode", MODES)
def test_negative_zero_and_nan_survive_build_and_merge(spark, mode):
    meta = fresh_schema(spark, "floats")
    # no array<double>: main's page engine keeps [0.0] where a batch writes [-0.0] (reported apart)
    columns = "id bigint, f double, g float"
    table = f"{meta}.items"
    nan = float("nan")
    parent = [(1, 1.0, 1.0), (2, 0.0, 0.0), (3, nan, nan), (4, 4.0, 4.0)]
    spark.createDataFrame(parent, columns).writeTo(table).using("iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")], image_mode=mode)
    # 1: a value becomes -0.0; 2: 0.0 becomes -0.0 (equal for <=>); 3: NaN stays NaN (unchanged); 4: untouched
    result = [(1, -0.0, -0.0), (2, -0.0, -0.0), (3, nan, nan), (4, 4.0, 4.0)]
    summary = _build(spark, meta, "dev", result, columns, ["id"])
    assert (summary.upserts, summary.tombstones) == (2, 0)

    def shown(value: float) -> tuple:
        return ("nan",) if math.isnan(value) else (repr(value), math.copysign(1.0, value))

    def signs(relation: str) -> dict:
        return {r["id"]: shown(r["f"]) + shown(r["g"]) for r in spark.table(relation).collect()}

    expected = {1: ("-0.0", -1.0) * 2, 2: ("-0.0", -1.0) * 2, 3: ("nan",) * 2, 4: ("4.0", 1.0) * 2}
    assert signs(f"{meta}__br_dev.items") == expected
    diff = diff_branch(spark, name="dev", meta_schema=meta)
    assert diff.counts[f"{meta}.items"] == {"updated": 2}
    assert diff.columns[f"{meta}.items"] == {"f": 2, "g": 2}

    merged = merge_branch(spark, name="dev", meta_schema=meta)
    assert merged.models[0].updated == 2
    assert signs(table) == expected


def test_a_repeated_key_in_a_result_is_refused_before_anything_is_written(spark):
    meta = fresh_schema(spark, "repkey")
    columns = "id bigint, v string"
    table = f"{meta}.items"
    spark.createDataFrame([(1, "a"), (2, "b")], columns).writeTo(table).using("iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    _build(spark, meta, "dev", [(1, "a"), (2, "B")], columns, ["id"])
    overlay = f"{meta}__br_dev.items__pcow_overlay"

    def state() -> tuple:
        snapshots = spark.sql(f"SELECT snapshot_id FROM {overlay}.snapshots").collect()
        refs = sorted(tuple(r) for r in spark.sql(f"SELECT name, snapshot_id FROM {table}.refs").collect())
        return snapshots, refs, sorted_rows(spark, f"{meta}__br_dev.items"), sorted_rows(spark, table)

    before = state()
    cases = [
        ([(1, "x"), (1, "y"), (2, "b"), (3, "c"), (3, "c")], ["(id=1)", "(id=3)"]),  # keyed over the parent
        ([(1, "x", 0), (1, "y", 0)], ["(id=1)"]),  # other columns than the parent's: detached, keys still unique
    ]
    for rows, samples in cases:
        frame_columns = columns if len(rows[0]) == 2 else columns + ", extra int"
        with pytest.raises(RepeatedKeysError, match=rf"model {meta}\.items: unique_key \['id'\] repeats") as info:
            _build(spark, meta, "dev", rows, frame_columns, ["id"])
        assert all(sample in str(info.value) and sample in info.value.keys for sample in samples)
        assert "(id=2)" not in str(info.value)
        assert state() == before
