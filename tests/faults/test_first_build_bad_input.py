"""Bad batches through a first build and a full refresh (``create_table``): the rows are validated by the tasks
that write them (``partialcow.spark.bulk``), so these cases run there, not in ``apply_changes``. The error and its
message are the batch matrix's; a new table is not left behind, and a replaced table stays exactly as it was."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from partialcow.exceptions import PartialCowError
from partialcow.spark.changes import create_table
from tablestate import table_state
from test_bad_input_matrix import CASES, SPEC, row, rows

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

# the matrix's cases a first build checks row by row while writing (the rest are refused before any task runs)
WRITE_TIME = ("null key", "duplicate keys without sequence_column", "tie on the latest sequence",
              "op code outside the configured ones", "null op code",
              "op code outside the configured ones on a superseded change", "null sequence")
FIRST_BUILD_CASES = [c for c in CASES if c[0] in WRITE_TIME]


def test_every_write_time_case_is_in_the_matrix():
    assert [c[0] for c in FIRST_BUILD_CASES] == [c for c in WRITE_TIME if c in {x[0] for x in CASES}]
    assert len(FIRST_BUILD_CASES) == len(WRITE_TIME)


# a full refresh takes the same checks: two of the cases show the old table survives them
SCENARIOS = [(False, c) for c in FIRST_BUILD_CASES] + [
    (True, c) for c in FIRST_BUILD_CASES if c[0] in ("null key", "duplicate keys without sequence_column")]


@pytest.mark.parametrize("existing, case, sql, spec_changes, error, fragments", [(e, *c) for e, c in SCENARIOS],
                         ids=[("full refresh: " if e else "first build: ") + c[0] for e, c in SCENARIOS])
def test_bad_first_build_is_refused(spark, schema, existing, case, sql, spec_changes, error, fragments):
    name = f"{schema}.t_{uuid.uuid4().hex[:6]}"
    spec = replace(SPEC, **spec_changes)
    if existing:
        create_table(spark, name, spark.sql(rows(*[row(k=f"{i}L", i=str(i)) for i in range(1, 6)])), SPEC)
        before = table_state(spark, name)
    with pytest.raises(PartialCowError) as info:
        create_table(spark, name, spark.sql(sql), spec)
    assert type(info.value) is error, f"{case}: {type(info.value).__name__}: {info.value}"
    for fragment in fragments:
        assert fragment in str(info.value), f"{case}: {fragment!r} not in {str(info.value)!r}"
    if existing:
        assert table_state(spark, name) == before
    else:
        assert not spark.catalog.tableExists(name)


def test_a_full_refresh_of_a_format_v3_table_names_the_way_forward(spark, schema):
    """Regression: a table another tool upgraded to format v3 was refused for batches with "use a format-version 2
    table", and a full refresh then failed with Iceberg's bare "Cannot downgrade v3 table to v2". Both name the one
    way forward (drop the table, build again); the full refresh leaves the table as it was."""
    from partialcow.exceptions import CommitError

    name = f"{schema}.v3_{uuid.uuid4().hex[:6]}"
    create_table(spark, name, spark.sql(rows(*[row(k=f"{i}L", i=str(i)) for i in range(1, 6)])), SPEC)
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('format-version'='3')")
    before = table_state(spark, name)
    with pytest.raises(CommitError) as info:
        create_table(spark, name, spark.sql(rows(row(k="9L", i="9"))), SPEC)
    message = str(info.value)
    assert "Cannot downgrade" in message and f"DROP TABLE {name} PURGE" in message, message
    assert table_state(spark, name) == before
    spark.sql(f"DROP TABLE {name} PURGE")
    create_table(spark, name, spark.sql(rows(row(k="9L", i="9"))), SPEC)
    assert [r["k"] for r in spark.table(name).collect()] == [9]
