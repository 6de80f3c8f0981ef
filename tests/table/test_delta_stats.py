"""Properties of the string bounds written into Delta stats (no table needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("deltalake")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from partialcow.table.delta import STATS_STRING_PREFIX, truncate_string_max, truncate_string_min  # noqa: E402

# Code points without surrogates (not encodable in UTF-8), weighted towards the edges: U+10FFFF (cannot be
# outgrown), U+007F (the ASCII tie-breaker), supplementary characters (two UTF-16 units in Delta's count).
chars = st.one_of(
    st.characters(blacklist_categories=("Cs",)),
    st.sampled_from(["\U0010ffff", "\U00020000", "\U00010000", "\ud7ff", "\ue000", "\x7f", "\x7e", "a", "z"]),
)


def _utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@settings(max_examples=400, deadline=None)
@given(st.lists(chars, max_size=3 * STATS_STRING_PREFIX).map("".join))
def test_truncated_bounds_bound_in_byte_order(text: str) -> None:
    low, high = truncate_string_min(text), truncate_string_max(text)
    assert text.startswith(low) and len(low) == min(len(text), STATS_STRING_PREFIX)
    if high is None:  # Delta leaves the max out when U+10FFFF runs past twice the prefix
        assert "\U0010ffff" * (STATS_STRING_PREFIX // 2) in text
        return
    assert high.encode("utf-8") >= text.encode("utf-8")
    if _utf16_units(text) <= STATS_STRING_PREFIX:
        assert high == text
    else:  # a prefix (never splitting a character) and one tie-breaker
        assert high == text or text.startswith(high[:-1]) and high[-1] in ("\x7f", "\U0010ffff")
        assert _utf16_units(high) <= 2 * STATS_STRING_PREFIX + 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x" * 40, "x" * 32 + "\x7f"),  # the next character is ASCII: the ASCII tie-breaker
        ("x" * 32 + "\u00e9", "x" * 32 + "\U0010ffff"),
        ("x" * 31 + "\U00020000" + "yz", "x" * 31 + "\U00020000" + "\x7f"),  # a pair is kept whole (33 units)
        ("x" * 32 + "\U0010ffff" + "a", "x" * 32 + "\U0010ffff" + "\x7f"),  # U+10FFFF cannot be outgrown: kept
        ("x" * 32 + "\U0010ffff" * 16 + "a", "x" * 32 + "\U0010ffff" * 16 + "\x7f"),  # 64 units: still kept
        ("x" * 32 + "\U0010ffff" * 17 + "a", None),  # past twice the prefix: no max
        ("x" * 32 + "\U0010ffff" * 16, "x" * 32 + "\U0010ffff" * 16),  # the whole string fits the expansion
    ],
)
def test_truncated_max_follows_delta_spark(text: str, expected: str | None) -> None:
    """delta-spark 3.3's ``truncateMaxStringAgg`` rule (cross-checked against the jar in test_delta_readers)."""
    assert truncate_string_max(text) == expected


# ------------------------------------------------------------------ footer stats vs. the data itself

import datetime as dt  # noqa: E402
import decimal  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from deltalake import DeltaTable  # noqa: E402

from partialcow.table.delta.stats import file_stats  # noqa: E402

UTC = dt.timezone.utc
# from year 1 (sentinels such as 0001-01-01 are common): years before 1000 once lost their zero padding
TS_RANGE = (dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23))


