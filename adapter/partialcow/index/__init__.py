"""The row-level index: record key -> (data file, row position), built and looked up with Spark.

It reads a table through ``partialcow.table`` (``IcebergTable``, ``DeltaSparkTable``, ``DeltaRsTable``, or plain
Parquet files with ``ParquetFilesSource``).

>>> from partialcow.index import RowIndex, bucket_of
>>> bucket_of((42,), ["bigint"], 4) in range(4)
True
"""

from partialcow.index.hashing import bucket_of, spark_xxhash64
from partialcow.index.row_index import IndexMetrics, LookupResult, RowIndex, VerifyReport
from partialcow.index.storage import INDEX_DIR, IndexState

__all__ = [
    "INDEX_DIR",
    "IndexMetrics",
    "IndexState",
    "LookupResult",
    "RowIndex",
    "VerifyReport",
    "bucket_of",
    "spark_xxhash64",
]
