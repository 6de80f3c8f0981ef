"""The dbt benchmark's data (``bench/dbt_bench.py``): the steps' batch files and the table expected after each.

Generated up front from one seed. The expected table is kept as integer columns (decimals as unscaled integers), so
applying a batch and checksumming the result take a fraction of a second at SF1; :func:`checksum_sql` computes the
same numbers over a contender's table in Spark (or DuckDB, in the tests).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from upsert_bench import write_batch  # noqa: E402

KEYS = ("ss_item_sk", "ss_ticket_number")
CDC_COLUMNS = ("ss_quantity", "ss_net_profit")
OP = "_op"
MODULUS = 1_000_000_007  # a prime: products of two residues stay below 2**63
KEY_MULTIPLIER = 1_000_003
STEP_KINDS = ("build", "batch", "batch10", "delete", "full_refresh", "snapshot")
DEFAULT_STEPS = ("build", "batch", "batch10", "delete", "full_refresh")


def to_ints(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Values and validity of an integer or decimal column; decimals as their unscaled integers (exact).

    >>> import decimal
    >>> to_ints(pa.array([decimal.Decimal("-1.25"), None, decimal.Decimal("3.00")], pa.decimal128(7, 2)))[0].tolist()
    [-125, 0, 300]
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    t = arr.type
    if pa.types.is_integer(t):
        values = np.array(arr.fill_null(0).to_numpy(zero_copy_only=False))  # a writable copy
        return values, valid
    if pa.types.is_decimal(t) and t.bit_width == 128:
        words = np.frombuffer(arr.buffers()[1], dtype="<i8")[2 * arr.offset : 2 * (arr.offset + len(arr))]
        low, high = words[0::2].copy(), words[1::2]
        if not np.array_equal(high[valid], low[valid] >> 63):
            raise ValueError(f"decimal column of type {t} holds values beyond 64-bit integers")
        low[~valid] = 0
        return low, valid
    raise TypeError(f"store_sales column of unexpected type {t}")


def from_ints(values: np.ndarray, valid: np.ndarray, t: pa.DataType) -> pa.Array:
    """The inverse of :func:`to_ints`.

    >>> from_ints(np.array([-125, 0]), np.array([True, False]), pa.decimal128(7, 2)).to_pylist()
    [Decimal('-1.25'), None]
    """
    if pa.types.is_integer(t):
        return pa.array(values, type=t, mask=~valid)
    words = np.empty(2 * len(values), dtype="<i8")
    words[0::2] = values
    words[1::2] = values >> 63
    validity = pa.array(valid, pa.bool_()).buffers()[1]
    nulls = int((~valid).sum())
    return pa.Array.from_buffers(t, len(values), [validity, pa.py_buffer(words.tobytes())], null_count=nulls)


def changed_ints(values: np.ndarray, valid: np.ndarray, t: pa.DataType) -> np.ndarray:
    """A different value for every row: integers +1 (null -> 1), decimals one unit of the last digit towards zero
    (stays within the precision; 0 -> -0.01, null -> 0.01), as ``upsert_bench.changed`` does."""
    if pa.types.is_integer(t):
        return np.where(valid, values + 1, 1).astype(values.dtype)
    return np.where(valid, np.where(values >= 0, values - 1, values + 1), 1).astype(values.dtype)


class TableState:
    """The expected table: every column as integers, rows that were ever in the table, and which are alive."""

    def __init__(self, table: pa.Table) -> None:
        self.schema = pa.schema([f.remove_metadata() for f in table.schema])
        self.values: dict[str, np.ndarray] = {}
        self.valid: dict[str, np.ndarray] = {}
        for name in self.schema.names:
            self.values[name], self.valid[name] = to_ints(table.column(name))
        self.alive = np.ones(table.num_rows, dtype=bool)

    @property
    def num_rows(self) -> int:
        return int(self.alive.sum())

    def take(self, positions: np.ndarray) -> pa.Table:
        return pa.table(
            [from_ints(self.values[f.name][positions], self.valid[f.name][positions], f.type) for f in self.schema],
            schema=self.schema,
        )

    def table(self) -> pa.Table:
        return self.take(np.flatnonzero(self.alive))

    def update(self, positions: np.ndarray, columns: tuple[str, ...]) -> None:
        for name in columns:
            t = self.schema.field(name).type
            self.values[name][positions] = changed_ints(self.values[name][positions], self.valid[name][positions], t)
            self.valid[name][positions] = True

    def append(self, rows: pa.Table) -> np.ndarray:
        start = len(self.alive)
        for name in self.schema.names:
            values, valid = to_ints(rows.column(name))
            self.values[name] = np.concatenate([self.values[name], values.astype(self.values[name].dtype)])
            self.valid[name] = np.concatenate([self.valid[name], valid])
        self.alive = np.concatenate([self.alive, np.ones(rows.num_rows, dtype=bool)])
        return np.arange(start, len(self.alive))

    def delete(self, positions: np.ndarray) -> None:
        self.alive[positions] = False

    def checksum(self) -> dict[str, int]:
        """Row count and one checksum per column over the alive rows: the numbers :func:`checksum_sql` computes."""
        alive = self.alive
        item = self.values[KEYS[0]][alive].astype(np.int64)
        ticket = self.values[KEYS[1]][alive].astype(np.int64)
        h = np.mod(item * KEY_MULTIPLIER + ticket, MODULUS) + 1
        out = {"rows": int(alive.sum())}
        for name in self.schema.names:
            x = np.where(self.valid[name][alive], np.mod(self.values[name][alive].astype(np.int64), MODULUS) + 1, 0)
            out[name] = int(np.mod(h * x, MODULUS).sum(dtype=np.int64))
        return out


def checksum_sql(relation: str, schema: pa.Schema) -> str:
    """The query computing :meth:`TableState.checksum` over a table (Spark SQL; DuckDB runs it too).

    Each row gets a number ``h`` from its key; each column sums ``h * (value mod M + 1)`` mod M over the rows (0 for a
    null), so a value moved to another row, a wrong value, a lost or a duplicated row changes that column's sum.
    Decimals count as unscaled integers. ``(a % M + M) % M`` instead of ``pmod``: portable and non-negative.
    """
    m = MODULUS

    def residue(expr: str) -> str:
        return f"(({expr}) % {m} + {m}) % {m}"

    h = residue(f"cast({KEYS[0]} as bigint) * {KEY_MULTIPLIER} + cast({KEYS[1]} as bigint)") + " + 1"
    parts = ["cast(count(*) as string) as rows"]
    for f in schema:
        scaled = f.name if pa.types.is_integer(f.type) else f"{f.name} * {10 ** f.type.scale}"
        value = f"cast({scaled} as bigint)"
        x = f"coalesce({residue(value)} + 1, 0)"
        parts.append(f"cast(coalesce(sum((({h}) * ({x})) % {m}), 0) as string) as {f.name}")
    return f"select {', '.join(parts)} from {relation}"


@dataclass
class Step:
    name: str  # unique: build, batch01, ..., batch10pct, delete, full_refresh, snapshot_init, snapshot_1pct
    kind: str  # one of STEP_KINDS
    label: str
    path: Path
    rows: int  # rows in the batch file
    updates: int = 0
    inserts: int = 0
    deletes: int = 0
    full_refresh: bool = False
    expected: dict[str, int] = field(default_factory=dict)  # the checksum of the table after the step


def with_ops(rows: pa.Table, ops: list[str] | np.ndarray) -> pa.Table:
    return rows.append_column(OP, pa.array(ops, pa.string()))


class BatchMaker:
    """Generates the steps' batch files from one seed and keeps the expected table after each step.

    Updated and deleted keys are drawn without replacement from the base table (fresh keys for every batch) while
    enough remain, then from every live row; new keys get ticket numbers above any in the table.
    """

    def __init__(self, base: pa.Table, folder: Path, seed: int) -> None:
        self.state = TableState(base)
        self.base_rows = base.num_rows
        self.folder = folder
        self.rng = np.random.default_rng(seed)
        self.unused = self.rng.permutation(base.num_rows)
        self.next_ticket = int(self.state.values[KEYS[1]].max()) + 1

    def _pick(self, k: int) -> np.ndarray:
        if k <= len(self.unused):
            picked, self.unused = self.unused[:k], self.unused[k:]
            return picked
        return self.rng.choice(np.flatnonzero(self.state.alive), size=k, replace=False)

    def _count(self, fraction: float) -> int:
        return max(1, int(round(self.base_rows * fraction)))

    def _write(self, name: str, rows: pa.Table) -> Path:
        path = self.folder / f"{name}.parquet"
        write_batch(rows, path)
        return path

    def whole(self, name: str, label: str, kind: str, *, full_refresh: bool = False) -> Step:
        """The whole current table as one batch (first build, full refresh, snapshots)."""
        rows = self.state.table()
        path = self._write(name, with_ops(rows, ["I"] * rows.num_rows))
        return Step(name, kind, label, path, rows.num_rows, inserts=rows.num_rows, full_refresh=full_refresh,
                    expected=self.state.checksum())

    def upsert(self, name: str, label: str, kind: str, fraction: float, new_fraction: float) -> Step:
        positions = self._pick(self._count(fraction))
        self.state.update(positions, CDC_COLUMNS)
        updated = self.state.take(positions)
        source = self.rng.choice(np.flatnonzero(self.state.alive), size=self._count(new_fraction), replace=False)
        new = self.state.take(source)
        tickets = np.arange(self.next_ticket, self.next_ticket + new.num_rows, dtype=np.int64)
        self.next_ticket += new.num_rows
        new = new.set_column(new.schema.get_field_index(KEYS[1]), new.schema.field(KEYS[1]),
                             pa.array(tickets, new.schema.field(KEYS[1]).type))
        self.state.append(new)
        rows = pa.concat_tables([with_ops(updated, ["U"] * updated.num_rows), with_ops(new, ["I"] * new.num_rows)])
        rows = rows.take(self.rng.permutation(rows.num_rows))  # a feed's order, not ours
        return Step(name, kind, label, self._write(name, rows), rows.num_rows, updates=updated.num_rows,
                    inserts=new.num_rows, expected=self.state.checksum())

    def changed_whole(self, name: str, label: str, fraction: float) -> Step:
        """The whole table after ``fraction`` of its keys changed in place (no inserts): a snapshot's source."""
        positions = self._pick(self._count(fraction))
        self.state.update(positions, CDC_COLUMNS)
        step = self.whole(name, label, "snapshot")
        step.updates, step.inserts = len(positions), 0
        return step

    def delete(self, name: str, label: str, fraction: float) -> Step:
        positions = self._pick(self._count(fraction))
        rows = with_ops(self.state.take(positions), ["D"] * len(positions))  # before-images, as a CDC feed sends them
        self.state.delete(positions)
        return Step(name, "delete", label, self._write(name, rows), rows.num_rows, deletes=rows.num_rows,
                    expected=self.state.checksum())