def _columns(draw: st.DrawFn, n: int) -> pa.Table:
    maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
    unit = draw(st.sampled_from(["ms", "us"]))
    ts = draw(st.lists(maybe(st.datetimes(*TS_RANGE, timezones=st.just(UTC))), min_size=n, max_size=n))
    if unit == "ms":
        ts = [t.replace(microsecond=t.microsecond // 1000 * 1000) if t else None for t in ts]
    ntz = draw(st.lists(maybe(st.datetimes(*TS_RANGE)), min_size=n, max_size=n))
    decimals = st.decimals(min_value=-(10**6), max_value=10**6, places=3, allow_nan=False, allow_infinity=False)
    return pa.table(
        {
            "i": pa.array(draw(st.lists(maybe(st.integers(-(2**63), 2**63 - 1)), min_size=n, max_size=n)), pa.int64()),
            "small": pa.array(draw(st.lists(maybe(st.integers(-128, 127)), min_size=n, max_size=n)), pa.int8()),
            "s": pa.array(draw(st.lists(maybe(st.text(chars, max_size=50)), min_size=n, max_size=n)), pa.string()),
            "d": pa.array(draw(st.lists(maybe(st.dates()), min_size=n, max_size=n)), pa.date32()),
            "ts": pa.array(ts, pa.timestamp(unit, tz="UTC")),
            "ntz": pa.array(ntz, pa.timestamp("us")),
            "dec": pa.array(draw(st.lists(maybe(decimals), min_size=n, max_size=n)), pa.decimal128(12, 3)),
            "f": pa.array(draw(st.lists(maybe(st.floats()), min_size=n, max_size=n)), pa.float64()),
        }
    )


@st.composite
def tables(draw: st.DrawFn) -> tuple[pa.Table, int]:
    n = draw(st.integers(1, 40))
    return _columns(draw, n), draw(st.integers(1, 20))


def _parse(kind: str, value: object) -> object:
    if kind == "d":
        return dt.date.fromisoformat(str(value))
    if kind in ("ts", "ntz"):
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if kind == "dec":
        return decimal.Decimal(str(value))
    return value


@pytest.fixture(scope="module")
def empty_table(tmp_path_factory: pytest.TempPathFactory) -> DeltaTable:
    """One table for every example: the stats only need its schema (ms and us timestamps are both `timestamp`)."""
    root = tmp_path_factory.mktemp("stats")
    return DeltaTable.create(str(root), schema=SCHEMA)


SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("small", pa.int8()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")),
        ("dec", pa.decimal128(12, 3)),
        ("f", pa.float64()),
    ]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=tables())
def test_footer_stats_bound_the_data(empty_table: DeltaTable, case: tuple[pa.Table, int]) -> None:
    data, row_group_size = case
    with tempfile.TemporaryDirectory() as folder:
        pq.write_table(data, f"{folder}/f.parquet", row_group_size=row_group_size)
        metadata = pq.read_metadata(f"{folder}/f.parquet")
    doc_text = file_stats(metadata, json.loads(empty_table.schema().to_json()), [],
                          dict(empty_table.metadata().configuration), "f.parquet", "stats-table")
    doc = json.loads(doc_text, parse_float=decimal.Decimal)
    assert doc["numRecords"] == data.num_rows
    assert doc["nullCount"] == {c: data[c].null_count for c in data.column_names}
    assert "f" not in doc["minValues"] and "f" not in doc["maxValues"]
    for name in ("i", "small", "s", "d", "ts", "ntz", "dec"):
        values = [v for v in data[name].to_pylist() if v is not None]
        if not values:
            continue
        assert name in doc["minValues"] and name in doc["maxValues"], name
        lo, hi = _parse(name, doc["minValues"][name]), _parse(name, doc["maxValues"][name])
        if name == "s":
            lo, hi = lo.encode(), hi.encode()
            values = [v.encode() for v in values]
        if name == "ntz":
            values = [v.replace(tzinfo=None) for v in values]
        assert lo <= min(values) and hi >= max(values), (name, lo, hi)
        if name in ("i", "small", "d", "dec"):
            assert (lo, hi) == (min(values), max(values)), name  # exact where no rounding is needed
        if name in ("ts", "ntz"):
            assert min(values) - lo < dt.timedelta(milliseconds=1) and hi - max(values) < dt.timedelta(milliseconds=1)


def test_partition_values_of_years_before_1000_keep_four_digits() -> None:
    from partialcow.table.delta.stats import partition_strings

    zoned = dt.datetime(1, 1, 1, 0, 0, 1, tzinfo=dt.timezone(-dt.timedelta(hours=1)))
    assert partition_strings({"ts": zoned, "ntz": dt.datetime(999, 2, 3, 4, 5, 6, 7), "d": dt.date(5, 6, 7)}) == {
        "ts": "0001-01-01T01:00:01.000000Z",  # in UTC, as the protocol reads a zoned value
        "ntz": "0999-02-03 04:05:06.000007",
        "d": "0005-06-07",
    }


# ------------------------------------------------------------------ issue 22 item 3: string stats as raw UTF-8

SUPPLEMENTARY = ["\U0010ffff-43073", "\U00020000-1", "\U00010000-2", "\U0001f600-4", "\ud7ff-3", "plain-5"]


def test_regression_supplementary_plane_string_stats_are_raw_utf8(tmp_path) -> None:
    """Escaped surrogate pairs in the stats were decoded wrongly by delta-rs (U+10FFFF as U+FFFFF): filtered
    reads skipped the file holding the row. One file per value, so a wrong bound prunes exactly that row."""
    import os

    import polars as pl
    from deltalake import QueryBuilder, write_deltalake

    from partialcow.table.base import FileReplacement
    from partialcow.table.delta import DeltaRsTable

    root = str(tmp_path / "t")
    write_deltalake(root, pa.table({"id": pa.array([0], pa.int64()), "name": ["seed"]}))
    names = []
    for i, value in enumerate(SUPPLEMENTARY):
        names.append(f"n{i}.parquet")
        pq.write_table(pa.table({"id": pa.array([i + 1], pa.int64()), "name": [value]}), os.path.join(root, names[-1]))
    DeltaRsTable(root).replace_files(FileReplacement(base_version=0, removed=[], added=names))

    log = (tmp_path / "t" / "_delta_log" / "00000000000000000001.json").read_bytes()
    assert "\U0010ffff-43073".encode() in log  # raw UTF-8, as Delta's own writers emit
    assert b"\\\\ud" not in log.lower()  # no escaped surrogates left in the stats string
    table = DeltaTable(root)
    for value in SUPPLEMENTARY:
        assert table.to_pyarrow_table(filters=[("name", "=", value)])["name"].to_pylist() == [value], "delta-rs"
        assert pl.scan_delta(root).filter(pl.col("name") == value).collect()["name"].to_list() == [value], "polars"
        found = QueryBuilder().register("t", table).execute(f"SELECT name FROM t WHERE name = '{value}'").read_all()
        assert pa.table(found)["name"].to_pylist() == [value], "delta-rs DataFusion"


def test_regression_a_bound_past_year_9999_is_left_out_not_a_crash(tmp_path) -> None:
    """The usual "valid until" marker 9999-12-31 23:59:59.999999 rounds up to milliseconds into year 10000: the
    commit of any file holding it failed with OverflowError. Its max is now left out (unknown to readers); the min
    and the other columns keep theirs. Dates past 9999 (which Arrow holds) likewise."""
    end = dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
    table = pa.table({
        "id": pa.array([1, 2], pa.int64()),
        "valid_to": pa.array([dt.datetime(2024, 1, 1), end], pa.timestamp("us")),
        "until": pa.array([dt.datetime(2024, 1, 1), end], pa.timestamp("us", tz="UTC")),
        "day": pa.array([0, (dt.date(9999, 12, 31) - dt.date(1970, 1, 1)).days + 1], pa.date32()),
    })
    path = tmp_path / "f.parquet"
    pq.write_table(table, path)
    schema = {"fields": [{"name": "id", "type": "long", "nullable": True},
                         {"name": "valid_to", "type": "timestamp_ntz", "nullable": True},
                         {"name": "until", "type": "timestamp", "nullable": True},
                         {"name": "day", "type": "date", "nullable": True}]}
    stats = json.loads(file_stats(pq.ParquetFile(path).metadata, schema, [], {}, "f.parquet", str(tmp_path)))
    assert stats["maxValues"] == {"id": 2}
    assert stats["minValues"] == {"id": 1, "valid_to": "2024-01-01T00:00:00.000", "until": "2024-01-01T00:00:00.000Z",
                                  "day": "1970-01-01"}
    assert stats["nullCount"] == {"id": 0, "valid_to": 0, "until": 0, "day": 0}
