"""``partial_cow_incremental`` models on a branch, through dbt (in-process, embedded Spark + Iceberg).

Regression case for issue 24: such a model built on a branch was written as a plain full table in the overlay
schema, so ``branch_diff`` did not list it and a merge did not carry its changes. Expected rows come from the plain
Python oracles in ``merge_oracle`` (CDC contract, three-way merge), never from the code under test.
"""

from __future__ import annotations

import json

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from merge_oracle import apply_cdc, three_way

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

# (id, name, qty, _op, _ts); batch 1 builds main, 2 and 3 run on branch dev, 4 on main after the branch
BATCHES = {
    1: [(i, f"n{i}", i * 10, "I", 1) for i in range(1, 7)],
    2: [
        (2, "n2", 25, "U", 2),   # update
        (3, None, None, "D", 2),  # delete
        (7, "n7", 70, "I", 2),   # insert
        (4, "old", 41, "U", 2), (4, "n4", 44, "U", 3),  # the latest change per key wins
        (1, "n1", 11, "U", 2),   # changed now, changed back to main's row in batch 3
        (99, None, None, "D", 2),  # a delete of a key nobody has: nothing
    ],
    3: [
        (3, "back", 33, "I", 5),  # re-insert of a key deleted on the branch
        (7, "n7", 77, "U", 5),
        (5, None, None, "D", 5),
        (1, "n1", 10, "U", 1),   # equal to main's row again (the sequence is stored too): key 1 leaves the overlay
    ],
    4: [(2, "n2", 99, "U", 9), (6, "n6", 66, "U", 9)],  # main changes 2 (also changed on dev) and 6
}
COLUMNS = ("id", "name", "qty", "_ts")

CDC_MODEL = """
{{ config(materialized='partial_cow_incremental', unique_key='id', op_column='_op', sequence_column='_ts') }}
{% set batches = %s %}
select * from values
{%- for r in batches[var('batch') | string] %}
  ({{ r[0] }}L, {{ "'" ~ r[1] ~ "'" if r[1] is not none else 'cast(null as string)' }},
   {{ r[2] ~ 'L' if r[2] is not none else 'cast(null as bigint)' }}, '{{ r[3] }}', {{ r[4] }}L)
  {{- ',' if not loop.last }}
{%- endfor %} as t(id, name, qty, _op, _ts)
{#- `this` must be readable on the branch from the first build there (it keeps every row of these batches) -#}
{% if is_incremental() %} where _ts >= (select coalesce(min(_ts), 0) from {{ this }}) {% endif %}
"""
DELTA_MODEL = """
{{ config(materialized='partial_cow_incremental', unique_key='id', file_format='delta') }}
select 1L as id, 'x' as name
"""


def _rows(spark, relation: str) -> dict:
    return {r[0]: tuple(r) for r in spark.table(relation).collect()}


def _run(*args: str, expect_pass: bool = True):
    return run_dbt_and_capture(list(args), expect_pass=expect_pass)


