"""A small, lossless Thrift compact-protocol codec for Parquet metadata.

Structs decode into :class:`TStruct` (field id -> (compact type, value), in wire order), so fields this module
does not know (newer parquet-format versions) survive a decode/encode round trip unchanged. Only the fields the
page engine must rebuild are ever touched.
"""

from __future__ import annotations

import struct as _struct
from typing import Any

__all__ = [
    "T_BINARY",
    "T_BYTE",
    "T_DOUBLE",
    "T_FALSE",
    "T_I16",
    "T_I32",
    "T_I64",
    "T_LIST",
    "T_MAP",
    "T_SET",
    "T_STRUCT",
    "T_TRUE",
    "TList",
    "TMap",
    "TStruct",
    "ThriftError",
    "decode",
    "decode_struct",
    "encode",
]

T_TRUE, T_FALSE, T_BYTE, T_I16, T_I32, T_I64, T_DOUBLE, T_BINARY, T_LIST, T_SET, T_MAP, T_STRUCT = range(1, 13)
_DOUBLE = _struct.Struct("<d")


class ThriftError(ValueError):
    """Malformed Thrift compact-protocol bytes."""


class TList:
    """A Thrift list or set: element type plus items (bool elements keep their raw wire byte, 1 = true)."""

    __slots__ = ("etype", "is_set", "items")

    def __init__(self, etype: int, items: list[Any], is_set: bool = False) -> None:
        self.etype, self.items, self.is_set = etype, items, is_set

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TList) and (self.etype, self.items) == (other.etype, other.items)

    def __repr__(self) -> str:
        return f"TList({self.etype}, {self.items!r})"


class TMap:
    """A Thrift map: key type, value type and (key, value) pairs in wire order."""

    __slots__ = ("ktype", "pairs", "vtype")

    def __init__(self, ktype: int, vtype: int, pairs: list[tuple[Any, Any]]) -> None:
        self.ktype, self.vtype, self.pairs = ktype, vtype, pairs

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TMap) and (self.ktype, self.vtype, self.pairs) == (
            other.ktype, other.vtype, other.pairs)


class TStruct(dict[Any, Any]):
    """field id -> (compact type, value). ``get``-style helpers read values; ``put`` keeps ids ascending."""

    def val(self, fid: int, default: Any = None) -> Any:
        entry = dict.get(self, fid)
        return default if entry is None else entry[1]

    def put(self, fid: int, ttype: int, value: Any) -> None:
        if ttype in (T_TRUE, T_FALSE):
            ttype = T_TRUE if value else T_FALSE
        if fid in self:
            self[fid] = (ttype, value)
            return
        items = list(self.items())
        self.clear()
        inserted = False
        for k, v in items:
            if not inserted and k > fid:
                self[fid] = (ttype, value)
                inserted = True
            self[k] = v
        if not inserted:
            self[fid] = (ttype, value)

    def drop(self, *fids: int) -> None:
        for fid in fids:
            self.pop(fid, None)

    def copy(self) -> TStruct:  # shallow: nested values are shared until replaced with put()
        return TStruct(self)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise ThriftError("truncated varint") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ThriftError("varint too long")


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _read_value(buf: bytes, pos: int, ttype: int) -> tuple[Any, int]:
    if ttype in (T_I32, T_I64, T_I16):
        raw = buf[pos]
        if raw < 0x80:  # one-byte varint: the common case
            return (raw >> 1) ^ -(raw & 1), pos + 1
        raw, pos = _varint(buf, pos)
        return _zigzag(raw), pos
    if ttype == T_BINARY:
        n, pos = _varint(buf, pos)
        end = pos + n
        if end > len(buf):
            raise ThriftError("truncated binary")
        return bytes(buf[pos:end]), end
    if ttype == T_STRUCT:
        return _read_struct(buf, pos)
    if ttype in (T_LIST, T_SET):
        head = buf[pos]
        pos += 1
        size, etype = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(buf, pos)
        items = []
        for _ in range(size):
            item, pos = _read_value(buf, pos, etype)
            items.append(item)
        return TList(etype, items, ttype == T_SET), pos
    if ttype in (T_TRUE, T_FALSE, T_BYTE):  # bools inside collections are one byte
        return buf[pos], pos + 1
    if ttype == T_DOUBLE:
        return _DOUBLE.unpack_from(buf, pos)[0], pos + 8
    if ttype == T_MAP:
        size, pos = _varint(buf, pos)
        if size == 0:
            return TMap(0, 0, []), pos
        kv = buf[pos]
        pos += 1
        ktype, vtype = kv >> 4, kv & 0x0F
        pairs = []
        for _ in range(size):
            k, pos = _read_value(buf, pos, ktype)
            v, pos = _read_value(buf, pos, vtype)
            pairs.append((k, v))
        return TMap(ktype, vtype, pairs), pos
    raise ThriftError(f"unknown compact type {ttype}")


