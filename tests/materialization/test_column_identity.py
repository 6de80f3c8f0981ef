"""A column dropped and added again under its name is a new column to Iceberg, which reads data files by field id.

The rewrite matched a file's columns by name: an update of the new column was patched into the old, dropped one
that the file still holds, and Iceberg read the row's new value as null; new rows appended to such a file lost it
the same way. Such rows now move to a new file, as for a column the file lacks.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from independent_read import iceberg_rows

from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="readded")
SCHEMA = "k bigint, v string, a bigint, _op string"


def test_a_column_dropped_and_added_again_gets_its_new_values(spark, schema):
    name = f"{schema}.readded_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, f"v{k}", k * 10, "I") for k in range(50)], SCHEMA), SPEC)
    spark.sql(f"ALTER TABLE {name} DROP COLUMN a")
    spark.sql(f"ALTER TABLE {name} ADD COLUMNS (a bigint)")
    batch = [(1, "v1", 5, "U"), (2, "changed", None, "U"), (100, "new", 7, "I")]
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                            spark.createDataFrame(batch, SCHEMA), SPEC)
    assert (metrics.rows_updated, metrics.rows_inserted) == (2, 1)
    spark.catalog.refreshTable(name)
    rows = {r["k"]: (r["v"], r["a"]) for r in spark.table(name).collect()}
    assert len(rows) == 51
    assert rows[1] == ("v1", 5) and rows[2] == ("changed", None) and rows[100] == ("new", 7)
    assert rows[3] == ("v3", None)  # the dropped column's old values stay hidden


def test_a_column_named_in_other_letter_case_is_the_tables_column(spark, schema):
    """Regression: a model that spelled a column ``amount`` for the table's ``Amount`` (Spark resolves names
    case-insensitively, and dbt-spark's MERGE matched it) had it dropped from the batch as a new column under
    ``on_schema_change='ignore'``: updated rows kept their old amounts and inserted rows got null, silently."""
    name = f"{schema}.cased_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, k * 10, "I") for k in range(50)],
                                                    "k bigint, Amount bigint, _op string"), SPEC)
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                            spark.createDataFrame([(1, 11, "U"), (100, 7, "I")], "k bigint, amount bigint, _op string"),
                            SPEC)
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 1)
    spark.catalog.refreshTable(name)
    assert spark.table(name).columns == ["k", "Amount"]
    rows = dict(spark.sql(f"SELECT k, Amount FROM {name}").collect())
    assert (rows[1], rows[100], rows[2]) == (11, 7, 20)


@pytest.mark.parametrize("on_schema_change", ["fail", "ignore", "append_new_columns"])
def test_a_key_column_named_in_other_letter_case_is_the_tables_key(spark, schema, on_schema_change):
    """Regression: a model whose key came back as ``Id`` for the table's ``id`` failed every batch: taken for a new
    column (``fail``: "new: ['Id'], missing: ['id']"; ``append_new_columns``: Spark's FIELDS_ALREADY_EXISTS) or not
    found (``ignore``: a bare pyarrow KeyError on the driver path, an unresolved column on the Spark path)."""
    spec = ChangeSpec(key_columns=("id",), op_column="_op", model="cased_key", on_schema_change=on_schema_change)
    name = f"{schema}.cased_key_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, f"v{k}", "I") for k in range(20)],
                                                    "id bigint, v string, _op string"), spec)
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                            spark.createDataFrame([(1, "A", "U"), (30, "new", "I")], "Id bigint, v string, _op string"),
                            spec)
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 1)
    spark.catalog.refreshTable(name)
    assert spark.table(name).columns == ["id", "v"]
    rows = dict(spark.sql(f"SELECT id, v FROM {name}").collect())
    assert (len(rows), rows[1], rows[30], rows[2]) == (21, "A", "new", "v2")


def test_a_field_added_to_a_struct_gets_its_values(spark, schema):
    """Regression: a field added to a struct column after a file was written (``addr.country``) was taken for the
    same struct: an update of a row in that file was cast into the file's struct, which drops the field, and the
    driver path appended new rows to that file the same way: the new field read back null, silently."""
    name = f"{schema}.nested_{uuid.uuid4().hex[:8]}"
    ddl = "k bigint, addr struct<zip: string>, _op string"
    create_table(spark, name, spark.createDataFrame([(k, (f"z{k}",), "I") for k in range(50)], ddl), SPEC)
    spark.sql(f"ALTER TABLE {name} ADD COLUMNS (addr.country string)")
    wide = "k bigint, addr struct<zip: string, country: string>, _op string"
    batch = [(1, ("z1", "DE"), "U"), (100, ("z100", "FR"), "I")]
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                            spark.createDataFrame(batch, wide), SPEC)
    assert (metrics.rows_updated, metrics.rows_inserted) == (1, 1)
    spark.catalog.refreshTable(name)
    rows = {r["k"]: tuple(r["addr"]) for r in spark.table(name).collect()}
    assert len(rows) == 51
    assert (rows[1], rows[100], rows[2]) == (("z1", "DE"), ("z100", "FR"), ("z2", None))


def test_rows_re_sent_unchanged_after_a_struct_gained_a_field_commit_nothing(spark, schema):
    """issue 25 (nothing to do costs nothing): after a field was added to a struct column, rows re-sent unchanged
    (the new field null) were taken for rows the file's struct cannot hold, moved to a new file and committed. A row
    that changes a field the file has, with the new field null, is patched in place; one that sets the new field
    still moves."""
    name = f"{schema}.gained_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, (f"z{k}",), "I") for k in range(50)],
                                                    "k bigint, addr struct<zip: string>, _op string"), SPEC)
    spark.sql(f"ALTER TABLE {name} ADD COLUMNS (addr.country string)")
    snapshots = spark.sql(f"SELECT count(*) FROM {name}.snapshots").first()[0]
    wide = "k bigint, addr struct<zip: string, country: string>, _op string"
    same = [(1, ("z1", None), "U"), (2, ("z2", None), "U")]
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                            spark.createDataFrame(same, wide), SPEC)
    assert (metrics.rows_updated, metrics.rows_inserted, metrics.files_added) == (0, 0, 0)
    assert spark.sql(f"SELECT count(*) FROM {name}.snapshots").first()[0] == snapshots  # nothing committed
    changed = [(1, ("Z1", None), "U"), (2, ("z2", None), "U"), (3, ("z3", "DE"), "U")]
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                            spark.createDataFrame(changed, wide), SPEC)
    assert (metrics.rows_updated, metrics.rows_inserted, metrics.files_removed) == (2, 0, 1)
    assert metrics.files_added == 2  # the rewritten file and the one row 3 moved to (row 1 stayed in its file)
    spark.catalog.refreshTable(name)
    rows = {r["k"]: tuple(r["addr"]) for r in spark.table(name).collect()}
    assert len(rows) == 50
    assert (rows[1], rows[2], rows[3], rows[4]) == (("Z1", None), ("z2", None), ("z3", "DE"), ("z4", None))
    _read_alike_by_pyiceberg(spark, name, rows)


def test_a_struct_field_dropped_and_added_again_never_shows_its_old_values(spark, schema):
    """The same name under a new field id is another field to Iceberg: a row patched into a file that holds the old
    field would read its new value back as null, or the old field's value would come back. Such rows move."""
    name = f"{schema}.refield_{uuid.uuid4().hex[:8]}"
    ddl = "k bigint, addr struct<zip: string, country: string>, _op string"
    create_table(spark, name, spark.createDataFrame([(k, (f"z{k}", "OLD"), "I") for k in range(50)], ddl), SPEC)
    spark.sql(f"ALTER TABLE {name} DROP COLUMN addr.country")
    spark.sql(f"ALTER TABLE {name} ADD COLUMNS (addr.country string)")
    batch = [(1, ("z1", "FR"), "U"), (2, ("Z2", None), "U")]
    apply_changes(spark, open_table(spark, name, table_format="iceberg"), spark.createDataFrame(batch, ddl), SPEC)
    spark.catalog.refreshTable(name)
    rows = {r["k"]: tuple(r["addr"]) for r in spark.table(name).collect()}
    assert (rows[1], rows[2], rows[3]) == (("z1", "FR"), ("Z2", None), ("z3", None))
    _read_alike_by_pyiceberg(spark, name, rows)


def test_fields_dropped_and_added_again_in_list_elements_and_map_values_keep_their_new_values(spark, schema):
    """The same defect one level deeper: the new value of a struct field of a list's elements or a map's values,
    dropped and added again under its name, read back null."""
    name = f"{schema}.deeper_{uuid.uuid4().hex[:8]}"
    ddl = "k bigint, items array<struct<a: string, b: string>>, m map<string, struct<x: string, y: string>>, _op string"
    create_table(spark, name, spark.createDataFrame(
        [(k, [(f"a{k}", "OLD")], {"key": (f"x{k}", "OLD")}, "I") for k in range(20)], ddl), SPEC)
    for column in ("items.element.b", "m.value.y"):
        spark.sql(f"ALTER TABLE {name} DROP COLUMN {column}")
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({column} string)")
    batch = [(1, [("a1", "NEW")], {"key": ("x1", "NEW")}, "U"), (2, [("A2", None)], {"key": ("X2", None)}, "U")]
    apply_changes(spark, open_table(spark, name, table_format="iceberg"), spark.createDataFrame(batch, ddl), SPEC)
    spark.catalog.refreshTable(name)
    rows = {r["k"]: ([tuple(e) for e in r["items"]], {k: tuple(v) for k, v in r["m"].items()})
            for r in spark.table(name).collect()}
    assert rows[1] == ([("a1", "NEW")], {"key": ("x1", "NEW")})
    assert rows[2] == ([("A2", None)], {"key": ("X2", None)})
    assert rows[3] == ([("a3", None)], {"key": ("x3", None)})
    location = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").where("col_name = 'Location'").first()["data_type"]
    items = dict(iceberg_rows(Path(location.removeprefix("file:")), ("k", "items")))
    assert (items[1], items[2], items[3]) == ([{"a": "a1", "b": "NEW"}], [{"a": "A2", "b": None}],
                                             [{"a": "a3", "b": None}])


def _read_alike_by_pyiceberg(spark, name: str, rows: dict) -> None:
    """A second reader: pyiceberg resolves the rewritten files' struct fields by id as Spark does."""
    location = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").where("col_name = 'Location'").first()["data_type"]
    read = iceberg_rows(Path(location.removeprefix("file:")), ("k", "addr"))
    assert read == sorted((k, {"zip": zip_, "country": country}) for k, (zip_, country) in rows.items())


def test_a_key_name_moved_to_another_column_is_indexed_again(spark, schema):
    """Regression: renames move the key's name to another column without a new snapshot (``k`` -> ``old_k``,
    ``alt`` -> ``k``). The index, fresh for that snapshot, still held the old column's values: key 1 was found in
    the row whose ``k`` is now 101, which the batch overwrote, and key 1 was never inserted, silently."""
    name = f"{schema}.rebound_{uuid.uuid4().hex[:8]}"
    rows = [(k, k + 100, f"v{k}", "I") for k in range(50)]
    create_table(spark, name, spark.createDataFrame(rows, "k bigint, alt bigint, v string, _op string"), SPEC)
    spark.sql(f"ALTER TABLE {name} RENAME COLUMN k TO old_k")
    spark.sql(f"ALTER TABLE {name} RENAME COLUMN alt TO k")
    batch = spark.createDataFrame([(1, 1, "new", "U")], "old_k bigint, k bigint, v string, _op string")
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"), batch, SPEC)
    assert (metrics.rows_updated, metrics.rows_inserted) == (0, 1)
    spark.catalog.refreshTable(name)
    got = {r["k"]: (r["old_k"], r["v"]) for r in spark.table(name).collect()}
    assert len(got) == 51
    assert got[101] == (1, "v1") and got[1] == (1, "new")


def test_merge_exclude_columns_in_other_letter_case_keep_their_values(spark, schema):
    """Regression: ``merge_exclude_columns=['CREATED_AT']`` was compared with the table's ``created_at`` letter for
    letter, so the column was updated anyway, silently (dbt compares them in lower case)."""
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="excluded", exclude_columns=("CREATED_AT",))
    name = f"{schema}.excluded_{uuid.uuid4().hex[:8]}"
    ddl = "k bigint, v string, created_at bigint, _op string"
    create_table(spark, name, spark.createDataFrame([(k, f"v{k}", 1, "I") for k in range(20)], ddl), spec)
    apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                  spark.createDataFrame([(1, "changed", 2, "U")], ddl), spec)
    spark.catalog.refreshTable(name)
    assert spark.sql(f"SELECT v, created_at FROM {name} WHERE k = 1").first() == ("changed", 1)


