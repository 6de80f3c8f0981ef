"""A branch takes the model's columns as main takes them: names in other letter case, nested types whose
nullability differs from the table's, and map columns.

Regression cases:

- a batch on a branch spelling ``amount`` for the model's ``Amount`` had the column dropped as new
  (``on_schema_change='ignore'``): the updated key kept its old value and the inserted key got null, and a merge
  carried both to main (main matches the names since session 42); ``unique_key='K'`` for a column ``k`` was refused;
- a keyed model whose SQL builds ``array(id)`` (elements not null) over a table Spark created (elements nullable) was
  stored *detached* (the whole result, diffed and merged as one replacement: a merge with ``on_conflict='ours'``
  then overwrote every change main made meanwhile, to any key);
- a model with a map column failed on a branch: ``<=>`` and ``EXCEPT ALL`` refuse maps;
- a struct column with field names that need quotes (``a b``, ``c-d``): after the model merged, the branch showed
  main through a view, which Spark keeps in the metastore with the field names unquoted, and every read there (dbt's
  ``ref()`` on the branch included) failed with ``CANNOT_RECOGNIZE_HIVE_TYPE``.
"""

from __future__ import annotations

import pytest
from branch_tables import fresh_schema, sorted_rows
from partialcow.branch import build_model, create_branch, diff_branch, merge_branch
from partialcow.branch.incremental import apply_changes_on_branch
from partialcow.spark.changes import ChangeSpec

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]


def test_a_batch_on_a_branch_matches_columns_spelled_in_other_letter_case(spark):
    meta = fresh_schema(spark, "brcase")
    table = f"{meta}.items"
    spark.sql(f"CREATE TABLE {table} (k bigint, Amount bigint) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 10), (2, 20)")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    batch = spark.sql("select 1L k, 5L amount, 'U' _op union all select 9L, 90L, 'I'")
    spec = ChangeSpec(key_columns=("K",), op_column="_op", model="items")
    apply_changes_on_branch(spark, batch, spec, branch="dev", base_schema=meta, identifier="items", meta_schema=meta)
    assert sorted_rows(spark, f"{meta}__br_dev.items") == [(1, 5), (2, 20), (9, 90)]
    assert sorted_rows(spark, table) == [(1, 10), (2, 20)]

    merge_branch(spark, name="dev", meta_schema=meta)
    assert sorted_rows(spark, table) == [(1, 5), (2, 20), (9, 90)]


def test_nested_types_that_differ_only_in_nullability_keep_the_model_keyed(spark):
    meta = fresh_schema(spark, "brnull")
    table = f"{meta}.items"
    spark.sql(f"CREATE TABLE {table} USING iceberg AS SELECT id, array(id) tags, named_struct('n', id) s "
              "FROM range(3)")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    result = spark.sql("SELECT id, array(id + CASE WHEN id = 1 THEN 10 ELSE 0 END) tags, named_struct('n', id) s "
                       "FROM range(3)")
    assert not result.schema["tags"].dataType.containsNull  # the query's type, stricter than the table's
    summary = build_model(spark, result, branch="dev", base_schema=meta, identifier="items", key_columns=["id"],
                          meta_schema=meta)
    assert (summary.mode, summary.upserts, summary.tombstones) == ("delta", 1, 0)

    # main changes another key meanwhile: a keyed three-way merge keeps it, whatever the conflict policy
    spark.sql(f"UPDATE {table} SET tags = array(100L) WHERE id = 2")
    merged = merge_branch(spark, name="dev", meta_schema=meta, on_conflict="ours")
    assert merged.models[0].conflicts == 0
    got = {r["id"]: list(r["tags"]) for r in spark.table(table).collect()}
    assert got == {0: [0], 1: [11], 2: [100]}


