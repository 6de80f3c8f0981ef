"""The change set of one rewrite: validated update/delete positions, and rows patched with it.

``_prepare`` checks what the caller passed (positions in range, no repeats, castable values) before any byte is
written; ``_patch`` applies the change to decoded rows; ``_changed_mask`` tells real changes from updates to the
value a row already holds.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partialcow.exceptions import InvalidChangeError
from partialcow.parquet._layout import ParquetLayout
from partialcow.parquet.writer import settle_nulls

ROW_POSITION = "_partialcow_row_position"


@dataclass
class _Changes:
    upd_pos: np.ndarray  # sorted global positions
    upd: dict[str, pa.Array]  # top-level name -> new values, aligned with upd_pos, cast to the file's read type
    del_pos: np.ndarray  # sorted unique global positions
    # per column screened in bulk (see _screen): the positions whose value really differs and their new values
    screened: dict[str, tuple[np.ndarray, pa.Array]] | None = None

    def candidate_rows(self, name: str) -> np.ndarray:
        """Global positions where column ``name`` may change (deletes excluded)."""
        if name not in self.upd:
            return self.upd_pos[:0]
        if self.screened and name in self.screened:
            return self.screened[name][0]
        return self.upd_pos

    def column_updates(self, name: str, lo: int, hi: int, ulo: int, uhi: int) -> tuple[np.ndarray, pa.Array | None]:
        """Column ``name``'s candidate positions in rows [lo, hi) (global) and their new values; ``ulo:uhi`` is that
        range's slice of ``upd_pos``."""
        vals = self.upd.get(name)
        if vals is None:
            return self.upd_pos[:0], None
        if self.screened and name in self.screened:
            pos, new = self.screened[name]
            a, b = np.searchsorted(pos, [lo, hi])
            return pos[a:b], new.slice(a, b - a)
        return self.upd_pos[ulo:uhi], vals.slice(ulo, uhi - ulo)


def _distinct_rows(parts: list[np.ndarray], num_rows: int) -> int:
    """How many distinct positions the parts hold (a mask, not a sort: parts may total many times ``num_rows``)."""
    if not parts:
        return 0
    seen = np.zeros(num_rows, dtype=bool)
    for part in parts:
        seen[part] = True
    return int(np.count_nonzero(seen))


def _unique(a: np.ndarray) -> np.ndarray:
    """Sorted unique values (numpy 2's hash-based np.unique is far slower on large int arrays)."""
    a = np.sort(a)
    if a.size < 2:
        return a
    return a[np.concatenate(([True], a[1:] != a[:-1]))]


def _positions(values: Any, what: str, path: str) -> np.ndarray:
    if isinstance(values, (pa.ChunkedArray, pa.Array)):
        if values.null_count:
            raise InvalidChangeError(f"{what} for {path} contain nulls; give a row position for every entry")
        values = values.to_numpy(zero_copy_only=False)
    arr = np.asarray(values)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise InvalidChangeError(f"{what} for {path} must be integers, got {arr.dtype}")
    return arr.astype(np.int64, copy=False).ravel()


def _check_range(pos: np.ndarray, n: int, what: str, path: str) -> None:
    if pos.size and (pos.min() < 0 or pos.max() >= n):
        bad = pos[(pos < 0) | (pos >= n)]
        raise InvalidChangeError(
            f"{what} for {path} are out of range: {bad.size} position(s) outside [0, {n}), e.g. {int(bad[0])}")


