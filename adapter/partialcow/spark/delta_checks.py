"""Delta check constraints and generated columns, enforced on a write's new files before its commit.

A Delta writer must refuse rows that violate the table's ``CHECK`` constraints (``delta.constraints.<name>``; a
constraint that evaluates to NULL is violated, as delta-spark has it) and rows whose generated column differs from
its generation expression (compared null-safely). The files a write adds (re-encoded copies and inserts) are read
back by Spark and every constraint is evaluated in one aggregate; one violation stops the batch before anything is
committed, naming the constraint and sample keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from partialcow.exceptions import ChangeFeedError

if TYPE_CHECKING:
    from partialcow.spark.spec import ChangeSpec
    from partialcow.spark.tables import LakehouseTable
    from partialcow.table.delta.features import DeltaTableInfo

__all__ = ["check_new_files", "violation_conditions"]

_SAMPLE = 5


def violation_conditions(constraints: dict[str, str], generated: dict[str, str]) -> dict[str, str]:
    """What each rule calls a violation, as SQL over a row: rule description -> condition.

    >>> violation_conditions({"delta.constraints.pos": "v > 0"}, {"d": "CAST(ts AS DATE)"})
    {'check constraint pos (v > 0)': 'NOT coalesce((v > 0), false)', 'generated column d = CAST(ts AS DATE)': 'NOT (`d` <=> (CAST(ts AS DATE)))'}
    """  # noqa: E501 - a doctest output line cannot wrap
    out = {f"check constraint {name.removeprefix('delta.constraints.')} ({expr})": f"NOT coalesce(({expr}), false)"
           for name, expr in sorted(constraints.items())}
    for column, expr in sorted(generated.items()):
        out[f"generated column {column} = {expr}"] = f"NOT (`{column.replace('`', '``')}` <=> ({expr}))"
    return out


def check_new_files(table: LakehouseTable, files: Sequence[str], spec: ChangeSpec, *,
                    info: DeltaTableInfo | None = None) -> None:
    """Raise ``ChangeFeedError`` if a row of ``files`` (new data files of ``table``) violates one of the table's
    check constraints or generated columns (those of ``info`` when given: the metadata the commit will carry)."""
    from partialcow.table.base import quote_identifier
    from partialcow.table.delta.features import constraints, generated_columns

    if info is None:
        info = table.format_table.table_info()  # type: ignore[attr-defined]
    rules = violation_conditions(constraints(info), generated_columns(info))
    if not rules or not files:
        return
    from pyspark.sql import functions as F

    from partialcow.spark.tables import local_path

    frame = table.spark.read.parquet(*[local_path(f) for f in files])
    counts = frame.select(*[F.sum(F.expr(cond).cast("long")).alias(f"c{i}") for i, cond in enumerate(rules.values())])
    totals = counts.collect()[0]  # an aggregate without grouping: exactly one row
    broken = [(rule, cond, int(totals[i] or 0)) for i, (rule, cond) in enumerate(rules.items()) if totals[i]]
    if not broken:
        return
    rule, cond, count = broken[0]
    keys = [quote_identifier(k) for k in spec.key_columns]
    samples = frame.where(cond).select(*keys).limit(_SAMPLE).collect()
    sample = ", ".join("(" + ", ".join(f"{k}={r[k]!r}" for k in spec.key_columns) + ")" for r in samples)
    more = f"; also {', '.join(b[0] for b in broken[1:])}" if len(broken) > 1 else ""
    raise ChangeFeedError(
        f"model {spec.model}: {count} row(s) would violate the {rule} of Delta table {table.name}, e.g. {sample}"
        f"{more}; nothing was written. Fix the model's rows (Delta enforces constraints on every writer)"
    )
