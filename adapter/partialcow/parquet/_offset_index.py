"""OffsetIndex (page locations) in bulk: numpy arrays in, Thrift compact bytes out, and back.

A file with 2,000-row pages has tens of thousands of page locations; every copied chunk's OffsetIndex must be
re-encoded with shifted offsets. Decoding and encoding them one struct at a time in Python cost about as much as
the rest of a small rewrite, so this module handles the one layout every writer produces::

    OffsetIndex { 1: list<PageLocation { 1: i64 offset, 2: i32 compressed_page_size, 3: i64 first_row_index }>,
                  ... any later fields, kept as bytes }

Anything else (other field order, extra PageLocation fields) is left to the generic codec in ``_thrift``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from partialcow.parquet import _format as F
from partialcow.parquet._thrift import T_LIST, T_STRUCT, TList, TStruct

__all__ = ["PageLocations", "count_page_locations", "decode_page_locations", "encode_offset_index",
           "encode_offset_indexes", "from_struct"]

_FIELD1_LIST = 0x19  # field delta 1, type list
_STRUCT_LIST_LONG = 0xFC  # list of structs, size as a following varint
_OFFSET_HDR, _SIZE_HDR, _FIRST_HDR, _STOP = 0x16, 0x15, 0x16, 0x00  # i64 / i32 / i64 field headers, delta 1
_TOKENS = 7  # per PageLocation: header, varint, header, varint, header, varint, stop
_SMALL = 32  # up to this many pages a plain Python loop beats numpy's per-call overhead


@dataclass
class PageLocations:
    """Page locations of one column chunk, plus the OffsetIndex's later fields as encoded bytes (stop included)."""

    offsets: np.ndarray  # int64, absolute file offsets
    sizes: np.ndarray  # int64, compressed page sizes (header included)
    first_rows: np.ndarray  # int64, first row of each page within the row group
    tail: bytes = bytes([_STOP])

    def __len__(self) -> int:
        return len(self.offsets)


