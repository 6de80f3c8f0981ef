"""The dbt plugin: adapter type ``partialcow``, built on dbt-spark's ``session`` method."""
