"""The warm-up thread of a fresh process on a Delta session: its steps run, and nothing is left behind."""

from __future__ import annotations

from pathlib import Path

from partialcow.spark import prewarm
from prewarm_checks import assert_prewarm_leaves_nothing


def test_delta_warm_up_steps_run_without_error(spark, tmp_path: Path) -> None:
    # the thread swallows every error: call its steps directly so that a broken one fails here
    frame = prewarm._parquet_to_arrow(spark, str(tmp_path))
    prewarm._delta_commits(spark, frame, str(tmp_path))
    history = spark.sql(f"describe history delta.`{tmp_path / 'delta'}`").collect()
    assert sorted(int(r.version) for r in history) == [0, 1]


def test_delta_warm_up_leaves_no_table_and_no_folder(spark) -> None:
    assert_prewarm_leaves_nothing(spark, "delta")
