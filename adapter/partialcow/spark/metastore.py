"""The embedded Derby metastore: what it needs beyond the tables Spark's Hive client creates by itself.

Iceberg commits to a Hive catalog swap the table's metadata pointer in the metastore. Hive 2.3 (Spark's embedded
metastore) ignores the compare-and-swap condition Iceberg's lock-free commits send, so two writers committing at
the same moment both "succeed" and one commit is silently lost, for Spark SQL writers as much as for ours. With Hive
locks enabled, Iceberg takes a metastore lock around each commit and re-checks its base under it: a commit that lost
the race then retries (or fails loudly), never vanishes. Hive locks need the metastore's transaction tables
(``HIVE_LOCKS``, ``NEXT_LOCK_ID``, ...), which Spark's schema auto-creation does not make: this module creates them
with Hive's own ``TxnDbUtil.prepDb``.

Embedded Derby admits one process at a time, so when a session starts, every lock in the table was left by a process
that died while committing: those are removed, or the next commit would wait for a dead holder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["prepare_embedded_metastore", "LOCK_CONF"]

# Hive locks around every Iceberg commit to the session catalog (ours and Spark SQL's).
LOCK_CONF = {
    "spark.sql.catalog.spark_catalog.lock-enabled": "true",
    "spark.hadoop.iceberg.engine.hive.lock-enabled": "true",
    # a waiting committer polls the lock; Iceberg's default backs off to 5 s between checks
    "spark.hadoop.iceberg.hive.lock-check-max-wait-ms": "500",
}


def prepare_embedded_metastore(spark: SparkSession) -> bool:
    """Create the lock tables of an embedded Derby metastore if missing, and drop stale locks; False (nothing done)
    when the session's metastore is not embedded Derby."""
    jvm: Any = spark.sparkContext._jvm  # noqa: SLF001 - py4j is the way to JDBC and Hive's utilities
    url = spark.sparkContext.getConf().get("spark.hadoop.javax.jdo.option.ConnectionURL")
    if not url or not url.startswith("jdbc:derby:") or jvm is None:
        return False
    jvm.java.lang.Class.forName("org.apache.derby.jdbc.EmbeddedDriver")
    connection = jvm.java.sql.DriverManager.getConnection(url)
    try:
        tables = connection.getMetaData().getTables(None, None, "HIVE_LOCKS", None)
        exists = bool(tables.next())
        tables.close()
        if exists:
            statement = connection.createStatement()
            statement.executeUpdate("DELETE FROM HIVE_LOCKS")
            statement.close()
            return True
    finally:
        connection.close()
    hive_conf = jvm.org.apache.hadoop.hive.conf.HiveConf()
    hive_conf.set("javax.jdo.option.ConnectionURL", url)
    jvm.org.apache.hadoop.hive.metastore.txn.TxnDbUtil.prepDb(hive_conf)
    return True
