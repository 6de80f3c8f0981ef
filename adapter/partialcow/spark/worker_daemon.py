"""PySpark's Python worker daemon, with the import caches of zip archives kept between tasks.

Before every task PySpark's worker calls ``importlib.invalidate_caches()``. On Python 3.10 and 3.11 that makes every
``zipimporter`` re-read its archive's whole directory at once (cpython#103200; Spark 4.1 calls it less often,
SPARK-54744): pyspark.zip, once per imported subpackage, py4j's zip and the spark-core jar. On the 2-core machine of
``bench/`` that was about 0.1 s of every Python task, more than a locate or rewrite task of a small batch spends on
its own work. With this daemon an archive's directory is re-read only when the file changed (size or modification
time), which is what the invalidation is for.

The Spark sessions of :mod:`partialcow.spark.session` start it (``spark.python.daemon.module``); it must be
importable by the executors' Python, as the rewrite job's code must anyway. It imports nothing but the standard
library before PySpark's daemon forks its workers.
"""

from __future__ import annotations

import os
import sys
import zipimport

__all__ = ["keep_zip_import_caches"]


def keep_zip_import_caches() -> bool:
    """Make ``zipimporter.invalidate_caches`` re-read an archive only when it changed; True when installed.

    >>> _ = keep_zip_import_caches()
    >>> keep_zip_import_caches()  # installed once
    False
    >>> getattr(zipimport.zipimporter.invalidate_caches, "_pcow", False) == ((3, 10) <= sys.version_info < (3, 12))
    True
    """
    if not (3, 10) <= sys.version_info < (3, 12) or getattr(zipimport.zipimporter.invalidate_caches, "_pcow", False):
        return False
    reread = zipimport.zipimporter.invalidate_caches

    def invalidate_caches(self: zipimport.zipimporter) -> None:
        try:
            stat = os.stat(self.archive)
            stamp: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            stamp = None  # gone or unreadable: let zipimport decide
        if stamp is not None and getattr(self, "_pcow_stamp", None) == stamp:
            return
        reread(self)
        self._pcow_stamp = stamp  # type: ignore[attr-defined]

    invalidate_caches._pcow = True  # type: ignore[attr-defined]
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]
    return True


if __name__ == "__main__":
    keep_zip_import_caches()
    from pyspark import daemon

    daemon.manager()
