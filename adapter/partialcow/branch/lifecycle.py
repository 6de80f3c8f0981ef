"""Branch lifecycle operations: create, list, refresh, materialize, drop.

Each takes the SparkSession plus keyword options and returns a small result object whose ``describe()`` is the
log summary the dbt ``run-operation`` macros print.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partialcow.branch.base import SCHEMA_SUFFIX, record_snapshots
from partialcow.branch.catalog import iceberg_total_records, list_tables, schema_exists, table_exists
from partialcow.branch.image import drop_image, drop_reader_relation, has_image
from partialcow.branch.levels import (
    branch_models,
    distinct_models,
    require_parent_columns,
    resolve_parent,
)
from partialcow.branch.naming import (
    MAIN,
    OP_COLUMN,
    OP_DELETE,
    OP_UPSERT,
    base_schema_of,
    full_table,
    model_of_overlay,
    overlay_schema,
    qualified,
    quote,
    validate_branch_name,
)
from partialcow.branch.overlay import (
    create_branch_view,
    follow_parent,
    refresh_descendant_views,
    refresh_history,
    view_sql,
)
from partialcow.branch.store import BranchStore
from partialcow.branch.types import COPY_ON_WRITE, BranchRecord, ImageMode, validate_image_mode
from partialcow.exceptions import BranchError
from partialcow.table.iceberg_create import purge_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BranchInfo",
    "CreateResult",
    "DropResult",
    "ListResult",
    "MaterializeResult",
    "ModelStats",
    "RefreshResult",
    "create_branch",
    "drop_branch",
    "list_branches",
    "materialize_branch",
    "refresh_branch",
]


def _now() -> _dt.datetime:
    return _dt.datetime.now()


@dataclass(frozen=True)
class CreateResult:
    """``steps``: seconds of reading the branch records, recording the parents' snapshots, writing the record.

    >>> CreateResult(BranchRecord("dev", "main", _now(), {"shop.a": 1}), 0.9,
    ...              {"read branches": 0.2, "snapshots": 0.3, "write record": 0.4}).describe()
    'branch dev created from main in 0.90s (nothing copied; merge base: 1 table snapshot(s); read branches 0.20s, snapshots 0.30s, write record 0.40s)'
    """  # noqa: E501 - a doctest output line cannot wrap

    record: BranchRecord
    seconds: float
    steps: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        steps = ", ".join(f"{step} {seconds:.2f}s" for step, seconds in self.steps.items())
        steps = f"; {steps}" if steps else ""
        tables = sum(not name.endswith(SCHEMA_SUFFIX) for name in self.record.base_snapshots)
        return (
            f"branch {self.record.name} created from {self.record.parent} in {self.seconds:.2f}s "
            f"(nothing copied; merge base: {tables} table snapshot(s){steps})"
        )


def create_branch(
    spark: SparkSession,
    *,
    name: str,
    parent: str = MAIN,
    meta_schema: str,
    models: Sequence[Sequence[str]] = (),
    image_mode: ImageMode = COPY_ON_WRITE,
) -> CreateResult:
    """Create branch ``name`` from ``parent``: records the parent's snapshots, copies no data.

    ``models`` lists ``(schema, identifier)`` of the project's models and seeds (dbt passes its graph).
    ``image_mode``: how the branch's read images are built (``copy-on-write``: reads as fast as the table's, the
    image stores the data files a build touches; ``merge-on-read``: the image stores position deletes, reads apply
    them); see ``partialcow.branch.image``.

    >>> branch = create_branch(spark, name="dev", meta_schema="shop", models=[("shop", "orders")])  # doctest: +SKIP
    >>> branch.record.parent  # doctest: +SKIP
    'main'
    """
    start = time.perf_counter()
    validate_branch_name(name)
    validate_branch_name(parent, allow_main=True)
    validate_image_mode(image_mode)
    store = BranchStore(spark, meta_schema=meta_schema)
    records = {record.name: record for record in store.all()}  # one read of the metadata table
    if name in records:
        raise BranchError(f"branch {name!r} already exists: drop it first or choose another name")
    levels = store.chain(parent, records)
    read = time.perf_counter()
    # models that exist only on the parent branches count too (those of the parents' own schemas only)
    parents_schemas = {s for lvl in levels[:-1] for s in records[lvl].base_schemas(meta_schema)}
    inherited = [(base_schema_of(i.schema), i.identifier) for lvl in levels[:-1]
                 for i in branch_models(spark, lvl, records[lvl].base_schemas(meta_schema))]
    wanted = distinct_models([*models, *inherited])
    snapshots = record_snapshots(spark, wanted, levels)  # metadata only: no scan
    recorded = time.perf_counter()
    # the schemas of the project's models, built or not yet: operations on the branch look there (and in those a
    # later build adds), never in other targets' schemas
    schemas = tuple(sorted({meta_schema.lower(), *parents_schemas, *(schema for schema, _ in wanted)}))
    _refuse_leftovers(spark, name, schemas)
    record = BranchRecord(name=name, parent=parent, created_at=_now(), base_snapshots=snapshots, image_mode=image_mode,
                          schemas=schemas)
    store.insert(record)
    done = time.perf_counter()
    return CreateResult(record=record, seconds=done - start, steps={
        "read branches": read - start, "snapshots": recorded - read, "write record": done - recorded})


def _refuse_leftovers(spark: SparkSession, name: str, schemas: Sequence[str]) -> None:
    """A new branch must not find objects in its overlay schemas: it would read them as its own changes. They are
    left by a build that ran while an earlier branch of the name was dropped (``BranchStore.cover`` reports it)."""
    left = [overlay_schema(schema, name) for schema in schemas if list_tables(spark, overlay_schema(schema, name))]
    if left:
        raise BranchError(
            f"branch {name!r} cannot be created: {', '.join(left)} still hold objects of an earlier branch of that "
            f"name; remove them with `dbt run-operation branch_drop --args '{{name: {name}}}'` first"
        )


@dataclass(frozen=True)
class DropResult:
    branch: str
    schemas: tuple[str, ...]
    objects: int

    def describe(self) -> str:
        where = ", ".join(self.schemas) or "no schema"
        return f"branch {self.branch} dropped: {self.objects} table(s)/view(s) in {where}"


def drop_branch(
    spark: SparkSession, *, name: str, meta_schema: str, models: Sequence[Sequence[str]] = ()
) -> DropResult:
    """Drop branch ``name``: its overlay schemas (tables purged) and its metadata row. Refuses with child branches.

    Only the overlay schemas of the schemas the branch's record covers, and of those of ``models`` (dbt passes its
    graph: a view or seed built on the branch in a schema no branch model is in), are dropped: a branch of the same
    name recorded in another meta schema (another target on the same metastore) keeps its own.

    >>> drop_branch(spark, name="dev", meta_schema="shop").schemas   # doctest: +SKIP
    ('shop__br_dev',)
    """
    validate_branch_name(name)
    store = BranchStore(spark, meta_schema=meta_schema)
    record = store.get(name)
    # without a record, the overlay schemas of the meta schema and of dbt's models are the only ones known as ours
    covered = {meta_schema.lower()} if record is None else set(record.base_schemas(meta_schema))
    covered.update(schema for schema, _ in distinct_models(models))
    schemas = tuple(sorted(
        overlay_schema(schema, name) for schema in covered if schema_exists(spark, overlay_schema(schema, name))
    ))
    if record is None and not schemas:
        store.require(name)  # raises "does not exist"
    children = store.children(name)
    if children:
        raise BranchError(
            f"branch {name!r} has child branches {', '.join(children)}: merge or drop them first"
        )
    objects = 0
    for schema in schemas:
        # two statements: the catalog API's listTables costs a py4j call per field of every table
        names = set(list_tables(spark, schema))
        views = {r.viewName for r in spark.sql(f"SHOW VIEWS IN {quote(schema)}").collect() if not r.isTemporary}
        # by their overlays: a model whose reader relation is missing still has an image ref on the root table
        models = sorted({m for n in names if (m := model_of_overlay(n)) is not None})
        for identifier in models:  # what readers query first (views read the tables; image tables the image)
            if identifier in names:
                drop_reader_relation(spark, schema, identifier)
            drop_image(spark, base_schema_of(schema), identifier, name)  # the image ref on the root table
        for table in sorted(names - set(models), key=lambda t: (t not in views, t)):  # views first
            if table in views:
                spark.sql(f"DROP VIEW IF EXISTS {qualified(schema, table)}")
            else:
                purge_table(spark, schema, table)
        objects += len(names)
        spark.sql(f"DROP SCHEMA IF EXISTS {quote(schema)}")
    store.delete(name)
    return DropResult(branch=name, schemas=schemas, objects=objects)


@dataclass(frozen=True)
class ModelStats:
    model: str
    upserts: int
    tombstones: int
    root_rows: int | None
    materialized: bool

    @property
    def ratio(self) -> float | None:
        """Overlay rows per row of the table built without a branch (None when unknown)."""
        if not self.root_rows:
            return None
        return (self.upserts + self.tombstones) / self.root_rows


@dataclass(frozen=True)
class BranchInfo:
    name: str
    parent: str
    created_at: _dt.datetime
    merged_at: _dt.datetime | None
    models: tuple[ModelStats, ...]
    image_mode: ImageMode = COPY_ON_WRITE


@dataclass(frozen=True)
class ListResult:
    branches: tuple[BranchInfo, ...]

    def describe(self) -> str:
        if not self.branches:
            return "no branches"
        now = _now()
        lines = []
        for b in self.branches:
            age = now - b.created_at
            merged = f", last merged {b.merged_at:%Y-%m-%d %H:%M}" if b.merged_at else ""
            lines.append(f"{b.name} (parent {b.parent}, {b.image_mode} images, age {_age(age)}{merged})")
            for m in b.models:
                ratio = "n/a" if m.ratio is None else f"{m.ratio:.2%}"
                lines.append(
                    f"  {m.model}: {m.upserts} overlay rows, {m.tombstones} tombstones, {ratio} of the table"
                    + (", materialized" if m.materialized else "")
                )
        return "\n".join(lines)


def _age(delta: _dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def list_branches(spark: SparkSession, *, meta_schema: str) -> ListResult:
    """Every branch with its parent, age and per-model overlay size (rows, tombstones, ratio to the table).

    >>> print(list_branches(spark, meta_schema="shop").describe())   # doctest: +SKIP
    dev (parent main, copy-on-write images, age 5m)
      shop.orders: 3 overlay rows, 1 tombstones, 0.40% of the table
    """
    from pyspark.sql import functions as F

    store = BranchStore(spark, meta_schema=meta_schema)
    branches = []
    for record in store.all():
        stats = []
        for info in branch_models(spark, record.name, record.base_schemas(meta_schema)):
            counts = {
                r[0]: r[1] for r in spark.table(info.table).groupBy(OP_COLUMN).agg(F.count(F.lit(1))).collect()
            }
            base_schema = base_schema_of(info.schema)
            stats.append(
                ModelStats(
                    model=f"{base_schema}.{info.identifier}",
                    upserts=counts.get(OP_UPSERT, 0),
                    tombstones=counts.get(OP_DELETE, 0),
                    root_rows=iceberg_total_records(spark, base_schema, info.identifier),
                    materialized=table_exists(spark, info.schema, full_table(info.identifier)),
                )
            )
        branches.append(
            BranchInfo(
                name=record.name,
                parent=record.parent,
                created_at=record.created_at,
                merged_at=record.merged_at,
                models=tuple(stats),
                image_mode=record.image_mode,
            )
        )
    return ListResult(branches=tuple(branches))


@dataclass(frozen=True)
class MaterializeResult:
    branch: str
    models: tuple[tuple[str, int], ...]

    def describe(self) -> str:
        if not self.models:
            return f"branch {self.branch}: no model to materialize"
        return "\n".join(
            [f"branch {self.branch}: materialized (the view now reads one full table)"]
            + [f"  {model}: {rows} rows" for model, rows in self.models]
        )


def materialize_branch(
    spark: SparkSession, *, name: str, meta_schema: str, models: Sequence[str] | None = None
) -> MaterializeResult:
    """Collapse each of the branch's models into one full table (``<model>__pcow_full``) holding what the branch
    shows of it: the branch view then reads that table alone (as fast as the table without a branch).

    Materializing changes how the branch is read, not what it shows: the table is written from what readers of the
    model on the branch query now (its image, which pins the parent as of the model's last build or refresh), not
    from the parent as it is now. Parent changes show up at the next build of the model on the branch or
    ``branch_refresh`` (which rewrites the table); a model already materialized is left as it is. The overlay stays
    for diff and merge, and later builds of the model on the branch rewrite both. ``models`` limits it to those
    model names.

    >>> materialize_branch(spark, name="dev", meta_schema="shop", models=["orders"]).models   # doctest: +SKIP
    (('shop.orders', 1000000),)
    """
    store = BranchStore(spark, meta_schema=meta_schema)
    store.require(name)
    levels = store.chain(name)
    wanted = None if models is None else {m.lower() for m in models}
    done = []
    for info in branch_models(spark, name, store.base_schemas(name)):
        if wanted is not None and info.identifier.lower() not in wanted:
            continue
        base_schema = base_schema_of(info.schema)
        target = f"{info.schema}.{full_table(info.identifier)}"
        if not table_exists(spark, info.schema, full_table(info.identifier)):
            if table_exists(spark, info.schema, info.identifier):
                # what the branch shows: the parent as the model's image pinned it, not as it is now (reading the
                # live parent here would pull the parent's later changes into the branch behind the user's back)
                shown = spark.table(qualified(info.schema, info.identifier)).select(*[quote(c) for c in info.columns])
            else:  # no reader relation (a build stopped before creating it): the overlay over the parent now
                parent = resolve_parent(spark, levels[1:], base_schema, info.identifier)
                shown = spark.sql(view_sql(info, parent, materialized=False))
            shown.writeTo(target).using("iceberg").createOrReplace()
        create_branch_view(spark, store=store, branch=name, base_schema=base_schema, identifier=info.identifier)
        done.append((f"{base_schema}.{info.identifier}", spark.table(target).count()))
    if wanted is not None:
        unknown = wanted - {m.split(".")[1] for m, _ in done}
        if unknown:
            raise BranchError(
                f"branch_materialize {name}: no overlay for model(s) {', '.join(sorted(unknown))} on this branch "
                "(build them on the branch first)"
            )
    return MaterializeResult(branch=name, models=tuple(done))


@dataclass(frozen=True)
class RefreshResult:
    branch: str
    models: tuple[tuple[str, bool], ...]  # (model, read through an image)
    materialized: tuple[str, ...] = ()  # models whose materialized table was rewritten
    history: tuple[str, ...] = ()  # append-only models whose overlay took the parent's new rows

    def describe(self) -> str:
        if not self.models:
            return f"branch {self.branch}: no model built on it"
        return "\n".join(
            [f"branch {self.branch}: views re-pinned to their parents as they are now"]
            + [
                f"  {model}: " + ("materialized table rewritten (one scan)" if model in self.materialized
                                  else "image (one scan)" if imaged else "overlay joined to the live parent")
                + ("; took the rows the parent appended since the build" if model in self.history else "")
                for model, imaged in self.models
            ]
        )


def refresh_branch(spark: SparkSession, *, name: str, meta_schema: str) -> RefreshResult:
    """Rebuild the images of the branch's models (and its descendants') from their parents as they are now.

    A model's image pins its parent as of the model's last build on the branch; this picks up what the parent
    changed since, without building the model again. A materialized model's table is rewritten from the parent as
    it is now. Overlays (what the branch changed) stay as they are, except an append-only model's, which holds
    every row the branch shows: it takes the rows the parent appended since (``refresh_history``).

    >>> refresh_branch(spark, name="dev", meta_schema="shop").models   # doctest: +SKIP
    (('shop.orders', True),)
    """
    store = BranchStore(spark, meta_schema=meta_schema)
    store.require(name)
    levels = store.chain(name)
    models = [(info, resolve_parent(spark, levels[1:], base_schema_of(info.schema), info.identifier))
              for info in branch_models(spark, name, store.base_schemas(name))]
    models = [(follow_parent(spark, info, parent, store=store, branch=name, refresh=True) if parent is not None
               else info, parent)
              for info, parent in models]
    for info, parent in models:  # before any model is refreshed
        if info.mode == "delta" and parent is not None:
            require_parent_columns(spark, info, parent, branch=name, operation="branch_refresh")
    done, materialized, history = [], [], []
    for info, parent in models:
        base_schema = base_schema_of(info.schema)
        model = f"{base_schema}.{info.identifier}"
        if refresh_history(spark, info, parent):
            history.append(model)
        if table_exists(spark, info.schema, full_table(info.identifier)):
            # reads the overlay and the parent, not the table it replaces
            spark.sql(view_sql(info, parent, materialized=False)).writeTo(
                f"{info.schema}.{full_table(info.identifier)}").using("iceberg").createOrReplace()
            materialized.append(model)
        create_branch_view(spark, store=store, branch=name, base_schema=base_schema, identifier=info.identifier)
        refresh_descendant_views(spark, store=store, branch=name, base_schema=base_schema, identifier=info.identifier)
        done.append((model, has_image(spark, base_schema, info.identifier, name)))
    return RefreshResult(branch=name, models=tuple(done), materialized=tuple(materialized), history=tuple(history))
