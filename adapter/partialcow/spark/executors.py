"""Which Python the executors run, and a check that it can run our tasks.

PySpark 3.5 takes the interpreter of its Python workers from the ``PYSPARK_PYTHON`` environment variable when the
SparkContext starts; the ``spark.pyspark.python`` setting only reaches ``spark-submit``, so in a profile's
``spark_config`` it was silently ignored. :func:`worker_python` decides the interpreter (the setting, else the
variable, else, on a local master, this very interpreter: ``.venv/bin/dbt`` run without activating the virtualenv
used to start workers with whatever ``python3`` the ``PATH`` held, which lacks dbt-partialcow) and
:func:`worker_environment` sets it while the context starts.

On a cluster, executors that lack the package failed every Python task with ``No module named 'partialcow'`` and
hundreds of lines of stack traces; :func:`check_executors` runs one small task first and turns a failure into one
line that says what the executors lack and how to provide it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from partialcow.exceptions import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_executors", "executor_failure", "worker_environment", "worker_python"]

PYTHON_SETTING = "spark.pyspark.python"
# what the probe task imports: the code of the rewrite and locate tasks, and what it needs
_PROBE_MODULES = ("partialcow.spark.rewrite_job", "pyarrow", "numpy")


def worker_python(conf: Mapping[str, str], environ: Mapping[str, str] | None = None) -> str | None:
    """The interpreter Python workers start with: ``spark.pyspark.python``, else ``PYSPARK_PYTHON``, else this
    interpreter on a local master; None leaves PySpark's default (``python3`` on the executors' ``PATH``).

    >>> worker_python({"spark.master": "spark://h:7077", "spark.pyspark.python": "/opt/py/bin/python"}, {})
    '/opt/py/bin/python'
    >>> worker_python({"spark.master": "spark://h:7077"}, {"PYSPARK_PYTHON": "/usr/bin/python3.11"})
    '/usr/bin/python3.11'
    >>> worker_python({"spark.master": "local[2]"}, {}) == sys.executable, worker_python({"spark.master": "yarn"}, {})
    (True, None)
    """
    environ = os.environ if environ is None else environ
    if conf.get(PYTHON_SETTING):
        return conf[PYTHON_SETTING]
    if environ.get("PYSPARK_PYTHON"):
        return environ["PYSPARK_PYTHON"]
    if conf.get("spark.master", "local").startswith("local"):
        return sys.executable
    return None


@contextmanager
def worker_environment(python: str | None) -> Iterator[None]:
    """``PYSPARK_PYTHON`` set to ``python`` while the block runs (PySpark reads it when the context starts)."""
    if python is None:
        yield
        return
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = python
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


def _probe(_: Iterable[int]) -> Iterator[tuple[str, str]]:
    import importlib
    import platform

    for name in _PROBE_MODULES:
        importlib.import_module(name)
    yield sys.executable, platform.python_version()


_MISSING_MODULE = re.compile(r"No module named '?([\w.]+)'?")


def executor_failure(text: str, python: str) -> str:
    """The one line a failed probe is reported with: what the executors' Python (``python``) lacks.

    >>> print(executor_failure("... ModuleNotFoundError: No module named 'partialcow' ...", "python3"))
    the executors' Python (python3) cannot import partialcow (ModuleNotFoundError: No module named 'partialcow'): install dbt-partialcow into the executors' Python, or set spark.pyspark.python in the profile's spark_config to an interpreter that has it (README: clusters)
    """  # noqa: E501 - a doctest output line cannot wrap
    missing = _MISSING_MODULE.search(text)
    if missing:
        module = missing.group(1).split(".")[0]
        what = f"cannot import {module} (ModuleNotFoundError: No module named '{missing.group(1)}')"
    else:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        errors = [line for line in lines if re.match(r"^\w+(\.\w+)*(Error|Exception):", line)]
        what = f"cannot run a Python task ({(errors or lines or ['no details'])[-1][:300]})"
    return (
        f"the executors' Python ({python}) {what}: install dbt-partialcow into the executors' Python, or set "
        f"{PYTHON_SETTING} in the profile's spark_config to an interpreter that has it (README: clusters)"
    )


def check_executors(spark: SparkSession) -> str:
    """Run one small Python task on the executors and return the interpreter that ran it; ``ConfigurationError``
    with one line naming what they lack (:func:`executor_failure`) when the task cannot run."""
    sc = spark.sparkContext
    python = getattr(sc, "pythonExec", None) or "python3"
    sc.setJobDescription("dbt-partialcow: check the executors' Python")
    # the failure is reported once, as one line: not also as the task's stack traces in Spark's log
    log_manager = sc._jvm.org.apache.logging.log4j.LogManager  # type: ignore[union-attr]
    level = log_manager.getRootLogger().getLevel().toString()
    sc.setLogLevel("OFF")
    try:
        ran = sc.parallelize([0], 1).mapPartitions(_probe).collect()
    except Exception as exc:  # noqa: BLE001 - py4j errors carry the executors' traceback as text
        raise ConfigurationError(executor_failure(str(exc), python)) from None
    finally:
        sc.setLogLevel(level)
        sc.setJobDescription(None)  # type: ignore[arg-type]
    return ran[0][0]
