"""The embedded Derby metastore: what it needs beyond the schema Spark's Hive client creates by itself.

**Locks.** Iceberg commits to a Hive catalog swap the table's metadata pointer in the metastore. Hive 2.3 (Spark's
embedded metastore) ignores the compare-and-swap condition Iceberg's lock-free commits send, so two writers
committing at the same moment both "succeed" and one commit is silently lost, for Spark SQL writers as much as for
ours. With Hive locks enabled, Iceberg takes a metastore lock around each commit and re-checks its base under it: a
commit that lost the race then retries (or fails loudly), never vanishes. Hive locks need the metastore's
transaction tables (``HIVE_LOCKS``, ``NEXT_LOCK_ID``, ...), which Spark's schema auto-creation does not make: this
module creates them with Hive's own ``TxnDbUtil.prepDb``. Embedded Derby admits one process at a time, so when a
session starts, every lock in the table was left by a process that died while committing: those are removed, or the
next commit would wait for a dead holder.

**Widths.** Hive 2.3's schema, as DataNucleus creates it in Derby, stores a column comment in 256 characters and a
view's SQL in a ``LONG VARCHAR`` (32,700 characters). dbt writes both (``persist_docs``, view models), and a value
that does not fit failed deep inside an Iceberg commit (``CommitStateUnknownException`` after Iceberg's retries).
Those columns are widened once, in one transaction, when a session starts on a schema that still has the narrow
ones (a look at the JDBC metadata otherwise). The limits that remain are :data:`EMBEDDED_LIMITS`: the dbt adapter
checks a model's documentation against them before anything runs.

**Exit.** The driver JVM outlives its Python process by a moment (its shutdown hooks), longer on a busy machine,
and holds Derby's lock on the database until it ends. The next ``dbt`` command of a scheduler, started at once,
failed to boot Derby ("Another instance of Derby may have already booted the database"), and Hive's client retried
for seconds, printing thousands of lines of Java stack traces. Derby is shut down when the Python process exits
(:func:`prepare_embedded_metastore` registers it), which releases the lock before the JVM is told to end.

**One process.** Derby admits one process per database. A second process on the same warehouse (two dbt commands
at once, a ``partialcow`` command beside a run) failed deep inside Hive's client after its retries; it now waits a
moment for Derby's file lock (a process that is ending releases it) and else says which folder is in use
(:func:`wait_for_embedded_metastore`).

**Type changes.** The metastore refuses to replace a table whose columns change to an incompatible type (``int`` to
``string``), which Iceberg allows: ``CREATE OR REPLACE TABLE`` of a model whose cast changed failed.
:data:`EMBEDDED_METASTORE_CONF` lets it through; a remote metastore keeps its own setting.
"""

from __future__ import annotations

import atexit
import re
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from partialcow.exceptions import MetastoreInUseError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "EMBEDDED_LIMITS",
    "EMBEDDED_METASTORE_CONF",
    "LOCK_CONF",
    "drop_leftover_view",
    "iceberg_folder_in_the_way",
    "is_embedded_derby",
    "prepare_embedded_metastore",
    "wait_for_embedded_metastore",
]

# Hive locks around every Iceberg commit to the session catalog (ours and Spark SQL's).
LOCK_CONF = {
    "spark.sql.catalog.spark_catalog.lock-enabled": "true",
    "spark.hadoop.iceberg.engine.hive.lock-enabled": "true",
    # a waiting committer polls the lock; Iceberg's default backs off to 5 s between checks
    "spark.hadoop.iceberg.hive.lock-check-max-wait-ms": "500",
}

# Settings of the metastore that runs inside the driver (read from the Hadoop configuration by Spark's Hive client).
EMBEDDED_METASTORE_CONF = {
    "spark.hadoop.hive.metastore.disallow.incompatible.col.type.changes": "false",
}

# Derby's widest VARCHAR. Columns that Hive compares in queries (table properties) must stay VARCHARs.
_VARCHAR_MAX = 32672

# (table, column, wanted type): what the embedded schema is widened to.
_WIDENED = (
    ("COLUMNS_V2", "COMMENT", f"VARCHAR({_VARCHAR_MAX})"),  # column comments: VARCHAR(256)
    ("PARTITION_KEYS", "PKEY_COMMENT", f"VARCHAR({_VARCHAR_MAX})"),  # partition column comments: VARCHAR(4000)
    ("TBLS", "VIEW_ORIGINAL_TEXT", "CLOB"),  # a view's SQL: LONG VARCHAR (32,700)
    ("TBLS", "VIEW_EXPANDED_TEXT", "CLOB"),
)

