"""Bad batches through ``apply_changes``: the exact error class, a message naming model, column and keys, and the
table exactly as it was (snapshot, rows, every file under its folder, index included).

Each case is one batch, written as the columns that differ from a valid change row (``row``). The casting cases
are the issue's list of values that used to be stored wrong (wrapped, rounded, truncated, compared as text).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from partialcow.exceptions import ChangeFeedError, ConfigurationError, PartialCowError, RepeatedKeysError
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table
from tablestate import location, table_state

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", sequence_column="_ts", model="bad_feed")
VALID = {
    "k": "1L", "name": "'n'", "i": "1", "d": "cast(1.50 as decimal(12,2))", "ts": "timestamp'2021-01-01 00:00:00'",
    "flag": "true", "_op": "'U'", "_ts": "5L",
}


def row(**columns: str | None) -> str:
    """A change row as SQL: the valid row with ``columns`` replaced (None drops a column)."""
    values = {**VALID, **columns}
    return "select " + ", ".join(f"{expr} as {name}" for name, expr in values.items() if expr is not None)


def rows(*selects: str) -> str:
    return " union all ".join(selects)


# (case, batch SQL, spec changes, error class, fragments the message must contain)
CASES = [
    # keys
    ("null key", rows(row(k="cast(null as bigint)"), row(k="2L")), {}, ChangeFeedError, ["bad_feed", "'k'", "null"]),
    ("key column missing", row(k=None), {}, ChangeFeedError, ["bad_feed", "'k'", "missing"]),
    # regression: a unique_key renamed to a column the table lacks failed in the index build with Spark's
    # UNRESOLVED_COLUMN, or (append_new_columns) was about to be added with a null key in every row
    ("unique_key renamed to a new column", row(k=None, uid="1L"), {"key_columns": ("uid",)}, ChangeFeedError,
     ["bad_feed", "['uid']", "not columns of the table", "--full-refresh"]),
    ("unique_key renamed, with append_new_columns", row(k=None, uid="1L"),
     {"key_columns": ("uid",), "on_schema_change": "append_new_columns"}, ChangeFeedError,
     ["bad_feed", "['uid']", "not columns of the table"]),
    ("key 1.5 into a bigint key", row(k="1.5d"), {}, ChangeFeedError, ["bad_feed", "key column 'k'", "1.5", "bigint"]),
    ("key 10^25 into a bigint key", row(k="cast(1e25 as decimal(38,0))"), {}, ChangeFeedError,
     ["bad_feed", "key column 'k'", "bigint"]),
    ("key as string into a bigint key", row(k="'1'"), {}, ChangeFeedError, ["bad_feed", "'k'", "string", "bigint"]),
    ("duplicate keys without sequence_column", rows(row(), row(i="2")), {"sequence_column": None}, RepeatedKeysError,
     ["bad_feed", "(k=1)", "sequence_column"]),
    ("tie on the latest sequence", rows(row(), row(i="2"), row(_ts="4L")), {}, RepeatedKeysError,
     ["bad_feed", "(k=1)", "'_ts'"]),
    # op codes and sequence
    ("op column missing", row(_op=None), {}, ChangeFeedError, ["bad_feed", "'_op'", "missing"]),
    # regression: a column named with a dot failed inside PySpark's Arrow tasks, naming neither model nor a fix
    ("a column name with a dot", row(**{"`x.y`": "1"}), {}, ChangeFeedError, ["bad_feed", "['x.y']", "dot", "x_y"]),
    ("op code outside the configured ones", rows(row(_op="'X'"), row(k="2L")), {}, ChangeFeedError,
     ["bad_feed", "'_op'", "'X'", "(k=1)", "op_codes"]),
    ("null op code", row(_op="cast(null as string)"), {}, ChangeFeedError, ["bad_feed", "'_op'", "None"]),
    # regression: a first build kept only each key's latest change before looking at op codes
    ("op code outside the configured ones on a superseded change", rows(row(_op="'X'", _ts="1L"), row(_ts="2L")), {},
     ChangeFeedError, ["bad_feed", "'_op'", "'X'", "(k=1)"]),
    ("sequence column missing", row(_ts=None), {}, ChangeFeedError, ["bad_feed", "'_ts'", "missing"]),
    ("null sequence", row(_ts="cast(null as bigint)"), {}, ChangeFeedError, ["bad_feed", "'_ts'", "null", "(k=1)"]),
    # regression: the driver path picked one of two NaN changes of a key (Arrow's NaN ties with nothing), the Spark
    # path failed on the tie
    ("NaN sequence", rows(row(s2="cast('NaN' as double)"), row(s2="cast('NaN' as double)", i="2")),
     {"sequence_column": "s2"}, ChangeFeedError, ["bad_feed", "'s2'", "NaN", "(k=1)"]),
    ("string sequence compares as text", rows(row(_ts="'9'"), row(_ts="'10'", i="2")), {}, ChangeFeedError,
     ["bad_feed", "'_ts'", "string", "'9' > '10'"]),
    ("boolean sequence", row(_ts="true"), {}, ChangeFeedError, ["bad_feed", "'_ts'", "boolean"]),
    ("bigint sequence with text values", row(_ts="'2021-01-01'"), {}, ChangeFeedError, ["bad_feed", "'_ts'", "string"]),
    # values that used to be stored wrong
    ("2^40 into int", row(i="1099511627776L"), {}, ChangeFeedError, ["bad_feed", "'i'", "1099511627776", "int", "(k=1)"]),
    ("2^31 into int", row(i="2147483648L"), {}, ChangeFeedError, ["bad_feed", "'i'", "2147483648", "(k=1)"]),
    ("-2^31-1 into int", row(i="-2147483649L"), {}, ChangeFeedError, ["bad_feed", "'i'", "-2147483649"]),
    ("2.9 into int", row(i="2.9d"), {}, ChangeFeedError, ["bad_feed", "'i'", "2.9", "(k=1)"]),
    ("NaN into int", row(i="cast('NaN' as double)"), {}, ChangeFeedError, ["bad_feed", "'i'", "nan"]),
    ("1.235 into decimal(12,2)", row(d="1.235d"), {}, ChangeFeedError, ["bad_feed", "'d'", "1.235", "decimal(12,2)"]),
    ("decimal(10,3) 1.235 into decimal(12,2)", row(d="cast(1.235 as decimal(10,3))"), {}, ChangeFeedError,
     ["bad_feed", "'d'", "1.235"]),
    ("1e11 overflows decimal(12,2)", row(d="1e11d"), {}, ChangeFeedError, ["bad_feed", "'d'", "decimal(12,2)"]),
    ("infinity into decimal", row(d="cast('Infinity' as double)"), {}, ChangeFeedError, ["bad_feed", "'d'", "inf"]),
    ("bigint epoch into timestamp", row(ts="1622000000L"), {}, ChangeFeedError,
     ["bad_feed", "'ts'", "timestamp", "bigint", "1622000000"]),
    ("string into int", row(i="'six'"), {}, ChangeFeedError, ["bad_feed", "'i'", "'six'", "int", "(k=1)"]),
    ("numeric string into int", row(i="'7'"), {}, ChangeFeedError, ["bad_feed", "'i'", "string"]),
    ("int into string", row(name="42"), {}, ChangeFeedError, ["bad_feed", "'name'", "string", "int"]),
    ("string into timestamp", row(ts="'2021-06-07 08:09:10'"), {}, ChangeFeedError, ["bad_feed", "'ts'", "string"]),
    ("date string into date-less timestamp column", row(ts="date_format(current_date(), 'yyyy')"), {}, ChangeFeedError,
     ["bad_feed", "'ts'", "string"]),
    ("boolean into int", row(i="true"), {}, ChangeFeedError, ["bad_feed", "'i'", "boolean"]),
    ("int into boolean", row(flag="1"), {}, ChangeFeedError, ["bad_feed", "'flag'", "boolean"]),
    ("binary into string", row(name="cast('n' as binary)"), {}, ChangeFeedError, ["bad_feed", "'name'", "binary"]),
    ("array into int", row(i="array(1, 2)"), {}, ChangeFeedError, ["bad_feed", "'i'", "array<int>"]),
    ("struct into string", row(name="named_struct('a', 1)"), {}, ChangeFeedError, ["bad_feed", "'name'", "struct"]),
    # schema changes
    ("new column with on_schema_change=fail", row(extra="2.5d"), {"on_schema_change": "fail"}, ChangeFeedError,
     ["bad_feed", "extra", "on_schema_change='fail'", "'append_new_columns'", "--full-refresh"]),
    # regression: the driver path named the repeated key, the Spark path the schema change: both name the latter now
    ("new column with on_schema_change=fail and a repeated key", rows(row(extra="1"), row(extra="1", i="2")),
     {"on_schema_change": "fail", "sequence_column": None}, ChangeFeedError,
     ["bad_feed", "extra", "on_schema_change='fail'"]),
    # a batch that adds a column changes the table's schema only once it passed every check, repeats included
    ("new column with append_new_columns and a repeated key", rows(row(extra="1"), row(extra="1", i="2")),
     {"on_schema_change": "append_new_columns", "sequence_column": None}, RepeatedKeysError,
     ["bad_feed", "(k=1)", "sequence_column"]),
    ("new column with sync_all_columns and a tie on the latest sequence", rows(row(extra="1"), row(extra="2")),
     {"on_schema_change": "sync_all_columns"}, RepeatedKeysError, ["bad_feed", "(k=1)", "'_ts'"]),
    ("missing column with on_schema_change=fail", row(flag=None), {"on_schema_change": "fail"}, ChangeFeedError,
     ["bad_feed", "flag", "on_schema_change='fail'"]),
    ("narrowing type with on_schema_change=fail", row(i="cast(1 as bigint)"), {"on_schema_change": "fail"},
     ChangeFeedError, ["bad_feed", "'i'", "changed type", "--full-refresh"]),
    ("string value with on_schema_change=fail", row(i="'1'"), {"on_schema_change": "fail"}, ChangeFeedError,
     ["bad_feed", "'i'", "string"]),
    ("string value with on_schema_change=sync_all_columns", row(i="'1'"), {"on_schema_change": "sync_all_columns"},
     ChangeFeedError, ["bad_feed", "'i'", "string"]),
    ("narrowing type with on_schema_change=sync_all_columns", row(d="1.5d"), {"on_schema_change": "sync_all_columns"},
     ChangeFeedError, ["bad_feed", "'d'", "changed type"]),
    ("merge_update_columns names an unknown column", row(), {"update_columns": ("nope",)}, ChangeFeedError,
     ["bad_feed", "nope", "merge_update_columns"]),
    ("several bad values: the first column named, all counted", rows(row(i="2.5d"), row(k="2L", i="3.5d")), {},
     ChangeFeedError, ["bad_feed", "'i'", "2 value(s)"]),
]


@pytest.fixture(scope="module")
def base_table(spark):
    schema = f"pcow_badm_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    create_table(spark, name, spark.sql(rows(*[row(k=f"{i}L", i=str(i)) for i in range(1, 11)])), SPEC)
    yield name
    spark.sql(f"drop schema {schema} cascade")


def test_the_matrix_is_large_enough():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case, sql, spec_changes, error, fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_batch_is_refused_and_nothing_changes(spark, base_table, case, sql, spec_changes, error, fragments):
    before = table_state(spark, base_table)
    spec = replace(SPEC, **spec_changes)
    with pytest.raises(PartialCowError) as info:
        apply_changes(spark, open_table(spark, base_table, table_format="iceberg"), spark.sql(sql), spec)
    assert type(info.value) is error, f"{case}: {type(info.value).__name__}: {info.value}"
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{case}: {fragment!r} not in {message!r}"
    assert table_state(spark, base_table) == before


def test_lossless_widening_is_applied(spark, base_table, pipeline_path):
    """The other side of the rules: values that survive the conversion are stored exactly."""
    key = {"driver": 3, "spark": 4}[pipeline_path]  # the table is the module's: each path changes its own row
    sql = row(k=f"cast({key} as int)", i="cast(7 as bigint)", d="cast(2.5 as decimal(3,1))", ts="date'2021-06-07'",
              _ts="6L", name="'widened'")
    metrics = apply_changes(spark, open_table(spark, base_table, table_format="iceberg"), spark.sql(sql), SPEC)
    assert metrics.rows_updated == 1
    got = spark.table(base_table).where(f"k = {key}").collect()[0]
    assert (got["i"], str(got["d"]), got["ts"].date().isoformat(), got["name"]) == (7, "2.50", "2021-06-07", "widened")


@pytest.mark.parametrize("name", ["bad`name", "bad'name", "bad name", 'bad"name'])
def test_a_table_name_the_metastore_refuses_is_a_named_error(spark, base_table, name):
    schema = base_table.split(".")[0]
    with pytest.raises(ConfigurationError) as info:
        create_table(spark, f"{schema}.{name}", spark.sql(row()), SPEC)
    assert name in str(info.value) and "bad_feed" in str(info.value)
    assert name not in [t.name for t in spark.catalog.listTables(schema)]


def test_a_null_in_a_not_null_column_is_refused(spark, fresh_schema, pipeline_path):
    """An Iceberg table's required column: a change that inserts or updates a row with null in it is refused (the
    Parquet page engine would write the null as it is); deletes, whose value columns are null, still apply."""
    schema = fresh_schema
    name = f"{schema}.t"
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="required")
    spark.sql(f"create table {name} (k bigint, v bigint not null) using iceberg")
    spark.sql(f"insert into {name} values (1, 1), (2, 2)")
    table = open_table(spark, name, table_format="iceberg")
    batch = "k bigint, v bigint, _op string"
    apply_changes(spark, table, spark.createDataFrame([(3, 3, "I")], batch), spec)  # builds the index
    before = table_state(spark, name)
    for changes in ([(1, None, "U"), (2, 20, "U")], [(4, None, "I")]):
        with pytest.raises(ChangeFeedError) as info:
            apply_changes(spark, table, spark.createDataFrame(changes, batch), spec)
        message = str(info.value)
        assert "required" in message and "'v'" in message and f"(k={changes[0][0]})" in message, message
        assert table_state(spark, name) == before
    apply_changes(spark, table, spark.createDataFrame([(3, None, "D"), (2, 20, "U")], batch), spec)
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [(1, 1), (2, 20)]


def test_a_batch_adding_a_column_without_a_required_one_is_refused_before_the_schema_changes(spark, fresh_schema):
    """Regression: a batch that adds a column (``append_new_columns``) and lacks a NOT NULL column was refused for
    its inserts only after the ALTER TABLE, so the refused batch left the table with its new column. Updates alone
    still apply: their rows keep the required column's values."""
    schema = fresh_schema
    name = f"{schema}.t"
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="required", on_schema_change="append_new_columns")
    spark.sql(f"create table {name} (k bigint, v bigint not null) using iceberg")
    spark.sql(f"insert into {name} values (1, 1), (2, 2)")
    table = open_table(spark, name, table_format="iceberg")
    apply_changes(spark, table, spark.createDataFrame([(3, 3, "I")], "k bigint, v bigint, _op string"), spec)
    before = table_state(spark, name)
    batch = "k bigint, extra string, _op string"
    with pytest.raises(ChangeFeedError) as info:
        apply_changes(spark, table, spark.createDataFrame([(1, "x", "U"), (4, "y", "I")], batch), spec)
    message = str(info.value)
    assert "required" in message and "['v']" in message and "(k=4)" in message, message
    assert table_state(spark, name) == before
    apply_changes(spark, table, spark.createDataFrame([(1, "x", "U"), (2, None, "D")], batch), spec)
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [(1, 1, "x"), (3, 3, None)]
    # a batch that drops the required column (sync_all_columns) may insert: the column goes
    apply_changes(spark, table, spark.createDataFrame([(4, "z", "I")], batch),
                  replace(spec, on_schema_change="sync_all_columns"))
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [(1, "x"), (3, None), (4, "z")]


