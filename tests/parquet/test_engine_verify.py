"""The post-write check: a fault that makes the writer produce a file readers would get wrong must fail the
rewrite (ParquetRewriteError naming file, row group, column and check), leaving neither ``dst`` nor a temporary
file. Each fault is injected by wrapping one engine function so that it writes a bad offset, size or page."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import partialcow.parquet._rewriter as rewriter
from partialcow.exceptions import ParquetRewriteError
from partialcow.parquet import ROW_POSITION, rewrite_file
from partialcow.parquet import _format as F

N = 3000


def _shift_data_page_offset(real: Callable) -> Callable:
    def fault(cmd, start, dictionary_page, first_data_page):  # noqa: ANN001, ANN202
        rel = real(cmd, start, dictionary_page, first_data_page)
        rel[F.CMD_DATA_PAGE_OFFSET] += 1
        return rel
    return fault


def _drop_dictionary_offset(real: Callable) -> Callable:
    """The issue-22 defect: the footer forgets the chunk's dictionary page."""
    def fault(cmd, start, dictionary_page, first_data_page):  # noqa: ANN001, ANN202
        rel = real(cmd, start, dictionary_page, first_data_page)
        rel.pop(F.CMD_DICTIONARY_PAGE_OFFSET, None)
        cmd.drop(F.CMD_DICTIONARY_PAGE_OFFSET)
        return rel
    return fault


def _map_encoded(change: Callable) -> Callable:
    def wrap(real: Callable) -> Callable:
        def fault(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            encs = real(*args, **kwargs)
            return None if encs is None else [change(e) for e in encs]
        return fault
    return wrap


def _trailing_garbage(enc):  # noqa: ANN001, ANN202 - bytes after the pages that no size accounts for
    return dataclasses.replace(enc, data=enc.data + b"\x00\x07\x19")


def _one_value_too_many(enc):  # noqa: ANN001, ANN202
    return dataclasses.replace(enc, num_values=enc.num_values + 1)


def _wrong_first_row(enc):  # noqa: ANN001, ANN202 - page locations one row late
    pages = [(off, size, first + 1) for off, size, first in enc.pages]
    return dataclasses.replace(enc, pages=pages)


def _flip_last_value_byte(enc):  # noqa: ANN001, ANN202 - uncompressed PLAIN int64: the last byte is a value's
    return dataclasses.replace(enc, data=enc.data[:-1] + bytes([enc.data[-1] ^ 0x40]))


def _reversed_rows(real: Callable) -> Callable:
    """A whole-chunk re-encode that writes the rows in the wrong order."""
    def fault(lay, top, groups, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        return real(lay, top, [g.take(pa.array(np.arange(len(g) - 1, -1, -1))) for g in groups], *args, **kwargs)
    return fault


# (fault id, function of the rewriter module to wrap, wrapper, change shape, words the error must hold)
FAULTS = [
    ("data_page_offset", "_page_offsets", _shift_data_page_offset, "pages", "data_page_offset is"),
    # without its dictionary offset the chunk seems to start at its first data page and overrun its size
    ("dictionary_offset_dropped", "_page_offsets", _drop_dictionary_offset, "pages", "page headers walk to byte"),
    ("trailing_garbage", "_encode_runs", _map_encoded(_trailing_garbage), "pages", "byte"),
    ("num_values", "_encode_runs", _map_encoded(_one_value_too_many), "pages", "num_values is"),
    ("offset_index_first_row", "_encode_runs", _map_encoded(_wrong_first_row), "pages", "OffsetIndex first rows"),
    ("page_value", "_encode_runs", _map_encoded(_flip_last_value_byte), "pages", "decode to other values"),
    ("whole_chunk_rows", "_encode_mini", _reversed_rows, "whole", "decode to other values"),
]


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("verify") / "src.parquet"
    table = pa.table({"k": pa.array(np.arange(N), pa.int64()), "s": pa.array([f"v{i % 23}" for i in range(N)]),
                      "n": pa.array(np.arange(N) * 3, pa.int64())})
    pq.write_table(table, path, write_page_index=True, max_rows_per_page=200, row_group_size=2000,
                   compression="none", use_dictionary=["s"], data_page_version="1.0")
    return path


def _changes(shape: str) -> pa.Table:
    pos = np.array([410, 415, 2300]) if shape == "pages" else np.arange(0, N, 2)
    return pa.table({ROW_POSITION: pa.array(pos), "s": pa.array([f"w{i % 3}" for i in range(len(pos))]),
                     "n": pa.array(-np.arange(len(pos)) - 1, pa.int64())})


@pytest.mark.parametrize(("fault", "target", "wrap", "shape", "words"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_corrupting_writer_fails_the_rewrite(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               fault: str, target: str, wrap: Callable, shape: str,
                                               words: str) -> None:
    monkeypatch.setattr(rewriter, target, wrap(getattr(rewriter, target)))
    dst = tmp_path / "dst.parquet"
    with pytest.raises(ParquetRewriteError) as info:
        rewrite_file(src, dst, _changes(shape), threads=1)
    message = str(info.value)
    assert words in message, message
    assert str(src) in message and str(dst) in message and "row group " in message and "column " in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "dst or a temporary file was left behind"


@pytest.mark.parametrize("shape", ["pages", "whole"])
def test_without_a_fault_the_same_changes_pass(src: Path, tmp_path: Path, shape: str) -> None:
    """The faults above are the only reason those rewrites fail (guards the fixture and change shapes)."""
    dst = tmp_path / "dst.parquet"
    upd = _changes(shape)
    report = rewrite_file(src, dst, upd, threads=1)
    assert report.pages_rewritten > 0
    got = pq.read_table(dst)
    pos = upd.column(ROW_POSITION).to_numpy()
    for name in ("n", "s"):
        assert got.column(name).take(pa.array(pos)).to_pylist() == upd.column(name).to_pylist()
