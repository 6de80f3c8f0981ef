"""Errors from Spark, the JVM and Python workers, turned into named ``PartialCowError``s at the pipeline's edge.

A user who runs a model should never have to read a py4j stack trace to learn that a table name is invalid or that
the batch's input files vanished. Errors our own checks raise in executor tasks (``InvalidChangeError`` from the
page engine, ...) come back as their own class. Anything else Spark reports becomes ``SparkJobError`` naming the
model and the table, with Spark's first line; the original stays chained as the cause.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from partialcow import exceptions as E

__all__ = ["named_errors", "translate"]

# the last line of a Python worker's traceback when one of our errors was raised in a task
_WORKER_ERROR = re.compile(r"partialcow\.exceptions\.(\w+): (.*)")


@contextmanager
def named_errors(*, model: str, table: str) -> Iterator[None]:
    """Re-raise Spark/JVM/worker errors raised inside the block as named errors (ours pass through)."""
    try:
        yield
    except E.ParquetRewriteError as exc:
        # raised by the page engine or a file check in the driver's threads, which know no model (in a Spark task
        # it comes back through translate, which names it)
        if str(exc).startswith(f"model {model}"):
            raise
        raise type(exc)(f"model {model}, table {table}: {exc}") from exc
    except (E.UnsupportedTableFeatureError, E.DuplicateKeyError) as exc:
        # the table's own refusals (features, keys other writers repeated) are raised where no model is known
        if exc.args and not str(exc.args[0]).startswith(f"model {model}"):
            exc.args = (f"model {model}: {exc.args[0]}", *exc.args[1:])
        raise
    except E.PartialCowError:
        raise
    except Exception as exc:
        named = translate(exc, model=model, table=table)
        if named is None:
            raise
        raise named from exc


def _spark_errors() -> tuple[type[BaseException], ...]:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (Py4JError, PySparkException)


def _text(exc: BaseException) -> str:
    """What the error says, Java cause chain included (py4j puts it in ``str``)."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a broken gateway must not hide the original error
        return type(exc).__name__


def translate(exc: BaseException, *, model: str, table: str) -> E.PartialCowError | None:
    """The named error for ``exc``, or None when it is not a Spark/JVM/worker error (a bug: keep it as it is).

    >>> translate(RuntimeError("x"), model="m", table="s.t") is None
    True
    """
    if not isinstance(exc, _spark_errors()):
        return None
    text = _text(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    worker = [m for m in map(_WORKER_ERROR.search, lines) if m]
    if worker:
        name, message = worker[-1].group(1), worker[-1].group(2)
        cls = getattr(E, name, None)
        if isinstance(cls, type) and issubclass(cls, E.PartialCowError):
            return cls(message if message.startswith(f"model {model}") else f"model {model}, table {table}: {message}")
    if "is not a valid object name" in text or "Invalid Hive object" in text:
        return E.ConfigurationError(
            f"model {model}: {table!r} is not a valid table name for the Hive metastore (letters, digits and "
            "underscores only): rename the model or set its alias"
        )
    missing = re.search(r"(?:FileNotFoundException|FILE_NOT_EXIST|No such file or directory)[:\s]*([^\n]*)", text)
    if missing:
        return E.ChangeFeedError(
            f"model {model}: a file the batch reads vanished while it was applied to {table} "
            f"({missing.group(1)[:300]}); the model's input must stay in place until the run ends"
        )
    first = next((line for line in lines if "Exception" in line or "Error" in line), lines[0] if lines else "")
    return E.SparkJobError(f"model {model}, table {table}: a Spark job failed: {first[:500]}")
