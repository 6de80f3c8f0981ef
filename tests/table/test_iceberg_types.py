"""Every Iceberg column type through ``apply_changes`` under three Spark session time zones, read back by Spark
(vectorized and row readers) and pyiceberg (issue 22 item 2, the Iceberg half of the type matrix).

The table's first snapshot is written by Spark's own Iceberg writer; each batch runs under another session time
zone and inserts, updates (whole rows, nested columns included) and deletes. Every snapshot must read as the batches
define it through every reader, and filters on each column's smallest and largest value (file pruning by the
manifests' bounds) must find every row holding it.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pyarrow as pa
import pytest

from delta_readers import assert_same_keys, assert_same_rows, boundary_values, canonical_rows, sql_literal
from type_matrix import (
    BATCHES,
    INITIAL_IDS,
    TIME_ZONES,
    apply_expected,
    changes_of,
    make_row,
    session_time_zone,
    spark_frame,
    table_of,
)

from partialcow.spark.changes import ChangeSpec, apply_changes
from partialcow.spark.tables import open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

SPEC = ChangeSpec(key_columns=("id",), op_column="_op", model="type_matrix")


def _pyiceberg_literal(value: object, dtype: str) -> object:
    """pyiceberg takes temporal literals as ISO strings (a datetime would be read as a zoned instant)."""
    if dtype == "timestamp":
        return value.astimezone(dt.timezone.utc).isoformat()  # type: ignore[union-attr]
    if dtype in ("timestamp_ntz", "date"):
        return value.isoformat()  # type: ignore[union-attr]
    return value


def test_iceberg_type_matrix_across_time_zones(spark, tmp_path) -> None:
    pyiceberg = pytest.importorskip("pyiceberg")
    from pyiceberg.expressions import EqualTo
    from pyiceberg.table import StaticTable

    spark.sql("CREATE SCHEMA IF NOT EXISTS type_matrix")
    name = f"type_matrix.t_{uuid.uuid4().hex[:8]}"
    state = {i: make_row(i, 0, iceberg=True) for i in INITIAL_IDS}
    (spark_frame(spark, table_of(state.values(), iceberg=True), str(tmp_path)).coalesce(1)
     .writeTo(name).using("iceberg").tableProperty("format-version", "2").create())
    try:
        schema = json.loads(spark.table(name).schema.json())
        types = {f["name"]: f["type"] for f in schema["fields"]}
        assert (types["ts"], types["ntz"], types["dec38"]) == ("timestamp", "timestamp_ntz", "decimal(38,10)")
        jvm = spark.sparkContext._jvm
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)
        expected = {int(table.currentSnapshot().snapshotId()): state}
        for generation, (zone, batch) in enumerate(zip(TIME_ZONES, BATCHES), start=1):
            changes = changes_of(generation=generation, iceberg=True, **batch)
            with session_time_zone(spark, zone):
                apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                              spark_frame(spark, changes, str(tmp_path)), SPEC)
            state = apply_expected(state, generation=generation, iceberg=True, **batch)
            table.refresh()
            expected[int(table.currentSnapshot().snapshotId())] = state
        assert len(expected) == len(BATCHES) + 1

        static = StaticTable.from_metadata(str(table.operations().current().metadataFileLocation()))
        for number, (snapshot, rows) in enumerate(expected.items()):
            want = canonical_rows(list(rows.values()), schema, "id")
            where = f"{name} at snapshot {snapshot} (pyiceberg {pyiceberg.__version__})"
            assert_same_rows(canonical_rows(static.scan(snapshot_id=snapshot).to_arrow().to_pylist(), schema, "id"),
                             want, f"pyiceberg read of {where}")
            for vectorized in ("true", "false"):
                zone = TIME_ZONES[(number + (vectorized == "false")) % len(TIME_ZONES)]
                with session_time_zone(spark, zone):
                    batches = (spark.read.option("snapshot-id", snapshot).option("vectorization-enabled", vectorized)
                               .table(name)._collect_as_arrow())
                got = canonical_rows(pa.Table.from_batches(batches).to_pylist(), schema, "id")
                assert_same_rows(got, want,
                                 f"Spark read (vectorized={vectorized}, session time zone {zone}) of {where}")

        latest = canonical_rows(list(state.values()), schema, "id")
        for number, (column, value, keys) in enumerate(boundary_values(schema, latest)):
            what = f"filter {column} = {value!r} on {name}"
            found = static.scan(row_filter=EqualTo(column, _pyiceberg_literal(value, types[column])),
                                selected_fields=("id",)).to_arrow()
            assert_same_keys(found["id"].to_pylist(), keys, f"pyiceberg {what}")
            with session_time_zone(spark, TIME_ZONES[number % len(TIME_ZONES)]):
                rows = spark.sql(f"SELECT id FROM {name} WHERE `{column}` = {sql_literal(value, types[column])}")
                assert_same_keys([r.id for r in rows.collect()], keys, f"Spark {what}")
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
