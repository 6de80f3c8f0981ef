"""The value types of the table-format matrix (issue 22): one column per type, values chosen at the edges.

Rows are a pure function of (row id, generation), so a test states what it changed and the expected table follows
without running the code under test. Timestamps sit where a time zone would show: a wall clock that does not exist
in America/Los_Angeles (the 2021 spring-forward gap), one that exists twice there (the autumn overlap), before 1970,
sub-millisecond. No dates before 1582-10-15 or timestamps before 1900: Spark refuses those in Parquet files of
writers it does not know (calendar rebasing), such as delta-rs, which the matrix also writes with; the files we write
say their calendar and read back (``tests/delta_spark/test_delta_ancient_dates.py``). Decimals reach precision 38; strings hold
supplementary-plane characters and run past Delta's 32-character stats prefix; binary holds zero bytes.

>>> row = make_row(1, 1)
>>> row["id"], type(row["ntz"]).__name__, row["ts"].tzinfo is not None
(1, 'datetime', True)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

UTC = dt.timezone.utc
TIME_ZONES = ("UTC", "America/Los_Angeles", "Asia/Tokyo")

_NTZ = [
    dt.datetime(2021, 6, 7, 8, 9, 10),  # the value
    dt.datetime(2021, 3, 14, 2, 30, 0, 123456),  # does not exist in Los Angeles
    dt.datetime(2021, 11, 7, 1, 30, 0, 999),  # exists twice in Los Angeles
    dt.datetime(1900, 1, 1, 0, 0, 0, 1),
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2262, 4, 11, 23, 47, 16, 854775),
]
_DEC38 = decimal.Decimal("9" * 28 + "." + "9" * 10)
_TEXT = ["\U0010ffff-43073", "\U00020000-plane-2", "ascii", "é" * 40, "z" * 33 + "\U0001f600", "", "a'quote"]


def arrow_schema(*, iceberg: bool = False) -> pa.Schema:
    """The matrix's columns; Iceberg has no 8- or 16-bit integers."""
    fields = [
        # nullable: delta-spark 3.3 refuses to read a delta-rs table with a NOT NULL column and writer features
        # ("invariants enabled in metadata but not listed in protocol"), which is not what this matrix is about
        pa.field("id", pa.int64()),
        pa.field("flag", pa.bool_()),
        pa.field("tiny", pa.int8()),
        pa.field("small", pa.int16()),
        pa.field("num", pa.int32()),
        pa.field("big", pa.int64()),
        pa.field("real", pa.float32()),
        pa.field("dbl", pa.float64()),
        pa.field("day", pa.date32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("ntz", pa.timestamp("us")),
        pa.field("dec9", pa.decimal128(9, 2)),
        pa.field("dec18", pa.decimal128(18, 4)),
        pa.field("dec38", pa.decimal128(38, 10)),
        pa.field("txt", pa.string()),
        pa.field("raw", pa.binary()),
        pa.field("rec", pa.struct([("n", pa.int32()), ("at", pa.timestamp("us")), ("s", pa.string())])),
        pa.field("nums", pa.list_(pa.field("element", pa.int64()))),
        pa.field("tags", pa.map_(pa.string(), pa.int32())),
    ]
    if iceberg:
        fields = [f for f in fields if f.name not in ("tiny", "small")]
    return pa.schema(fields)


def make_row(row_id: int, generation: int, *, iceberg: bool = False) -> dict[str, Any]:
    """Row ``row_id`` as generation ``generation`` writes it; some columns are null in some rows."""
    k = row_id * 7 + generation * 13
    ntz = _NTZ[k % len(_NTZ)]
    row: dict[str, Any] = {
        "id": row_id,
        "flag": None if k % 5 == 0 else bool(k % 2),
        "tiny": [-128, 127, 0, k % 100][k % 4],
        "small": [-32768, 32767, -1, k][k % 4],
        "num": [-(2**31), 2**31 - 1, k, None][k % 4],
        "big": [-(2**63), 2**63 - 1, k * 1_000_003][k % 3],
        "real": [1.5, -0.0, float("inf"), k / 4][k % 4],
        "dbl": [-1e308, 5e-324, float("-inf"), k / 3][k % 4],
        "day": [dt.date(1700, 2, 28), dt.date(1969, 12, 31), dt.date(9999, 12, 31), dt.date(2021, 3, 14)][k % 4],
        # the same wall clock as an instant: equal only where the zone is UTC
        "ts": None if k % 6 == 5 else ntz.replace(tzinfo=UTC) + dt.timedelta(microseconds=generation),
        "ntz": None if k % 6 == 4 else ntz + dt.timedelta(microseconds=generation),
        "dec9": decimal.Decimal(f"{(-1) ** k * (k % 10_000_000)}.{k % 100:02d}"),
        "dec18": decimal.Decimal("-99999999999999.9999") if k % 3 == 0 else decimal.Decimal(f"{k}.0001"),
        "dec38": None if k % 5 == 1 else (_DEC38 if k % 2 else decimal.Decimal(f"-{'9' * 28}.{k:010d}")),
        "txt": None if k % 8 == 7 else _TEXT[k % len(_TEXT)] + f"-{row_id}",
        "raw": None if k % 4 == 3 else bytes([0, k % 256, 255]) * (1 + k % 3),
        "rec": None if k % 7 == 6 else {"n": k, "at": ntz, "s": _TEXT[(k + 1) % len(_TEXT)]},
        "nums": None if k % 5 == 2 else [k, None, -k][: 1 + k % 3],
        "tags": None if k % 5 == 3 else [("a", k), ("\U0010ffff", None)][: 1 + k % 2],
    }
    if iceberg:
        del row["tiny"], row["small"]
    return row


def table_of(rows: Iterable[dict[str, Any]], *, iceberg: bool = False) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=arrow_schema(iceberg=iceberg))


