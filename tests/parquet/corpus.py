"""Source Parquet files from every writer we accept, and change sets to apply to them.

Everything here is built with plain pyarrow / numpy / DuckDB / deltalake / tpcgen-cli / Spark and never with the
engine, so the oracle in ``oracle.py`` stays independent of the code under test.

Example (pytest's ``tmp_path`` would do as the folder)::

    >>> import tempfile, pathlib
    >>> case = PYARROW_CASES[0]
    >>> path = case.build(pathlib.Path(tempfile.mkdtemp()))
    >>> path.suffix
    '.parquet'
"""

from __future__ import annotations

import decimal
import random
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from oracle import take

__all__ = [
    "ALL_FLAT",
    "CHANGE_PATTERNS",
    "DELTA_FLAT",
    "DUCKDB_CASES",
    "NESTED",
    "PARQUET_RS_CASES",
    "PYARROW_CASES",
    "SOURCE_WRITERS",
    "SPARK_READABLE_FLAT",
    "WRITER_CODECS",
    "Changes",
    "SourceCase",
    "delta_case",
    "duckdb_case",
    "fresh_column",
    "legacy_dictionary_offsets",
    "make_changes",
    "make_table",
    "pyarrow_case",
    "random_array",
    "spark_property_sources",
    "spark_write_cases",
    "tpch_case",
    "writer_columns",
    "write_source",
]

FLAT_TYPES: dict[str, pa.DataType] = {
    "i8": pa.int8(),
    "i16": pa.int16(),
    "i32": pa.int32(),
    "i64": pa.int64(),
    "u8": pa.uint8(),
    "u16": pa.uint16(),
    "u32": pa.uint32(),
    "u64": pa.uint64(),
    "f32": pa.float32(),
    "f64": pa.float64(),
    "dec5_2": pa.decimal128(5, 2),
    "dec15_3": pa.decimal128(15, 3),
    "dec30_5": pa.decimal128(30, 5),
    "str": pa.string(),
    "str_lowcard": pa.string(),
    "bin": pa.binary(),
    "fsb": pa.binary(6),
    "bool": pa.bool_(),
    "date": pa.date32(),
    "ts_ms": pa.timestamp("ms"),
    "ts_us": pa.timestamp("us"),
    "ts_ns": pa.timestamp("ns"),
    "ts_ms_utc": pa.timestamp("ms", tz="UTC"),
    "ts_us_ny": pa.timestamp("us", tz="America/New_York"),
    "ts_ns_utc": pa.timestamp("ns", tz="UTC"),
}
NESTED_TYPES: dict[str, pa.DataType] = {
    "list_i32": pa.list_(pa.int32()),
    "struct": pa.struct([("a", pa.int32()), ("b", pa.string())]),
    "map": pa.map_(pa.string(), pa.int64()),
}
ALL_FLAT = tuple(FLAT_TYPES)
NESTED = tuple(NESTED_TYPES)
# Spark 3.5 refuses TIMESTAMP(NANOS) columns; everything else above it reads.
SPARK_READABLE_FLAT = tuple(k for k in ALL_FLAT if not k.startswith("ts_ns"))
# delta-rs casts to Delta types: no unsigned ints, no nanoseconds, no fixed-size binary.
DELTA_FLAT = tuple(k for k in ALL_FLAT if not (k.startswith("u") or k.startswith("ts_ns") or k == "fsb"))

_ALPHABET = list("abcdefxyz ÄéßЖ漢字😀")


def _type_of(name: str) -> pa.DataType:
    return FLAT_TYPES.get(name) or NESTED_TYPES[name]


def random_array(
    typ: pa.DataType, n: int, rng: np.random.Generator, *, null_density: float = 0.1, low_card: bool = False
) -> pa.Array:
    """``n`` random values of ``typ`` (edge values included: NaN, -0.0, '', extremes), ``null_density`` of them null."""
    vals = _values(typ, n, rng, low_card)
    if null_density > 0:
        mask = rng.random(n) < null_density
        vals = [None if m else v for v, m in zip(vals, mask)]
    return pa.array(vals, type=typ)


