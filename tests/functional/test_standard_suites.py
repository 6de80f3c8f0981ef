"""dbt's adapter suites (dbt-tests-adapter) that dbt-spark runs on its session profile, beyond the utils
(``test_standard_utils.py``) and the basic ones (``test_adapter_suite.py``), and ``partial_cow_incremental``
variants of dbt's incremental suites.

dbt-spark's own choices for its session profile are kept where they concern Spark (the append strategy for the
on_schema_change suite, Spark's literals in unit tests). The ``partial_cow_incremental`` variants run the suites'
models with our materialization: a batch is a set of changes by ``unique_key``, so the unique-key suite (whose
models use keys that repeat within one batch, or none) has no variant; the rest must give the tables dbt expects.
"""

from __future__ import annotations

import re

import pytest
from dbt.tests.adapter.basic.test_incremental import BaseIncremental
from dbt.tests.adapter.basic.test_singular_tests_ephemeral import BaseSingularTestsEphemeral
from dbt.tests.adapter.dbt_show.test_dbt_show import BaseShowLimit, BaseShowSqlHeader
from dbt.tests.adapter.empty.test_empty import BaseTestEmpty, BaseTestEmptyInlineSourceRef, BaseTestEmptySeedFlag
from dbt.tests.adapter.incremental.test_incremental_merge_exclude_columns import BaseMergeExcludeColumns
from dbt.tests.adapter.incremental.test_incremental_on_schema_change import (
    BaseIncrementalOnSchemaChange,
    BaseIncrementalOnSchemaChangeSetup,
)
from dbt.tests.adapter.simple_seed.test_seed import BaseTestEmptySeed
from dbt.tests.adapter.unit_testing.test_case_insensitivity import BaseUnitTestCaseInsensivity
from dbt.tests.adapter.unit_testing.test_invalid_input import BaseUnitTestInvalidInput
from dbt.tests.adapter.unit_testing.test_types import BaseUnitTestingTypes
from dbt.tests.util import check_relations_equal, run_dbt

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg]

class TestShowLimit(BaseShowLimit):
    pass


class TestShowSqlHeader(BaseShowSqlHeader):
    # not merged with TestShowLimit, whose `dbt build` would build this suite's model as a view: Spark's CREATE VIEW
    # cannot take the model's SQL header (a CTE), which only `dbt show` prepends
    pass


class TestEmpty(BaseTestEmpty):
    pass


class TestEmptyInlineSourceRef(BaseTestEmptyInlineSourceRef):
    pass


_NO_SEED_EMPTY = "dbt-core 1.11 (the newest installable here) has no `dbt seed --empty`; dbt-tests-adapter tests it"


class TestEmptySeedFlag(BaseTestEmptySeedFlag):
    @pytest.mark.skip(reason=_NO_SEED_EMPTY)
    def test_seed_empty_creates_table_with_zero_rows(self, project):
        pass

    @pytest.mark.skip(reason=_NO_SEED_EMPTY)
    def test_seed_empty_preserves_column_types(self, project):
        pass

    @pytest.mark.skip(reason=_NO_SEED_EMPTY + " (nor seeds left empty by `dbt build --empty`)")
    def test_build_empty_with_seed(self, project):
        pass


class TestEmptySeed(BaseTestEmptySeed):
    pass


class TestSingularTestsEphemeral(BaseSingularTestsEphemeral):
    pass


class TestUnitTestingTypes(BaseUnitTestingTypes):
    @pytest.fixture
    def data_types(self):
        # (Spark SQL literal, the same value in a unit test's YAML)
        return [
            ["7", "7"],
            ["cast(2.5 as decimal(4, 1))", "2.5"],
            ["'text'", "text"],
            ["false", "false"],
            ["date '2024-02-29'", "2024-02-29"],
            ["timestamp '2024-02-29 12:30:00'", "2024-02-29 12:30:00"],
            ["array(1, 2)", "'array(1, 2)'"],
        ]


class TestUnitTestCaseInsensitivity(BaseUnitTestCaseInsensivity):
    pass


class TestUnitTestInvalidInput(BaseUnitTestInvalidInput):
    pass


class TestAppendOnSchemaChange(BaseIncrementalOnSchemaChangeSetup):
    """The on_schema_change cases dbt-spark runs with its default (append) strategy: ignore and fail."""

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+incremental_strategy": "append"}}

    def test_run_incremental_ignore(self, project):
        self.run_twice_and_assert("model_a incremental_ignore incremental_ignore_target", "incremental_ignore",
                                  "incremental_ignore_target", project)

    def test_run_incremental_fail_on_schema_change(self, project):
        run_dbt(["run", "--models", "model_a incremental_fail", "--full-refresh"])
        second = run_dbt(["run", "--models", "model_a incremental_fail"], expect_pass=False)
        assert "Compilation Error" in second[1].message


