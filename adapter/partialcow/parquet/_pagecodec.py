"""Small in-memory Parquet files through which pyarrow decodes and encodes pages.

A "sub-file" holds copies of some pages of one column chunk (with its dictionary page) behind a made-up footer:
pyarrow decodes it. A "mini file" is one column written by pyarrow with the chunk's codec, page version and page
size, whose data pages are spliced into the output. Dictionary-encoded runs are encoded against the chunk's own
dictionary (see ``_encode_runs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from partialcow.exceptions import ParquetRewriteError
from partialcow.parquet import _format as F
from partialcow.parquet._column_index import PageBounds
from partialcow.parquet._layout import Chunk, Page, ParquetLayout, TopField, _max_page_rows
from partialcow.parquet._physical import check_same_layout, column_encoding, writable_type
from partialcow.parquet._thrift import T_BINARY, T_I32, T_I64, T_LIST, T_STRUCT, TList, TStruct

_CODEC_TO_ARROW = {0: "none", 1: "snappy", 2: "gzip", 4: "brotli", 6: "zstd", 7: "lz4"}


def _page_num_values(lay: ParquetLayout, page: Page) -> int:
    h = lay.ensure_header(page)
    n: int = (h.val(F.PH_DATA_PAGE_HEADER_V2).val(F.DPH2_NUM_VALUES) if h.val(F.PH_TYPE) == F.DATA_PAGE_V2
              else h.val(F.PH_DATA_PAGE_HEADER).val(F.DPH_NUM_VALUES))
    return n


def _stats_key(page_type: int, encoding: int) -> tuple[int, int]:
    # Writers disagree on the page type of v2 pages in encoding_stats (pyarrow declares DATA_PAGE): match both.
    return (F.DATA_PAGE if page_type == F.DATA_PAGE_V2 else page_type), encoding


def _page_type_for_stats(kind: int, ch: Chunk, lay: ParquetLayout) -> int:
    if kind != F.DATA_PAGE:
        return kind
    ptype: int = lay.ensure_header(ch.pages[0]).val(F.PH_TYPE)
    return ptype


def _page_encoding(lay: ParquetLayout, page: Page) -> tuple[int, int]:
    h = lay.ensure_header(page)
    ptype = h.val(F.PH_TYPE)
    sub = h.val(F.PH_DATA_PAGE_HEADER_V2 if ptype == F.DATA_PAGE_V2 else F.PH_DATA_PAGE_HEADER)
    return ptype, sub.val(F.DPH2_ENCODING if ptype == F.DATA_PAGE_V2 else F.DPH_ENCODING)


def _decode_pages(lay: ParquetLayout, top: TopField, rg: int, pages: dict[int, list[Page]] | None, nrows: int,
                  *, prefixes: dict[int, tuple[int, int]] | None = None, num_values: dict[int, int] | None = None
                  ) -> pa.Array:
    """Decode rows of one top-level field: ``pages`` maps each leaf to the pages to decode (None: whole chunks).

    ``prefixes`` (leaf -> [start, first data page) of its chunk) and ``num_values`` (leaf -> values in ``pages``)
    spare the page discovery and header reads when the caller knows them.
    """
    buf = bytearray(b"PAR1")
    ccs = []
    for leaf in top.leaves:
        if prefixes is not None:
            chunk_start, prefix_end = prefixes[leaf]
            cmd = lay.column_chunk(rg, leaf).val(F.CC_META_DATA).copy()
        else:
            ch = lay.chunk(rg, leaf)
            chunk_start, prefix_end = ch.start, ch.prefix_end
            cmd = ch.cmd.copy()
        start = len(buf)
        buf += lay.buf[chunk_start:prefix_end]
        data_start = len(buf)
        if pages is None:
            buf += lay.buf[prefix_end:ch.end]
        else:
            for p in pages[leaf]:
                buf += lay.buf[p.offset:p.offset + p.size]
            nvals = num_values[leaf] if num_values is not None else sum(_page_num_values(lay, p) for p in pages[leaf])
            cmd.put(F.CMD_NUM_VALUES, T_I64, nvals)
        cmd.drop(F.CMD_INDEX_PAGE_OFFSET, F.CMD_STATISTICS, F.CMD_ENCODING_STATS, F.CMD_BLOOM_FILTER_OFFSET,
                 F.CMD_BLOOM_FILTER_LENGTH, F.CMD_SIZE_STATISTICS, F.CMD_GEOSPATIAL_STATISTICS,
                 F.CMD_DICTIONARY_PAGE_OFFSET)
        if data_start > start:
            cmd.put(F.CMD_DICTIONARY_PAGE_OFFSET, T_I64, start)
        cmd.put(F.CMD_DATA_PAGE_OFFSET, T_I64, data_start)
        cmd.put(F.CMD_TOTAL_COMPRESSED_SIZE, T_I64, len(buf) - start)
        cmd.put(F.CMD_TOTAL_UNCOMPRESSED_SIZE, T_I64, len(buf) - start)
        cc = TStruct()
        cc.put(F.CC_FILE_OFFSET, T_I64, 0)
        cc.put(F.CC_META_DATA, T_STRUCT, cmd)
        ccs.append(cc)
    fmd = _schema_only_footer(lay, top)
    rgs = TStruct()
    rgs.put(F.RG_COLUMNS, T_LIST, TList(T_STRUCT, ccs))
    rgs.put(F.RG_TOTAL_BYTE_SIZE, T_I64, len(buf))
    rgs.put(F.RG_NUM_ROWS, T_I64, nrows)
    fmd.put(F.FMD_NUM_ROWS, T_I64, nrows)
    fmd.put(F.FMD_ROW_GROUPS, T_LIST, TList(T_STRUCT, [rgs]))
    footer = lay.clock.encode(fmd)
    buf += footer + len(footer).to_bytes(4, "little") + b"PAR1"
    return _read_sub_file(bytes(buf))


def _schema_only_footer(lay: ParquetLayout, top: TopField | None) -> TStruct:
    """A footer with no row groups; with ``top`` only that top-level field's schema subtree."""
    root = lay.schema[0].copy()
    if top is None:
        schema = lay.schema
    else:
        root.put(F.SE_NUM_CHILDREN, T_I32, 1)
        schema = [root] + lay.schema[top.schema_start:top.schema_end]
    fmd = TStruct()
    fmd.put(F.FMD_VERSION, T_I32, lay.fmd.val(F.FMD_VERSION, 1))
    fmd.put(F.FMD_SCHEMA, T_LIST, TList(T_STRUCT, schema))
    fmd.put(F.FMD_NUM_ROWS, T_I64, 0)
    fmd.put(F.FMD_ROW_GROUPS, T_LIST, TList(T_STRUCT, []))
    if F.FMD_CREATED_BY in lay.fmd:  # readers key per-writer workarounds on it
        fmd.put(F.FMD_CREATED_BY, T_BINARY, lay.fmd.val(F.FMD_CREATED_BY))
    return fmd


