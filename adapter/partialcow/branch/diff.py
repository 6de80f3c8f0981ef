"""``branch_diff``: what a branch changed in each model against its parent as the parent is now.

Keyed models are compared key by key (inserted, updated with the changed columns, deleted); a detached model
(no key, or columns that differ from the parent's) by whole rows: it replaces the parent's rows at a merge.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partialcow.branch.frames import comparable, key_join, key_string, same_key, same_types, same_value
from partialcow.branch.levels import branch_models, require_parent_columns, resolve_parent
from partialcow.branch.naming import OP_COLUMN, OP_UPSERT, base_schema_of, overlay_schema, qualified, quote
from partialcow.branch.overlay import follow_parent
from partialcow.branch.store import BranchStore
from partialcow.branch.types import OverlayInfo

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["DIFF_TABLE", "DetachedDiff", "DiffResult", "diff_branch"]

#: Written to ``<target schema>__br_<branch>`` by branch_diff.
DIFF_TABLE = "partialcow_branch_diff"
_DIFF_SCHEMA = "model string, key string, change string, column_name string, old_value string, new_value string"
_PAST = {"insert": "inserted", "update": "updated", "delete": "deleted"}


@dataclass(frozen=True)
class DetachedDiff:
    """A detached model against its parent, by whole rows (rows counted with repeats).

    ``only_ours`` / ``only_theirs`` are None when the columns differ (then every row differs).

    >>> DetachedDiff(rows=3, parent_rows=4, only_ours=1, only_theirs=2).describe()
    'replaced (3 rows vs 4 on the parent: 1 only on the branch, 2 only on the parent)'
    >>> DetachedDiff(rows=3, parent_rows=None, only_ours=None, only_theirs=None).describe()
    'replaced (3 rows; new on the branch)'
    >>> DetachedDiff(rows=5, parent_rows=3, only_ours=2, only_theirs=0, keeps_history=True).describe()[:49]
    '2 row(s) only on the branch (5 vs 3 on the parent'
    """

    rows: int
    parent_rows: int | None  # None: the parent does not have the model
    only_ours: int | None
    only_theirs: int | None
    #: an incremental model without unique_key: ``branch_merge`` leaves the parent's rows to its own runs
    keeps_history: bool = False

    @property
    def differs(self) -> bool:
        return self.only_ours is None or self.only_theirs is None or self.only_ours + self.only_theirs > 0

    def describe(self) -> str:
        if self.keeps_history and self.parent_rows is not None:
            differ = "; the columns differ" if self.only_ours is None else ""
            new = self.rows if self.only_ours is None else self.only_ours
            return (f"{new} row(s) only on the branch ({self.rows} vs {self.parent_rows} on the parent{differ}); an "
                    "incremental model without unique_key: branch_merge leaves the parent's rows to its own runs")
        if self.parent_rows is None:
            return f"replaced ({self.rows} rows; new on the branch)"
        if self.only_ours is None or self.only_theirs is None:
            return f"replaced ({self.rows} rows vs {self.parent_rows} on the parent; the columns differ)"
        return (
            f"replaced ({self.rows} rows vs {self.parent_rows} on the parent: {self.only_ours} only on the branch, "
            f"{self.only_theirs} only on the parent)"
        )


@dataclass
class DiffResult:
    branch: str
    table: str
    #: keyed model -> {"inserted": n, "updated": n, "deleted": n}
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    #: keyed model -> {column: number of keys whose value changed}
    columns: dict[str, dict[str, int]] = field(default_factory=dict)
    #: detached model -> its whole-row comparison (only those whose rows differ)
    detached: dict[str, DetachedDiff] = field(default_factory=dict)

    def describe(self) -> str:
        lines = [f"branch {self.branch} vs its parent (rows in {self.table}):"]
        entries: dict[str, str] = {model: f"  {model}: {diff.describe()}" for model, diff in self.detached.items()}
        for model, counts in self.counts.items():
            changed = ", ".join(f"{c} ({n})" for c, n in sorted(self.columns.get(model, {}).items()))
            entries[model] = (
                f"  {model}: {counts.get('inserted', 0)} inserted, {counts.get('updated', 0)} updated, "
                f"{counts.get('deleted', 0)} deleted" + (f"; changed columns: {changed}" if changed else "")
            )
        lines += [entries[model] for model in sorted(entries)] or ["  no model differs"]
        return "\n".join(lines)


def _compare_detached(spark: SparkSession, info: OverlayInfo, parent: tuple[str, str] | None) -> DetachedDiff:
    """Whole-row comparison (multisets) of a detached overlay with the parent's rows."""
    from pyspark.sql import functions as F

    ours = spark.table(info.table).where(F.col(OP_COLUMN) == OP_UPSERT).select(*[quote(c) for c in info.columns])
    if parent is None:
        return DetachedDiff(rows=ours.count(), parent_rows=None, only_ours=None, only_theirs=None)
    history = info.keeps_history
    theirs = spark.table(qualified(*parent))
    same_columns = len(ours.schema.fields) == len(theirs.schema.fields) and all(
        o.name.lower() == t.name.lower() and same_types(o.dataType, t.dataType)
        for o, t in zip(ours.schema.fields, theirs.schema.fields)
    )
    counts = ours.select(F.count(F.lit(1))).crossJoin(theirs.select(F.count(F.lit(1)))).collect()[0]
    if not same_columns:
        return DetachedDiff(rows=counts[0], parent_rows=counts[1], only_ours=None, only_theirs=None,
                            keeps_history=history)
    return DetachedDiff(
        rows=counts[0],
        parent_rows=counts[1],
        only_ours=comparable(ours).exceptAll(comparable(theirs)).count(),
        only_theirs=comparable(theirs).exceptAll(comparable(ours)).count(),
        keeps_history=history,
    )