def test_a_batch_adding_a_column_the_commit_would_refuse_leaves_the_schema(spark, fresh_schema):
    """Regression: a batch adding a column (``append_new_columns``) that the commit then refused (it changes rows of
    a file with another writer's position deletes; the table is partitioned) left the new column in the table.
    Refused before the schema changes; the table's columns, snapshot and files are as they were."""
    import os

    from partialcow.exceptions import PartitionedTableError, UnsupportedTableFeatureError

    def state(name):
        root = location(spark, name)
        files = sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names if "_partialcow" not in d)
        return spark.table(name).columns, sorted(tuple(r) for r in spark.table(name).collect()), files

    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="evolving", on_schema_change="append_new_columns")
    batch = "k bigint, v string, extra string, _op string"
    cases = [
        ("deletes", "tblproperties ('write.delete.mode'='merge-on-read')", UnsupportedTableFeatureError,
         "delete files attached"),
        ("bucketed", "partitioned by (bucket(4, k))", PartitionedTableError, "bucket"),
        ("by_value", "partitioned by (v)", UnsupportedTableFeatureError, "whose partitions are checked at the commit"),
    ]
    for label, layout, error, fragment in cases:
        name = f"{fresh_schema}.{label}"
        spark.sql(f"create table {name} (k bigint, v string) using iceberg {layout}")
        spark.sql(f"insert into {name} select /*+ COALESCE(1) */ id, 'a' from range(1, 6)")
        if label == "deletes":
            apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                          spark.createDataFrame([(9, "a", "I")], "k bigint, v string, _op string"), spec)
            spark.sql(f"delete from {name} where k = 2")
        before = state(name)
        with pytest.raises(error, match=fragment):
            apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                          spark.createDataFrame([(1, "a", "x", "U")], batch), spec)
        assert state(name) == before, label


