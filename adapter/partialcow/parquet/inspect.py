"""``partialcow inspect FILE [--json]``: row groups, column chunks and pages of a Parquet file.

Reads only the footer, the page indexes and the page headers (never values).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from partialcow.parquet import _format as F
from partialcow.parquet._layout import ParquetLayout

__all__ = ["add_arguments", "describe", "describe_file", "run"]


def _name(table: Any, value: int | None) -> str | None:
    if value is None:
        return None
    if isinstance(table, dict):
        return str(table.get(value, value))
    return table[value] if 0 <= value < len(table) else str(value)


def describe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The layout of a Parquet file as plain data (what ``--json`` prints).

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pq.write_table(pa.table({"a": [1, 2, 3]}), p, write_page_index=True)
    >>> d = describe(p)
    >>> d["num_rows"], d["row_groups"][0]["columns"][0]["pages"][-1]["rows"]
    (3, 3)
    """
    with ParquetLayout(path) as lay:
        created_by = lay.fmd.val(F.FMD_CREATED_BY)
        out: dict[str, Any] = {
            "path": lay.path, "size": lay.size, "num_rows": lay.num_rows,
            "created_by": created_by.decode("utf-8", "replace") if created_by else None,
            "key_value_metadata": [kv.val(F.KV_KEY).decode("utf-8", "replace")
                                   for kv in (lay.fmd.val(F.FMD_KV).items if F.FMD_KV in lay.fmd else [])],
            "row_groups": [],
        }
        for rg in range(len(lay.row_groups)):
            cols = []
            for leaf in lay.leaves:
                ch = lay.chunk(rg, leaf.index)
                cmd = ch.cmd
                pages = []
                if ch.prefix_end > ch.start:
                    h, hs = lay.page_header(ch.start)
                    dph = h.val(F.PH_DICTIONARY_PAGE_HEADER)
                    pages.append({"offset": ch.start, "size": hs + h.val(F.PH_COMPRESSED_SIZE),
                                  "type": _name(F.PAGE_TYPE_NAMES, h.val(F.PH_TYPE)), "first_row": None, "rows": None,
                                  "values": dph.val(F.DICT_NUM_VALUES) if dph else None,
                                  "encoding": _name(F.ENCODING_NAMES, dph.val(F.DICT_ENCODING)) if dph else None,
                                  "uncompressed": h.val(F.PH_UNCOMPRESSED_SIZE), "crc": F.PH_CRC in h})
                for i, p in enumerate(ch.pages):
                    h = lay.ensure_header(p)
                    ptype = h.val(F.PH_TYPE)
                    sub = h.val(F.PH_DATA_PAGE_HEADER_V2 if ptype == F.DATA_PAGE_V2 else F.PH_DATA_PAGE_HEADER)
                    rows = None
                    if ch.rows_known:
                        first, nxt = ch.page_rows(i)
                        rows = nxt - first
                    pages.append({"offset": p.offset, "size": p.size, "type": _name(F.PAGE_TYPE_NAMES, ptype),
                                  "first_row": p.first_row, "rows": rows, "values": sub.val(1),
                                  "encoding": _name(F.ENCODING_NAMES, sub.val(F.DPH_ENCODING if ptype == F.DATA_PAGE
                                                                               else F.DPH2_ENCODING)),
                                  "uncompressed": h.val(F.PH_UNCOMPRESSED_SIZE), "crc": F.PH_CRC in h})
                st = cmd.val(F.CMD_STATISTICS)
                cols.append({
                    "path": ".".join(leaf.path), "type": _name(F.TYPE_NAMES, leaf.physical_type),
                    "codec": _name(F.CODEC_NAMES, cmd.val(F.CMD_CODEC)), "start": ch.start,
                    "compressed": cmd.val(F.CMD_TOTAL_COMPRESSED_SIZE),
                    "uncompressed": cmd.val(F.CMD_TOTAL_UNCOMPRESSED_SIZE), "values": cmd.val(F.CMD_NUM_VALUES),
                    "encodings": [_name(F.ENCODING_NAMES, e) for e in cmd.val(F.CMD_ENCODINGS).items],
                    "null_count": st.val(F.ST_NULL_COUNT) if st is not None else None,
                    "offset_index": F.CC_OFFSET_INDEX_OFFSET in ch.cc,
                    "column_index": F.CC_COLUMN_INDEX_OFFSET in ch.cc,
                    "bloom_filter": F.CMD_BLOOM_FILTER_OFFSET in cmd,
                    "pages": pages,
                })
            out["row_groups"].append({"index": rg, "rows": lay.rg_rows(rg), "columns": cols})
        return out


def describe_file(path: str | os.PathLike[str]) -> str:
    """A human-readable listing of row groups, column chunks and pages.

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pq.write_table(pa.table({"a": [1, 2, 3]}), p)
    >>> print(describe_file(p).splitlines()[0].split(": ", 1)[1])  # doctest: +ELLIPSIS
    3 rows, 1 row group(s), ... bytes, created by parquet-cpp-arrow...
    """
    d = describe(path)
    lines = [f"{d['path']}: {d['num_rows']} rows, {len(d['row_groups'])} row group(s), {d['size']} bytes, "
             f"created by {d['created_by']}",
             f"  key-value metadata: {', '.join(d['key_value_metadata']) or '-'}"]
    for rg in d["row_groups"]:
        lines.append(f"row group {rg['index']}: {rg['rows']} rows")
        for c in rg["columns"]:
            index = "+".join(k for k in ("offset_index", "column_index", "bloom_filter") if c[k]) or "no page index"
            lines.append(f"  {c['path']} {c['type']} {c['codec']} @{c['start']} {c['compressed']} bytes "
                         f"({c['uncompressed']} raw), {c['values']} values, nulls {c['null_count']}, "
                         f"{'/'.join(c['encodings'])}, {index}")
            for p in c["pages"]:
                rows = "" if p.get("rows") is None else f" rows {p['first_row']}+{p['rows']}"
                lines.append(f"    {p['type']:<15} @{p['offset']} {p['size']} bytes{rows} values {p['values']} "
                             f"{p['encoding']}{' crc' if p['crc'] else ''}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``partialcow inspect``."""
    parser.add_argument("file", help="Parquet file to describe")
    parser.add_argument("--json", action="store_true", help="print the layout as JSON")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``partialcow inspect``."""
    if not os.path.isfile(args.file):
        from partialcow.exceptions import ConfigurationError

        raise ConfigurationError(f"{args.file} is not a file")
    if args.json:
        print(json.dumps(describe(args.file), indent=2))
    else:
        print(describe_file(args.file))
    return 0