def _read_schema(lay: ParquetLayout) -> pa.Schema:
    """The Arrow schema pyarrow derives from the Parquet schema alone (what sub-files decode to)."""
    fmd = _schema_only_footer(lay, None)
    footer = lay.clock.encode(fmd)
    buf = b"PAR1" + footer + len(footer).to_bytes(4, "little") + b"PAR1"
    return pq.ParquetFile(pa.BufferReader(buf), coerce_int96_timestamp_unit=F.INT96_UNIT).schema_arrow


@dataclass
class _Mini:
    lay: ParquetLayout
    chunks: list[list[Chunk]]  # per row group (one per encoded group), per leaf


def _encode_mini(lay: ParquetLayout, top: TopField, groups: list[pa.Array], nullable: bool, *, codec: int,
                 dictionary: bool, v2: bool, crc: bool, rows_per_page: int | None, opts: dict[str, Any],
                 encoding: int | None = None, bloom: bool = False) -> _Mini:
    """Encode ``groups`` (one row group each) as a one-column Parquet file in memory, laid out like ``top``'s chunks.

    One writer and one footer parse for every group: a fixed cost paid per chunk, not per run of touched pages.
    ``encoding``: the value encoding of the pages replaced, kept where pyarrow writes it (see ``_physical``);
    ``bloom``: write a bloom filter (flat columns). Raises ParquetRewriteError when pyarrow cannot write the
    source's physical layout.
    """
    leaves = [lay.leaves[i] for i in top.leaves]
    ptypes = {leaf.physical_type for leaf in leaves}
    write_type = writable_type(groups[0].type, leaves)
    if write_type != groups[0].type:
        groups = [g.cast(write_type) for g in groups]
    schema = pa.schema([pa.field(top.name, write_type, nullable=nullable)])
    kwargs: dict[str, Any] = dict(
        compression=_CODEC_TO_ARROW.get(codec, "lz4"), use_dictionary=dictionary, write_statistics=True,
        data_page_version="2.0" if v2 else "1.0", write_page_checksum=crc, write_page_index=True,
        store_schema=False, version="2.6",
        store_decimal_as_integer=bool(ptypes & {F.INT32, F.INT64}),
        use_deprecated_int96_timestamps=F.INT96 in ptypes)
    if rows_per_page:
        kwargs["max_rows_per_page"] = max(1, int(rows_per_page))
    single = len(leaves) == 1 and not leaves[0].nested
    # pyarrow builds no bloom filter of booleans (parquet-java does): the chunk's filter is dropped, which only
    # costs skipping
    if bloom and single and F.BOOLEAN not in ptypes:
        kwargs["bloom_filter_options"] = {top.name: {"ndv": max(1, sum(len(g) for g in groups))}}
    name = column_encoding(leaves[0], encoding) if single and not dictionary else None
    if name is not None:
        kwargs["column_encoding"] = {top.name: name}
    kwargs.update(opts)

    def write(kw: dict[str, Any]) -> bytes:
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, schema, **kw) as writer:
            for arr in groups:
                writer.write_table(pa.table([arr], schema=schema), row_group_size=max(1, len(arr)))
        written: bytes = sink.getvalue().to_pybytes()
        return written

    try:
        data = write(kwargs)
    except (pa.ArrowException, ValueError):
        if name is None:
            raise
        kwargs.pop("column_encoding")  # an encoding pyarrow refuses for this type: PLAIN is the closest layout
        data = write(kwargs)
    mini = ParquetLayout(data, clock=lay.clock, name="<re-encoded pages>")
    check_same_layout(lay.path, top.name, leaves, mini.leaves)
    return _Mini(mini, [[mini.chunk(rg, i) for i in range(len(leaves))] for rg in range(len(groups))])


