"""The row-level index: record key -> (data file, row position), built and looked up with Spark.

>>> from partialcow.index import RowIndex, IcebergSource, DeltaSource, bucket_of
>>> bucket_of((42,), ["bigint"], 4) in range(4)
True
"""

from partialcow.index.hashing import bucket_of, spark_xxhash64
from partialcow.index.row_index import IndexMetrics, LookupResult, RowIndex, VerifyReport
from partialcow.index.sources import DeltaSource, IcebergSource, LiveFile, ParquetFilesSource, TableSource
from partialcow.index.storage import INDEX_DIR, IndexState

__all__ = [
    "INDEX_DIR",
    "DeltaSource",
    "IcebergSource",
    "IndexMetrics",
    "IndexState",
    "LiveFile",
    "LookupResult",
    "ParquetFilesSource",
    "RowIndex",
    "TableSource",
    "VerifyReport",
    "bucket_of",
    "spark_xxhash64",
]
