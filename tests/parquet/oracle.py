"""The test oracle: expected tables computed with plain pyarrow, reader-independent comparison, and checks of
pages, statistics and page indexes read with ``pagewalk`` (never with the engine).
"""

from __future__ import annotations

import base64
import decimal
import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pagewalk import DICTIONARY_PAGE, FileView, read_file_view

__all__ = [
    "PageCheck",
    "apply_changes",
    "assert_same_rows",
    "canon_arrow",
    "canon_value",
    "changed_rows",
    "check_metadata",
    "check_pages",
    "check_report",
    "read_duckdb",
    "take",
]

_CTX = decimal.Context(prec=80)


# ---------------------------------------------------------------------------------------------------------------
# Expected result


def take(arr: pa.Array | pa.ChunkedArray, indices: Any) -> pa.Array:
    """``arr.take(indices)``, also for view types (pyarrow 26 has no take kernel for string_view/binary_view)."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    idx = indices if isinstance(indices, pa.Array) else pa.array(np.asarray(indices, dtype=np.int64))
    if pa.types.is_string_view(arr.type) or pa.types.is_binary_view(arr.type):
        plain = pa.large_string() if pa.types.is_string_view(arr.type) else pa.large_binary()
        return arr.cast(plain).take(idx).cast(arr.type)
    return arr.take(idx)


def apply_changes(original: pa.Table, updates: pa.Table | None, deletes: Iterable[int] | None, row_position: str) -> pa.Table:
    """``original`` with ``updates`` applied by position and ``deletes`` removed (take/filter; no engine code)."""
    n = original.num_rows
    table = original
    if updates is not None and updates.num_rows:
        pos = updates.column(row_position).to_numpy()
        for name in updates.column_names:
            if name == row_position:
                continue
            old = original.column(name).combine_chunks()
            new = updates.column(name).combine_chunks().cast(old.type)
            idx = np.arange(n, dtype=np.int64)
            idx[pos] = n + np.arange(len(pos))
            merged = take(pa.concat_arrays([old, new]), idx)
            table = table.set_column(table.schema.get_field_index(name), table.schema.field(name), merged)
    if deletes is not None:
        keep = np.ones(n, dtype=bool)
        keep[np.asarray(list(deletes) if not isinstance(deletes, np.ndarray) else deletes, dtype=np.int64)] = False
        rows = np.flatnonzero(keep)
        table = pa.Table.from_arrays([take(c, rows) for c in table.columns], schema=table.schema)
    return table


# ---------------------------------------------------------------------------------------------------------------
# Canonical values: NaN == NaN, -0.0 != 0.0, timestamps as integers in the expected unit, bytes for binary.


def canon_value(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, float):
        return ("nan",) if math.isnan(v) else (v, math.copysign(1.0, v) < 0)
    if isinstance(v, decimal.Decimal):
        return v.normalize(_CTX) if v.is_finite() else v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, dict):
        return {k: canon_value(x) for k, x in v.items()}
    if hasattr(v, "asDict"):  # a Spark Row (struct); Row is a tuple, so test it first
        return {k: canon_value(x) for k, x in v.asDict().items()}
    if isinstance(v, (list, tuple)):
        return tuple(canon_value(x) for x in v) if isinstance(v, tuple) else [canon_value(x) for x in v]
    return v


def canon_arrow(arr: pa.Array | pa.ChunkedArray, like: pa.DataType | None = None) -> list[Any]:
    """Canonical python values of an Arrow column; ``like`` (the expected type) fixes the timestamp unit."""
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.cast(t.value_type)
        t = arr.type
    if pa.types.is_timestamp(t):
        unit = like.unit if like is not None and pa.types.is_timestamp(like) else t.unit
        return arr.cast(pa.timestamp(unit, tz=t.tz)).cast(pa.int64()).to_pylist()
    return [canon_value(v) for v in arr.to_pylist()]


def _first_difference(a: list[Any], b: list[Any]) -> str:
    if len(a) != len(b):
        return f"{len(a)} rows vs {len(b)} expected"
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"row {i}: got {x!r}, expected {y!r}"
    return "equal"


def assert_same_rows(actual: pa.Table, expected: pa.Table, reader: str) -> None:
    """Every expected column is present in ``actual`` with the same canonical values, row for row."""
    assert actual.num_rows == expected.num_rows, f"{reader}: {actual.num_rows} rows, expected {expected.num_rows}"
    for name in expected.column_names:
        assert name in actual.column_names, f"{reader}: column {name} missing"
        exp = canon_arrow(expected.column(name), expected.schema.field(name).type)
        got = canon_arrow(actual.column(name), expected.schema.field(name).type)
        assert got == exp, f"{reader}: column {name} differs: {_first_difference(got, exp)}"


def read_duckdb(path: str | Path) -> pa.Table:
    import duckdb

    con = duckdb.connect(config={"threads": 1})  # one thread: rows come back in file order
    try:
        return con.sql(f"SELECT * FROM read_parquet('{path}')").to_arrow_table()
    finally:
        con.close()


def changed_rows(original: pa.Table, updates: pa.Table | None, row_position: str) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """Per updated column: positions whose value really changes, and positions set from NaN to NaN (ambiguous)."""
    changed: dict[str, set[int]] = {}
    maybe: dict[str, set[int]] = {}
    if updates is None:
        return changed, maybe
    pos = updates.column(row_position).to_pylist()
    for name in updates.column_names:
        if name == row_position:
            continue
        old_t = original.schema.field(name).type
        old = canon_arrow(take(original.column(name), pos), old_t)
        new = canon_arrow(updates.column(name).cast(old_t), old_t)
        changed[name] = {p for p, a, b in zip(pos, old, new) if a != b}
        maybe[name] = {p for p, a, b in zip(pos, old, new) if a == b and _has_nan(a)}
    return changed, maybe


def _has_nan(v: Any) -> bool:
    if v == ("nan",):
        return True
    if isinstance(v, dict):
        return any(_has_nan(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return any(_has_nan(x) for x in v)
    return False


# ---------------------------------------------------------------------------------------------------------------
# Pages


@dataclass(frozen=True)
class PageCheck:
    source_data_pages: int
    must_copy: int  # source data pages holding no changed or deleted row (outside chunks rewritten whole)
    must_copy_bytes: int
    identical_pages: int  # source data pages found byte-identical in the matching output chunk
    touched_byte_fraction: float  # share of source data-page bytes whose page holds a change or delete
    unjustified_full_chunks: tuple[tuple[int, str], ...]  # flat PLAIN chunks rewritten whole with < half their pages touched
    full_file_rewrite: bool


def _row_group_starts(view: FileView) -> list[int]:
    starts, acc = [], 0
    for rg in view.footer.get(4, []):
        starts.append(acc)
        acc += rg[3]
    return starts


def _as_positions(values: Any) -> np.ndarray:
    if values is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = values.to_numpy(zero_copy_only=False)
    return np.unique(np.asarray(values, dtype=np.int64))


def check_pages(
    src: Path,
    dst: Path,
    original: pa.Table,
    updates: pa.Table | None,
    deletes: Any,
    row_position: str,
    *,
    exempt: Iterable[tuple[int, str]] = (),
    full_file_rewrite: bool = False,
    appended: bool = False,
    merged_tail: bool = False,
) -> PageCheck:
    """Assert that every source data page with no changed or deleted row appears byte for byte in the output.

    ``exempt``: (row group, column) pairs the engine rewrote whole (cost model, nested without page bounds); they
    are not checked page by page, but a flat one with fewer than half of its pages touched is reported back as
    unjustified. With ``full_file_rewrite`` nothing is checked byte-wise (the counts are still computed).
    ``appended``: the output ends with one more row group, of appended rows; ``merged_tail``: that row group also
    holds the rows left of the source's last one (its chunks must then be in ``exempt``).
    """
    sv = read_file_view(src)
    dv = None if full_file_rewrite else read_file_view(dst)
    changed, maybe = changed_rows(original, updates, row_position)
    touched_by_col = {c: np.array(sorted(changed[c] | maybe[c]), dtype=np.int64) for c in changed}
    dels = _as_positions(deletes)
    starts = _row_group_starts(sv)
    survivors = []
    for i, rg in enumerate(sv.footer.get(4, [])):
        n_del = int(np.count_nonzero((dels >= starts[i]) & (dels < starts[i] + rg[3])))
        if n_del < rg[3]:
            survivors.append(i)
    if dv is not None:
        want = len(survivors) + int(appended) - int(merged_tail and len(sv.chunks) - 1 in survivors)
        assert len(dv.chunks) == want, f"{dst}: {len(dv.chunks)} row groups, expected {want} (one per source row group with rows left, and one of appended rows)"
    out_index = {src_i: out_i for out_i, src_i in enumerate(survivors)}
    exempt_set = set(exempt)
    src_pages = must = must_bytes = identical = 0
    all_bytes = touched_bytes = 0
    unjustified = []
    for src_i, src_chunks in enumerate(sv.chunks):
        base = starts[src_i]
        for sc in src_chunks:
            top = sc.path.split(".")[0]
            src_pages += len(sc.data_pages)
            local = set()
            for rows in (touched_by_col.get(top, np.zeros(0, np.int64)), dels):
                sel = rows[(rows >= base) & (rows < base + sc.num_rows)]
                local.update((sel - base).tolist())
            ranges = sc.page_row_ranges()
            page_touched = (
                [any(lo <= r < hi for r in local) for lo, hi in ranges] if ranges is not None else [bool(local)] * len(sc.data_pages)
            )
            for page, t in zip(sc.data_pages, page_touched):
                all_bytes += len(page.raw)
                touched_bytes += len(page.raw) if t else 0
            if src_i not in out_index:
                continue  # whole row group deleted
            if (src_i, sc.path) in exempt_set or (src_i, top) in exempt_set:
                # Only top-level flat PLAIN chunks: the engine may treat struct leaves like other nested columns, and
                # patching a dictionary-encoded chunk costs a re-encode of its dictionary, so the cost model may
                # rightly prefer the whole chunk there. A PLAIN chunk has no such cost.
                plain = not any(p.page_type == DICTIONARY_PAGE for p in sc.pages)
                if ranges is not None and plain and "." not in sc.path and 2 * sum(page_touched) < len(page_touched):
                    unjustified.append((src_i, sc.path))
                continue
            if dv is None:
                continue
            dc = dv.chunks[out_index[src_i]][sc.column]
            assert sc.path == dc.path
            out_raw = [p.raw for p in dc.data_pages]
            identical += sum(1 for p in sc.data_pages if p.raw in out_raw)
            for page, t in zip(sc.data_pages, page_touched):
                if t:
                    continue
                must += 1
                must_bytes += len(page.raw)
                assert page.raw in out_raw, (
                    f"{dst}: row group {src_i} column {sc.path}: untouched page at source offset {page.offset} "
                    f"was not copied byte for byte"
                )
    return PageCheck(
        source_data_pages=src_pages,
        must_copy=must,
        must_copy_bytes=must_bytes,
        identical_pages=identical,
        touched_byte_fraction=touched_bytes / all_bytes if all_bytes else 0.0,
        unjustified_full_chunks=tuple(unjustified),
        full_file_rewrite=full_file_rewrite,
    )


def check_report(report: Any, original: pa.Table, expected: pa.Table, updates: pa.Table | None, deletes: Any, row_position: str, pages: PageCheck, *, merged_tail: bool = False) -> None:
    """The engine's report agrees with what the oracle observes (``merged_tail``: the source's last row group was
    re-encoded with appended rows, so its pages count as rewritten whatever changed)."""
    assert report.rows_before == original.num_rows
    assert report.rows_after == expected.num_rows
    n_del = len(_as_positions(deletes))
    assert report.rows_deleted == n_del
    changed, maybe = changed_rows(original, updates, row_position)
    strict = set().union(*changed.values()) if changed else set()
    loose = strict.union(*maybe.values()) if maybe else strict
    assert len(strict) <= report.rows_updated <= len(loose), f"rows_updated={report.rows_updated}, oracle {len(strict)}..{len(loose)}"
    assert report.pages_copied + report.pages_rewritten == report.pages_total
    metrics = report.to_metrics()
    assert (metrics.rows_updated, metrics.rows_deleted, metrics.pages_rewritten, metrics.pages_copied) == (
        report.rows_updated, report.rows_deleted, report.pages_rewritten, report.pages_copied
    )
    assert (metrics.bytes_copied, metrics.bytes_reencoded) == (report.bytes_copied, report.bytes_reencoded)
    if not pages.full_file_rewrite:
        assert report.pages_copied >= pages.must_copy, f"report says {report.pages_copied} pages copied, oracle requires {pages.must_copy}"
        assert report.pages_copied <= pages.identical_pages, f"report says {report.pages_copied} pages copied, only {pages.identical_pages} are byte-identical"
        assert report.bytes_copied >= pages.must_copy_bytes
    if not strict and n_del == 0 and not merged_tail:
        assert report.pages_rewritten == 0 and not report.columns_rewritten, "a no-op change rewrote pages"


# ---------------------------------------------------------------------------------------------------------------
# Statistics and page indexes


@dataclass(frozen=True)
class _Leaf:
    phys: str
    unsigned: bool
    scale: int | None
    ts_unit: str | None


def _leaf_info(pf: pq.ParquetFile, j: int, arrow_type: pa.DataType) -> _Leaf:
    col = pf.schema.column(j)
    lt = col.logical_type.to_json() if col.logical_type is not None else "{}"
    unit = None
    for key, u in (("milli", "ms"), ("micro", "us"), ("nano", "ns")):
        if f'"timeUnit":"{key}' in lt:
            unit = u
    if unit is None and col.converted_type in ("TIMESTAMP_MILLIS", "TIMESTAMP_MICROS"):
        unit = "ms" if col.converted_type == "TIMESTAMP_MILLIS" else "us"
    return _Leaf(
        phys=col.physical_type,
        unsigned=pa.types.is_unsigned_integer(arrow_type),
        scale=arrow_type.scale if pa.types.is_decimal(arrow_type) else None,
        ts_unit=unit,
    )


def _arrow_keys(arr: pa.Array, leaf: _Leaf) -> list[Any]:
    """Values in the physical sort order of the leaf (None for null and NaN)."""
    t = arr.type
    if pa.types.is_timestamp(t):
        return arr.cast(pa.timestamp(leaf.ts_unit or t.unit, tz=t.tz)).cast(pa.int64()).to_pylist()
    if pa.types.is_date32(t):
        return arr.cast(pa.int32()).to_pylist()
    if pa.types.is_decimal(t):
        return [None if d is None else int(d.scaleb(t.scale, _CTX)) for d in arr.to_pylist()]
    if pa.types.is_boolean(t):
        return [None if b is None else int(b) for b in arr.to_pylist()]
    vals = arr.to_pylist()
    if pa.types.is_floating(t):
        return [None if v is None or math.isnan(v) else v for v in vals]
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return [None if v is None else v.encode() for v in vals]
    return vals


def _raw_key(v: Any, leaf: _Leaf) -> Any:
    """A statistics value as pyarrow's ``min_raw`` gives it, in the same order as ``_arrow_keys``."""
    if leaf.scale is not None and isinstance(v, (bytes, bytearray)):
        return int.from_bytes(v, "big", signed=True)
    if leaf.unsigned and isinstance(v, int):
        return v & (0xFFFFFFFF if leaf.phys == "INT32" else 0xFFFFFFFFFFFFFFFF)
    if isinstance(v, bool):
        return int(v)
    return v


