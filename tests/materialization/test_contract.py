"""``contract: {enforced: true}`` on a ``partial_cow_incremental`` model: the model's columns (all but the op column)
checked against the declared ones on the first build and on every batch, before anything is written.

Regression: the contract was not checked at all: a batch whose column had another type than declared was applied
(cast into the table's type), and a first build created the table with the model's types.
"""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.dbt]

MODEL = """
{{ config(materialized='partial_cow_incremental', unique_key='id', op_column='_op') }}
select cast({{ var('id', 1) }} as bigint) as id,
       {{ "cast(7 as string)" if var('bad', false) else "cast(" ~ var('v', 7) ~ " as int)" }} as v,
       'U' as _op
"""

SCHEMA_YML = """
models:
  - name: contracted
    config:
      contract: {enforced: true}
    columns:
      - name: id
        data_type: bigint
      - name: v
        data_type: int
"""


class TestContract:
    @pytest.fixture(scope="class")
    def models(self):
        return {"contracted.sql": MODEL, "schema.yml": SCHEMA_YML}

    def test_the_contract_is_checked_on_the_first_build_and_every_batch(self, project, spark):
        relation = f"{project.test_schema}.contracted"
        results = run_dbt(["run", "--vars", "bad: true"], expect_pass=False)
        assert "contract" in results.results[0].message.lower(), results.results[0].message
        assert not spark.catalog.tableExists(relation)
        run_dbt(["run"])
        assert [tuple(r) for r in spark.table(relation).collect()] == [(1, 7)]
        results = run_dbt(["run", "--vars", "{bad: true, id: 2}"], expect_pass=False)
        assert "contract" in results.results[0].message.lower(), results.results[0].message
        assert [tuple(r) for r in spark.table(relation).collect()] == [(1, 7)]
        run_dbt(["run", "--vars", "{id: 2, v: 8}"])
        assert sorted(tuple(r) for r in spark.table(relation).collect()) == [(1, 7), (2, 8)]


CONSTRAINED_YML = """
models:
  - name: contracted
    config:
      contract: {enforced: true}
    columns:
      - name: id
        data_type: bigint
        constraints:
          - type: not_null
      - name: v
        data_type: int
        constraints:
          - type: check
            expression: "v > 0"
"""


class TestConstraintsOfAContract:
    """Regression: dbt-core warned at parse time that a ``partial_cow_incremental`` model's constraints "will be
    ignored" (its list of materializations that apply them is ``table`` and ``incremental``), so ``--warn-error``
    failed every parse of a project with such a model, although the constraints are applied as ``incremental``
    applies them."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"contracted.sql": MODEL, "schema.yml": CONSTRAINED_YML}

    def test_warn_error_parses_the_project(self, project):
        run_dbt(["--warn-error", "parse"])
