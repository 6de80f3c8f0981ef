"""The casting rules (README: "Casting rules"): every pair of batch type and column type, and the values a checked
conversion lets through.

The expected matrix below is the specification, written out by hand: a change to the rules must change it (and the
README's table) on purpose.
"""

from __future__ import annotations

import decimal

import pytest
from pyspark.sql import types as T

from partialcow.spark.casting import conversion, is_orderable_sequence

TYPES = {
    "tinyint": T.ByteType(), "smallint": T.ShortType(), "int": T.IntegerType(), "bigint": T.LongType(),
    "float": T.FloatType(), "double": T.DoubleType(), "dec12_2": T.DecimalType(12, 2),
    "dec38_10": T.DecimalType(38, 10), "string": T.StringType(), "boolean": T.BooleanType(), "date": T.DateType(),
    "timestamp": T.TimestampType(), "timestamp_ntz": T.TimestampNTZType(), "binary": T.BinaryType(),
}
NAMES = list(TYPES)

# rows: the batch's type; columns (in NAMES order): the table column's type.
# s = same, w = widen (applied silently), c = checked value by value, - = refused
MATRIX = """
              ti si i  bi f  d  dA dB st bo da ts tn bi
tinyint       s  w  w  w  w  w  w  w  -  -  -  -  -  -
smallint      c  s  w  w  w  w  w  w  -  -  -  -  -  -
int           c  c  s  w  c  w  w  w  -  -  -  -  -  -
bigint        c  c  c  s  c  c  c  w  -  -  -  -  -  -
float         c  c  c  c  s  w  c  c  -  -  -  -  -  -
double        c  c  c  c  c  s  c  c  -  -  -  -  -  -
dec12_2       c  c  c  c  c  c  s  w  -  -  -  -  -  -
dec38_10      c  c  c  c  c  c  c  s  -  -  -  -  -  -
string        -  -  -  -  -  -  -  -  s  -  -  -  -  -
boolean       -  -  -  -  -  -  -  -  -  s  -  -  -  -
date          -  -  -  -  -  -  -  -  -  -  s  w  w  -
timestamp     -  -  -  -  -  -  -  -  -  -  -  s  c  -
timestamp_ntz -  -  -  -  -  -  -  -  -  -  -  c  s  -
binary        -  -  -  -  -  -  -  -  -  -  -  -  -  s
"""
_CODES = {"s": "same", "w": "widen", "c": "checked", "-": "refuse"}


def _expected() -> dict[tuple[str, str], str]:
    lines = [line.split() for line in MATRIX.strip().splitlines()[1:]]
    assert [line[0] for line in lines] == NAMES
    return {(row[0], NAMES[i]): _CODES[code] for row in lines for i, code in enumerate(row[1:])}


EXPECTED = _expected()


@pytest.mark.parametrize("source, target", list(EXPECTED), ids=[f"{s}->{t}" for s, t in EXPECTED])
def test_every_pair_of_batch_and_column_types(source, target):
    assert conversion(TYPES[source], TYPES[target]) == EXPECTED[(source, target)]


def test_nulls_and_nested_types():
    assert conversion(T.NullType(), T.DecimalType(5, 1)) == "widen"
    a = T.StructType([T.StructField("x", T.LongType(), True)])
    b = T.StructType([T.StructField("x", T.LongType(), False)])
    assert conversion(a, b) == "same"  # nullability is checked by the writer, not by the type
    # nested values widen part by part; a part needing a check, or other struct fields, refuse the whole
    assert conversion(T.ArrayType(T.IntegerType()), T.ArrayType(T.LongType())) == "widen"
    assert conversion(T.ArrayType(T.LongType()), T.ArrayType(T.IntegerType())) == "refuse"
    assert conversion(T.MapType(T.ShortType(), T.ArrayType(T.ByteType())),
                      T.MapType(T.IntegerType(), T.ArrayType(T.IntegerType()))) == "widen"
    small = T.StructType([T.StructField("x", T.ShortType()), T.StructField("y", T.StringType())])
    assert conversion(small, T.StructType([T.StructField("x", T.IntegerType()), T.StructField("y", T.StringType())])) \
        == "widen"
    assert conversion(small, T.StructType([T.StructField("y", T.StringType()), T.StructField("x", T.IntegerType())])) \
        == "refuse"
    assert conversion(small, T.StructType([T.StructField("x", T.IntegerType())])) == "refuse"
    assert conversion(T.ArrayType(T.DateType()), T.ArrayType(T.TimestampType())) == "refuse"  # Spark casts it
    assert conversion(T.MapType(T.DateType(), T.IntegerType()), T.MapType(T.TimestampNTZType(), T.IntegerType())) \
        == "refuse"  # only into parts that may hold null
    assert conversion(T.ArrayType(T.TimestampType()), T.ArrayType(T.TimestampNTZType())) == "refuse"
    assert conversion(T.MapType(T.StringType(), T.LongType()), T.MapType(T.StringType(), T.LongType(), False)) == "same"