def _decode_plain(b: bytes, leaf: _Leaf) -> Any:
    """A ColumnIndex bound (PLAIN encoding of one value) in ``_arrow_keys`` order."""
    if leaf.phys == "INT32":
        return struct.unpack("<I" if leaf.unsigned else "<i", b)[0]
    if leaf.phys == "INT64":
        return struct.unpack("<Q" if leaf.unsigned else "<q", b)[0]
    if leaf.phys == "FLOAT":
        return struct.unpack("<f", b)[0]
    if leaf.phys == "DOUBLE":
        return struct.unpack("<d", b)[0]
    if leaf.phys == "BOOLEAN":
        return b[0]
    if leaf.scale is not None:
        return int.from_bytes(b, "big", signed=True)
    return bytes(b)


def _bounds_ok(lo: Any, hi: Any, keys: Sequence[Any], leaf: _Leaf, *, exact: bool = False) -> bool:
    """Whether [lo, hi] bounds the values; ``exact``: is their min and max."""
    vals = [k for k in keys if k is not None]
    if not vals:
        return True
    if leaf.phys == "FLOAT":  # bounds were rounded to float32; compare in float32
        f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]  # noqa: E731
        vals = [f32(v) for v in vals]
    if exact:
        return lo == min(vals) and hi == max(vals)
    return lo <= min(vals) and hi >= max(vals)


