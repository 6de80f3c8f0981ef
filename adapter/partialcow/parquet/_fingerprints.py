"""Row fingerprints: a sidecar per data file that tells which rows of a full row image really change, without
decoding the file.

A batch of full row images sets every column of every changed row, though most keep their values. Finding the few
that change by comparing with the file means decoding every such column (``_screen``). The sidecar
``.<file name>.pcfp`` next to a data file holds two 64-bit words per row over its *covered* columns (flat columns
of hashable types, in file order):

- ``fp``, the sum (mod 2**64) of the rows' column hashes: a row whose new values give the same sum is unchanged in
  every covered column;
- ``sig``, the top bits of each column hash packed into one word (``64 // k`` bits per column for ``k`` columns): the
  slots that differ name the columns that changed, which are then decoded and compared exactly, and the sum checks
  that no other column changed (a changed column whose slot happens to match is caught there, and the columns are
  decoded the classic way).

Column hashes are keyed by a random per-sidecar seed; values up to 8 bytes hash one to one (a bijective mix), wider
values through a chained mix, so a changed row passes for unchanged with probability about 2**-64. Nulls equal
nulls; floats compare by bits with every NaN equal, as ``_changed_mask`` does.

The sidecar is a cache: it records the data file's size and a digest of its footer and is ignored when they do not
match or anything in it is off; a missing sidecar costs one decode, as before. A rewrite that knows its source's
fingerprints and every new value of the covered columns writes the new file's sidecar after the file itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from partialcow.parquet._changes import _VIEW_TYPES

__all__ = ["Sidecar", "column_hashes", "fingerprint", "hashable", "load_sidecar", "remove_sidecar", "sidecar_path",
           "signature", "slot_mask", "store_sidecar"]

_MAGIC = b"PCFP1\n"
# 2: wide values' words keyed by the seed (version 1's digests let crafted values collide under every seed)
_VERSION = 2
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_NULL = np.uint64(0x6A09E667F3BCC908)
_CANONICAL_NAN = {2: 0x7E00, 4: 0x7FC00000, 8: 0x7FF8000000000000}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_FLOAT = {2: np.float16, 4: np.float32, 8: np.float64}
_BYTES_PER_PASS = 1 << 24  # bounds the scratch arrays of a string column's hash


def sidecar_path(path: str) -> str:
    """Where the fingerprints of data file ``path`` live (hidden: file listings of Spark and Hadoop skip it)."""
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.pcfp")


def remove_sidecar(path: str) -> None:
    """Remove data file ``path``'s fingerprints, if any."""
    with suppress(FileNotFoundError):
        os.remove(sidecar_path(path))