def test_rows_in_another_tables_files_are_refused_before_any_write(spark, fresh_schema, pipeline_path, tmp_path):
    """Regression (a Delta shallow clone made by ``dbt clone``, an Iceberg table given files with ``add_files``): a
    rewrite is written next to the file it replaces, so a batch changing rows of a file outside the table's folder
    wrote into another table's folder (on Delta the commit then refused it, leaving the file there on every try)."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from partialcow.exceptions import UnsupportedTableFeatureError

    foreign = tmp_path / "other_table"
    foreign.mkdir()
    pq.write_table(pa.table({"k": pa.array([1, 2], pa.int64()), "v": pa.array([10, 20], pa.int64())}),
                   foreign / "part-0.parquet")
    schema = fresh_schema
    name = f"{schema}.t"
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="cloned")
    spark.sql(f"create table {name} (k bigint, v bigint) using iceberg")
    spark.sql(f"CALL spark_catalog.system.add_files(table => '{name}', source_table => '`parquet`.`{foreign}`')")
    table = open_table(spark, name, table_format="iceberg")
    batch = "k bigint, v bigint, _op string"
    apply_changes(spark, table, spark.createDataFrame([(3, 30, "I")], batch), spec)  # inserts: its own folder
    before = table_state(spark, name)
    with pytest.raises(UnsupportedTableFeatureError) as info:
        apply_changes(spark, table, spark.createDataFrame([(1, 11, "U")], batch), spec)
    message = str(info.value)
    assert message.startswith("model cloned:") and str(foreign) in message and "--full-refresh" in message, message
    assert table_state(spark, name) == before
    # a batch that would add a column is refused before the ALTER TABLE
    with pytest.raises(UnsupportedTableFeatureError):
        apply_changes(spark, table, spark.createDataFrame([(1, 11, "U", "x")], f"{batch}, extra string"),
                      replace(spec, on_schema_change="append_new_columns"))
    assert table_state(spark, name) == before
    assert sorted(os.listdir(foreign)) == ["part-0.parquet"]


def test_a_null_in_a_required_nested_field_is_refused(spark, fresh_schema, pipeline_path):
    """Regression: only top-level NOT NULL columns were checked. A null in a required field of a struct (here
    inside an array's elements too) failed late in the file writer with an error naming neither the model nor a key
    (Iceberg), or was committed and broke every read of the table (Delta: tests/delta_spark). Now it is refused
    like a NOT NULL column, naming the field's path; deletes still apply."""
    schema = fresh_schema
    name = f"{schema}.t"
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="nested_required")

    def batch(*changes: tuple[int, str, str, str]):
        return spark.sql(" union all ".join(f"select {k}L as k, {addr} as addr, {items} as items, '{op}' as _op"
                                            for k, addr, items, op in changes))

    addr, items = "named_struct('zip', 'z', 'city', 'c')", "array(named_struct('sku', 's', 'n', 1))"
    spark.sql(f"create table {name} (k bigint, addr struct<zip: string not null, city: string>, "
              "items array<struct<sku: string not null, n: int>>) using iceberg")
    table = open_table(spark, name, table_format="iceberg")
    apply_changes(spark, table, batch((1, addr, items, "I"), (2, addr, items, "I"), (3, addr, items, "I")), spec)
    before = table_state(spark, name)
    null_zip = "named_struct('zip', cast(null as string), 'city', 'c')"
    null_sku = "array(named_struct('sku', 's', 'n', 1), named_struct('sku', cast(null as string), 'n', 2))"
    new_zip = "named_struct('zip', 'y', 'city', 'c')"
    for changes, path, keys in [
        ([(1, null_zip, items, "U"), (2, new_zip, items, "U")], "addr.zip", "(k=1)"),
        ([(4, null_zip, items, "I"), (5, null_zip, items, "I")], "addr.zip", "2 change(s)"),
        ([(2, addr, null_sku, "U")], "items.element.sku", "(k=2)"),
    ]:
        with pytest.raises(ChangeFeedError) as info:
            apply_changes(spark, table, batch(*changes), spec)
        message = str(info.value)
        assert "nested_required" in message and f"'{path}' is NOT NULL" in message and keys in message, message
        assert table_state(spark, name) == before
    apply_changes(spark, table, batch((3, null_zip, null_sku, "D"), (2, new_zip, items, "U")), spec)
    assert [(r["k"], r["addr"]["zip"]) for r in spark.table(name).orderBy("k").collect()] == [(1, "z"), (2, "y")]