# Chunk statistics of these physical types are exact in every writer we read (byte arrays may be truncated, INT96
# has no defined order). Table formats publish them as exact: Delta's and Iceberg's MIN/MAX answered from metadata.
_EXACT_STATISTICS = ("BOOLEAN", "INT32", "INT64", "FLOAT", "DOUBLE", "FIXED_LEN_BYTE_ARRAY")


def check_metadata(src: Path, dst: Path, expected: pa.Table, *, same_writer: bool = True) -> None:
    """Footer and page index of ``dst`` are sound: row counts, key-value metadata, statistics, page indexes.

    ``same_writer``: the file was patched rather than rewritten whole, so it must keep the source's ``created_by``
    (readers key writer-specific workarounds on it) and its ARROW:schema byte for byte.
    """
    spf, dpf = pq.ParquetFile(src), pq.ParquetFile(dst)
    md = dpf.metadata
    assert md.num_rows == expected.num_rows
    assert sum(md.row_group(i).num_rows for i in range(md.num_row_groups)) == expected.num_rows
    sv, dv = read_file_view(src), read_file_view(dst)
    skv, dkv = dict(sv.key_value_metadata), dict(dv.key_value_metadata)
    if not same_writer and b"ARROW:schema" in skv:
        assert b"ARROW:schema" in dkv, "ARROW:schema dropped"
        decoded = [pa.ipc.read_schema(pa.py_buffer(base64.b64decode(kv.pop(b"ARROW:schema")))) for kv in (skv, dkv)]
        assert decoded[1].equals(decoded[0], check_metadata=True), f"ARROW:schema changed:\n{decoded[1]}\nvs source\n{decoded[0]}"
    assert dkv == skv, f"key-value metadata not preserved: {sorted(dkv)} vs source {sorted(skv)}"
    if same_writer:
        assert dv.created_by == sv.created_by, "created_by changed (readers key writer-specific workarounds on it)"
    assert dpf.schema_arrow.equals(spf.schema_arrow, check_metadata=True), f"Arrow schema changed:\n{dpf.schema_arrow}\nvs source\n{spf.schema_arrow}"
    if same_writer:
        assert dv.footer[2] == sv.footer[2], "Parquet schema elements changed"
    else:  # a whole-file rewrite may restate types, but Iceberg/Delta field ids must survive
        # (names of the root and of list/map groups may legitimately be restated by the writer)
        ids = [[e.get(9) for e in view.footer[2][1:]] for view in (dv, sv)]
        assert ids[0] == ids[1], f"field ids changed: {ids[0]} vs source {ids[1]}"
    _check_sorting_columns(dst, dpf, dv)
    if all(p.has_crc for rg in sv.chunks for c in rg for p in c.pages) and sv.chunks:
        no_crc = [(i, c.path) for i, rg in enumerate(dv.chunks) for c in rg if not all(p.has_crc for p in c.pages)]
        assert not no_crc, f"{dst}: the source had page CRCs everywhere, these chunks have pages without: {no_crc[:5]}"
    src_mixed = {c.path for rg in sv.chunks for c in rg if _dictionary_after_plain(c)}
    for i, rg in enumerate(dv.chunks):
        for chunk in rg:
            # parquet-mr and Spark's vectorized reader assume dictionary fallback is one-way: once a chunk has a
            # non-dictionary page, no dictionary page follows (Spark returns wrong values otherwise).
            assert chunk.path in src_mixed or not _dictionary_after_plain(chunk), (
                f"{dst}: row group {i} column {chunk.path}: dictionary-encoded data page after a non-dictionary page "
                f"(encodings {[p.encoding for p in chunk.data_pages]})"
            )
    src_has_oi = {c.path for rg in sv.chunks for c in rg if c.offset_index is not None}
    src_has_ci = {c.path for rg in sv.chunks for c in rg if c.column_index is not None}
    for i, rg in enumerate(dv.chunks):
        assert md.row_group(i).num_rows > 0, f"{dst}: row group {i} has no rows (an all-deleted row group is dropped)"
        for chunk in rg:
            name = chunk.path
            if name in src_has_oi:
                assert chunk.offset_index is not None, f"{dst}: row group {i} column {name} lost its OffsetIndex"
            _check_offset_index(dst, i, chunk)
            if "." in name:
                assert name not in src_has_ci or chunk.column_index is not None, (
                    f"{dst}: row group {i} column {name} lost its ColumnIndex")
                continue  # nested leaf: levels make per-leaf value checks writer-specific; rows are checked elsewhere
            arr = dpf.read_row_group(i, columns=[name]).column(0).combine_chunks()
            # pyarrow, which encodes new pages, writes no ColumnIndex for a chunk it cannot bound: only NaN and null
            unbounded = pa.types.is_floating(arr.type) and arr.null_count < len(arr) and bool(
                pc.all(pc.or_kleene(pc.is_nan(arr.drop_null()), pa.scalar(False))).as_py())
            if name in src_has_ci and not unbounded:
                assert chunk.column_index is not None, f"{dst}: row group {i} column {name} lost its ColumnIndex"
            leaf = _leaf_info(dpf, chunk.column, arr.type)
            stats = md.row_group(i).column(chunk.column).statistics
            if stats is not None:
                if stats.has_null_count:
                    assert stats.null_count == arr.null_count, f"{dst}: row group {i} column {name}: null_count {stats.null_count}, actual {arr.null_count}"
                if stats.has_min_max and leaf.phys != "INT96":
                    lo, hi = _raw_key(stats.min_raw, leaf), _raw_key(stats.max_raw, leaf)
                    assert _bounds_ok(lo, hi, _arrow_keys(arr, leaf), leaf), f"{dst}: row group {i} column {name}: statistics [{lo!r}, {hi!r}] do not bound the data"
                    exact = leaf.phys in _EXACT_STATISTICS
                    assert not exact or _bounds_ok(lo, hi, _arrow_keys(arr, leaf), leaf, exact=True), (
                        f"{dst}: row group {i} column {name}: statistics [{lo!r}, {hi!r}] are not the data's min and max")
            if chunk.column_index is not None and leaf.phys != "INT96":
                _check_column_index(dst, i, chunk, arr, leaf)


