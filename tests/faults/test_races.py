"""Our writes racing Spark SQL writers (MERGE, DELETE, rewrite_data_files) on the same Iceberg table.

Lost and false conflicts are told apart: when the other writer committed first and changed none of the batch's
keys (it rewrote the files we rewrite, deleted other rows, compacted), the batch is located again and committed
(``commit_retries``); when it changed one of them, ``CommitConflictError`` names the key and nothing of ours lands.
No update is ever lost and no deleted row comes back. Then the same writers race for real, in threads, through the
metastore's commit lock (see ``partialcow.spark.metastore``).
"""

from __future__ import annotations

import random
import threading
import uuid

import pytest
from budget import LONG
from partialcow.exceptions import CommitConflictError, UnsupportedTableFeatureError
from partialcow.index import RowIndex
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table
from partialcow.table.iceberg import IcebergTable
from tablestate import OtherWriterFirst, leftovers

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="racer")
SCHEMA = "k bigint, v bigint, _op string"
ROUNDS = 20 if LONG else 3


@pytest.fixture()
def table(spark):
    """Keys 0..199 in one data file, 1000..1199 in another; v = k."""
    schema = f"pcow_race_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    create_table(spark, name, spark.createDataFrame([(k, k, "I") for k in range(200)], SCHEMA), SPEC)
    apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                  spark.createDataFrame([(k, k, "I") for k in range(1000, 1200)], SCHEMA), SPEC)
    yield name
    spark.sql(f"drop schema {schema} cascade")


def _rows(spark, name):
    return {r["k"]: r["v"] for r in spark.table(name).collect()}


def _consistent(spark, name, expected):
    assert _rows(spark, name) == expected
    # after another writer's commit the index repairs itself, under a write lease as the next write does (whose
    # end also removes the bucket files no kept index state references)
    with open_table(spark, name, table_format="iceberg").write_lease():
        index = RowIndex.open(IcebergTable(spark, name))
        index.ensure_fresh()
    assert index.verify().ok
    assert leftovers(spark, name) == []


def _ours_after(spark, name, other_sql, our_rows):
    table = open_table(spark, name, table_format="iceberg")
    table.format_table = OtherWriterFirst(table.format_table, lambda: spark.sql(other_sql.format(t=name)))
    return apply_changes(spark, table, spark.createDataFrame(our_rows, SCHEMA), SPEC)


MERGE = ("MERGE INTO {{t}} t USING (SELECT {k}L AS k, {v}L AS v) s ON t.k = s.k "
         "WHEN MATCHED THEN UPDATE SET v = s.v")

# (case, the other writer's SQL, what it does to the rows)
DISJOINT = [
    ("MERGE of another key in the same file", MERGE.format(k=7, v=70), {7: 70}),
    ("DELETE of another key in the same file", "DELETE FROM {t} WHERE k = 8", {8: None}),
    ("compaction of every file", "CALL spark_catalog.system.rewrite_data_files(table => '{t}', "
     "options => map('rewrite-all', 'true'))", {}),
]


@pytest.mark.parametrize("case, other_sql, effect", DISJOINT, ids=[c[0] for c in DISJOINT])
def test_a_commit_beaten_by_a_writer_of_other_keys_is_retried(spark, table, case, other_sql, effect):
    metrics = _ours_after(spark, table, other_sql, [(5, 500, "U"), (1005, 1500, "U"), (6, 0, "D"), (300, 3, "I")])
    assert metrics.commit_retries == 1, case
    assert (metrics.rows_updated, metrics.rows_deleted, metrics.rows_inserted) == (2, 1, 1)
    expected = {k: k for k in [*range(200), *range(1000, 1200)]}
    expected.update({5: 500, 1005: 1500, 300: 3})
    del expected[6]
    for k, v in effect.items():
        if v is None:
            del expected[k]
        else:
            expected[k] = v
    _consistent(spark, table, expected)


@pytest.mark.parametrize("other_sql, what", [(MERGE.format(k=5, v=55), 55), ("DELETE FROM {t} WHERE k = 5", None)],
                         ids=["MERGE", "DELETE"])
def test_a_commit_beaten_by_a_writer_of_the_same_key_conflicts(spark, table, other_sql, what):
    with pytest.raises(CommitConflictError) as info:
        _ours_after(spark, table, other_sql, [(5, 500, "U"), (1005, 1500, "U")])
    assert "(k=5)" in str(info.value) and "racer" in str(info.value)
    expected = {k: k for k in [*range(200), *range(1000, 1200)]}
    if what is None:
        del expected[5]
    else:
        expected[5] = what
    _consistent(spark, table, expected)  # the other writer's change, whole; none of ours


def _position_delete(spark, table: str, key: int) -> None:
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')")
    spark.sql(f"DELETE FROM {table} WHERE k = {key}")


def _equality_delete(spark, table: str, key: int) -> None:
    from tablestate import commit_equality_delete

    commit_equality_delete(spark, table, "k", [key])


@pytest.mark.parametrize("delete", ["equality delete", "position delete"])
def test_a_delete_file_for_another_key_beaten_to_the_commit_is_not_undone(spark, table, delete):
    """Regression (the equality delete): a writer of equality deletes (Flink's upserts; Spark writes position
    deletes) deleted key 8 while our batch rewrote the file holding keys 0..199 for key 5: our commit landed and key
    8 came back. Now the commit conflicts; located again, the file has a delete file attached, which partial
    rewrites refuse by name (compaction first), and nothing of ours lands. A merge-on-read ``DELETE`` (a position
    delete file) takes the same way."""
    target = open_table(spark, table, table_format="iceberg")
    other = _equality_delete if delete == "equality delete" else _position_delete
    target.format_table = OtherWriterFirst(target.format_table, lambda: other(spark, table, 8))
    with pytest.raises(UnsupportedTableFeatureError, match="delete files attached"):
        apply_changes(spark, target, spark.createDataFrame([(5, 500, "U")], SCHEMA), SPEC)
    _consistent(spark, table, {k: k for k in [*range(200), *range(1000, 1200)] if k != 8})