def test_a_null_struct_with_a_required_field_is_stored(spark, fresh_schema, pipeline_path):
    """Regression: a nullable struct whose type has a NOT NULL field may be null (a null struct has no fields), but
    a first build holding one, an update to one and an insert of one failed in the file writer ("field 'zip' ... has
    nulls. Can't cast to non-nullable field"): Spark hands a null struct over with null fields."""
    from independent_read import iceberg_rows

    schema = fresh_schema
    name = f"{schema}.t"
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="null_struct")
    addr = "case when k in ({}) then null else named_struct('zip', concat('z', k)) end"
    # concat() of a key that is not null is not null: the model's struct declares zip NOT NULL, so does the table
    create_table(spark, name, spark.sql(f"select k, {addr.format(2)} as addr, 'I' as _op from values (1L), (2L), "
                                        "(3L) as t(k)"), spec)
    assert not spark.table(name).schema["addr"].dataType["zip"].nullable
    changes = spark.sql(f"select k, {addr.format('1, 4')} as addr, 'U' as _op from values (1L), (3L), (4L), "
                        "(5L) as t(k)")
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"), changes, spec)
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 2)  # 3 is unchanged
    expected = [(1, None), (2, None), (3, {"zip": "z3"}), (4, None), (5, {"zip": "z5"})]
    assert sorted((r["k"], r["addr"] and r["addr"].asDict()) for r in spark.table(name).collect()) == expected
    assert iceberg_rows(Path(location(spark, name))) == expected