# column names that must be quoted everywhere: a keyword and a dash; the first run has the keyword column only, the
# second adds the dashed one (append_new_columns)
SPECIAL_SOURCE = """{{ config(materialized='table') }}
select * from values (1, 'a', 'x'), (2, 'b', 'y'), (3, 'c', 'z') as t(id, `select`, `field-with-dash`)
"""
SPECIAL_INCREMENTAL = """{{ config(materialized='incremental', unique_key='id', on_schema_change='append_new_columns') }}
{% if is_incremental() %}
select id, `select`, `field-with-dash` from {{ ref('special_source') }} where id > 2
{% else %}
select id, `select` from {{ ref('special_source') }} where id <= 2
{% endif %}
"""
SPECIAL_EXPECTED = """{{ config(materialized='table') }}
select id, `select`, case when id > 2 then `field-with-dash` end as `field-with-dash` from {{ ref('special_source') }}
"""


class TestAppendOnSchemaChangeSpecialChars(BaseIncrementalOnSchemaChangeSetup):
    """dbt-spark's append case with columns named by a keyword and with a dash."""

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+incremental_strategy": "append"}}

    @pytest.fixture(scope="class")
    def models(self):
        return {"special_source.sql": SPECIAL_SOURCE, "special_incremental.sql": SPECIAL_INCREMENTAL,
                "special_expected.sql": SPECIAL_EXPECTED}

    def test_append_new_columns_with_special_names(self, project):
        for _ in range(2):
            run_dbt(["run"])
        check_relations_equal(project.adapter, ["special_incremental", "special_expected"])


# --- partial_cow_incremental variants ----------------------------------------------------------------------------

_INCREMENTAL_CONFIG = re.compile(r"""materialized\s*=\s*(['"])incremental\1""")


def as_partial_cow(models: dict[str, str], *, unique_key: str | None = None) -> dict[str, str]:
    """The suite's models with materialized='incremental' made partial_cow_incremental (``unique_key`` added where
    the suite's model has none), and no incremental_strategy (ours has none to choose).

    >>> as_partial_cow({"m.sql": "{{ config(materialized='incremental', incremental_strategy='merge') }}"})
    {'m.sql': "{{ config(materialized='partial_cow_incremental') }}"}
    """
    key = f", unique_key='{unique_key}'" if unique_key else ""
    changed = {}
    for name, text in models.items():
        text = _INCREMENTAL_CONFIG.sub(f"materialized='partial_cow_incremental'{key}", text)
        changed[name] = re.sub(r""",?\s*incremental_strategy\s*=\s*(['"])\w+\1""", "", text)
    return changed


class TestPartialCowIncremental(BaseIncremental):
    @pytest.fixture(scope="class")
    def models(self):
        return as_partial_cow(BaseIncremental.models.__wrapped__(self), unique_key="id")


class TestPartialCowOnSchemaChange(BaseIncrementalOnSchemaChange):
    @pytest.fixture(scope="class")
    def models(self):
        return as_partial_cow(BaseIncrementalOnSchemaChangeSetup.models.__wrapped__(self))

    def test_run_incremental_fail_on_schema_change(self, project):
        # ours stops the model with an error naming the columns, a runtime error (dbt's macros raise at compile time)
        run_dbt(["run", "--models", "model_a incremental_fail", "--full-refresh"])
        second = run_dbt(["run", "--models", "model_a incremental_fail"], expect_pass=False)
        failed = [r for r in second if r.node.name == "incremental_fail"][0]
        assert failed.status == "error" and "on_schema_change" in failed.message


class TestPartialCowMergeExcludeColumns(BaseMergeExcludeColumns):
    @pytest.fixture(scope="class")
    def models(self):
        return as_partial_cow(BaseMergeExcludeColumns.models.__wrapped__(self))


class TestPartialCowSpecialChars(TestAppendOnSchemaChangeSpecialChars):
    """The special-name case through our Parquet writer, page rewriter and row index."""

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {}

    @pytest.fixture(scope="class")
    def models(self):
        return as_partial_cow({"special_source.sql": SPECIAL_SOURCE, "special_incremental.sql": SPECIAL_INCREMENTAL,
                               "special_expected.sql": SPECIAL_EXPECTED})
