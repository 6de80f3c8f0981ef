"""Lakehouse tables, one concept per format: live files, key positions, and atomic optimistic-concurrency commits.

- ``IcebergTable`` (``iceberg.py``; atomic creates in ``iceberg_create.py``): Iceberg's Java API over py4j;
- ``DeltaSparkTable`` (``delta/spark_table.py``): delta-spark, where the session has Delta;
- ``DeltaRsTable`` (``delta/rs_table.py``): delta-rs, no JVM for the log and commits;
- ``ParquetFilesSource`` (``parquet_files.py``): plain Parquet files, read only (benchmarks);
- ``java.py``: the one bridge to the session's JVM; ``positions.py``: key positions read with Spark's Parquet reader.

The protocols (``Table``, ``TableSource``) and the records they exchange (``DataFile``, ``FileReplacement``,
``CommitResult``) are in ``base.py``.
"""
