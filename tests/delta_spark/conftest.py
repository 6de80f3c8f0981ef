"""The Delta-inside-Spark suite: one process, one SparkSession with Delta in ``spark_catalog`` for every test here.

Run by ``tests/test_delta_inside_spark.py`` in a child pytest process (a JVM holds one session catalog, and the
main test processes hold Iceberg's). To run it directly:
``PARTIALCOW_DELTA_SESSION=1 bash scripts/run_tests.sh tests/delta_spark -n 0``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from delta_env import NO_DELTA_SPARK, delta_spark_jars

TESTS = Path(__file__).resolve().parents[1]
# helpers shared with the Iceberg suites: the CDC oracle, the Delta readers checker, the bad input matrix, the
# snapshot cases
for folder in ("table", "materialization", "faults", "functional"):
    if str(TESTS / folder) not in sys.path:
        sys.path.append(str(TESTS / folder))

JARS = delta_spark_jars()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # a conftest hook sees every collected item: mark (and skip) only this folder's tests
    here = Path(__file__).resolve().parent
    for item in items:
        if here not in Path(item.path).resolve().parents:
            continue
        item.add_marker(pytest.mark.delta_spark)
        if not JARS:
            item.add_marker(pytest.mark.skip(reason=NO_DELTA_SPARK))


@pytest.fixture(scope="session")
def spark(spark_warehouse: Path):
    """The process's SparkSession: Delta's catalog and extension, the embedded metastore, local[2]."""
    from partialcow.spark.session import get_or_create_session

    session = get_or_create_session(table_format="delta", warehouse=str(spark_warehouse), master="local[2]",
                                    delta_jars=JARS)
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture()
def schema(fresh_schema):
    """A fresh schema for one test (in the Delta session), dropped with its tables afterwards."""
    return fresh_schema


@pytest.fixture(scope="class")
def dbt_profile_target(spark_warehouse: Path) -> dict:
    """dbt's profile for the functional tests here: a Delta profile on this process's warehouse and session."""
    return {
        "type": "partialcow",
        "schema": "unused",  # dbt's project fixture replaces it with a unique schema per test class
        "master": "local[2]",
        "warehouse": str(spark_warehouse),
        "table_format": "delta",
        "delta_jars": JARS,
    }


@pytest.fixture(scope="session")
def delta_tables():
    """delta-spark's Python API (``delta.tables``), loaded from the jar as the Maven artifact ships it: generated
    and identity columns can only be declared through it in Delta 3.3 (Spark 3.5's SQL parser has no syntax)."""
    jar = next(j for j in JARS if "delta-spark" in Path(j).name)
    if jar not in sys.path:
        sys.path.append(jar)
    import delta.tables

    return delta.tables
