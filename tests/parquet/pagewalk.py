"""An independent, read-only view of Parquet pages for the tests (no engine code is imported here).

pyarrow exposes no page API, so this module decodes just enough of the Thrift compact protocol to read the
footer, walk the page headers of every column chunk, and decode OffsetIndex / ColumnIndex. It deliberately
shares nothing with ``partialcow.parquet``: a bug in the engine's Thrift codec must not hide in both.
Field ids follow parquet-format's parquet.thrift.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ChunkView",
    "FileView",
    "PageView",
    "decode_struct",
    "read_file_view",
]

# Compact protocol type ids.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)

# PageType enum.
DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = range(4)


class _Reader:
    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, ctype: int) -> Any:
        if ctype in (_TRUE, _FALSE):
            # Inside containers a bool is a whole byte (1 = true); as a field it is the type nibble itself.
            b = self.buf[self.pos]
            self.pos += 1
            return b == 1
        if ctype == _BYTE:
            b = self.buf[self.pos]
            self.pos += 1
            return b - 256 if b > 127 else b
        if ctype in (_I16, _I32, _I64):
            return self.zigzag()
        if ctype == _DOUBLE:
            (d,) = struct.unpack_from("<d", self.buf, self.pos)
            self.pos += 8
            return d
        if ctype == _BINARY:
            n = self.varint()
            out = bytes(self.buf[self.pos : self.pos + n])
            self.pos += n
            return out
        if ctype in (_LIST, _SET):
            head = self.buf[self.pos]
            self.pos += 1
            size = head >> 4
            if size == 15:
                size = self.varint()
            etype = head & 0x0F
            return [self.value(etype) for _ in range(size)]
        if ctype == _MAP:
            size = self.varint()
            if size == 0:
                return {}
            kv = self.buf[self.pos]
            self.pos += 1
            return {self.value(kv >> 4): self.value(kv & 0x0F) for _ in range(size)}
        if ctype == _STRUCT:
            return self.struct()
        raise ValueError(f"unknown compact type {ctype} at byte {self.pos}")

    def struct(self) -> dict[int, Any]:
        fields: dict[int, Any] = {}
        last = 0
        while True:
            head = self.buf[self.pos]
            self.pos += 1
            ctype = head & 0x0F
            if ctype == _STOP:
                return fields
            delta = head >> 4
            fid = last + delta if delta else self.zigzag()
            last = fid
            if ctype == _TRUE:
                fields[fid] = True
            elif ctype == _FALSE:
                fields[fid] = False
            else:
                fields[fid] = self.value(ctype)


def decode_struct(buf: bytes | memoryview, pos: int = 0) -> tuple[dict[int, Any], int]:
    """Decode one compact-protocol struct at ``pos``; returns (field id -> value, end position)."""
    r = _Reader(buf, pos)
    return r.struct(), r.pos


@dataclass(frozen=True)
class PageView:
    """One page of a column chunk: where it is, its raw bytes (header + body), and what its header says."""

    offset: int
    header_len: int
    raw: bytes
    page_type: int
    num_values: int
    num_rows: int | None  # v2 header value; None for v1 (unknown for repeated columns)
    num_nulls: int | None
    encoding: int | None
    has_crc: bool

    @property
    def is_data(self) -> bool:
        return self.page_type in (DATA_PAGE, DATA_PAGE_V2)


@dataclass(frozen=True)
class ChunkView:
    row_group: int
    column: int
    path: str
    max_rep_level_positive: bool
    num_rows: int
    pages: tuple[PageView, ...]
    meta: dict[int, Any]  # ColumnMetaData fields
    offset_index: dict[int, Any] | None
    column_index: dict[int, Any] | None

    @property
    def data_pages(self) -> list[PageView]:
        return [p for p in self.pages if p.is_data]

    def page_row_ranges(self) -> list[tuple[int, int]] | None:
        """[first_row, end_row) of each data page, from the OffsetIndex, v2 headers, or flat v1 headers."""
        data = self.data_pages
        if self.offset_index is not None:
            firsts = [loc[3] for loc in self.offset_index[1]]
            return list(zip(firsts, firsts[1:] + [self.num_rows]))
        if all(p.num_rows is not None for p in data):
            counts = [p.num_rows for p in data]
        elif not self.max_rep_level_positive:
            counts = [p.num_values for p in data]  # flat column: one value (or null) per row
        else:
            return None
        out, start = [], 0
        for c in counts:
            out.append((start, start + c))
            start += c
        return out


@dataclass(frozen=True)
class FileView:
    path: Path
    footer: dict[int, Any]
    chunks: tuple[tuple[ChunkView, ...], ...]  # [row_group][column]

    @property
    def key_value_metadata(self) -> dict[bytes, bytes]:
        return {kv[1]: kv.get(2, b"") for kv in self.footer.get(5, [])}

    @property
    def created_by(self) -> bytes | None:
        return self.footer.get(6)


def _leaf_paths(schema: list[dict[int, Any]]) -> list[tuple[str, bool]]:
    """Dotted path and 'has a repeated ancestor' of every leaf, in schema order."""
    out: list[tuple[str, bool]] = []
    pos = 1

    def walk(prefix: list[str], repeated: bool, n_children: int) -> None:
        nonlocal pos
        for _ in range(n_children):
            el = schema[pos]
            pos += 1
            name = el[4].decode()
            rep = repeated or el.get(3) == 2  # FieldRepetitionType.REPEATED
            kids = el.get(5, 0)
            if kids:
                walk(prefix + [name], rep, kids)
            else:
                out.append((".".join(prefix + [name]), rep))

    walk([], False, schema[0].get(5, 0))
    return out


def read_file_view(path: str | Path) -> FileView:
    """Parse footer, page headers and page indexes of a Parquet file (whole file read into memory; tests only)."""
    path = Path(path)
    buf = path.read_bytes()
    if buf[:4] != b"PAR1" or buf[-4:] != b"PAR1":
        raise ValueError(f"{path}: not a plaintext Parquet file")
    (flen,) = struct.unpack_from("<I", buf, len(buf) - 8)
    footer, _ = decode_struct(buf, len(buf) - 8 - flen)
    leaves = _leaf_paths(footer[2])
    groups = []
    for rg_i, rg in enumerate(footer.get(4, [])):
        chunks = []
        for col_i, cc in enumerate(rg[1]):
            md = cc[3]
            # The chunk starts at its dictionary page if any. Offsets of 0 mean "absent" in practice (pyarrow
            # writes data_page_offset 0 for an empty chunk that only holds a dictionary page).
            starts = [o for o in (md.get(11), md[9]) if o]
            start = min(starts) if starts else md[9]
            end = start + md[7]
            pages = []
            pos = start
            while pos < end:
                header, body = decode_struct(buf, pos)
                size = header[3]
                ptype = header[1]
                if ptype == DATA_PAGE_V2:
                    h = header[8]
                    nv, nr, nn, enc = h[1], h[3], h[2], h[4]
                elif ptype == DATA_PAGE:
                    h = header[5]
                    nv, nr, nn, enc = h[1], None, None, h[2]
                elif ptype == DICTIONARY_PAGE:
                    nv, nr, nn, enc = header[7][1], None, None, header[7][2]
                else:
                    nv, nr, nn, enc = 0, None, None, None
                pages.append(
                    PageView(
                        offset=pos,
                        header_len=body - pos,
                        raw=bytes(buf[pos : body + size]),
                        page_type=ptype,
                        num_values=nv,
                        num_rows=nr,
                        num_nulls=nn,
                        encoding=enc,
                        has_crc=4 in header,
                    )
                )
                pos = body + size
            if pos != end:
                raise ValueError(f"{path}: pages of row group {rg_i} column {col_i} overrun the chunk")
            oi = ci = None
            if cc.get(4) is not None:
                oi, _ = decode_struct(buf, cc[4])
            if cc.get(6) is not None:
                ci, _ = decode_struct(buf, cc[6])
            leaf, repeated = leaves[col_i]
            chunks.append(
                ChunkView(
                    row_group=rg_i,
                    column=col_i,
                    path=leaf,
                    max_rep_level_positive=repeated,
                    num_rows=rg[3],
                    pages=tuple(pages),
                    meta=md,
                    offset_index=oi,
                    column_index=ci,
                )
            )
        groups.append(tuple(chunks))
    return FileView(path=path, footer=footer, chunks=tuple(groups))


# ---------------------------------------------------------------------------------------------------------------
# Split-block Bloom filters (parquet-format BloomFilter.md): XXH64 of the PLAIN-encoded value, seed 0.

_M64 = (1 << 64) - 1
_P1, _P2, _P3, _P4, _P5 = (
    0x9E3779B185EBCA87,
    0xC2B2AE3D27D4EB4F,
    0x165667B19E3779F9,
    0x85EBCA77C2B2AE63,
    0x27D4EB2F165667C5,
)
_SALT = (0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D, 0x705495C7, 0x2DF1424B, 0x9EFC4947, 0x5C6BFB31)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M64, 31) * _P1) & _M64


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 in pure Python (slow; test-sized inputs only)."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed, (seed - _P1) & _M64]
        while i + 32 <= n:
            for j in range(4):
                v[j] = _round(v[j], int.from_bytes(data[i + 8 * j : i + 8 * j + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M64
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _M64
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i : i + 4], "little") * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


@dataclass(frozen=True)
class BloomFilter:
    bitset: bytes

    def might_contain(self, plain_value: bytes) -> bool:
        """Whether the PLAIN encoding of a value (raw bytes for BYTE_ARRAY, little-endian for numbers) may be in."""
        h = xxh64(plain_value)
        blocks = len(self.bitset) // 32
        b = ((h >> 32) * blocks) >> 32
        key = h & 0xFFFFFFFF
        for i, salt in enumerate(_SALT):
            word = int.from_bytes(self.bitset[32 * b + 4 * i : 32 * b + 4 * i + 4], "little")
            if not word >> (((key * salt) & 0xFFFFFFFF) >> 27) & 1:
                return False
        return True


def read_bloom_filter(path: str | Path, chunk: ChunkView) -> BloomFilter | None:
    """The chunk's Bloom filter, or None if it has none."""
    offset = chunk.meta.get(14)
    if offset is None:
        return None
    with open(path, "rb") as f:
        f.seek(offset)
        head = f.read(256)
        header, pos = decode_struct(head)
        f.seek(offset + pos)
        return BloomFilter(f.read(header[1]))