def changes_of(
    *,
    inserts: Sequence[int],
    updates: Sequence[int],
    deletes: Sequence[int],
    generation: int,
    iceberg: bool = False,
) -> pa.Table:
    """A CDC batch: full row images for inserts and updates (op I/U), key-only deletes (op D)."""
    rows = [dict(make_row(i, generation, iceberg=iceberg), _op="I") for i in inserts]
    rows += [dict(make_row(i, generation, iceberg=iceberg), _op="U") for i in updates]
    rows += [dict({c: None for c in arrow_schema(iceberg=iceberg).names}, id=i, _op="D") for i in deletes]
    schema = arrow_schema(iceberg=iceberg)
    schema = pa.schema([f.with_nullable(True) for f in schema]).append(pa.field("_op", pa.string()))
    return pa.Table.from_pylist(rows, schema=schema)


def apply_expected(
    state: dict[int, dict[str, Any]], *, inserts: Sequence[int], updates: Sequence[int], deletes: Sequence[int],
    generation: int, iceberg: bool = False,
) -> dict[int, dict[str, Any]]:
    """The expected table after a batch, from the batch's definition."""
    out = dict(state)
    for i in (*inserts, *updates):
        out[i] = make_row(i, generation, iceberg=iceberg)
    for i in deletes:
        out.pop(i, None)
    return out


@contextlib.contextmanager
def session_time_zone(spark: Any, zone: str) -> Iterator[None]:
    """Run a block under Spark session time zone ``zone``, restoring the previous one after it."""
    saved = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", saved)


def spark_frame(spark: Any, table: pa.Table, folder: str) -> Any:
    """``table`` as a Spark DataFrame with exactly its types (through a Parquet file: no Python-side conversion
    that would read naive datetimes in the process's time zone)."""
    import os

    import pyarrow.parquet as pq

    path = os.path.join(folder, f"changes-{uuid.uuid4().hex}.parquet")
    pq.write_table(table, path)
    return spark.read.parquet(path)


# One table, three batches, each under another session time zone and each with inserts, full-row updates (every
# column, nested ones too) and deletes, one of a key that is absent. Batch 1 rewrites every row of the first file
# (another writer's), so the latest version's files are all ours.
BATCHES = [
    {"inserts": [21, 31], "updates": [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 20], "deletes": [7, 99]},
    {"inserts": [22, 32], "updates": [2, 5, 21], "deletes": [8, 99]},
    {"inserts": [23, 33], "updates": [3, 6, 22], "deletes": [9, 98]},
]
INITIAL_IDS = range(12)


def stats_strings(count: int = 300, seed: int = 22) -> list[str]:
    """Strings around Delta's 32-unit stats prefix, from an alphabet of the truncation's edge cases: ASCII below
    and at U+007F, BMP characters, supplementary ones (two UTF-16 units), U+10FFFF (cannot be outgrown)."""
    import random

    rng = random.Random(seed)
    alphabet = ["a", "z", "~", "\x7f", "\x00", "é", "\ud7ff", "\ue000", "\uffff", "\U00010000", "\U00020000",
                "\U0001f600", "\U0010fffe", "\U0010ffff"]
    texts = [*_TEXT, "x" * 31 + "\U00020000yz", "x" * 32 + "\U0010ffff" * 16 + "a", "x" * 32 + "\U0010ffff" * 17]
    while len(texts) < count:
        head = "".join(rng.choice(alphabet[:3]) for _ in range(rng.randint(0, 34)))
        tail = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        texts.append(head + tail)
    return texts
