"""PySpark's Python worker daemon, with the import caches of zip archives kept between tasks.

Before every task PySpark's worker calls ``importlib.invalidate_caches()``. On Python 3.10 and 3.11 that makes every
``zipimporter`` re-read its archive's whole directory at once (cpython#103200; Spark 4.1 calls it less often,
SPARK-54744): pyspark.zip, once per imported subpackage, py4j's zip and the spark-core jar, which costs more than a
locate or rewrite task of a small batch spends on its own work (bench/README.md). With this daemon an archive's
directory is re-read only when the file changed (inode, size or change and modification times), which is what the
invalidation is for; the daemon records every archive's state before it forks, so a fresh worker re-reads none either.

It also imports the modules the rewrite job's tasks use (pyarrow, numpy, the page engine) before PySpark's daemon
forks its workers. PySpark stops a worker that has been idle for a minute, and a fresh one re-imports them, so a
``partial_cow_incremental`` model run after a minute of other work (the benchmark's cells, a dbt run's earlier
models) paid those imports in each of its jobs' first tasks. The same holds for ``distutils.version``, which PySpark
imports in every worker's first Arrow task (where it loads setuptools).

The Spark sessions of :mod:`partialcow.spark.session` start it (``spark.python.daemon.module``); it must be
importable by the executors' Python, as the rewrite job's code must anyway.
"""

from __future__ import annotations

import importlib
import os
import sys
import zipimport

__all__ = ["keep_zip_import_caches", "preload_task_modules", "prepare_daemon"]

# What locate and rewrite tasks import; forked workers inherit them. PySpark 3.5 converts an Arrow UDF's types with
# ``from distutils.version import LooseVersion`` (``to_arrow_type``): where setuptools provides distutils, that
# import loads setuptools and pkg_resources, a noticeable share of every fresh worker's first mapInArrow task.
TASK_MODULES = (
    "numpy", "pyarrow", "pyarrow.compute", "pyarrow.parquet", "pyarrow.acero", "pyarrow.ipc",
    "pyspark.sql.pandas.serializers", "distutils.version", "partialcow.spark.rewrite_job",
)


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
            stamp: tuple[int, ...] | None = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
        except OSError:
            stamp = None  # gone or unreadable: let zipimport decide
        if stamp is not None and getattr(self, "_pcow_stamp", None) == stamp:
            return
        reread(self)
        self._pcow_stamp = stamp  # type: ignore[attr-defined]

    invalidate_caches._pcow = True  # type: ignore[attr-defined]
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]
    return True


def preload_task_modules() -> list[str]:
    """Import :data:`TASK_MODULES`; returns those imported (one that fails is left to the task that needs it, which
    then reports the error itself).

    >>> "partialcow.spark.rewrite_job" in preload_task_modules()
    True
    """
    loaded = []
    for name in TASK_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - never stop the daemon: Python tasks that need nothing of this still run
            continue
        loaded.append(name)
    return loaded


def prepare_daemon() -> list[str]:
    """What the daemon does before it forks any worker: keep zip import caches, import :data:`TASK_MODULES`, and
    record every archive's stamp, so a forked worker's first ``invalidate_caches`` re-reads none of them (about
    0.1 s of each fresh worker's first task otherwise). Returns the modules imported, also left in the environment
    variable ``PARTIALCOW_PRELOADED_MODULES`` that every worker inherits (the tests' evidence).
    """
    keep_zip_import_caches()
    loaded = preload_task_modules()
    importlib.invalidate_caches()
    os.environ["PARTIALCOW_PRELOADED_MODULES"] = ",".join(loaded)
    return loaded


if __name__ == "__main__":
    prepare_daemon()
    from pyspark import daemon

    daemon.manager()  # type: ignore[no-untyped-call]