def _prepare(lay: ParquetLayout, read_schema: pa.Schema, updates: pa.Table | None, deletes: Any) -> _Changes:
    path = lay.path
    n = lay.num_rows
    del_pos = _unique(_positions(deletes if deletes is not None else [], "deletes", path))
    _check_range(del_pos, n, "deletes", path)
    upd: dict[str, pa.Array] = {}
    upd_pos = np.zeros(0, dtype=np.int64)
    if updates is not None:
        if isinstance(updates, pa.RecordBatch):
            updates = pa.Table.from_batches([updates])
        if not isinstance(updates, pa.Table):
            raise InvalidChangeError(f"updates for {path} must be a pyarrow.Table, got {type(updates).__name__}")
        if ROW_POSITION not in updates.column_names:
            raise InvalidChangeError(f"updates for {path} lack the {ROW_POSITION!r} column (0-based row positions)")
        pos = _positions(updates.column(ROW_POSITION), "update positions", path)
        _check_range(pos, n, "update positions", path)
        order = np.argsort(pos, kind="stable")
        upd_pos = pos[order]
        if upd_pos.size > 1 and (dup := upd_pos[1:][upd_pos[1:] == upd_pos[:-1]]).size:
            raise InvalidChangeError(
                f"updates for {path} repeat row position(s) {sorted(set(dup.tolist()))[:5]}: give each row once")
        both = upd_pos[np.isin(upd_pos, del_pos, kind="sort")] if del_pos.size else upd_pos[:0]
        if both.size:
            raise InvalidChangeError(f"row position(s) {both[:5].tolist()} of {path} are both updated and deleted; "
                                     "pass each row to one of them")
        take = pa.array(order)
        for name in updates.column_names:
            if name == ROW_POSITION:
                continue
            idx = read_schema.get_field_index(name)
            if idx < 0:
                raise InvalidChangeError(f"updates name column {name!r}, which {path} does not have; "
                                         f"its columns are {read_schema.names}")
            target = read_schema.field(idx)
            col = updates.column(name)
            if col.type in _VIEW_TYPES:  # no take kernel for view types
                col = col.cast(_VIEW_TYPES[col.type])
            upd[name] = _as_field(col.take(take).combine_chunks(), target, path, "updated")
    return _Changes(upd_pos, upd, del_pos)


_VIEW_TYPES = {pa.string_view(): pa.large_string(), pa.binary_view(): pa.large_binary()}


def _appended_rows(lay: ParquetLayout, read_schema: pa.Schema, rows: pa.Table) -> pa.Table:
    """``rows`` to append, as the file's top-level fields in the types its pages decode to; every field named."""
    path = lay.path
    if not isinstance(rows, pa.Table):
        raise InvalidChangeError(f"rows to append to {path} must be a pyarrow.Table, got {type(rows).__name__}")
    missing = [n for n in read_schema.names if n not in rows.column_names]
    extra = [n for n in rows.column_names if n not in read_schema.names]
    if missing or extra:
        raise InvalidChangeError(f"rows to append to {path} must have exactly its columns {read_schema.names}; "
                                 f"missing {missing}, unknown {extra}")
    if not lay.row_groups:
        raise InvalidChangeError(f"{path} has no row group to lay appended rows out like; write a new file")
    columns = [_as_field(rows.column(t.name).combine_chunks(), t, path, "appended") for t in read_schema]
    return pa.table(columns, schema=read_schema)


def _as_field(col: pa.Array, target: pa.Field, path: str, what: str) -> pa.Array:
    """New values (``what``: updated or appended) of a column of ``path`` in its type; a required one holds no null."""
    try:
        col = settle_nulls(col, target.type)  # a null struct's fields may be null, also its required ones
        col = col.cast(target.type, safe=True) if col.type != target.type else col
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidChangeError(f"cannot cast the {what} values of column {target.name!r} ({col.type}) to the type "
                                 f"of {path} ({target.type}): {exc}") from exc
    if not target.nullable and col.null_count:
        raise InvalidChangeError(f"column {target.name!r} of {path} is required (non-nullable) but {col.null_count} "
                                 f"{what} row(s) are null")
    return col


def _patch(arr: pa.Array, base: int, upd_rows: np.ndarray, upd_vals: pa.Array | None, del_rows: np.ndarray
           ) -> pa.Array:
    """Rows ``base .. base+len(arr)`` of a chunk with updates applied and deleted rows removed."""
    n = len(arr)
    if not upd_rows.size and not del_rows.size:
        return arr
    if arr.type in _VIEW_TYPES:  # pyarrow has no take kernel for view types
        vals = upd_vals.cast(_VIEW_TYPES[arr.type]) if upd_vals is not None else None
        return _patch(arr.cast(_VIEW_TYPES[arr.type]), base, upd_rows, vals, del_rows).cast(arr.type)
    if upd_rows.size and (patched := _patch_fixed_width(arr, upd_rows - base, upd_vals)) is not None:
        if not del_rows.size:
            return patched
        arr, upd_rows = patched, upd_rows[:0]
    idx = np.arange(n, dtype=np.int64)
    if upd_rows.size:
        idx[upd_rows - base] = n + np.arange(upd_rows.size, dtype=np.int64)
        arr = pa.concat_arrays([arr, upd_vals])
    if del_rows.size:
        keep = np.ones(n, dtype=bool)
        keep[del_rows - base] = False
        idx = idx[keep]
    return arr.take(pa.array(idx))