def _keyed_rows(spark: SparkSession, info: OverlayInfo, parent: tuple[str, str], model: str) -> DataFrame:
    """One row per inserted or deleted key, one per changed column of an updated key."""
    from pyspark.sql import functions as F

    overlay = spark.table(info.table)
    ours = overlay.alias("o")
    keys = info.key_columns
    types = {f.name: f.dataType for f in overlay.schema.fields}
    # a key the parent holds more than once joins each copy: identical rows below are dropped, keys counted once
    theirs = (
        key_join(spark.table(qualified(*parent)), overlay, keys, "left_semi", broadcast=True)
        .select(*[quote(c) for c in info.columns])
        .withColumn("_t", F.lit(True))
        .alias("t")
    )
    on = same_key([F.col(f"o.{quote(k)}") for k in keys], [F.col(f"t.{quote(k)}") for k in keys])
    joined = ours.join(theirs, on=on, how="left")
    in_parent = F.col("t._t").isNotNull()
    is_upsert = F.col(f"o.{OP_COLUMN}") == OP_UPSERT
    changes = F.filter(
        F.array(
            *[
                F.struct(
                    F.lit(c).alias("column_name"),
                    F.col(f"t.{quote(c)}").cast("string").alias("old_value"),
                    F.col(f"o.{quote(c)}").cast("string").alias("new_value"),
                    (~same_value(F.col(f"o.{quote(c)}"), F.col(f"t.{quote(c)}"), types[c])).alias("changed"),
                )
                for c in info.columns
                if c not in keys
            ]
            or [F.struct(F.lit(None).cast("string").alias("column_name"), F.lit(None).cast("string").alias("old_value"),
                         F.lit(None).cast("string").alias("new_value"), F.lit(False).alias("changed"))]
        ),
        lambda x: x["changed"],
    )
    keyed = joined.select(
        F.lit(model).alias("model"),
        key_string(keys, "o.").alias("key"),
        F.when(is_upsert & ~in_parent, "insert").when(is_upsert, "update").when(in_parent, "delete").alias("change"),
        changes.alias("changes"),
    ).where(F.col("change").isNotNull())
    updates = (
        keyed.where(F.col("change") == "update")
        .select("model", "key", "change", F.explode("changes").alias("c"))
        .select("model", "key", "change", "c.column_name", "c.old_value", "c.new_value")
    )
    others = keyed.where(F.col("change") != "update").select(
        "model",
        "key",
        "change",
        F.lit(None).cast("string").alias("column_name"),
        F.lit(None).cast("string").alias("old_value"),
        F.lit(None).cast("string").alias("new_value"),
    )
    return updates.unionByName(others).dropDuplicates()  # strings only: no value normalised