def test_merge_update_and_exclude_columns_together_are_refused():
    from dbt_common.exceptions import DbtRuntimeError

    from partialcow.dbt_adapter.materialization import change_spec

    with pytest.raises(DbtRuntimeError, match="merge_update_columns or merge_exclude_columns, not both"):
        change_spec({"unique_key": "k", "merge_update_columns": ["v"], "merge_exclude_columns": ["w"]}, model="m")


def test_a_key_column_dropped_and_added_again_holds_no_old_key(spark, schema):
    """A key column dropped and added again is a new column whose rows hold null; reading the indexed snapshot by
    the name would have read the dropped column's values, and key 1 would have updated a row whose key is null."""
    name = f"{schema}.rekeyed_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, f"v{k}", "I") for k in range(20)],
                                                    "k bigint, v string, _op string"), SPEC)
    spark.sql(f"ALTER TABLE {name} DROP COLUMN k")
    spark.sql(f"ALTER TABLE {name} ADD COLUMNS (k bigint)")
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                            spark.createDataFrame([(1, "new", "U")], "k bigint, v string, _op string"), SPEC)
    assert (metrics.rows_updated, metrics.rows_inserted) == (0, 1)
    spark.catalog.refreshTable(name)
    rows = sorted((r["k"] is None, r["v"]) for r in spark.table(name).collect())
    assert rows == sorted([(True, f"v{k}") for k in range(20)] + [(False, "new")])