def _value_encoding(lay: ParquetLayout, ch: Chunk) -> int | None:
    """The encoding of the chunk's pages that are not dictionary-encoded, None if all are.

    Dictionary fallback happens once per chunk, so the last page tells (one header read).
    """
    enc = _page_encoding(lay, ch.pages[len(ch.pages) - 1])[1]
    return None if enc in (F.PLAIN_DICTIONARY, F.RLE_DICTIONARY) else enc


def _dictionary_encoded_pages(lay: ParquetLayout, ch: Chunk) -> list[bool]:
    """Per data page: is it dictionary-encoded? (encoding_stats answer without reading headers when uniform)"""
    if ch.prefix_end == ch.start:
        return [False] * len(ch.pages)
    stats = ch.cmd.val(F.CMD_ENCODING_STATS)
    if stats is not None:
        data = {e.val(F.PES_ENCODING) for e in stats.items if e.val(F.PES_PAGE_TYPE) != F.DICTIONARY_PAGE}
        if data and data <= {F.PLAIN_DICTIONARY, F.RLE_DICTIONARY}:
            return [True] * len(ch.pages)
    return [_page_encoding(lay, p)[1] in (F.PLAIN_DICTIONARY, F.RLE_DICTIONARY) for p in ch.pages]


def _dictionary_pays(lay: ParquetLayout, ch: Chunk) -> bool:
    """Should a chunk re-encoded whole keep dictionary encoding? Yes if it had a dictionary, unless that dictionary
    holds more entries than half the chunk's values: most values are then distinct, so the dictionary saves little
    space and costs a hash per value on write and an indirection per value on read (see ``writer.py``: PLAIN
    numbers scan faster in Spark). Pages patched in place always keep the chunk's dictionary."""
    if ch.prefix_end == ch.start:
        return False
    h, _ = lay.page_header(ch.start)
    dph = h.val(F.PH_DICTIONARY_PAGE_HEADER)
    if h.val(F.PH_TYPE) != F.DICTIONARY_PAGE or dph is None:
        return True
    pays: bool = 2 * dph.val(F.DICT_NUM_VALUES) <= ch.cmd.val(F.CMD_NUM_VALUES)
    return pays


