"""A fixed set of plain Parquet files read as a table (no table format, nothing to commit): benchmarks index them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from partialcow.exceptions import ConfigurationError
from partialcow.table.base import DataFile
from partialcow.table.paths import local_path
from partialcow.table.positions import read_parquet_positions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ParquetFilesSource"]


class ParquetFilesSource:
    """A fixed set of plain Parquet files as one version-0 "table"; the index lives under ``location``.

    ``ParquetFilesSource(spark, ["/data/a.parquet", "/data/b.parquet"], location="/data")``
    """

    table_format = "parquet"

    def __init__(self, spark: SparkSession, files: Sequence[str], *, location: str, name: str | None = None) -> None:
        if not files:
            raise ConfigurationError(f"ParquetFilesSource at {location}: pass at least one Parquet file")
        self.spark = spark
        self.location = location
        self.name = name or location
        self._files = list(files)

    def current_version(self) -> int:
        return 0

    def live_files(self, version: int | None = None) -> list[DataFile]:
        import pyarrow.parquet as pq

        out = []
        for path in self._files:
            local = local_path(path)
            # the footer's row count sizes the buckets; remote files stay unknown (-1) and are counted by Spark
            out.append(DataFile(path, pq.ParquetFile(local).metadata.num_rows if local else -1))
        return out

    def normalize_path(self, path: str) -> str:
        return path

    def column_ids(self) -> dict[str, int]:
        return {}  # plain Parquet files have no column ids

    def read_rows(self, key_columns: Sequence[str], *, version: int, files: Mapping[str, int]) -> DataFrame:
        return read_parquet_positions(self.spark, key_columns, files)
