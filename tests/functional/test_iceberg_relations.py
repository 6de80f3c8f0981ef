"""Re-running table and view models on the embedded Iceberg catalog (regressions found by the branch work):
a changed view model must serve its new SQL, and a table model must be replaced atomically, keeping history."""

import pytest
from dbt.tests.util import run_dbt

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg]


class TestRerunTableAndView:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "v.sql": "{{ config(materialized='view') }} select {{ var('value', 1) }} as value",
            "t.sql": "{{ config(materialized='table') }} select {{ var('value', 1) }} as value",
        }

    def test_second_run_serves_new_definitions(self, project):
        run_dbt(["run", "--vars", "{value: 1}"])
        run_dbt(["run", "--vars", "{value: 2}"])
        schema = project.test_schema
        assert project.run_sql(f"select value from {schema}.v", fetch="one")[0] == 2
        assert project.run_sql(f"select value from {schema}.t", fetch="one")[0] == 2
        # CREATE OR REPLACE on the Iceberg table: the first version is still in its history
        assert project.run_sql(f"select count(*) from {schema}.t.snapshots", fetch="one")[0] == 2
