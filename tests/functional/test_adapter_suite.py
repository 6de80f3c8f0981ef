"""dbt's standard adapter tests (dbt-tests-adapter) against `partialcow` on Iceberg, the embedded default."""

import re

import pytest
from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations
from dbt.tests.adapter.basic.test_empty import BaseEmpty
from dbt.tests.adapter.basic.test_generic_tests import BaseGenericTests
from dbt.tests.adapter.basic.test_incremental import BaseIncremental
from dbt.tests.adapter.basic.test_singular_tests import BaseSingularTests
from dbt.tests.adapter.incremental import test_incremental_unique_id as unique_id_fixtures
from dbt.tests.adapter.incremental.test_incremental_unique_id import BaseIncrementalUniqueKey
from dbt.tests.adapter.python_model.test_python_model import BasePythonIncrementalTests, BasePythonModelTests

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg]


class TestSimpleMaterializations(BaseSimpleMaterializations):
    pass


class TestEmpty(BaseEmpty):
    pass


class TestGenericTests(BaseGenericTests):
    pass


class TestSingularTests(BaseSingularTests):
    pass


class TestIncremental(BaseIncremental):
    pass


class TestIncrementalUniqueKey(BaseIncrementalUniqueKey):
    @pytest.fixture(scope="class")
    def seeds(self):
        # The fixture inserts '2022-02-01' (a string) into a DATE column; Iceberg tables take Spark's strict (ANSI)
        # store assignment, so the literal is typed here. The test logic is unchanged.
        def typed(sql: str) -> str:
            return re.sub(r"'(\d{4}-\d{2}-\d{2})'\)", r"date'\1')", sql)

        return {
            "duplicate_insert.sql": typed(unique_id_fixtures.seeds__duplicate_insert_sql),
            "seed.csv": unique_id_fixtures.seeds__seed_csv,
            "add_new_rows.sql": typed(unique_id_fixtures.seeds__add_new_rows_sql),
        }

    @pytest.fixture(scope="class")
    def project_config_update(self):
        # unique keys need a merge; dbt-spark's default strategy for them is append
        return {"models": {"+incremental_strategy": "merge"}}


class TestPythonModels(BasePythonModelTests):
    pass


class TestPythonIncremental(BasePythonIncrementalTests):
    pass
