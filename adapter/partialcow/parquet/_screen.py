"""Which updated values really change, found in bulk before any page is touched.

A batch of full row images names every column of every changed row, although most columns keep their values. When
the updated rows are spread over most pages of a column chunk, finding the real changes page by page means
decoding nearly the whole chunk through in-memory sub-files anyway. Reading those columns' row groups with pyarrow's
own reader (multi-threaded, straight from the file) and comparing the updated positions is cheaper; afterwards a
column whose values stay is copied byte for byte without another decode, and a changed column is patched in the
pages that really change. Clustered updates (few pages per chunk) keep the page-by-page path, which decodes only
those pages.

With row fingerprints (``_fingerprints``) most of that decode goes too: the sidecar tells which rows and which
columns change, only those columns are decoded and compared, and the fingerprint sum proves the others unchanged.
The screening also works out the new file's fingerprints (``Lineage``) whenever the source's are known or were
just computed from the decoded columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from partialcow.parquet._changes import _changed_mask, _Changes
from partialcow.parquet._fingerprints import (
    Sidecar,
    column_hashes,
    hashable,
    load_sidecar,
    signature,
    slot_mask,
)
from partialcow.parquet._format import INT96_UNIT
from partialcow.parquet._layout import ParquetLayout, _pages_holding

__all__ = ["Lineage", "Screening", "screen_columns"]

# screen a column when the pages holding its updates are at least this share of its pages
_SCREEN_PAGE_SHARE = 0.5

Method = Literal["none", "decode", "fingerprints", "fingerprints+decode"]


@dataclass
class Lineage:
    """The rewritten file's fingerprints: ``base`` (the source's) with rows ``upd_pos`` set to ``fp``/``sig``, then
    the deleted rows removed and the appended rows' added."""

    base: Sidecar
    upd_pos: np.ndarray
    fp: np.ndarray
    sig: np.ndarray

    def derive(self, del_pos: np.ndarray, appended: pa.Table | None) -> Sidecar:
        base = self.base
        fp, sig = base.fp.copy(), base.sig.copy()
        fp[self.upd_pos] = self.fp
        sig[self.upd_pos] = self.sig
        if del_pos.size:
            keep = np.ones(len(fp), dtype=bool)
            keep[del_pos] = False
            fp, sig = fp[keep], sig[keep]
        if appended is not None and appended.num_rows:
            more_fp, more_sig = base.marks(base.hashes(appended.column))
            fp, sig = np.concatenate([fp, more_fp]), np.concatenate([sig, more_sig])
        return Sidecar(base.columns, base.types, base.seed, fp, sig)


@dataclass
class Screening:
    """The change with its real changes worked out, how they were found, and the new file's fingerprints if known."""

    changes: _Changes
    method: Method
    lineage: Lineage | None


def screen_columns(lay: ParquetLayout, changes: _Changes, *, threads: int, read_schema: pa.Schema | None = None,
                   fingerprints: bool = False) -> Screening:
    """``changes`` with the real changes of the widely updated flat columns worked out (``_Changes.screened``);
    ``fingerprints``: use the source's sidecar where it helps, and work out the new file's (needs ``read_schema``).
    """
    sc = load_sidecar(lay.path, lay.num_rows, read_schema) if fingerprints and read_schema is not None else None
    updated = set(changes.upd) if changes.upd_pos.size else set()
    names = [name for name in changes.upd if _widely_updated(lay, changes, name)] if updated else []
    if not names:
        # nothing screened (the updates touch few pages): the fingerprints carry over when no covered column is
        # updated, or when every one is (full row images: the updated rows' new fingerprints are their new values')
        return Screening(changes, "none", _carried(sc, changes, updated) if sc is not None else None)
    if sc is not None and set(sc.columns) <= updated and set(names) <= set(sc.columns):
        done = _by_fingerprints(lay, changes, sc, threads)
        if done is not None:
            return done
    if not fingerprints or read_schema is None:
        masks, _, _ = _decode(lay, changes, names, threads=threads)
        return Screening(_with_masks(changes, masks), "decode", None)
    if sc is not None and set(names) <= set(sc.columns):
        return _decode_and_carry(lay, changes, names, sc, threads)
    return _decode_and_build(lay, changes, names, read_schema, threads)


