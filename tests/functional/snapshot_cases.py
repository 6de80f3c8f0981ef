"""Snapshot cases run on both table formats (``tests/functional/test_snapshots.py`` on Iceberg,
``tests/delta_spark/test_delta_adapter_suite.py`` on Delta).

:class:`HardDeletes` writes the same snapshots twice, through partial copy-on-write and through dbt-spark's
``MERGE`` (``snapshot_write='merge'``, the oracle), for each ``hard_deletes`` mode that closes deleted rows, over
three runs of a source (a table written by Spark SQL between the runs) that changes a row, deletes one, adds one,
then brings the deleted one back. The two writes must hold the same versions, and each mode's versions are also
written out by hand, so a mistake both writes share still fails.
"""

from __future__ import annotations

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
        return {f"snap_{m}_{w}.sql": _snapshot(m, w) for m in MODES for w in WRITES}

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
        for rows in RUNS:
            values = ", ".join(f"({k}, '{v}')" for k, v in rows.items())
            project.run_sql(f"create or replace table {project.test_schema}.src using {self.source_format} as "
                            f"select * from values {values} as t(id, value)")
            run_dbt(["snapshot"])
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
