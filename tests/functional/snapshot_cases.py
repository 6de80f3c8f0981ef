"""Snapshot cases run on both table formats (``tests/functional/test_snapshots.py`` on Iceberg,
``tests/delta_spark/test_delta_adapter_suite.py`` on Delta).

:class:`HardDeletes` writes the same snapshots twice, through partial copy-on-write and through dbt-spark's
``MERGE`` (``snapshot_write='merge'``, the oracle), for each ``hard_deletes`` mode that closes deleted rows, over
three runs of a source (a table written by Spark SQL between the runs) that changes a row, deletes one, adds one,
then brings the deleted one back. The two writes must hold the same versions, and each mode's versions are also
written out by hand, so a mistake both writes share still fails. The same runs carry regression cases, each named
after the defect it caught (``REGRESSIONS``), and a snapshot with NULL keys that partial_cow refuses with a clear
error.
"""

from __future__ import annotations

import datetime as dt

import pytest
from dbt.tests.util import run_dbt

# ignore (dbt's default) is what dbt's own snapshot suites run
MODES = ("invalidate", "new_record")
WRITES = ("partial_cow", "merge")

# the source of each run: id -> value (id 3 is deleted in run 2 and back in run 3, id 2 changes, id 5 is new)
RUNS = (
    {1: "a", 2: "b", 3: "c", 4: "d"},
    {1: "a", 2: "B", 4: "d", 5: "e"},
    {1: "a", 2: "B", 3: "c", 4: "d", 5: "e"},
)


T1, T2 = "timestamp'2026-01-01 00:00:00'", "timestamp'2026-01-02 00:00:00'"
# Regression cases, source table -> its query per run:
# - nested_null_moves: check_cols='all' fingerprinted arrays and structs with Spark's hashes, which skip NULL
#   elements and fields and leave an array's length out: ids 1-3 changed in run 2 but got no new version
# - deleted_back_same_updated_at: the timestamp strategy with hard deletes re-opened the closed version of id 1, deleted
#   in run 2 and back in run 3 with the same updated_at (its staged insert has that version's dbt_scd_id, which
#   MERGE leaves as it is); id 3 comes back with a later updated_at, a new version
# - date_updated_at_deleted: the timestamp strategy on a date column with hard deletes failed every run after the
#   first ("column 'dbt_valid_from' is date in the table but the model delivers timestamp"): dbt's query puts
#   current_timestamp() beside the dates, which MERGE stores as dates; id 2 is deleted in run 2 and back in run 3
D1, D2 = "date'2026-01-01'", "date'2026-01-02'"
REGRESSIONS = {
    "src_nested": (
        "select 1 as id, array(1, null) as arr, named_struct('a', 1, 'b', 1) as st union all "
        "select 2, array(1), named_struct('a', 1, 'b', 1) union all "
        "select 3, array(5), named_struct('a', 1, 'b', cast(null as int)) union all "
        "select 4, array(cast(null as int)), named_struct('a', cast(null as int), 'b', cast(null as int))",
        "select 1 as id, array(null, 1) as arr, named_struct('a', 1, 'b', 1) as st union all "
        "select 2, array(1, null), named_struct('a', 1, 'b', 1) union all "
        "select 3, array(5), named_struct('a', cast(null as int), 'b', 1) union all "
        "select 4, array(cast(null as int)), named_struct('a', cast(null as int), 'b', cast(null as int))",
    ),
    "src_ts": (
        f"select * from values (1, 'a', {T1}), (2, 'b', {T1}), (3, 'c', {T1}) as t(id, value, upd)",
        f"select * from values (2, 'b', {T1}) as t(id, value, upd)",
        f"select * from values (1, 'a', {T1}), (2, 'b', {T1}), (3, 'c', {T2}) as t(id, value, upd)",
    ),
    "src_date": (
        f"select * from values (1, 'a', {D1}), (2, 'b', {D1}) as t(id, value, upd)",
        f"select * from values (1, 'a', {D1}) as t(id, value, upd)",
        f"select * from values (1, 'a', {D1}), (2, 'b', {D2}) as t(id, value, upd)",
    ),
}


