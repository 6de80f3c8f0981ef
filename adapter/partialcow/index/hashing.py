"""The bucket hash of the row index: Spark's ``xxhash64`` over the key columns, ``pmod`` the bucket count.

The same function is computed by Spark (``pmod(xxhash64(k1, k2, ...), N)``, distributed, when the index is built or
looked up) and by plain Python here (to find a key's bucket without a JVM, e.g. from the Parquet engine or a test).
Spark's definition, implemented from the XXH64 specification:

- seed 42; the columns are folded left to right, each column's hash being the seed of the next; a null column is
  skipped (the seed passes through unchanged);
- int, short, byte, boolean (1/0), date (days) hash as 4 little-endian bytes; long and timestamp (microseconds)
  as 8 bytes; float/double by their IEEE bits (-0.0 counted as 0.0); string as UTF-8 bytes; binary as is;
  decimals of precision <= 18 as their unscaled long;
- the result is a signed 64-bit integer; ``pmod`` makes the bucket non-negative (Python's ``%`` already does).

>>> spark_xxhash64([1], ["int"])
-6698625589789238999
>>> bucket_of(("abc",), ["string"], 8)
6
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import math
import struct
from collections.abc import Sequence

__all__ = ["SPARK_HASH_SEED", "SUPPORTED_KEY_TYPES", "bucket_of", "spark_xxhash64"]

SPARK_HASH_SEED = 42

_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_M = 0xFFFFFFFFFFFFFFFF

# Spark simpleString type names (as in DataFrame.dtypes) a key column may have.
SUPPORTED_KEY_TYPES = frozenset(
    {"tinyint", "smallint", "int", "bigint", "boolean", "date", "timestamp", "timestamp_ntz", "float", "double",
     "string", "binary"}
)

_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH_TS = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def _xxh64(data: bytes, seed: int) -> int:
    """Unsigned XXH64 of ``data``."""
    n = len(data)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed
        v4 = (seed - _P1) & _M
        while i + 32 <= n:
            a, b, c, d = struct.unpack_from("<4Q", data, i)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
        for v in (v1, v2, v3, v4):
            h = ((h ^ _round(0, v)) * _P1 + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        (lane,) = struct.unpack_from("<Q", data, i)
        h = (_rotl(h ^ _round(0, lane), 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        (word,) = struct.unpack_from("<I", data, i)
        h = (_rotl(h ^ ((word * _P1) & _M), 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * _P5) & _M), 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    h ^= h >> 32
    return h


def _value_bytes(value: object, spark_type: str) -> bytes:
    t = spark_type.lower()
    if t in ("tinyint", "smallint", "int"):
        return struct.pack("<i", int(value))  # type: ignore[call-overload]
    if t == "boolean":
        return struct.pack("<i", 1 if value else 0)
    if t == "bigint":
        return struct.pack("<q", int(value))  # type: ignore[call-overload]
    if t == "date":
        days = value.toordinal() - _EPOCH_DATE.toordinal() if isinstance(value, _dt.date) else int(value)  # type: ignore[call-overload]
        return struct.pack("<i", days)
    if t in ("timestamp", "timestamp_ntz"):
        if isinstance(value, _dt.datetime):
            aware = value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
            delta = aware - _EPOCH_TS
            micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        else:
            micros = int(value)  # type: ignore[call-overload]
        return struct.pack("<q", micros)
    if t == "float":
        f = float(value)  # type: ignore[arg-type]
        f = 0.0 if f == 0.0 else f  # Spark hashes -0.0 as 0.0
        return struct.pack("<i", 0x7FC00000) if math.isnan(f) else struct.pack("<f", f)
    if t == "double":
        d = float(value)  # type: ignore[arg-type]
        d = 0.0 if d == 0.0 else d
        return struct.pack("<q", 0x7FF8000000000000) if math.isnan(d) else struct.pack("<d", d)
    if t == "string":
        return str(value).encode("utf-8")
    if t == "binary":
        raw: bytes = bytes(value)  # type: ignore[call-overload]
        return raw
    if t.startswith("decimal("):
        precision, scale = (int(x) for x in t[len("decimal("):-1].split(","))
        if precision > 18:
            raise ValueError(f"decimal key columns wider than 18 digits are not supported (got {spark_type})")
        unscaled = int(_decimal.Decimal(value).scaleb(scale).to_integral_value())  # type: ignore[arg-type]
        return struct.pack("<q", unscaled)
    raise ValueError(f"key column type {spark_type!r} is not supported; use one of {sorted(SUPPORTED_KEY_TYPES)}")


def spark_xxhash64(values: Sequence[object], spark_types: Sequence[str], *, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``xxhash64(values...)`` as a signed 64-bit integer (``None`` values are skipped, as in Spark).

    >>> spark_xxhash64([1, "abc"], ["int", "string"])
    -3712979484889829503
    """
    if len(values) != len(spark_types):
        raise ValueError(f"{len(values)} values for {len(spark_types)} key types")
    h = seed & _M
    for value, spark_type in zip(values, spark_types):
        if value is not None:
            h = _xxh64(_value_bytes(value, spark_type), h)
    return h - (1 << 64) if h >= (1 << 63) else h


def bucket_of(key: Sequence[object], spark_types: Sequence[str], num_buckets: int) -> int:
    """The index bucket of ``key``: ``pmod(xxhash64(key...), num_buckets)``.

    >>> 0 <= bucket_of((7, "x"), ["bigint", "string"], 16) < 16
    True
    """
    return spark_xxhash64(key, spark_types) % num_buckets