def _carried(sc: Sidecar, changes: _Changes, updated: set[str]) -> Lineage | None:
    if not updated & set(sc.columns):
        empty = changes.upd_pos[:0]
        return Lineage(sc, empty, empty.astype(np.uint64), empty.astype(np.uint64))
    if not set(sc.columns) <= updated:
        return None  # some covered columns keep unknown old values: the sidecar is dropped
    return Lineage(sc, changes.upd_pos, *sc.marks(sc.hashes(changes.upd.__getitem__)))


def _by_fingerprints(lay: ParquetLayout, changes: _Changes, sc: Sidecar, threads: int) -> Screening | None:
    """Every covered column is updated: the sums tell the unchanged rows, the signatures the changed columns, which
    are decoded and compared; the rest are proved unchanged by the sums (or decoded when a signature missed one).
    None when a column cannot be decoded for comparison (the caller screens the classic way)."""
    cols, k = sc.columns, len(sc.columns)
    salts = {c: sc.salt(j) for j, c in enumerate(cols)}
    hashes = sc.hashes(changes.upd.__getitem__)
    new = dict(zip(cols, hashes))
    g, s = sc.marks(hashes)
    f = sc.fp[changes.upd_pos]
    differ = g != f
    flags = int(np.bitwise_or.reduce((s ^ sc.sig[changes.upd_pos])[differ])) if differ.any() else 0
    changed = [c for j, c in enumerate(cols) if flags & slot_mask(j, k)]
    masks, old, _ = _decode(lay, changes, changed, threads=threads, salts={c: salts[c] for c in changed})
    if set(changed) - set(old):
        return None
    residue = f - g
    for c in changed:
        residue -= old[c] - new[c]
    method: Method = "fingerprints"
    if residue.any():
        # a changed column whose signature bits happen to match: compare the other columns the classic way
        rest = [c for c in cols if c not in changed]
        more, _, _ = _decode(lay, changes, rest, threads=threads)
        masks.update(more)
        method = "fingerprints+decode"
    else:
        masks.update({c: np.zeros(len(changes.upd_pos), dtype=bool) for c in cols if c not in changed})
    return Screening(_with_masks(changes, masks), method, Lineage(sc, changes.upd_pos, g, s))


def _decode_and_carry(lay: ParquetLayout, changes: _Changes, names: list[str], sc: Sidecar, threads: int
                      ) -> Screening:
    """Classic screening; the source's fingerprints carry over when every updated covered column was decoded (its
    old hashes then come with the comparison)."""
    k = len(sc.columns)
    touched = [(j, c) for j, c in enumerate(sc.columns) if c in changes.upd]
    salts = {c: sc.salt(j) for j, c in touched}
    masks, old, _ = _decode(lay, changes, names, threads=threads, salts=salts)
    result = _with_masks(changes, masks)
    if any(c not in old for _, c in touched):
        return Screening(result, "decode", None)
    new = {c: column_hashes(changes.upd[c], salts[c]) for _, c in touched}
    fp = sc.fp[changes.upd_pos].copy()
    for _, c in touched:
        fp += new[c] - old[c]
    idx = [j for j, _ in touched]
    sig = (sc.sig[changes.upd_pos] ^ signature([old[c] for _, c in touched], k, idx)
           ^ signature([new[c] for _, c in touched], k, idx))
    return Screening(result, "decode", Lineage(sc, changes.upd_pos, fp, sig))


def _decode_and_build(lay: ParquetLayout, changes: _Changes, names: list[str], read_schema: pa.Schema,
                      threads: int) -> Screening:
    """Classic screening that also hashes every row of the screened columns: the source's fingerprints, from which
    the new file's follow."""
    chosen = set(names)
    cols = tuple(f.name for f in read_schema if f.name in chosen and hashable(f.type))
    if not cols:
        masks, _, _ = _decode(lay, changes, names, threads=threads)
        return Screening(_with_masks(changes, masks), "decode", None)
    base = Sidecar(cols, tuple(str(read_schema.field(c).type) for c in cols), Sidecar.new_seed(),
                   np.zeros(0, np.uint64), np.zeros(0, np.uint64))
    masks, _, whole = _decode(lay, changes, names, threads=threads, cover=base)
    result = _with_masks(changes, masks)
    if whole is None:
        return Screening(result, "decode", None)
    base.fp, base.sig = whole
    new_fp, new_sig = base.marks(base.hashes(changes.upd.__getitem__))
    return Screening(result, "decode", Lineage(base, changes.upd_pos, new_fp, new_sig))


