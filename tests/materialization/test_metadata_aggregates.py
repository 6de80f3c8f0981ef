"""After a batch, the table's metadata bounds are the data's min and max, not the replaced values'.

Iceberg answers ``min``/``max`` from its data files' lower and upper bounds (Spark's aggregate push-down, on by
default) and takes them to be exact. A rewrite kept a chunk's old bounds widened by the new values, so after a batch
that deleted the smallest key ``select min(k)`` gave the deleted key.
"""

from __future__ import annotations

import datetime
import uuid

import pytest

from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="bounds")
SCHEMA = "k bigint, v bigint, d double, day date, _op string"
DAY = datetime.date(2026, 1, 1)
# ten pages per column: the batch re-encodes two of them and copies the others
ROWS = [(k, k, k / 4, DAY + datetime.timedelta(days=k), "I") for k in range(20_000)]
# the smallest key deleted; the row with the largest v, d and day lowered; the second row's values raised a little
BATCH = [(0, None, None, None, "D"), (19_999, 7, 1.5, DAY, "U"), (1, 2, 0.5, DAY + datetime.timedelta(days=2), "U")]
AGGREGATES = "min(k), max(k), min(v), max(v), min(d), max(d), min(day), max(day)"
PUSH_DOWN = "spark.sql.iceberg.aggregate-push-down.enabled"


def expected_aggregates() -> tuple:
    rows = {r[0]: r[:4] for r in ROWS}
    for k, v, d, day, op in BATCH:
        if op == "D":
            rows.pop(k)
        else:
            rows[k] = (k, v, d, day)
    columns = list(zip(*rows.values()))
    return tuple(f(c) for c in columns for f in (min, max))


def aggregates_with(spark, name: str, setting: str) -> dict[str, tuple]:
    """``AGGREGATES`` of table ``name`` with the Spark setting ``setting`` on ("true") and off ("false")."""
    answers = {}
    try:
        for value in ("true", "false"):
            spark.conf.set(setting, value)
            answers[value] = tuple(spark.sql(f"select {AGGREGATES} from {name}").first())
    finally:
        spark.conf.unset(setting)
    return answers


def test_min_and_max_from_metadata_after_a_batch(spark, schema):
    name = f"{schema}.bounds_{uuid.uuid4().hex[:8]}"  # a table per path: the module's schema is shared
    create_table(spark, name, spark.createDataFrame(ROWS, SCHEMA), SPEC)
    apply_changes(spark, open_table(spark, name, table_format="iceberg"), spark.createDataFrame(BATCH, SCHEMA), SPEC)
    expected = expected_aggregates()
    answers = aggregates_with(spark, name, PUSH_DOWN)
    assert answers["false"] == expected, "the rows themselves are wrong"
    assert answers["true"] == expected, f"min/max from the metadata: {answers['true']}, from the rows: {expected}"
    # the bounds themselves, as the files table shows them (the min of the lower bounds, the max of the upper)
    metrics = spark.sql(
        f"select min(readable_metrics.k.lower_bound), max(readable_metrics.k.upper_bound), "
        f"min(readable_metrics.v.lower_bound), max(readable_metrics.v.upper_bound) from {name}.files").first()
    assert tuple(metrics) == expected[:4]