class TestPartialCowIncrementalOnBranches:
    @pytest.fixture(scope="class")
    def models(self):
        batches = {str(k): [list(r) for r in v] for k, v in BATCHES.items()}
        cdc = CDC_MODEL.replace("%s", json.dumps(batches).replace("null", "none"))  # Jinja spells it none
        return {"cdc.sql": cdc, "cdc_delta.sql": DELTA_MODEL}

    def test_build_diff_conflict_merge(self, project, spark):
        schema = project.test_schema
        main, dev = f"{schema}.cdc", f"{schema}__br_dev.cdc"
        state = apply_cdc({}, BATCHES[1])
        run_dbt(["run", "-s", "cdc", "--vars", "{batch: 1}"])
        assert _rows(spark, main) == state
        base = dict(state)

        run_dbt(["run-operation", "branch_create", "--args", "{name: dev}"])
        # a Delta model cannot live on a branch: a clear error, nothing built
        _, out = _run("run", "-s", "cdc_delta", "--vars", "{branch: dev}", expect_pass=False)
        assert "branches are implemented for Iceberg tables" in out and "cdc_delta" in out

        results = run_dbt(["run", "-s", "cdc", "--vars", "{branch: dev, batch: 2}"])
        ours = apply_cdc(base, BATCHES[2])
        assert _rows(spark, dev) == ours
        assert _rows(spark, main) == base  # main untouched
        response = results.results[0].adapter_response
        assert (response["rows_inserted"], response["rows_updated"], response["rows_deleted"]) == (1, 3, 1)
        overlay = {(r["id"], r["_pcow_op"]) for r in spark.table(f"{dev}__pcow_overlay").collect()}
        assert overlay == {(1, "U"), (2, "U"), (4, "U"), (7, "U"), (3, "D")}
        assert spark.table(f"{dev}__pcow_overlay").where("_pcow_op = 'D'").collect()[0]["name"] is None
        properties = dict(tuple(r) for r in spark.sql(f"SHOW TBLPROPERTIES {dev}").collect())
        assert properties["partialcow.image-of"] == f"{schema}.cdc@partialcow_dev"  # read through its image

        # a second incremental batch on the branch applies to the branch's rows, not to main's
        run_dbt(["run", "-s", "cdc", "--vars", "{branch: dev, batch: 3}"])
        ours = apply_cdc(ours, BATCHES[3])
        assert _rows(spark, dev) == ours
        overlay = {(r["id"], r["_pcow_op"]) for r in spark.table(f"{dev}__pcow_overlay").collect()}
        changed_on_dev = {k for k in set(base) | set(ours) if base.get(k) != ours.get(k)}
        assert {k for k, _ in overlay} == changed_on_dev == {2, 3, 4, 5, 7}
        assert (5, "D") in overlay and (3, "U") in overlay
        assert _rows(spark, main) == base

        # main moves on: 2 changes on both sides
        run_dbt(["run", "-s", "cdc", "--vars", "{batch: 4}"])
        theirs = apply_cdc(base, BATCHES[4])
        assert _rows(spark, main) == theirs

        _, out = _run("run-operation", "branch_diff", "--args", "{name: dev}")
        diff = spark.table(f"{schema}__br_dev.partialcow_branch_diff").where(f"model = '{schema}.cdc'").collect()
        got = {(r["key"], r["change"], r["column_name"]) for r in diff}
        expected = set()
        for key in changed_on_dev:
            o, t = ours.get(key), theirs.get(key)
            if t is None and o is not None:
                expected.add((str(key), "insert", None))
            elif o is None and t is not None:
                expected.add((str(key), "delete", None))
            elif o is not None and t is not None:
                expected |= {(str(key), "update", c) for i, c in enumerate(COLUMNS) if i and o[i] != t[i]}
        assert got == expected
        counts = {c: len({k for k, ch, _ in expected if ch == c}) for c in ("insert", "update", "delete")}
        assert (f"{schema}.cdc: {counts['insert']} inserted, {counts['update']} updated, "
                f"{counts['delete']} deleted") in out

        merged, conflict_keys = three_way(base, ours, theirs, policy="ours")
        assert conflict_keys == {2}
        _, out = _run("run-operation", "branch_merge", "--args", "{name: dev}", expect_pass=False)
        assert "1 conflicting key(s)" in out and "nothing was applied" in out
        conflicts = spark.table(f"{schema}__br_dev.partialcow_merge_conflicts").collect()
        assert {(r["key"], r["column_name"], r["base_value"], r["ours_value"], r["theirs_value"]) for r in conflicts} \
            == {("2", "qty", "20", "25", "99"), ("2", "_ts", "1", "2", "9")}
        assert _rows(spark, main) == theirs  # nothing applied

        run_dbt(["run-operation", "branch_merge", "--args", "{name: dev, on_conflict: ours}"])
        assert _rows(spark, main) == merged
        assert _rows(spark, dev) == merged  # the branch continues from the merge result

        # after the merge the model keeps working incrementally on the branch
        run_dbt(["run", "-s", "cdc", "--vars", "{branch: dev, batch: 4}"])
        assert _rows(spark, dev) == apply_cdc(merged, BATCHES[4])
        run_dbt(["run-operation", "branch_drop", "--args", "{name: dev}"])
        assert _rows(spark, main) == merged
