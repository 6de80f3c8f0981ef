"""The independent oracle of the materialization tests: CDC batches applied in order, in DuckDB SQL.

Written from the model contract, not from the implementation: per batch, the change with the highest sequence value
wins per key; an upsert (any op but a delete op) of a key present in the table updates it (only
``update_columns`` when given), of an absent key inserts it; a delete removes a present key and is a no-op for an
absent one. The counts it returns are what the write must report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import pyarrow as pa


@dataclass(frozen=True)
class Counts:
    inserted: int
    updated: int
    deleted: int


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class CdcOracle:
    """The expected table after each batch; ``columns`` are the table's columns (keys first is not required)."""

    def __init__(
        self,
        *,
        key_columns: Sequence[str],
        columns: Sequence[str],
        op_column: str | None = None,
        delete_ops: Sequence[str] = ("D",),
        sequence_column: str | None = None,
        update_columns: Sequence[str] | None = None,
    ) -> None:
        self.keys = list(key_columns)
        self.columns = list(columns)
        self.op_column = op_column
        self.delete_ops = list(delete_ops)
        self.sequence_column = sequence_column
        self.update_columns = None if update_columns is None else list(update_columns)
        self.con = duckdb.connect()
        self._started = False

    def apply(self, batch: pa.Table, *, update_columns: Sequence[str] | None = None) -> Counts:
        """Apply one batch (an Arrow table of change rows) to the expected state; returns what it changed.

        ``update_columns`` (default: the constructor's) limits what an update of a present key changes.
        """
        con = self.con
        update_columns = self.update_columns if update_columns is None else list(update_columns)
        con.register("batch_rows", batch)
        if not self._started:
            con.execute(f"create or replace table state as select {self._cols('b')} from batch_rows b limit 0")
            self._started = True
        keys = ", ".join(_q(k) for k in self.keys)
        if self.sequence_column:
            latest = (f"select * from batch_rows qualify row_number() over "
                      f"(partition by {keys} order by {_q(self.sequence_column)} desc) = 1")
        else:
            latest = "select * from batch_rows"
        con.execute(f"create or replace temp table latest as {latest}")
        deleting = (f"l.{_q(self.op_column)} in ({', '.join(repr(o) for o in self.delete_ops)})"
                    if self.op_column else "false")
        on = " and ".join(f"s.{_q(k)} = l.{_q(k)}" for k in self.keys)
        con.execute(f"""
            create or replace temp table classified as
            select l.*, ({deleting}) as _is_delete, exists (select 1 from state s where {on}) as _present
            from latest l""")
        inserted, updated, deleted = con.execute("""
            select count(*) filter (where not _is_delete and not _present),
                   count(*) filter (where not _is_delete and _present),
                   count(*) filter (where _is_delete and _present)
            from classified""").fetchone()
        # New values of present keys: the changed columns from the batch, the others kept from the table.
        changed = [c for c in self.columns if c not in self.keys
                   and (update_columns is None or c in update_columns)]
        merged = ", ".join(
            f"l.{_q(c)}" if c in self.keys or c in changed else f"s.{_q(c)}" for c in self.columns
        )
        con.execute(f"""
            create or replace temp table upserted as
            select {merged} from classified l join state s on {on} where not l._is_delete
            union all
            select {self._cols('l')} from classified l where not l._is_delete and not l._present""")
        con.execute(f"delete from state s using classified l where {on}")
        con.execute("insert into state select * from upserted")
        return Counts(inserted=inserted, updated=updated, deleted=deleted)

    def rows(self) -> list[tuple]:
        """The expected table as tuples in ``columns`` order, sorted by :func:`sorted_rows`."""
        return sorted_rows(self.con.execute(f"select {self._cols()} from state").fetchall())

    def _cols(self, alias: str | None = None) -> str:
        prefix = f"{alias}." if alias else ""
        return ", ".join(prefix + _q(c) for c in self.columns)


def sorted_rows(rows: Sequence[Sequence[object]]) -> list[tuple]:
    """Rows sorted like :meth:`CdcOracle.rows` (None first in each column)."""
    return sorted((tuple(r) for r in rows), key=lambda r: tuple((v is not None, v) for v in r))
