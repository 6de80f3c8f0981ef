"""Bad batches and refused tables: a clear error (model, column, sample keys) and the table and its index untouched.

"Untouched" is checked from outside the pipeline: the table's current snapshot id, its rows, every file under the
table folder (data files and the ``_partialcow_index`` folder: names and sizes) before and after the failed write.
Most cases run through the library (``apply_changes``, what the materialization calls); the dbt class checks that
the errors reach dbt with the model's name and that the model keeps working after failed runs.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from pathlib import Path

import pytest
from dbt.tests.util import run_dbt

from partialcow.exceptions import ChangeFeedError, UnsupportedFileError, UnsupportedTableFeatureError
from partialcow.index import RowIndex
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import local_path, open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("k1", "k2"), op_column="_op", sequence_column="_ts", model="bad_feed",
                  on_schema_change="fail")
BASE_ROWS = [(i, k2, i * 10, f"n{i}{k2}", "I", 1) for i in range(1, 11) for k2 in ("a", "b")]
SCHEMA = "k1 bigint, k2 string, v int, name string, _op string, _ts bigint"


def table_state(spark, name: str) -> tuple:
    """Everything a failed write must leave as it was: snapshot id, rows, every file under the table folder."""
    snapshot = spark.sql(f"select snapshot_id from {name}.snapshots order by committed_at desc limit 1").collect()
    rows = sorted(tuple(r) for r in spark.table(name).collect())
    location = local_path(spark.sql(f"describe table extended {name}").where("col_name = 'Location'").first()[1])
    files = sorted(
        (os.path.relpath(os.path.join(d, f), location), os.path.getsize(os.path.join(d, f)))
        for d, _, names in os.walk(location) for f in names
    )
    assert any(p.startswith("_partialcow_index") for p, _ in files), "the table has no row index to protect"
    return snapshot, rows, files


@pytest.fixture(scope="module")
def base_table(spark):
    schema = f"pcow_bad_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    create_table(spark, name, spark.createDataFrame(BASE_ROWS, SCHEMA), SPEC)
    yield name
    spark.sql(f"drop schema {schema} cascade")


# (case, change rows as SQL, spec changes, fragments the message must contain)
CASES = [
    ("null key", "select cast(null as bigint) k1, 'x' k2, 1 v, 'n' name, 'U' _op, 5L _ts "
                 "union all select 1, 'a', 2, 'n', 'U', 5", {}, ["bad_feed", "k1", "k2='x'", "null"]),
    # without a sequence column the checks count per key (one job): the same messages
    ("null key without sequence_column", "select cast(null as bigint) k1, 'x' k2, 1 v, 'n' name, 'U' _op "
     "union all select cast(null as bigint), 'x', 3, 'n', 'U' union all select 1, 'a', 2, 'n', 'U'",
     {"sequence_column": None}, ["bad_feed", "k1", "2 row(s)", "k2='x'", "null"]),
    ("op code outside the configured ones without sequence_column", "select 4L k1, 'a' k2, 1 v, 'n' name, 'X' _op "
     "union all select 5L, 'a', 1, 'n', 'U'", {"sequence_column": None}, ["bad_feed", "'_op'", "'X'", "(k1=4, k2='a')"]),
    ("key column missing", "select 1L k1, 2 v, 'n' name, 'U' _op, 5L _ts", {}, ["bad_feed", "'k2'", "missing"]),
    # _ts is a plain column here (the table has it): the batch's only problem is the repeated key
    ("duplicate keys without sequence_column", "select 2L k1, 'b' k2, 1 v, 'n' name, 'U' _op, 5L _ts union all "
     "select 2L, 'b', 2, 'n', 'U', 5L union all select 3L, 'a', 3, 'n', 'U', 5L", {"sequence_column": None},
     ["bad_feed", "(k1=2, k2='b')", "sequence_column"]),
    ("tie on the latest sequence", "select 2L k1, 'b' k2, 1 v, 'n' name, 'U' _op, 7L _ts union all "
     "select 2L, 'b', 2, 'n', 'D', 7L union all select 2L, 'b', 3, 'n', 'U', 6L", {},
     ["bad_feed", "(k1=2, k2='b')", "'_ts'"]),
    ("op code outside the configured ones", "select 4L k1, 'a' k2, 1 v, 'n' name, 'X' _op, 5L _ts union all "
     "select 5L, 'a', 1, 'n', 'U', 5L", {}, ["bad_feed", "'_op'", "'X'", "(k1=4, k2='a')", "op_codes"]),
    ("value not castable to the column type", "select 6L k1, 'a' k2, 'six' v, 'n' name, 'U' _op, 5L _ts union all "
     "select 7L, 'a', '7', 'n', 'U', 5L", {}, ["bad_feed", "'v'", "'six'", "int", "(k1=6, k2='a')"]),
    ("new column with on_schema_change=fail", "select 8L k1, 'a' k2, 1 v, 'n' name, 2.5d extra, 'U' _op, 5L _ts",
     {}, ["bad_feed", "extra", "on_schema_change"]),
]


@pytest.mark.parametrize("case, sql, spec_changes, fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_batch_is_refused_and_nothing_changes(spark, base_table, case, sql, spec_changes, fragments):
    from dataclasses import replace

    before = table_state(spark, base_table)
    spec = replace(SPEC, **spec_changes)
    with pytest.raises(ChangeFeedError) as info:
        apply_changes(spark, open_table(spark, base_table, table_format="iceberg"), spark.sql(sql), spec)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{case}: {fragment!r} not in {message!r}"
    assert table_state(spark, base_table) == before


def test_position_deletes_on_a_file_to_rewrite_are_refused(spark, base_table):
    """A merge-on-read DELETE attaches a position delete file; rewriting that data file would resurrect the row."""
    name = base_table + "_mor"
    create_table(spark, name, spark.createDataFrame(BASE_ROWS, SCHEMA), SPEC)
    spark.sql(f"alter table {name} set tblproperties ('write.delete.mode'='merge-on-read')")
    spark.sql(f"delete from {name} where k1 = 1 and k2 = 'a'")
    assert spark.sql(f"select * from {name}.delete_files").count() == 1  # the setup did what this test is about
    table = open_table(spark, name, table_format="iceberg")
    # a first (refused) attempt may bring the index up to the DELETE: compare with the state after that
    update = spark.sql("select 2L k1, 'a' k2, 99 v, 'n2a' name, 'U' _op, 5L _ts")
    with pytest.raises(UnsupportedTableFeatureError):
        apply_changes(spark, table, update, SPEC)
    before = table_state(spark, name)
    with pytest.raises(UnsupportedTableFeatureError) as info:
        apply_changes(spark, open_table(spark, name, table_format="iceberg"), update, SPEC)
    message = str(info.value)
    assert name in message and "position delete" in message and "rewrite_data_files" in message
    assert message.startswith("model bad_feed: "), message  # regression: the table's refusals named no model
    assert table_state(spark, name) == before
    assert (1, "a") not in {(r[0], r[1]) for r in before[1]} and len(before[1]) == len(BASE_ROWS) - 1

    # Rows in files without delete files can still change: new keys go to a new file, which a later batch updates.
    apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                  spark.sql("select 50L k1, 'a' k2, 500 v, 'n50a' name, 'I' _op, 5L _ts"), SPEC)
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                            spark.sql("select 50L k1, 'a' k2, 501 v, 'n50a' name, 'U' _op, 6L _ts"), SPEC)
    assert metrics.rows_updated == 1 and metrics.files_rewritten == 1
    rows = {(r["k1"], r["k2"]): r["v"] for r in spark.table(name).collect()}
    assert rows[(50, "a")] == 501 and rows[(2, "a")] == 20 and (1, "a") not in rows

    # Compacting the table (the fix the message names) makes the refused update possible.
    spark.sql(f"call spark_catalog.system.rewrite_data_files(table => '{name}', options => map('rewrite-all', 'true', "
              "'delete-file-threshold', '1'))")
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"), update, SPEC)
    assert metrics.rows_updated == 1
    rows = {(r["k1"], r["k2"]): r["v"] for r in spark.table(name).collect()}
    assert rows[(2, "a")] == 99 and (1, "a") not in rows and len(rows) == len(BASE_ROWS)


BAD_MODEL = """
{{ config(materialized='partial_cow_incremental', unique_key=var('key', ['k1', 'k2']), op_column='_op',
          sequence_column='_ts', on_schema_change='fail', file_format=var('file_format', 'iceberg'),
          partition_by=var('partition_by', none), incremental_predicates=var('predicates', none),
          location_root=var('location_root', none)) }}
{% set case = var('case', 'base') %}
{% if case == 'base' %}
select * from values (1L, 'a', 10, 'I', 1L), (2L, 'a', 20, 'I', 1L), (3L, 'b', 30, 'I', 1L) as t(k1, k2, v, _op, _ts)
{% elif case == 'null_key' %}
select * from values (cast(null as bigint), 'a', 11, 'U', 2L), (2L, 'a', 21, 'U', 2L) as t(k1, k2, v, _op, _ts)
{% elif case == 'unreadable' %}
select * from partialcow_no_such_relation
{% elif case == 'new_column' %}
select *, 'x' as extra from values (2L, 'a', 22, 'U', 2L) as t(k1, k2, v, _op, _ts)
{% else %}
select * from values (2L, 'a', 23, 'U', 3L), (3L, 'b', 0, 'D', 3L), (4L, 'c', 40, 'U', 3L) as t(k1, k2, v, _op, _ts)
{% endif %}
"""


@pytest.mark.dbt
class TestBadInputThroughDbt:
    @pytest.fixture(scope="class")
    def models(self):
        return {"bad_feed.sql": BAD_MODEL}

    def test_errors_name_the_model_and_later_runs_work(self, project, spark):
        relation = f"{project.test_schema}.bad_feed"
        run_dbt(["run"])
        # a bad config is refused before the model's SQL runs (that SQL would fail first, naming no setting)
        for case, fragments in [("{case: unreadable, file_format: hudi}", ["bad_feed", "file_format='hudi'",
                                                                          "iceberg or delta"]),
                                ("{case: unreadable, key: []}", ["bad_feed", "needs unique_key"]),
                                # regression: settings partial copy-on-write cannot honour were silently ignored
                                ("{case: unreadable, partition_by: k2}", ["bad_feed", "partition_by", "unpartitioned"]),
                                ("{case: unreadable, predicates: ['k1 > 0']}", ["bad_feed", "incremental_predicates"]),
                                ("{case: unreadable, location_root: /tmp/elsewhere}", ["bad_feed", "location_root"]),
                                ("{case: null_key}", ["bad_feed", "k1", "null"]),
                                ("{case: unreadable}", ["bad_feed", "partialcow_no_such_relation"]),
                                ("{case: new_column}", ["bad_feed", "extra", "on_schema_change='fail'"])]:
            before = table_state(spark, relation)
            results = run_dbt(["run", "--vars", case], expect_pass=False)
            message = results.results[0].message
            for fragment in fragments:
                assert fragment in message, f"{case}: {fragment!r} not in {message!r}"
            assert table_state(spark, relation) == before
        run_dbt(["run", "--vars", "case: good"])
        assert sorted(tuple(r) for r in spark.table(relation).collect()) == [(1, "a", 10, 1), (2, "a", 23, 3),
                                                                             (4, "c", 40, 3)]
        assert Path(project.project_root, "target", "run_results.json").exists()


@pytest.mark.parametrize("sql, fragments", [
    ("select 6L k1, 'a' k2, 1099511627776L v, 'n' name, 'U' _op, 5L _ts union all "
     "select 7L, 'a', 7L, 'n', 'U', 5L", ["bad_feed", "'v'", "1099511627776", "(k1=6, k2='a')"]),
    ("select 6L k1, 'a' k2, 'six' v, 'n' name, 'U' _op, 5L _ts", ["bad_feed", "'v'", "'six'", "(k1=6, k2='a')"]),
    # regression: the driver path hashed the raw key cast to the key's type in the checks' own query
    ("select 1e30D k1, 'a' k2, 1 v, 'n' name, 'U' _op, 5L _ts", ["bad_feed", "'k1'", "1e+30", "(k1=1e+30, k2='a')"]),
], ids=["overflow", "not a number", "key overflow"])
def test_values_the_column_cannot_hold_are_named_with_ansi_on(spark, base_table, sql, fragments):
    """Regression: with ``spark.sql.ansi.enabled`` (a profile's spark_config; Spark 4's default) the driver path
    evaluated the conversions with the checks, so a value that does not fit failed the Spark job with
    CAST_OVERFLOW (no column, no keys) instead of the error the Spark path gives."""
    from dataclasses import replace

    before = table_state(spark, base_table)
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        with pytest.raises(ChangeFeedError) as info:
            apply_changes(spark, open_table(spark, base_table, table_format="iceberg"), spark.sql(sql),
                          replace(SPEC, on_schema_change="ignore"))
    finally:
        spark.conf.unset("spark.sql.ansi.enabled")
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert table_state(spark, base_table) == before


def test_a_column_of_no_type_is_refused_before_anything_is_written(spark, base_table):
    """A bare NULL in a first build's query is Spark's void type: Iceberg failed deep in its table creation, and a
    Delta table stored a column no later value could fill (``tests/delta_spark/test_delta_dbt.py`` checks that
    format). A new table is not created; a full refresh leaves the table as it was."""
    spec = ChangeSpec(key_columns=("k1",), model="untyped")
    schema = base_table.split(".")[0]
    untyped = spark.sql("select 1L k1, null n, array(null) tags, 'x' name")
    with pytest.raises(ChangeFeedError, match=r"model untyped: column\(s\) n, tags.element have no type .*"
                                              r"cast\(null as int\) as n"):
        create_table(spark, f"{schema}.untyped", untyped, spec)
    assert not spark.catalog.tableExists(f"{schema}.untyped")
    before = table_state(spark, base_table)
    with pytest.raises(ChangeFeedError, match="n, tags.element have no type"):
        create_table(spark, base_table, untyped, spec)
    assert table_state(spark, base_table) == before
    # a batch adding such a column (append_new_columns): refused before the table's schema changes
    evolving = dataclasses.replace(SPEC, on_schema_change="append_new_columns")
    batch = spark.sql("select 1L k1, 'a' k2, 11 v, 'n1a' name, 'U' _op, 9L _ts, null extra")
    with pytest.raises(ChangeFeedError, match=r"model bad_feed: column\(s\) extra have no type"):
        apply_changes(spark, open_table(spark, base_table, table_format="iceberg"), batch, evolving)
    assert table_state(spark, base_table) == before


@pytest.mark.parametrize("file_format", ["orc", "avro"])
def test_a_file_another_writer_added_in_another_format_is_refused_by_name(spark, file_format):
    """Iceberg takes ORC and Avro data files from other writers (``write.format.default``). A batch touching one
    failed with pyarrow's "Parquet magic bytes not found in footer" (an unnamed error on the driver path, a failed
    Spark job on the other), whether it also inserted rows (the new rows go into a touched file) or not. Now the
    file is named with the fix, nothing changes, and after the fix the batch applies."""
    schema = f"pcow_fmt_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    try:
        create_table(spark, name, spark.createDataFrame(BASE_ROWS, SCHEMA), SPEC)
        spark.sql(f"alter table {name} set tblproperties ('write.format.default'='{file_format}')")
        spark.sql(f"insert into {name} values (60, 'a', 600, 'n60a', 1)")
        RowIndex.open(open_table(spark, name, table_format="iceberg").format_table).ensure_fresh()  # knows the file
        before = table_state(spark, name)
        for sql in ("select 60L k1, 'a' k2, 601 v, 'n60a' name, 'U' _op, 5L _ts",
                    "select 60L k1, 'a' k2, 601 v, 'n60a' name, 'U' _op, 5L _ts union all "
                    "select 61L, 'a', 610, 'n61a', 'I', 5L"):
            with pytest.raises(UnsupportedFileError, match=r"bad_feed.*is not a Parquet file \(ORC or Avro.*"
                                                           r"'write.format.default'='parquet'.*rewrite_data_files"):
                apply_changes(spark, open_table(spark, name, table_format="iceberg"), spark.sql(sql), SPEC)
            assert table_state(spark, name) == before
        spark.sql(f"alter table {name} set tblproperties ('write.format.default'='parquet')")
        spark.sql(f"call spark_catalog.system.rewrite_data_files(table => '{name}', "
                  "options => map('rewrite-all', 'true'))")
        metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"), spark.sql(sql), SPEC)
        assert (metrics.rows_updated, metrics.rows_inserted) == (1, 1)
        rows = {(r["k1"], r["k2"]): r["v"] for r in spark.table(name).collect()}
        assert rows[(60, "a")] == 601 and rows[(61, "a")] == 610 and len(rows) == len(BASE_ROWS) + 2
    finally:
        spark.sql(f"drop schema {schema} cascade")