def _varint_at(buf: np.ndarray, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = int(buf[pos])
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7


def count_page_locations(data: bytes) -> int | None:
    """The number of pages an OffsetIndex lists, read from its list header alone; None for another layout.

    Counting the pages of a copied chunk (for the report) then costs a few bytes, not a decode.

    >>> enc = encode_offset_index(PageLocations(np.array([4, 900]), np.array([896, 1000]), np.array([0, 2000])))
    >>> count_page_locations(enc), count_page_locations(b"\\x15\\x00")
    (2, None)
    """
    if len(data) < 2 or data[0] != _FIELD1_LIST or data[1] & 0x0F != T_STRUCT:
        return None
    if data[1] >> 4 != 0x0F:
        return data[1] >> 4
    return _varint_at(np.frombuffer(data, dtype=np.uint8), 2)[0]


def decode_page_locations(data: bytes) -> PageLocations | None:
    """Decode an OffsetIndex of the common layout; None when it has another layout (use the generic codec).

    >>> enc = encode_offset_index(PageLocations(np.array([4, 900]), np.array([896, 1000]), np.array([0, 2000])))
    >>> loc = decode_page_locations(enc)
    >>> loc.offsets.tolist(), loc.sizes.tolist(), loc.first_rows.tolist(), loc.tail
    ([4, 900], [896, 1000], [0, 2000], b'\\x00')
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    if len(buf) < 2 or buf[0] != _FIELD1_LIST:
        return None
    if buf[1] & 0x0F != T_STRUCT:
        return None
    if buf[1] >> 4 == 0x0F:
        n, pos = _varint_at(buf, 2)
    else:
        n, pos = int(buf[1] >> 4), 2
    if n <= _SMALL:
        return _decode_small(data, pos, n)
    body = buf[pos:]
    ends = np.flatnonzero(body < 0x80)
    if len(ends) < _TOKENS * n:
        return None
    ends = ends[:_TOKENS * n]
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = (ends - starts + 1).reshape(n, _TOKENS)
    heads = body[ends].reshape(n, _TOKENS)
    if not ((lengths[:, [0, 2, 4, 6]] == 1).all() and (heads[:, 0] == _OFFSET_HDR).all()
            and (heads[:, 2] == _SIZE_HDR).all() and (heads[:, 4] == _FIRST_HDR).all()
            and (heads[:, 6] == _STOP).all() and (lengths[:, [1, 3, 5]] <= 10).all()):
        return None
    values = []
    for column in (1, 3, 5):
        first = starts.reshape(n, _TOKENS)[:, column]
        length = lengths[:, column]
        raw = np.zeros(n, dtype=np.uint64)
        for k in range(int(length.max(initial=1))):
            more = length > k
            raw[more] |= (body[first[more] + k].astype(np.uint64) & np.uint64(0x7F)) << np.uint64(7 * k)
        values.append(((raw >> np.uint64(1)).astype(np.int64)) ^ -((raw & np.uint64(1)).astype(np.int64)))
    end = pos + int(ends[-1]) + 1
    return PageLocations(values[0], values[1], values[2], bytes(data[end:]))


def _decode_small(data: bytes, pos: int, n: int) -> PageLocations | None:
    """The same layout, struct by struct: faster than numpy's per-call overhead for a handful of pages."""
    columns: list[list[int]] = [[], [], []]
    try:
        for _ in range(n):
            for header, column in zip((_OFFSET_HDR, _SIZE_HDR, _FIRST_HDR), columns):
                if data[pos] != header:
                    return None
                raw = shift = 0
                pos += 1
                while True:
                    byte = data[pos]
                    raw |= (byte & 0x7F) << shift
                    pos += 1
                    if byte < 0x80:
                        break
                    shift += 7
                column.append((raw >> 1) ^ -(raw & 1))
            if data[pos] != _STOP:
                return None
            pos += 1
    except IndexError:
        return None
    offsets, sizes, first_rows = (np.array(c, dtype=np.int64) for c in columns)
    return PageLocations(offsets, sizes, first_rows, bytes(data[pos:]))


def from_struct(oi: TStruct, encode: Callable[[TStruct], bytes]) -> PageLocations:
    """The generic decoder's OffsetIndex as arrays; ``encode`` (a ThriftClock's) re-encodes its later fields."""
    items = oi.val(F.OI_PAGE_LOCATIONS).items
    rest = oi.copy()
    rest.put(F.OI_PAGE_LOCATIONS, T_LIST, TList(T_STRUCT, []))
    return PageLocations(
        np.array([loc.val(F.PL_OFFSET) for loc in items], dtype=np.int64),
        np.array([loc.val(F.PL_COMPRESSED_PAGE_SIZE) for loc in items], dtype=np.int64),
        np.array([loc.val(F.PL_FIRST_ROW_INDEX) for loc in items], dtype=np.int64),
        encode(rest)[2:],  # an empty field 1 is two bytes (header, list header): what follows is the tail
    )


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints of int64 ``values``: (n x 10 byte matrix, lengths)."""
    v = values.astype(np.int64)
    zz = ((v << 1) ^ (v >> 63)).view(np.uint64)
    groups = np.zeros((len(v), 10), dtype=np.uint8)
    # only as many 7-bit groups as the largest value needs (offsets: 4, sizes: 2-3)
    width = max(1, -(-int(zz.max(initial=0)).bit_length() // 7))
    rest = zz.copy()
    for k in range(width):
        groups[:, k] = (rest & np.uint64(0x7F)).astype(np.uint8)
        rest >>= np.uint64(7)
    # bytes needed: up to the highest non-zero 7-bit group (at least one)
    lengths = np.where(zz == 0, 1, width - np.argmax(groups[:, width - 1::-1] != 0, axis=1))
    cont = np.arange(10)[None, :] < (lengths[:, None] - 1)
    groups |= (cont * 0x80).astype(np.uint8)
    return groups, lengths


def _list_head(n: int) -> bytes:
    head = bytearray([_FIELD1_LIST])
    if n < 15:
        head.append((n << 4) | T_STRUCT)
    else:
        head.append(_STRUCT_LIST_LONG)
        while n >= 0x80:
            head.append((n & 0x7F) | 0x80)
            n >>= 7
        head.append(n)
    return bytes(head)


def _encode_pages(offsets: np.ndarray, sizes: np.ndarray, first_rows: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The PageLocation structs of all these pages back to back, and each struct's length in bytes."""
    n = len(offsets)
    row = np.zeros((n, 34), dtype=np.uint8)
    keep = np.zeros((n, 34), dtype=bool)
    col = 0
    for header, values in ((_OFFSET_HDR, offsets), (_SIZE_HDR, sizes), (_FIRST_HDR, first_rows)):
        row[:, col] = header
        keep[:, col] = True
        groups, lengths = _varints(values)
        row[:, col + 1:col + 11] = groups
        keep[:, col + 1:col + 11] = np.arange(10)[None, :] < lengths[:, None]
        col += 11
    keep[:, 33] = True  # stop byte (0)
    return row[keep].tobytes(), keep.sum(axis=1)


def encode_offset_index(locations: PageLocations) -> bytes:
    """Thrift compact bytes of an OffsetIndex with these page locations and the kept later fields."""
    n = len(locations)
    if n > _SMALL:
        return _list_head(n) + _encode_pages(locations.offsets, locations.sizes, locations.first_rows)[0] \
            + locations.tail
    head = bytearray(_list_head(n))
    for values in zip(locations.offsets.tolist(), locations.sizes.tolist(), locations.first_rows.tolist()):
        for header, value in zip((_OFFSET_HDR, _SIZE_HDR, _FIRST_HDR), values):
            head.append(header)
            raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
            while raw >= 0x80:
                head.append((raw & 0x7F) | 0x80)
                raw >>= 7
            head.append(raw)
        head.append(_STOP)
    return bytes(head) + locations.tail


def encode_offset_indexes(all_locations: list[PageLocations]) -> list[bytes]:
    """``encode_offset_index`` of each, with one numpy pass over all their pages: a file rewrite re-encodes the
    OffsetIndex of every column chunk, mostly a handful of pages each, and per-call overhead dominated.

    >>> one = PageLocations(np.array([4, 900]), np.array([896, 1000]), np.array([0, 2000]))
    >>> encode_offset_indexes([one, one]) == [encode_offset_index(one)] * 2
    True
    """
    if not all_locations:
        return []
    counts = np.array([len(loc) for loc in all_locations], dtype=np.int64)
    body, lengths = _encode_pages(*(np.concatenate([getattr(loc, name) for loc in all_locations])
                                    for name in ("offsets", "sizes", "first_rows")))
    page_ends = np.concatenate([[0], np.cumsum(lengths)])
    bounds = page_ends[np.concatenate([[0], np.cumsum(counts)])].tolist()
    return [_list_head(len(loc)) + body[a:b] + loc.tail
            for loc, a, b in zip(all_locations, bounds[:-1], bounds[1:])]
