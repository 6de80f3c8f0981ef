"""The warm-up thread of a fresh process: it runs what a model's first batch runs, and leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from partialcow.spark import prewarm
from prewarm_checks import assert_prewarm_leaves_nothing

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]


def test_parquet_step_runs_without_error(spark, tmp_path: Path) -> None:
    # the thread swallows every error (a warm-up must never fail a model): call its step directly so that a
    # broken one fails here instead of silently warming nothing
    frame = prewarm._parquet_to_arrow(spark, str(tmp_path))
    assert frame.count() == 2 and len(frame.columns) == 7


def test_warm_up_leaves_no_table_and_no_folder(spark) -> None:
    assert_prewarm_leaves_nothing(spark, "iceberg")
