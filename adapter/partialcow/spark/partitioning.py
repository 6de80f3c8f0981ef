"""Exact task placement for Spark's hash partitioning: one partition per value, no collisions.

``DataFrame.repartition(n, column)`` sends a row to partition ``pmod(murmur3(column), n)``. Hashing ``n`` file
names into ``n`` partitions leaves some partitions empty and doubles up others (4 files: all four apart only 9% of
the time), so one task rewrites two files while a core idles. Routing each file through an int chosen so that its
hash lands in a partition of its own gives every file its own task.
"""

from __future__ import annotations

__all__ = ["routes", "spark_hash_int"]

_MASK = 0xFFFFFFFF
_SEED = 42  # the seed of Spark's Murmur3Hash (SQL ``hash()``, HashPartitioning)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_hash_int(value: int, seed: int = _SEED) -> int:
    """Spark's ``hash()`` of an ``int`` value (Murmur3 x86 32-bit), as a signed 32-bit int.

    >>> spark_hash_int(0), spark_hash_int(1), spark_hash_int(-7)
    (933211791, -559580957, -1618159745)
    """
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = _rotl(seed ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def routes(partitions: int) -> list[int]:
    """For each partition ``i`` of ``repartition(partitions, c)`` on an int column ``c``, a value of ``c`` that lands
    in partition ``i`` (the smallest non-negative one).

    >>> r = routes(4); [spark_hash_int(v) % 4 for v in r]
    [0, 1, 2, 3]
    """
    found: dict[int, int] = {}
    value = 0
    while len(found) < partitions:
        found.setdefault(spark_hash_int(value) % partitions, value)
        value += 1
    return [found[i] for i in range(partitions)]