def _regression_snapshots() -> dict[str, str]:
    """The regression cases' snapshots, written by partial copy-on-write only: their expected versions are written
    out by hand, and are what dbt-spark's MERGE wrote from the same runs on Iceberg and on Delta (checked when the
    cases were added; a MERGE twin of each would double their cost in the suite)."""
    out = {"snap_nested.sql": """
{% snapshot snap_nested %}
{{ config(unique_key='id', strategy='check', check_cols='all', target_schema=schema) }}
select * from {{ target.schema }}.src_nested
{% endsnapshot %}
"""}
    for mode in MODES:
        out[f"snap_ts_{mode}.sql"] = f"""
{{% snapshot snap_ts_{mode} %}}
{{{{ config(unique_key='id', strategy='timestamp', updated_at='upd', target_schema=schema, hard_deletes='{mode}') }}}}
select * from {{{{ target.schema }}}}.src_ts
{{% endsnapshot %}}
"""
    out["snap_date_invalidate.sql"] = """
{% snapshot snap_date_invalidate %}
{{ config(unique_key='id', strategy='timestamp', updated_at='upd', target_schema=schema, hard_deletes='invalidate') }}
select * from {{ target.schema }}.src_date
{% endsnapshot %}
"""
    return out


# null_keys_repeat_scd_id: two source rows with a NULL unique_key get one dbt_scd_id; MERGE inserts both (again in
# every run), a table keyed by dbt_scd_id cannot, and every run failed with "key(s) ... appear more than once in one
# batch". snap_null_key's first run has one such row (which works), its second two; snap_null_key_new is built by
# the second run.
NULL_KEY_RUNS = ("select * from values (null, 'a'), (1, 'c') as t(id, value)",
                 "select * from values (null, 'a'), (null, 'b'), (1, 'd') as t(id, value)")
NULL_KEY_SNAPSHOTS = ("snap_null_key", "snap_null_key_new")


def _null_key_snapshot(name: str) -> str:
    return f"""
{{% snapshot {name} %}}
{{{{ config(unique_key='id', strategy='check', check_cols=['value'], target_schema=schema) }}}}
select * from {{{{ target.schema }}}}.src_null_key
{{% endsnapshot %}}
"""


def _snapshot(mode: str, write: str) -> str:
    return f"""
{{% snapshot snap_{mode}_{write} %}}
{{{{ config(unique_key='id', strategy='check', check_cols=['value'], target_schema=schema,
            hard_deletes='{mode}', snapshot_write='{write}') }}}}
select * from {{{{ target.schema }}}}.src
{{% endsnapshot %}}
"""


