"""The embedded Spark: jars (``jars``), the SparkSession (``session``) and ``partialcow doctor`` (``doctor``).

Import the submodules directly; this package imports nothing so that ``partialcow.spark.jars`` stays usable
without starting (or even importing) pyspark.
"""
