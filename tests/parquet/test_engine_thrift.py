"""The Thrift compact codec: lossless round trips on real footers and page headers, unknown fields kept."""

from __future__ import annotations

import struct
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from partialcow.parquet import _format as F
from partialcow.parquet._layout import ParquetLayout
from partialcow.parquet._thrift import T_BINARY, T_I32, T_STRUCT, TStruct, ThriftError, decode, decode_struct, encode


def _table() -> pa.Table:
    n = 3000
    return pa.table({
        "k": pa.array(range(n), pa.int64()),
        "s": pa.array([None if i % 5 == 0 else f"v{i % 37}" for i in range(n)]),
        "f": pa.array([i / 7 for i in range(n)], pa.float64()),
        "l": pa.array([[i, i + 1] if i % 3 else None for i in range(n)], pa.list_(pa.int32())),
    })


def _footer(path: Path) -> bytes:
    data = path.read_bytes()
    (length,) = struct.unpack("<I", data[-8:-4])
    return data[-8 - length:-8]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("thrift")
    t = _table()
    out = {"pyarrow": d / "pa.parquet", "pyarrow_v2": d / "pa2.parquet", "duckdb": d / "duck.parquet"}
    pq.write_table(t, out["pyarrow"], write_page_index=True, max_rows_per_page=500, write_page_checksum=True)
    pq.write_table(t, out["pyarrow_v2"], data_page_version="2.0", compression="zstd",
                   bloom_filter_options={"k": {"ndv": 1000}})
    duckdb.sql("select range::bigint k, 'x' || (range % 13) s, range / 7 f from range(3000)").write_parquet(
        str(out["duckdb"]))
    try:
        from deltalake import write_deltalake

        write_deltalake(str(d / "delta"), t.drop_columns(["l"]))
        out["deltalake"] = next((d / "delta").glob("*.parquet"))
    except ImportError:  # pragma: no cover - deltalake is a dev dependency
        pass
    return out


@pytest.mark.parametrize("writer", ["pyarrow", "pyarrow_v2", "duckdb", "deltalake"])
def test_footer_round_trip_is_byte_identical(files: dict[str, Path], writer: str) -> None:
    if writer not in files:
        pytest.skip("deltalake is not installed")
    raw = _footer(files[writer])
    st = decode(raw)
    assert encode(st) == raw
    # sanity against pyarrow's own reading of the footer
    meta = pq.ParquetFile(files[writer]).metadata
    assert st.val(F.FMD_NUM_ROWS) == meta.num_rows
    assert len(st.val(F.FMD_ROW_GROUPS).items) == meta.num_row_groups


@pytest.mark.parametrize("writer", ["pyarrow", "pyarrow_v2", "duckdb", "deltalake"])
def test_page_headers_and_page_indexes_round_trip(files: dict[str, Path], writer: str) -> None:
    if writer not in files:
        pytest.skip("deltalake is not installed")
    data = files[writer].read_bytes()
    with ParquetLayout(files[writer]) as lay:
        for rg in range(len(lay.row_groups)):
            for leaf in lay.leaves:
                ch = lay.chunk(rg, leaf.index)
                pos = ch.start
                while pos < ch.end:  # every header, dictionary page included
                    header, end = decode_struct(data, pos)
                    assert encode(header) == data[pos:end]
                    pos = end + header.val(F.PH_COMPRESSED_SIZE)
                assert pos == ch.end
                for fid_off, fid_len in ((F.CC_OFFSET_INDEX_OFFSET, F.CC_OFFSET_INDEX_LENGTH),
                                         (F.CC_COLUMN_INDEX_OFFSET, F.CC_COLUMN_INDEX_LENGTH)):
                    off = ch.cc.val(fid_off)
                    if off is not None:
                        raw = data[off:off + ch.cc.val(fid_len)]
                        assert encode(decode(raw)) == raw


def test_unknown_fields_survive() -> None:
    st = TStruct()
    st.put(1, T_I32, 7)
    inner = TStruct()
    inner.put(3, T_BINARY, b"abc")
    st.put(40, T_STRUCT, inner)  # long-form field header (delta > 15)
    st.put(2, T_I32, -5)  # put keeps ids ascending
    raw = encode(st)
    back = decode(raw)
    assert list(back) == [1, 2, 40]
    assert back.val(40).val(3) == b"abc" and back.val(2) == -5
    assert encode(back) == raw


def test_truncated_input_is_an_error() -> None:
    raw = encode(decode(_footer_of_small_file()))
    with pytest.raises(ThriftError):
        decode(raw[: len(raw) // 2])


def _footer_of_small_file() -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"a": [1, 2]}), sink)
    data = sink.getvalue().to_pybytes()
    (length,) = struct.unpack("<I", data[-8:-4])
    return data[-8 - length:-8]
