"""Comparable text of values holding maps (``partialcow.spark.map_values``) against Spark itself: equal values share
their text in both forms (Column and SQL), different values never do."""

from __future__ import annotations

import itertools

import pytest

from partialcow.spark.map_values import comparable_text, comparable_text_sql

pytestmark = [pytest.mark.spark]

# Each group holds SQL expressions of one type; expressions in the same inner tuple are equal values, expressions in
# different inner tuples differ.
GROUPS = {
    "map<string,int>": [
        ("map('a', 1, 'b', 2)", "map('b', 2, 'a', 1)"),
        ("map('a', 1, 'b', 3)",),
        ("map('a', 1)",),
        ("cast(map() as map<string,int>)",),
        ("cast(null as map<string,int>)",),
        ("map('a', 1, 'b', cast(null as int))", "map('b', cast(null as int), 'a', 1)"),
    ],
    "map<string,timestamp>": [
        ("map('t', timestamp'2026-01-01 10:00:00.000001')",),
        ("map('t', timestamp'2026-01-01 10:00:00.000002')",),
        ("map('t', timestamp'2026-01-01 10:00:00')",),
    ],
    "map<string,timestamp_ntz>": [
        ("map('t', timestamp_ntz'2026-01-01 10:00:00.000001')",),
        ("map('t', timestamp_ntz'2026-01-01 10:00:00.000002')",),
    ],
    "struct<s:struct<m:map<string,array<map<int,double> > > >,`x'y`:int>": [
        ("named_struct('s', named_struct('m', map('k', array(map(1, 0.5, 2, double('-0.0'))))), 'x\\'y', 1)",
         "named_struct('s', named_struct('m', map('k', array(map(2, double('-0.0'), 1, 0.5)))), 'x\\'y', 1)"),
        ("named_struct('s', named_struct('m', map('k', array(map(2, double('0.0'), 1, 0.5)))), 'x\\'y', 1)",),
        ("named_struct('s', named_struct('m', map('k', array(map(1, 0.5), map(2, double('-0.0'))))), 'x\\'y', 1)",),
        ("named_struct('s', named_struct('m', if(false, map('k', array(map(1, 0.5))), null)), 'x\\'y', 1)",),
        ("named_struct('s', if(false, named_struct('m', map('k', array(map(1, 0.5)))), null), 'x\\'y', 1)",),
        ("if(false, named_struct('s', named_struct('m', map('k', array(map(1, 0.5)))), 'x\\'y', 1), null)",),
    ],
}


@pytest.mark.parametrize("type_name", sorted(GROUPS))
def test_equal_values_share_their_text_and_different_ones_do_not(spark, type_name) -> None:
    from pyspark.sql import functions as F

    values = [(g, expr) for g, equal in enumerate(GROUPS[type_name]) for expr in equal]
    frame = spark.sql(" union all ".join(f"select {g} as g, cast({expr} as {type_name}) as v" for g, expr in values))
    data_type = frame.schema["v"].dataType
    frame.createOrReplaceTempView("map_values_cases")
    as_column = frame.select("g", comparable_text(F.col("v"), data_type).alias("t")).collect()
    as_sql = spark.sql(f"select g, {comparable_text_sql('v', data_type)} as t from map_values_cases").collect()
    assert [r["t"] for r in as_column] == [r["t"] for r in as_sql]
    for a, b in itertools.combinations(as_column, 2):
        assert (a["t"] == b["t"]) == (a["g"] == b["g"]), (a, b)
