"""Every Delta column type through ``apply_changes`` under three Spark session time zones, read back by delta-spark,
delta-rs and polars (issue 22 item 2).

The table is created by delta-rs (zoned timestamps as ``timestamp``, naive ones as ``timestamp_ntz``); each batch
runs under another session time zone and inserts, updates (whole rows, nested columns included) and deletes. Every
version, time travel to the ones before each write included, must read as the batches define it through every
reader (``delta_readers``), and the log stats of our files must match the files.
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("polars")

from delta_readers import NO_DELTA_SPARK, DeltaCheck, assert_readers_agree, delta_spark_jars  # noqa: E402
from type_matrix import (  # noqa: E402
    BATCHES,
    INITIAL_IDS,
    TIME_ZONES,
    apply_expected,
    changes_of,
    make_row,
    session_time_zone,
    spark_frame,
    stats_strings,
    table_of,
)

from partialcow.spark.changes import ChangeSpec, apply_changes  # noqa: E402
from partialcow.spark.tables import open_table  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPEC = ChangeSpec(key_columns=("id",), op_column="_op", model="type_matrix")


def _counts(state: dict, batch: dict) -> tuple[int, int, int]:
    """(inserted, updated, deleted) as the batch's definition implies: an update of an absent key inserts it."""
    upserts = [*batch["inserts"], *batch["updates"]]
    return (sum(i not in state for i in upserts), sum(i in state for i in upserts),
            sum(i in state for i in batch["deletes"]))


def test_delta_type_matrix_across_time_zones(spark, tmp_path) -> None:
    from deltalake import DeltaTable, write_deltalake

    root = str(tmp_path / "matrix")
    state = {i: make_row(i, 0) for i in INITIAL_IDS}
    write_deltalake(root, table_of(state.values()))
    types = {f["name"]: f["type"] for f in json.loads(DeltaTable(root).schema().to_json())["fields"]}
    assert (types["ts"], types["ntz"], types["dec38"]) == ("timestamp", "timestamp_ntz", "decimal(38,10)")
    expected = {0: list(state.values())}
    for generation, (zone, batch) in enumerate(zip(TIME_ZONES, BATCHES), start=1):
        changes = changes_of(generation=generation, **batch)
        with session_time_zone(spark, zone):
            metrics = apply_changes(spark, open_table(spark, root, table_format="delta"),
                                    spark_frame(spark, changes, str(tmp_path)), SPEC)
        assert (metrics.rows_inserted, metrics.rows_updated, metrics.rows_deleted) == _counts(state, batch), zone
        state = apply_expected(state, generation=generation, **batch)
        expected[generation] = list(state.values())
    assert DeltaTable(root).version() == len(BATCHES)
    assert_readers_agree([DeltaCheck(root, expected=expected)], spark_time_zones=TIME_ZONES,
                         stats_strings=stats_strings())
    if not delta_spark_jars():
        pytest.skip(f"read back through delta-rs and polars only: {NO_DELTA_SPARK}")