def test_a_model_with_a_map_column_builds_diffs_and_merges_on_a_branch(spark):
    meta = fresh_schema(spark, "brmap")
    table = f"{meta}.items"
    spark.sql(f"CREATE TABLE {table} (id bigint, attrs map<string, int>) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, map('a', 1)), (2, map('b', 2)), (3, null)")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    result = spark.table(table).selectExpr(
        "id", "CASE WHEN id = 2 THEN map('b', 3) WHEN id = 3 THEN map() ELSE attrs END attrs")
    summary = build_model(spark, result, branch="dev", base_schema=meta, identifier="items", key_columns=["id"],
                          meta_schema=meta)
    assert (summary.mode, summary.upserts, summary.tombstones) == ("delta", 2, 0)  # null and empty maps differ

    diff = diff_branch(spark, name="dev", meta_schema=meta)
    assert diff.counts[f"{meta}.items"] == {"updated": 2}

    batch = spark.sql("select 1L id, map('a', 7) attrs, 'U' _op")
    apply_changes_on_branch(spark, batch, ChangeSpec(key_columns=("id",), op_column="_op", model="items"),
                            branch="dev", base_schema=meta, identifier="items", meta_schema=meta)
    merge_branch(spark, name="dev", meta_schema=meta)
    got = {r["id"]: r["attrs"] for r in spark.table(table).collect()}
    assert got == {1: {"a": 7}, 2: {"b": 3}, 3: {}}


def test_a_detached_model_with_a_map_column_is_diffed(spark):
    meta = fresh_schema(spark, "brmapd")
    table = f"{meta}.items"
    spark.sql(f"CREATE TABLE {table} (id bigint, attrs map<string, int>) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, map('a', 1)), (2, map('b', 2))")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    result = spark.sql("select 1L id, map('a', 1) attrs union all select 2L, map('b', 5)")
    summary = build_model(spark, result, branch="dev", base_schema=meta, identifier="items", key_columns=[],
                          meta_schema=meta)
    assert summary.mode == "detached"
    described = diff_branch(spark, name="dev", meta_schema=meta).describe()
    assert "1 only on the branch, 1 only on the parent" in described, described


def test_a_struct_with_field_names_needing_quotes_reads_on_the_branch_before_and_after_its_merge(spark):
    from partialcow.branch.overlay import resolve_restoring
    from partialcow.branch.store import BranchStore

    meta = fresh_schema(spark, "brquote")
    table = f"{meta}.items"
    spark.sql(f"CREATE TABLE {table} (id bigint, s struct<`a b`: int, `c-d`: string>) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, named_struct('a b', 1, 'c-d', 'x')), "
              "(2, named_struct('a b', 2, 'c-d', 'y'))")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])

    def build(changed_id: int, value: int) -> None:
        result = spark.table(table).selectExpr(
            "id", f"CASE WHEN id = {changed_id} THEN named_struct('a b', {value}, 'c-d', 'z') ELSE s END s")
        build_model(spark, result, branch="dev", base_schema=meta, identifier="items", key_columns=["id"],
                    meta_schema=meta)

    def rows_through_ref() -> dict[int, tuple]:
        found = resolve_restoring(spark, store=BranchStore(spark, meta_schema=meta), levels=["dev", "main"],
                                  base_schema=meta, identifier="items")
        assert found is not None
        return {r["id"]: tuple(r["s"]) for r in spark.table(".".join(found)).collect()}

    build(2, 5)
    assert rows_through_ref() == {1: (1, "x"), 2: (5, "z")}
    assert diff_branch(spark, name="dev", meta_schema=meta).counts == {f"{meta}.items": {"updated": 1}}
    merge_branch(spark, name="dev", meta_schema=meta)
    main = {r["id"]: tuple(r["s"]) for r in spark.table(table).collect()}
    assert main == {1: (1, "x"), 2: (5, "z")}
    # the branch changes nothing now: it reads what main holds, also after main moved on
    assert rows_through_ref() == main
    spark.sql(f"INSERT INTO {table} VALUES (3, named_struct('a b', 3, 'c-d', 'w'))")
    assert rows_through_ref() == {**main, 3: (3, "w")}
    assert diff_branch(spark, name="dev", meta_schema=meta).counts == {}
    build(1, 7)  # and a change on it again reads and merges
    assert rows_through_ref() == {1: (7, "z"), 2: (5, "z"), 3: (3, "w")}
    merge_branch(spark, name="dev", meta_schema=meta)
    assert {r["id"]: tuple(r["s"]) for r in spark.table(table).collect()} == {1: (7, "z"), 2: (5, "z"), 3: (3, "w")}
