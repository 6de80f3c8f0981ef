"""The SQL of a branch merge's writes to its parent: a whole-row ``MERGE`` into a root table or a parent branch's full
overlay, a ``MERGE`` into a parent branch's delta overlay, and the parent's values of the columns a branch's rows
lack (see :mod:`partialcow.branch.merge`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from partialcow.branch.frames import same_key_sql
from partialcow.branch.naming import OP_COLUMN, OP_UPSERT, SEQ_COLUMN, quote

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["carried_columns", "merge_full_table_sql", "merge_overlay_sql", "with_parent_values"]

_INSERT = "_pcow_insert"  # in the source of a whole-row MERGE: the row to insert, not the one that deletes


def merge_full_table_sql(target: str, source: str, keys: Sequence[str], cols: Sequence[str], *, with_op: bool,
                         carried: Sequence[str] = ()) -> str:
    """MERGE the staged changes into a table holding whole rows (a root table or a detached overlay), in one commit:
    every row of a staged key is deleted and the branch's row, if it has one, inserted. A key the table holds more
    than once then ends as the branch showed it, once (an UPDATE would change every copy and keep them all).

    ``carried``: the table's columns the branch's rows lack (added after the branch built the model); the inserted
    row takes them from the key's row in the table (one copy's, for a key held twice), as an update by partial
    copy-on-write keeps them, rather than nulls."""
    names = [quote(c) for c in cols] + ([OP_COLUMN, SEQ_COLUMN] if with_op else [])
    values = [f"s.{quote(c)}" for c in cols] + ([f"'{OP_UPSERT}'", f"s.{SEQ_COLUMN}"] if with_op else [])
    staged = f"({source})"
    if carried:
        kept = [f"_pcow_carried{i}" for i in range(len(carried))]
        firsts = ", ".join(f"first({quote(c)}, true) AS {k}" for c, k in zip(carried, kept))
        by = ", ".join(quote(k) for k in keys)
        staged = (
            f"(SELECT s.*, {', '.join('c.' + k for k in kept)} FROM ({source}) s LEFT JOIN "
            f"(SELECT {by}, {firsts} FROM {target} GROUP BY {by}) c ON {same_key_sql(keys, 's', 'c')})"
        )
        names += [quote(c) for c in carried]
        values += [f"s.{k}" for k in kept]
    # each staged key twice: a row that matches (and deletes) the key's rows, and for an upsert one that matches
    # nothing (and is inserted)
    rows = (
        f"SELECT *, false AS {_INSERT} FROM {staged} "
        f"UNION ALL SELECT *, true AS {_INSERT} FROM {staged} WHERE {OP_COLUMN} = '{OP_UPSERT}'"
    )
    return (
        f"MERGE INTO {target} t USING ({rows}) s ON NOT s.{_INSERT} AND {same_key_sql(keys, 't', 's')} "
        f"WHEN MATCHED THEN DELETE "
        f"WHEN NOT MATCHED AND s.{_INSERT} THEN INSERT ({', '.join(names)}) VALUES ({', '.join(values)})"
    )


def carried_columns(spark: SparkSession, table: str, cols: Sequence[str]) -> list[str]:
    """The columns of ``table`` that the branch's rows (``cols``) lack, but for the overlay's op and sequence."""
    own = {c.lower() for c in [*cols, OP_COLUMN, SEQ_COLUMN]}
    return [c for c in spark.table(table).columns if c.lower() not in own]


def merge_overlay_sql(target: str, source: str, keys: Sequence[str], cols: Sequence[str],
                      carried: Sequence[str] = ()) -> str:
    """MERGE the staged changes into a parent branch's overlay: upserts and tombstones both become overlay rows.
    ``carried``: the overlay's columns the branch's rows lack, which ``source`` holds as the parent branch shows
    them (see :func:`_with_parent_values`): a key already in the overlay keeps its own."""
    on = same_key_sql(keys, "t", "s")
    names = [quote(c) for c in cols] + [OP_COLUMN, SEQ_COLUMN]
    sets = ", ".join(f"t.{n} = s.{n}" for n in names)
    inserted = names + [quote(c) for c in carried]
    return (
        f"MERGE INTO {target} t USING ({source}) s ON {on} WHEN MATCHED THEN UPDATE SET {sets} "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(inserted)}) VALUES ({', '.join('s.' + n for n in inserted)})"
    )


def with_parent_values(source: str, shown: str, keys: Sequence[str], carried: Sequence[str]) -> str:
    """The staged rows with the values of ``carried`` (columns the branch's rows lack, gained by the parent since
    the branch built the model) that the parent branch shows (``shown``) for their keys: an updated key keeps them,
    as a merge into main keeps them (a key new there is refused before: see ``_refuse_inserts_without_new_columns``).

    >>> print(with_parent_values("SELECT 1", "p.t", ["id"], ["w"]))  # doctest: +NORMALIZE_WHITESPACE
    SELECT s.*, p.`w` AS `w` FROM (SELECT 1) s LEFT JOIN (SELECT `id`, first(`w`) AS `w` FROM p.t GROUP BY `id`) p
    ON s.`id` <=> p.`id`
    """
    if not carried:
        return source
    key_list = ", ".join(quote(k) for k in keys)
    values = ", ".join(f"first({quote(c)}) AS {quote(c)}" for c in carried)
    return (f"SELECT s.*, {', '.join(f'p.{quote(c)} AS {quote(c)}' for c in carried)} FROM ({source}) s LEFT JOIN "
            f"(SELECT {key_list}, {values} FROM {shown} GROUP BY {key_list}) p ON {same_key_sql(keys, 's', 'p')}")
