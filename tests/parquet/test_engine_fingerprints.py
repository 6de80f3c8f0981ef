"""Row fingerprints (``_fingerprints``): a rewrite that screens full row images with the source's sidecar writes the
same file as one that decodes every column, and every sidecar it leaves matches its file exactly.

The property test runs two full-image batches over random flat schemas: the first (with deletes and appended rows)
builds the sidecars, the second uses them; the second rewrite is compared with the same rewrite without
fingerprints (rows, report) and its sidecar with fingerprints recomputed from the file it describes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from corpus import ALL_FLAT, fresh_column, make_table, write_source
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import apply_changes, assert_same_rows, read_duckdb, take
from partialcow.parquet import ROW_POSITION, _screen, rewrite_file
from partialcow.parquet._fingerprints import (
    column_hashes,
    fingerprint,
    load_sidecar,
    sidecar_path,
    signature,
)
from partialcow.parquet._layout import ParquetLayout
from partialcow.parquet._pagecodec import _read_schema
from strategies import source_files


def full_images(table: pa.Table, rng: np.random.Generator, *, share: float, changed_columns: int
                ) -> pa.Table:
    """Full row images (every column but ``id``) of a ``share`` of the rows; ``changed_columns`` columns get new
    values in about half of them, every other value is re-sent as it is."""
    n = table.num_rows
    pos = np.sort(rng.choice(n, size=max(1, int(n * share)), replace=False)).astype(np.int64)
    names = [c for c in table.column_names if c != "id"]
    hit = set(rng.choice(names, size=min(changed_columns, len(names)), replace=False).tolist())
    arrays = [pa.array(pos)]
    for name in names:
        old = take(table.column(name), pos)
        if name in hit:
            fresh = fresh_column(table.column(name), table.schema.field(name), len(pos), rng)
            pick = rng.random(len(pos)) < 0.5
            old = pa.array([f if p else o for o, f, p in zip(old.to_pylist(), fresh.to_pylist(), pick)], old.type)
        arrays.append(old)
    return pa.Table.from_arrays(arrays, names=[ROW_POSITION, *names])


def recomputed(path: Path, columns: tuple[str, ...], seed_of: object) -> tuple[np.ndarray, np.ndarray]:
    """Fingerprints and signatures of ``path``'s rows computed from scratch with the sidecar's seed."""
    table = pq.read_table(path)
    hashes = [column_hashes(table.column(c), seed_of.salt(j)) for j, c in enumerate(columns)]  # type: ignore[attr-defined]
    return fingerprint(hashes), signature(hashes, len(columns))


def assert_sidecar_matches(path: Path) -> None:
    with ParquetLayout(path) as lay:
        sc = load_sidecar(str(path), lay.num_rows, _read_schema(lay))
    assert sc is not None, f"{path} has no valid sidecar"
    fp, sig = recomputed(path, sc.columns, sc)
    assert np.array_equal(sc.fp, fp), "sidecar fingerprints differ from the file's rows"
    assert np.array_equal(sc.sig, sig), "sidecar signatures differ from the file's rows"


PROFILE = settings(max_examples=40, deadline=None, derandomize=True, database=None, print_blob=True,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROFILE
@given(spec=source_files(writers=("pyarrow",), allowed=ALL_FLAT), data=st.data())
def test_second_batch_by_fingerprints_equals_decoding(spec: dict, data: st.DataObject, tmp_path_factory) -> None:
    folder = tmp_path_factory.mktemp("fp")
    n = max(spec["n"], 200)
    table = make_table(n, columns=spec["columns"], seed=spec["seed"], null_density=spec["null_density"],
                       low_cardinality=spec["low_cardinality"])
    src, mid, out, ref = (folder / f"{x}.parquet" for x in ("src", "mid", "out", "ref"))
    write_source("pyarrow", table, src, **spec["opts"])
    rng = np.random.default_rng(spec["seed"])
    original = pq.read_table(src)
    share = data.draw(st.sampled_from([0.3, 0.6, 1.0]), label="share updated")
    first = full_images(original, rng, share=share, changed_columns=2)
    free = np.setdiff1d(np.arange(n), first.column(ROW_POSITION).to_numpy())
    deletes = rng.choice(free, size=min(len(free), n // 20), replace=False) if len(free) else None
    extra = make_table(7, columns=spec["columns"], seed=spec["seed"] + 1, null_density=spec["null_density"])
    extra = extra.set_column(0, "id", pa.array(np.arange(n, n + 7, dtype=np.int64)))
    r1 = rewrite_file(src, mid, updates=first, deletes=deletes, append=extra, fingerprints=True)
    if not r1.fingerprints_written:
        # nothing was screened (the updates touch few pages): no sidecar, and nothing to compare
        assert not os.path.exists(sidecar_path(str(mid)))
        return
    assert_sidecar_matches(mid)
    middle = pq.read_table(mid)
    second = full_images(middle, rng, share=data.draw(st.sampled_from([0.3, 0.6]), label="share 2"),
                         changed_columns=data.draw(st.integers(0, 3), label="changed columns"))
    r2 = rewrite_file(mid, out, updates=second, fingerprints=True)
    r_ref = rewrite_file(mid, ref, updates=second)
    expected = apply_changes(middle, second, None, ROW_POSITION)
    assert_same_rows(pq.read_table(out), expected, "pyarrow")
    assert_same_rows(read_duckdb(out), expected, "duckdb")
    assert (r2.rows_updated, r2.pages_rewritten, r2.pages_copied, r2.columns_rewritten) == (
        r_ref.rows_updated, r_ref.pages_rewritten, r_ref.pages_copied, r_ref.columns_rewritten)
    if r2.screening != "none":
        # (a signature slot of >= 10 bits misses every changed row of a column with odds below 2**-10 per row;
        # the derandomized examples have none)
        assert r2.screening == "fingerprints", r2.screening
        assert r2.fingerprints_written
        assert_sidecar_matches(out)


@pytest.fixture
def batch_file(tmp_path: Path) -> tuple[Path, pa.Table]:
    """A file with a sidecar, made by a first full-image batch, and a second full-image batch for it."""
    columns = ("i32", "f64", "str", "dec15_3", "dec30_5", "bool", "ts_us")
    table = make_table(3000, columns=columns, seed=3, null_density=0.1)
    src, mid = tmp_path / "src.parquet", tmp_path / "mid.parquet"
    pq.write_table(table, src, data_page_size=2000, write_page_index=True)
    rng = np.random.default_rng(5)
    r = rewrite_file(src, mid, updates=full_images(table, rng, share=0.5, changed_columns=2), fingerprints=True)
    assert r.screening == "decode" and r.fingerprints_written
    return mid, full_images(pq.read_table(mid), rng, share=0.5, changed_columns=2)


def test_a_signature_that_misses_a_changed_column_falls_back(batch_file, tmp_path, monkeypatch) -> None:
    """Signatures that name no changed column (as a collision would): the sums catch it and the columns are
    decoded; the file is still right."""
    mid, second = batch_file
    monkeypatch.setattr(_screen, "slot_mask", lambda j, k: 0)
    r = rewrite_file(mid, tmp_path / "out.parquet", updates=second, fingerprints=True)
    assert r.screening == "fingerprints+decode"
    assert_same_rows(pq.read_table(tmp_path / "out.parquet"), apply_changes(pq.read_table(mid), second, None,
                                                                            ROW_POSITION), "pyarrow")
    assert_sidecar_matches(tmp_path / "out.parquet")


def test_identical_rows_change_nothing_by_fingerprints(batch_file, tmp_path) -> None:
    mid, _ = batch_file
    same = full_images(pq.read_table(mid), np.random.default_rng(9), share=0.5, changed_columns=0)
    r = rewrite_file(mid, tmp_path / "out.parquet", updates=same, fingerprints=True)
    assert (r.screening, r.rows_updated, r.pages_rewritten) == ("fingerprints", 0, 0)


@pytest.mark.parametrize("damage", ["other file", "truncated", "garbage", "file changed"])
def test_a_sidecar_that_does_not_match_is_ignored(batch_file, tmp_path, damage) -> None:
    mid, second = batch_file
    side = Path(sidecar_path(str(mid)))
    if damage == "other file":
        other = tmp_path / "other.parquet"
        rewrite_file(mid, other, updates=second, fingerprints=True)
        shutil.copy(sidecar_path(str(other)), side)
    elif damage == "truncated":
        side.write_bytes(side.read_bytes()[:-8])
    elif damage == "garbage":
        side.write_bytes(b"PCFP1\n" + os.urandom(64))
    else:  # the data file rewritten in place by another tool, same rows and size or not
        pq.write_table(pq.read_table(mid), mid, data_page_size=2000)
    r = rewrite_file(mid, tmp_path / "out.parquet", updates=second, fingerprints=True)
    assert r.screening == "decode"  # screened by decoding, as without a sidecar
    assert_same_rows(pq.read_table(tmp_path / "out.parquet"), apply_changes(pq.read_table(mid), second, None,
                                                                            ROW_POSITION), "pyarrow")
    assert_sidecar_matches(tmp_path / "out.parquet")  # and a fresh one built


def test_in_place_rewrite_keeps_a_matching_sidecar(batch_file) -> None:
    mid, second = batch_file
    expected = apply_changes(pq.read_table(mid), second, [0, 1], ROW_POSITION)
    second = second.filter(pa.compute.greater(second.column(ROW_POSITION), 1))
    expected = apply_changes(pq.read_table(mid), second, [0, 1], ROW_POSITION)
    r = rewrite_file(mid, mid, updates=second, deletes=[0, 1], fingerprints=True)
    assert r.screening == "fingerprints" and r.fingerprints_written
    assert_same_rows(pq.read_table(mid), expected, "pyarrow")
    assert_sidecar_matches(mid)


def test_named_columns_keep_the_sidecar_current(batch_file, tmp_path) -> None:
    """Updates naming a few columns carry the full-image sidecar over (their old hashes come with the decode)."""
    mid, second = batch_file
    f64 = pa.array(np.random.default_rng(2).random(second.num_rows))
    named = pa.table({ROW_POSITION: second.column(ROW_POSITION), "f64": f64})
    r = rewrite_file(mid, tmp_path / "out.parquet", updates=named, fingerprints=True)
    assert r.screening == "decode" and r.fingerprints_written
    assert_sidecar_matches(tmp_path / "out.parquet")
    with ParquetLayout(tmp_path / "out.parquet") as lay:
        sc = load_sidecar(str(tmp_path / "out.parquet"), lay.num_rows, _read_schema(lay))
    assert sc is not None and len(sc.columns) == 7


@pytest.mark.parametrize(("a", "b", "equal"), [
    (pa.array(["x", None, "ab"]), pa.array(["x", None, "ab"], pa.large_string()), True),
    (pa.array(["x", "ab"]), pa.array(["x", "ab"], pa.string_view()), True),
    (pa.array([b"a"]), pa.array([b"a\x00"]), False),
    (pa.array([b""]), pa.array([None], pa.binary()), False),
    (pa.array([float("nan"), 1.0]), pa.array([-float("nan"), 1.0]), True),
    (pa.array([0.0]), pa.array([-0.0]), False),
    (pa.array([None, 2], pa.int64()), pa.array([None, 2], pa.int64()), True),
    (pa.array([0], pa.int64()), pa.array([None], pa.int64()), False),
])
def test_column_hashes_follow_value_equality(a: pa.Array, b: pa.Array, equal: bool) -> None:
    assert np.array_equal(column_hashes(a, 11), column_hashes(b, 11)) == equal


def test_decimals_beyond_the_low_word_hash_apart() -> None:
    """A decimal128(18) value whose high word is not its low word's sign (arrow allows it) must not hash like the
    value with that low word."""
    good = pa.array([1, 2], pa.decimal128(18, 0))
    words = np.frombuffer(good.buffers()[1], np.int64).copy()
    words[3] = 5  # second value: same low word, other high word
    odd = pa.Array.from_buffers(good.type, 2, [None, pa.py_buffer(words.tobytes())])
    h_good, h_odd = column_hashes(good, 3), column_hashes(odd, 3)
    assert h_good[0] == h_odd[0] and h_good[1] != h_odd[1]  # per value, not per array


def test_a_small_batch_of_full_images_keeps_the_sidecar(batch_file, tmp_path, monkeypatch) -> None:
    """Updates on few pages are compared page by page, not screened; the new file still gets its fingerprints
    (from the new values: every covered column is given)."""
    mid, second = batch_file
    monkeypatch.setattr(_screen, "_SCREEN_PAGE_SHARE", 2.0)  # no column counts as widely updated
    few = second.slice(0, 3)
    r = rewrite_file(mid, tmp_path / "out.parquet", updates=few, deletes=[second.column(ROW_POSITION)[5].as_py()],
                     fingerprints=True)
    assert r.screening == "none" and r.fingerprints_written
    assert_same_rows(pq.read_table(tmp_path / "out.parquet"), apply_changes(
        pq.read_table(mid), few, [second.column(ROW_POSITION)[5].as_py()], ROW_POSITION), "pyarrow")
    assert_sidecar_matches(tmp_path / "out.parquet")



_GOLD = 0x9E3779B97F4A7C15


def _words(*values: int) -> bytes:
    return b"".join(v.to_bytes(8, "little") for v in values)


@pytest.mark.parametrize("seed", [1, 11, 2**40 + 3])
def test_values_crafted_to_collide_hash_apart_under_the_seed(seed: int) -> None:
    """Regression: a value's words were mixed with their position alone and the seed added after: two words trading
    places, each xored with the other's position constant, gave the same digest under every seed (so a full image
    that set such a value passed for unchanged, and the update was dropped); and a wide decimal could be crafted to
    hash like a narrow one."""
    a, b = 0x1122334455667788, 0x0102030405060708
    first, second = _words(a, b), _words(b ^ _GOLD, a ^ _GOLD)
    hashes = column_hashes(pa.array([first, second], pa.binary()), seed)
    assert hashes[0] != hashes[1]

    # the version-1 digest of a wide decimal (seed-free), and the narrow value equal to it
    wide = 2**64 + 5
    words = np.array([wide % 2**64, wide >> 64], np.uint64)
    h = np.zeros(1, np.uint64)
    for i, word in enumerate(words):
        h ^= word
        h += np.uint64((i + 1) * _GOLD % 2**64)
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    narrow = int(h[0].astype(np.int64))
    values = pa.array([wide, narrow], pa.decimal128(38, 0))
    hashes = column_hashes(values, seed)
    assert hashes[0] != hashes[1]


def test_a_rewrite_without_fingerprints_removes_the_old_sidecar_of_its_path(tmp_path) -> None:
    """Regression: a rewrite of a file onto its own path without fingerprints left the old sidecar, which still
    matched: a value changed within its page's bounds keeps the file's size and footer (uncompressed, plain). The
    next full image that set the earlier value again passed for unchanged, and the update was dropped."""
    src, path = tmp_path / "s0.parquet", tmp_path / "s1.parquet"
    pq.write_table(pa.table({"k": pa.array(range(4), pa.int64()), "v": pa.array([5, 5, 5, 9], pa.int64())}), src,
                   compression="none", use_dictionary=False, write_statistics=True)

    def image(value: int) -> pa.Table:
        return pa.table({ROW_POSITION: pa.array([1], pa.int64()), "k": pa.array([1], pa.int64()),
                         "v": pa.array([value], pa.int64())})

    assert rewrite_file(src, path, updates=image(6), fingerprints=True).fingerprints_written
    assert rewrite_file(path, path, updates=image(7)).rows_updated == 1  # in place, no fingerprints
    report = rewrite_file(path, tmp_path / "s2.parquet", updates=image(6), fingerprints=True)
    assert report.rows_updated == 1
    assert pq.read_table(tmp_path / "s2.parquet").column("v").to_pylist() == [5, 6, 5, 9]
