"""The data files we build from footers equal the ones Iceberg builds with its own Parquet reader.

Each case writes a Parquet file with pyarrow (field ids on every column), builds its ``DataFile`` both ways —
``DataFileBuilder`` from the footer, and Iceberg's ``ParquetUtil.fileMetrics`` — and compares the two as Iceberg
serializes them (``ContentFileParser.toJson``): record count, column sizes, value and null counts, bounds. Every
supported case also asserts that the footer path was taken, so that a silent fallback cannot make it pass.
"""

from __future__ import annotations

import decimal
import datetime as dt
import itertools
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partialcow.parquet.footer import read_footer
from partialcow.table.iceberg_metrics import DataFileBuilder, footer_metrics
from partialcow.table.java import java_map

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

_files = itertools.count()


@pytest.fixture(scope="module")
def iceberg_table(spark):
    """Any unpartitioned Iceberg table: it lends its FileIO and spec to both builders."""
    spark.sql("CREATE SCHEMA IF NOT EXISTS metrics_test")
    spark.sql("CREATE TABLE IF NOT EXISTS metrics_test.t (id BIGINT) USING iceberg")
    from partialcow.table.java import load_iceberg_table

    table = load_iceberg_table(spark, "metrics_test.t")
    yield table
    spark.sql("DROP TABLE IF EXISTS metrics_test.t PURGE")


def _config(jvm, properties: dict[str, str]):
    return jvm.org.apache.iceberg.MetricsConfig.fromProperties(java_map(jvm, properties))


def _java_data_file(jvm, table, path: str, config):
    input_file = table.io().newInputFile(path)
    metrics = jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(input_file, config, None)
    return (jvm.org.apache.iceberg.DataFiles.builder(table.spec()).withPath(path)
            .withFileSizeInBytes(input_file.getLength()).withFormat("PARQUET").withMetrics(metrics).build())


def _as_json(jvm, table, data_file) -> dict:
    return json.loads(str(jvm.org.apache.iceberg.ContentFileParser.toJson(data_file, table.spec())))


def _compare(spark, table, path: str, properties: dict[str, str] | None = None, *, fast: bool = True) -> dict:
    """Build ``path``'s DataFile both ways; assert they are equal and that the footer path was (not) taken."""
    jvm = spark._jvm
    config = _config(jvm, properties or {})
    builder = DataFileBuilder(jvm, table, table.spec(), metrics_config=config)
    ours = _as_json(jvm, table, builder.build(path))
    theirs = _as_json(jvm, table, _java_data_file(jvm, table, path, config))
    assert (builder.fast, builder.iceberg) == ((1, 0) if fast else (0, 1))
    assert ours == theirs
    return ours


def _write(tmp_path: Path, columns: dict[str, pa.Array], **options) -> str:
    fields = [pa.field(name, array.type, metadata={"PARQUET:field_id": str(i + 1)})
              for i, (name, array) in enumerate(columns.items())]
    path = str(tmp_path / f"f{next(_files)}.parquet")
    pq.write_table(pa.table(list(columns.values()), schema=pa.schema(fields)), path, **options)
    return path