def _values(typ: pa.DataType, n: int, rng: np.random.Generator, low_card: bool) -> list:
    if low_card:
        pool = _values(typ, 12, rng, False)
        return [pool[i] for i in rng.integers(0, len(pool), n)]
    if pa.types.is_boolean(typ):
        return (rng.random(n) < 0.5).tolist()
    if pa.types.is_integer(typ):
        info = np.iinfo(typ.to_pandas_dtype())
        vals = rng.integers(info.min, info.max, n, dtype=typ.to_pandas_dtype(), endpoint=True).tolist()
        if n >= 2:
            vals[0], vals[1] = int(info.min), int(info.max)
        return vals
    if pa.types.is_floating(typ):
        vals = (rng.standard_normal(n) * 1000).tolist()
        for i in rng.integers(0, n, max(1, n // 50)).tolist():
            vals[i] = [float("nan"), -0.0, 0.0, float("inf"), float("-inf")][i % 5]
        return vals
    if pa.types.is_decimal(typ):
        bound = 10**typ.precision - 1
        r = random.Random(int(rng.integers(0, 2**63)))
        unscaled = [r.randint(-bound, bound) for _ in range(n)]
        if n >= 2:
            unscaled[0], unscaled[1] = -bound, bound
        ctx = decimal.Context(prec=60)  # the default 28 digits would round decimal(30, s)
        return [decimal.Decimal(u).scaleb(-typ.scale, context=ctx) for u in unscaled]
    if pa.types.is_fixed_size_binary(typ):
        return [rng.bytes(typ.byte_width) for _ in range(n)]
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        lens = rng.integers(0, 14, n)
        picks = rng.integers(0, len(_ALPHABET), int(lens.sum()))
        out, pos = [], 0
        for ln in lens.tolist():
            out.append("".join(_ALPHABET[c] for c in picks[pos : pos + ln]))
            pos += ln
        return out
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_binary_view(typ):
        return [rng.bytes(int(k)) for k in rng.integers(0, 11, n)]
    if pa.types.is_date32(typ):
        return pa.array(rng.integers(-20000, 60000, n).astype(np.int32)).cast(pa.date32()).to_pylist()
    if pa.types.is_timestamp(typ):
        per_sec = {"s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}[typ.unit]
        # 1901..2262 fits every unit, including nanoseconds in int64.
        raw = rng.integers(-2_000_000_000 * per_sec, 9_000_000_000 * per_sec, n, dtype=np.int64)
        return pa.array(raw).cast(typ).cast(pa.int64()).to_pylist()  # ints: pa.array(ints, type=ts) rebuilds them
    if pa.types.is_list(typ):
        child = typ.value_type
        lens = rng.integers(0, 5, n).tolist()
        flat = random_array(child, int(sum(lens)), rng, null_density=0.15 if typ.value_field.nullable else 0.0).to_pylist()
        out, pos = [], 0
        for ln in lens:
            out.append(flat[pos : pos + ln])
            pos += ln
        return out
    if pa.types.is_struct(typ):
        cols = [random_array(f.type, n, rng, null_density=0.15 if f.nullable else 0.0).to_pylist() for f in typ]
        return [{f.name: c[i] for f, c in zip(typ, cols)} for i in range(n)]
    if pa.types.is_map(typ):
        lens = rng.integers(0, 4, n).tolist()
        vals = random_array(typ.item_type, int(sum(lens)), rng, null_density=0.15 if typ.item_field.nullable else 0.0).to_pylist()
        out, pos = [], 0
        for ln in lens:
            out.append([(f"k{j}", vals[pos + j]) for j in range(ln)])  # keys unique within a map
            pos += ln
        return out
    raise TypeError(f"no generator for {typ}")


def make_table(
    n: int,
    *,
    columns: Sequence[str] = ALL_FLAT,
    seed: int = 0,
    null_density: float = 0.1,
    required: Sequence[str] = ("id",),
    low_cardinality: bool = False,
) -> pa.Table:
    """A table with a unique int64 ``id`` plus one column per name in ``columns`` (keys of FLAT_TYPES/NESTED_TYPES).

    Values are mostly distinct, except in ``*_lowcard`` columns, or in all columns with ``low_cardinality``: a
    dictionary then pays and pages are patched under it rather than the chunk re-encoded whole."""
    rng = np.random.default_rng(seed)
    arrays = [pa.array(np.arange(n, dtype=np.int64))]
    fields = [pa.field("id", pa.int64(), nullable="id" not in required)]
    for name in columns:
        typ = _type_of(name)
        low_card = low_cardinality or name.endswith("lowcard")
        arrays.append(random_array(typ, n, rng, null_density=0.0 if name in required else null_density, low_card=low_card))
        fields.append(pa.field(name, typ, nullable=name not in required))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata={"corpus": "partialcow-tests"}))


@dataclass(frozen=True)
class SourceCase:
    """One source file: ``build(folder)`` writes it and returns its path."""

    id: str
    writer: str
    build: Callable[[Path], Path] = field(repr=False)
    page_index: bool = False
    nested: bool = False
    multi_row_group: bool = False
    # The file has a column pyarrow cannot re-encode with the same physical layout (e.g. DuckDB's 16-byte
    # FIXED_LEN_BYTE_ARRAY for decimal(30, 5), where pyarrow writes 13 bytes): a documented whole-file fallback.
    layout_fallback_ok: bool = False


def pyarrow_case(cid: str, n: int, columns: Sequence[str], *, seed: int = 1, **opts: object) -> SourceCase:
    def build(folder: Path) -> Path:
        path = folder / f"{cid}.parquet"
        pq.write_table(make_table(n, columns=columns, seed=seed), path, **opts)
        return path

    return SourceCase(
        cid,
        "pyarrow",
        build,
        page_index=bool(opts.get("write_page_index")),
        nested=any(c in NESTED_TYPES for c in columns),
        multi_row_group=opts.get("row_group_size", n) < n,
    )


PYARROW_CASES: list[SourceCase] = [
    pyarrow_case("pa_v1_index_snappy", 2000, ALL_FLAT, compression="snappy", data_page_version="1.0", write_page_index=True, max_rows_per_page=100),
    pyarrow_case("pa_v2_index_zstd", 2000, ALL_FLAT, compression="zstd", data_page_version="2.0", write_page_index=True, max_rows_per_page=128),
    pyarrow_case("pa_v1_noindex_gzip", 1500, ALL_FLAT, compression="gzip", data_page_version="1.0", max_rows_per_page=100),
    pyarrow_case("pa_v2_noindex_lz4raw", 1500, ALL_FLAT, compression="lz4_raw", data_page_version="2.0", max_rows_per_page=90),
    pyarrow_case("pa_plain_brotli", 1200, ALL_FLAT, compression="brotli", use_dictionary=False, write_page_index=True, max_rows_per_page=64),
    # A tiny dictionary page limit forces dictionary fallback: dictionary pages followed by PLAIN pages in one chunk.
    pyarrow_case("pa_dict_fallback_none", 2000, ("str", "bin", "i64", "f64", "dec30_5", "str_lowcard"), compression="none", dictionary_pagesize_limit=600, write_page_index=True, max_rows_per_page=100),
    pyarrow_case("pa_multi_rg_crc", 2400, ALL_FLAT, compression="snappy", row_group_size=700, write_page_index=True, write_page_checksum=True, max_rows_per_page=100),
    # Byte-size pages (no row limit): page boundaries fall wherever data_page_size says.
    pyarrow_case("pa_small_bytes_pages", 2000, ("i32", "str", "f64", "dec15_3", "ts_ns_utc"), data_page_size=700, write_batch_size=50, write_page_index=True),
    pyarrow_case("pa_nested_v2_index", 1500, ("i32", "str") + NESTED, compression="zstd", data_page_version="2.0", write_page_index=True, max_rows_per_page=100),
    pyarrow_case("pa_nested_v1_noindex", 1500, ("i32", "str") + NESTED, compression="snappy", data_page_version="1.0", max_rows_per_page=100),
    pyarrow_case("pa_nested_v1_index", 1500, ("i32",) + NESTED, compression="snappy", data_page_version="1.0", write_page_index=True, max_rows_per_page=100),
]


def legacy_dictionary_offsets(path: Path) -> int:
    """Rewrite ``path``'s footer the way parquet-mr 1.12 (and other writers) lay it out: no dictionary_page_offset,
    data_page_offset pointing at the dictionary page. Page bytes are untouched. Returns the chunks changed.

    The footer is re-encoded with the engine's Thrift codec (byte-identical round trips are tested in
    test_engine_thrift.py); callers check that pyarrow still reads the file as before.
    """
    from partialcow.parquet import _format as F
    from partialcow.parquet._thrift import T_I64, decode_struct, encode

    raw = path.read_bytes()
    flen = int.from_bytes(raw[-8:-4], "little")
    fmd, _ = decode_struct(raw[-8 - flen : -8])
    changed = 0
    for rg in fmd.val(F.FMD_ROW_GROUPS).items:
        for cc in rg.val(F.RG_COLUMNS).items:
            cmd = cc.val(F.CC_META_DATA)
            dict_off = cmd.val(F.CMD_DICTIONARY_PAGE_OFFSET)
            if dict_off:
                cmd.put(F.CMD_DATA_PAGE_OFFSET, T_I64, dict_off)
                cmd.drop(F.CMD_DICTIONARY_PAGE_OFFSET)
                changed += 1
    footer = encode(fmd)
    path.write_bytes(raw[: -8 - flen] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    return changed


def duckdb_case(cid: str, n: int, columns: Sequence[str], copy_options: str, *, layout_fallback_ok: bool = False) -> SourceCase:
    def build(folder: Path) -> Path:
        import duckdb

        path = folder / f"{cid}.parquet"
        con = duckdb.connect()
        con.register("src", make_table(n, columns=columns, seed=2))
        con.execute(f"COPY (SELECT * FROM src) TO '{path}' (FORMAT parquet, {copy_options})")
        con.close()
        return path

    return SourceCase(
        cid, "duckdb", build, nested=any(c in NESTED_TYPES for c in columns), multi_row_group=True, layout_fallback_ok=layout_fallback_ok
    )


_NO_WIDE_DECIMAL = tuple(c for c in ALL_FLAT if c != "dec30_5")
DUCKDB_CASES: list[SourceCase] = [
    duckdb_case("duckdb_zstd", 5000, _NO_WIDE_DECIMAL, "CODEC 'zstd', ROW_GROUP_SIZE 2048"),
    # DuckDB 2.0's V2 DELTA_BINARY_PACKED for full-range 32-bit ints is unreadable by pyarrow 26 ("InitBlock EOF")
    # even before any rewrite, so those two columns are left out of this case.
    duckdb_case("duckdb_snappy_v2", 5000, tuple(c for c in _NO_WIDE_DECIMAL if c not in ("i32", "u32")), "CODEC 'snappy', ROW_GROUP_SIZE 2048, PARQUET_VERSION v2"),
    duckdb_case("duckdb_uncompressed_nested", 4200, ("i64", "str") + NESTED, "CODEC 'uncompressed', ROW_GROUP_SIZE 2048"),
    duckdb_case("duckdb_wide_decimal", 3000, ("i32", "dec30_5", "str"), "CODEC 'zstd', ROW_GROUP_SIZE 2048", layout_fallback_ok=True),
]


def delta_case(cid: str, n: int, columns: Sequence[str], **props: object) -> SourceCase:
    def build(folder: Path) -> Path:
        from deltalake import WriterProperties, write_deltalake

        table_dir = folder / f"{cid}_delta"
        shutil.rmtree(table_dir, ignore_errors=True)
        write_deltalake(str(table_dir), make_table(n, columns=columns, seed=3), writer_properties=WriterProperties(**props))
        (data_file,) = sorted(table_dir.glob("*.parquet"))
        path = folder / f"{cid}.parquet"
        shutil.copyfile(data_file, path)
        return path

    return SourceCase(cid, "parquet-rs", build, page_index=True, nested=any(c in NESTED_TYPES for c in columns))


def _tpcgen() -> str:
    """tpcgen-cli from PATH, or next to the running interpreter (a venv used without activating it)."""
    return shutil.which("tpcgen-cli") or str(Path(sys.executable).with_name("tpcgen-cli"))


def tpch_case(cid: str, table: str, scale: str, options: Sequence[str]) -> SourceCase:
    def build(folder: Path) -> Path:
        out = folder / f"{cid}_tpch"
        subprocess.run(
            [_tpcgen(), "tpch", "parquet", "-s", scale, f"--tables={table}", f"--output-dir={out}", *options],
            check=True,
            capture_output=True,
        )
        path = folder / f"{cid}.parquet"
        shutil.copyfile(out / f"{table}.parquet", path)
        return path

    return SourceCase(cid, "parquet-rs", build, page_index=True, multi_row_group=True)


PARQUET_RS_CASES: list[SourceCase] = [
    delta_case("deltars_snappy_small_pages", 3000, DELTA_FLAT, compression="SNAPPY", data_page_row_count_limit=128, write_batch_size=128),
    delta_case("deltars_zstd_nested", 2000, ("i64", "str") + NESTED, compression="ZSTD", data_page_row_count_limit=100, write_batch_size=100),
    tpch_case("tpch_lineitem_rs", "lineitem", "0.001", ["--row-group-bytes=100KB", "--compression=ZSTD(1)"]),
]


_SPARK_FLAT = (
    "id",
    "CAST(id % 120 AS TINYINT) AS i8",
    "CAST(IF(id % 11 = 0, NULL, id * 7 % 30000) AS SMALLINT) AS i16",
    "CAST(IF(id % 13 = 0, NULL, hash(id)) AS INT) AS i32",
    "IF(id % 17 = 0, NULL, xxhash64(id)) AS i64",
    "CAST(IF(id % 19 = 0, NULL, hash(id) / 7.0) AS FLOAT) AS f32",
    "IF(id % 23 = 0, NULL, IF(id % 29 = 0, double('NaN'), hash(id) / 3.0)) AS f64",
    "CAST(IF(id % 7 = 0, NULL, (hash(id) % 99999) / 100) AS DECIMAL(5,2)) AS dec5_2",
    "CAST(IF(id % 5 = 0, NULL, xxhash64(id) / 1000) AS DECIMAL(15,3)) AS dec15_3",
    "CAST(IF(id % 3 = 0, NULL, xxhash64(id) * 1000.5) AS DECIMAL(30,5)) AS dec30_5",
    "IF(id % 10 = 0, NULL, IF(id % 9 = 0, '', concat('v', hash(id) % 50, '_é漢'))) AS str",
    "IF(id % 8 = 0, NULL, unhex(hex(hash(id)))) AS bin",
    "IF(id % 6 = 0, NULL, id % 2 = 0) AS bool",
    "IF(id % 12 = 0, NULL, date_add(DATE'2000-01-01', CAST(hash(id) % 20000 AS INT))) AS date",
    "IF(id % 14 = 0, NULL, timestamp_micros(abs(xxhash64(id)) % 4000000000000000)) AS ts",
)


def spark_write_cases(spark: object, folder: Path) -> dict[str, Path]:
    """Files written by Spark's parquet-mr writer: INT96 + decimals + snappy, and zstd with nested columns.

    Small pages (``parquet.page.row.count.limit``) so that page-level copying is visible.
    """
    exprs = list(_SPARK_FLAT)
    nested = [
        "id",
        "CAST(hash(id) AS INT) AS i32",
        "IF(id % 10 = 0, NULL, sequence(0, CAST(id % 4 AS INT))) AS list_i32",
        "IF(id % 9 = 0, NULL, named_struct('a', CAST(id AS INT), 'b', concat('s', id % 37))) AS struct",
        "IF(id % 8 = 0, NULL, map('k', id, concat('k', id % 3), id * 2)) AS map",
        "timestamp_micros(id * 1000003) AS ts",
    ]
    out = {}
    for name, select, conf in (
        ("spark_int96_snappy", exprs, {"spark.sql.parquet.outputTimestampType": "INT96", "spark.sql.parquet.compression.codec": "snappy"}),
        ("spark_micros_gzip", exprs, {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS", "spark.sql.parquet.compression.codec": "gzip"}),
        ("spark_nested_zstd", nested, {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS", "spark.sql.parquet.compression.codec": "zstd"}),
    ):
        saved = {k: spark.conf.get(k, None) for k in conf}  # type: ignore[attr-defined]
        for k, v in conf.items():
            spark.conf.set(k, v)  # type: ignore[attr-defined]
        try:
            target = folder / f"{name}_dir"
            (
                spark.range(0, 1500, 1, 1)  # type: ignore[attr-defined]
                .selectExpr(*select)
                .write.option("parquet.page.row.count.limit", "100")
                .option("parquet.page.size", "4096")
                .parquet(str(target))
            )
        finally:
            for k, v in saved.items():
                if v is None:
                    spark.conf.unset(k)  # type: ignore[attr-defined]
                else:
                    spark.conf.set(k, v)  # type: ignore[attr-defined]
        (data_file,) = sorted(target.glob("part-*.parquet"))
        out[name] = folder / f"{name}.parquet"
        shutil.copyfile(data_file, out[name])
    return out


# ---------------------------------------------------------------------------------------------------------------
# Writers for the property tests: one call writes a table the way a given writer lays it out


SOURCE_WRITERS = ("pyarrow", "pyarrow_legacy_dict", "duckdb", "arrow-rs")
# Every codec each writer can write. pyarrow's and DuckDB's "lz4" is LZ4_RAW; arrow-rs also writes the older,
# framed LZ4 (codec 5), which the engine reads but cannot write (such chunks are re-encoded whole as LZ4_RAW).
WRITER_CODECS = {
    "pyarrow": ("none", "snappy", "gzip", "brotli", "zstd", "lz4"),
    "pyarrow_legacy_dict": ("none", "snappy", "gzip", "brotli", "zstd", "lz4"),
    "duckdb": ("uncompressed", "snappy", "gzip", "zstd", "brotli", "lz4"),
    "arrow-rs": ("UNCOMPRESSED", "SNAPPY", "GZIP", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"),
}


def writer_columns(writer: str, v2: bool) -> tuple[str, ...]:
    """The FLAT_TYPES/NESTED_TYPES keys ``writer`` can write (and pyarrow 26 can read back)."""
    if writer == "arrow-rs":
        return DELTA_FLAT + NESTED
    if writer == "duckdb" and v2:
        # DuckDB's V2 DELTA_BINARY_PACKED for full-range 32-bit ints (also inside lists and structs) is unreadable
        # by pyarrow 26 ("InitBlock EOF") before any rewrite
        return tuple(c for c in ALL_FLAT + NESTED if c not in ("i32", "u32", "list_i32", "struct"))
    return ALL_FLAT + NESTED


def write_source(writer: str, table: pa.Table, path: Path, *, codec: str, v2: bool, page_rows: int, dictionary: bool,
                 page_index: bool, row_group_rows: int, crc: bool) -> Path:
    """Write ``table`` to ``path`` with ``writer`` (one of SOURCE_WRITERS) and the options it supports.

    "pyarrow_legacy_dict" is pyarrow's file with the footer of parquet-mr 1.12 (see legacy_dictionary_offsets);
    DuckDB lays out pages itself (no page size, dictionary or page index options); arrow-rs (through delta-rs)
    writes v1 pages with a page index.
    """
    if writer in ("pyarrow", "pyarrow_legacy_dict"):
        pq.write_table(table, path, compression=codec, data_page_version="2.0" if v2 else "1.0",
                       max_rows_per_page=page_rows, use_dictionary=dictionary, write_page_index=page_index,
                       row_group_size=row_group_rows, write_page_checksum=crc)
        if writer == "pyarrow_legacy_dict":
            legacy_dictionary_offsets(path)
        return path
    if writer == "duckdb":
        import duckdb

        con = duckdb.connect()
        try:
            con.register("src", table)
            con.execute(f"COPY (SELECT * FROM src) TO '{path}' (FORMAT parquet, CODEC '{codec}', "
                        f"ROW_GROUP_SIZE {max(row_group_rows, 2048)}, PARQUET_VERSION {'v2' if v2 else 'v1'})")
        finally:
            con.close()
        return path
    if writer == "arrow-rs":
        from deltalake import ColumnProperties, WriterProperties, write_deltalake

        table_dir = path.with_suffix(".delta")
        shutil.rmtree(table_dir, ignore_errors=True)
        props = WriterProperties(compression=codec, data_page_row_count_limit=page_rows, write_batch_size=page_rows,
                                 max_row_group_size=row_group_rows,
                                 default_column_properties=ColumnProperties(dictionary_enabled=dictionary))
        write_deltalake(str(table_dir), table, writer_properties=props)
        (data_file,) = sorted(table_dir.glob("*.parquet"))
        shutil.copyfile(data_file, path)
        shutil.rmtree(table_dir)
        return path
    raise ValueError(f"unknown writer {writer!r}; expected one of {SOURCE_WRITERS}")


def spark_property_sources(spark: object, folder: Path) -> dict[str, Path]:
    """Files written by Spark's parquet-mr (1.13 in Spark 3.5) in several layouts, for the Spark property test:
    v1 and v2 pages (v2 brings parquet-mr's DELTA_* encodings), dictionary on and off, INT96 and micros timestamps,
    four codecs, and one with the parquet-mr 1.12 footer. Columns carry a per-file prefix (``s<k>_``) so that the
    files never disagree on a column's type when read together."""
    nested = [
        "IF(id % 10 = 0, NULL, sequence(0, CAST(id % 4 AS INT))) AS list_i32",
        "IF(id % 9 = 0, NULL, named_struct('a', CAST(id AS INT), 'b', concat('s', id % 37))) AS struct",
        "IF(id % 8 = 0, NULL, map('k', id, concat('k', id % 3), id * 2)) AS map",
    ]
    variants = [
        ("int96_snappy_v1_dict", {"spark.sql.parquet.outputTimestampType": "INT96",
                                  "spark.sql.parquet.compression.codec": "snappy"}, {}),
        ("micros_zstd_v2_dict", {"spark.sql.parquet.compression.codec": "zstd"}, {"parquet.writer.version": "v2"}),
        ("micros_gzip_v1_plain", {"spark.sql.parquet.compression.codec": "gzip"}, {"parquet.enable.dictionary": "false"}),
        ("micros_none_v2_plain", {"spark.sql.parquet.compression.codec": "none"},
         {"parquet.writer.version": "v2", "parquet.enable.dictionary": "false"}),
        ("micros_lz4raw_v1_dict", {"spark.sql.parquet.compression.codec": "lz4raw"}, {}),
    ]
    out = {}
    for k, (name, conf, options) in enumerate(variants):
        conf = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS", **conf}
        saved = {key: spark.conf.get(key, None) for key in conf}  # type: ignore[attr-defined]
        for key, value in conf.items():
            spark.conf.set(key, value)  # type: ignore[attr-defined]
        target = folder / f"spark_{name}_dir"
        try:
            df = spark.range(0, 1200 + 300 * k, 1, 1).selectExpr(*_SPARK_FLAT, *nested)  # type: ignore[attr-defined]
            df = df.toDF(*[f"s{k}_{c}" for c in df.columns])
            writer = df.write.option("parquet.page.row.count.limit", str(100 + 150 * (k % 2))).option(
                "parquet.page.size", "8192").option("parquet.block.size", str(64 * 1024))
            for key, value in options.items():
                writer = writer.option(key, value)
            writer.parquet(str(target))
        finally:
            for key, value in saved.items():
                if value is None:
                    spark.conf.unset(key)  # type: ignore[attr-defined]
                else:
                    spark.conf.set(key, value)  # type: ignore[attr-defined]
        (data_file,) = sorted(target.glob("part-*.parquet"))
        out[f"spark_{name}"] = folder / f"spark_{name}.parquet"
        shutil.copyfile(data_file, out[f"spark_{name}"])
    legacy = folder / "spark_int96_snappy_v1_dict_legacy_footer.parquet"
    shutil.copyfile(out["spark_int96_snappy_v1_dict"], legacy)
    assert legacy_dictionary_offsets(legacy) > 0
    out["spark_int96_snappy_v1_dict_legacy_footer"] = legacy
    return out


# ---------------------------------------------------------------------------------------------------------------
# Change sets


@dataclass(frozen=True)
class Changes:
    """Row positions with their new values (a table ready for ``rewrite_file``) and positions to delete."""

    updates: pa.Table | None
    deletes: np.ndarray | None
    description: str


def fresh_column(original: pa.ChunkedArray, field_: pa.Field, k: int, rng: np.random.Generator) -> pa.Array:
    """New values of the column's own type: half freshly generated, half taken from other rows (dictionary hits)."""
    typ = original.type
    gen_type = pa.string() if pa.types.is_string_view(typ) else pa.binary() if pa.types.is_binary_view(typ) else typ
    fresh = random_array(gen_type, k, rng, null_density=0.15 if field_.nullable else 0.0).cast(typ)
    if len(original) == 0:
        return fresh
    pool = original.combine_chunks()
    picked = take(pool, rng.integers(0, len(pool), k))
    if not field_.nullable and picked.null_count:
        picked = fresh
    choose = rng.random(k) < 0.5
    idx = np.where(choose, np.arange(k), np.arange(k) + k)
    return take(pa.concat_arrays([fresh, picked]), idx)


def _updates_table(
    original: pa.Table, positions: np.ndarray, columns: Sequence[str], rng: np.random.Generator, row_position: str, *, same_values: bool = False
) -> pa.Table:
    positions = np.asarray(positions, dtype=np.int64)
    arrays = [pa.array(positions, pa.int64())]
    names = [row_position]
    for c in columns:
        if same_values:
            arrays.append(take(original.column(c), positions))
        else:
            arrays.append(fresh_column(original.column(c), original.schema.field(c), len(positions), rng))
        names.append(c)
    return pa.Table.from_arrays(arrays, names=names)


CHANGE_PATTERNS = (
    "one_cell",
    "random_rows_one_col",
    "random_rows_all_cols",
    "contiguous_all_cols",
    "equal_values",
    "to_null_and_back",
    "random_deletes",
    "contiguous_deletes",
    "mixed",
    "delete_first_row_group",
)


def make_changes(original: pa.Table, pattern: str, *, seed: int, row_position: str, row_group_rows: Sequence[int] = ()) -> Changes:
    """Build one change set of ``pattern`` (see CHANGE_PATTERNS) for ``original``."""
    rng = np.random.default_rng(seed)
    n = original.num_rows
    cols = [c for c in original.column_names]
    if pattern == "one_cell":
        col = cols[rng.integers(0, len(cols))]
        pos = np.array([rng.integers(0, n)])
        return Changes(_updates_table(original, pos, [col], rng, row_position), None, f"one cell in {col}")
    if pattern == "random_rows_one_col":
        col = cols[rng.integers(1, len(cols))] if len(cols) > 1 else cols[0]
        pos = rng.choice(n, size=max(1, n // 50), replace=False)
        return Changes(_updates_table(original, pos, [col], rng, row_position), None, f"2% random rows of {col}")
    if pattern == "random_rows_all_cols":
        pos = rng.choice(n, size=max(1, n // 100), replace=False)
        return Changes(_updates_table(original, pos, cols[1:] or cols, rng, row_position), None, "1% random rows, all non-id columns")
    if pattern == "contiguous_all_cols":
        start = int(rng.integers(0, max(1, n - 150)))
        pos = np.arange(start, min(n, start + 150))
        return Changes(_updates_table(original, rng.permutation(pos), cols, rng, row_position), None, f"rows {start}..+150, all columns")
    if pattern == "equal_values":
        pos = rng.choice(n, size=max(1, n // 20), replace=False)
        return Changes(_updates_table(original, pos, cols, rng, row_position, same_values=True), None, "5% rows set to their own values")
    if pattern == "to_null_and_back":
        nullable = [c for c in cols if original.schema.field(c).nullable]
        if not nullable:
            return make_changes(original, "one_cell", seed=seed, row_position=row_position)
        col = nullable[rng.integers(0, len(nullable))]
        pos = rng.choice(n, size=max(2, n // 30), replace=False)
        values = fresh_column(original.column(col), original.schema.field(col), len(pos), rng)
        mask = np.zeros(len(pos), dtype=bool)
        mask[::2] = True
        values = take(values, pa.array([None if m else i for i, m in enumerate(mask)], pa.int64()))  # null index -> null
        table = pa.Table.from_arrays([pa.array(pos.astype(np.int64)), values], names=[row_position, col])
        return Changes(table, None, f"{col}: half to null, half to values")
    if pattern == "random_deletes":
        return Changes(None, np.sort(rng.choice(n, size=max(1, n // 100), replace=False)), "1% random deletes")
    if pattern == "contiguous_deletes":
        start = int(rng.integers(0, max(1, n - 300)))
        return Changes(None, np.arange(start, min(n, start + 300)), f"delete rows {start}..+300")
    if pattern == "mixed":
        pos = rng.choice(n, size=max(2, n // 25), replace=False)
        upd, dels = pos[: len(pos) // 2], np.sort(pos[len(pos) // 2 :])
        col = cols[rng.integers(1, len(cols))] if len(cols) > 1 else cols[0]
        upd_cols = [col] if col == cols[0] else [col, cols[0]]
        return Changes(_updates_table(original, upd, upd_cols, rng, row_position), dels, f"2% updates of {upd_cols}, 2% deletes")
    if pattern == "delete_first_row_group":
        first = row_group_rows[0] if len(row_group_rows) > 1 else n // 2
        pos = rng.choice(np.arange(first, n), size=max(1, (n - first) // 100), replace=False)
        upd = _updates_table(original, pos, [cols[-1]], rng, row_position)
        return Changes(upd, np.arange(0, first), "delete the whole first row group, update later rows")
    raise ValueError(f"unknown change pattern {pattern!r}; expected one of {CHANGE_PATTERNS}")