def test_sequence_columns_must_order():
    orderable = {n for n, t in TYPES.items() if is_orderable_sequence(t)}
    assert orderable == set(NAMES) - {"string", "boolean", "binary"}


# (batch type, column type, value, stored?) for checked conversions; key=True checks the exact rule of keys
VALUES = [
    ("bigint", "int", 2**31 - 1, True), ("bigint", "int", 2**31, False), ("bigint", "int", 2**40, False),
    ("bigint", "int", -(2**31), True), ("int", "tinyint", 127, True), ("int", "tinyint", 128, False),
    ("double", "int", 2.0, True), ("double", "int", 2.9, False), ("double", "int", float("nan"), False),
    ("double", "int", float("inf"), False), ("double", "bigint", 1.5, False), ("double", "bigint", -0.0, True),
    ("double", "dec12_2", 1.235, False), ("double", "dec12_2", 1.25, True), ("double", "dec12_2", 1e11, False),
    ("dec38_10", "bigint", decimal.Decimal(10) ** 25, False), ("dec38_10", "bigint", decimal.Decimal("7"), True),
    ("dec38_10", "dec12_2", decimal.Decimal("1.2350000000"), False),
    ("dec38_10", "dec12_2", decimal.Decimal("1.2300000000"), True),
    ("bigint", "double", 2**53, True), ("bigint", "double", 2**53 + 1, False),
    ("int", "float", 2**24 + 1, False), ("int", "float", 2**24, True),
    ("double", "float", 0.1, True),  # rounds to the nearest float: the nature of a float column
    ("double", "float", 1e300, False),  # but never overflows
    ("double", "float", float("inf"), True), ("double", "float", float("nan"), True),
    ("dec38_10", "double", decimal.Decimal("0.1000000000"), True),
    # the largest integers round up to 2**(bits-1) and came back clamped to themselves: stored changed
    ("bigint", "double", 2**63 - 1, False), ("int", "float", 2**31 - 1, False), ("bigint", "float", 2**63 - 1, False),
    ("bigint", "double", -(2**63), True), ("int", "float", -(2**31), True),
    ("int", "float", 2**31 - 128, True), ("bigint", "double", 2**63 - 1024, True),  # the largest exact ones
    # 2**63 passed the cast's overflow check and was clamped to 2**63 - 1
    ("double", "bigint", 2.0**63, False), ("float", "bigint", 2.0**63, False), ("float", "int", 2.0**31, False),
    ("double", "bigint", -(2.0**63), True), ("double", "bigint", 2.0**62, True), ("float", "int", -(2.0**31), True),
]


@pytest.mark.spark
def test_checked_conversions_store_exact_values_only(spark):
    """All cases in one Spark job: a column per case holding its value, a flag per case from ``lossy_value``."""
    from pyspark.sql import functions as F

    from partialcow.spark.casting import lossy_value

    fields, row, flags = [], [], []
    for i, (source, target, value, _) in enumerate(VALUES):
        assert EXPECTED[(source, target)] == "checked", (source, target)
        fields.append(T.StructField(f"c{i}", TYPES[source]))
        row.append(value)
        flags.append(lossy_value(f"`c{i}`", TYPES[source], TYPES[target], exact=False).alias(f"f{i}"))
    frame = spark.createDataFrame([tuple(row)], T.StructType(fields))
    got = frame.select(*flags).collect()[0]
    stored = {VALUES[i][:3]: not got[f"f{i}"] for i in range(len(VALUES))}
    assert stored == {v[:3]: v[3] for v in VALUES}


