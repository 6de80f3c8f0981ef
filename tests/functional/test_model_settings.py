"""A model's Spark SQL settings end with the model (``dbt_adapter/settings_scope.py``): every model of a process
shares the embedded session, and a time zone a Python model or a hook set made later models read timestamps in it.

Each model below records the epoch second of the same timestamp literal, which the session's time zone decides:
UTC (the profile's) unless the model itself set another."""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt

from partialcow.dbt_adapter.settings_scope import Left, SettingsScope

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg]

EPOCH = "cast(timestamp '2026-01-01 00:00:00' as bigint)"
UTC, TOKYO, NEW_YORK = 1767225600, 1767225600 - 9 * 3600, 1767225600 + 5 * 3600

PY_TABLE = f'''
def model(dbt, session):
    dbt.config(materialized="table")
    session.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    return session.sql("select {EPOCH} as epoch")
'''

# the rows of a partial_cow_incremental Python model are read after its code returned: still in its own zone
PY_CHANGES = f'''
def model(dbt, session):
    dbt.config(materialized="partial_cow_incremental", unique_key="id")
    session.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    session.conf.set("spark.sql.shuffle.partitions", "7")
    return session.sql("select 1 as id, {EPOCH} as epoch")
'''

HOOKED = f"""{{{{ config(materialized='table', pre_hook="set spark.sql.session.timeZone = America/New_York") }}}}
select {EPOCH} as epoch"""


def after(*parents: str) -> str:
    refs = " ".join(f"{{{{ ref('{p}') }}}}" for p in parents)
    return f"{{{{ config(materialized='table') }}}}\n-- after {refs}\nselect {EPOCH} as epoch"


class TestModelSettingsEndWithTheModel:
    @pytest.fixture(scope="class")
    def models(self):
        return {"py_table.py": PY_TABLE, "py_changes.py": PY_CHANGES, "hooked.sql": HOOKED,
                "after_py.sql": after("py_table", "py_changes"), "after_hook.sql": after("hooked")}

    def test_later_models_read_in_the_profiles_zone(self, project, spark):
        before = spark.conf.get("spark.sql.shuffle.partitions")
        run_dbt(["run", "--threads", "1"])  # one model at a time: each one's settings are its own

        def epoch(model: str) -> int:
            return project.run_sql(f"select epoch from {project.test_schema}.{model}", fetch="one")[0]

        # each model in its own zone
        assert (epoch("py_table"), epoch("py_changes"), epoch("hooked")) == (TOKYO, TOKYO, NEW_YORK)
        # the models after them in the profile's (both were in the zone of the model before them)
        assert (epoch("after_py"), epoch("after_hook")) == (UTC, UTC)
        # a setting the session did not have before is unset again, one it had is set back
        assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
        assert spark.conf.get("spark.sql.shuffle.partitions") == before


def test_models_running_at_once_keep_the_settings(spark) -> None:
    """A change made while two models run cannot be told apart: nothing is put back. One model alone is restored."""
    scope = SettingsScope()
    key = "spark.sql.caseSensitive"
    start = spark.conf.get(key)
    flipped = "true" if start == "false" else "false"
    try:
        first = scope.enter(spark)
        spark.conf.set(key, flipped)
        assert scope.leave(first) == Left([key], [])
        assert spark.conf.get(key) == start
        first, second = scope.enter(spark), scope.enter(spark)
        spark.conf.set(key, flipped)
        # regression: kept silently; now reported, once per process (the second model saw the same change)
        assert scope.leave(first) == Left([], [key]) and scope.leave(second) == Left([], [])
        assert spark.conf.get(key) == flipped
        # one model whose run another model's overlapped, started and ended in between
        first = scope.enter(spark)
        scope.leave(scope.enter(spark))
        spark.conf.set(key, start)
        assert scope.leave(first) == Left([], [])
        assert scope.leave(scope.enter(None)) == Left([], [])
    finally:
        spark.conf.set(key, start)