def hashable(t: pa.DataType) -> bool:
    """Whether :func:`column_hashes` takes values of type ``t``."""
    if isinstance(t, pa.ExtensionType) or pa.types.is_dictionary(t) or pa.types.is_nested(t):
        return False
    if t in _VIEW_TYPES or pa.types.is_boolean(t) or pa.types.is_string(t) or pa.types.is_binary(t):
        return True
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return True
    if pa.types.is_interval(t) or pa.types.is_null(t):
        return False
    try:
        width: int = t.bit_width
    except ValueError:
        return False
    return width % 8 == 0 and width > 0


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on a uint64 array (a bijection)."""
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def column_hashes(values: pa.Array | pa.ChunkedArray, salt: int) -> np.ndarray:
    """One uint64 per value, keyed by ``salt``; equal values (nulls equal, NaNs equal) hash alike."""
    if isinstance(values, pa.ChunkedArray):
        parts = [column_hashes(c, salt) for c in values.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    arr = values.cast(_VIEW_TYPES[values.type]) if values.type in _VIEW_TYPES else values
    t, n = arr.type, len(arr)
    key = np.uint64(salt)
    if pa.types.is_boolean(t):
        x = arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint64)
    elif pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        x = _bytes_digest(arr, key)
    else:
        width = t.bit_width // 8
        data = arr.buffers()[1]
        raw = (np.frombuffer(data, dtype=np.uint8, count=(arr.offset + n) * width)[arr.offset * width:]
               if data is not None else np.zeros(n * width, np.uint8))
        if pa.types.is_decimal128(t):
            x = _decimal128_digest(raw.reshape(n, 16), key)
        elif width in _UINT:
            x = raw.view(_UINT[width]).astype(np.uint64)
            if pa.types.is_floating(t):
                x[np.isnan(raw.view(_FLOAT[width]))] = np.uint64(_CANONICAL_NAN[width])
        else:
            x = _wide_digest(raw.reshape(n, width), key)
    x += key
    _mix(x)
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        x[~valid] = _mix(np.array([key ^ _NULL], np.uint64))[0]
    hashes: np.ndarray = x
    return hashes


def _word_keys(key: np.uint64, count: int) -> np.ndarray:
    """Per word position, a key derived from the seed: without one, words that trade places (each xored with the
    other's position constant) summed to the same digest under every seed."""
    keys = (np.arange(1, count + 1, dtype=np.uint64) * _GOLD) ^ key
    return _mix(_mix(keys))


def _decimal128_digest(rows: np.ndarray, key: np.uint64) -> np.ndarray:
    """A decimal128 value whose high word only repeats its low word's sign (every value of up to 18 digits) is that
    low word; the others (wider precision, or values arrow let past their precision) are chained word by word, keyed
    by the seed (unkeyed, a wide value could be crafted to equal a narrow one's low word)."""
    words = rows.view(np.int64)
    x = words[:, 0].astype(np.uint64)
    odd = words[:, 1] != words[:, 0] >> np.int64(63)
    if odd.any():
        x[odd] = _wide_digest(rows[odd], key)
    return x


def _wide_digest(rows: np.ndarray, key: np.uint64) -> np.ndarray:
    """Fixed-width values wider than 8 bytes (decimals, fixed-size binary) chained word by word, keyed by the seed."""
    n, width = rows.shape
    padded = np.zeros((n, -(-width // 8) * 8), np.uint8)
    padded[:, :width] = rows
    words = padded.view(np.uint64)
    keys = _word_keys(key, words.shape[1])
    h = np.full(n, keys[0], np.uint64)
    for i in range(words.shape[1]):
        h ^= words[:, i]
        h += keys[i]
        _mix(h)
    return h


def _bytes_digest(arr: pa.Array, key: np.uint64) -> np.ndarray:
    """Strings and binaries: each value zero-padded to 8-byte words, every word mixed with a key of its index
    derived from the seed, summed per value, then mixed with the length (so trailing zero bytes still count)."""
    n = len(arr)
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offs = np.frombuffer(arr.buffers()[1], np.int64 if wide else np.int32, count=arr.offset + n + 1)[arr.offset:]
    offs = offs.astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    lens = np.diff(offs)
    out = np.zeros(n, np.uint64)
    a = 0
    while a < n:
        # rows [a, b) hold at most _BYTES_PER_PASS bytes (and at least one row)
        b = max(a + 1, int(np.searchsorted(offs, offs[a] + _BYTES_PER_PASS, side="right")) - 1)
        b = min(b, n)
        seg = lens[a:b]
        nwords = (seg + 7) // 8
        wstart = np.cumsum(nwords) - nwords
        total = int(nwords.sum())
        if total:
            buf = np.zeros(total * 8, np.uint8)
            nbytes = int(seg.sum())
            dest = np.arange(nbytes, dtype=np.int64) + np.repeat(wstart * 8 - (offs[a:b] - offs[a]), seg)
            buf[dest] = data[offs[a]:offs[a] + nbytes]
            words = buf.view(np.uint64).copy()
            index = np.arange(total, dtype=np.int64) - np.repeat(wstart, nwords)
            words ^= _word_keys(key, int(nwords.max()))[index]
            _mix(words)
            filled = nwords > 0
            out[a:b][filled] = np.add.reduceat(words, wstart[filled])
        a = b
    out ^= lens.astype(np.uint64) * _M2
    return _mix(out)


def _bits(k: int) -> tuple[int, int]:
    """(bits per column, slots) of a signature over ``k`` columns."""
    b = max(1, 64 // max(k, 1))
    return b, 64 // b


def slot_mask(j: int, k: int) -> int:
    """The signature bits of column ``j`` of ``k`` (columns share slots when k > 64)."""
    b, slots = _bits(k)
    return ((1 << b) - 1) << (b * (j % slots))


def fingerprint(hashes: Sequence[np.ndarray]) -> np.ndarray:
    """The rows' fingerprints (sums mod 2**64) from their columns' hashes."""
    fp = hashes[0].copy()
    for h in hashes[1:]:
        fp += h
    return fp


def signature(hashes: Sequence[np.ndarray], k: int, columns: Sequence[int] | None = None) -> np.ndarray:
    """The signature part of columns ``columns`` (default: all ``k``) from their hashes."""
    b, slots = _bits(k)
    sig = np.zeros(len(hashes[0]) if hashes else 0, np.uint64)
    for j, h in zip(columns if columns is not None else range(k), hashes):
        sig ^= (h >> np.uint64(64 - b)) << np.uint64(b * (j % slots))
    return sig


@dataclass
class Sidecar:
    """The fingerprints of one data file's rows over ``columns`` (types as ``str(pyarrow type)``)."""

    columns: tuple[str, ...]
    types: tuple[str, ...]
    seed: int
    fp: np.ndarray
    sig: np.ndarray

    @classmethod
    def new_seed(cls) -> int:
        return secrets.randbits(64)

    def hashes(self, values: Callable[[str], pa.Array | pa.ChunkedArray]) -> list[np.ndarray]:
        """Each covered column's hashes, its values given by ``values(name)``."""
        return [column_hashes(values(c), self.salt(j)) for j, c in enumerate(self.columns)]

    def marks(self, hashes: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(fingerprints, signatures) of rows from their covered columns' hashes (in column order)."""
        return fingerprint(hashes), signature(hashes, len(self.columns))

    def salt(self, j: int) -> int:
        return int(_mix(np.array([self.seed ^ ((j + 1) * 0x9E3779B97F4A7C15 % 2**64)], np.uint64))[0])


def file_identity(path: str) -> tuple[int, str]:
    """(size, digest of footer and tail) of a Parquet file: what a sidecar is bound to."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size < 12:
            return size, ""
        fh.seek(size - 8)
        tail = fh.read(8)
        flen = int.from_bytes(tail[:4], "little")
        start = max(0, size - 8 - flen)
        fh.seek(start)
        return size, hashlib.sha1(fh.read(size - start)).hexdigest()


def store_sidecar(path: str, sidecar: Sidecar) -> None:
    """Write ``sidecar`` for data file ``path`` (through a temporary file; never half-written)."""
    size, digest = file_identity(path)
    head = json.dumps({"version": _VERSION, "rows": len(sidecar.fp), "file_size": size, "footer_sha1": digest,
                       "columns": list(sidecar.columns), "types": list(sidecar.types),
                       "seed": sidecar.seed}).encode()
    head += b" " * (-(len(_MAGIC) + 4 + len(head)) % 8)
    target = sidecar_path(path)
    tmp = f"{target}.tmp-{secrets.token_hex(4)}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(_MAGIC + len(head).to_bytes(4, "little") + head)
            fh.write(np.ascontiguousarray(sidecar.fp, np.uint64).tobytes())
            fh.write(np.ascontiguousarray(sidecar.sig, np.uint64).tobytes())
        os.replace(tmp, target)
    except BaseException:
        with suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def load_sidecar(path: str, num_rows: int, read_schema: pa.Schema) -> Sidecar | None:
    """Data file ``path``'s fingerprints if a sidecar exists and matches the file (size, footer, rows, column types
    of ``read_schema``); None otherwise."""
    try:
        with open(sidecar_path(path), "rb") as fh:
            blob = fh.read()
        if not blob.startswith(_MAGIC):
            return None
        hlen = int.from_bytes(blob[len(_MAGIC):len(_MAGIC) + 4], "little")
        start = len(_MAGIC) + 4 + hlen
        head = json.loads(blob[len(_MAGIC) + 4:start])
        if head.get("version") != _VERSION or head.get("rows") != num_rows or len(blob) != start + 16 * num_rows:
            return None
        if (head["file_size"], head["footer_sha1"]) != file_identity(path):
            return None
        columns, types = tuple(head["columns"]), tuple(head["types"])
        if not columns or len(columns) != len(types):
            return None
        for name, t in zip(columns, types):
            idx = read_schema.get_field_index(name)
            if idx < 0 or str(read_schema.field(idx).type) != t:
                return None
        payload = np.frombuffer(blob, np.uint64, count=2 * num_rows, offset=start)
        return Sidecar(columns, types, int(head["seed"]), payload[:num_rows], payload[num_rows:])
    except (OSError, ValueError, KeyError, TypeError):
        return None
