"""A Delta commit through delta-spark against another writer's commit that lands while it is being made.

Our conflict check reads the log up to the table's head; the commit then takes a moment (the new files' footers read,
the base files listed) and is made by a delta-spark transaction started on the base version. A review suspected that
delta-spark's own rules (WriteSerializable) let a blind append landing in that moment through, so that a key the
batch inserts and another writer appends would end up in the table twice. It does not: a batch with inserts reads
the whole table, and delta-spark refuses the commit (measured here; this test keeps it so).
"""

from __future__ import annotations

import datetime as dt

import pytest
from budget import LONG

from partialcow.exceptions import CommitConflictError, CommitStateUnknownError
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table
from partialcow.table.delta import spark_table

pytestmark = [pytest.mark.spark]

SPEC = ChangeSpec(key_columns=("id",), op_column="_op", model="delta_race")
SCHEMA = "id bigint, name string, day date, _op string"


# without delta-spark's Python package: only in the long mode (tests/budget.py); the variant with it checks both
@pytest.mark.parametrize("with_delta_python", [False, True] if LONG else [True])
def test_a_key_appended_by_another_writer_during_the_commit_is_not_inserted_twice(spark, schema, monkeypatch, request,
                                                                                 with_delta_python):
    """Also with delta-spark's Python package loaded (a Python model using ``delta.tables``): PySpark then raises
    delta-spark's conflicts as ``delta.exceptions.*``, which the commit took for an unknown outcome (files and lease
    kept, "may or may not have landed") instead of a conflict."""
    if with_delta_python:
        request.getfixturevalue("delta_tables")
    name = f"{schema}.t"
    create_table(spark, name, spark.createDataFrame([(i, f"n{i}", dt.date(2024, 1, 1), "I") for i in range(6)],
                                                    SCHEMA), SPEC, table_format="delta")
    add_json = spark_table.DeltaSparkTable._add_json
    appended = []

    def another_writer_appends_first(self, *args, **kwargs):
        if not appended:
            appended.append(True)
            spark.sql(f"INSERT INTO {name} VALUES (100, 'other writer', date'2024-01-02')")
        return add_json(self, *args, **kwargs)

    monkeypatch.setattr(spark_table.DeltaSparkTable, "_add_json", another_writer_appends_first)
    batch = spark.createDataFrame([(3, "ours", dt.date(2024, 1, 3), "U"), (100, "ours", dt.date(2024, 1, 3), "I")],
                                  SCHEMA)
    try:
        apply_changes(spark, open_table(spark, name, table_format="delta"), batch, SPEC)
    except CommitConflictError as exc:  # refused: what must not happen is key 100 twice
        assert not isinstance(exc, CommitStateUnknownError), exc
    assert appended
    spark.catalog.refreshTable(name)
    ids = [r[0] for r in spark.sql(f"select id from {name}").collect()]
    assert ids.count(100) == 1, sorted(ids)
    assert sorted(set(ids)) == [0, 1, 2, 3, 4, 5, 100]
