"""The options of each branch operation, parsed once from what a ``run-operation`` passes (a Jinja dict).

Every operation has a frozen dataclass; :func:`parse_options` checks names and values (unknown arguments are refused
with the accepted ones listed) and :func:`run_operation` runs it. Nothing downstream sees the raw dict.

>>> parse_options("merge", {"name": "dev", "on_conflict": None})
MergeOptions(name='dev', on_conflict='fail', models=())
>>> parse_options("merge", {"name": "dev", "on_confict": "ours"})
Traceback (most recent call last):
...
partialcow.exceptions.BranchError: branch_merge: unknown argument(s) on_confict: accepted are name, on_conflict, models
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from partialcow.branch.naming import MAIN, validate_branch_name
from partialcow.branch.types import (
    COPY_ON_WRITE,
    ConflictPolicy,
    ImageMode,
    validate_conflict_policy,
    validate_image_mode,
)
from partialcow.exceptions import BranchError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "OPERATIONS",
    "BranchOptions",
    "CreateOptions",
    "DiffOptions",
    "DropOptions",
    "ListOptions",
    "MaterializeOptions",
    "MergeOptions",
    "RefreshOptions",
    "parse_options",
    "run_operation",
]


class _Described(Protocol):
    def describe(self) -> str: ...


def _models(value: Any, operation: str) -> tuple[tuple[str, str], ...]:
    """``[[schema, identifier], ...]`` as dbt's graph lists them."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(m, (list, tuple)) and len(m) == 2 and all(isinstance(p, str) for p in m) for m in value
    ):
        raise BranchError(f"branch_{operation}: models must be a list of [schema, model] pairs, got {value!r}")
    return tuple((str(s), str(i)) for s, i in value)


def _model_names(value: Any, operation: str) -> tuple[str, ...] | None:
    """A model name or a list of them; None: every model."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise BranchError(f"branch_{operation}: models must be a model name or a list of model names, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class CreateOptions:
    """``branch_create``: ``parent`` (default main), ``image_mode``; ``models`` come from dbt's graph."""

    name: str
    parent: str = MAIN
    image_mode: ImageMode = COPY_ON_WRITE
    models: tuple[tuple[str, str], ...] = ()

    def run(self, spark: SparkSession, *, meta_schema: str) -> _Described:
        from partialcow.branch.lifecycle import create_branch

        return create_branch(spark, name=self.name, parent=self.parent, meta_schema=meta_schema,
                             models=self.models, image_mode=self.image_mode)


@dataclass(frozen=True)
class DiffOptions:
    name: str

    def run(self, spark: SparkSession, *, meta_schema: str) -> _Described:
        from partialcow.branch.diff import diff_branch

        return diff_branch(spark, name=self.name, meta_schema=meta_schema)


@dataclass(frozen=True)
class MergeOptions:
    """``branch_merge``: ``on_conflict`` fail (default) | ours (the branch wins) | theirs (the parent stays)."""

    name: str
    on_conflict: ConflictPolicy = "fail"
    models: tuple[tuple[str, str], ...] = ()

    def run(self, spark: SparkSession, *, meta_schema: str) -> _Described:
        from partialcow.branch.merge import merge_branch

        return merge_branch(spark, name=self.name, meta_schema=meta_schema, on_conflict=self.on_conflict,
                            models=self.models)


@dataclass(frozen=True)
class DropOptions:
    """``branch_drop``; ``models`` come from dbt's graph (their schemas' overlay schemas are dropped too)."""

    name: str
    models: tuple[tuple[str, str], ...] = ()

    def run(self, spark: SparkSession, *, meta_schema: str) -> _Described:
        from partialcow.branch.lifecycle import drop_branch

        return drop_branch(spark, name=self.name, meta_schema=meta_schema, models=self.models)


@dataclass(frozen=True)
class ListOptions:
    def run(self, spark: SparkSession, *, meta_schema: str) -> _Described:
        from partialcow.branch.lifecycle import list_branches

        return list_branches(spark, meta_schema=meta_schema)


@dataclass(frozen=True)
class MaterializeOptions:
    """``branch_materialize``: ``models`` limits it to those model names (default: every model on the branch)."""

    name: str
    models: tuple[str, ...] | None = None

    def run(self, spark: SparkSession, *, meta_schema: str) -> _Described:
        from partialcow.branch.lifecycle import materialize_branch

        return materialize_branch(spark, name=self.name, meta_schema=meta_schema,
                                  models=None if self.models is None else list(self.models))


@dataclass(frozen=True)
class RefreshOptions:
    name: str

    def run(self, spark: SparkSession, *, meta_schema: str) -> _Described:
        from partialcow.branch.lifecycle import refresh_branch

        return refresh_branch(spark, name=self.name, meta_schema=meta_schema)


BranchOptions = (
    CreateOptions | DiffOptions | MergeOptions | DropOptions | ListOptions | MaterializeOptions | RefreshOptions
)

#: operation name (``branch_<name>`` in dbt) -> its options class
OPERATIONS: dict[str, type[BranchOptions]] = {
    "create": CreateOptions,
    "diff": DiffOptions,
    "merge": MergeOptions,
    "drop": DropOptions,
    "list": ListOptions,
    "materialize": MaterializeOptions,
    "refresh": RefreshOptions,
}


def _convert(operation: str, field: str, value: Any, *, branch: str) -> Any:
    if field == "name":
        return validate_branch_name(value)
    if field == "parent":
        return validate_branch_name(value, allow_main=True)
    if field == "image_mode":
        return validate_image_mode(value)
    if field == "on_conflict":
        return validate_conflict_policy(value, branch=branch)
    if field == "models":
        return _model_names(value, operation) if operation == "materialize" else _models(value, operation)
    raise AssertionError(field)  # every field of every options class is handled above


def parse_options(operation: str, raw: Mapping[str, Any] | None) -> BranchOptions:
    """Turn a run-operation's arguments into the typed options of ``operation``; None values count as not given.

    >>> parse_options("create", {"name": "feat", "parent": "dev", "image_mode": "merge-on-read"})
    CreateOptions(name='feat', parent='dev', image_mode='merge-on-read', models=())
    >>> parse_options("create", {"parent": "dev"})
    Traceback (most recent call last):
    ...
    partialcow.exceptions.BranchError: branch_create: the branch name is missing: --args '{name: <branch>}'
    """
    if operation not in OPERATIONS:
        raise BranchError(f"unknown branch operation {operation!r}: use one of {', '.join(OPERATIONS)}")
    cls = OPERATIONS[operation]
    fields = [f.name for f in dataclasses.fields(cls)]
    given = {str(k): v for k, v in (raw or {}).items() if v is not None}
    unknown = [k for k in given if k not in fields]
    if unknown:
        accepted = ", ".join(fields) or "none"
        raise BranchError(f"branch_{operation}: unknown argument(s) {', '.join(unknown)}: accepted are {accepted}")
    if "name" in fields and "name" not in given:
        raise BranchError(f"branch_{operation}: the branch name is missing: --args '{{name: <branch>}}'")
    branch = str(given.get("name", ""))
    return cls(**{key: _convert(operation, key, value, branch=branch) for key, value in given.items()})


def run_operation(spark: SparkSession, options: BranchOptions, *, meta_schema: str) -> _Described:
    """Run the operation ``options`` describes; returns its result (``describe()`` is the log summary)."""
    return options.run(spark, meta_schema=meta_schema)
