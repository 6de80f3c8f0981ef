"""The source's physical layout and schema survive a rewrite (issue 22): Iceberg, Delta and the row index read the
schema, so a rewrite may re-encode pages but never change a column's physical type, width, logical type, field id
or repetition; untouched chunks are copied byte for byte whatever the change; value encodings are kept where
pyarrow can write them."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oracle import apply_changes, assert_same_rows, read_duckdb
from pagewalk import read_file_view
from partialcow.exceptions import ParquetRewriteError
from partialcow.parquet import ROW_POSITION, rewrite_file

N = 5000


def _duckdb_source(path: Path) -> Path:
    import duckdb

    con = duckdb.connect()
    con.execute(
        "COPY (SELECT i::BIGINT AS id, IF(i % 11 = 0, NULL, (i * 1.2345)::DECIMAL(20,4)) AS dec20, "
        "(i * 7.5 - 900)::DECIMAL(30,5) AS dec30, 'v' || (i % 13) AS s, (i % 7)::DECIMAL(10,2) AS dec10 "
        f"FROM range({N}) t(i)) TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 2048, CODEC 'snappy')")
    con.close()
    return path


def _schema(path: Path) -> list:
    return read_file_view(path).footer[2]


def _chunk_bytes(path: Path) -> dict[tuple[int, str], bytes]:
    return {(c.row_group, c.path): b"".join(p.raw for p in c.pages) for rg in read_file_view(path).chunks for c in rg}


def _update_dec20(t: pa.Table) -> pa.Table:
    return pa.table({ROW_POSITION: pa.array([5, 2100, 4999], pa.int64()),
                     "dec20": pa.array([None, Decimal("12.5"), Decimal(-3)], pa.decimal128(20, 4))})


def _update_dec30_and_dec10(t: pa.Table) -> pa.Table:
    return pa.table({ROW_POSITION: pa.array(np.arange(0, N, 3), pa.int64()),
                     "dec30": t.column("dec30").take(pa.array(np.arange(N - 1, 0, -3))),
                     "dec10": t.column("dec10").take(pa.array(np.arange(1, N, 3)))})


CHANGES = {
    "update_dec20": (_update_dec20, None),
    "update_dec30_and_dec10": (_update_dec30_and_dec10, None),
    "deletes": (lambda t: None, np.arange(0, N, 7)),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_bug_whole_file_fallback_reencodes_every_column(tmp_path: Path, change: str) -> None:
    """DuckDB stores decimal(20, 4) in a 16-byte FIXED_LEN_BYTE_ARRAY where pyarrow writes 9 bytes. A change to such
    a column fell back to a whole-file pyarrow rewrite: every column re-encoded and the schema changed (9-byte
    decimals). Now the layout is written as the source has it, untouched chunks are copied, the schema stays."""
    src = _duckdb_source(tmp_path / "src.parquet")
    original = pq.read_table(src)
    make_updates, deletes = CHANGES[change]
    updates = make_updates(original)
    dst = tmp_path / "dst.parquet"
    report = rewrite_file(src, dst, updates, deletes)
    expected = apply_changes(original, updates, deletes, ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    assert_same_rows(read_duckdb(dst), expected, "duckdb")
    assert report.full_file_rewrite is None
    assert _schema(dst) == _schema(src)
    if updates is not None:
        before, after = _chunk_bytes(src), _chunk_bytes(dst)
        untouched = {k for k in before if k[1] not in updates.column_names}
        assert untouched and all(before[k] == after[k] for k in untouched), "an untouched chunk was re-encoded"


def _post_process_decimal(path: Path, table: pa.Table, column: str, precision: int, **opts: object) -> None:
    """Write ``column`` with pyarrow's layout for its (wider) type, then declare ``precision`` in the schema: a file
    whose physical width is larger than pyarrow would choose for that precision (as other writers produce)."""
    from partialcow.parquet import _format as F
    from partialcow.parquet._thrift import T_I32, decode_struct, encode

    pq.write_table(table, path, store_schema=False, **opts)
    raw = path.read_bytes()
    flen = int.from_bytes(raw[-8:-4], "little")
    fmd, _ = decode_struct(raw[-8 - flen:-8])
    for el in fmd.val(F.FMD_SCHEMA).items:
        if el.val(F.SE_NAME) == column.encode():
            el.put(F.SE_PRECISION, T_I32, precision)
            el.val(F.SE_LOGICAL_TYPE).val(F.LT_DECIMAL).put(2, T_I32, precision)  # DecimalType.precision
    footer = encode(fmd)
    path.write_bytes(raw[:-8 - flen] + footer + len(footer).to_bytes(4, "little") + b"PAR1")


@pytest.mark.parametrize(("wide", "declared", "physical", "as_integer"), [
    (pa.decimal128(26, 4), 20, "FIXED_LEN_BYTE_ARRAY", False),  # 11-byte FLBA holding decimal(20, 4)
    (pa.decimal256(50, 2), 40, "FIXED_LEN_BYTE_ARRAY", False),  # 21 bytes, beyond decimal128
    (pa.decimal128(18, 2), 10, "INT64", True),  # INT64 holding decimal(10, 2): pyarrow would choose INT64 anyway
    (pa.decimal128(18, 2), 6, "INT64", True),  # INT64 holding decimal(6, 2): pyarrow would choose INT32
])
def test_decimal_width_of_any_size_is_kept(tmp_path: Path, wide: pa.DataType, declared: int, physical: str,
                                           as_integer: bool) -> None:
    rng = np.random.default_rng(3)
    n = 3000
    bound = 10 ** (declared - wide.scale) // 2
    unscaled = rng.integers(-min(bound, 2**62), min(bound, 2**62), n)
    values = pa.array(unscaled).cast(pa.decimal128(38, 0)).cast(pa.decimal256(76, wide.scale) if
                                                                  pa.types.is_decimal256(wide) else
                                                                  pa.decimal128(38, wide.scale))
    table = pa.table({"id": pa.array(np.arange(n)), "d": values.cast(wide)})
    src = tmp_path / "src.parquet"
    _post_process_decimal(src, table, "d", declared, store_decimal_as_integer=as_integer, write_page_index=True,
                          max_rows_per_page=200)
    pf = pq.ParquetFile(src)
    assert pf.schema.column(1).physical_type == physical and pf.schema_arrow.field("d").type.precision == declared
    original = pq.read_table(src)
    for name, pos in (("one page", np.array([450, 470])), ("whole chunk", np.arange(0, n, 2))):
        upd = pa.table({ROW_POSITION: pa.array(pos), "d": original.column("d").take(pa.array(pos[::-1]))})
        dst = tmp_path / f"dst_{name.replace(' ', '_')}.parquet"
        report = rewrite_file(src, dst, upd, deletes=[7])
        assert report.full_file_rewrite is None, name
        assert _schema(dst) == _schema(src), name
        expected = apply_changes(original, upd, [7], ROW_POSITION)
        assert_same_rows(pq.read_table(dst), expected, f"pyarrow [{name}]")
        if declared <= 38:  # DuckDB reads wider decimals as doubles
            assert_same_rows(read_duckdb(dst), expected, f"duckdb [{name}]")


def test_a_layout_that_cannot_be_kept_fails_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where pyarrow cannot write the source's physical layout the rewrite fails naming the column, instead of
    writing a file with another schema; no dst, no temporary file."""
    import partialcow.parquet._pagecodec as pagecodec

    monkeypatch.setattr(pagecodec, "writable_type", lambda t, leaves: t)  # as before the fix: pyarrow's own width
    src = _duckdb_source(tmp_path / "src.parquet")
    dst = tmp_path / "dst.parquet"
    upd = pa.table({ROW_POSITION: pa.array([5], pa.int64()), "dec20": pa.array([Decimal("1.5")], pa.decimal128(20, 4))})
    with pytest.raises(ParquetRewriteError, match=r"column 'dec20' cannot be re-encoded with the file's physical layout.*FIXED_LEN_BYTE_ARRAY\(16\)"):
        rewrite_file(src, dst, upd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.parquet"]


ENCODED = {"f64": "BYTE_STREAM_SPLIT", "i64": "DELTA_BINARY_PACKED", "s": "DELTA_LENGTH_BYTE_ARRAY",
           "s2": "DELTA_BYTE_ARRAY", "fsb": "DELTA_BYTE_ARRAY", "f32": "BYTE_STREAM_SPLIT"}
_ENCODING_IDS = {"PLAIN": 0, "DELTA_BINARY_PACKED": 5, "DELTA_LENGTH_BYTE_ARRAY": 6, "DELTA_BYTE_ARRAY": 7,
                 "BYTE_STREAM_SPLIT": 9, "RLE": 3}


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("shape", ["one_page", "most_rows"])
def test_value_encodings_are_kept(tmp_path: Path, version: str, shape: str) -> None:
    n = 4000
    rng = np.random.default_rng(8)
    table = pa.table({
        "id": pa.array(np.arange(n)),
        "f64": pa.array(rng.standard_normal(n)), "f32": pa.array(rng.standard_normal(n).astype(np.float32)),
        "i64": pa.array(np.cumsum(rng.integers(0, 50, n))),
        "s": pa.array([f"name-{i % 97}-{i}" for i in range(n)]), "s2": pa.array([f"prefix/{i:06d}" for i in range(n)]),
        "fsb": pa.array([i.to_bytes(4, "big") for i in range(n)], pa.binary(4)),
        "b": pa.array(rng.random(n) < 0.3),
    })
    encodings = dict(ENCODED, b="RLE") if version == "2.0" else ENCODED
    src = tmp_path / "src.parquet"
    pq.write_table(table, src, use_dictionary=False, column_encoding=encodings, data_page_version=version,
                   write_page_index=True, max_rows_per_page=250)
    pos = np.array([260, 300]) if shape == "one_page" else np.arange(0, n, 2)
    cols = [c for c in table.column_names if c != "id"]
    upd = pa.table({ROW_POSITION: pa.array(pos), **{c: table.column(c).take(pa.array(pos[::-1] + 1)) for c in cols}})
    dst = tmp_path / "dst.parquet"
    report = rewrite_file(src, dst, upd)
    assert report.pages_rewritten > 0
    expected = apply_changes(table, upd, None, ROW_POSITION)
    assert_same_rows(pq.read_table(dst), expected, "pyarrow")
    assert_same_rows(read_duckdb(dst), expected, "duckdb")
    for rg in read_file_view(dst).chunks:
        for chunk in rg:
            if chunk.path in encodings:
                got = {p.encoding for p in chunk.data_pages}
                assert got == {_ENCODING_IDS[encodings[chunk.path]]}, f"{chunk.path}: page encodings {got}"


def test_bug_whole_file_mode_reencodes_untouched_columns(tmp_path: Path) -> None:
    """When nearly every page holds a change, the single-threaded cost model rewrites "the whole file": that path
    re-encoded every column through pyarrow. Now it re-encodes the touched chunks and copies the others."""
    import duckdb

    src = tmp_path / "src.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT (i % 100)::TINYINT AS k, repeat('x', 80) || i AS s FROM range({N}) t(i)) "
                f"TO '{src}' (FORMAT parquet, ROW_GROUP_SIZE 2048)")
    con.close()
    original = pq.read_table(src)
    pos = np.arange(0, N, 2)
    upd = pa.table({ROW_POSITION: pa.array(pos), "s": pa.array([f"new-{i}" for i in pos])})
    dst = tmp_path / "dst.parquet"
    report = rewrite_file(src, dst, upd, threads=1)
    assert report.full_file_rewrite is not None, "the cost model did not choose the whole-file mode"
    assert_same_rows(pq.read_table(dst), apply_changes(original, upd, None, ROW_POSITION), "pyarrow")
    before, after = _chunk_bytes(src), _chunk_bytes(dst)
    assert all(before[k] == after[k] for k in before if k[1] == "k"), "untouched column k was re-encoded"
    assert _schema(dst) == _schema(src)