TOP = chr(0x10FFFF)
EDGE_COLUMNS = {
    "b": pa.array([True, None, False], pa.bool_()),
    "i8": pa.array([-3, 7, None], pa.int8()),
    "i": pa.array([2**31 - 1, -(2**31), 0], pa.int32()),
    "l": pa.array([2**63 - 1, None, -(2**63)], pa.int64()),
    "f_zero": pa.array([0.0, 0.0, None], pa.float32()),  # min +0.0 is widened to -0.0
    "d_negzero": pa.array([-0.0, -1.5, None], pa.float64()),  # max -0.0 is widened to +0.0
    "d_nan": pa.array([float("nan"), 2.5, -1.0], pa.float64()),
    "d_all_nan": pa.array([float("nan"), None, float("nan")], pa.float64()),
    "date": pa.array([dt.date(1900, 1, 1), dt.date(2100, 12, 31), None], pa.date32()),
    "ts": pa.array([dt.datetime(1970, 1, 1, 0, 0, 0, 1), None, dt.datetime(2300, 1, 1)], pa.timestamp("us")),
    "tstz": pa.array([dt.datetime(2020, 5, 5), None, None], pa.timestamp("us", tz="UTC")),
    "s_long": pa.array(["a" * 20, "b" * 16, None], pa.string()),  # upper bound "b"*16 is not truncated
    "s_top": pa.array(["x" * 15 + TOP + "yy", "a", None], pa.string()),  # the 16th code point cannot be incremented
    "s_tops": pa.array([TOP * 17, None, None], pa.string()),  # no upper bound at all
    "s_d7ff": pa.array([chr(0xD7FF) * 17, None, None], pa.string()),  # increments past the surrogates
    "s_astral": pa.array(["\U0001F600" * 20, "\uffff", None], pa.string()),  # code point order, not UTF-16
    "bin": pa.array([b"\x00\xff", b"\xff" * 20, b"a" * 17 + b"\xff" * 3], pa.binary()),
    "bin_ff": pa.array([b"\xff" * 17, None, None], pa.binary()),
    "bin_inc": pa.array([b"ab" * 10, b"\x01" * 17 + b"\xff", None], pa.binary()),  # upper bound incremented
    "dec_small": pa.array([decimal.Decimal("-1.28"), decimal.Decimal("1.27"), None], pa.decimal128(5, 2)),
    "dec_wide": pa.array([decimal.Decimal("-128"), decimal.Decimal("99999999999999999999"), None],
                         pa.decimal128(30, 0)),
    "all_null": pa.array([None, None, None], pa.int64()),
}


def test_edge_values_match_iceberg(spark, iceberg_table, tmp_path: Path) -> None:
    path = _write(tmp_path, EDGE_COLUMNS, row_group_size=2)
    ours = _compare(spark, iceberg_table, path)
    # the cases are really exercised: bounds exist where they should, and not where Iceberg has none
    upper_ids = ours["upper-bounds"]["keys"]
    names = list(EDGE_COLUMNS)
    assert names.index("s_tops") + 1 not in upper_ids
    assert names.index("s_top") + 1 in upper_ids
    assert names.index("d_all_nan") + 1 not in ours["lower-bounds"]["keys"]


@pytest.mark.parametrize("properties", [
    {"write.metadata.metrics.default": "counts"},
    {"write.metadata.metrics.default": "none", "write.metadata.metrics.column.s_long": "truncate(3)"},
    {"write.metadata.metrics.default": "full"},
    {"write.metadata.metrics.default": "truncate(1)", "write.metadata.metrics.column.i": "none"},
], ids=["counts", "none-but-one", "full", "truncate-1"])
def test_metrics_modes_match_iceberg(spark, iceberg_table, tmp_path: Path, properties) -> None:
    path = _write(tmp_path, EDGE_COLUMNS, row_group_size=2)
    _compare(spark, iceberg_table, path, properties)


def _patch_statistics(path: str, column: int, **fields: object) -> None:
    """Rewrite ``path``'s footer with ``column``'s statistics fields (thrift ids of ``Statistics``) replaced in
    every row group (None removes a field); what other writers leave, which pyarrow never writes."""
    from partialcow.parquet import _format as F
    from partialcow.parquet._layout import ParquetLayout
    from partialcow.parquet._thrift import T_BINARY, T_I64, encode

    ids = {"min": F.ST_MIN, "max": F.ST_MAX, "min_value": F.ST_MIN_VALUE, "max_value": F.ST_MAX_VALUE,
           "null_count": F.ST_NULL_COUNT}
    with ParquetLayout(path) as lay:
        fmd, data = lay.fmd, bytes(lay.buf[:lay.footer_start])
        for rg in lay.row_groups:
            st = rg.val(F.RG_COLUMNS).items[column].val(F.CC_META_DATA).val(F.CMD_STATISTICS)
            for name, value in fields.items():
                if value is None:
                    st.drop(ids[name])
                else:
                    st.put(ids[name], T_I64 if name == "null_count" else T_BINARY, value)
    footer = encode(fmd)
    with open(path, "wb") as out:
        out.write(data + footer + len(footer).to_bytes(4, "little") + b"PAR1")


