"""After a batch, a Delta table's log stats are the data's min and max, not the replaced values'.

Delta's readers take ``minValues``/``maxValues`` as exact (``tightBounds``): delta-spark answers ``min``/``max`` of
numbers and dates from them on tables without deletion vectors (``optimizeMetadataQuery``). A rewrite published the
old chunk's bounds widened by the new values: after a batch that deleted the smallest key the log said it was still
there (delta-rs reads the log here). The Iceberg twin, with the rows and the batch:
``tests/materialization/test_metadata_aggregates.py``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from test_metadata_aggregates import BATCH, ROWS, SCHEMA, SPEC, aggregates_with, expected_aggregates

from partialcow.spark.changes import apply_changes, create_table
from partialcow.spark.tables import delta_root, open_table

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("pipeline_path")]

METADATA_QUERY = "spark.databricks.delta.optimizeMetadataQuery.enabled"


def test_min_and_max_from_the_log_after_a_batch(spark, schema):
    name = f"{schema}.t"
    create_table(spark, name, spark.createDataFrame(ROWS, SCHEMA), SPEC, table_format="delta")
    apply_changes(spark, open_table(spark, name, table_format="delta"), spark.createDataFrame(BATCH, SCHEMA), SPEC)
    answers = aggregates_with(spark, name, METADATA_QUERY)
    assert answers["false"] == expected_aggregates(), "the rows themselves are wrong"
    assert answers["true"] == answers["false"], f"min/max from the log: {answers['true']}, from the rows: " \
        f"{answers['false']}"
    # the log's stats as delta-rs reads them: the min of the files' minValues, the max of their maxValues
    files = pa.table(DeltaTable(delta_root(spark, name)).get_add_actions(flatten=True)).to_pydict()
    bounds = tuple(f(v for v in files[f"{side}.{c}"] if v is not None)
                   for c in ("k", "v") for f, side in ((min, "min"), (max, "max")))
    assert bounds == expected_aggregates()[:4]
