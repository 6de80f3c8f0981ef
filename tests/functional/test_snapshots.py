"""dbt snapshots on Iceberg tables (issue 27: dbt-spark cannot run them on this stack), written by partial
copy-on-write: dbt's own snapshot suites, plus hard deletes (ignore, invalidate, new_record) checked version by
version against dbt-spark's MERGE (``snapshot_cases.py``; the Delta suite runs the same cases), and a list key with
the timestamp strategy and ``dbt_valid_to_current`` (dbt-spark's own snapshot fails on list keys) checked by hand."""

import pytest
from dbt.tests.adapter.basic.test_snapshot_check_cols import BaseSnapshotCheckCols
from dbt.tests.adapter.basic.test_snapshot_timestamp import BaseSnapshotTimestamp
from dbt.tests.util import run_dbt, run_dbt_and_capture
from snapshot_cases import HardDeletes

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg]


class SnapshotCase:
    """A case of its own snapshots: ``SNAPSHOTS`` maps file names to their SQL."""

    SNAPSHOTS: dict[str, str] = {}

    @pytest.fixture(scope="class")
    def snapshots(self):
        return self.SNAPSHOTS


def replace_source(project, table: str, select: str) -> None:
    """(Re)create the snapshot's source ``table`` in the test schema from ``select``."""
    project.run_sql(f"create or replace table {project.test_schema}.{table} using iceberg as {select}")


class TestSnapshotCheckCols(BaseSnapshotCheckCols):
    pass


class TestSnapshotTimestamp(BaseSnapshotTimestamp):
    pass


class TestSnapshotHardDeletes(HardDeletes):
    pass


# a list unique_key, the timestamp strategy, a current validity that is a date rather than NULL, invalidated deletes:
# the run is narrowed on two key columns and the current filter dbt_valid_to_current sets
LIST_KEY_SNAPSHOT = """
{% snapshot snap_list_key %}
{{ config(unique_key=['id', 'part'], strategy='timestamp', updated_at='updated_at', target_schema=schema,
          dbt_valid_to_current="timestamp'9999-12-31 00:00:00'", hard_deletes='invalidate') }}
select * from {{ target.schema }}.src_list_key
{% endsnapshot %}
"""
# (id, part, value, updated_at day) per run: (1, x) changes, (2, x) is deleted, (3, y) is new, (1, y) keeps its values
# but (in run 3) gets a later updated_at, which the timestamp strategy counts as a change
LIST_KEY_RUNS = (
    [(1, "x", "a", 1), (1, "y", "b", 1), (2, "x", "c", 1)],
    [(1, "x", "A", 2), (1, "y", "b", 1), (3, "y", "d", 2)],
    [(1, "x", "A", 2), (1, "y", "b", 3), (3, "y", "d", 2)],
)


class TestSnapshotListKeyValidToCurrent(SnapshotCase):
    SNAPSHOTS = {"snap_list_key.sql": LIST_KEY_SNAPSHOT}

    def test_versions(self, project):
        for rows in LIST_KEY_RUNS:
            values = ", ".join(f"({i}, '{p}', '{v}', timestamp'2026-01-0{d} 00:00:00')" for i, p, v, d in rows)
            replace_source(project, "src_list_key", f"select * from values {values} as t(id, part, value, updated_at)")
            run_dbt(["snapshot"])
        got = sorted(tuple(r) for r in project.run_sql(
            f"select id, part, value, day(dbt_valid_from), dbt_valid_to = timestamp'9999-12-31 00:00:00' "
            f"from {project.test_schema}.snap_list_key", fetch="all"))
        assert got == [
            (1, "x", "A", 2, True), (1, "x", "a", 1, False),
            (1, "y", "b", 1, False), (1, "y", "b", 3, True),
            (2, "x", "c", 1, False),  # deleted in run 2: closed, no current version
            (3, "y", "d", 2, True),
        ]


# a column the snapshot's query can never make null (a literal): dbt's rows closing a deleted record carry null
# there, as in every source column
LITERAL_SNAPSHOT = """
{% snapshot snap_literal %}
{{ config(unique_key='id', strategy='check', check_cols=['value'], target_schema=schema, hard_deletes='invalidate') }}
select id, 'crm' as src_sys, value from {{ target.schema }}.src_literal
{% endsnapshot %}
"""


class TestSnapshotOfANotNullColumnInvalidatesDeletes(SnapshotCase):
    SNAPSHOTS = {"snap_literal.sql": LITERAL_SNAPSHOT}

    def test_a_deleted_record_is_closed(self, project):
        """Regression: the first run created the snapshot's columns NOT NULL where its query's were (a literal,
        a coalesce), which Spark's CREATE TABLE AS SELECT (dbt-spark) never does; dbt's rows closing a hard-deleted
        record hold null in every source column, so every later run failed on the NOT NULL column and the
        snapshot recorded nothing more until the record came back."""
        for ids in ((1, 2), (1,)):
            values = ", ".join(f"({i}, 'v{i}')" for i in ids)
            replace_source(project, "src_literal", f"select * from values {values} as t(id, value)")
            run_dbt(["snapshot"])
        got = sorted(tuple(r) for r in project.run_sql(
            f"select id, src_sys, value, dbt_valid_to is null from {project.test_schema}.snap_literal", fetch="all"))
        assert got == [(1, "crm", "v1", True), (2, "crm", "v2", False)]


