"""The narrowing of a snapshot run (``partialcow/dbt_adapter/snapshot_narrow.py``), case by case on Spark: which
records reach dbt's staging query. The dbt-level proof that narrowed runs write what dbt-spark's full query writes is
in ``tests/functional/snapshot_cases.py`` (partial copy-on-write against ``snapshot_write='merge'``) and dbt's own
snapshot suites, which all run narrowed."""

from __future__ import annotations

import pytest

from partialcow.dbt_adapter.snapshot_narrow import (
    candidate_keys_sql,
    narrowed_source_sql,
    narrowed_target_sql,
    plan_narrowing,
)

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

META = {"dbt_valid_to": "dbt_valid_to", "dbt_valid_from": "dbt_valid_from", "dbt_is_deleted": "dbt_is_deleted"}
T0, T1 = "timestamp'2026-01-01 00:00:00'", "timestamp'2026-02-01 00:00:00'"

# (case, source row or None, snapshot versions [(a, b, upd, valid_from, valid_to or None, is_deleted)],
#  candidate for check_cols='all', for check_cols=['a'], for timestamp); the source row is (a, b, upd)
CASES = [
    ("unchanged", (1, 1, T0), [(1, 1, T0, T0, None, "False")], False, False, False),
    ("checked value changed", (2, 1, T0), [(1, 1, T0, T0, None, "False")], True, True, False),
    ("NULL became a value", (1, 1, T0), [(None, 1, T0, T0, None, "False")], True, True, False),
    ("value became NULL", (None, 1, T0), [(1, 1, T0, T0, None, "False")], True, True, False),
    ("NULLs swapped places", (1, None, T0), [(None, 1, T0, T0, None, "False")], True, True, False),
    ("unchecked value changed", (1, 2, T0), [(1, 1, T0, T0, None, "False")], True, False, False),
    ("new record", (1, 1, T0), [], True, True, True),
    ("deleted from the source", None, [(1, 1, T0, T0, None, "False")], True, True, True),
    ("current version is a deletion record", (1, 1, T0), [(1, 1, T0, T0, None, "True")], True, True, True),
    ("only a closed version differs", (1, 1, T0), [(5, 5, T0, T0, T1, "False"), (1, 1, T0, T0, None, "False")],
     False, False, False),
    # the snapshot's validity started before the source's updated_at (a strategy switched from check)
    ("valid_from before updated_at", (1, 1, T1), [(1, 1, T1, T0, None, "False")], False, False, True),
]
STRATEGIES = {"check_all": ("check", "all", 3), "check_a": ("check", ["a"], 4), "timestamp": ("timestamp", None, 5)}


def _sql_value(v: object) -> str:
    return "null" if v is None else str(v)


@pytest.fixture(scope="module")
def tables(spark, schema):
    source, target = [], []
    for key, (_, src, versions, *_) in enumerate(CASES):
        if src is not None:
            source.append(f"({key}L, {', '.join(_sql_value(v) for v in src)})")
        for a, b, upd, valid_from, valid_to, deleted in versions:
            target.append(f"({key}L, {_sql_value(a)}, {_sql_value(b)}, {upd}, {valid_from}, "
                          f"{_sql_value(valid_to)}, '{deleted}')")
    source.append("(null, 7, 7, timestamp'2026-01-01 00:00:00')")  # a NULL key never joins in dbt's query
    target.append(f"(null, 7L, 7L, {T0}, {T0}, null, 'False')")  # nor in the snapshot: its rows are kept too
    spark.sql(f"create or replace table {schema}.narrow_src using iceberg as select * from values "
              f"{', '.join(source)} as t(id, a, b, upd)")
    spark.sql(f"create or replace table {schema}.narrow_snap using iceberg as "
              f"select id, cast(a as bigint) a, cast(b as bigint) b, upd, dbt_valid_from, "
              f"cast(dbt_valid_to as timestamp) dbt_valid_to, dbt_is_deleted from values {', '.join(target)} "
              f"as t(id, a, b, upd, dbt_valid_from, dbt_valid_to, dbt_is_deleted)")
    return f"select id, cast(a as bigint) a, cast(b as bigint) b, upd from {schema}.narrow_src", f"{schema}.narrow_snap"


