"""Branch operations through the Python API: composite keys, a parent table replaced behind the branch's back,
the ``theirs`` policy, unknown merge bases and the list statistics. Expected rows are plain Python dicts."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from merge_oracle import three_way

from partialcow.branch import build_model, create_branch, drop_branch, list_branches, merge_branch
from partialcow.exceptions import BranchError

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

# Regression case (staging column names): value columns named like the merge's staging columns once were, which
# overwrote them (main received _status = 'ours'). Every merge below runs with them.
COLUMNS = "k1 int, k2 string, _take int, _status string"
PARENT = {(1, "a"): (1, "a", 10, "x"), (2, "b"): (2, "b", 20, "y"), (3, "c"): (3, "c", 30, "z"),
          (4, "d"): (4, "d", 40, "q")}


def _frame(spark, rows: dict):
    return spark.createDataFrame(list(rows.values()), COLUMNS)


def _rows(spark, relation: str) -> dict:
    return {(r[0], r[1]): tuple(r) for r in spark.table(relation).collect()}


def _replace_parent(spark, table: str, rows: dict) -> None:
    # drop + create: the table's snapshot history is gone (what dbt-spark does when it misses an Iceberg table)
    spark.sql(f"DROP TABLE {table} PURGE")
    _frame(spark, rows).writeTo(table).using("iceberg").create()


def test_composite_keys_replaced_parent_and_policies(spark):
    meta = f"api_{uuid.uuid4().hex[:8]}"
    table = f"{meta}.items"
    spark.sql(f"CREATE SCHEMA {meta}")
    _frame(spark, PARENT).writeTo(table).using("iceberg").create()

    create_branch(spark, name="b1", meta_schema=meta, models=[(meta, "items")])
    ours = dict(PARENT)
    ours[(1, "a")] = (1, "a", 11, "x")  # _take changed
    del ours[(2, "b")]
    ours[(9, "z")] = (9, "z", 90, "n")
    summary = build_model(spark, _frame(spark, ours), branch="b1", base_schema=meta, identifier="items",
                          key_columns=["k1", "k2"], meta_schema=meta)
    assert (summary.mode, summary.upserts, summary.tombstones) == ("delta", 2, 1)
    assert _rows(spark, f"{meta}__br_b1.items") == ours

    (stats,) = [b for b in list_branches(spark, meta_schema=meta).branches if b.name == "b1"]
    assert (stats.parent, stats.image_mode) == ("main", "copy-on-write")
    assert [(m.upserts, m.tombstones, m.ratio) for m in stats.models] == [(2, 1, 3 / len(PARENT))]

    # the parent is rebuilt from scratch meanwhile (history lost): _status of (1, a) and _take of (3, c) change
    theirs = dict(PARENT)
    theirs[(1, "a")] = (1, "a", 10, "changed")
    theirs[(3, "c")] = (3, "c", 31, "z")
    _replace_parent(spark, table, theirs)

    with pytest.raises(BranchError, match="nothing was applied"):
        merge_branch(spark, name="b1", meta_schema=meta)
    assert _rows(spark, table) == theirs
    conflicts = spark.table(f"{meta}__br_b1.partialcow_merge_conflicts").collect()
    assert {(r["key"], r["column_name"], r["base_value"], r["ours_value"], r["theirs_value"]) for r in conflicts} == {
        ('{"k1":1,"k2":"a"}', "_take", "10", "11", "10"),
        ('{"k1":1,"k2":"a"}', "_status", "x", "x", "changed"),
    }

    result = merge_branch(spark, name="b1", meta_schema=meta, on_conflict="theirs")
    expected, conflict_keys = three_way(PARENT, ours, theirs, policy="theirs")
    assert conflict_keys == {(1, "a")}
    assert result.applied and result.models[0].conflicts == 1 and not result.models[0].fast_forward
    assert _rows(spark, table) == expected
    assert _rows(spark, f"{meta}__br_b1.items") == expected  # the branch continues from the merge result

    # the report holds the last merge's conflicts: a later merge without any leaves it empty
    later = dict(expected)
    later[(4, "d")] = (4, "d", 41, "q")
    build_model(spark, _frame(spark, later), branch="b1", base_schema=meta, identifier="items",
                key_columns=["k1", "k2"], meta_schema=meta)
    assert merge_branch(spark, name="b1", meta_schema=meta).conflicts == 0
    assert spark.table(result.conflict_table).collect() == []
    assert _rows(spark, table) == later
    expected = later

    # a branch built only after its parent lost its history: the merge base is unknown, so every changed key
    # conflicts unless both sides agree (never a silent overwrite)
    create_branch(spark, name="b2", meta_schema=meta, models=[(meta, "items")])
    moved = dict(expected)
    moved[(4, "d")] = (4, "d", 44, "q")
    _replace_parent(spark, table, moved)
    ours2 = dict(expected)
    ours2[(4, "d")] = (4, "d", 45, "q")  # both sides changed 4
    ours2[(3, "c")] = (3, "c", 31, "agreed")  # only the branch changed 3
    build_model(spark, _frame(spark, ours2), branch="b2", base_schema=meta, identifier="items",
                key_columns=["k1", "k2"], meta_schema=meta)
    with pytest.raises(BranchError, match="2 conflicting key"):
        merge_branch(spark, name="b2", meta_schema=meta)
    assert _rows(spark, table) == moved
    merge_branch(spark, name="b2", meta_schema=meta, on_conflict="ours")
    assert _rows(spark, table) == ours2

    for name in ("b1", "b2"):
        drop_branch(spark, name=name, meta_schema=meta)
    assert not [d.name for d in spark.catalog.listDatabases() if d.name.startswith(f"{meta}__br_")]
    with pytest.raises(BranchError, match="does not exist"):
        drop_branch(spark, name="b1", meta_schema=meta)
    spark.sql(f"DROP TABLE {table} PURGE")
    spark.sql(f"DROP TABLE {meta}.partialcow_branches PURGE")
    spark.sql(f"DROP SCHEMA {meta}")



@pytest.mark.parametrize("key_type, keys", [
    ("bigint", ["1", "2", "-3", "9000000000"]),
    ("string", ["plain", "it's", "back\\slash", "ünï\ncode"]),
    ("date", ["2024-02-29", "1999-12-31", "2030-01-01", "1970-01-01"]),
])
def test_key_types_and_null_keys(spark, key_type, keys):
    """Single keys of several types: the view shows changed, deleted and kept rows; a null key is refused."""
    meta = f"kt_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    frame = spark.createDataFrame([(k, i) for i, k in enumerate(keys)], "k string, v int")
    frame.selectExpr(f"CAST(k AS {key_type}) AS k", "v").writeTo(f"{meta}.t").using("iceberg").create()
    parent = {tuple(r) for r in spark.table(f"{meta}.t").collect()}
    create_branch(spark, name="b", meta_schema=meta, models=[(meta, "t")])
    # the row with v = 0 changes and the row with v = 1 is deleted; the others stay as they are
    result = spark.sql(f"SELECT k, CASE WHEN v = 0 THEN 100 ELSE v END AS v FROM {meta}.t WHERE v <> 1")
    expected = {(k, 100 if v == 0 else v) for k, v in parent if v != 1}
    view = f"{meta}__br_b.t"
    build_model(spark, result, branch="b", base_schema=meta, identifier="t", key_columns=["k"], meta_schema=meta)
    assert {tuple(r) for r in spark.table(view).collect()} == expected
    with pytest.raises(BranchError, match=r"model .*\.t: unique_key column k is null"):
        build_model(spark, result.union(spark.sql(f"SELECT CAST(NULL AS {key_type}) AS k, 9 AS v")), branch="b",
                    base_schema=meta, identifier="t", key_columns=["k"], meta_schema=meta)
    assert {tuple(r) for r in spark.table(view).collect()} == expected  # the refused build changed nothing
    drop_branch(spark, name="b", meta_schema=meta)
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_regression_merge_keeps_the_image_mode_fail_policy_and_fast_forward_inserts(spark):
    """Regression case (issue 28): ``merge_branch`` rebuilt the branch record without ``image_mode``, so a
    merge-on-read branch became copy-on-write after its first merge. Also: ``on_conflict: fail`` is accepted and
    behaves as the default (nothing applied), and a bad policy names the accepted ones and the sides.

    Regression case (fast-forward insert): on a fast-forward the merge took every key the branch inserted for a
    key of unknown base, so a conflict: the default policy refused the merge, ``theirs`` dropped the insert from
    main and from the branch."""
    from partialcow.branch import BranchStore
    from partialcow.branch.types import MERGE_ON_READ

    meta = f"mode_{uuid.uuid4().hex[:8]}"
    table = f"{meta}.items"
    spark.sql(f"CREATE SCHEMA {meta}")
    _frame(spark, PARENT).writeTo(table).using("iceberg").create()
    create_branch(spark, name="mor", meta_schema=meta, models=[(meta, "items")], image_mode=MERGE_ON_READ)
    ours = dict(PARENT)
    ours[(2, "b")] = (2, "b", 21, "y")
    build_model(spark, _frame(spark, ours), branch="mor", base_schema=meta, identifier="items",
                key_columns=["k1", "k2"], meta_schema=meta)
    theirs = dict(PARENT)
    theirs[(2, "b")] = (2, "b", 22, "y")  # the same key changed on main: a conflict
    spark.sql(f"UPDATE {table} SET _take = 22 WHERE k1 = 2")
    with pytest.raises(BranchError, match="on_conflict 'mine' is not one of: fail, ours, theirs .ours = the branch"):
        merge_branch(spark, name="mor", meta_schema=meta, on_conflict="mine")
    with pytest.raises(BranchError, match="nothing was applied"):
        merge_branch(spark, name="mor", meta_schema=meta, on_conflict="fail")
    assert _rows(spark, table) == theirs
    result = merge_branch(spark, name="mor", meta_schema=meta, on_conflict="ours")
    assert result.applied and _rows(spark, table) == ours

    assert BranchStore(spark, meta_schema=meta).require("mor").image_mode == MERGE_ON_READ
    again = dict(ours)
    again[(3, "c")] = (3, "c", 33, "z")
    again[(7, "g")] = (7, "g", 70, "new")  # a key main never had
    summary = build_model(spark, _frame(spark, again), branch="mor", base_schema=meta, identifier="items",
                          key_columns=["k1", "k2"], meta_schema=meta)
    assert summary.image is not None and summary.image.mode == MERGE_ON_READ
    assert _rows(spark, f"{meta}__br_mor.items") == again

    # main unchanged since the last merge: a fast-forward, in which "theirs" has no change of its own to keep
    expected, conflict_keys = three_way(ours, again, ours, policy="theirs")
    assert expected == again and not conflict_keys
    result = merge_branch(spark, name="mor", meta_schema=meta, on_conflict="theirs")
    (merged,) = result.models
    assert (merged.fast_forward, merged.conflicts, merged.inserted, merged.updated) == (True, 0, 1, 1)
    assert _rows(spark, table) == expected
    assert _rows(spark, f"{meta}__br_mor.items") == expected
    drop_branch(spark, name="mor", meta_schema=meta)
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_diff_of_a_detached_model_reports_the_replaced_rows_and_theirs_keeps_the_parents(spark):
    """Regression case (issue 24): a model without a key differs from its parent by whole rows; branch_diff said
    "0 inserted, 0 updated, 0 deleted". Expected counts come from plain Python multisets.

    Regression case (detached theirs): merged with ``on_conflict: theirs``, a detached model both sides changed
    kept the branch's result on the branch while the merge base moved on, so the next merge took it for a
    fast-forward and replaced the parent's rows with it. Merged, the model now leaves the branch."""
    from collections import Counter

    from partialcow.branch import diff_branch

    meta = f"det_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    parent = [(1, "a", 10, "x"), (1, "a", 10, "x"), (2, "b", 20, "y"), (3, "c", 30, "z")]
    spark.createDataFrame(parent, COLUMNS).writeTo(f"{meta}.agg").using("iceberg").create()
    spark.createDataFrame(parent[2:], COLUMNS).writeTo(f"{meta}.same").using("iceberg").create()
    create_branch(spark, name="d", meta_schema=meta, models=[(meta, "agg"), (meta, "same")])
    ours = [(1, "a", 10, "x"), (2, "b", 21, "y"), (3, "c", 30, "z"), (4, "d", 40, "q"), (4, "d", 40, "q")]
    for identifier, rows in (("agg", ours), ("same", parent[2:])):
        summary = build_model(spark, spark.createDataFrame(rows, COLUMNS), branch="d", base_schema=meta,
                              identifier=identifier, key_columns=[], meta_schema=meta)
        assert summary.mode == "detached"
    result = diff_branch(spark, name="d", meta_schema=meta)
    only_ours = sum((Counter(ours) - Counter(parent)).values())
    only_theirs = sum((Counter(parent) - Counter(ours)).values())
    assert (only_ours, only_theirs) == (3, 2)
    assert (f"{meta}.agg: replaced ({len(ours)} rows vs {len(parent)} on the parent: {only_ours} only on the "
            f"branch, {only_theirs} only on the parent)") in result.describe()
    assert f"{meta}.same" not in result.describe()  # the same rows: no difference to report
    written = spark.table(result.table).collect()
    assert [(r["model"], r["change"], r["old_value"], r["new_value"]) for r in written] == [
        (f"{meta}.agg", "replace", str(len(parent)), str(len(ours)))
    ]

    def rows(relation: str) -> Counter:
        return Counter(tuple(r) for r in spark.table(relation).collect())

    theirs = [*parent, (5, "e", 50, "m")]
    spark.sql(f"INSERT INTO {meta}.agg VALUES (5, 'e', 50, 'm')")  # main changes agg too: a conflict as a whole
    with pytest.raises(BranchError, match="nothing was applied"):
        merge_branch(spark, name="d", meta_schema=meta)
    assert [tuple(r)[1:] for r in spark.table(f"{meta}__br_d.partialcow_merge_conflicts").collect()] == [
        (f"{meta}.agg", None, "*", "parent at branch base", "branch result (detached model)",
         "parent changed since the base")]
    merged = {m.model: m for m in merge_branch(spark, name="d", meta_schema=meta, on_conflict="theirs").models}
    assert (merged[f"{meta}.agg"].conflicts, merged[f"{meta}.agg"].replaced) == (1, False)
    assert rows(f"{meta}.agg") == Counter(theirs)
    # the branch continues from the merge result: agg leaves it, and ref() there reads main's
    assert not spark.catalog.tableExists(f"{meta}__br_d.agg")
    again = {m.model: m for m in merge_branch(spark, name="d", meta_schema=meta).models}
    assert f"{meta}.agg" not in again
    assert rows(f"{meta}.agg") == Counter(theirs)
    drop_branch(spark, name="d", meta_schema=meta)
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_regression_detached_merge_kept_the_parents_partitioning_sort_order_and_row_index(spark):
    """Regression case (detached replace): a detached model whose columns differ from main's table was merged with
    a plain create-or-replace, which left the table unpartitioned and unsorted, and kept the table's row index
    (``partial_cow_incremental``) for the replaced files: with the key's type changed, every later write on main
    failed with ``StaleIndexError``; a column that kept its name and changed its type was written into the table's
    old type. Now the table is replaced and keeps its partitioning and sort order (a field whose column is gone is
    named in the summary) and its properties, and a write on main builds its index again."""
    from partialcow.branch.catalog import load_iceberg
    from partialcow.index import RowIndex
    from partialcow.spark.changes import ChangeSpec, apply_changes
    from partialcow.spark.tables import open_table
    from partialcow.table.iceberg import IcebergTable

    meta = f"lay_{uuid.uuid4().hex[:8]}"
    table = f"{meta}.items"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.sql(f"CREATE TABLE {table} (id int, region string, v string, note string) USING iceberg "
              "PARTITIONED BY (region) TBLPROPERTIES ('format-version' = '2', 'custom.owner' = 'team-a')")
    spark.sql(f"ALTER TABLE {table} WRITE ORDERED BY region DESC NULLS LAST, note")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'eu', 'a', 'x'), (2, 'us', 'b', 'y'), (3, 'eu', 'c', 'z')")
    # a keyless model whose column keeps its name and changes its type (a string failed after the merge's checks)
    spark.sql(f"CREATE TABLE {meta}.labels (id bigint, v int) USING iceberg PARTITIONED BY (bucket(2, id))")
    spark.sql(f"INSERT INTO {meta}.labels VALUES (1, 10), (2, 20)")
    spec = ChangeSpec(key_columns=("id",), op_column="_op", model="items")
    batch = "id {}, region string, v string, {}_op string"
    apply_changes(spark, open_table(spark, table, table_format="iceberg"),  # builds the row index
                  spark.createDataFrame([(3, "eu", "c2", "z", "U")], batch.format("int", "note string, ")), spec)
    assert RowIndex.exists(IcebergTable(spark, table))

    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items"), (meta, "labels")])
    labels = spark.createDataFrame([(1, "ten"), (2, "twenty")], "id bigint, v string")
    build_model(spark, labels, branch="dev", base_schema=meta, identifier="labels", key_columns=[], meta_schema=meta)
    ours = {1: (1, "eu", "a", 1), 2: (2, "us", "b", 1), 3: (3, "eu", "c2", 2)}  # key type, columns changed
    result = spark.createDataFrame(list(ours.values()), "id bigint, region string, v string, n int")
    summary = build_model(spark, result, branch="dev", base_schema=meta, identifier="items", key_columns=["id"],
                          meta_schema=meta)
    assert summary.mode == "detached"
    merged = merge_branch(spark, name="dev", meta_schema=meta)
    assert all(m.replaced for m in merged.models)
    assert sorted(tuple(r) for r in spark.table(f"{meta}.labels").collect()) == [(1, "ten"), (2, "twenty")]
    assert [str(f.transform()) for f in load_iceberg(spark, meta, "labels").spec().fields()] == ["bucket[2]"]
    assert {r[0]: tuple(r) for r in spark.table(table).collect()} == ours
    loaded = load_iceberg(spark, meta, "items")
    fields = [(str(f.name()), str(f.transform())) for f in loaded.spec().fields()]
    assert fields == [("region", "identity")]
    order = [(str(loaded.schema().findColumnName(f.sourceId())), str(f.direction()), str(f.nullOrder()))
             for f in loaded.sortOrder().fields()]
    assert order == [("region", "DESC", "NULLS LAST")]
    assert loaded.properties().get("custom.owner") == "team-a"
    assert loaded.operations().current().formatVersion() == 2
    (items_merge,) = [m for m in merged.models if m.model == f"{meta}.items"]
    assert items_merge.layout_dropped == ("identity(note)",)
    assert "not kept from the parent's table (its column gone, or of another type now): identity(note)" in (
        merged.describe())

    # main's next write (a partial_cow_incremental batch with the new key type) builds the index again
    metrics = apply_changes(spark, open_table(spark, table, table_format="iceberg"),
                            spark.createDataFrame([(2, "us", "b2", 5, "U"), (9, "us", "new", 9, "I")],
                                                  batch.format("bigint", "n int, ")), spec)
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 1)
    assert {r[0]: tuple(r) for r in spark.table(table).collect()} == ours | {2: (2, "us", "b2", 5),
                                                                               9: (9, "us", "new", 9)}
    assert RowIndex.open(IcebergTable(spark, table)).verify().ok
    drop_branch(spark, name="dev", meta_schema=meta)
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_an_append_only_model_shows_its_history_with_the_new_rows_as_they_were_and_the_merge_keeps_it(spark):
    """An incremental model without a key (``keep_missing``, no key columns): the branch shows the parent's rows plus
    those of the result the parent lacks, counted with repeats (Python multisets are the oracle), values as they
    were (-0.0 keeps its sign, NaN and maps compare as values); ``branch_merge`` leaves the parent's rows alone."""
    import math
    from collections import Counter

    meta = f"hist_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    columns = "id int, x double, m map<string,int>"
    parent = [(1, 0.0, {"a": 1}), (1, 0.0, {"a": 1}), (2, math.nan, None), (3, None, {"b": 2})]
    result = [(1, 0.0, {"a": 1}), (2, math.nan, None), (4, -0.0, {"c": 3}), (4, -0.0, {"c": 3}), (5, 1.5, None)]
    spark.createDataFrame(parent, columns).writeTo(f"{meta}.ev").using("iceberg").create()
    create_branch(spark, name="d", meta_schema=meta, models=[(meta, "ev")])
    build_model(spark, spark.createDataFrame(result, columns), branch="d", base_schema=meta, identifier="ev",
                key_columns=[], meta_schema=meta, keep_missing=True)

    def value(v):  # NaN equal to itself, -0.0 told from 0.0, maps hashable
        if isinstance(v, float):
            return "nan" if math.isnan(v) else (v, math.copysign(1.0, v))
        return tuple(sorted(v.items())) if isinstance(v, dict) else v

    def rows(items) -> Counter:
        return Counter(tuple(value(v) for v in r) for r in items)

    appended = rows(result) - rows(parent)
    assert sum(appended.values()) == 3
    assert rows(spark.table(f"{meta}__br_d.ev").collect()) == rows(parent) + appended
    merged = merge_branch(spark, name="d", meta_schema=meta)
    assert [(m.kept_history, m.replaced, m.conflicts) for m in merged.models] == [(True, False, 0)]
    assert rows(spark.table(f"{meta}.ev").collect()) == rows(parent)
    assert rows(spark.table(f"{meta}__br_d.ev").collect()) == rows(parent)  # the branch continues from main
    drop_branch(spark, name="d", meta_schema=meta)
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_an_append_only_branch_refreshed_shows_what_the_parent_appended_since(spark):
    """Regression: ``branch_refresh`` re-pinned the views of an append-only model (no key, ``keep_missing``) but
    its overlay held the parent's rows as of the branch's build, so what the parent's own runs appended since never
    showed on the branch. Also: equal maps whose entries come in another order are the same value (they counted as
    rows the parent lacked, so the branch showed them twice)."""
    from collections import Counter

    from partialcow.branch import diff_branch, refresh_branch

    meta = f"hist_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    columns = "id int, m map<string,int>, s struct<k: map<string,int>>"
    two = {"a": 1, "b": 2}
    parent = [(1, two, (two,)), (2, None, None)]
    spark.createDataFrame(parent, columns).writeTo(f"{meta}.ev").using("iceberg").create()
    create_branch(spark, name="d", meta_schema=meta, models=[(meta, "ev")])
    # the same rows with the map's entries in the other order, and one new row
    spark.sql(f"CREATE TEMPORARY VIEW ev_result AS SELECT * FROM VALUES "
              "(1, map('b', 2, 'a', 1), named_struct('k', map('b', 2, 'a', 1))), (2, null, null), (3, null, null) "
              f"AS t({', '.join(c.split()[0] for c in columns.split(', '))})")
    build_model(spark, spark.table("ev_result"), branch="d", base_schema=meta, identifier="ev", key_columns=[],
                meta_schema=meta, keep_missing=True)

    def rows(table) -> Counter:
        return Counter((r[0], None if r[1] is None else tuple(sorted(r[1].items())),
                        None if r[2] is None else tuple(sorted(r[2][0].items())))
                       for r in spark.table(table).collect())

    branch = f"{meta}__br_d.ev"
    assert rows(branch) == rows(f"{meta}.ev") + Counter({(3, None, None): 1})
    spark.sql(f"INSERT INTO {meta}.ev VALUES (4, null, null)")  # the model's run on main appends
    refreshed = refresh_branch(spark, name="d", meta_schema=meta)
    assert "took the rows the parent appended since the build" in refreshed.describe()
    assert rows(branch) == rows(f"{meta}.ev") + Counter({(3, None, None): 1})
    diff = diff_branch(spark, name="d", meta_schema=meta)
    assert "1 row(s) only on the branch (4 vs 3 on the parent)" in diff.describe()
    spark.catalog.dropTempView("ev_result")
    drop_branch(spark, name="d", meta_schema=meta)
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_a_merge_into_a_parent_that_gained_a_column_is_refused(spark):
    """Regression: the parent's table gained a column after the branch built a keyed model; the merge inserted the
    branch's new key with null in that column, silently. Refused now, naming the column, with nothing merged (an
    updated key keeps the parent's values of such columns: test_branch_merge_failures.py)."""
    meta = f"gain_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.createDataFrame([(1, 10), (2, 20), (3, 30)], "id bigint, v bigint").writeTo(f"{meta}.t").using(
        "iceberg").create()
    create_branch(spark, name="d", meta_schema=meta, models=[(meta, "t")])
    build_model(spark, spark.createDataFrame([(1, 10), (2, 25), (4, 40)], "id bigint, v bigint"), branch="d",
                base_schema=meta, identifier="t", key_columns=["id"], meta_schema=meta)
    spark.sql(f"ALTER TABLE {meta}.t ADD COLUMN extra string")
    spark.sql(f"UPDATE {meta}.t SET extra = concat('x', v)")
    before = sorted(map(tuple, spark.table(f"{meta}.t").collect()))
    with pytest.raises(BranchError, match=r"gained column\(s\) \['extra'\].*the branch inserts.*nothing was merged"):
        merge_branch(spark, name="d", meta_schema=meta)
    assert sorted(map(tuple, spark.table(f"{meta}.t").collect())) == before
    assert not spark.catalog.tableExists(f"{meta}__br_d.t__pcow_merge")  # its staged rows are dropped
    drop_branch(spark, name="d", meta_schema=meta)
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_merges_keep_the_base_of_the_models_they_do_not_merge_and_reach_a_parent_branch_that_built_nothing(spark):
    """Regressions (merge_branch with its default models=(), the Python API): a merge rewrote the branch's merge base
    from the models it merged only, so every other model lost its base. A merge with nothing to merge emptied it; a
    merge of t1 dropped t2's. The next change of such a model (its parent never touched) then merged as a conflict,
    and on_conflict='theirs' dropped it without a word. And merging branch feat into its parent branch dev, which
    had built nothing (no overlay schema yet), failed with Iceberg's raw NoSuchNamespaceException."""
    from partialcow.branch.incremental import apply_changes_on_branch
    from partialcow.spark.spec import ChangeSpec

    meta = f"keep_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    for t in ("t1", "t2"):
        spark.sql(f"CREATE TABLE {meta}.{t} (id bigint, v string) USING iceberg")
        spark.sql(f"INSERT INTO {meta}.{t} VALUES (1, 'a'), (2, 'b')")
    models = [(meta, "t1"), (meta, "t2")]
    spec = ChangeSpec(key_columns=("id",), op_column="_op")

    def change(branch, table, value):
        apply_changes_on_branch(spark, spark.createDataFrame([(1, value, "U")], "id bigint, v string, _op string"),
                                spec, branch=branch, base_schema=meta, identifier=table, meta_schema=meta)

    def rows(relation):
        return sorted(tuple(r) for r in spark.table(relation).collect())

    create_branch(spark, name="dev", meta_schema=meta, models=models)
    create_branch(spark, name="feat", parent="dev", meta_schema=meta, models=models)
    try:
        change("feat", "t1", "f")
        assert merge_branch(spark, name="feat", meta_schema=meta, models=models).conflicts == 0
        assert rows(f"{meta}__br_dev.t1") == [(1, "f"), (2, "b")] and rows(f"{meta}.t1") == [(1, "a"), (2, "b")]
        drop_branch(spark, name="feat", meta_schema=meta)
        assert merge_branch(spark, name="dev", meta_schema=meta).conflicts == 0  # t1 merged, t2 untouched
        assert rows(f"{meta}.t1") == [(1, "f"), (2, "b")]
        assert merge_branch(spark, name="dev", meta_schema=meta).conflicts == 0  # nothing to merge
        change("dev", "t2", "y")
        result = merge_branch(spark, name="dev", meta_schema=meta, on_conflict="theirs")
        assert result.conflicts == 0, result.describe()
        assert rows(f"{meta}.t2") == [(1, "y"), (2, "b")]
    finally:
        for name in ("feat", "dev"):
            with contextlib.suppress(BranchError):  # feat is dropped once merged
                drop_branch(spark, name=name, meta_schema=meta)