@pytest.mark.spark
def test_keys_are_converted_exactly(spark):
    """A key never rounds: 0.1 (double) into a float key would name another row than the batch meant."""
    from partialcow.spark.casting import lossy_value

    frame = spark.createDataFrame([(0.1, 0.5)], "a double, b double")
    got = frame.select(lossy_value("`a`", T.DoubleType(), T.FloatType(), exact=True).alias("a"),
                       lossy_value("`b`", T.DoubleType(), T.FloatType(), exact=True).alias("b")).collect()[0]
    assert (got["a"], got["b"]) == (True, False)


@pytest.mark.spark
def test_timestamps_keep_the_session_wall_clock_except_where_it_does_not_exist(spark):
    """timestamp <-> timestamp_ntz go through the session's wall clock; one a daylight-saving change skips fails."""
    import datetime as dt

    from partialcow.spark.casting import lossy_value

    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        frame = spark.sql("SELECT TIMESTAMP_NTZ'2021-03-14 02:30:00' AS gap, TIMESTAMP_NTZ'2021-06-07 08:09:10' AS ok, "
                          "TIMESTAMP'2021-06-07 08:09:10' AS zoned")
        got = frame.select(
            lossy_value("`gap`", T.TimestampNTZType(), T.TimestampType(), exact=False).alias("gap"),
            lossy_value("`ok`", T.TimestampNTZType(), T.TimestampType(), exact=False).alias("ok"),
            lossy_value("`zoned`", T.TimestampType(), T.TimestampNTZType(), exact=False).alias("zoned"),
            frame["zoned"].cast("timestamp_ntz").alias("wall"),
        ).collect()[0]
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    assert (got["gap"], got["ok"], got["zoned"]) == (True, False, False)
    assert got["wall"] == dt.datetime(2021, 6, 7, 8, 9, 10)


@pytest.mark.spark
@pytest.mark.iceberg
def test_a_model_with_narrow_integers_inside_nested_columns_runs_again(spark, fresh_schema, pipeline_path):
    """Iceberg stores no smallint or tinyint: a first build from a query with ``array<smallint>`` or a struct field
    of ``tinyint`` made them ``int``, and the model's next batch, the same query, was refused for delivering the
    narrower type (top-level columns were widened). Nested values now widen part by part."""
    from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
    from partialcow.spark.tables import open_table

    spec = ChangeSpec(key_columns=("id",), op_column="_op", model="narrow_nested")
    name = f"{fresh_schema}.narrow_{pipeline_path}"
    query = ("select id, array(cast(id as smallint), null) as a, named_struct('t', cast(id as tinyint), 's', 'x') "
             "as st, map(cast(id as smallint), array(cast(1 as tinyint))) as m, cast(id as smallint) as n, "
             "{op} as _op from range({start}, {stop})")
    create_table(spark, name, spark.sql(query.format(op="'I'", start=0, stop=4)), spec, table_format="iceberg")
    stored = dict(spark.table(name).dtypes)
    assert (stored["a"], stored["st"], stored["m"]) == ("array<int>", "struct<t:int,s:string>", "map<int,array<int>>")
    batch = spark.sql(query.format(op="case when id = 1 then 'D' else 'U' end", start=1, stop=6)
                      .replace("cast(id as smallint), null", "cast(id * 10 as smallint), null"))
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"), batch, spec)
    assert (metrics.rows_updated, metrics.rows_inserted, metrics.rows_deleted) == (2, 2, 1)
    rows = {r["id"]: (r["a"], tuple(r["st"]), r["m"], r["n"]) for r in spark.table(name).collect()}
    assert rows == {0: ([0, None], (0, "x"), {0: [1]}, 0),
                    **{i: ([i * 10, None], (i, "x"), {i: [1]}, i) for i in range(2, 6)}}