def test_a_renamed_column_takes_a_null_from_a_full_row_image(spark, schema):
    """Regression: a file written before ``RENAME COLUMN a TO b`` holds the column under its old name (Iceberg reads
    it by field id). The rewrite matched names: it took ``b`` for a column the file lacks, which needs moving only for
    a value that is not null, so an update to null was dropped and the old value stayed."""
    name = f"{schema}.renamed_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, f"v{k}", k * 10, "I") for k in range(50)], SCHEMA), SPEC)
    spark.sql(f"ALTER TABLE {name} RENAME COLUMN a TO b")
    batch = [(1, "v1", None, "U"), (2, "v2", 99, "U"), (3, "changed", 30, "U")]
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                            spark.createDataFrame(batch, "k bigint, v string, b bigint, _op string"), SPEC)
    assert metrics.rows_updated == 3
    spark.catalog.refreshTable(name)
    rows = {r["k"]: (r["v"], r["b"]) for r in spark.table(name).collect()}
    assert len(rows) == 50
    assert (rows[1], rows[2], rows[3], rows[4]) == (("v1", None), ("v2", 99), ("changed", 30), ("v4", 40))


def test_columns_that_swapped_names_are_never_patched_into_each_other(spark, schema):
    """Regression: after renaming ``a`` to ``b`` and ``b`` to ``a``, an update of ``a`` restricted by
    ``merge_update_columns`` was patched into the file's column named ``a``, which is the table's ``b`` now. A row of
    such a file moves to a new file instead, keeping the values of the columns the batch does not update."""
    name = f"{schema}.swapped_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, k, k * 10, "I") for k in range(50)],
                                                    "k bigint, a bigint, b bigint, _op string"), SPEC)
    for old, new in (("a", "tmp"), ("b", "a"), ("tmp", "b")):
        spark.sql(f"ALTER TABLE {name} RENAME COLUMN {old} TO {new}")
    before = {r["k"]: (r["a"], r["b"]) for r in spark.table(name).collect()}
    assert before[1] == (10, 1)
    batch = spark.createDataFrame([(1, 555, 7, "U")], "k bigint, a bigint, b bigint, _op string")
    restricted = ChangeSpec(key_columns=("k",), op_column="_op", model="swapped", update_columns=("a",))
    apply_changes(spark, open_table(spark, name, table_format="iceberg"), batch, restricted)
    spark.catalog.refreshTable(name)
    # the moved row keeps its `b` (held in the file under the name `a`): restricted to `a`, the batch's 7 is ignored
    assert {r["k"]: (r["a"], r["b"]) for r in spark.table(name).collect()} == {**before, 1: (555, 1)}
    apply_changes(spark, open_table(spark, name, table_format="iceberg"), batch, SPEC)
    spark.catalog.refreshTable(name)
    assert {r["k"]: (r["a"], r["b"]) for r in spark.table(name).collect()} == {**before, 1: (555, 7)}


