"""A model's Spark SQL settings last for that model only.

Every model of a ``dbt`` process runs on one embedded SparkSession. A Python model's ``spark.conf.set(...)`` or a
hook's ``set spark.sql...`` statement stayed in force for every model after it, so a model that set
``spark.sql.session.timeZone`` made later models read timestamps in its zone, silently. The adapter's model hooks
take a copy of the session's settings before a model and put back what the model changed after it (``set`` again
what it changed, ``unset`` what it added); settings from ``on-run-start`` hooks and the profile are what every model
starts from.

Models that run at the same time (``threads`` above 1) share the session's settings while they run, and a change
cannot be told apart from another model's: then nothing is put back, as with dbt-spark's ``session`` method, and
the settings that changed meanwhile are reported once each (:attr:`Left.kept`), so that a user sees why later models
run under them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["Left", "SettingsScope", "restore_settings", "settings_of"]


def settings_of(spark: Any) -> Any:
    """The session's SQL settings now, as a JVM map (one py4j call: a model that changes nothing costs three)."""
    return spark._jsparkSession.sessionState().conf().getAllConfs()


def restore_settings(spark: Any, before: Any) -> list[str]:
    """Put the session's SQL settings back to ``before`` (as :func:`settings_of` returned them); returns the keys
    changed back, sorted."""
    conf = spark._jsparkSession.sessionState().conf()
    now = conf.getAllConfs()
    if now.equals(before):
        return []
    old, new = _as_dict(spark, before), _as_dict(spark, now)
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    for key in changed:
        if key in old:
            conf.setConfString(key, old[key])
        else:
            conf.unsetConf(key)
    return changed


def _changed(spark: Any, before: Any) -> list[str]:
    now = spark._jsparkSession.sessionState().conf().getAllConfs()
    if now.equals(before):
        return []
    old, new = _as_dict(spark, before), _as_dict(spark, now)
    return sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))


def _as_dict(spark: Any, scala_map: Any) -> dict[str, str]:
    converters = spark.sparkContext._jvm.scala.collection.JavaConverters
    return {str(k): str(v) for k, v in dict(converters.mapAsJavaMapConverter(scala_map).asJava()).items()}


@dataclass(frozen=True)
class _Token:
    spark: Any
    before: Any
    alone: bool  # no other model ran when this one started
    generation: int  # models started in this process when this one started


@dataclass(frozen=True)
class Left:
    """What :meth:`SettingsScope.leave` did: settings put back (the model ran alone), or settings that changed while
    it ran beside other models and stay in force (each reported once per process)."""

    restored: list[str]
    kept: list[str]


class SettingsScope:
    """Brackets each model: :meth:`enter` before it, :meth:`leave` after it (dbt's ``pre_model_hook`` and
    ``post_model_hook``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._generation = 0
        self._reported: set[str] = set()

    def enter(self, spark: Any | None) -> _Token | None:
        """Start a model on ``spark`` (None: no session runs yet, so the model starts from the profile's)."""
        with self._lock:
            alone = self._running == 0
            self._running += 1
            self._generation += 1
            generation = self._generation
        if spark is None:
            return _Token(None, None, alone=False, generation=generation)
        return _Token(spark, settings_of(spark), alone=alone, generation=generation)

    def leave(self, token: _Token | None) -> Left:
        """End the model ``token`` stands for."""
        if token is None:
            return Left([], [])
        with self._lock:
            self._running -= 1
            alone = token.alone and self._generation == token.generation
        if token.spark is None:
            return Left([], [])
        if alone:
            return Left(restore_settings(token.spark, token.before), [])
        changed = _changed(token.spark, token.before)
        with self._lock:
            kept = [k for k in changed if k not in self._reported]
            self._reported.update(kept)
        return Left([], kept)