@pytest.mark.parametrize("case", ["positive-zero-min", "negative-zero-max", "nan-max", "no-null-count"])
def test_statistics_other_writers_leave(spark, iceberg_table, tmp_path: Path, case: str) -> None:
    path = _write(tmp_path, {"f": pa.array([1.5, 2.5], pa.float32()), "d": pa.array([-3.0, -1.0], pa.float64())})
    if case == "positive-zero-min":  # parquet-java reads a +0.0 minimum as -0.0
        _patch_statistics(path, 0, min_value=b"\x00\x00\x00\x00")
    elif case == "negative-zero-max":  # and a -0.0 maximum as +0.0
        _patch_statistics(path, 1, max_value=b"\x00" * 7 + b"\x80")
    elif case == "nan-max":  # and drops bounds holding NaN
        _patch_statistics(path, 1, max_value=b"\x00" * 6 + b"\xf8\x7f")
    else:  # a chunk with bounds but no null count: Iceberg keeps bounds and a value count only
        _patch_statistics(path, 0, null_count=None)
    _compare(spark, iceberg_table, path)


def test_legacy_statistics_take_icebergs_path(spark, iceberg_table, tmp_path: Path) -> None:
    path = _write(tmp_path, {"a": pa.array([1, 2], pa.int64())})
    _patch_statistics(path, 0, min_value=None, max_value=None, min=(1).to_bytes(8, "little"),
                      max=(2).to_bytes(8, "little"))
    _compare(spark, iceberg_table, path, fast=False)


def test_partitioned_files_match_iceberg(spark, tmp_path: Path) -> None:
    """Identity partitions: the partition Iceberg serializes goes into the DataFile unchanged (a null one too)."""
    from partialcow.table.java import load_iceberg_table

    spark.sql("CREATE SCHEMA IF NOT EXISTS metrics_test")
    spark.sql("DROP TABLE IF EXISTS metrics_test.parted PURGE")
    spark.sql("""CREATE TABLE metrics_test.parted (id BIGINT, region STRING, day DATE, n INT) USING iceberg
                 PARTITIONED BY (region, day, n)""")
    spark.sql("""INSERT INTO metrics_test.parted VALUES (1, 'eu', DATE'2024-02-29', 7), (2, NULL, NULL, NULL)""")
    try:
        jvm = spark._jvm
        table = load_iceberg_table(spark, "metrics_test.parted")
        spec = table.spec()
        tasks = table.newScan().planFiles().iterator()
        partitions = []
        while tasks.hasNext():
            partitions.append(tasks.next().file().partition())
        assert len(partitions) == 2
        ids = {"id": "1", "region": "2", "day": "3", "n": "4"}
        columns = {"id": pa.array([5, 6], pa.int64()), "region": pa.array(["eu", "eu"]),
                   "day": pa.array([dt.date(2024, 2, 29)] * 2, pa.date32()), "n": pa.array([7, 7], pa.int32())}
        fields = [pa.field(n, a.type, metadata={"PARQUET:field_id": ids[n]}) for n, a in columns.items()]
        path = str(tmp_path / "parted.parquet")
        pq.write_table(pa.table(list(columns.values()), schema=pa.schema(fields)), path)
        for partition in partitions:
            builder = DataFileBuilder(jvm, table, spec)
            ours = json.loads(str(jvm.org.apache.iceberg.ContentFileParser.toJson(
                builder.build(path, partition=partition), spec)))
            input_file = table.io().newInputFile(path)
            theirs_file = (jvm.org.apache.iceberg.DataFiles.builder(spec).withPath(path)
                           .withFileSizeInBytes(input_file.getLength()).withFormat("PARQUET")
                           .withMetrics(jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(
                               input_file, jvm.org.apache.iceberg.MetricsConfig.forTable(table)))
                           .withPartition(partition).build())
            theirs = json.loads(str(jvm.org.apache.iceberg.ContentFileParser.toJson(theirs_file, spec)))
            assert builder.fast == 1
            assert ours == theirs
            assert ours["partition"] == theirs["partition"] and "partition" in ours
    finally:
        spark.sql("DROP TABLE IF EXISTS metrics_test.parted PURGE")


