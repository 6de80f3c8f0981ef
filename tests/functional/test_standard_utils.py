"""dbt's cross-database macro suites (dbt-tests-adapter ``utils``) that dbt-spark runs on its session profile, plus
the ones it skips there but that pass here, on the embedded Iceberg default.

The suites are grouped: :class:`TestUtils` subclasses every macro suite and builds them as one project with one
``dbt build`` (seeds, models and their ``assert_equal`` tests); :class:`TestDataTypes` does the same for the
``type_*`` macro suites. Where Spark needs other fixtures than the suites' (as dbt-spark found), the class says why.
"""

from __future__ import annotations

import pytest
from dbt.tests.adapter.utils.data_types.test_type_bigint import BaseTypeBigInt
from dbt.tests.adapter.utils.data_types.test_type_boolean import BaseTypeBoolean
from dbt.tests.adapter.utils.data_types.test_type_float import BaseTypeFloat
from dbt.tests.adapter.utils.data_types.test_type_int import BaseTypeInt
from dbt.tests.adapter.utils.data_types.test_type_numeric import BaseTypeNumeric
from dbt.tests.adapter.utils.data_types.test_type_string import BaseTypeString
from dbt.tests.adapter.utils.data_types.test_type_timestamp import BaseTypeTimestamp
from dbt.tests.adapter.utils.fixture_listagg import models__test_listagg_yml
from dbt.tests.adapter.utils.fixture_split_part import seeds__data_split_part_csv
from dbt.tests.adapter.utils.test_any_value import BaseAnyValue
from dbt.tests.adapter.utils.test_array_append import BaseArrayAppend
from dbt.tests.adapter.utils.test_array_concat import BaseArrayConcat
from dbt.tests.adapter.utils.test_array_construct import BaseArrayConstruct
from dbt.tests.adapter.utils.test_bool_or import BaseBoolOr
from dbt.tests.adapter.utils.test_cast import BaseCast
from dbt.tests.adapter.utils.test_cast_bool_to_text import BaseCastBoolToText
from dbt.tests.adapter.utils.test_concat import BaseConcat
from dbt.tests.adapter.utils.test_current_timestamp import BaseCurrentTimestampNaive
from dbt.tests.adapter.utils.test_date import BaseDate
from dbt.tests.adapter.utils.test_date_trunc import BaseDateTrunc
from dbt.tests.adapter.utils.test_dateadd import BaseDateAdd
from dbt.tests.adapter.utils.test_equals import BaseEquals
from dbt.tests.adapter.utils.test_escape_single_quotes import BaseEscapeSingleQuotesBackslash
from dbt.tests.adapter.utils.test_except import BaseExcept
from dbt.tests.adapter.utils.test_hash import BaseHash
from dbt.tests.adapter.utils.test_intersect import BaseIntersect
from dbt.tests.adapter.utils.test_length import BaseLength
from dbt.tests.adapter.utils.test_listagg import BaseListagg
from dbt.tests.adapter.utils.test_position import BasePosition
from dbt.tests.adapter.utils.test_replace import BaseReplace
from dbt.tests.adapter.utils.test_right import BaseRight
from dbt.tests.adapter.utils.test_safe_cast import BaseSafeCast
from dbt.tests.adapter.utils.test_split_part import BaseSplitPart
from dbt.tests.adapter.utils.test_string_literal import BaseStringLiteral
from dbt.tests.adapter.utils.test_timestamps import BaseCurrentTimestamps
from dbt.tests.util import check_relations_equal, get_relation_columns, relation_from_name, run_dbt
from suite_merge import merged_fixture

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg]

# Spark's listagg (collect_list + array_join) takes no ORDER BY and no limit: only the unordered cases apply.
LISTAGG_UNORDERED_SQL = """
with data as (select * from {{ ref('data_listagg') }}),
     wanted as (select * from {{ ref('data_listagg_output') }}),
     computed as (
        select group_col, {{ listagg('string_text', "', '") }} as actual, 'comma_whitespace_unordered' as version
        from data where group_col = 3 group by group_col
        union all
        select group_col, {{ listagg('DISTINCT string_text', "','") }} as actual, 'distinct_comma' as version
        from data where group_col = 3 group by group_col
        union all
        select group_col, {{ listagg('string_text') }} as actual, 'no_params' as version
        from data where group_col = 3 group by group_col
     )
select computed.actual, wanted.expected
from computed join wanted on computed.group_col = wanted.group_col and computed.version = wanted.version
"""


class SparkListagg(BaseListagg):
    @pytest.fixture(scope="class")
    def models(self):
        return {"test_listagg.yml": models__test_listagg_yml, "test_listagg.sql": LISTAGG_UNORDERED_SQL}