def test_new_files_take_the_codec_the_table_asks_for(spark, fresh_schema, pipeline_path):
    """Regression: our new data files were zstd whatever the table said: a model's
    ``tblproperties {'write.parquet.compression-codec': 'gzip'}`` on the first build, or the property changed later
    by another tool, was ignored (Spark's and Iceberg's own writers honour it). Files rewritten in place keep theirs."""
    import os

    import pyarrow.parquet as pq

    from partialcow.spark.tables import local_path

    schema = fresh_schema
    name = f"{schema}.t"
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="codec",
                      extra_table_properties={"write.parquet.compression-codec": "gzip"})
    batch = "k bigint, v bigint, _op string"

    def codecs() -> dict[str, set[str]]:
        files = [local_path(r[0]) for r in spark.sql(f"select file_path from {name}.files").collect()]
        return {os.path.basename(f): {pq.ParquetFile(f).metadata.row_group(0).column(c).compression for c in range(2)}
                for f in files}

    create_table(spark, name, spark.createDataFrame([(1, 1, "I"), (2, 2, "I")], batch), spec)
    first = codecs()
    assert first and all(c == {"GZIP"} for c in first.values()), first
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('write.parquet.compression-codec'='snappy')")
    table = open_table(spark, name, table_format="iceberg")
    apply_changes(spark, table, spark.createDataFrame([(3, 3, "I"), (4, 4, "I")], batch), spec)
    added = {f: c for f, c in codecs().items() if f not in first}
    assert added and all(c == {"SNAPPY"} for c in added.values()), codecs()
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [(1, 1), (2, 2), (3, 3), (4, 4)]


