"""Properties of the string bounds written into Delta stats (no table needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("deltalake")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from partialcow.commit.delta import STATS_STRING_PREFIX, _truncate_upper  # noqa: E402

# Code points without surrogates (not encodable in UTF-8), weighted towards the edges where carrying happens.
chars = st.one_of(
    st.characters(blacklist_categories=("Cs",)),
    st.sampled_from(["\U0010ffff", "\ud7ff", "\ue000", "\x7f", "a", "z"]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(chars, max_size=3 * STATS_STRING_PREFIX).map("".join), st.text(max_size=5))
def test_truncated_max_is_an_upper_bound_in_byte_order(text: str, suffix: str) -> None:
    bound = _truncate_upper(text)
    if bound is None:  # only when every kept character is U+10FFFF
        assert set(text[:STATS_STRING_PREFIX]) == {"\U0010ffff"}
        return
    assert len(bound) <= STATS_STRING_PREFIX
    assert bound.encode("utf-8") >= text.encode("utf-8")
    if len(text) > STATS_STRING_PREFIX:
        # it bounds every string sharing the kept prefix, whatever follows
        same_prefix = text[:STATS_STRING_PREFIX] + suffix
        assert bound.encode("utf-8") > same_prefix.encode("utf-8", "surrogatepass")
    else:
        assert bound == text


def test_surrogate_range_is_skipped() -> None:
    text = "x" * (STATS_STRING_PREFIX - 1) + "\ud7ff" + "tail"
    assert _truncate_upper(text) == "x" * (STATS_STRING_PREFIX - 1) + "\ue000"


# ------------------------------------------------------------------ footer stats vs. the data itself

import datetime as dt  # noqa: E402
import decimal  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from deltalake import DeltaTable  # noqa: E402

from partialcow.commit.delta import _file_stats  # noqa: E402

UTC = dt.timezone.utc
TS_RANGE = (dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1))


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
    doc_text = _file_stats(metadata, empty_table, "f.parquet", "stats-table")
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
