"""dbt-partialcow: partial copy-on-write upserts for Spark lakehouse tables.

Layers, each importing only the ones below it:

- ``partialcow.parquet``: the Parquet page engine (pyarrow only; knows nothing of Spark, dbt or table formats).
- ``partialcow.table``: one ``Table`` per format (Iceberg, Delta): live files, key positions, atomic commits.
- ``partialcow.index``: the row-level index (key -> file, position), which reads its table through ``partialcow.table``.
- ``partialcow.spark``: the change pipeline (staging, locate, page rewrites, commit) and the embedded SparkSession.
- ``partialcow.branch``: branch environments as overlay schemas.
- ``partialcow.dbt_adapter``: the dbt plugin (adapter type ``partialcow``); ``macros/`` holds its Jinja.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
