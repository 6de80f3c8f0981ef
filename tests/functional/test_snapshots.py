"""dbt snapshots on Iceberg tables (issue 27: dbt-spark cannot run them on this stack), written by partial
copy-on-write: dbt's own snapshot suites, plus hard deletes (ignore, invalidate, new_record) checked version by
version against dbt-spark's MERGE (``snapshot_cases.py``; the Delta suite runs the same cases)."""

import pytest
from dbt.tests.adapter.basic.test_snapshot_check_cols import BaseSnapshotCheckCols
from dbt.tests.adapter.basic.test_snapshot_timestamp import BaseSnapshotTimestamp
from snapshot_cases import HardDeletes

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg]


class TestSnapshotCheckCols(BaseSnapshotCheckCols):
    pass


class TestSnapshotTimestamp(BaseSnapshotTimestamp):
    pass


class TestSnapshotHardDeletes(HardDeletes):
    pass
