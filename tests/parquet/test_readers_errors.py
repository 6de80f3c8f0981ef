"""Bad input: each invalid change raises the documented error class, names the culprit, and leaves no ``dst``."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus import make_table
from partialcow.exceptions import InvalidChangeError, ParquetRewriteError, UnsupportedFileError
from partialcow.parquet import ROW_POSITION, rewrite_file

N = 500


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("errors") / "src.parquet"
    pq.write_table(make_table(N, columns=("i32", "str", "f64"), seed=7), path, write_page_index=True, max_rows_per_page=50)
    return path


def _updates(positions: list[int], **columns: pa.Array) -> pa.Table:
    return pa.table({ROW_POSITION: pa.array(positions, pa.int64()), **columns})


def _assert_refused(exc_type: type[Exception], src: Path, dst: Path, needle: str, **kwargs: object) -> None:
    with pytest.raises(exc_type) as info:
        rewrite_file(src, dst, **kwargs)
    assert needle in str(info.value), f"message {str(info.value)!r} does not name {needle!r}"
    assert not dst.exists(), "dst was created although the rewrite failed"
    leftovers = [p.name for p in dst.parent.iterdir() if p.name.startswith(dst.name)]
    assert not leftovers, f"temporary files left behind: {leftovers}"


@pytest.mark.parametrize("position", [N, N + 1000, -1])
def test_update_position_out_of_range(src: Path, tmp_path: Path, position: int) -> None:
    upd = _updates([3, position], i32=pa.array([1, 2], pa.int32()))
    _assert_refused(InvalidChangeError, src, tmp_path / "out.parquet", str(position), updates=upd)


@pytest.mark.parametrize("position", [N, -1])
def test_delete_position_out_of_range(src: Path, tmp_path: Path, position: int) -> None:
    _assert_refused(InvalidChangeError, src, tmp_path / "out.parquet", str(position), deletes=[0, position])


def test_unknown_column(src: Path, tmp_path: Path) -> None:
    upd = _updates([1], no_such_column=pa.array([1]))
    _assert_refused(InvalidChangeError, src, tmp_path / "out.parquet", "no_such_column", updates=upd)


def test_missing_row_position_column(src: Path, tmp_path: Path) -> None:
    upd = pa.table({"i32": pa.array([1], pa.int32())})
    _assert_refused(InvalidChangeError, src, tmp_path / "out.parquet", ROW_POSITION, updates=upd)


def test_uncastable_string_into_int(src: Path, tmp_path: Path) -> None:
    upd = _updates([1, 2], i32=pa.array(["12", "not a number"]))
    _assert_refused(InvalidChangeError, src, tmp_path / "out.parquet", "i32", updates=upd)


def test_overflowing_int_into_int32(src: Path, tmp_path: Path) -> None:
    upd = _updates([1], i32=pa.array([2**40], pa.int64()))
    _assert_refused(InvalidChangeError, src, tmp_path / "out.parquet", "i32", updates=upd)


def test_null_into_required_column(src: Path, tmp_path: Path) -> None:
    # ``id`` is REQUIRED in the file: a null cannot be stored there.
    upd = _updates([1], id=pa.array([None], pa.int64()))
    _assert_refused(InvalidChangeError, src, tmp_path / "out.parquet", "id", updates=upd)


def test_duplicate_update_positions(src: Path, tmp_path: Path) -> None:
    upd = _updates([5, 17, 5], i32=pa.array([1, 2, 3], pa.int32()))
    _assert_refused(InvalidChangeError, src, tmp_path / "out.parquet", "5", updates=upd)


def test_position_both_updated_and_deleted(src: Path, tmp_path: Path) -> None:
    upd = _updates([8, 42], i32=pa.array([1, 2], pa.int32()))
    _assert_refused(InvalidChangeError, src, tmp_path / "out.parquet", "42", updates=upd, deletes=[3, 42])


def test_compatible_types_are_cast(src: Path, tmp_path: Path) -> None:
    """int64 values that fit, and large_string, are accepted for int32 / string columns (cast, not refused)."""
    dst = tmp_path / "out.parquet"
    upd = _updates([0, 499], i32=pa.array([7, -7], pa.int64()), str=pa.array(["x", None], pa.large_string()))
    rewrite_file(src, dst, updates=upd)
    out = pq.read_table(dst)
    assert out.column("i32").to_pylist()[0] == 7 and out.column("i32").to_pylist()[499] == -7
    assert out.column("str").to_pylist()[0] == "x" and out.column("str").to_pylist()[499] is None
    assert out.schema.field("i32").type == pa.int32()


def test_errors_share_the_base_class() -> None:
    assert issubclass(InvalidChangeError, ParquetRewriteError) and issubclass(UnsupportedFileError, ParquetRewriteError)


# ---------------------------------------------------------------------------------------------------------------
# Encrypted files (Parquet modular encryption): refused, since copied pages would carry the wrong AAD.


def _write_encrypted(path: Path, *, plaintext_footer: bool) -> None:
    import pyarrow.parquet.encryption as pe

    class ToyKms(pe.KmsClient):
        """Wraps keys with a fixed XOR: enough for a test, never for real data."""

        def wrap_key(self, key_bytes: bytes, master_key_identifier: str) -> bytes:
            return base64.b64encode(bytes(b ^ 0x5A for b in key_bytes))

        def unwrap_key(self, wrapped_key: bytes, master_key_identifier: str) -> bytes:
            return bytes(b ^ 0x5A for b in base64.b64decode(wrapped_key))

    factory = pe.CryptoFactory(lambda _config: ToyKms())
    kms_config = pe.KmsConnectionConfig()
    enc_config = pe.EncryptionConfiguration(
        footer_key="footer", column_keys={"col": ["i32"]}, plaintext_footer=plaintext_footer, double_wrapping=False
    )
    props = factory.file_encryption_properties(kms_config, enc_config)
    table = make_table(200, columns=("i32", "str"), seed=1)
    with pq.ParquetWriter(path, table.schema, encryption_properties=props) as writer:
        writer.write_table(table)


@pytest.mark.parametrize("plaintext_footer", [False, True], ids=["encrypted-footer", "plaintext-footer"])
def test_encrypted_file_is_refused(tmp_path: Path, plaintext_footer: bool) -> None:
    src = tmp_path / "enc.parquet"
    _write_encrypted(src, plaintext_footer=plaintext_footer)
    magic = b"PAR1" if plaintext_footer else b"PARE"
    assert src.read_bytes()[:4] == magic and src.read_bytes()[-4:] == magic
    upd = _updates([1], i32=pa.array([1], pa.int32()))
    _assert_refused(UnsupportedFileError, src, tmp_path / "out.parquet", "enc.parquet", updates=upd)


def test_unsorted_and_numpy_deletes_are_accepted(src: Path, tmp_path: Path) -> None:
    """Delete positions may come unsorted, as numpy or pyarrow arrays."""
    original = pq.read_table(src)
    for i, deletes in enumerate((np.array([9, 2, 400]), pa.array([400, 9, 2]), [400, 2, 9])):
        dst = tmp_path / f"out{i}.parquet"
        report = rewrite_file(src, dst, deletes=deletes)
        keep = [r for r in range(N) if r not in (2, 9, 400)]
        assert pq.read_table(dst).column("id").to_pylist() == original.column("id").take(pa.array(keep)).to_pylist()
        assert report.rows_after == N - 3


@pytest.mark.parametrize(("footer_rows", "row_groups"), [(0, (6,)), (10, (6,)), (6, (3, 3)), (0, (3, 3))])
def test_bug_footer_row_count_disagrees_with_row_groups(tmp_path: Path, footer_rows: int, row_groups: tuple) -> None:
    """A footer saying 0 rows while its row group holds 6 was refused as "update positions ... out of range: 1
    position(s) outside [0, 0)": safe, but blaming the change. The message names the inconsistent footer."""
    from partialcow.parquet import _format as F
    from partialcow.parquet._thrift import T_I64, decode_struct, encode

    path = tmp_path / "src.parquet"
    pq.write_table(pa.table({"v": pa.array(range(sum(row_groups)), pa.int32())}), path, row_group_size=row_groups[0])
    raw = path.read_bytes()
    flen = int.from_bytes(raw[-8:-4], "little")
    fmd, _ = decode_struct(raw[-8 - flen:-8])
    assert [rg.val(F.RG_NUM_ROWS) for rg in fmd.val(F.FMD_ROW_GROUPS).items] == list(row_groups)
    fmd.put(F.FMD_NUM_ROWS, T_I64, footer_rows)
    footer = encode(fmd)
    path.write_bytes(raw[:-8 - flen] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    if footer_rows == sum(row_groups):  # consistent: the rewrite goes through
        rewrite_file(path, tmp_path / "out.parquet", updates=_updates([1], v=pa.array([9], pa.int32())))
        assert pq.read_table(tmp_path / "out.parquet").column("v").to_pylist()[:3] == [0, 9, 2]
        return
    _assert_refused(ParquetRewriteError, path, tmp_path / "out.parquet", f"FileMetaData.num_rows is {footer_rows}",
                    updates=_updates([1], v=pa.array([9], pa.int32())))
    with pytest.raises(ParquetRewriteError, match=f"hold {sum(row_groups)} rows"):
        rewrite_file(path, tmp_path / "out2.parquet", deletes=[0])
