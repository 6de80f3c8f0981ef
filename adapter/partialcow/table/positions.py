"""Reading ``(key..., _file_id, _pos)`` from a table's data files with Spark's own Parquet reader: a row's position
is ``_metadata.row_index``, its file is matched by the URI Spark reports in ``_metadata.file_path``."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from partialcow.exceptions import ConfigurationError
from partialcow.table.base import FILE_ID, POS, quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["files_frame", "positions", "read_parquet_positions", "refuse_partition_keys"]


def files_frame(spark: SparkSession, files: Mapping[str, int], path_column: str) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    schema = StructType([StructField(path_column, StringType(), False), StructField(FILE_ID, IntegerType(), False)])
    return F.broadcast(spark.createDataFrame(list(files.items()), schema))


def read_parquet_positions(spark: SparkSession, key_columns: Sequence[str], files: Mapping[str, int]) -> DataFrame:
    """Read ``key..., _file_id, _pos`` from plain Parquet files with Spark's reader (``_metadata.row_index``).

    ``files`` maps each file's path (local path or URI) to its id in the index.
    """

    if not files:
        raise ValueError("no files to read")
    return positions(spark, spark.read.parquet(*files.keys()), key_columns, files)


def positions(
    spark: SparkSession, frame: DataFrame, key_columns: Sequence[str], files: Mapping[str, int]
) -> DataFrame:
    """``key..., _file_id, _pos`` of ``frame``'s rows in ``files`` (path -> id), by Spark's file metadata columns."""
    from pyspark.sql import functions as F

    # Spark reports _metadata.file_path as the qualified, URL-encoded Hadoop URI; compute the same form to join
    # back, with local URIs reduced to their path on both sides (Spark prints file:/x where Hadoop says file:///x).
    from partialcow.table.java import jvm

    conf = spark.sparkContext._jsc.hadoopConfiguration()
    by_uri: dict[str, int] = {}
    for path, file_id in files.items():
        hpath = jvm(spark).org.apache.hadoop.fs.Path(path)
        uri = str(hpath.getFileSystem(conf).makeQualified(hpath).toUri().toString())
        by_uri[re.sub(r"^file:/+", "/", uri)] = file_id
    rows = frame.select(
        *[F.col(quote_identifier(c)) for c in key_columns],
        F.regexp_replace(F.col("_metadata.file_path"), r"^file:/+", "/").alias("_uri"),
        F.col("_metadata.row_index").cast("bigint").alias(POS),
    )
    return rows.join(files_frame(spark, by_uri, "_uri"), "_uri").drop("_uri")


def refuse_partition_keys(table: str, key_columns: Sequence[str], partition_columns: set[str]) -> None:
    """Delta keeps partition values in its log, not in the data files the index reads."""
    partition_keys = sorted(set(key_columns) & partition_columns)
    if partition_keys:
        raise ConfigurationError(
            f"Delta table {table}: key column(s) {partition_keys} are partition columns, which are not stored in "
            "the data files; index a key made of data columns"
        )