# What still does not fit after widening, in characters (the adapter refuses documentation beyond these up front).
EMBEDDED_LIMITS = {
    "column comment": _VARCHAR_MAX,
    "table comment": _VARCHAR_MAX,  # a table property (TABLE_PARAMS.PARAM_VALUE), compared by Hive's filters
}


#: how long a new process waits for another one to release the embedded metastore (one that is ending)
METASTORE_WAIT_SECONDS = 15.0


def wait_for_embedded_metastore(conf: Mapping[str, str], *, timeout: float = METASTORE_WAIT_SECONDS) -> None:
    """Before this process's JVM starts: wait until no other process holds the embedded Derby metastore that
    ``conf`` (a session's settings) names, up to ``timeout`` seconds, else raise ``MetastoreInUseError`` naming it.
    Nothing to wait for with another metastore, or a database not created yet.

    Derby's lock is a POSIX lock on ``dbex.lck``: only tested here, from a process whose JVM has not booted the
    database (closing a file releases every lock its process holds on it).
    """
    import fcntl
    import time

    url = conf.get("spark.hadoop.javax.jdo.option.ConnectionURL", "")
    match = re.match(r"jdbc:derby:;databaseName=([^;]+)", url)
    if match is None or conf.get("spark.hadoop.hive.metastore.uris"):
        return
    lock = Path(match.group(1)) / "dbex.lck"
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(lock, "rb+") as handle:
                fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.lockf(handle, fcntl.LOCK_UN)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise MetastoreInUseError(
                    f"the embedded metastore {lock.parent} is in use by another process (another dbt or partialcow "
                    f"command on this warehouse, waited {timeout:.0f} s): the embedded metastore admits one process "
                    "at a time. Wait for it, or point spark_config at a shared metastore (README: the embedded "
                    "metastore)"
                ) from None
            time.sleep(0.2)


def drop_leftover_view(spark: SparkSession, schema: str, name: str) -> bool:
    """Drop view ``schema.name`` from the metastore where ``DROP VIEW`` left it, and say whether there was one.

    Through Iceberg's SparkSessionCatalog, ``DROP VIEW IF EXISTS`` drops Iceberg views only: a view another session
    catalog wrote (a Delta profile's, plain Spark's) stayed, ``CREATE OR REPLACE VIEW`` over it then failed with
    VIEW_NOT_FOUND, and so did every later run of the model. A table of that name is left alone.
    """
    external = spark._jsparkSession.sharedState().externalCatalog()
    schema, name = schema.lower(), name.lower()  # as the metastore stores them
    if not external.tableExists(schema, name):
        return False
    if str(external.getTable(schema, name).tableType().name()) != "VIEW":
        return False
    external.dropTable(schema, name, True, False)
    spark.catalog.clearCache()  # nothing cached may still answer for the dropped view
    return True


def iceberg_folder_in_the_way(spark: SparkSession, schema: str, name: str) -> str | None:
    """The folder of Iceberg table ``schema.name`` when it lies at the catalog's default location of that name and
    holds files, as seen from a session without Iceberg (a Delta profile's); None otherwise.

    Such a session drops an Iceberg table from the metastore only (Hive keeps an external table's files), and Delta
    creates no table in a folder that is not empty (``DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION``): the
    ``--full-refresh`` that moved a model from Iceberg to Delta lost the old table, then failed, as every run after
    it did. The folder is not deleted here: other tables may still read its files (a renamed table keeps its
    location, a branch image reads the root's files, ``gc.enabled=false`` says never to delete them).
    """
    jvm: Any = spark.sparkContext._jvm
    external = spark._jsparkSession.sharedState().externalCatalog()
    schema, name = schema.lower(), name.lower()
    if not external.tableExists(schema, name):
        return None
    table = external.getTable(schema, name)
    kind = table.properties().get("table_type")
    location = table.storage().locationUri()
    if not kind.isDefined() or str(kind.get()).lower() != "iceberg" or location.isEmpty():
        return None
    if str(location.get()).rstrip("/") != str(external.getDatabase(schema).locationUri()).rstrip("/") + "/" + name:
        return None  # elsewhere: not where the next table of that name goes
    path = jvm.org.apache.hadoop.fs.Path(location.get())  # the URI itself: a string would be escaped again
    filesystem = path.getFileSystem(spark._jsc.hadoopConfiguration())
    if not filesystem.exists(path) or not filesystem.listStatus(path):
        return None
    return str(location.get())


