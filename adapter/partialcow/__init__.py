"""dbt-partialcow: partial copy-on-write upserts for Spark lakehouse tables.

Layers, each importing only the ones below it:

- ``partialcow.parquet``: the Parquet page engine (pyarrow only; knows nothing of Spark, dbt or table formats).
- ``partialcow.commit`` and ``partialcow.index``: atomic table-format commits (Iceberg, Delta) and the row-level index.
- ``partialcow.spark``: the embedded SparkSession (jars, catalogs) and the distributed rewrite job.
- ``partialcow.dbt_adapter``: the dbt plugin (adapter type ``partialcow``); ``macros/`` holds its Jinja.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
