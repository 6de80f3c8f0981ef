"""Time of the row fingerprints' column hashes (``partialcow.parquet._fingerprints.column_hashes``) on 1M values.

    PYTHONPATH=adapter python bench/fingerprint_hash_bench.py

Prints the best of 5 runs per column type (strings of 10-60 bytes, decimal(38, 2), int64).
"""
import time

import numpy as np
import pyarrow as pa
from partialcow.parquet._fingerprints import column_hashes

rng = np.random.default_rng(0)
n = 1_000_000
strs = pa.array([f"customer-{i}-{'x' * (i % 40)}" for i in rng.integers(0, 10**9, n)])
dec = pa.array(rng.integers(-10**12, 10**12, n), pa.int64()).cast(pa.decimal128(38, 2))
ints = pa.array(rng.integers(0, 10**9, n))
for name, arr in (("string", strs), ("decimal38", dec), ("int64", ints)):
    column_hashes(arr, 7)
    ts = []
    for _ in range(5):
        started = time.perf_counter()
        column_hashes(arr, 7)
        ts.append(time.perf_counter() - started)
    print(name, f"{min(ts)*1000:.0f} ms")