def test_new_files_go_to_the_data_folder_the_table_names(spark, fresh_schema, pipeline_path, tmp_path):
    """Regression: our new data files went to ``<table>/data`` whatever the table said: ``write.data.path`` (which
    Iceberg's and Spark's own writers honour) was ignored by the first build and by every batch. The first build, a
    rewrite and an insert now land there; a batch changing a file of a folder the table no longer names is refused,
    naming both folders, with the table as it was."""
    from independent_read import iceberg_rows

    from partialcow.exceptions import UnsupportedTableFeatureError
    from partialcow.spark.tables import local_path
    from partialcow.table.java import load_iceberg_table

    name = f"{fresh_schema}.t"
    first, second = tmp_path / "fast", tmp_path / "faster"
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="data_path",
                      extra_table_properties={"write.data.path": f"file:{first}"})
    batch = "k bigint, v bigint, _op string"

    def live() -> list[str]:
        return sorted(local_path(r[0]) for r in spark.sql(f"select file_path from {name}.files").collect())

    create_table(spark, name, spark.createDataFrame([(1, 1, "I"), (2, 2, "I")], batch), spec)
    # Iceberg's own location provider puts a new file of the table where ours went
    probe = str(load_iceberg_table(spark, name).locationProvider().newDataLocation("probe.parquet"))
    assert local_path(probe) == f"{first}/probe.parquet"
    built = live()
    assert built and all(f.startswith(f"{first}/") for f in built), built
    apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                  spark.createDataFrame([(1, 10, "U"), (3, 3, "I")], batch), spec)
    files = live()
    assert files != built and all(f.startswith(f"{first}/") for f in files), files
    expected = [(1, 10), (2, 2), (3, 3)]
    assert sorted(tuple(r) for r in spark.table(name).collect()) == expected
    assert iceberg_rows(Path(location(spark, name))) == expected
    assert not list((Path(location(spark, name)) / "data").rglob("*.parquet"))

    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('write.data.path'='file:{second}')")
    before = table_state(spark, name)
    with pytest.raises(UnsupportedTableFeatureError, match=f"data folder {second}.*e.g. .*{first}/"):
        apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                      spark.createDataFrame([(2, 20, "U")], batch), spec)
    assert table_state(spark, name) == before
    apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                  spark.createDataFrame([(4, 4, "I")], batch), spec)
    added = sorted(set(live()) - set(files))
    assert added and all(f.startswith(f"{second}/") for f in added), added
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [*expected, (4, 4)]


