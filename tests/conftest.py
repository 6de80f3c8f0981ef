"""Shared fixtures. One SparkSession per test process, created lazily by the first test that needs Spark.

dbt's functional tests (``dbt.tests.fixtures.project``) and our Spark tests share that session: the dbt profile
below points at the same warehouse, so whichever starts first creates the session the other reuses.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from delta_env import DELTA_SESSION_ENV

pytest_plugins = ["dbt.tests.fixtures.project"]

REPO_ROOT = Path(__file__).resolve().parents[1]

# tests/delta_spark needs a JVM whose session catalog is Delta's: tests/test_delta_inside_spark.py runs it in a
# child pytest process with DELTA_SESSION_ENV set; in any other process it is not collected.
# Ignoring the folder itself (not only its files) keeps its conftest, whose hooks would see every item, unloaded.
collect_ignore = [] if os.environ.get(DELTA_SESSION_ENV) else ["delta_spark"]

# The longest files first (longest processing time first): xdist's --dist loadfile hands out files with the most
# tests first, so these files of one or two minutes-long tests (the Delta-inside-Spark child suite alone takes more
# than ten minutes) would start last and leave the other worker idle at the end of the run. The scheduler below
# moves them to the front of the queue, in this order (the files' summed test times in a full CI run's
# `--junitxml`, 2 workers).
_LONGEST = (
    "test_delta_inside_spark.py",
    "branch/test_branch_api.py",
    "branch/test_branch_processes.py",
    "branch/test_branch_dbt.py",
    "branch/test_branch_schema_changes.py",
    "functional/test_snapshots.py",
    "branch/test_branch_images.py",
    "functional/test_models_example.py",
    "branch/test_branch_merge_failures.py",
    "faults/test_crashes.py",
    "functional/test_standard_suites.py",
    "table/test_delta_types.py",
    "functional/test_standalone_cluster.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """CI's time budget: one variant per check (tests/budget.py, ``one_variant_each``); the long mode runs all."""
    from budget import one_variant_each

    kept, dropped = one_variant_each(items)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadFileScheduling

    if config.getoption("dist") != "loadfile":
        return None

    class LongestFirst(LoadFileScheduling):
        def _assign_work_unit(self, node: object) -> None:
            for name in reversed(_LONGEST):
                for scope in [s for s in self.workqueue if s.replace("\\", "/").endswith(name)]:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)


@pytest.fixture(scope="session")
def spark_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def spark(spark_warehouse: Path):
    """A local SparkSession with the embedded Iceberg catalog (the product's default), shared by the process."""
    from partialcow.spark.session import get_or_create_session

    return get_or_create_session(table_format="iceberg", warehouse=str(spark_warehouse), master="local[2]")


def _scratch_schema(spark) -> Iterator[str]:
    name = f"pcow_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {name}")
    yield name
    spark.sql(f"drop schema {name} cascade")


@pytest.fixture(scope="module")
def schema(spark) -> Iterator[str]:
    """A fresh schema for the tests of one module, dropped with its tables afterwards (tests/delta_spark's is per
    test)."""
    yield from _scratch_schema(spark)


@pytest.fixture()
def fresh_schema(spark) -> Iterator[str]:
    """A schema of the test's own, dropped with its tables afterwards (in the session ``spark`` names there)."""
    yield from _scratch_schema(spark)


@pytest.fixture(scope="class")
def dbt_profile_target(spark_warehouse: Path) -> dict:
    """The profile dbt's functional tests run with: the embedded default on this process's warehouse."""
    return {
        "type": "partialcow",
        "schema": "unused",  # dbt's project fixture replaces it with a unique schema per test class
        "master": "local[2]",
        "warehouse": str(spark_warehouse),
        "table_format": "iceberg",
    }


@pytest.fixture(params=["driver", "spark"])
def pipeline_path(request, monkeypatch):
    """Run the test through both ways a batch is applied: on the driver (small batches) and with Spark's jobs."""
    from partialcow.spark.small_batch import DRIVER_ROWS_ENV

    if request.param == "spark":
        monkeypatch.setenv(DRIVER_ROWS_ENV, "0")
    else:
        monkeypatch.delenv(DRIVER_ROWS_ENV, raising=False)
    return request.param


@pytest.fixture()
def spark_path_only(monkeypatch):
    """Force Spark's jobs (for tests of the Spark path's own mechanics, such as its locate modes)."""
    from partialcow.spark.small_batch import DRIVER_ROWS_ENV

    monkeypatch.setenv(DRIVER_ROWS_ENV, "0")
