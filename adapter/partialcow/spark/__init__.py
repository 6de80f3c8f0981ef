"""The change pipeline on Spark (``changes``, ``bulk``, ``small_batch``, ``rewrite_job``, ...) and the embedded Spark
it runs on: jars (``jars``), the SparkSession (``session``), the driver JVM's class sharing (``class_cache``), the
fresh process's warm-up (``prewarm``) and ``partialcow doctor`` (``doctor``).

Import the submodules directly; this package imports nothing so that ``partialcow.spark.jars`` stays usable
without starting (or even importing) pyspark.
"""
