"""Delta deletion vectors: the row positions a file's deletion vector removes, read without a JVM.

A rewrite of a data file that carries a deletion vector must leave those rows out of the new file (the remove action
takes the vector with it, so they would otherwise come back). The rewrite tasks read the vector themselves, from the
descriptor in the log: stored inline (``i``, Z85 text), in a file next to the data (``u``, named by a Z85-encoded
UUID) or at an absolute path (``p``). The format (Delta's PROTOCOL.md, "Deletion Vector Format"): a file version
byte, then per vector a big-endian size, the serialised bitmap and its CRC-32; the bitmap is a magic number and a
64-bit RoaringBitmap in the portable format, whose 32-bit buckets are standard RoaringBitmaps (array, bitmap and run
containers).
"""

from __future__ import annotations

import os
import struct
import uuid
import zlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np

from partialcow.exceptions import CommitError

__all__ = ["decode_bitmap_array", "deleted_positions", "deletion_vector_path", "z85_decode"]

_PORTABLE = 1681511377  # the format Delta writes: 64-bit RoaringBitmap, portable serialisation
_NATIVE = 1681511376  # Delta's older array format: a count, then per 32-bit bucket its size and bitmap
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(_Z85)}
_COOKIE_NO_RUNS = 12346
_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_MAX = 4096


def z85_decode(text: str) -> bytes:
    """Z85 text (Delta's Base85 variant) -> bytes; trailing padding of a length that is not a multiple of 5 is
    decoded as Delta's codec does (the caller cuts the result to the size it knows).

    >>> z85_decode("HelloWorld")
    b'\\x86O\\xd2o\\xb5Y\\xf7['
    """
    out = bytearray()
    for start in range(0, len(text), 5):
        chunk = text[start:start + 5].ljust(5, _Z85[-1])
        value = 0
        for ch in chunk:
            try:
                value = value * 85 + _Z85_VALUE[ch]
            except KeyError:
                raise CommitError(f"deletion vector descriptor holds {ch!r}, which is not Z85") from None
        out += (value & 0xFFFFFFFF).to_bytes(4, "big")
    return bytes(out)


def deletion_vector_path(descriptor: Mapping[str, Any], table_root: str) -> str:
    """The file holding a ``u`` or ``p`` deletion vector, as a local path.

    >>> deletion_vector_path({"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^"}, "/t")
    '/t/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin'
    """
    kind, text = descriptor["storageType"], descriptor["pathOrInlineDv"]
    if kind == "p":
        parsed = urlparse(text)
        return unquote(parsed.path) if parsed.scheme in ("file", "") else text
    if kind != "u":
        raise CommitError(f"deletion vector of storage type {kind!r} has no file")
    prefix, encoded = text[:-20], text[-20:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded)[:16])}.bin"
    return os.path.join(table_root, prefix, name) if prefix else os.path.join(table_root, name)


def deleted_positions(descriptor: Mapping[str, Any], table_root: str) -> np.ndarray:
    """The sorted row positions (int64) the deletion vector ``descriptor`` (an add action's ``deletionVector``)
    removes from its data file; ``table_root`` is the table's local folder.

    >>> dv = {"storageType": "i", "pathOrInlineDv": "^Bg9^0rr910000000000iXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
    ...       "sizeInBytes": 44, "cardinality": 6}
    >>> deleted_positions(dv, "/unused").tolist()
    [3, 4, 7, 11, 18, 29]
    """
    size = int(descriptor["sizeInBytes"])
    if descriptor["storageType"] == "i":
        data = z85_decode(descriptor["pathOrInlineDv"])[:size]
    else:
        path = deletion_vector_path(descriptor, table_root)
        offset = int(descriptor.get("offset") or 0)
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                head = handle.read(4)
                data = handle.read(size)
                checksum = handle.read(4)
        except OSError as exc:
            raise CommitError(f"cannot read deletion vector {path}: {exc}") from exc
        if len(head) < 4 or struct.unpack(">i", head)[0] != size or len(data) != size or len(checksum) != 4:
            raise CommitError(f"deletion vector at {path} offset {offset} is not {size} bytes as the log says")
        if zlib.crc32(data) != struct.unpack(">I", checksum)[0]:
            raise CommitError(f"deletion vector at {path} offset {offset} fails its checksum")
    positions = decode_bitmap_array(data)
    expected = descriptor.get("cardinality")
    if expected is not None and len(positions) != int(expected):
        raise CommitError(f"deletion vector holds {len(positions)} positions, its descriptor says {expected}")
    return positions