@pytest.mark.parametrize("zone", [z for z in TIME_ZONES if z != "UTC"])  # the matrix covers UTC
def test_regression_timestamp_ntz_keeps_the_wall_clock(spark, tmp_path, zone: str) -> None:
    """Issue 22: an update of a timestamp_ntz column stored the value shifted by the session time zone
    (08:09:10 became 15:09:10 under America/Los_Angeles) and an insert was refused ("new file ... has type
    timestamp, but Delta table ... declares timestamp_ntz"). The values come as zoned timestamps in the session's
    time zone, as a SQL literal or a model's expression gives them: a timestamp_ntz column keeps their wall clock."""
    from deltalake import DeltaTable, write_deltalake

    root = str(tmp_path / "ntz")
    before = dt.datetime(2020, 1, 1, 1, 2, 3)
    initial = pa.table({"id": pa.array([1, 2], pa.int64()), "ntz": pa.array([before, before], pa.timestamp("us")),
                        "ts": pa.array([before.replace(tzinfo=dt.timezone.utc)] * 2, pa.timestamp("us", tz="UTC"))})
    write_deltalake(root, initial)
    value = "TIMESTAMP'2021-06-07 08:09:10', TIMESTAMP'2021-06-07 08:09:10+00:00'"
    wall = dt.datetime(2021, 6, 7, 8, 9, 10)
    old = {"ntz": before, "ts": before.replace(tzinfo=dt.timezone.utc)}
    new = {"ntz": wall, "ts": wall.replace(tzinfo=dt.timezone.utc)}
    expected = {0: [{"id": 1, **old}, {"id": 2, **old}]}
    # an update alone first (it was stored shifted), then an insert (it was refused) with another update
    batches = [([f"(1L, {value}, 'U')"], [{"id": 1, **new}, {"id": 2, **old}]),
               ([f"(3L, {value}, 'I')", f"(2L, {value}, 'U')"], [{"id": 1, **new}, {"id": 2, **new}, {"id": 3, **new}])]
    for version, (rows, after) in enumerate(batches, start=1):
        with session_time_zone(spark, zone):
            changes = spark.sql(f"SELECT * FROM VALUES {', '.join(rows)} AS t(id, ntz, ts, _op)")
            apply_changes(spark, open_table(spark, root, table_format="delta"), changes, SPEC)
        expected[version] = after
        assert DeltaTable(root).version() == version
        # delta-rs and polars here; the matrix above reads through delta-spark too
        assert_readers_agree([DeltaCheck(root, expected=expected)], delta_spark=False)


def test_timestamp_keys_are_found_in_every_time_zone(spark, tmp_path) -> None:
    """A key of timestamp_ntz and zoned timestamp columns: the row index (built from the files by Spark's Parquet
    reader) and the batch must agree on the key's value and bucket, or an update becomes a second row. Mapped as a
    zoned timestamp, an update of key 2021-06-07 08:09:10 under America/Los_Angeles looked for 15:09:10."""
    from deltalake import write_deltalake

    root = str(tmp_path / "keys")
    walls = [dt.datetime(2021, 6, 7, 8, 9, 10), dt.datetime(2021, 3, 14, 2, 30), dt.datetime(1969, 12, 31, 23, 59)]
    key = lambda wall, n: {"k": wall + dt.timedelta(minutes=n), "z": wall.replace(tzinfo=dt.timezone.utc)}  # noqa: E731
    rows = {(w, n): {**key(w, n), "v": n} for w in walls for n in range(3)}
    write_deltalake(root, pa.Table.from_pylist(list(rows.values()), schema=pa.schema(
        [("k", pa.timestamp("us")), ("z", pa.timestamp("us", tz="UTC")), ("v", pa.int64())])))
    spec = ChangeSpec(key_columns=("k", "z"), op_column="_op", model="timestamp_keys")
    expected = {0: list(rows.values())}
    for version, zone in enumerate([z for z in TIME_ZONES if z != "UTC"], start=1):
        wall = walls[version - 1]
        batch = [{**key(wall, 0), "v": 100 * version, "_op": "U"}, {**key(wall, 1), "v": None, "_op": "D"},
                 {**key(wall, 9), "v": 9, "_op": "I"}]
        rows[(wall, 0)] = {**key(wall, 0), "v": 100 * version}
        rows.pop((wall, 1))
        rows[(wall, 9)] = {**key(wall, 9), "v": 9}
        changes = pa.Table.from_pylist(batch, schema=pa.schema(
            [("k", pa.timestamp("us")), ("z", pa.timestamp("us", tz="UTC")), ("v", pa.int64()), ("_op", pa.string())]))
        with session_time_zone(spark, zone):
            metrics = apply_changes(spark, open_table(spark, root, table_format="delta"),
                                    spark_frame(spark, changes, str(tmp_path)), spec)
        assert (metrics.rows_inserted, metrics.rows_updated, metrics.rows_deleted) == (1, 1, 1), zone
        expected[version] = list(rows.values())
    # k alone is unique here, so it names the rows; a second row for a key would show as a missing or extra one
    assert_readers_agree([DeltaCheck(root, key="k", expected=expected)], delta_spark=False)
