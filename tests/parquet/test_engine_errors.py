"""Invalid changes and refused files raise typed errors, name the offending object, and never create dst."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from partialcow.exceptions import InvalidChangeError, ParquetRewriteError, UnsupportedFileError
from partialcow.parquet import ROW_POSITION, rewrite_file
from partialcow.parquet._layout import ParquetLayout


@pytest.fixture()
def src(tmp_path: Path) -> Path:
    path = tmp_path / "src.parquet"
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int32()),
                        pa.field("s", pa.string())])
    pq.write_table(pa.table({"k": range(100), "v": range(100), "s": ["a"] * 100}, schema=schema), path)
    return path


def _upd(pos, **cols) -> pa.Table:
    return pa.table({ROW_POSITION: pa.array(pos, pa.int64()), **cols})


@pytest.mark.parametrize("updates,deletes,match", [
    (lambda: _upd([100], v=pa.array([1], pa.int32())), None, "out of range"),
    (lambda: _upd([-1], v=pa.array([1], pa.int32())), None, "out of range"),
    (None, [5, 100], "out of range"),
    (lambda: _upd([1], nope=pa.array([1])), None, "'nope'"),
    (lambda: _upd([1, 1], v=pa.array([1, 2], pa.int32())), None, "repeat row position"),
    (lambda: _upd([3], v=pa.array([1], pa.int32())), [3], "both updated and deleted"),
    (lambda: _upd([3], v=pa.array(["not a number"])), None, "cannot cast"),
    (lambda: _upd([3], v=pa.array([2**40], pa.int64())), None, "cannot cast"),
    (lambda: _upd([3], k=pa.array([None], pa.int64())), None, "required"),
    (lambda: pa.table({"v": pa.array([1], pa.int32())}), None, ROW_POSITION),
    (None, [1.5], "integers"),
])
def test_invalid_changes(src: Path, tmp_path: Path, updates, deletes, match: str) -> None:
    dst = tmp_path / "dst.parquet"
    with pytest.raises(InvalidChangeError, match=match) as info:
        rewrite_file(src, dst, updates() if updates else None, deletes)
    assert str(src) in str(info.value)
    assert isinstance(info.value, ParquetRewriteError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.parquet"]  # no dst, no temporary file


def test_encrypted_footer_refused(tmp_path: Path, src: Path) -> None:
    enc = tmp_path / "enc.parquet"
    data = bytearray(src.read_bytes())
    data[-4:] = b"PARE"  # the encrypted-footer magic
    enc.write_bytes(bytes(data))
    with pytest.raises(UnsupportedFileError, match="encrypt"):
        rewrite_file(enc, tmp_path / "dst.parquet", deletes=[1])
    assert not (tmp_path / "dst.parquet").exists()


def test_plaintext_footer_encryption_refused(tmp_path: Path) -> None:
    """A file written with pyarrow's encryption in plaintext-footer mode carries encryption_algorithm."""
    try:
        import pyarrow.parquet.encryption as pe
    except ImportError:  # pragma: no cover
        pytest.skip("pyarrow built without Parquet encryption")

    class KmsClient(pe.KmsClient):
        def __init__(self, _config):
            pe.KmsClient.__init__(self)

        def wrap_key(self, key_bytes, master_key_identifier):
            return key_bytes[::-1]

        def unwrap_key(self, wrapped_key, master_key_identifier):
            return wrapped_key[::-1]

    factory = pe.CryptoFactory(lambda config: KmsClient(config))
    config = pe.EncryptionConfiguration(footer_key="f", column_keys={"c": ["a"]}, plaintext_footer=True,
                                        double_wrapping=False)
    props = factory.file_encryption_properties(pe.KmsConnectionConfig(), config)
    path = tmp_path / "plain-footer.parquet"
    with pq.ParquetWriter(path, pa.schema([("a", pa.int64())]), encryption_properties=props) as w:
        w.write_table(pa.table({"a": [1, 2, 3]}))
    with pytest.raises(UnsupportedFileError, match="encrypt"):
        rewrite_file(path, tmp_path / "dst.parquet", deletes=[1])
    assert not (tmp_path / "dst.parquet").exists()


def test_not_parquet(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"hello world, not parquet at all")
    with pytest.raises(UnsupportedFileError, match="not a Parquet file"):
        rewrite_file(bad, tmp_path / "dst.parquet", deletes=[0])
    with pytest.raises(UnsupportedFileError):
        ParquetLayout(bad)


def test_failure_mid_write_leaves_no_dst(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import partialcow.parquet._engine as engine

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(engine, "_write_output", boom)
    with pytest.raises(OSError):
        rewrite_file(src, tmp_path / "dst.parquet", _upd([1], v=pa.array([7], pa.int32())))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.parquet"]


def test_numpy_and_arrow_deletes_accepted(src: Path, tmp_path: Path) -> None:
    for i, dels in enumerate([np.array([1, 2], np.int32), pa.array([1, 2]), pa.chunked_array([[1], [2]]), (2, 1, 1)]):
        dst = tmp_path / f"d{i}.parquet"
        report = rewrite_file(src, dst, deletes=dels)
        assert report.rows_deleted == 2
        assert pq.read_table(dst).column("k").to_pylist() == [0] + list(range(3, 100))


@pytest.mark.parametrize("dictionary", [False, True])
@pytest.mark.parametrize("change", ["update", "delete"])
def test_int96_nanoseconds_are_refused_not_truncated(tmp_path: Path, dictionary: bool, change: str) -> None:
    """Regression: pages were decoded at microseconds, so re-encoding an INT96 page written with nanoseconds
    (Impala, Hive) dropped them from every value of the page, changed or not. Now refused; whole microseconds (what
    Spark and Delta write) still rewrite, and keep every value."""
    src = tmp_path / "int96.parquet"
    base = 1_600_000_000_000_000_000
    nanos = pa.array([base + i * 1000 + 7 for i in range(3000)], pa.timestamp("ns"))
    table = pa.table({"k": pa.array(range(3000), pa.int64()), "ts": nanos})
    pq.write_table(table, src, use_deprecated_int96_timestamps=True, use_dictionary=dictionary,
                   data_page_size=4096, write_statistics=True)
    updates = _upd([10], ts=pa.array([base // 1000], pa.timestamp("us"))) if change == "update" else None
    deletes = [1000] if change == "delete" else None
    with pytest.raises(ParquetRewriteError, match="finer than microseconds"):
        rewrite_file(src, tmp_path / "out.parquet", updates, deletes)
    assert not (tmp_path / "out.parquet").exists()

    micros = pa.table({"k": table["k"], "ts": pa.array([base + i * 1000 for i in range(3000)], pa.timestamp("ns"))})
    pq.write_table(micros, src, use_deprecated_int96_timestamps=True, use_dictionary=dictionary,
                   data_page_size=4096)
    rewrite_file(src, tmp_path / "out.parquet", updates, deletes)
    got = pq.read_table(tmp_path / "out.parquet", coerce_int96_timestamp_unit="ns")["ts"].to_pylist()
    expected = micros["ts"].to_pylist()
    if change == "update":
        expected[10] = pa.scalar(base, pa.timestamp("ns")).as_py()
    else:
        del expected[1000]
    assert got == expected