def _check_sorting_columns(dst: Path, pf: pq.ParquetFile, view: FileView) -> None:
    """Row groups that declare ``sorting_columns`` really are sorted that way (readers may rely on it)."""
    for i, rg in enumerate(view.footer.get(4, [])):
        sorting = rg.get(4)
        if not sorting:
            continue
        leaves = [view.chunks[i][sc[1]].path for sc in sorting]
        table = pf.read_row_group(i, columns=sorted({leaf.split(".")[0] for leaf in leaves}))
        keys = []
        for sc, leaf in zip(sorting, leaves):
            vals = canon_arrow(table.column(leaf.split(".")[0]))
            keys.append((vals, bool(sc.get(2)), bool(sc.get(3))))
        rows = list(zip(*[k[0] for k in keys]))
        for r in range(1, len(rows)):
            for (vals, descending, nulls_first), a, b in zip(keys, rows[r - 1], rows[r]):
                if a == b:
                    continue
                if a is None or b is None:
                    ok = (a is None) == nulls_first
                else:
                    ok = (a > b) if descending else (a < b)
                assert ok, f"{dst}: row group {i} declares sorting_columns {leaves} but rows {r - 1}, {r} are out of order"
                break


_DICTIONARY_ENCODINGS = (2, 8)  # PLAIN_DICTIONARY, RLE_DICTIONARY