REPEATED_KEY_SNAPSHOT = """
{% snapshot snap_repeated %}
{{ config(unique_key='id', strategy='check', check_cols=['value'], target_schema=schema) }}
select * from values (1, 'a'), (1, 'b'), (2, 'c') as t(id, value)
{% endsnapshot %}
"""


class TestSnapshotOfARepeatedKey(SnapshotCase):
    SNAPSHOTS = {"snap_repeated.sql": REPEATED_KEY_SNAPSHOT}

    def test_the_error_names_the_key_in_the_snapshots_terms(self, project):
        """Regression: a query returning a unique_key twice failed with the change pipeline's message, which told
        the user to set a ``sequence_column`` (a snapshot has none)."""
        results = run_dbt(["snapshot"], expect_pass=False)
        message = results.results[0].message
        assert "unique_key 'id' more than once (e.g. 1)" in message and "sequence_column" not in message, message


JOINED_KEY_SNAPSHOT = """
{% snapshot snap_joined %}
{{ config(unique_key=['k1', 'k2'], strategy='check', check_cols=['v'], target_schema=schema) }}
select * from {{ target.schema }}.src_joined
{% endsnapshot %}
"""


class TestSnapshotOfKeysThatReadAlikeInDbtsHash(SnapshotCase):
    SNAPSHOTS = {"snap_joined.sql": JOINED_KEY_SNAPSHOT}

    def test_the_error_names_the_keys(self, project):
        """Regression: ('p|q', 'r') and ('p', 'q|r') get one dbt_scd_id (dbt joins key parts with '|'); the run
        failed saying only that dbt's staged versions repeat an id, naming neither the keys nor a way out."""
        for rows in ("('a', 'x', 1)", "('a', 'x', 1), ('p|q', 'r', 2), ('p', 'q|r', 3)"):
            replace_source(project, "src_joined", f"select * from values {rows} as t(k1, k2, v)")
            results = run_dbt(["snapshot"], expect_pass=rows.count("(") == 1)
        message = results.results[0].message
        assert "read alike in dbt's dbt_scd_id" in message, message
        assert '{"k0":"p","k1":"q|r"} and {"k0":"p|q","k1":"r"}' in message, message
        got = project.run_sql(f"select k1, k2, v from {project.test_schema}.snap_joined", fetch="all")
        assert [tuple(r) for r in got] == [("a", "x", 1)]  # nothing was written


# a project's timestamp strategy that versions a record whenever its updated_at differs, back-dated ones too
OVERRIDDEN_STRATEGY = """
{% macro snapshot_timestamp_strategy(node, snapshotted_rel, current_rel, model_config, target_exists) %}
  {% set strategy = dbt.snapshot_timestamp_strategy(node, snapshotted_rel, current_rel, model_config, target_exists) %}
  {% do strategy.update({'row_changed': '(' ~ snapshotted_rel ~ '.dbt_valid_from != ' ~ current_rel
                                        ~ '.updated_at)'}) %}
  {{ return(strategy) }}
{% endmacro %}
"""
BACKDATED_SNAPSHOT = """
{% snapshot snap_backdated %}
{{ config(unique_key='id', strategy='timestamp', updated_at='updated_at', target_schema=schema) }}
select * from {{ target.schema }}.src_backdated
{% endsnapshot %}
"""


class TestSnapshotOfAnOverriddenStrategy(SnapshotCase):
    SNAPSHOTS = {"snap_backdated.sql": BACKDATED_SNAPSHOT}

    @pytest.fixture(scope="class")
    def macros(self):
        return {"strategy.sql": OVERRIDDEN_STRATEGY}

    def test_a_back_dated_change_is_versioned_as_the_override_says(self, project):
        """Regression: the narrowing applied dbt's own timestamp test (updated_at later than the version's) to a
        project that had overridden the strategy under its built-in name: a back-dated change was no candidate,
        and the version the project's strategy asks for was silently missed."""
        for value, day in (("a", 2), ("b", 1)):
            replace_source(project, "src_backdated",
                           f"select 1 as id, '{value}' as value, timestamp'2026-01-0{day} 00:00:00' as updated_at")
            run_dbt(["snapshot"])
        got = sorted(tuple(r) for r in project.run_sql(
            f"select value, dbt_valid_to is null from {project.test_schema}.snap_backdated", fetch="all"))
        assert got == [("a", False), ("b", True)]


PROPERTIES_SNAPSHOT = """
{% snapshot snap_props %}
{{ config(unique_key='id', strategy='check', check_cols=['value'], target_schema=schema,
          tblproperties={'owner_team': 'crm'}) }}
select * from values (1, 'a') as t(id, value)
{% endsnapshot %}
"""

