"""Delta Lake tables: live files, key positions and single optimistic-concurrency commits.

- :mod:`~partialcow.table.delta.rs_table`: :class:`DeltaRsTable`, through delta-rs (commits without Spark or a JVM);
- :mod:`~partialcow.table.delta.spark_table`: :class:`DeltaSparkTable`, through delta-spark (the session has Delta);
- :mod:`~partialcow.table.delta.conflicts`: Delta's conflict rules over the log versions since a change's base;
- :mod:`~partialcow.table.delta.features`: the table features a whole-file writer can honour, the others by name;
- :mod:`~partialcow.table.delta.stats`: ``add`` action stats from a new file's footer, partition value strings.
"""

from partialcow.table.delta.rs_table import DeltaRsTable
from partialcow.table.delta.stats import STATS_STRING_PREFIX, truncate_string_max, truncate_string_min

__all__ = ["STATS_STRING_PREFIX", "DeltaRsTable", "truncate_string_max", "truncate_string_min"]