def _with_masks(changes: _Changes, masks: dict[str, np.ndarray]) -> _Changes:
    screened = dict(changes.screened or {})
    for name, mask in masks.items():
        screened[name] = (changes.upd_pos[mask], changes.upd[name].filter(pa.array(mask)))
    return _Changes(changes.upd_pos, changes.upd, changes.del_pos, screened)


def _decode(lay: ParquetLayout, changes: _Changes, names: Sequence[str], *, threads: int,
            salts: dict[str, int] | None = None, cover: Sidecar | None = None
            ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], tuple[np.ndarray, np.ndarray] | None]:
    """Read columns ``names`` of the row groups holding updates and compare them with the new values.

    Returns where the updated rows really change, per column; for columns in ``salts``, the old values' hashes at
    the updated rows; with ``cover`` (a sidecar's columns and seed; all in ``names``), every row group is read and
    every row's fingerprint and signature over those columns come back too (None if a column could not be read).
    A column pyarrow cannot compare this way is left out (it is then compared page by page)."""
    if not names:
        return {}, {}, None
    salts = salts or {}
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    olds: dict[str, list[np.ndarray]] = {name: [] for name in names if name in salts}
    fps: list[np.ndarray] = []
    sigs: list[np.ndarray] = []
    reader = pq.ParquetFile(lay.path, coerce_int96_timestamp_unit=INT96_UNIT)
    failed: set[str] = set()
    pool = ThreadPoolExecutor(threads) if cover is not None and threads > 1 else None
    row = 0
    try:
        for rg in range(len(lay.row_groups)):
            n = lay.rg_rows(rg)
            ulo, uhi = np.searchsorted(changes.upd_pos, [row, row + n])
            row += n
            if uhi == ulo and cover is None:
                continue
            table = reader.read_row_group(rg, columns=list(names), use_threads=threads > 1)
            at = pa.array(changes.upd_pos[ulo:uhi] - (row - n))
            columns: dict[str, pa.ChunkedArray] = {}
            for name in names:
                if name in failed:
                    continue
                new = changes.upd[name].slice(ulo, uhi - ulo)
                try:
                    column = table.column(name)
                    if column.type != new.type:
                        # before the take: some types have no take kernel (string_view, which a file's stored
                        # Arrow schema can ask for)
                        column = column.cast(new.type)
                    old = column.take(at).combine_chunks()
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    failed.add(name)  # compare it page by page instead
                    continue
                columns[name] = column
                parts[name].append(_changed_mask(old, new))
                if name in olds:
                    olds[name].append(column_hashes(old, salts[name]))
            if cover is not None and not failed & set(cover.columns):
                jobs = [(cover.salt(j), columns[c]) for j, c in enumerate(cover.columns)]
                hashes = list(pool.map(lambda job: column_hashes(job[1], job[0]), jobs) if pool is not None
                              else (column_hashes(c, salt) for salt, c in jobs))
                fp, sig = cover.marks(hashes)
                fps.append(fp)
                sigs.append(sig)
    finally:
        if pool is not None:
            pool.shutdown()

    def joined(d: dict[str, list[np.ndarray]], dtype: type) -> dict[str, np.ndarray]:
        return {k: np.concatenate(v) if v else np.zeros(0, dtype) for k, v in d.items() if k not in failed}

    whole = None
    if cover is not None and not failed & set(cover.columns):
        whole = (np.concatenate(fps) if fps else np.zeros(0, np.uint64),
                 np.concatenate(sigs) if sigs else np.zeros(0, np.uint64))
    return joined(parts, bool), joined(olds, np.uint64), whole


def _widely_updated(lay: ParquetLayout, changes: _Changes, name: str) -> bool:
    top = next((t for t in lay.tops if t.name == name), None)
    if top is None or len(top.leaves) != 1 or lay.leaves[top.leaves[0]].nested:
        return False
    hit = total = 0
    row = 0
    for rg in range(len(lay.row_groups)):
        n = lay.rg_rows(rg)
        ulo, uhi = np.searchsorted(changes.upd_pos, [row, row + n])
        ch = lay.chunk(rg, top.leaves[0])
        if not ch.rows_known:
            return False
        total += len(ch.pages)
        if uhi > ulo:
            hit += len(_pages_holding(ch, changes.upd_pos[ulo:uhi] - row))
        row += n
    return total > 0 and hit >= _SCREEN_PAGE_SHARE * total