def _joins(frame) -> list[str]:
    """The join operators of ``frame``'s executed plan (after adaptive execution re-planned it)."""
    import re

    final = frame._jdf.queryExecution().executedPlan().finalPhysicalPlan()  # the join has exchanges: adaptive
    return re.findall(r"\b(ShuffledHashJoin|SortMergeJoin|BroadcastHashJoin|BroadcastNestedLoopJoin)\b",
                      final.toString())


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_candidates_are_the_records_dbt_can_change(spark, tables, strategy):
    source_sql, target = tables
    target_columns = spark.table(target).columns
    source = spark.sql(source_sql)
    strategy_name, check_cols, column = STRATEGIES[strategy]
    plan, why = plan_narrowing(strategy_name=strategy_name, unique_key="id", check_cols=check_cols,
                               source_columns=source.columns,
                               source_types=[t for _, t in source.dtypes], target_columns=target_columns,
                               meta_columns=META, updated_at="upd", valid_to_current=None,
                               hard_deletes="new_record")
    assert plan is not None, why
    want = {key for key, case in enumerate(CASES) if case[column]} | {None}
    names = {key: case[0] for key, case in enumerate(CASES)}
    for shuffle_hash in (False, True):  # sort-merge join, or hash tables of the snapshot's side
        keys = spark.sql(candidate_keys_sql(plan, source_sql, target, shuffle_hash=shuffle_hash))
        got = {r[0] for r in keys.collect()}
        assert got == want, f"missing {[names[k] for k in want - got if k is not None]}, " \
                            f"extra {[names[k] for k in got - want if k is not None]}"
        joins = _joins(keys)
        assert joins == (["ShuffledHashJoin"] if shuffle_hash else ["SortMergeJoin"]), joins

    # the narrowed inputs: every row of a candidate record, and the NULL-key source row
    spark.createDataFrame([(k,) for k in got], "__pcow_k0 bigint").createOrReplaceTempView("narrow_keys")
    for broadcast in (True, False):  # few candidate keys go to every task, many are joined by a shuffle
        narrowed_source = spark.sql(narrowed_source_sql(plan, source_sql, "narrow_keys", broadcast=broadcast))
        assert narrowed_source.columns == source.columns
        assert sorted(r.id for r in narrowed_source.collect() if r.id is not None) == sorted(
            r.id for r in source.collect() if r.id is not None and r.id in got)
        assert narrowed_source.where("id is null").count() == 1
        narrowed_target = spark.sql(narrowed_target_sql(plan, target, target_columns, "narrow_keys",
                                                        broadcast=broadcast))
        assert narrowed_target.columns == target_columns
        assert sorted(narrowed_target.collect(), key=str) == sorted(spark.table(target).where(
            f"id in ({', '.join(map(str, got - {None}))}) or id is null").collect(), key=str)


def test_composite_keys_and_valid_to_current(spark, schema):
    spark.sql(f"create or replace table {schema}.narrow_ck using iceberg as select * from values "
              f"(1L, 'x', 1L, timestamp'9999-12-31 00:00:00'), (1L, 'y', 1L, timestamp'9999-12-31 00:00:00'), "
              f"(2L, 'x', 5L, timestamp'2026-01-01 00:00:00'), (2L, 'x', 2L, timestamp'9999-12-31 00:00:00') "
              f"as t(id, part, v, dbt_valid_to)")
    source_sql = "select * from values (1L, 'x', 1L), (1L, 'y', 9L), (2L, 'x', 2L) as t(id, part, v)"
    plan, _ = plan_narrowing(strategy_name="check", unique_key=["id", "part"], check_cols="all",
                             source_columns=["id", "part", "v"],
                             source_types=["bigint", "string", "bigint"],
                             target_columns=["id", "part", "v", "dbt_valid_to"], meta_columns=META, updated_at=None,
                             valid_to_current="timestamp'9999-12-31 00:00:00'")
    assert plan is not None
    got = {tuple(r) for r in spark.sql(candidate_keys_sql(plan, source_sql, f"{schema}.narrow_ck")).collect()}
    assert got == {(1, "y")}  # (2, 'x'): its closed version differs, its current one (valid_to_current) does not