def _patch_fixed_width(arr: pa.Array, rows: np.ndarray, vals: pa.Array) -> pa.Array | None:
    """``arr`` with ``vals`` written at ``rows`` by copying its value buffer (a gather of every row costs ~10x more
    when few rows change); None for types without one fixed-width value buffer (strings, booleans, nested)."""
    t = arr.type
    if (isinstance(t, pa.ExtensionType) or pa.types.is_boolean(t) or pa.types.is_dictionary(t)
            or arr.offset or vals.offset or vals.type != t or len(arr.buffers()) != 2):
        return None
    try:
        width = t.byte_width
    except ValueError:  # not a fixed-width type
        return None
    n = len(arr)
    unit = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(width)
    if unit is None and rows.size * 8 > n:  # wide values scattered over many rows: the gather is faster
        return None
    if unit is not None:
        data = np.frombuffer(arr.buffers()[1], dtype=unit, count=n).copy()
        data[rows] = np.frombuffer(vals.buffers()[1], dtype=unit, count=len(vals))
    else:
        data = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=n * width).reshape(n, width).copy()
        data[rows] = np.frombuffer(vals.buffers()[1], dtype=np.uint8, count=len(vals) * width).reshape(-1, width)
    validity = None
    if arr.null_count or vals.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False).copy()
        valid[rows] = vals.is_valid().to_numpy(zero_copy_only=False)
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(data)])


def _float_bits(arr: pa.Array) -> np.ndarray:
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[arr.type.byte_width]
    bits: np.ndarray = arr.fill_null(0).to_numpy(zero_copy_only=False).view(width)
    return bits


def _exact(value: Any) -> Any:
    """``value`` (as ``to_pylist`` gives it) in a form whose equality is the one ``_changed_mask`` uses: floats by
    their bits, so -0.0 differs from 0.0, and every NaN equal; nested lists, structs and maps alike.

    >>> _exact([-0.0]) == _exact([0.0]), _exact({"x": float("nan")}) == _exact({"x": float("nan")})
    (False, True)
    """
    if isinstance(value, float):
        return ("nan",) if value != value else ("float", struct.pack("<d", value))
    if isinstance(value, (list, tuple)):
        return tuple(_exact(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _exact(v)) for k, v in value.items())
    return value


def _changed_mask(old: pa.Array, new: pa.Array) -> np.ndarray:
    """True where ``new`` differs from ``old`` (nulls equal nulls; floats bit for bit, except any NaN equals NaN)."""
    if not len(old):
        return np.zeros(0, dtype=bool)
    t = old.type
    if pa.types.is_floating(t):
        o_null = old.is_null().to_numpy(zero_copy_only=False)
        n_null = new.is_null().to_numpy(zero_copy_only=False)
        o, n = old.fill_null(0).to_numpy(zero_copy_only=False), new.fill_null(0).to_numpy(zero_copy_only=False)
        same = (_float_bits(old) == _float_bits(new)) | (np.isnan(o) & np.isnan(n))
        changed: np.ndarray = np.where(o_null | n_null, o_null != n_null, ~same)
        return changed
    if pa.types.is_nested(t) or pa.types.is_dictionary(t) or isinstance(t, pa.ExtensionType):
        return np.array([_exact(a) != _exact(b) for a, b in zip(old.to_pylist(), new.to_pylist())], dtype=bool)
    try:
        same = pc.fill_null(pc.equal(old, new), False)
    except pa.ArrowNotImplementedError:
        return np.array([_exact(a) != _exact(b) for a, b in zip(old.to_pylist(), new.to_pylist())], dtype=bool)
    same = pc.or_(same, pc.and_(pc.is_null(old), pc.is_null(new)))
    changed = ~same.to_numpy(zero_copy_only=False)
    return changed
