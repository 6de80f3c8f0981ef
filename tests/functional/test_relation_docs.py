"""``persist_docs: {relation: true}`` on the materializations whose tables dbt-spark's CREATE TABLE AS SELECT does
not create: ``partial_cow_incremental``, partial copy-on-write snapshots and Python table models (regression: their
tables had no comment, silently)."""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg]

SCHEMA_YML = """
version: 2
models:
  - name: feed
    description: "Orders, one row per order (it's the feed's)"
    config: {persist_docs: {relation: true}}
    columns:
      - name: v
        description: "from the model's documentation"
  - name: py_table
    description: "Built in Python"
    config: {persist_docs: {relation: true}}
snapshots:
  - name: snap
    description: "Order history"
    config: {persist_docs: {relation: true}}
"""

# the post-hook's comment has the last word, as after dbt-spark's materializations (regression: it ran before
# persist_docs, which then wrote the model's description over it)
FEED = """{{ config(materialized='partial_cow_incremental', unique_key='id',
                  persist_docs={'relation': true, 'columns': true},
                  post_hook="alter table {{ this }} alter column v comment 'from the hook'") }}
select 1 as id, 'a' as v"""

PY_TABLE = """
def model(dbt, session):
    dbt.config(materialized="table")
    return session.createDataFrame([(1, "a")], "id int, v string")
"""

SNAPSHOT = """
{% snapshot snap %}
{{ config(unique_key='id', strategy='check', check_cols=['v'], target_schema=schema) }}
select 1 as id, 'a' as v
{% endsnapshot %}
"""


class TestRelationDocs:
    @pytest.fixture(scope="class")
    def models(self):
        return {"feed.sql": FEED, "py_table.py": PY_TABLE, "schema.yml": SCHEMA_YML}

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snap.sql": SNAPSHOT}

    def test_the_tables_carry_the_descriptions(self, project, spark):
        for _ in range(2):  # a later run keeps the comment (and has nothing to change)
            run_dbt(["run"])
            run_dbt(["snapshot"])
            got = {name: spark.catalog.getTable(f"{project.test_schema}.{name}").description
                   for name in ("feed", "py_table", "snap")}
            assert got == {"feed": "Orders, one row per order (it's the feed's)", "py_table": "Built in Python",
                           "snap": "Order history"}
            comments = {c.name: c.description for c in spark.catalog.listColumns(f"{project.test_schema}.feed")}
            assert comments["v"] == "from the hook"
