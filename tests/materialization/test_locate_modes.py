"""``apply_changes`` locates a batch either routed by index bucket (one shuffle) or in place (the batch's own
partitions, when it is large against the table): both must give the same table, and in place a key repeated across
partitions must still be refused with nothing changed.

The batches are built with one row per Spark partition, so every repeated key reaches two locate tasks. Decimals
of precision <= 18 travel into the locate tasks of large batches as unscaled longs: a table with decimal values
(negative, null, the widest of each kind) checks the way back in both modes, with and without that conversion.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from partialcow.exceptions import ChangeFeedError
from partialcow.index import RowIndex
from partialcow.table.iceberg import IcebergTable
from partialcow.spark import changes as changes_module
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table
from test_bad_input import table_state

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("spark_path_only")]

SPEC = ChangeSpec(key_columns=("k1", "k2"), op_column="_op", model="modes")
SCHEMA = "k1 bigint, k2 string, v int, _op string"
BASE = [(i, k2, i, "I") for i in range(1000) for k2 in ("a", "b")]


def one_row_per_partition(spark, rows: list[tuple]):
    """A DataFrame of ``rows`` where row i is alone in partition i."""
    structs = [F.struct(F.lit(k1).cast("bigint").alias("k1"), F.lit(k2).alias("k2"), F.lit(v).cast("int").alias("v"),
                        F.lit(op).alias("_op")) for k1, k2, v, op in rows]
    return (spark.range(0, len(rows), 1, len(rows))
            .select(F.element_at(F.array(*structs), (F.col("id") + 1).cast("int")).alias("r")).select("r.*"))


def new_table(spark, schema: str) -> str:
    name = f"{schema}.t_{uuid.uuid4().hex[:8]}"
    create_table(spark, name, spark.createDataFrame(BASE, SCHEMA), SPEC)
    return name


@pytest.fixture(scope="module")
def refusing_table(spark, schema):
    """Shared by the refusal cases: each leaves it as it was (which each checks)."""
    return new_table(spark, schema)


@pytest.fixture(params=["in place", "routed"])
def mode(request, monkeypatch):
    """Force the locate mode, and record the one apply_changes took."""
    taken = []
    choose = changes_module._locates_in_place

    def recorded(*args, **kwargs):
        taken.append(choose(*args, **kwargs))
        return taken[-1]

    ratio = 10**9 if request.param == "in place" else 0
    monkeypatch.setattr(changes_module, "_INDEX_ROWS_PER_SHUFFLED_ROW", ratio)
    monkeypatch.setattr(changes_module, "_locates_in_place", recorded)
    return request.param == "in place", taken


BATCH = [
    (1, "a", -1, "U"), (500, "b", -500, "U"), (999, "a", -999, "I"),  # updates (an I of a present key upserts)
    (2, "a", None, "D"), (999, "b", None, "D"),  # deletes
    (5000, "z", 50, "I"), (5001, "z", 51, "U"),  # inserts (a U of an absent key inserts)
    (6000, "z", None, "D"),  # delete of an absent key: nothing
]


def test_both_modes_give_the_same_table(spark, schema, mode):
    in_place, taken = mode
    table = new_table(spark, schema)
    taken.clear()  # create_table applies its first batch too
    metrics = apply_changes(spark, open_table(spark, table, table_format="iceberg"),
                            one_row_per_partition(spark, BATCH), SPEC)
    assert taken == [in_place]
    expected = {(k1, k2): v for k1, k2, v, _ in BASE}
    for k1, k2, v, op in BATCH:
        if op == "D":
            expected.pop((k1, k2), None)
        else:
            expected[(k1, k2)] = v
    assert {(r["k1"], r["k2"]): r["v"] for r in spark.table(table).collect()} == expected
    assert (metrics.rows_updated, metrics.rows_deleted, metrics.rows_inserted) == (3, 2, 2)
    assert RowIndex.open(IcebergTable(spark, table)).verify().ok


@pytest.mark.parametrize("rows, key", [
    ([(7, "a", 1, "U"), (8, "a", 2, "U"), (7, "a", 3, "U")], "(k1=7, k2='a')"),
    ([(7, "b", 1, "U"), (7, "b", None, "D")], "(k1=7, k2='b')"),
    ([(7000, "z", 1, "I"), (8, "b", 2, "U"), (7000, "z", 3, "I")], "(k1=7000, k2='z')"),
    ([(7001, "z", 1, "I"), (7001, "z", None, "D")], "(k1=7001, k2='z')"),
    ([(7002, "z", None, "D"), (7002, "z", None, "D")], "(k1=7002, k2='z')"),
], ids=["present key updated twice", "present key updated and deleted", "new key inserted twice",
        "new key inserted and deleted", "absent key deleted twice"])
def test_a_key_repeated_across_partitions_is_refused_in_both_modes(spark, refusing_table, mode, rows, key):
    in_place, taken = mode
    table = refusing_table
    before = table_state(spark, table)
    with pytest.raises(ChangeFeedError) as info:
        apply_changes(spark, open_table(spark, table, table_format="iceberg"), one_row_per_partition(spark, rows), SPEC)
    assert taken == [in_place]
    message = str(info.value)
    assert "modes" in message and key in message and "more than once" in message, message
    assert table_state(spark, table) == before


DECIMAL_SCHEMA = "k bigint, d7 decimal(7,2), d18 decimal(18,4), d38 decimal(38,10), _op string"
DECIMAL_SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="decimals")


@pytest.mark.parametrize("unscaled", [True, False], ids=["as unscaled longs", "as decimals"])
def test_decimals_keep_their_values_in_both_modes(spark, schema, mode, unscaled, monkeypatch):
    in_place, taken = mode
    # small batches send decimals as they are; the threshold is lowered to send this one as unscaled longs
    monkeypatch.setattr(changes_module, "_UNSCALED_DECIMALS_MIN_ROWS", 0 if unscaled else 10**9)
    name = f"{schema}.dec_{uuid.uuid4().hex[:8]}"
    base = [(i, Decimal(i) / 4, Decimal(-i) / 16, Decimal(i) / 1024, "I") for i in range(200)]
    create_table(spark, name, spark.createDataFrame(base, DECIMAL_SCHEMA), DECIMAL_SPEC)
    taken.clear()
    widest = Decimal("99999999999999.9999")
    batch = [
        (1, Decimal("-99999.99"), -widest, Decimal("-1E-10"), "U"),
        (20, None, widest, None, "U"),  # nulls set
        (-5, Decimal("99999.99"), Decimal("-0.0001"), Decimal("12345678901234567890.5"), "I"),
        (2, None, None, None, "D"),
    ]
    frame = spark.createDataFrame(batch, DECIMAL_SCHEMA)
    apply_changes(spark, open_table(spark, name, table_format="iceberg"), frame, DECIMAL_SPEC)
    assert taken == [in_place]
    expected = {r[0]: r[1:4] for r in base}
    for k, *values, op in batch:
        if op == "D":
            expected.pop(k)
        else:
            expected[k] = tuple(values)
    assert {r["k"]: (r["d7"], r["d18"], r["d38"]) for r in spark.table(name).collect()} == expected
    assert RowIndex.open(IcebergTable(spark, name)).verify().ok