def _dictionary_size(lay: ParquetLayout, ch: Chunk) -> int:
    h, _ = lay.page_header(ch.start)
    entries: int = h.val(F.PH_DICTIONARY_PAGE_HEADER).val(F.DICT_NUM_VALUES)
    return entries


_FIXED_WIDTH = {F.INT32: 4, F.INT64: 8, F.FLOAT: 4, F.DOUBLE: 8}
_CODEC_TO_DECOMPRESS = {1: "snappy", 2: "gzip", 4: "brotli", 6: "zstd", 7: "lz4_raw"}


def _plain_fixed_width(body: bytes, n: int, physical_type: int, arrow_type: pa.DataType) -> pa.Array | None:
    """``n`` PLAIN values of a 4- or 8-byte physical type as ``arrow_type``, straight from the bytes; None where
    the Arrow type does not share the physical layout (narrow ints, ...)."""
    width = _FIXED_WIDTH.get(physical_type)
    if width is None or len(body) < n * width:
        return None
    t = arrow_type
    if pa.types.is_decimal128(t) and physical_type in (F.INT32, F.INT64):
        wide = np.empty((n, 2), dtype=np.int64)  # little-endian 128-bit two's complement
        wide[:, 0] = np.frombuffer(body, dtype=np.int32 if width == 4 else np.int64, count=n)
        wide[:, 1] = wide[:, 0] >> 63
        return pa.Array.from_buffers(t, n, [None, pa.py_buffer(wide.tobytes())])
    same_layout = ((pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t))
                   and not pa.types.is_interval(t) and t.bit_width == 8 * width
                   and pa.types.is_floating(t) == (physical_type in (F.FLOAT, F.DOUBLE)))
    if not same_layout:
        return None
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(body[:n * width])])


_DICTIONARY_TOO_LARGE = "dictionary too large to patch pages"


