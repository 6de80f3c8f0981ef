"""Decimals handed from Spark to Arrow as unscaled integers (``partialcow.spark.decimal_transfer``): what arrives
equals what Spark's own Arrow conversion delivers, for every precision it applies to and its edge values, and a
first build (which sends them so) and a batch after it store decimal values exactly, as Spark and pyarrow read
them."""

from __future__ import annotations

import decimal
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.decimal_transfer import restore_decimals, send_unscaled, unscaled_decimals
from partialcow.spark.tables import open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

# (precision, scale): every width class of the unscaled integer, the scale at both ends, and two columns Spark
# keeps as BigDecimal (sent as they are)
TYPES = [(1, 0), (2, 2), (7, 2), (9, 9), (10, 0), (17, 5), (18, 0), (18, 18), (19, 2), (38, 10)]


def _scaled(unscaled: int, scale: int) -> decimal.Decimal:
    return decimal.Decimal(unscaled).scaleb(-scale, decimal.Context(prec=60))  # exact: the default context rounds


def _edges(precision: int, scale: int) -> list[decimal.Decimal | None]:
    largest = 10 ** precision - 1
    return [_scaled(largest, scale), _scaled(-largest, scale), _scaled(1, scale), _scaled(-1, scale), decimal.Decimal(0), None,
            _scaled(10 ** (precision - 1) + 7, scale)]


def _frame(spark):
    from pyspark.sql.types import DecimalType, IntegerType, StructField, StructType

    columns = [_edges(p, s) for p, s in TYPES]
    rows = [(i, *(column[i % len(column)] for column in columns)) for i in range(3 * len(columns[0]))]
    schema = StructType([StructField("id", IntegerType())] + [
        StructField(f"d{p}_{s}", DecimalType(p, s)) for p, s in TYPES])
    return spark.createDataFrame(rows, schema).repartition(3)


def test_unscaled_transfer_delivers_what_spark_delivers(spark) -> None:
    frame = _frame(spark)
    decimals = unscaled_decimals(frame.schema)
    assert sorted(decimals) == sorted(f"d{p}_{s}" for p, s in TYPES if p <= 18)
    sent = send_unscaled(frame, decimals)
    assert [f.dataType.simpleString() for f in sent.schema.fields if f.name in decimals] == ["bigint"] * len(decimals)

    direct = pa.Table.from_batches(frame._collect_as_arrow()).sort_by("id")
    arrived = restore_decimals(pa.Table.from_batches(sent._collect_as_arrow()), decimals).sort_by("id")
    assert arrived.schema == direct.schema
    assert arrived.equals(direct)
    # a record batch too, sliced (a non-zero offset) as the executors' batches may be
    batch = restore_decimals(pa.Table.from_batches(sent._collect_as_arrow()).combine_chunks().to_batches()[0]
                             .slice(2, 9), decimals)
    assert isinstance(batch, pa.RecordBatch)
    assert batch.schema == direct.schema
    assert batch.num_rows == 9


def test_decimal_values_stored_exactly(spark, pipeline_path) -> None:
    schema = f"pcow_dec_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    try:
        spec = ChangeSpec(key_columns=("id",), model="decimal_transfer")
        frame = _frame(spark)
        create_table(spark, name, frame, spec)
        expected = {r["id"]: r.asDict() for r in frame.collect()}
        _assert_table_holds(spark, name, expected)

        # a batch through the driver (or the Spark jobs): every value moved by one step of its scale, in range
        from pyspark.sql import functions as F

        moved = frame.select("id", *[
            F.when(F.col(f"d{p}_{s}") > 0, F.col(f"d{p}_{s}") - F.lit(_scaled(1, s)))
             .otherwise(F.col(f"d{p}_{s}") + F.lit(_scaled(1, s))).cast(f"decimal({p},{s})")
             .alias(f"d{p}_{s}") for p, s in TYPES])
        apply_changes(spark, open_table(spark, name, table_format="iceberg"), moved.select(*frame.columns), spec)
        _assert_table_holds(spark, name, {r["id"]: r.asDict() for r in moved.collect()})
    finally:
        spark.sql(f"drop schema {schema} cascade")


def _assert_table_holds(spark, name: str, expected: dict) -> None:
    """Spark's reader and pyarrow over the table's current files both read ``expected`` (rows by id)."""
    by_spark = {r["id"]: r.asDict() for r in spark.table(name).collect()}
    assert by_spark == expected
    files = [r[0].removeprefix("file:") for r in spark.sql(f"select file_path from {name}.files").collect()]
    rows = pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()
    assert {r["id"]: r for r in rows} == expected