def plan_steps(base: pa.Table, folder: Path, seed: int, kinds: tuple[str, ...], batches: int) -> list[Step]:
    """Every step's batch file and expected result, in run order.

    >>> import tempfile
    >>> base = pa.table({"ss_item_sk": pa.array(range(200), pa.int32()),
    ...                  "ss_ticket_number": pa.array(range(200), pa.int64()),
    ...                  "ss_quantity": pa.array([5] * 200, pa.int32()),
    ...                  "ss_net_profit": pa.array([1] * 200, pa.int64())})
    >>> [(s.name, s.rows) for s in plan_steps(base, Path(tempfile.mkdtemp()), 1, DEFAULT_STEPS, 2)]
    [('build', 200), ('batch01', 3), ('batch02', 3), ('batch10pct', 22), ('delete', 2), ('full_refresh', 202)]
    """
    maker = BatchMaker(base, folder, seed)
    steps = [maker.whole("build", "first build", "build")]
    if "batch" in kinds:
        steps += [maker.upsert(f"batch{i:02d}", f"1% batch {i}", "batch", 0.01, 0.001) for i in range(1, batches + 1)]
    if "batch10" in kinds:
        steps.append(maker.upsert("batch10pct", "10% batch", "batch10", 0.10, 0.01))
    if "delete" in kinds:
        steps.append(maker.delete("delete", "1% deletes", 0.01))
    if "full_refresh" in kinds:
        steps.append(maker.whole("full_refresh", "--full-refresh", "full_refresh", full_refresh=True))
    if "snapshot" in kinds:  # what a snapshot reads: the whole source table, then the same with 1% changed
        steps.append(maker.whole("snapshot_init", "snapshot: first run", "snapshot"))
        steps.append(maker.changed_whole("snapshot_1pct", "snapshot: 1% changed", 0.01))
    return steps


def compare(expected: dict[str, int], record: dict[str, Any]) -> str:
    """'OK', or what differs.

    >>> compare({"rows": 2, "a": 5}, {"values": {"rows": "2", "a": "5"}})
    'OK'
    >>> compare({"rows": 2, "a": 5}, {"values": {"rows": "3", "a": "5"}})
    'WRONG: rows 3 (expected 2)'
    >>> compare({"rows": 2, "a": 5, "b": 1}, {"values": {"rows": "2", "a": "4", "b": "0"}})
    'WRONG: columns a, b differ'
    """
    if "error" in record:
        return f"UNCHECKED: {record['error']}"
    got = {k: int(v) if v not in (None, "None", "") else None for k, v in record["values"].items()}
    if got.get("rows") != expected["rows"]:
        return f"WRONG: rows {got.get('rows')} (expected {expected['rows']})"
    bad = [k for k, v in expected.items() if k != "rows" and got.get(k) != v]
    return f"WRONG: columns {', '.join(bad)} differ" if bad else "OK"
