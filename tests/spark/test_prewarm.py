"""The warm-up thread of a fresh process: it runs what a model's first batch runs, and leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from partialcow.spark import prewarm
from prewarm_checks import assert_prewarm_leaves_nothing

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]


def test_warm_up_steps_run_without_error(spark, tmp_path: Path) -> None:
    # the thread swallows every error (a warm-up must never fail a model): call its steps directly so that a
    # broken step fails here instead of silently warming nothing
    frame = prewarm._parquet_to_arrow(spark, str(tmp_path))
    assert frame.count() == 2
    prewarm._iceberg_commits(spark, frame, str(tmp_path))
    table = spark._jvm.org.apache.iceberg.hadoop.HadoopTables(spark._jsc.hadoopConfiguration()).load(
        str(tmp_path / "table"))
    snapshot = table.currentSnapshot()
    assert snapshot.operation() == "overwrite" and snapshot.summary().get("partialcow.prewarm") == "1"


def test_warm_up_leaves_no_table_and_no_folder(spark) -> None:
    assert_prewarm_leaves_nothing(spark, "iceberg")
