"""The warm-up thread of a fresh process on a Delta session leaves nothing behind."""

from __future__ import annotations

from prewarm_checks import assert_prewarm_leaves_nothing


def test_delta_warm_up_leaves_no_table_and_no_folder(spark) -> None:
    assert_prewarm_leaves_nothing(spark, "delta")