PARTITIONED_SNAPSHOT = """
{% snapshot snap_partitioned %}
{{ config(unique_key='id', strategy='check', check_cols=['value'], target_schema=schema, partition_by='id') }}
select * from values (1, 'a') as t(id, value)
{% endsnapshot %}
"""


class TestSnapshotTableSettings(SnapshotCase):
    """Regression: a partial copy-on-write snapshot created its table without the snapshot's ``tblproperties``
    and without its ``partition_by``, ``clustered_by`` or ``location_root``, silently (dbt-spark's CREATE TABLE AS
    SELECT honours them). Properties are set now; the others are refused before anything is written."""

    SNAPSHOTS = {"snap_props.sql": PROPERTIES_SNAPSHOT, "snap_partitioned.sql": PARTITIONED_SNAPSHOT}

    def test_properties_are_set_and_partitioning_is_refused(self, project):
        run_dbt(["snapshot", "-s", "snap_props"])
        properties = dict(project.run_sql(f"show tblproperties {project.test_schema}.snap_props", fetch="all"))
        assert properties.get("owner_team") == "crm"
        _, out = run_dbt_and_capture(["snapshot", "-s", "snap_partitioned"], expect_pass=False)
        assert "snapshot_write='partial_cow' cannot honour partition_by" in out
        tables = [r[1] for r in project.run_sql(f"show tables in {project.test_schema}", fetch="all")]
        assert "snap_partitioned" not in tables


SAME_UPDATED_AT_SNAPSHOT = """
{% snapshot snap_same_upd %}
{{ config(unique_key='id', strategy='check', check_cols=['value'], updated_at='updated_at',
          target_schema=schema) }}
select * from {{ target.schema }}.src_same_upd
{% endsnapshot %}
"""


class TestSnapshotOfACheckedChangeWithTheSameUpdatedAt(SnapshotCase):
    SNAPSHOTS = {"snap_same_upd.sql": SAME_UPDATED_AT_SNAPSHOT}

    def test_the_run_is_refused_and_the_record_keeps_its_version(self, project):
        """Regression: with the check strategy and an ``updated_at`` column, a record whose checked value changed
        while its updated_at did not was staged as an update and an insert with one dbt_scd_id; the insert was
        dropped as an existing version and the update closed the record's only current version, silently (dbt-spark's
        Iceberg MERGE fails on the same input)."""
        schema = project.test_schema
        project.run_sql(f"create table {schema}.src_same_upd using iceberg as select * from values "
                        "(1, 'a', timestamp'2026-01-01 00:00:00'), (2, 'b', timestamp'2026-01-01 00:00:00') "
                        "as t(id, value, updated_at)")
        run_dbt(["snapshot"])
        project.run_sql(f"update {schema}.src_same_upd set value = 'changed' where id = 1")
        results = run_dbt(["snapshot"], expect_pass=False)
        message = results.results[0].message
        assert "snap_same_upd" in message and "id=1" in message and "updated_at" in message, message
        rows = project.run_sql(f"select id, value, dbt_valid_to from {schema}.snap_same_upd order by id", fetch="all")
        assert [(r[0], r[1], r[2]) for r in rows] == [(1, "a", None), (2, "b", None)]


# dbt hashes a NULL key as '': the record of key '' and a later record of key NULL get one dbt_scd_id for one
# updated_at
COLLIDING_SNAPSHOT = """
{% snapshot snap_colliding %}
{{ config(unique_key='k', strategy='timestamp', updated_at='upd', target_schema=schema, hard_deletes='invalidate') }}
select * from {{ target.schema }}.src_colliding
{% endsnapshot %}
"""


class TestSnapshotOfAKeySharingADeletedRecordsId(SnapshotCase):
    SNAPSHOTS = {"snap_colliding.sql": COLLIDING_SNAPSHOT}

    def test_the_deleted_record_stays_closed(self, project):
        """Regression: a run's new version whose dbt_scd_id a deleted record's closed version holds was checked
        only against the records the run's narrowing kept, which the deleted record is not among: the insert then
        became an update of that version, re-opening the deleted record with its old values, silently. dbt-spark's
        MERGE inserts nothing for it (the id matches), and so do we now."""
        runs = ["('', 'A'), ('x', 'B')", "('x', 'B')", "('x', 'B'), (cast(null as string), 'C')"]
        for rows in runs:
            replace_source(project, "src_colliding",
                           f"select k, v, timestamp'2025-01-01 00:00:00' as upd from values {rows} as t(k, v)")
            run_dbt(["snapshot"])
        got = sorted((tuple(r) for r in project.run_sql(
            f"select k, v, dbt_valid_to is null from {project.test_schema}.snap_colliding", fetch="all")),
            key=lambda r: (r[0] is None, r))
        assert got == [("", "A", False), ("x", "B", True)]