def test_exact_metrics_are_untruncated_on_both_paths(spark, iceberg_table, tmp_path: Path, monkeypatch) -> None:
    """The inherited-partition check reads exact bounds: the footer's, or Iceberg's with every column "full"."""
    long = "x" * 40 + "z"
    path = _write(tmp_path, {"s": pa.array([long, "a" * 30, None]), "n": pa.array([3, None, -7], pa.int64())})
    fast = DataFileBuilder(spark._jvm, iceberg_table, iceberg_table.spec()).exact_metrics(path)
    monkeypatch.setenv("PARTIALCOW_ICEBERG_FOOTER_METRICS", "0")
    java = DataFileBuilder(spark._jvm, iceberg_table, iceberg_table.spec()).exact_metrics(path)
    assert fast == java
    assert java.upper_bounds[1] == long.encode() and java.lower_bounds[1] == b"a" * 30
    assert (java.value_counts, java.null_value_counts) == ({1: 3, 2: 3}, {1: 1, 2: 1})
    assert java.lower_bounds[2] == (-7).to_bytes(8, "little", signed=True)


def test_decimals_stored_as_integers_and_fixed(spark, iceberg_table, tmp_path: Path) -> None:
    columns = {"d9": pa.array([decimal.Decimal("-9.99"), decimal.Decimal("0.01")], pa.decimal128(9, 2)),
               "d18": pa.array([decimal.Decimal(-(10**17)), decimal.Decimal(5)], pa.decimal128(18, 0))}
    _compare(spark, iceberg_table, _write(tmp_path, columns, store_decimal_as_integer=True))
    _compare(spark, iceberg_table, _write(tmp_path, columns))


def test_missing_statistics_and_empty_files(spark, iceberg_table, tmp_path: Path) -> None:
    columns = {"a": pa.array([1, 2, None], pa.int64()), "s": pa.array(["x", None, "y"], pa.string())}
    _compare(spark, iceberg_table, _write(tmp_path, columns, write_statistics=["a"]))
    empty = {name: array[:0] for name, array in columns.items()}
    _compare(spark, iceberg_table, _write(tmp_path, empty))


@pytest.mark.parametrize("case", ["int96", "millis", "nested", "no-field-id"])
def test_unreproduced_files_take_icebergs_path(spark, iceberg_table, tmp_path: Path, case: str) -> None:
    ts = pa.array([dt.datetime(2021, 1, 1), None], pa.timestamp("us"))
    if case == "int96":
        path = _write(tmp_path, {"t": ts}, use_deprecated_int96_timestamps=True)
        fast = True  # INT96 is reproduced: a column size, no counts or bounds
    elif case == "millis":
        path = _write(tmp_path, {"t": ts}, coerce_timestamps="ms", allow_truncated_timestamps=True)
        fast = False
    elif case == "nested":
        path = _write(tmp_path, {"p": pa.array([{"x": 1}, None], pa.struct([pa.field("x", pa.int64(), metadata={
            "PARQUET:field_id": "7"})]))})
        fast = False
    else:
        path = str(tmp_path / "plain.parquet")
        pq.write_table(pa.table({"a": [1, 2]}), path)
        fast = False
    assert (footer_metrics(read_footer(path), lambda name: ("truncate", 16)) is not None) == fast
    if case != "no-field-id":  # Iceberg itself gives such a file made-up ids; our commit refuses it before this
        _compare(spark, iceberg_table, path, fast=fast)


def test_files_of_spark_and_of_the_page_engine(spark, iceberg_table, tmp_path: Path) -> None:
    """The files our tables hold: Iceberg's Spark writer (parquet-java), and their partial rewrites."""
    from partialcow.parquet import ROW_POSITION, rewrite_file

    spark.sql("DROP TABLE IF EXISTS metrics_test.spark_written PURGE")
    spark.sql("""CREATE TABLE metrics_test.spark_written USING iceberg AS SELECT /*+ COALESCE(1) */ id,
        cast(id % 7 AS int) AS small, id * 1.5d AS dbl, cast(id AS float) AS flt, repeat(cast(id AS string), 9) AS s,
        date_add('2020-01-01', cast(id AS int)) AS d, cast(id AS decimal(20, 3)) AS dec,
        cast(id AS decimal(7, 2)) AS dec_int, timestamp_micros(id * 1000003) AS ts, id % 2 = 0 AS flag,
        IF(id % 5 = 0, NULL, unhex(hex(id * 77))) AS bin FROM range(500)""")
    (src,) = spark.sql("SELECT file_path FROM metrics_test.spark_written.files").collect()
    src_local = src[0][len("file:"):] if src[0].startswith("file:") else src[0]
    _compare(spark, iceberg_table, src_local)
    dst = str(tmp_path / "rewritten.parquet")
    updates = pa.table({ROW_POSITION: pa.array([3, 250], pa.int64()), "s": pa.array(["\U0001F600" * 30, "a"]),
                        "dbl": pa.array([-0.0, 1e300])})
    rewrite_file(src_local, dst, updates)
    _compare(spark, iceberg_table, dst)
    spark.sql("DROP TABLE metrics_test.spark_written PURGE")


