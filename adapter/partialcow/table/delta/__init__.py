"""Delta Lake commits: replace data files of a Delta table in single optimistic-concurrency commits.

- :mod:`~partialcow.commit.delta.committer`: :class:`DeltaCommitter`, commits through delta-rs (no Spark, no JVM);
- :mod:`~partialcow.commit.delta.conflicts`: Delta's conflict rules over the log versions since a change's base;
- :mod:`~partialcow.commit.delta.features`: the table features a whole-file writer can honour, the others by name;
- :mod:`~partialcow.commit.delta.stats`: ``add`` action stats from a new file's footer, partition value strings.
"""

from partialcow.commit.delta.committer import DeltaCommitter
from partialcow.commit.delta.stats import STATS_STRING_PREFIX, truncate_string_max, truncate_string_min

__all__ = ["STATS_STRING_PREFIX", "DeltaCommitter", "truncate_string_max", "truncate_string_min"]