def _distinct_keys() -> Column:
    """How many keys the diff rows grouped name (a single key with a null value counts too)."""
    from pyspark.sql import functions as F

    return F.countDistinct(F.struct("key"))


def diff_branch(spark: SparkSession, *, name: str, meta_schema: str) -> DiffResult:
    """Compare each model on branch ``name`` with its parent's current rows; writes the per-column changes to
    ``<meta_schema>__br_<name>.partialcow_branch_diff`` (model, key, change, column_name, old_value, new_value;
    a detached model that differs has one row ``change = 'replace'``, old/new value its parent's/its row count).

    >>> print(diff_branch(spark, name="dev", meta_schema="shop").describe())   # doctest: +SKIP
    branch dev vs its parent (rows in shop__br_dev.partialcow_branch_diff):
      shop.order_totals: replaced (12 rows vs 12 on the parent: 3 only on the branch, 3 only on the parent)
      shop.orders: 1 inserted, 2 updated, 1 deleted; changed columns: status (2)
    """
    from pyspark.sql import functions as F

    store = BranchStore(spark, meta_schema=meta_schema)
    store.require(name)
    levels = store.chain(name)
    result = DiffResult(branch=name, table=f"{overlay_schema(meta_schema, name)}.{DIFF_TABLE}")
    frames = []
    for info in branch_models(spark, name, store.base_schemas(name)):
        model = f"{base_schema_of(info.schema)}.{info.identifier}"
        parent = resolve_parent(spark, levels[1:], base_schema_of(info.schema), info.identifier)
        if info.mode == "detached" or parent is None:
            detached = _compare_detached(spark, info, parent)
            if detached.differs:
                result.detached[model] = detached
                old = None if detached.parent_rows is None else str(detached.parent_rows)
                frames.append(spark.createDataFrame([(model, None, "replace", None, old, str(detached.rows))],
                                                    _DIFF_SCHEMA))
        else:
            info = follow_parent(spark, info, parent, store=store, branch=name)
            require_parent_columns(spark, info, parent, branch=name, operation="branch_diff")
            frames.append(_keyed_rows(spark, info, parent, model))
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote(overlay_schema(meta_schema, name))}")
    empty = spark.createDataFrame([], _DIFF_SCHEMA)
    written_frame = functools.reduce(lambda a, b: a.unionByName(b), frames, empty)
    written_frame.writeTo(result.table).using("iceberg").createOrReplace()
    written = spark.table(result.table).where(F.col("change") != "replace")
    # keys, not rows: a key the parent holds more than once in different versions has one row per version. One job
    # for both counts: grouping id 1 is per (model, change), 0 per (model, change, column)
    grouped = written.rollup("model", "change", "column_name").agg(_distinct_keys().alias("n"),
                                                                  F.grouping_id().alias("level"))
    for row in grouped.where("level <= 1 AND model IS NOT NULL").collect():
        if row["level"] == 1:
            result.counts.setdefault(row["model"], {})[_PAST[row["change"]]] = row["n"]
        elif row["change"] == "update":
            result.columns.setdefault(row["model"], {})[row["column_name"]] = row["n"]
    return result