def _dictionary_too_large(lay: ParquetLayout, ch: Chunk, run_rows: list[int]) -> bool:
    """Is re-encoding the whole chunk cheaper than patching runs of its dictionary-encoded pages (``run_rows``: the
    rows each run re-encodes)?

    Every dictionary-encoded run re-encodes the whole dictionary first (see _encode_runs); a whole-chunk re-encode
    decodes and encodes every row instead. pyarrow encodes a row PLAIN about ten times faster than through a
    dictionary, so where the chunk would drop its dictionary (see _dictionary_pays) the whole chunk is cheaper from
    half a chunk's worth of rows on; where it keeps it, from three.
    """
    if not run_rows:
        return False
    pays = _dictionary_pays(lay, ch)
    k = _max_page_rows(ch) or 1
    lead = -(-_dictionary_size(lay, ch) // k) * k
    return sum(lead + rows for rows in run_rows) > (3 if pays else 0.5) * ch.num_rows


def _dictionary_values(lay: ParquetLayout, top: TopField, ch: Chunk, arrow_type: pa.DataType | None = None
                       ) -> pa.Array:
    """The values of a chunk's dictionary page, in dictionary order (as ``arrow_type`` where given).

    A dictionary page body is PLAIN-encoded values. Fixed-width numbers are read straight from the decompressed
    bytes; anything else is wrapped as the body of a v1 data page of a REQUIRED column (no levels) in an in-memory
    file with the same codec, which pyarrow decodes.
    """
    h, hs = lay.page_header(ch.start)
    if h.val(F.PH_TYPE) != F.DICTIONARY_PAGE:
        raise ParquetRewriteError(f"{lay.path}: the chunk of column {top.name!r} in row group {ch.rg} does not "
                                  "start with its dictionary page")
    n = h.val(F.PH_DICTIONARY_PAGE_HEADER).val(F.DICT_NUM_VALUES)
    body = lay.buf[ch.start + hs:ch.start + hs + h.val(F.PH_COMPRESSED_SIZE)]
    codec = ch.cmd.val(F.CMD_CODEC)
    leaf = lay.leaves[top.leaves[0]]
    if arrow_type is not None and leaf.physical_type in _FIXED_WIDTH and (codec == 0 or codec in _CODEC_TO_DECOMPRESS):
        raw = bytes(body) if codec == 0 else pa.decompress(
            body, decompressed_size=h.val(F.PH_UNCOMPRESSED_SIZE), codec=_CODEC_TO_DECOMPRESS[codec], asbytes=True)
        values = _plain_fixed_width(raw, n, leaf.physical_type, arrow_type)
        if values is not None:
            return values
    dph = TStruct()
    dph.put(F.DPH_NUM_VALUES, T_I32, n)
    dph.put(F.DPH_ENCODING, T_I32, F.PLAIN)
    dph.put(F.DPH_DEF_ENCODING, T_I32, F.RLE)
    dph.put(F.DPH_REP_ENCODING, T_I32, F.RLE)
    page = TStruct()
    page.put(F.PH_TYPE, T_I32, F.DATA_PAGE)
    page.put(F.PH_UNCOMPRESSED_SIZE, T_I32, h.val(F.PH_UNCOMPRESSED_SIZE))
    page.put(F.PH_COMPRESSED_SIZE, T_I32, h.val(F.PH_COMPRESSED_SIZE))
    page.put(F.PH_DATA_PAGE_HEADER, T_STRUCT, dph)
    buf = bytearray(b"PAR1")
    buf += lay.clock.encode(page)
    buf += body
    el = lay.schema[top.schema_start].copy()
    el.put(F.SE_REPETITION, T_I32, F.REQUIRED)
    cmd = ch.cmd.copy()
    cmd.drop(F.CMD_INDEX_PAGE_OFFSET, F.CMD_STATISTICS, F.CMD_ENCODING_STATS, F.CMD_BLOOM_FILTER_OFFSET,
             F.CMD_BLOOM_FILTER_LENGTH, F.CMD_SIZE_STATISTICS, F.CMD_GEOSPATIAL_STATISTICS,
             F.CMD_DICTIONARY_PAGE_OFFSET)
    cmd.put(F.CMD_ENCODINGS, T_LIST, TList(T_I32, [F.PLAIN, F.RLE]))
    cmd.put(F.CMD_NUM_VALUES, T_I64, n)
    cmd.put(F.CMD_DATA_PAGE_OFFSET, T_I64, 4)
    cmd.put(F.CMD_TOTAL_COMPRESSED_SIZE, T_I64, len(buf) - 4)
    cmd.put(F.CMD_TOTAL_UNCOMPRESSED_SIZE, T_I64, len(buf) - 4)
    return _read_single_chunk(lay, [el], cmd, n, buf)


def _read_single_chunk(lay: ParquetLayout, elements: list[TStruct], cmd: TStruct, nrows: int, buf: bytearray
                       ) -> pa.Array:
    root = lay.schema[0].copy()
    root.put(F.SE_NUM_CHILDREN, T_I32, 1)
    cc = TStruct()
    cc.put(F.CC_FILE_OFFSET, T_I64, 0)
    cc.put(F.CC_META_DATA, T_STRUCT, cmd)
    rg = TStruct()
    rg.put(F.RG_COLUMNS, T_LIST, TList(T_STRUCT, [cc]))
    rg.put(F.RG_TOTAL_BYTE_SIZE, T_I64, len(buf))
    rg.put(F.RG_NUM_ROWS, T_I64, nrows)
    fmd = TStruct()
    fmd.put(F.FMD_VERSION, T_I32, lay.fmd.val(F.FMD_VERSION, 1))
    fmd.put(F.FMD_SCHEMA, T_LIST, TList(T_STRUCT, [root] + elements))
    fmd.put(F.FMD_NUM_ROWS, T_I64, nrows)
    fmd.put(F.FMD_ROW_GROUPS, T_LIST, TList(T_STRUCT, [rg]))
    footer = lay.clock.encode(fmd)
    buf += footer + len(footer).to_bytes(4, "little") + b"PAR1"
    return _read_sub_file(bytes(buf))


def _read_sub_file(buf: bytes) -> pa.Array:
    """The first column of a one-row-group sub-file, INT96 timestamps in ``INT96_UNIT``; refuses INT96 values with
    digits below the microsecond, which re-encoding from microseconds would drop silently (Impala and Hive write
    nanoseconds; Spark and Delta write whole microseconds)."""
    sub = pq.ParquetFile(pa.BufferReader(buf), coerce_int96_timestamp_unit=F.INT96_UNIT)
    column = sub.read_row_group(0, use_threads=False).column(0).combine_chunks()
    if any(sub.metadata.schema.column(i).physical_type == "INT96" for i in range(sub.metadata.num_columns)):
        nanos = pq.ParquetFile(pa.BufferReader(buf), coerce_int96_timestamp_unit="ns")
        finer = nanos.read_row_group(0, use_threads=False).column(0).combine_chunks()
        for micros, ns in zip(_timestamp_leaves(column), _timestamp_leaves(finer)):
            us_values = micros.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
            ns_values = ns.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
            # a value outside nanoseconds' range (1677-2262) wraps in the ns read: only unwrapped ones can tell
            unwrapped = ns_values // 1000 == us_values
            if np.any(unwrapped & (ns_values % 1000 != 0)):
                raise ParquetRewriteError(
                    f"INT96 column {sub.schema_arrow.names[0]} holds timestamps finer than microseconds; rewriting "
                    "its pages would drop those digits. Rewrite the table with Spark first (it writes microseconds)"
                )
    return column


def _timestamp_leaves(array: pa.Array) -> list[pa.Array]:
    """The timestamp leaf arrays under ``array`` (itself, or inside lists, maps and structs), in schema order."""
    kind = array.type
    if pa.types.is_timestamp(kind):
        return [array]
    if pa.types.is_struct(kind):
        return [leaf for i in range(kind.num_fields) for leaf in _timestamp_leaves(array.field(i))]
    if pa.types.is_map(kind):
        return _timestamp_leaves(array.keys) + _timestamp_leaves(array.items)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _timestamp_leaves(array.flatten())
    return []


@dataclass
class _Encoded:
    """Re-encoded data pages for one run of rows, ready to splice (offsets relative to ``data``)."""

    data: bytes
    pages: list[tuple[int, int, int]]  # (offset in data, size, first row within the run)
    rows: int
    num_values: int
    uncompressed: int
    null_count: int
    stats: TStruct | None  # bounds of the new values (possibly wider: see _encode_runs)
    page_encodings: dict[tuple[int, int], int]
    encodings: list[int]
    bounds: PageBounds | None  # ColumnIndex entries of the pages
    # (dictionary page bytes, uncompressed size incl. header, entries, its encoding)
    dict_page: tuple[bytes, int, int, int] | None


def _encode_runs(lay: ParquetLayout, top: TopField, runs: list[pa.Array], nullable: bool, setup: dict[str, Any],
                 opts: dict[str, Any], dictionary: pa.Array | None, *, extend: bool = False,
                 encoding: int | None = None) -> list[_Encoded] | None:
    """Encode each of ``runs`` as data pages like the chunk's: with ``encoding`` (PLAIN by default), or as indices
    into ``dictionary`` when given.

    All runs go through one in-memory file, one row group per run. pyarrow numbers dictionary entries in order of
    first appearance, so each run is preceded by the dictionary's values (padded to whole pages by repeating its
    first value) and those leading pages are dropped: the remaining pages then index ``dictionary`` in its own
    order. With ``extend``, values missing from ``dictionary`` are numbered after it, in order of first appearance
    (the dictionary page grows). Returns None if pyarrow did not lay the pages out that way.
    """
    skip = 0
    extra: dict[str, Any] = {}
    rows_per_page = setup["rows_per_page"]
    groups = runs
    if dictionary is not None:
        k = rows_per_page
        skip = -(-len(dictionary) // k) * k
        pad = dictionary.take(pa.array(np.zeros(skip - len(dictionary), dtype=np.int64)))
        groups = [pa.concat_arrays([dictionary.cast(v.type), pad.cast(v.type), v]) for v in runs]
        extra = {"dictionary_pagesize_limit": 1 << 62, "data_page_size": 1 << 62}
    mini = _encode_mini(lay, top, groups, nullable, codec=setup["codec"], dictionary=dictionary is not None,
                        v2=setup["v2"], crc=setup["crc"], rows_per_page=rows_per_page, opts={**opts, **extra},
                        encoding=encoding)
    out = []
    for values, (mch,) in zip(runs, mini.chunks):
        # pyarrow wrote an OffsetIndex (write_page_index): the pages' first rows are its array, as ints
        first_rows: list[int] = mch.page_arrays[2].tolist()
        first = next((i for i, row in enumerate(first_rows) if row >= skip), None)
        if first is None or first_rows[first] != skip:
            return None
        real = mch.pages[first:]
        counts: dict[tuple[int, int], int] = {}
        num_values = unc = 0
        for p in real:
            key = _stats_key(*_page_encoding(mini.lay, p))
            counts[key] = counts.get(key, 0) + 1
            num_values += _page_num_values(mini.lay, p)
            unc += p.header_size + mini.lay.ensure_header(p).val(F.PH_UNCOMPRESSED_SIZE)  # read above: no I/O
        dict_page = None
        if dictionary is not None:
            if any(k[1] not in (F.PLAIN_DICTIONARY, F.RLE_DICTIONARY) for k in counts) or mch.prefix_end == mch.start:
                return None  # pyarrow fell back to PLAIN
            h, hs = mini.lay.page_header(mch.start)
            # entries are numbered by first appearance and the dictionary leads the rows: the order is ours unless
            # pyarrow merged values we keep apart (NaN payloads, ...), which shows in the count
            entries = h.val(F.PH_DICTIONARY_PAGE_HEADER).val(F.DICT_NUM_VALUES)
            if entries < len(dictionary) or (entries != len(dictionary) and not extend):
                return None
            if extend:
                # a merge of two entries (a source dictionary may repeat a value) plus one appended value would
                # leave the count unchanged: compare our entries themselves
                grown = _dictionary_values(mini.lay, mini.lay.tops[0], mch, dictionary.type)
                if not grown.slice(0, len(dictionary)).equals(dictionary.cast(grown.type)):
                    return None
            dict_page = (bytes(mini.lay.buf[mch.start:mch.prefix_end]), hs + h.val(F.PH_UNCOMPRESSED_SIZE), entries,
                         h.val(F.PH_DICTIONARY_PAGE_HEADER).val(F.DICT_ENCODING))
        base = real[0].offset
        mci = mini.lay.page_bounds(mch.cc)
        out.append(_Encoded(
            data=bytes(mini.lay.buf[base:mch.end]),
            pages=[(p.offset - base, p.size, row - skip) for p, row in zip(real, first_rows[first:])],
            rows=len(values), num_values=num_values, uncompressed=unc, null_count=values.null_count,
            stats=mch.cmd.val(F.CMD_STATISTICS), page_encodings=counts,
            encodings=list(mch.cmd.val(F.CMD_ENCODINGS).items),
            bounds=None if mci is None else mci.slice(first, len(mch.pages)),
            dict_page=dict_page))
    return out