def _dictionary_after_plain(chunk: Any) -> bool:
    seen_plain = False
    for page in chunk.data_pages:
        if page.encoding in _DICTIONARY_ENCODINGS:
            if seen_plain:
                return True
        else:
            seen_plain = True
    return False


def _check_offset_index(dst: Path, i: int, chunk: Any) -> None:
    if chunk.offset_index is None:
        return
    locs = chunk.offset_index[1]
    pages = chunk.data_pages
    where = f"{dst}: row group {i} column {chunk.path}"
    assert len(locs) == len(pages), f"{where}: OffsetIndex lists {len(locs)} pages, chunk has {len(pages)}"
    firsts = [loc[3] for loc in locs]
    assert firsts[0] == 0, f"{where}: first page starts at row {firsts[0]}"
    assert all(a < b for a, b in zip(firsts, firsts[1:])), f"{where}: first_row_index not strictly increasing"
    assert firsts[-1] < chunk.num_rows
    for loc, page in zip(locs, pages):
        assert loc[1] == page.offset and loc[2] == len(page.raw), f"{where}: OffsetIndex entry {loc} != page at {page.offset} size {len(page.raw)}"
    if not chunk.max_rep_level_positive:
        from_headers = [p.num_rows if p.num_rows is not None else p.num_values for p in pages]
        from_index = [b - a for a, b in zip(firsts, firsts[1:] + [chunk.num_rows])]
        assert from_headers == from_index, f"{where}: OffsetIndex row counts disagree with page headers"


def _check_column_index(dst: Path, i: int, chunk: Any, arr: pa.Array, leaf: _Leaf) -> None:
    ci = chunk.column_index
    ranges = chunk.page_row_ranges()
    where = f"{dst}: row group {i} column {chunk.path}"
    assert len(ci[1]) == len(ranges), f"{where}: ColumnIndex has {len(ci[1])} pages, OffsetIndex {len(ranges)}"
    keys = _arrow_keys(arr, leaf)
    for p, (lo_row, hi_row) in enumerate(ranges):
        page = arr.slice(lo_row, hi_row - lo_row)
        nulls = page.null_count
        assert ci[1][p] == (nulls == len(page)), f"{where}: page {p} null_pages={ci[1][p]} with {nulls}/{len(page)} nulls"
        if 5 in ci:
            assert ci[5][p] == nulls, f"{where}: page {p} null_counts={ci[5][p]}, actual {nulls}"
        if not ci[1][p]:
            lo, hi = _decode_plain(ci[2][p], leaf), _decode_plain(ci[3][p], leaf)
            assert _bounds_ok(lo, hi, keys[lo_row:hi_row], leaf), f"{where}: page {p} bounds [{lo!r}, {hi!r}] do not bound its values"