# Rows that move to a new file keep, from their old file, the values of the columns the batch does not set.
# Regression: such a move needed the batch's whole rows; a batch without them failed in the rewrite, and under
# append_new_columns after its new column had already been added to the table.

def test_a_batch_adding_a_column_without_the_others_keeps_their_values(spark, schema):
    evolving = ChangeSpec(key_columns=("k",), op_column="_op", model="evolving", on_schema_change="append_new_columns")
    name = f"{schema}.evolving_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, f"v{k}", k * 10, "I") for k in range(50)], SCHEMA), evolving)
    batch = [(1, 11, "x", "U"), (2, 22, None, "U"), (100, 7, "y", "I")]  # no `v`: row 1 moves for `extra`
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                            spark.createDataFrame(batch, "k bigint, a bigint, extra string, _op string"), evolving)
    assert (metrics.rows_updated, metrics.rows_inserted) == (2, 1)
    spark.catalog.refreshTable(name)
    rows = {r["k"]: (r["v"], r["a"], r["extra"]) for r in spark.table(name).collect()}
    assert len(rows) == 51
    assert (rows[1], rows[2], rows[3], rows[100]) == (("v1", 11, "x"), ("v2", 22, None), ("v3", 30, None),
                                                      (None, 7, "y"))


@pytest.mark.parametrize("restriction", [{"update_columns": ("a", "c")}, {"exclude_columns": ("v",)}])
def test_a_moved_row_keeps_the_columns_the_model_does_not_update(spark, schema, restriction):
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model="restricted", **restriction)
    name = f"{schema}.restricted_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, f"v{k}", k * 10, "I") for k in range(50)], SCHEMA), spec)
    spark.sql(f"ALTER TABLE {name} ADD COLUMNS (c bigint)")  # no file holds `c`: a value there moves the row
    batch = [(1, "changed", 12, 5, "U"), (2, "changed", 23, None, "U")]
    apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                  spark.createDataFrame(batch, "k bigint, v string, a bigint, c bigint, _op string"), spec)
    spark.catalog.refreshTable(name)
    rows = {r["k"]: (r["v"], r["a"], r["c"]) for r in spark.table(name).collect()}
    assert len(rows) == 50
    assert (rows[1], rows[2], rows[3]) == (("v1", 12, 5), ("v2", 23, None), ("v3", 30, None))


def test_a_moved_row_keeps_a_renamed_column_the_batch_lacks(spark, schema):
    name = f"{schema}.renamed_kept_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame([(k, f"v{k}", k * 10, "I") for k in range(50)], SCHEMA), SPEC)
    spark.sql(f"ALTER TABLE {name} RENAME COLUMN a TO b")  # the files hold `b` under the name `a`
    spark.sql(f"ALTER TABLE {name} ADD COLUMNS (c bigint)")
    ignoring = ChangeSpec(key_columns=("k",), op_column="_op", model="renamed_kept", on_schema_change="ignore")
    apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                  spark.createDataFrame([(1, "v1", 5, "U")], "k bigint, v string, c bigint, _op string"), ignoring)
    spark.catalog.refreshTable(name)
    rows = {r["k"]: (r["v"], r["b"], r["c"]) for r in spark.table(name).collect()}
    assert len(rows) == 50
    assert (rows[1], rows[2]) == (("v1", 10, 5), ("v2", 20, None))
