"""The embedded session end to end: Iceberg DDL, DML, MERGE and metadata tables through the conftest fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from partialcow.exceptions import ConfigurationError
from partialcow.spark.session import get_or_create_session

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]


def test_iceberg_table_create_insert_merge_and_snapshots(spark, spark_warehouse: Path) -> None:
    spark.sql("CREATE SCHEMA IF NOT EXISTS session_test")
    spark.sql("DROP TABLE IF EXISTS session_test.t")
    spark.sql("CREATE TABLE session_test.t (id BIGINT, v STRING) USING iceberg")
    spark.sql("INSERT INTO session_test.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    spark.sql(
        """
        MERGE INTO session_test.t AS t
        USING (SELECT 2 AS id, 'B' AS v UNION ALL SELECT 4, 'd') AS s ON t.id = s.id
        WHEN MATCHED THEN UPDATE SET v = s.v
        WHEN NOT MATCHED THEN INSERT *
        """
    )
    rows = {(r.id, r.v) for r in spark.sql("SELECT id, v FROM session_test.t").collect()}
    assert rows == {(1, "a"), (2, "B"), (3, "c"), (4, "d")}

    snapshots = spark.sql("SELECT snapshot_id, operation FROM session_test.t.snapshots ORDER BY committed_at").collect()
    assert [s.operation for s in snapshots][0] == "append" and len(snapshots) == 2
    first = snapshots[0].snapshot_id
    old = {(r.id, r.v) for r in spark.sql(f"SELECT id, v FROM session_test.t VERSION AS OF {first}").collect()}
    assert old == {(1, "a"), (2, "b"), (3, "c")}

    properties = dict((r.key, r.value) for r in spark.sql("SHOW TBLPROPERTIES session_test.t").collect())
    assert properties["format-version"] == "2"

    # the table and the metastore live in the warehouse folder, not the working folder
    location = spark.sql("DESCRIBE TABLE EXTENDED session_test.t").filter("col_name = 'Location'").collect()[0].data_type
    warehouse = Path(spark.conf.get("spark.sql.warehouse.dir").replace("file:", ""))
    assert location.replace("file:", "").startswith(f"{warehouse}/")
    assert (warehouse / "metastore_db").is_dir()
    spark.sql("DROP TABLE session_test.t PURGE")


def test_driver_runs_the_parallel_collector(spark) -> None:
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert sorted(bean.getName() for bean in beans) == ["PS MarkSweep", "PS Scavenge"]


def test_driver_compiles_with_c2_late(spark) -> None:
    jvm = spark._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    assert bean.getVMOption("Tier4CompileThreshold").getValue() == "150000"
    assert bean.getVMOption("TieredStopAtLevel").getValue() == "4"  # C2 still compiles what is hot enough


def test_a_failing_task_is_not_logged_on_the_console(spark) -> None:
    """Regression: a batch refused inside a Spark task printed the executor's and the scheduler's ERROR logs (the
    Python traceback and two dozen lines of Java stack per task) before dbt's one-line error. The driver's log
    configuration keeps them for your own; the job's error itself still reaches the caller."""
    logs = spark._jvm.org.apache.logging.log4j.LogManager
    for name in ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager"):
        assert str(logs.getLogger(name).getLevel()) == "FATAL", name
    assert str(logs.getRootLogger().getLevel()) == "ERROR"


def test_views_and_plain_tables_share_the_catalog(spark) -> None:
    # dbt creates views and may create non-Iceberg tables next to Iceberg ones: SparkSessionCatalog keeps both.
    spark.sql("CREATE SCHEMA IF NOT EXISTS session_test")
    spark.sql("CREATE OR REPLACE VIEW session_test.v AS SELECT 1 AS one")
    spark.sql("DROP TABLE IF EXISTS session_test.p")
    spark.sql("CREATE TABLE session_test.p (x INT) USING parquet")
    names = {r.tableName for r in spark.sql("SHOW TABLES IN session_test").collect()}
    assert {"v", "p"} <= names
    assert spark.sql("SELECT one FROM session_test.v").collect()[0].one == 1
    spark.sql("DROP VIEW session_test.v")
    spark.sql("DROP TABLE session_test.p")


def test_running_session_is_reused_or_refused(spark) -> None:
    warehouse = spark.conf.get("spark.sql.warehouse.dir").replace("file:", "")
    same = get_or_create_session(table_format="iceberg", warehouse=warehouse, master="local[2]")
    assert same is spark or same._jsparkSession.equals(spark._jsparkSession)
    with pytest.raises(ConfigurationError, match="spark.sql.warehouse.dir"):
        get_or_create_session(table_format="iceberg", warehouse=warehouse + "-other", master="local[2]")
