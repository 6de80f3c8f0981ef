"""The Python bucket hash must equal Spark's ``xxhash64`` bit for bit (Spark is the oracle)."""

from __future__ import annotations

import datetime as dt
import decimal
import random

import pytest

from partialcow.index.hashing import bucket_of, spark_xxhash64

# (Spark type, generator of Python values) - includes strings and binaries longer than the 32-byte stripe.
_TYPES = {
    "tinyint": lambda r: r.randint(-128, 127),
    "smallint": lambda r: r.randint(-32768, 32767),
    "int": lambda r: r.randint(-(2**31), 2**31 - 1),
    "bigint": lambda r: r.randint(-(2**63), 2**63 - 1),
    "boolean": lambda r: r.random() < 0.5,
    "date": lambda r: dt.date(1970, 1, 1) + dt.timedelta(days=r.randint(-30000, 30000)),
    "timestamp": lambda r: dt.datetime(1990, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=r.randint(0, 2**50)),
    "double": lambda r: r.choice([0.0, -0.0, 1.5, r.uniform(-1e9, 1e9)]),
    "float": lambda r: r.choice([0.0, -0.0, 2.25, r.uniform(-1e3, 1e3)]),
    "string": lambda r: "".join(r.choice("abcé漢😀 ") for _ in range(r.randint(0, 70))),
    "binary": lambda r: bytes(r.randint(0, 255) for _ in range(r.randint(0, 70))),
    "decimal(12,2)": lambda r: decimal.Decimal(r.randint(-(10**11), 10**11)) / 100,
}


def test_known_values() -> None:
    # Values printed by Spark 3.5: SELECT xxhash64(1), xxhash64(1L), xxhash64('abc'), xxhash64(1, 'abc').
    assert spark_xxhash64([1], ["int"]) == -6698625589789238999
    assert spark_xxhash64([1], ["bigint"]) == -7001672635703045582
    assert spark_xxhash64(["abc"], ["string"]) == 1423657621850124518
    assert spark_xxhash64([1, "abc"], ["int", "string"]) == -3712979484889829503
    assert spark_xxhash64([None, "abc"], ["int", "string"]) == spark_xxhash64(["abc"], ["string"])  # nulls are skipped


def test_unsupported_type_is_refused() -> None:
    with pytest.raises(ValueError, match="not supported"):
        spark_xxhash64([[1]], ["array<int>"])


@pytest.mark.spark
def test_python_hash_equals_spark(spark) -> None:
    from pyspark.sql import functions as F

    rnd = random.Random(20261121)
    names = list(_TYPES)
    rows = []
    for _ in range(300):
        rows.append(tuple(None if rnd.random() < 0.1 else _TYPES[t](rnd) for t in names))
    schema = ", ".join(f"c{i} {t}" for i, t in enumerate(names))
    frame = spark.createDataFrame(rows, schema)
    columns = [f"c{i}" for i in range(len(names))]
    pairs = [("c1", "c9"), ("c3", "c9", "c4"), ("c10", "c5")]
    got = frame.select(
        *columns,
        *[F.xxhash64(c).alias(f"h_{c}") for c in columns],
        *[F.xxhash64(*p).alias("h_" + "_".join(p)) for p in pairs],
        *[F.pmod(F.xxhash64(*p), F.lit(7)).alias("b_" + "_".join(p)) for p in pairs],
    ).collect()
    types = dict(zip(columns, names))
    for row in got:
        for c in columns:
            assert spark_xxhash64([row[c]], [types[c]]) == row[f"h_{c}"], (c, types[c], row[c])
        for p in pairs:
            values, ptypes = [row[c] for c in p], [types[c] for c in p]
            assert spark_xxhash64(values, ptypes) == row["h_" + "_".join(p)]
            assert bucket_of(values, ptypes, 7) == row["b_" + "_".join(p)]
