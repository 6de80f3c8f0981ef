"""A Python model (``def model(dbt, session)``) whose DataFrame is the batch of changes, run as two batches.

The first run creates the table, the second (``dbt.is_incremental``) applies changes; both are compared with the
DuckDB oracle and the counts in run_results.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt

from cdc_oracle import CdcOracle, sorted_rows

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

COLUMNS = ("k1", "k2", "v", "_ts")
# (k1, k2, v, _op, _ts)
BATCHES = {
    1: [(1, "a", 10, "I", 1), (2, "a", 20, "I", 1), (2, "b", 21, "I", 1), (3, "a", 30, "I", 1),
        (3, "a", 31, "U", 2), (4, "a", 40, "I", 1), (4, "a", None, "D", 2)],
    2: [(1, "a", 11, "U", 5), (2, "b", None, "D", 5), (4, "a", 41, "I", 5), (5, "z", 50, "U", 5),
        (9, "a", None, "D", 5), (3, "a", 32, "U", 6), (3, "a", 0, "D", 5)],
}

# regression: the type-hinted pandas UDF failed ("Unsupported signature: (s: 'pd.Series') -> 'pd.Series'") since
# models were compiled with the adapter module's `from __future__ import annotations`
PY_MODEL = f'''
def model(dbt, session):
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    dbt.config(materialized="partial_cow_incremental", unique_key=["k1", "k2"], op_column="_op",
               sequence_column="_ts")

    @pandas_udf("string")
    def lower(s: pd.Series) -> pd.Series:
        return s.str.lower()

    batches = {BATCHES!r}
    rows = batches[2 if dbt.is_incremental else 1]
    frame = session.createDataFrame(rows, "k1 bigint, k2 string, v int, _op string, _ts bigint")
    return frame.withColumn("k2", lower("k2"))
'''


class TestPythonModelBatches:
    @pytest.fixture(scope="class")
    def models(self):
        return {"py_changes.py": PY_MODEL}

    def test_two_batches(self, project, spark):
        oracle = CdcOracle(key_columns=("k1", "k2"), columns=COLUMNS, op_column="_op", sequence_column="_ts")
        relation = f"{project.test_schema}.py_changes"
        for batch in (1, 2):
            changes = pa.Table.from_pylist([dict(zip(("k1", "k2", "v", "_op", "_ts"), r)) for r in BATCHES[batch]])
            expected = oracle.apply(changes)
            run_dbt(["run"])
            results = json.loads(Path(project.project_root, "target", "run_results.json").read_text())["results"]
            response = results[0]["adapter_response"]
            assert (response["rows_inserted"], response["rows_updated"], response["rows_deleted"]) == (
                expected.inserted, expected.updated, expected.deleted), f"batch {batch}: {response}"
            assert sorted_rows(spark.table(relation).select(*COLUMNS).collect()) == oracle.rows(), f"batch {batch}"