@pytest.mark.parametrize(("change", "reason"), [
    ({"strategy_name": "custom"}, "strategy 'custom' is not check or timestamp"),
    ({"source_columns": ["id", "extra"], "source_types": ["bigint", "int"]},
     "the source has columns the snapshot lacks: extra"),
    ({"source_columns": ["id", "ID"], "source_types": ["bigint", "bigint"]},
     "the source has columns the snapshot lacks: ID"),
    ({"source_columns": ["id", "m"], "target_columns": ["id", "m", "dbt_valid_to"],
      "source_types": ["bigint", "map<string,int>"]}, "map columns cannot be compared: m"),
    # regressions: dbt calls every record changed when a check_cols entry is no query column; narrowed, no record
    # had a new version. Hashes of a timestamp_ntz and a timestamp (decimals of another scale) agree where dbt's
    # comparison sees a change
    ({"check_cols": ["upper(a)"], "source_columns": ["id", "a"], "source_types": ["bigint", "string"],
      "target_columns": ["id", "a", "dbt_valid_to"]}, "check_cols that are not query columns: upper(a)"),
    ({"source_columns": ["id", "ts"], "source_types": ["bigint", "timestamp_ntz"],
      "target_columns": ["id", "ts", "dbt_valid_to"], "target_types": ["bigint", "timestamp", "timestamp"]},
     "compared columns whose type changed: ts"),
    ({"check_cols": ["d"], "source_columns": ["id", "d"], "source_types": ["bigint", "decimal(10,3)"],
      "target_columns": ["id", "d", "dbt_valid_to"], "target_types": ["bigint", "decimal(10,2)", "timestamp"]},
     "compared columns whose type changed: d"),
])
def test_runs_dbt_reads_whole(change, reason):
    args = {"strategy_name": "check", "unique_key": "id", "check_cols": "all", "source_columns": ["id"],
            "source_types": ["bigint"],
            "target_columns": ["id", "dbt_valid_to"], "meta_columns": META, "updated_at": None,
            "valid_to_current": None}
    plan, why = plan_narrowing(**{**args, **change})
    assert plan is None and why == reason


# (case, source (arr, st), snapshot's current (arr, st), candidate): Spark's hashes skip NULL elements and fields and
# leave an array's length out, so a fingerprint of these values would call the first three unchanged
NESTED_CASES = [
    ("NULL element moved", ("array(1, null)", "named_struct('a', 1, 'b', 1)"),
     ("array(null, 1)", "named_struct('a', 1, 'b', 1)"), True),
    ("NULL element appended", ("array(1, null)", "named_struct('a', 1, 'b', 1)"),
     ("array(1)", "named_struct('a', 1, 'b', 1)"), True),
    ("NULL field moved", ("array(1)", "named_struct('a', 1, 'b', null)"),
     ("array(1)", "named_struct('a', null, 'b', 1)"), True),
    ("unchanged, with NULLs inside", ("array(null, 1)", "named_struct('a', null, 'b', 1)"),
     ("array(null, 1)", "named_struct('a', null, 'b', 1)"), False),
]


def test_nested_values_are_compared_whole(spark, schema):
    """Regression (reviewer's defect 3): check_cols='all' fingerprinted arrays and structs with Spark's hashes, and
    changes that only move or add NULLs inside them gave no candidate."""
    def rows(side: int) -> str:
        return " union all ".join(
            f"select {key}L as id, cast({case[side][0]} as array<int>) as arr, "
            f"cast({case[side][1]} as struct<a:int,b:int>) as st, 1L as v" for key, case in enumerate(NESTED_CASES))

    source_sql = rows(1)
    spark.sql(f"create or replace table {schema}.narrow_nested using iceberg as "
              f"select *, cast(null as timestamp) as dbt_valid_to from ({rows(2)})")
    source = spark.sql(source_sql)
    for check_cols in ("all", ["arr", "st"]):
        plan, why = plan_narrowing(strategy_name="check", unique_key="id", check_cols=check_cols,
                                   source_columns=source.columns, source_types=[t for _, t in source.dtypes],
                                   target_columns=[*source.columns, "dbt_valid_to"], meta_columns=META,
                                   updated_at=None, valid_to_current=None)
        assert plan is not None, why
        got = {r[0] for r in spark.sql(candidate_keys_sql(plan, source_sql, f"{schema}.narrow_nested")).collect()}
        assert got == {key for key, case in enumerate(NESTED_CASES) if case[3]}, check_cols