def _read_struct(buf: bytes, pos: int) -> tuple[TStruct, int]:
    out = TStruct()
    last = 0
    while True:
        try:
            head = buf[pos]
        except IndexError:
            raise ThriftError("truncated struct") from None
        pos += 1
        if head == 0:
            return out, pos
        ttype, delta = head & 0x0F, head >> 4
        if delta:
            fid = last + delta
        else:
            raw, pos = _varint(buf, pos)
            fid = _zigzag(raw)
        if ttype in (T_I32, T_I64):
            raw = buf[pos]
            if raw < 0x80:
                out[fid] = (ttype, (raw >> 1) ^ -(raw & 1))
                pos += 1
            else:
                raw, pos = _varint(buf, pos)
                out[fid] = (ttype, (raw >> 1) ^ -(raw & 1))
        elif ttype == T_TRUE:
            out[fid] = (T_TRUE, True)
        elif ttype == T_FALSE:
            out[fid] = (T_FALSE, False)
        else:
            value, pos = _read_value(buf, pos, ttype)
            out[fid] = (ttype, value)
        last = fid


def decode_struct(buf: bytes, pos: int = 0) -> tuple[TStruct, int]:
    """Decode one struct starting at ``pos``; returns it and the position just after it.

    >>> s, end = decode_struct(bytes([0x15, 0x04, 0x00]))
    >>> s.val(1), end
    (2, 3)
    """
    try:
        return _read_struct(buf, pos)
    except IndexError as exc:  # a collection header past the end
        raise ThriftError("truncated data") from exc


def decode(buf: bytes) -> TStruct:
    """Decode a whole buffer holding exactly one struct."""
    out, _ = decode_struct(buf, 0)
    return out


def _put_varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zz(n: int, bits: int) -> int:
    return ((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1)


def _write_value(out: bytearray, ttype: int, value: Any) -> None:
    if ttype in (T_I32, T_I16):
        _put_varint(out, _zz(value, 32))
    elif ttype == T_I64:
        _put_varint(out, _zz(value, 64))
    elif ttype == T_BINARY:
        _put_varint(out, len(value))
        out += value
    elif ttype == T_STRUCT:
        _write_struct(out, value)
    elif ttype in (T_LIST, T_SET):
        n = len(value.items)
        if n < 15:
            out.append((n << 4) | value.etype)
        else:
            out.append(0xF0 | value.etype)
            _put_varint(out, n)
        for item in value.items:
            _write_value(out, value.etype, item)
    elif ttype in (T_TRUE, T_FALSE, T_BYTE):
        out.append(value & 0xFF)
    elif ttype == T_DOUBLE:
        out += _DOUBLE.pack(value)
    elif ttype == T_MAP:
        _put_varint(out, len(value.pairs))
        if value.pairs:
            out.append((value.ktype << 4) | value.vtype)
            for k, v in value.pairs:
                _write_value(out, value.ktype, k)
                _write_value(out, value.vtype, v)
    else:
        raise ThriftError(f"unknown compact type {ttype}")


def _write_struct(out: bytearray, st: TStruct) -> None:
    last = 0
    for fid, (ttype, value) in st.items():
        if ttype in (T_TRUE, T_FALSE):
            ttype = T_TRUE if value else T_FALSE
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | ttype)
        else:
            out.append(ttype)
            _put_varint(out, _zz(fid, 16))
        last = fid
        if ttype in (T_I32, T_I64, T_I16):
            z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF  # zigzag; same bytes for i16/i32 in range
            if z < 0x80:
                out.append(z)
            else:
                _put_varint(out, z)
        elif ttype == T_BINARY:
            _put_varint(out, len(value))
            out += value
        elif ttype == T_STRUCT:
            _write_struct(out, value)
        elif ttype != T_TRUE and ttype != T_FALSE:
            _write_value(out, ttype, value)
    out.append(0)


def encode(st: TStruct) -> bytes:
    """Encode a struct (the inverse of :func:`decode`).

    >>> encode(decode(bytes([0x15, 0x04, 0x00]))) == bytes([0x15, 0x04, 0x00])
    True
    """
    out = bytearray()
    _write_struct(out, st)
    return bytes(out)
