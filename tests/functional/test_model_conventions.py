"""dbt conventions ``partial_cow_incremental`` keeps as dbt's own materializations do (regressions found in review):
columns a first build creates take nulls later, hooks outside the transaction run, an enforced contract builds a
model whose last line is a comment, and errors name the model, not its alias."""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg]

# amt is never null in the first run (coalesce): Spark calls the column NOT NULL
FEED = """{{ config(materialized='partial_cow_incremental', unique_key='id',
                  post_hook=after_commit("create table if not exists {{ this.schema }}.hook_ran using iceberg as select 1 as x")) }}
{% if var('second', false) %}
select 1 as id, cast(null as int) as amt union all select 2, 5
{% else %}
select 1 as id, coalesce(cast(null as int), 0) as amt
{% endif %}"""

CONTRACT_YML = """
version: 2
models:
  - name: contracted
    config: {contract: {enforced: true}}
    columns:
      - name: id
        data_type: int
        constraints: [{type: not_null}]
      - name: v
        data_type: string
"""

CONTRACTED = """{{ config(materialized='partial_cow_incremental', unique_key='id') }}
select 1 as id, 'a' as v
-- the model's last line is a comment"""

ALIASED = """{{ config(materialized='partial_cow_incremental', unique_key='id', alias='orders_v') }}
select cast(null as int) as id, 'a' as v"""


PY_FAILING = """
def model(dbt, session):
    dbt.config(materialized="table", alias="py_alias")
    if dbt.config.get("materialized") == "table":
        raise ValueError("the model's own error")
    return session.range(1)
"""


SCORES_CSV = """id,score
1,1.5
2,NaN
3,Infinity
"""


class TestModelConventions:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"scores.csv": SCORES_CSV}

    @pytest.fixture(scope="class")
    def models(self):
        return {"feed.sql": FEED, "contracted.sql": CONTRACTED, "schema.yml": CONTRACT_YML,
                "orders_model.sql": ALIASED, "py_failing.py": PY_FAILING}

    def test_a_column_the_first_build_filled_takes_a_null_later(self, project):
        schema = project.test_schema
        run_dbt(["run", "--select", "feed"])
        run_dbt(["run", "--select", "feed", "--vars", "{second: true}"])
        rows = project.run_sql(f"select id, amt from {schema}.feed order by id", fetch="all")
        assert [tuple(r) for r in rows] == [(1, None), (2, 5)]

    def test_a_hook_outside_the_transaction_runs(self, project):
        run_dbt(["run", "--select", "feed"])
        assert project.run_sql(f"select x from {project.test_schema}.hook_ran", fetch="one")[0] == 1

    def test_a_contract_builds_a_model_ending_in_a_comment(self, project, spark):
        """... and its not_null columns are created NOT NULL, the others nullable."""
        run_dbt(["run", "--select", "contracted"])
        assert project.run_sql(f"select v from {project.test_schema}.contracted", fetch="one")[0] == "a"
        schema = spark.table(f"{project.test_schema}.contracted").schema
        assert (schema["id"].nullable, schema["v"].nullable) == (False, True)

    def test_an_error_names_the_model_not_its_alias(self, project):
        results = run_dbt(["run", "--select", "orders_model"], expect_pass=False)
        message = results.results[0].message
        assert "model orders_model" in message and "model orders_v" not in message, message

    def test_a_python_models_error_names_the_model_not_its_alias(self, project):
        results = run_dbt(["run", "--select", "py_failing"], expect_pass=False)
        message = results.results[0].message
        assert "Python model py_failing failed" in message and "the model's own error" in message, message

    def test_a_seed_with_nan_and_infinity_loads(self, project):
        """Regression: the seed's insert held a bare ``NaN``, which Spark reads as a column name."""
        run_dbt(["seed"])
        rows = project.run_sql(f"select id, isnan(score), score from {project.test_schema}.scores order by id",
                               fetch="all")
        assert [tuple(r[:2]) for r in rows] == [(1, False), (2, True), (3, False)]
        assert rows[2][2] == float("inf")


INCREMENTAL = """{{ config(materialized='partial_cow_incremental', unique_key='id') }}
select id, v from {{ ref('src') }}
{% if is_incremental() %} where id > (select max(id) from {{ this }}) {% endif %}"""

UNIT_TESTS_YML = """
unit_tests:
  - name: without_override
    model: inc
    given:
      - input: ref('src')
        rows: [{id: 1, v: a}]
    expect:
      rows: [{id: 1, v: a}]
  - name: with_override
    model: inc
    overrides: {macros: {is_incremental: false}}
    given:
      - input: ref('src')
        rows: [{id: 1, v: a}]
    expect:
      rows: [{id: 1, v: a}]
"""


class TestAUnitTestOfAnIncrementalModel:
    """Regression: dbt requires a unit test of an incremental model to override ``is_incremental``, but looks for
    dbt's own macro, which ours replaces: a unit test without the override failed with "'None' has no attribute
    'schema'". It now says what dbt would have said; with the override it runs."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"src.sql": "select 1 as id, 'a' as v", "inc.sql": INCREMENTAL, "unit.yml": UNIT_TESTS_YML}

    def test_the_missing_override_is_named(self, project):
        run_dbt(["run", "--select", "src"])
        results = run_dbt(["test", "--select", "test_type:unit"], expect_pass=False)
        by_name = {r.node.name: r for r in results.results}
        assert by_name["with_override"].status == "pass"
        message = by_name["without_override"].message or ""
        assert "unit test 'without_override' of an incremental model must set `overrides: {macros: {is_incremental: " \
            "true}}`" in message and "'None'" not in message, message
