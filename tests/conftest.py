"""Shared fixtures. One SparkSession per test process (created lazily, only by tests that ask for it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def spark_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def spark(spark_warehouse: Path):
    """A local SparkSession with the embedded Iceberg catalog (the product's default), shared by the process."""
    from partialcow.spark.session import get_or_create_session

    os.chdir(spark_warehouse)  # Derby metastore and derby.log land in the temporary folder, not the repo
    session = get_or_create_session(table_format="iceberg", warehouse=str(spark_warehouse / "wh"), master="local[2]")
    yield session
    session.stop()