def test_writers_racing_in_threads_lose_nothing(spark, table):
    """Our batch and a Spark MERGE in two threads at once, ROUNDS times, sometimes on a shared key.

    Whatever the interleaving, the table ends as if the writes that did not fail ran one after the other.
    """
    rnd = random.Random(11)
    state = {k: k for k in [*range(200), *range(1000, 1200)]}
    for round_ in range(ROUNDS):
        ours = {k: rnd.randrange(10**6) for k in rnd.sample(sorted(state), 3)}
        theirs_key = rnd.choice([*ours] if round_ % 2 else sorted(set(state) - set(ours)))
        theirs_value = rnd.randrange(10**6)
        errors: dict[str, BaseException] = {}

        def run_ours():
            try:
                apply_changes(spark, open_table(spark, table, table_format="iceberg"),
                              spark.createDataFrame([(k, v, "U") for k, v in ours.items()], SCHEMA), SPEC)
            except BaseException as exc:  # noqa: BLE001 - inspected below
                errors["ours"] = exc

        def run_theirs():
            try:
                spark.sql(MERGE.format(k=theirs_key, v=theirs_value).format(t=table))
            except BaseException as exc:  # noqa: BLE001
                errors["theirs"] = exc

        threads = [threading.Thread(target=run_ours), threading.Thread(target=run_theirs)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert "ours" not in errors or isinstance(errors["ours"], CommitConflictError), errors
        got = _rows(spark, table)
        outcomes = []
        for ours_landed in ([True, False] if "ours" in errors else [True]):
            for theirs_landed in ([True, False] if "theirs" in errors else [True]):
                for order in ("ours first", "theirs first"):
                    s = dict(state)
                    steps = [("o", ours_landed), ("t", theirs_landed)]
                    if order == "theirs first":
                        steps.reverse()
                    for who, landed in steps:
                        if landed and who == "o":
                            s.update(ours)
                        elif landed and who == "t":
                            s[theirs_key] = theirs_value
                    outcomes.append(s)
        assert got in outcomes, f"round {round_}: a lost update or a resurrected row ({errors})"
        if "ours" not in errors:
            assert all(got[k] == v for k, v in ours.items() if k != theirs_key)
        state = got
    assert RowIndex.open(IcebergTable(spark, table)).ensure_fresh() is not None
    assert RowIndex.open(IcebergTable(spark, table)).verify().ok


def test_a_writer_of_the_same_timestamp_ntz_key_conflicts_whatever_the_process_time_zone(spark, monkeypatch):
    """Regression: after a lost commit race the driver path re-read its batch's keys through pandas without a schema,
    so a ``timestamp_ntz`` key became a zoned timestamp read in the Python process's time zone. Where that is not the
    session's (UTC), the key matched no row, the other writer's change of it looked like none, and the retry wrote
    over it."""
    import time

    schema = f"pcow_ntz_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="racer")
    rows = "select timestamp_ntz'2024-01-01 10:00:00' + make_interval(0, 0, 0, 0, id) as k, id as v, 'I' as _op " \
           "from range(20)"
    try:
        create_table(spark, name, spark.sql(rows), spec)
        monkeypatch.setenv("TZ", "America/Los_Angeles")
        time.tzset()
        table = open_table(spark, name, table_format="iceberg")
        table.format_table = OtherWriterFirst(table.format_table, lambda: spark.sql(
            f"UPDATE {name} SET v = 55 WHERE k = timestamp_ntz'2024-01-01 15:00:00'"))
        ours = spark.sql("select timestamp_ntz'2024-01-01 15:00:00' as k, 500L as v, 'U' as _op")
        with pytest.raises(CommitConflictError, match="racer"):
            apply_changes(spark, table, ours, spec)
        assert spark.sql(f"select v from {name} where k = timestamp_ntz'2024-01-01 15:00:00'").first()[0] == 55
    finally:
        monkeypatch.undo()
        time.tzset()
        spark.sql(f"drop schema {schema} cascade")


def test_a_table_with_a_map_column_retries_after_a_writer_of_other_keys(spark):
    """Regression: the check that another writer changed none of the batch's keys compared rows with a set
    operation, which Spark refuses on map columns: a safe retry failed with "Cannot have map type columns"."""
    schema = f"pcow_map_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="racer")
    rows = "select id as k, map('a', id) as m, struct(map('b', id) as inner) as s, 'I' as _op from range(50)"
    try:
        create_table(spark, name, spark.sql(rows), spec)
        table = open_table(spark, name, table_format="iceberg")
        table.format_table = OtherWriterFirst(table.format_table, lambda: spark.sql(
            f"UPDATE {name} SET m = map('a', 77) WHERE k = 7"))
        ours = spark.sql("select 5L as k, map('a', 500L) as m, struct(map('b', 500L) as inner) as s, 'U' as _op")
        assert apply_changes(spark, table, ours, spec).commit_retries == 1
        got = {r.k: r.m["a"] for r in spark.table(name).collect()}
        assert got[5] == 500 and got[7] == 77 and len(got) == 50
    finally:
        spark.sql(f"drop schema {schema} cascade")