def decode_bitmap_array(data: bytes) -> np.ndarray:
    """Delta's serialised bitmap (magic number + 64-bit RoaringBitmap, little-endian) -> sorted int64 positions.

    >>> blob = bytes.fromhex("d1d339640100000000000000000000003a3000000100000000000000100000002a00")
    >>> decode_bitmap_array(blob).tolist()
    [42]
    """
    magic = struct.unpack_from("<I", data, 0)[0] if len(data) >= 8 else None
    parts = []
    if magic == _PORTABLE:
        (buckets,) = struct.unpack_from("<Q", data, 4)
        pos = 12
        for _ in range(buckets):
            (high,) = struct.unpack_from("<I", data, pos)
            low, pos = _roaring32(data, pos + 4)
            parts.append((np.int64(high) << 32) | low.astype(np.int64))
    elif magic == _NATIVE:
        (buckets,) = struct.unpack_from("<I", data, 4)
        pos = 8
        for high in range(buckets):
            (size,) = struct.unpack_from("<I", data, pos)
            low, _ = _roaring32(data, pos + 4)
            pos += 4 + size
            parts.append((np.int64(high) << 32) | low.astype(np.int64))
    else:
        raise CommitError("deletion vector does not start with one of Delta's magic numbers: unknown format")
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _roaring32(data: bytes, pos: int) -> tuple[np.ndarray, int]:
    """One standard 32-bit RoaringBitmap at ``pos`` -> (sorted uint32 values, position after it)."""
    (cookie,) = struct.unpack_from("<I", data, pos)
    pos += 4
    if cookie & 0xFFFF == _COOKIE:
        size = (cookie >> 16) + 1
        run_flags = np.unpackbits(np.frombuffer(data, np.uint8, (size + 7) // 8, pos), bitorder="little")[:size]
        pos += (size + 7) // 8
    elif cookie == _COOKIE_NO_RUNS:
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        run_flags = np.zeros(size, dtype=np.uint8)
    else:
        raise CommitError(f"deletion vector holds an unknown RoaringBitmap cookie {cookie}")
    header = np.frombuffer(data, "<u2", 2 * size, pos).reshape(size, 2)
    pos += 4 * size
    if cookie == _COOKIE_NO_RUNS or size >= _NO_OFFSET_THRESHOLD:
        pos += 4 * size  # container offsets: the containers follow in order anyway
    values = []
    for (key, card_minus_one), is_run in zip(header.tolist(), run_flags.tolist()):
        base = np.uint32(key) << np.uint32(16)
        if is_run:
            (runs,) = struct.unpack_from("<H", data, pos)
            pairs = np.frombuffer(data, "<u2", 2 * runs, pos + 2).reshape(runs, 2).astype(np.uint32)
            pos += 2 + 4 * runs
            low = np.concatenate([np.arange(s, s + n + 1, dtype=np.uint32) for s, n in pairs]) if runs else \
                np.zeros(0, np.uint32)
        elif card_minus_one + 1 > _ARRAY_MAX:
            bits = np.unpackbits(np.frombuffer(data, np.uint8, 8192, pos), bitorder="little")
            pos += 8192
            low = np.flatnonzero(bits).astype(np.uint32)
        else:
            low = np.frombuffer(data, "<u2", card_minus_one + 1, pos).astype(np.uint32)
            pos += 2 * (card_minus_one + 1)
        values.append(base | low)
    return (np.concatenate(values) if values else np.zeros(0, np.uint32)), pos