@pytest.mark.parametrize(("hard_deletes", "want"), [("ignore", set()), ("invalidate", {2, 3}), ("new_record", {2, 4})])
def test_records_gone_from_the_source_are_candidates_only_where_dbt_acts_on_them(spark, schema, hard_deletes, want):
    """Regression (a candidate set that only grew): with ``hard_deletes='ignore'`` dbt does nothing for a record
    the source no longer has, and with ``'new_record'`` nothing for one whose current version already records its
    deletion; every such record was a candidate on every run (read, pinned and fed to dbt's query). Keys: 1 the same
    on both sides; 2 gone from the source; 3 gone, its current version a deletion record; 4 back in the source after
    its deletion."""
    spark.sql(f"create or replace table {schema}.narrow_hd using iceberg as select * from values "
              "(1L, 'a', 'False', cast(null as timestamp)), (2L, 'b', 'False', null), (3L, 'c', 'True', null), "
              "(4L, 'd', 'True', null) as t(id, v, dbt_is_deleted, dbt_valid_to)")
    source_sql = "select * from values (1L, 'a'), (4L, 'd') as t(id, v)"
    plan, why = plan_narrowing(strategy_name="check", unique_key="id", check_cols=["v"], source_columns=["id", "v"],
                               source_types=["bigint", "string"],
                               target_columns=["id", "v", "dbt_is_deleted", "dbt_valid_to"], meta_columns=META,
                               updated_at=None, valid_to_current=None, hard_deletes=hard_deletes)
    assert plan is not None, why
    got = {r[0] for r in spark.sql(candidate_keys_sql(plan, source_sql, f"{schema}.narrow_hd")).collect()}
    assert got == want


def test_an_integer_column_widened_in_the_source_changes_no_fingerprint(spark, schema):
    """Regression: with ``check_cols='all'``, a snapshot column ``int`` against the source's ``bigint`` (widened,
    values unchanged) made every record a candidate on every run: Spark hashes an int and a bigint apart."""
    spark.sql(f"create or replace table {schema}.narrow_int using iceberg as select * from values "
              "(1L, 10, 'a', cast(null as timestamp)), (2L, 20, 'b', null) as t(id, v, w, dbt_valid_to)")
    source_sql = "select * from values (1L, 10L, 'a'), (2L, 21L, 'b') as t(id, v, w)"
    plan, why = plan_narrowing(strategy_name="check", unique_key="id", check_cols="all",
                               source_columns=["id", "v", "w"], source_types=["bigint", "bigint", "string"],
                               target_columns=["id", "v", "w", "dbt_valid_to"],
                               target_types=["bigint", "int", "string", "timestamp"], meta_columns=META,
                               updated_at=None, valid_to_current=None)
    assert plan is not None, why
    got = {r[0] for r in spark.sql(candidate_keys_sql(plan, source_sql, f"{schema}.narrow_int")).collect()}
    assert got == {2}


@pytest.mark.parametrize(("id2", "reason"), [(None, "have a null unique_key part"),
                                             ("a", "changed their check_cols but kept their updated_at")])
def test_a_reused_scd_id_is_refused_naming_its_cause(spark, id2, reason):
    """Regression: a timestamp snapshot whose key has a NULL part (dbt's query never matches it with its current
    version, so each run closes it as deleted and inserts it again with the same id) was refused as a check
    snapshot whose check_cols changed while its updated_at did not, a strategy and columns it does not have."""
    from dbt_common.exceptions import DbtRuntimeError

    from partialcow.dbt_adapter.snapshots import _refuse_reused_ids

    batch = spark.createDataFrame([(2, id2, "x", "insert"), (2, id2, "x", "delete" if id2 is None else "update"),
                                   (3, "b", "y", "insert")],
                                  "id int, id2 string, dbt_scd_id string, dbt_change_type string")
    strategy = {"unique_key": ["id", "id2"], "updated_at": "upd"}
    with pytest.raises(DbtRuntimeError, match=f"record\\(s\\) id=2, id2={id2!r} {reason}"):
        _refuse_reused_ids(batch, "dbt_scd_id", "snap", strategy)
    _refuse_reused_ids(batch.where("id = 3"), "dbt_scd_id", "snap", strategy)  # nothing reused: no refusal
