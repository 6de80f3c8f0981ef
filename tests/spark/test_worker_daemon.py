"""The worker daemon's zip import caches: kept while an archive is unchanged, re-read once it changed; and the
embedded session's Python workers run under it, forked with the task modules already imported."""

from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
import zipimport
from pathlib import Path

import pytest

from partialcow.spark import worker_daemon
from partialcow.spark.worker_daemon import TASK_MODULES, keep_zip_import_caches

needs_eager_zipimport = pytest.mark.skipif(
    not (3, 10) <= sys.version_info < (3, 12),
    reason="only Python 3.10 and 3.11 re-read zip archives on invalidate_caches (cpython#103200)",
)


def _archive(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, source in modules.items():
            archive.writestr(f"{name}.py", source)


@needs_eager_zipimport
def test_unchanged_archive_is_not_reread_and_changed_one_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keep_zip_import_caches()
    archive = tmp_path / "lib.zip"
    _archive(archive, {"pcow_zip_a": "VALUE = 1\n"})
    importer = zipimport.zipimporter(str(archive))
    reads: list[str] = []
    read_directory = zipimport._read_directory  # type: ignore[attr-defined]
    monkeypatch.setattr(zipimport, "_read_directory", lambda p: reads.append(p) or read_directory(p))

    importer.invalidate_caches()  # first call: no stamp yet, so it reads once
    importer.invalidate_caches()
    importer.invalidate_caches()
    assert reads == [str(archive)]
    assert importer.find_spec("pcow_zip_a") is not None and importer.find_spec("pcow_zip_b") is None

    _archive(archive, {"pcow_zip_a": "VALUE = 1\n", "pcow_zip_b": "VALUE = 2\n"})  # larger: the stamp changes
    importer.invalidate_caches()
    assert reads == [str(archive)] * 2
    assert importer.find_spec("pcow_zip_b") is not None


@needs_eager_zipimport
def test_a_vanished_archive_is_left_to_zipimport(tmp_path: Path) -> None:
    keep_zip_import_caches()
    archive = tmp_path / "gone.zip"
    _archive(archive, {"pcow_zip_gone": "VALUE = 1\n"})
    importer = zipimport.zipimporter(str(archive))
    archive.unlink()
    importer.invalidate_caches()  # zipimport's own handling: the archive's entries are dropped
    assert importer.find_spec("pcow_zip_gone") is None


@needs_eager_zipimport
def test_workers_forked_after_preparation_reread_no_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "deps.zip"
    _archive(archive, {"pcow_zip_dep": "VALUE = 1\n"})
    monkeypatch.syspath_prepend(str(archive))
    monkeypatch.setattr(worker_daemon, "TASK_MODULES", ("pcow_zip_dep",))  # imported from the archive by preload
    monkeypatch.setenv("PARTIALCOW_PRELOADED_MODULES", "")
    try:
        assert worker_daemon.prepare_daemon() == ["pcow_zip_dep"]
        reads: list[str] = []
        read_directory = zipimport._read_directory  # type: ignore[attr-defined]
        monkeypatch.setattr(zipimport, "_read_directory", lambda p: reads.append(p) or read_directory(p))
        importlib.invalidate_caches()  # what a forked worker does before its first task
        assert reads == []
    finally:
        sys.modules.pop("pcow_zip_dep", None)
        sys.path_importer_cache.pop(str(archive), None)


@pytest.mark.spark
def test_session_workers_run_under_the_daemon(spark) -> None:
    assert spark.conf.get("spark.python.daemon.module") == "partialcow.spark.worker_daemon"

    def installed(_rows):
        import os as worker_os
        import zipimport as worker_zipimport

        yield (getattr(worker_zipimport.zipimporter.invalidate_caches, "_pcow", False),
               worker_os.environ.get("PARTIALCOW_PRELOADED_MODULES", "").split(","))

    results = spark.sparkContext.parallelize(range(2), 2).mapPartitions(installed).collect()
    expected = (3, 10) <= sys.version_info < (3, 12)
    assert [flag for flag, _ in results] == [expected, expected]
    # the daemon imported every task module before forking this worker
    assert all(modules == list(TASK_MODULES) for _, modules in results), results


def test_a_workers_first_arrow_conversion_imports_nothing_new() -> None:
    """PySpark converts a mapInArrow function's types in every worker; what that imports must already be loaded by
    the daemon (``distutils.version`` loaded setuptools: 0.6 s of each fresh worker's first locate task)."""
    script = (
        "import sys\n"
        "from partialcow.spark.worker_daemon import prepare_daemon\n"
        "prepare_daemon()\n"
        "before = set(sys.modules)\n"
        "from pyspark.sql.pandas.types import to_arrow_type\n"
        "from pyspark.sql import types as T\n"
        "for t in (T.LongType(), T.IntegerType(), T.StringType(), T.BooleanType(), T.DecimalType(7, 2),\n"
        "          T.ArrayType(T.StringType()), T.TimestampType(), T.DateType()):\n"
        "    to_arrow_type(t)\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
