"""Which updated values really change, found in bulk before any page is touched.

A batch of full row images names every column of every changed row, although most columns keep their values. When
the updated rows are spread over most pages of a column chunk, finding the real changes page by page means
decoding nearly the whole chunk through in-memory sub-files anyway. Reading those columns' row groups with pyarrow's
own reader (multi-threaded, straight from the file) and comparing the updated positions is cheaper; afterwards a
column whose values stay is copied byte for byte without another decode, and a changed column is patched in the
pages that really change. Clustered updates (few pages per chunk) keep the page-by-page path, which decodes only
those pages.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from partialcow.parquet._changes import _changed_mask, _Changes
from partialcow.parquet._layout import ParquetLayout, _pages_holding

__all__ = ["screen_columns"]

# screen a column when the pages holding its updates are at least this share of its pages
_SCREEN_PAGE_SHARE = 0.5


def screen_columns(lay: ParquetLayout, changes: _Changes, *, threads: int) -> _Changes:
    """``changes`` with the real changes of the widely updated flat columns worked out (``_Changes.screened``)."""
    if not changes.upd or not changes.upd_pos.size:
        return changes
    names = [name for name in changes.upd if _widely_updated(lay, changes, name)]
    if not names:
        return changes
    masks: dict[str, list[np.ndarray]] = {name: [] for name in names}
    reader = pq.ParquetFile(lay.path)
    row = 0
    for rg in range(len(lay.row_groups)):
        n = lay.rg_rows(rg)
        ulo, uhi = np.searchsorted(changes.upd_pos, [row, row + n])
        if uhi > ulo:
            table = reader.read_row_group(rg, columns=names, use_threads=threads > 1)
            at = pa.array(changes.upd_pos[ulo:uhi] - row)
            for name in names:
                new = changes.upd[name].slice(ulo, uhi - ulo)
                try:
                    column = table.column(name)
                    if column.type != new.type:
                        # before the take: some types have no take kernel (string_view, which a file's stored Arrow
                        # schema can ask for)
                        column = column.cast(new.type)
                    old = column.take(at).combine_chunks()
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    masks.pop(name, None)  # compare it page by page instead
                    continue
                if name in masks:
                    masks[name].append(_changed_mask(old, new))
        row += n
    screened = dict(changes.screened or {})
    for name, parts in masks.items():
        mask = np.concatenate(parts) if parts else np.zeros(0, dtype=bool)
        screened[name] = (changes.upd_pos[mask], changes.upd[name].filter(pa.array(mask)))
    return _Changes(changes.upd_pos, changes.upd, changes.del_pos, screened)


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
