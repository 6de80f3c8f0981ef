"""ColumnIndex (per-page min/max/null statistics) in bulk: plain sequences in, Thrift compact bytes out, and back.

A spliced chunk's ColumnIndex keeps the entries of its copied pages and takes the re-encoded pages' entries from
the in-memory file pyarrow wrote. Decoding thousands of entries through the generic struct codec cost a quarter of
a small rewrite; this module reads and writes the layout every writer produces::

    ColumnIndex { 1: list<bool> null_pages, 2: list<binary> min_values, 3: list<binary> max_values,
                  4: i32 boundary_order, 5: optional list<i64> null_counts, ... }

Later fields (level histograms) are not kept: they describe the old pages. Any other layout decodes to None and is
left to the generic codec (see ``from_struct``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partialcow.parquet import _format as F
from partialcow.parquet._offset_index import _varints
from partialcow.parquet._thrift import T_BINARY, T_FALSE, T_I32, T_I64, T_LIST, T_TRUE, TStruct, _put_varint

__all__ = ["PageBounds", "decode_column_index", "encode_column_index", "from_struct"]

_LIST_FIELD = (1 << 4) | T_LIST  # the next field (delta 1) is a list
_I32_FIELD = (1 << 4) | T_I32
_TRUE = 1  # a bool list element: 1 is true; writers use 0 or 2 for false


@dataclass
class PageBounds:
    """ColumnIndex entries of one chunk, one per data page, in page order."""

    null_pages: np.ndarray  # uint8, 1 where the page holds only nulls
    mins: list[bytes]
    maxs: list[bytes]
    null_counts: np.ndarray | None  # int64, or None when the writer left them out
    boundary_order: int = F.UNORDERED

    def __len__(self) -> int:
        return len(self.mins)

    def slice(self, lo: int, hi: int) -> PageBounds:
        return PageBounds(self.null_pages[lo:hi], self.mins[lo:hi], self.maxs[lo:hi],
                          None if self.null_counts is None else self.null_counts[lo:hi], self.boundary_order)

    @staticmethod
    def concat(parts: list[PageBounds]) -> PageBounds:
        """The entries of ``parts`` in order (null counts only when every part has them; order left UNORDERED)."""
        counts = None
        if parts and all(p.null_counts is not None for p in parts):
            counts = np.concatenate([p.null_counts for p in parts])
        return PageBounds(np.concatenate([p.null_pages for p in parts]) if parts else np.zeros(0, np.uint8),
                          [v for p in parts for v in p.mins], [v for p in parts for v in p.maxs], counts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        value = shift = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def list_header(self, expected_types: tuple[int, ...]) -> int | None:
        """Size of a list whose header is next, or None when its element type is not one of ``expected_types``."""
        b = self.byte()
        if b & 0x0F not in expected_types:
            return None
        return self.varint() if b >> 4 == 0x0F else b >> 4

    def binaries(self, n: int) -> list[bytes]:
        data, pos = self.data, self.pos
        if n and data[pos] < 0x80:  # fixed width (numbers): every element is [width][width bytes]
            width = data[pos]
            stride = width + 1
            raw = np.frombuffer(data, dtype=np.uint8, count=n * stride, offset=pos) \
                if pos + n * stride <= len(data) else None
            if raw is not None and (raw[::stride] == width).all():
                self.pos = pos + n * stride
                return [data[s + 1:s + stride] for s in range(pos, pos + n * stride, stride)]
        out = []
        for _ in range(n):
            length = self.varint()
            out.append(data[self.pos:self.pos + length])
            self.pos += length
        return out

    def zigzags(self, n: int) -> np.ndarray:
        body = np.frombuffer(self.data, dtype=np.uint8, offset=self.pos)
        ends = np.flatnonzero(body < 0x80)[:n]
        if len(ends) < n:
            raise IndexError("truncated list")
        if not n:
            return np.zeros(0, dtype=np.int64)
        if ends[-1] >= 10 * n:  # a varint longer than 64 bits: not ours to read
            raise ValueError("malformed varint")
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        lengths = ends - starts + 1
        raw = np.zeros(n, dtype=np.uint64)
        for k in range(int(lengths.max())):  # 7 bits at a time, all values at once
            more = lengths > k
            raw[more] |= (body[starts[more] + k].astype(np.uint64) & np.uint64(0x7F)) << np.uint64(7 * k)
        self.pos += int(ends[-1]) + 1
        return (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)


def decode_column_index(data: bytes) -> PageBounds | None:
    """Decode a ColumnIndex of the common layout; None when it has another layout (use the generic codec).

    >>> enc = encode_column_index(PageBounds(np.array([0, 1], np.uint8), [b"a", b""], [b"k", b""], np.array([0, 9])))
    >>> b = decode_column_index(enc)
    >>> b.null_pages.tolist(), b.mins, b.maxs, b.null_counts.tolist(), b.boundary_order
    ([0, 1], [b'a', b''], [b'k', b''], [0, 9], 0)
    """
    r = _Reader(bytes(data))
    try:
        if r.byte() != _LIST_FIELD or (n := r.list_header((T_TRUE, T_FALSE))) is None:
            return None
        null_pages = (np.frombuffer(r.data, dtype=np.uint8, count=n, offset=r.pos) == _TRUE).astype(np.uint8)
        r.pos += n
        bounds = []
        for _ in range(2):
            if r.byte() != _LIST_FIELD or r.list_header((T_BINARY,)) != n:
                return None
            bounds.append(r.binaries(n))
        if r.byte() != _I32_FIELD:
            return None
        raw = r.varint()
        order = (raw >> 1) ^ -(raw & 1)
        counts = None
        if r.pos < len(r.data) and r.data[r.pos] == _LIST_FIELD:
            r.pos += 1
            if r.list_header((T_I64,)) != n:
                return None
            counts = r.zigzags(n)
    except (IndexError, ValueError):
        return None
    return PageBounds(null_pages, bounds[0], bounds[1], counts, order)


def _list_header(n: int, etype: int) -> bytes:
    if n < 15:
        return bytes([_LIST_FIELD, (n << 4) | etype])
    out = bytearray([_LIST_FIELD, 0xF0 | etype])
    _put_varint(out, n)
    return bytes(out)


def _binaries(values: list[bytes]) -> bytes:
    widths = {len(v) for v in values}
    if len(widths) == 1 and (width := widths.pop()) < 0x80:
        prefix = bytes([width])
        return prefix + prefix.join(values) if values else b""
    out = bytearray()
    for v in values:
        _put_varint(out, len(v))
        out += v
    return bytes(out)


def encode_column_index(bounds: PageBounds) -> bytes:
    """Thrift compact bytes of a ColumnIndex with these entries (null_pages written as true=1, false=2)."""
    n = len(bounds)
    parts = [_list_header(n, T_TRUE), np.where(bounds.null_pages == 1, 1, 2).astype(np.uint8).tobytes(),
             _list_header(n, T_BINARY), _binaries(bounds.mins), _list_header(n, T_BINARY), _binaries(bounds.maxs)]
    order = bounds.boundary_order
    field = bytearray([_I32_FIELD])
    _put_varint(field, (order << 1) ^ (order >> 31))
    parts.append(bytes(field))
    if bounds.null_counts is not None:
        groups, lengths = _varints(np.asarray(bounds.null_counts, dtype=np.int64))
        keep = np.arange(10)[None, :] < lengths[:, None]
        parts += [_list_header(n, T_I64), groups[keep].tobytes()]
    parts.append(b"\x00")
    return b"".join(parts)


def from_struct(ci: TStruct) -> PageBounds:
    """The generic decoder's ColumnIndex as :class:`PageBounds`."""
    counts = ci.val(F.CI_NULL_COUNTS)
    return PageBounds(np.array([1 if v == _TRUE else 0 for v in ci.val(F.CI_NULL_PAGES).items],
                               dtype=np.uint8),
                      list(ci.val(F.CI_MIN_VALUES).items), list(ci.val(F.CI_MAX_VALUES).items),
                      None if counts is None else np.array(counts.items, dtype=np.int64),
                      ci.val(F.CI_BOUNDARY_ORDER, F.UNORDERED))