class HardDeletes:
    """dbt's ``hard_deletes`` modes that close deleted rows, run by partial copy-on-write and checked against
    dbt-spark's MERGE."""

    source_format = "iceberg"  # the source table's format: the session's catalog holds one

    @pytest.fixture(scope="class")
    def snapshots(self):
        out = {f"snap_{m}_{w}.sql": _snapshot(m, w) for m in MODES for w in WRITES}
        out.update(_regression_snapshots())
        return {**out, **{f"{n}.sql": _null_key_snapshot(n) for n in NULL_KEY_SNAPSHOTS}}

    def _rows(self, project, sql: str) -> list[tuple]:
        return sorted((tuple(r) for r in project.run_sql(sql, fetch="all")), key=repr)

    def _versions(self, project, mode: str, write: str) -> list[tuple]:
        deleted = ", coalesce(dbt_is_deleted, 'n/a')" if mode == "new_record" else ", 'n/a'"
        rows = project.run_sql(
            f"select id, value, dbt_valid_to is null{deleted} from {project.test_schema}.snap_{mode}_{write}",
            fetch="all")
        return sorted((tuple(r) for r in rows), key=repr)

    def _chained(self, project, mode: str, write: str) -> bool:
        """Each closed version ends exactly when the key's next version starts (one timestamp per run)."""
        rows = project.run_sql(
            f"select id, dbt_valid_from, dbt_valid_to from {project.test_schema}.snap_{mode}_{write} "
            "order by id, dbt_valid_from", fetch="all")
        by_id: dict[int, list[tuple]] = {}
        for r in rows:
            by_id.setdefault(r[0], []).append(r)
        for versions in by_id.values():
            for before, after in zip(versions, versions[1:]):
                if before[2] != after[1]:
                    return False
        return True

    def test_hard_deletes_match_dbt_spark_merge(self, project):
        for run, rows in enumerate(RUNS):
            values = ", ".join(f"({k}, '{v}')" for k, v in rows.items())
            project.run_sql(f"create or replace table {project.test_schema}.src using {self.source_format} as "
                            f"select * from values {values} as t(id, value)")
            for table, runs in REGRESSIONS.items():
                project.run_sql(f"create or replace table {project.test_schema}.{table} using {self.source_format} "
                                f"as {runs[min(run, len(runs) - 1)]}")
            run_dbt(["snapshot", "--exclude", *NULL_KEY_SNAPSHOTS])
        for mode in MODES:
            ours, merged = self._versions(project, mode, "partial_cow"), self._versions(project, mode, "merge")
            assert ours == merged, mode
            assert self._chained(project, mode, "partial_cow") == self._chained(project, mode, "merge"), mode
        na = "n/a"
        # by hand: id 2's change closes 'b'; id 3's deletion is closed, or closed with a deletion record
        # (which carries the deleted row's values: dbt-spark's own get_columns_in_relation macro made them NULL)
        assert self._versions(project, "invalidate", "partial_cow") == [
            (1, "a", True, na), (2, "B", True, na), (2, "b", False, na), (3, "c", False, na), (3, "c", True, na),
            (4, "d", True, na), (5, "e", True, na)]
        assert self._versions(project, "new_record", "partial_cow") == [
            (1, "a", True, "False"), (2, "B", True, "False"), (2, "b", False, "False"), (3, "c", False, "False"),
            (3, "c", False, "True"), (3, "c", True, "False"), (4, "d", True, "False"), (5, "e", True, "False")]

        self._check_regressions(project)

    def _check_regressions(self, project) -> None:
        schema = project.test_schema
        assert self._rows(project, f"select id, to_json(arr), to_json(st), dbt_valid_to is null "
                                   f"from {schema}.snap_nested") == [  # nested_null_moves
            (1, "[1,null]", '{"a":1,"b":1}', False), (1, "[null,1]", '{"a":1,"b":1}', True),
            (2, "[1,null]", '{"a":1,"b":1}', True), (2, "[1]", '{"a":1,"b":1}', False),
            (3, "[5]", '{"a":1}', False), (3, "[5]", '{"b":1}', True),  # to_json leaves NULL fields out
            (4, "[null]", "{}", True)]
        # deleted_back_same_updated_at: id 1 keeps its closed version and has no current one, as MERGE leaves it
        # (upd = T2, current)
        assert self._rows(project, f"select id, value, upd = {T2}, dbt_valid_to is null "
                                   f"from {schema}.snap_ts_invalidate") == [
            (1, "a", False, False), (2, "b", False, True), (3, "c", False, False), (3, "c", True, True)]
        # new_record: run 2's deletion records are closed in run 3 by the records' return (upd = T2, current,
        # dbt_is_deleted)
        assert self._rows(project, f"select id, value, upd = {T2}, dbt_valid_to is null, dbt_is_deleted "
                                   f"from {schema}.snap_ts_new_record") == [
            (1, "a", False, False, "False"), (1, "a", False, False, "True"),
            (2, "b", False, True, "False"),
            (3, "c", False, False, "False"), (3, "c", False, False, "True"), (3, "c", True, True, "False")]
        # date_updated_at_deleted: id 2 closed on the day of run 2 (a date, as MERGE stores it), back from D2
        assert self._rows(project, f"select id, dbt_valid_from, dbt_valid_to is null, typeof(dbt_valid_to) "
                                   f"from {schema}.snap_date_invalidate") == sorted([
            (1, dt.date(2026, 1, 1), True, "date"), (2, dt.date(2026, 1, 1), False, "date"),
            (2, dt.date(2026, 1, 2), True, "date")], key=repr)

    def test_null_keys_fail_clearly(self, project):
        """null_keys_repeat_scd_id: a clear error naming the snapshot, its unique_key and the rows, in a later run
        and in a first one; the snapshot keeps its versions."""
        schema = project.test_schema
        project.run_sql(f"create or replace table {schema}.src_null_key using {self.source_format} as "
                        f"{NULL_KEY_RUNS[0]}")
        run_dbt(["snapshot", "--select", NULL_KEY_SNAPSHOTS[0]])
        before = self._rows(project, f"select id, value, dbt_valid_to is null from {schema}.snap_null_key")
        assert before == [(1, "c", True), (None, "a", True)]
        project.run_sql(f"create or replace table {schema}.src_null_key using {self.source_format} as "
                        f"{NULL_KEY_RUNS[1]}")
        results = run_dbt(["snapshot", "--select", *NULL_KEY_SNAPSHOTS], expect_pass=False)
        messages = {r.node.name: r.message or "" for r in results}
        for name in NULL_KEY_SNAPSHOTS:
            assert f"snapshot {name}: unique_key 'id' is null in 2 source rows" in messages[name], messages[name]
            assert "where (id) is not null" in messages[name], messages[name]
        assert self._rows(project, f"select id, value, dbt_valid_to is null from {schema}.snap_null_key") == before
