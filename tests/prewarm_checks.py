"""The check both sessions' prewarm tests make (Iceberg here, Delta in the Delta child suite)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from partialcow.spark import prewarm


def assert_prewarm_leaves_nothing(spark: Any, table_format: str) -> None:
    """The whole warm-up leaves the catalog's tables and the temporary folder as it found them."""
    def tables() -> set[tuple[str, str]]:
        return {(t.namespace, t.tableName) for t in spark.sql("SHOW TABLES IN default").collect()}

    before_tables = tables()
    before_folders = set(Path(tempfile.gettempdir()).glob("partialcow-prewarm-*"))
    prewarm._prewarm(spark, table_format)
    assert tables() == before_tables
    assert set(Path(tempfile.gettempdir()).glob("partialcow-prewarm-*")) == before_folders