_TYPES = {
    "bool": (pa.bool_(), st.booleans()),
    "int16": (pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=True)),
    "float64": (pa.float64(), st.floats(allow_nan=True)),
    "string": (pa.string(), st.text(st.characters(codec="utf-8"), max_size=24)),
    "binary": (pa.binary(), st.binary(max_size=24)),
    "date": (pa.date32(), st.dates()),
    "decimal": (pa.decimal128(12, 3), st.decimals(min_value=-(10**8), max_value=10**8, places=3,
                                                   allow_nan=False, allow_infinity=False)),
}


@st.composite
def _tables(draw):
    names = draw(st.lists(st.sampled_from(sorted(_TYPES)), min_size=1, max_size=4, unique=True))
    rows = draw(st.integers(0, 30))
    columns = {}
    for name in names:
        arrow_type, values = _TYPES[name]
        columns[name] = pa.array(draw(st.lists(st.none() | values, min_size=rows, max_size=rows)), arrow_type)
    options = {
        "row_group_size": draw(st.integers(1, 12)),
        "write_statistics": draw(st.sampled_from([True, False, names[:1]])),
        "data_page_version": draw(st.sampled_from(["1.0", "2.0"])),
        "use_dictionary": draw(st.booleans()),
    }
    properties = draw(st.sampled_from([{}, {"write.metadata.metrics.default": "truncate(2)"},
                                       {"write.metadata.metrics.default": "full"}]))
    return columns, options, properties


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_tables())
def test_generated_files_match_iceberg(spark, iceberg_table, tmp_path: Path, case) -> None:
    columns, options, properties = case
    _compare(spark, iceberg_table, _write(tmp_path, columns, **options), properties)


def test_float_sort_key_puts_negative_zero_first() -> None:
    from partialcow.table.iceberg_metrics import _order

    assert _order("double", -0.0) < _order("double", 0.0)
    assert math.copysign(1.0, min([0.0, -0.0], key=lambda v: _order("double", v))) < 0


def test_a_rewritten_chunk_without_bounds_leaves_the_file_without_bounds(tmp_path):
    """A source without a column index (pyarrow's default): the rewrite cannot bound a chunk it splices. Written with
    its null count alone, the chunk reads as holding no value (as parquet-java reads it), and the file's bounds came
    from the other row groups, which do not bound its values: Iceberg would skip the file for them. The chunk now
    has no statistics, and the file no bounds for the column."""
    from partialcow.parquet import ROW_POSITION, rewrite_file

    field = pa.field("v", pa.int64(), metadata={"PARQUET:field_id": "1"})
    values = list(range(1000, 2000)) + list(range(0, 1000))  # row group 0 holds the high values, 1 the low ones
    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(pa.table({"v": values}, pa.schema([field])), src, row_group_size=1000, data_page_size=512,
                   write_batch_size=100, use_dictionary=False)
    updates = pa.table({ROW_POSITION: pa.array([5], pa.int64()), "v": pa.array([1500], pa.int64())})
    rewrite_file(src, dst, updates=updates)
    chunk = pq.ParquetFile(dst).metadata.row_group(0).column(0).statistics
    assert chunk is None or not chunk.has_min_max or (chunk.min, chunk.max) == (1000, 1999)
    metrics = footer_metrics(read_footer(dst), lambda name: ("truncate", 16))
    assert metrics is not None
    if 1 in metrics.lower_bounds:  # bounds, where given, bound every value
        low, high = (int.from_bytes(metrics.lower_bounds[1], "little", signed=True),
                     int.from_bytes(metrics.upper_bounds[1], "little", signed=True))
        assert low <= 0 and high >= 1999, (low, high)
