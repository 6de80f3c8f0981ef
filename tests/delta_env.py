"""Where the tests find delta-spark, and how they run the Delta-inside-Spark suite (tests/delta_spark).

The jars are not on PyPI and Maven is unreachable here: ``PARTIALCOW_DELTA_JARS`` (comma or path-separator list),
else the team's shared folder next to the repository (``<repo>/../shared/jars``), which every development and CI
checkout has. Without them (or without Java) the tests that need them are skipped with ``NO_DELTA_SPARK``, never
passed.

A JVM holds one session catalog, and this test process's is Iceberg's: tests with a Delta session run in a child
pytest process (``tests/test_delta_inside_spark.py`` starts it with ``DELTA_SESSION_ENV`` set; ``tests/conftest.py``
ignores ``tests/delta_spark`` otherwise).
"""

from __future__ import annotations

import glob
import os
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_JARS = REPO.parent / "shared" / "jars"
DELTA_SESSION_ENV = "PARTIALCOW_DELTA_SESSION"
_EXTENSION_CLASS = "io/delta/sql/DeltaSparkSessionExtension.class"

NO_DELTA_SPARK = (
    "delta-spark jars not found (not on PyPI, Maven is offline): set PARTIALCOW_DELTA_JARS or keep them in "
    f"{SHARED_JARS}, and have Java"
)


def delta_spark_jars() -> list[str]:
    """delta-spark + delta-storage jar paths, or [] when they (or Java) are missing."""
    listed = [p.strip() for p in os.environ.get("PARTIALCOW_DELTA_JARS", "").replace(os.pathsep, ",").split(",")]
    jars = [p for p in listed if p and Path(p).is_file()]
    if not jars:
        jars = sorted(glob.glob(str(SHARED_JARS / "delta-spark_2.12-*.jar")))
        jars += sorted(glob.glob(str(SHARED_JARS / "delta-storage-*.jar")))
    return jars if _has_extension(jars) and shutil.which("java") else []


def _has_extension(jars: Sequence[str]) -> bool:
    for jar in jars:
        try:
            with zipfile.ZipFile(jar) as zf:
                if _EXTENSION_CLASS in zf.namelist():
                    return True
        except (zipfile.BadZipFile, OSError):
            continue
    return False
