"""What the embedded Derby metastore holds (issue 27): long column comments and long view SQL, widened in place;
documentation beyond the remaining limits refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from partialcow.spark import metastore

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg]

# The narrow columns as Hive 2.3's schema has them in Derby (DataNucleus' auto-creation), with a row each.
NARROW_SCHEMA = [
    'CREATE TABLE "TBLS" ("TBL_ID" BIGINT NOT NULL PRIMARY KEY, "VIEW_EXPANDED_TEXT" LONG VARCHAR, '
    '"VIEW_ORIGINAL_TEXT" LONG VARCHAR, "TBL_NAME" VARCHAR(256))',
    'CREATE TABLE "COLUMNS_V2" ("CD_ID" BIGINT NOT NULL, "COMMENT" VARCHAR(256), "COLUMN_NAME" VARCHAR(767) NOT NULL)',
    "INSERT INTO TBLS VALUES (1, 'select 1 as x', 'select 1 as x', 'v')",
    "INSERT INTO COLUMNS_V2 VALUES (1, 'a comment', 'x')",
]


def _query(connection, sql: str) -> list[tuple]:
    statement = connection.createStatement()
    result = statement.executeQuery(sql)
    rows = []
    while result.next():
        rows.append(tuple(result.getString(i + 1) for i in range(result.getMetaData().getColumnCount())))
    statement.close()
    return rows


def test_narrow_columns_are_widened_once_and_keep_their_values(spark, tmp_path: Path) -> None:
    jvm = spark.sparkContext._jvm
    jvm.java.lang.Class.forName("org.apache.derby.jdbc.EmbeddedDriver")
    connection = jvm.java.sql.DriverManager.getConnection(f"jdbc:derby:;databaseName={tmp_path / 'db'};create=true")
    try:
        statement = connection.createStatement()
        for sql in NARROW_SCHEMA:
            statement.execute(sql)
        statement.close()

        assert sorted(metastore._widen(connection)) == [
            "COLUMNS_V2.COMMENT", "TBLS.VIEW_EXPANDED_TEXT", "TBLS.VIEW_ORIGINAL_TEXT"]
        assert metastore._widen(connection) == []  # detected as done: nothing altered again

        types = metastore._column_types(connection)
        assert types[("TBLS", "VIEW_ORIGINAL_TEXT")][0] == "CLOB"
        assert types[("COLUMNS_V2", "COMMENT")] == ("VARCHAR", 32672)
        assert _query(connection, "SELECT TBL_NAME, VIEW_ORIGINAL_TEXT, VIEW_EXPANDED_TEXT FROM TBLS") == [
            ("v", "select 1 as x", "select 1 as x")]
        long_sql = "select '" + "x" * 40_000 + "' as x"
        update = connection.prepareStatement("UPDATE TBLS SET VIEW_ORIGINAL_TEXT = ? WHERE TBL_ID = 1")
        update.setString(1, long_sql)  # how DataNucleus writes the column
        update.executeUpdate()
        update.close()
        assert _query(connection, "SELECT VIEW_ORIGINAL_TEXT FROM TBLS")[0][0] == long_sql
        assert _query(connection, "SELECT COMMENT FROM COLUMNS_V2") == [("a comment",)]
    finally:
        connection.close()


LONG_DOC = "A column comment longer than Derby's 256 characters." * 20  # 1,040 characters
LONG_VIEW_IN_LIST = ", ".join(f"'v{i:06d}'" for i in range(3_400))  # 37,400 characters of SQL

SCHEMA_YML = f"""
version: 2
models:
  - name: documented
    description: "{LONG_DOC}"
    config:
      persist_docs: {{relation: true, columns: true}}
    columns:
      - name: id
        description: "{LONG_DOC}"
"""


class TestLongDocsAndViews:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "documented.sql": "{{ config(materialized='table') }} select 1 as id",
            "schema.yml": SCHEMA_YML,
            "long_view.sql": "{{ config(materialized='view') }} select 1 as x where 'a' not in (" + LONG_VIEW_IN_LIST + ")",
        }

    def test_long_comments_and_view_sql_are_stored(self, project):
        run_dbt(["run"])
        schema = project.test_schema
        described = {r[0]: r[2] for r in project.run_sql(f"describe table {schema}.documented", fetch="all")}
        assert described["id"] == LONG_DOC
        assert project.run_sql(f"select x from {schema}.long_view", fetch="all") == [(1,)]
        # the next run replaces both (the view is dropped and created again, the table replaced)
        run_dbt(["run"])
        assert project.run_sql(f"select x from {schema}.long_view", fetch="all") == [(1,)]


class TestDocsBeyondTheLimitAreRefused:
    @pytest.fixture(scope="class")
    def models(self):
        too_long = "y" * 33_000
        return {
            "documented.sql": "{{ config(materialized='table', persist_docs={'columns': true}) }} select 1 as id",
            "schema.yml": f"version: 2\nmodels:\n  - name: documented\n    columns:\n      - name: id\n"
                          f"        description: \"{too_long}\"\n",
        }

    def test_refused_before_the_model_runs(self, project):
        _, out = run_dbt_and_capture(["run"], expect_pass=False)
        assert "description of column id has 33000 characters" in out
        assert "at most 32672" in out
        assert not project.run_sql(f"show tables in {project.test_schema} like 'documented'", fetch="all")