def is_embedded_derby(spark: SparkSession) -> bool:
    """Whether ``spark``'s metastore is an embedded Derby database (the embedded default)."""
    url = spark.sparkContext.getConf().get("spark.hadoop.javax.jdo.option.ConnectionURL")
    remote = spark.sparkContext.getConf().get("spark.hadoop.hive.metastore.uris")
    return url is not None and url.startswith("jdbc:derby:") and not remote


def prepare_embedded_metastore(spark: SparkSession, *, locks: bool = True) -> bool:
    """Widen the embedded Derby schema's narrow columns and (``locks``) create the lock tables if missing and drop
    stale locks, and shut Derby down when this process exits; False (nothing done) when the session's metastore is
    not embedded Derby."""
    jvm: Any = spark.sparkContext._jvm
    if jvm is None or not is_embedded_derby(spark):
        return False
    if id(jvm) not in _RELEASED_AT_EXIT:
        _RELEASED_AT_EXIT.add(id(jvm))
        # registered before the warm-up's handler (spark/prewarm.py), so it runs after that thread has stopped
        atexit.register(_shut_down_derby, jvm)
    url = spark.sparkContext.getConf().get("spark.hadoop.javax.jdo.option.ConnectionURL")
    # Spark's Hive client creates the schema (DataNucleus auto-creation) when it first starts: make it start now.
    spark._jsparkSession.sharedState().externalCatalog().databaseExists("default")
    jvm.java.lang.Class.forName("org.apache.derby.jdbc.EmbeddedDriver")
    connection = jvm.java.sql.DriverManager.getConnection(url)
    try:
        _widen(connection)
        if not locks:
            return True
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


_RELEASED_AT_EXIT: set[int] = set()


def _shut_down_derby(jvm: Any) -> None:
    # Derby reports a clean shutdown as an error (XJ015); a JVM already gone is fine too
    with suppress(Exception):
        jvm.java.sql.DriverManager.getConnection("jdbc:derby:;shutdown=true")


def _column_types(connection: Any) -> dict[tuple[str, str], tuple[str, int]]:
    wanted = {(t, c) for t, c, _ in _WIDENED}
    found = {}
    for table in sorted({t for t, _ in wanted}):
        columns = connection.getMetaData().getColumns(None, "APP", table, None)
        while columns.next():
            key = (columns.getString("TABLE_NAME"), columns.getString("COLUMN_NAME"))
            if key in wanted:
                found[key] = (columns.getString("TYPE_NAME"), columns.getInt("COLUMN_SIZE"))
        columns.close()
    return found


def _widen(connection: Any) -> list[str]:
    """Widen what :data:`_WIDENED` lists and is still narrow, in one transaction; returns the columns changed."""
    current = _column_types(connection)
    todo = []
    for table, column, wanted in _WIDENED:
        if (table, column) not in current:
            continue  # a schema without it (another Hive version): nothing to widen
        type_name, size = current[(table, column)]
        if (wanted == "CLOB" and type_name != "CLOB") or (
            wanted.startswith("VARCHAR") and type_name == "VARCHAR" and size < _VARCHAR_MAX
        ):
            todo.append((table, column, wanted))
    if not todo:
        return []
    connection.setAutoCommit(False)
    statement = connection.createStatement()
    try:
        for table, column, wanted in todo:
            if wanted == "CLOB":
                # Derby cannot alter a LONG VARCHAR's type in place: copy into a new column that takes its name.
                statement.execute(f'ALTER TABLE "{table}" ADD COLUMN "{column}_PCOW" CLOB')
                statement.execute(f'UPDATE "{table}" SET "{column}_PCOW" = CAST("{column}" AS CLOB)')
                statement.execute(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')
                statement.execute(f'RENAME COLUMN "{table}"."{column}_PCOW" TO "{column}"')
            else:
                statement.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" SET DATA TYPE {wanted}')
        connection.commit()
    except Exception:
        connection.rollback()
        raise
    finally:
        statement.close()
        connection.setAutoCommit(True)
    return [f"{table}.{column}" for table, column, _ in todo]
