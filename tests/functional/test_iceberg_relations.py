"""Re-running table and view models on the embedded Iceberg catalog (regressions found by the branch work):
a changed view model must serve its new SQL, and a table model must be replaced atomically, keeping history.

Regression: a table with a struct column whose field names need quotes (``first name``) made every later run in its
schema fail while listing the schema's relations (``CANNOT_RECOGNIZE_HIVE_TYPE``: the Hive metastore holds the
table's columns with the field names unquoted, and ``SHOW TABLE EXTENDED`` parses them)."""

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


class TestATableWithStructFieldNamesNeedingQuotes:
    """A table model may hold them (dbt-spark's CTAS builds it); partial_cow_incremental refuses them by name
    (``refuse_unlistable_fields``: other tools' listings of the schema fail too), so ``inc`` here has plain names."""

    @pytest.fixture(scope="class")
    def models(self):
        rows = "from values (1L, 'a'), (2L, 'b') as t(id, name)"
        zip_code = "{{ var('zip', 1) }} * id"
        return {
            "t.sql": "{{ config(materialized='table') }} "
                     f"select id, named_struct('first name', name, 'zip-code', {zip_code}) as s {rows}",
            "inc.sql": "{{ config(materialized='partial_cow_incremental', unique_key='id') }} "
                       f"select id, named_struct('first_name', name, 'zip_code', {zip_code}) as s {rows}",
        }

    def test_later_runs_in_its_schema_find_their_tables(self, project):
        run_dbt(["run", "--vars", "{zip: 1}"])
        run_dbt(["run", "--vars", "{zip: 7}"])
        schema = project.test_schema
        for model, fields in (("t", "s.`first name`, s.`zip-code`"), ("inc", "s.first_name, s.zip_code")):
            rows = project.run_sql(f"select id, {fields} from {schema}.{model} order by id", fetch="all")
            assert [tuple(r) for r in rows] == [(1, "a", 7), (2, "b", 14)], model
        # found as Iceberg tables: the table replaced atomically (its history kept), the incremental model batched
        assert project.run_sql(f"select count(*) from {schema}.t.snapshots", fetch="one")[0] == 2
        assert project.run_sql(f"select count(*) from {schema}.inc.snapshots", fetch="one")[0] == 2
