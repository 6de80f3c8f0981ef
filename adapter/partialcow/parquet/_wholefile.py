"""Whole-file rewrites: the cost model's last resort, and the fallback when pages cannot be re-encoded faithfully.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from partialcow.parquet import _format as F
from partialcow.parquet._changes import _Changes, _patch
from partialcow.parquet._layout import ParquetLayout, _max_page_rows, _pages_holding
from partialcow.parquet._pagecodec import _CODEC_TO_ARROW
from partialcow.parquet._thrift import T_LIST, TStruct


def _rewrite_whole(lay: ParquetLayout, table: pa.Table, fd: int, written_path: str, changes: _Changes,
                   opts: dict[str, Any]) -> tuple[int, list[tuple[int, str]]]:
    """Rewrite everything with pyarrow; returns the size and the bloom filters that could not be rebuilt."""
    n = table.num_rows
    cols = []
    for name, col in zip(table.column_names, table.columns):
        arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        if name in changes.upd:
            vals = changes.upd[name].cast(arr.type)
            arr = _patch(arr, 0, changes.upd_pos, vals, changes.del_pos)
        elif changes.del_pos.size:
            arr = _patch(arr, 0, np.zeros(0, np.int64), None, changes.del_pos)
        cols.append(arr)
    new = pa.table(cols, schema=table.schema)
    ptypes = {leaf.physical_type for leaf in lay.leaves}
    first = lay.chunk(0, 0) if lay.row_groups else None
    h = lay.ensure_header(first.pages[0]) if first else TStruct()
    has_oi = bool(lay.row_groups) and F.CC_OFFSET_INDEX_OFFSET in lay.column_chunk(0, 0)
    codec = first.cmd.val(F.CMD_CODEC) if first else 1
    kwargs: dict[str, Any] = dict(
        compression=_CODEC_TO_ARROW.get(codec, "lz4"), write_page_index=has_oi,
        data_page_version="2.0" if h.val(F.PH_TYPE) == F.DATA_PAGE_V2 else "1.0",
        write_page_checksum=F.PH_CRC in h, use_deprecated_int96_timestamps=F.INT96 in ptypes,
        # list element names as read from the source ("item" from parquet-rs, "element" from compliant writers)
        use_compliant_nested_type=False,
        store_decimal_as_integer=any(
            leaf.physical_type in (F.INT32, F.INT64) and pa.types.is_decimal(f.type)
            for leaf, f in zip(lay.leaves, table.schema)) if len(lay.leaves) == len(table.schema) else False)
    if lay.row_groups:
        # the source's layout: dictionaries where it had them, its page size in rows
        kwargs["use_dictionary"] = [".".join(leaf.path) for leaf in lay.leaves
                                    if (c := lay.chunk(0, leaf.index)).prefix_end > c.start]
        page_rows = [_max_page_rows(lay.chunk(0, leaf.index)) for leaf in lay.leaves]
        if None not in page_rows:
            kwargs["max_rows_per_page"] = max(1, *page_rows)
        sorting = pq.ParquetFile(lay.path).metadata.row_group(0).sorting_columns
        if sorting and not {lay.tops[lay.leaves[c.column_index].top].name for c in sorting} & set(changes.upd):
            kwargs["sorting_columns"] = sorting  # deletes keep the order; updated sort keys may not
    kwargs.update(opts)
    rg_size = max((lay.rg_rows(i) for i in range(len(lay.row_groups))), default=n) or 1
    # bloom filters are rebuilt for the columns that had them (sized for a row group of distinct values)
    blooms = {(rg, ".".join(leaf.path)) for rg in range(len(lay.row_groups)) for leaf in lay.leaves
              if F.CMD_BLOOM_FILTER_OFFSET in lay.column_chunk(rg, leaf.index).val(F.CC_META_DATA)}
    if blooms and "bloom_filter_options" not in kwargs:
        kwargs["bloom_filter_options"] = {path: {"ndv": rg_size} for _, path in blooms}
    with os.fdopen(os.dup(fd), "wb") as fh, pq.ParquetWriter(fh, new.schema, **kwargs) as writer:
        if new.num_rows:  # no empty row group when every row is deleted
            writer.write_table(new, row_group_size=rg_size)
    kept = set()
    with ParquetLayout(written_path, clock=lay.clock) as written:
        for rg in range(len(written.row_groups)):  # report the filters pyarrow did not write back
            for leaf in written.leaves:
                if F.CMD_BLOOM_FILTER_OFFSET in written.column_chunk(rg, leaf.index).val(F.CC_META_DATA):
                    kept.add((rg, ".".join(leaf.path)))
        # key-value metadata (ARROW:schema, Spark's schema, ...) exactly as in the source
        fmd = written.fmd.copy()
        fmd.drop(F.FMD_KV)
        if F.FMD_KV in lay.fmd:
            fmd.put(F.FMD_KV, T_LIST, lay.fmd.val(F.FMD_KV))
        footer_start = written.footer_start
    footer = lay.clock.encode(fmd)
    os.ftruncate(fd, footer_start)
    os.lseek(fd, footer_start, os.SEEK_SET)
    tail = footer + len(footer).to_bytes(4, "little") + b"PAR1"
    while tail:
        tail = tail[os.write(fd, tail):]
    dropped = sorted(b for b in blooms if b not in kept)
    return os.fstat(fd).st_size, dropped


def _full_file_reason(lay: ParquetLayout, changes: _Changes, threshold: float, chunk_threshold: float
                      ) -> str | None:
    """Whole-file rewrite when the pages holding candidate changes are nearly all page bytes."""
    if not changes.upd_pos.size and not changes.del_pos.size:
        return None
    total = touched = 0
    row = 0
    for rg in range(len(lay.row_groups)):
        n = lay.rg_rows(rg)
        dlo, dhi = np.searchsorted(changes.del_pos, [row, row + n])
        dels = changes.del_pos[dlo:dhi] - row
        for leaf in lay.leaves:
            cmd = lay.column_chunk(rg, leaf.index).val(F.CC_META_DATA)
            size = cmd.val(F.CMD_TOTAL_COMPRESSED_SIZE)
            total += size
            cand_rows = changes.candidate_rows(lay.tops[leaf.top].name)
            ulo, uhi = np.searchsorted(cand_rows, [row, row + n])
            ups = cand_rows[ulo:uhi] - row
            if not ups.size and not dels.size:
                continue
            ch = lay.chunk(rg, leaf.index)
            if not ch.rows_known or leaf.nested:
                touched += size
                continue
            cand = int(ch.page_arrays[1][_pages_holding(ch, ups, dels)].sum())
            # above the chunk threshold the chunk is re-encoded whole, dictionary page included
            touched += size if cand > chunk_threshold * (ch.end - ch.prefix_end) else cand
        row += n
    if total and touched > threshold * total:
        return f"{touched / total:.0%} of the page bytes hold changes (threshold {threshold:.0%})"
    return None