@pytest.mark.parametrize("field", ["x y", "Größe", "a-b", "123", "1d"])
def test_a_struct_field_the_metastore_cannot_list_is_refused(spark, fresh_schema, field):
    """Regression: an Iceberg table whose struct field name is not a plain identifier was created, and from then on
    every listing of its schema failed (``CANNOT_RECOGNIZE_HIVE_TYPE``: Spark cannot parse the type text the Hive
    metastore holds), so every later dbt process failed until the table was dropped. Refused now, for a first
    build and for a batch that adds such a column, with the schema still listable."""
    schema = fresh_schema
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="fields", on_schema_change="append_new_columns")
    nested = f"select 1L as k, named_struct('{field}', 1) as s, 'I' as _op"
    with pytest.raises(ChangeFeedError, match=r"struct field\(s\) s\..* cannot list"):
        create_table(spark, f"{schema}.t", spark.sql(nested), spec)
    create_table(spark, f"{schema}.u", spark.sql("select 1L as k, 'I' as _op"), spec)
    table = open_table(spark, f"{schema}.u", table_format="iceberg")
    before = table_state(spark, f"{schema}.u")
    with pytest.raises(ChangeFeedError, match=r"struct field\(s\) s\..* cannot list"):
        apply_changes(spark, table, spark.sql(nested.replace("'I' as _op", "'U' as _op")), spec)
    assert table_state(spark, f"{schema}.u") == before
    listed = spark.sql(f"show table extended in {schema} like '*'").collect()
    assert [r["tableName"] for r in listed if not r["isTemporary"]] == ["u"]
