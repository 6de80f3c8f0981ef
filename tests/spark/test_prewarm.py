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


def test_iceberg_metrics_step_reads_the_footer(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prewarm._parquet_to_arrow(spark, str(tmp_path))
    metrics = prewarm._iceberg_file_metrics(spark, str(tmp_path))
    assert metrics.recordCount() == 2
    # and the thread runs it, on its own file (errors are swallowed there, so record the result)
    counts: list[int] = []
    real = prewarm._iceberg_file_metrics
    monkeypatch.setattr(prewarm, "_iceberg_file_metrics", lambda *a: counts.append(real(*a).recordCount()))
    prewarm._prewarm(spark, "iceberg")
    assert counts == [2]


def test_warm_up_leaves_no_table_and_no_folder(spark) -> None:
    assert_prewarm_leaves_nothing(spark, "iceberg")