class SparkSplitPart(BaseSplitPart):
    """Without the suite's row that splits an empty string: Spark's split() of '' gives [''], not an empty array."""

    @pytest.fixture(scope="class")
    def seeds(self):
        rows = [line for line in seeds__data_split_part_csv.splitlines() if not line.startswith(",")]
        return {"data_split_part.csv": "\n".join(rows) + "\n"}


ARRAY_SUITES = (BaseArrayAppend, BaseArrayConcat, BaseArrayConstruct)
UTIL_SUITES = (
    BaseAnyValue, *ARRAY_SUITES, BaseBoolOr, BaseCast, BaseCastBoolToText, BaseDate, BaseDateAdd,
    BaseDateTrunc, BaseEquals, BaseEscapeSingleQuotesBackslash, BaseExcept, BaseIntersect, BaseLength, SparkListagg,
    BasePosition, BaseSafeCast, SparkSplitPart, BaseStringLiteral,
    # dbt-spark skips these on its session profile; they pass on this adapter's session
    BaseConcat, BaseHash, BaseReplace, BaseRight,
)


def _array_prefix(base: type) -> str:
    return base.__name__.removeprefix("Base").lower()


def _rename_array_models(base: type, name: str, text: str) -> tuple[str, str]:
    # the three array suites each name their models expected/actual
    if base in ARRAY_SUITES and name in ("expected.sql", "actual.sql"):
        return f"{_array_prefix(base)}_{name}", text
    return name, text


class TestUtils(*UTIL_SUITES):  # type: ignore[misc]
    seeds = merged_fixture("seeds", UTIL_SUITES)
    models = merged_fixture("models", UTIL_SUITES, rename=_rename_array_models)

    @pytest.fixture(scope="class")
    def built(self, project):
        return run_dbt(["build"])  # every suite's seeds, models and assert_equal tests

    def test_build_assert_equal(self, project, built):
        assert built and all(r.status in ("success", "pass") for r in built)

    def test_expected_actual(self, project, built):
        for base in ARRAY_SUITES:
            expected, actual = f"{_array_prefix(base)}_expected", f"{_array_prefix(base)}_actual"
            check_relations_equal(project.adapter, [expected, actual])
            self.assert_columns_equal(project, get_relation_columns(project.adapter, expected),
                                      get_relation_columns(project.adapter, actual))

    def test_equal_values(self, project, built):
        counts = {}
        for model, value in (("equal_values", "same"), ("not_equal_values", "different")):
            relation = relation_from_name(project.adapter, model)
            counts[model] = project.run_sql(f"select count(*) from {relation} where expected = '{value}'",
                                            fetch="one")[0]
        assert counts == {"equal_values": 3, "not_equal_values": 6}


DATA_TYPE_SUITES = (BaseTypeBigInt, BaseTypeBoolean, BaseTypeFloat, BaseTypeInt, BaseTypeNumeric, BaseTypeString,
                    BaseTypeTimestamp)


def _type_prefix(base: type) -> str:
    return base.__name__.removeprefix("BaseType").lower()


def _rename_type_files(base: type, name: str, text: str) -> tuple[str, str]:
    prefix = _type_prefix(base)
    return f"{prefix}_{name}", text.replace("- name: expected", f"- name: {prefix}_expected")


# Seeds of one value are inferred as double and bigint by Spark: the float and int suites' expected seeds are typed.
SPARK_SEED_TYPES = {
    f"{kind}_expected_types.yml": f"version: 2\nseeds:\n  - name: {kind}_expected\n    config:\n"
                                  f"      column_types:\n        {kind}_col: {kind}\n"
    for kind in ("float", "int")
}


class TestDataTypes(*DATA_TYPE_SUITES):  # type: ignore[misc]
    seeds = merged_fixture("seeds", DATA_TYPE_SUITES, rename=_rename_type_files, extra=SPARK_SEED_TYPES)
    models = merged_fixture("models", DATA_TYPE_SUITES, rename=_rename_type_files)

    def test_check_types_assert_match(self, project):
        run_dbt(["build"])
        for base in DATA_TYPE_SUITES:
            expected, actual = f"{_type_prefix(base)}_expected", f"{_type_prefix(base)}_actual"
            check_relations_equal(project.adapter, [expected, actual])
            self.assert_columns_equal(project, get_relation_columns(project.adapter, expected),
                                      get_relation_columns(project.adapter, actual))


class TestCurrentTimestamp(BaseCurrentTimestampNaive):
    pass


class TestCurrentTimestamps(BaseCurrentTimestamps):
    """Spark has one timestamp type (session time zone, UTC here) and no backcompat variants to compare."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"get_current_timestamp.sql": "select {{ current_timestamp() }} as current_timestamp"}

    @pytest.fixture(scope="class")
    def expected_schema(self):
        return {"current_timestamp": "timestamp"}

    @pytest.fixture(scope="class")
    def expected_sql(self):
        return "select current_timestamp() as current_timestamp"
