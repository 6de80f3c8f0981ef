"""dbt's standard adapter tests (dbt-tests-adapter) against `partialcow` on Iceberg, the embedded default."""

import pytest
from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations
from dbt.tests.adapter.basic.test_empty import BaseEmpty
from dbt.tests.adapter.basic.test_generic_tests import BaseGenericTests
from dbt.tests.adapter.basic.test_incremental import BaseIncremental
from dbt.tests.adapter.basic.test_singular_tests import BaseSingularTests
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
    def project_config_update(self):
        # unique keys need a merge; dbt-spark's default strategy for them is append
        return {"models": {"+incremental_strategy": "merge"}}


class TestPythonModels(BasePythonModelTests):
    pass


class TestPythonIncremental(BasePythonIncrementalTests):
    pass
