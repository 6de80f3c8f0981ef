"""The dbt benchmark's batch generator and expected results (``bench/dbt_bench_batches.py``), without dbt or Spark.

Each step's batch file is replayed into an independent oracle (a dict keyed by the record key, applying the op codes
as a CDC consumer would) and the oracle's table is checksummed by DuckDB with the SQL the benchmark sends to Spark:
it must equal the expected checksum the benchmark precomputed with numpy. So a wrong batch, a wrong expected state
or a checksum formula that differs between the SQL and numpy fails here instead of flagging a correct contender.
"""

from __future__ import annotations

import decimal
import doctest
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import dbt_bench  # noqa: E402  (the runner: its doctests, and it must import without dbt)
import dbt_bench_batches as batches  # noqa: E402
import dbt_bench_report  # noqa: E402

duckdb = pytest.importorskip("duckdb")

INT_COLUMNS = ("ss_sold_date_sk", "ss_sold_time_sk", "ss_item_sk", "ss_customer_sk", "ss_cdemo_sk", "ss_hdemo_sk",
               "ss_addr_sk", "ss_store_sk", "ss_promo_sk")
DECIMAL_COLUMNS = ("ss_wholesale_cost", "ss_list_price", "ss_sales_price", "ss_ext_discount_amt", "ss_net_paid",
                   "ss_net_profit")


def store_sales_like(rows: int, seed: int) -> pa.Table:
    """store_sales' key and column types (int32, int64 key, decimal(7,2)) with nulls, negatives and zeros."""
    rng = np.random.default_rng(seed)
    columns: dict[str, pa.Array] = {}
    for name in INT_COLUMNS:
        values = rng.integers(1, 5000, rows)
        mask = None if name == "ss_item_sk" else rng.random(rows) < 0.05
        columns[name] = pa.array(values, pa.int32(), mask=mask)
    columns["ss_ticket_number"] = pa.array(np.arange(1, rows + 1) * 3, pa.int64())  # unique with the item: keys
    columns["ss_quantity"] = pa.array(rng.integers(0, 100, rows), pa.int32(), mask=rng.random(rows) < 0.05)
    for name in DECIMAL_COLUMNS:
        cents = rng.integers(-99_999_99, 99_999_99, rows)
        cents[:3] = 0
        values = [None if rng.random() < 0.05 else decimal.Decimal(int(c)).scaleb(-2) for c in cents]
        columns[name] = pa.array(values, pa.decimal128(7, 2))
    fields = [pa.field(n, a.type, nullable=n not in batches.KEYS) for n, a in columns.items()]
    return pa.table(list(columns.values()), schema=pa.schema(fields))


def duck_checksum(table: pa.Table) -> dict[str, int]:
    con = duckdb.connect()
    con.register("t", table)
    sql = batches.checksum_sql("t", table.schema)
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    return {n: int(v) for n, v in zip(names, cursor.fetchone())}


def key(row: dict) -> tuple:
    return tuple(row[k] for k in batches.KEYS)


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, list[batches.Step]]:
    base = store_sales_like(400, seed=3)
    folder = tmp_path_factory.mktemp("batches")
    kinds = batches.DEFAULT_STEPS + ("snapshot",)
    return base, batches.plan_steps(base, folder, seed=7, kinds=kinds, batches=3)


def test_steps_in_order(planned: tuple[pa.Table, list[batches.Step]]) -> None:
    _, steps = planned
    assert [s.name for s in steps] == ["build", "batch01", "batch02", "batch03", "batch10pct", "delete", "full_refresh",
                                       "snapshot_init", "snapshot_1pct"]
    assert [s.full_refresh for s in steps].count(True) == 1 and steps[6].full_refresh


def test_batches_replayed_by_an_oracle_give_the_expected_checksums(planned) -> None:
    base, steps = planned
    columns = base.column_names
    table: dict[tuple, dict] = {}
    touched: set[tuple] = set()
    for step in steps[:7]:
        batch = pq.read_table(step.path)
        assert batch.column_names == columns + [batches.OP], step.name
        rows = batch.to_pylist()
        ops = [r.pop(batches.OP) for r in rows]
        assert len({key(r) for r in rows}) == len(rows), f"{step.name}: one change per key"
        assert (ops.count("U"), ops.count("I"), ops.count("D")) == (step.updates, step.inserts, step.deletes), step.name
        if step.kind in ("build", "full_refresh"):
            assert set(ops) == {"I"}
            if step.kind == "full_refresh":  # the whole table as it stands after the previous steps
                assert sorted(map(key, rows)) == sorted(table) and all(table[key(r)] == r for r in rows)
            table = {key(r): r for r in rows}
        for row, op in zip(rows, ops):
            k = key(row)
            if op == "U":
                old = table[k]
                assert k not in touched, f"{step.name}: key {k} changed by an earlier batch (keys must be fresh)"
                differs = {c for c in columns if row[c] != old[c]}
                assert differs == set(batches.CDC_COLUMNS), (step.name, k, differs)
                table[k] = row
            elif op == "I" and step.kind not in ("build", "full_refresh"):
                assert k not in table, f"{step.name}: new key {k} already in the table"
                table[k] = row
            elif op == "D":
                assert table.pop(k) == row, f"{step.name}: a delete carries the row's image"
            if step.kind not in ("build", "full_refresh"):
                touched.add(k)
        oracle = pa.Table.from_pylist(list(table.values()), schema=base.schema)
        assert duck_checksum(oracle) == step.expected, step.name
    assert steps[1].updates == 4 and steps[1].inserts == 1  # 1% of 400 keys, 0.1% new (at least one)
    assert steps[4].updates == 40 and steps[5].deletes == 4


def test_snapshot_files_differ_by_one_percent_of_the_keys(planned) -> None:
    _, steps = planned
    first, second = (pq.read_table(s.path).to_pylist() for s in steps[7:9])
    before = {key(r): r for r in first}
    changed = [r for r in second if before[key(r)] != r]
    assert len(second) == len(first) and len(changed) == steps[8].updates == 4
    assert all({c for c in r if r[c] != before[key(r)][c]} == set(batches.CDC_COLUMNS) for r in changed)


def test_same_seed_same_batches(planned, tmp_path: Path) -> None:
    base, steps = planned
    again = batches.plan_steps(base, tmp_path, seed=7, kinds=batches.DEFAULT_STEPS, batches=3)
    for a, b in zip(steps, again):
        assert pq.read_table(a.path).equals(pq.read_table(b.path)) and a.expected == b.expected, a.name


@pytest.mark.parametrize("damage", ["value", "swap", "lost_row", "duplicate_row"])
def test_checksum_and_compare_catch_wrong_tables(planned, damage: str) -> None:
    base, _ = planned
    good = duck_checksum(base)
    assert batches.TableState(base).checksum() == good
    rows = base.to_pylist()
    if damage == "value":
        rows[5]["ss_net_profit"] = (rows[5]["ss_net_profit"] or decimal.Decimal(0)) + decimal.Decimal("0.01")
    elif damage == "swap":  # every column sum alone would stay the same
        i = next(i for i in range(1, len(rows)) if rows[i]["ss_quantity"] not in (None, rows[0]["ss_quantity"]))
        rows[0]["ss_quantity"], rows[i]["ss_quantity"] = rows[i]["ss_quantity"], rows[0]["ss_quantity"]
    elif damage == "lost_row":
        rows.pop(7)
    else:
        rows.append(dict(rows[7]))
    bad = duck_checksum(pa.Table.from_pylist(rows, schema=base.schema))
    verdict = batches.compare(good, {"values": {k: str(v) for k, v in bad.items()}})
    assert verdict.startswith("WRONG"), damage
    if damage in ("value", "swap"):
        assert verdict == f"WRONG: columns {'ss_net_profit' if damage == 'value' else 'ss_quantity'} differ"
    assert batches.compare(good, {"values": {k: str(v) for k, v in good.items()}}) == "OK"


@pytest.mark.parametrize("module", [dbt_bench, batches, dbt_bench_report], ids=lambda m: m.__name__)
def test_doctests(module) -> None:
    assert doctest.testmod(module).failed == 0


def test_target_lines_judge_the_issue_targets() -> None:
    """Times chosen so that each target is met by one pair and missed by the other."""
    kinds = ["build"] + ["batch"] * 4 + ["full_refresh"]
    names = ["build", "batch01", "batch02", "batch03", "batch04", "full_refresh"]
    steps = [batches.Step(n, k, n, Path(n), 1) for n, k in zip(names, kinds)]
    fast = {"build": (12.0, 20.0), "batch01": (1.0, 9.0), "batch02": (2.0, 10.0), "batch03": (2.1, 10.0),
            "batch04": (2.15, 10.0), "full_refresh": (15.0, 22.0)}
    slow = {"build": (16.0, 25.0), "batch01": (3.0, 11.0), "batch02": (3.0, 11.0), "batch03": (3.0, 12.0),
            "batch04": (3.4, 12.0), "full_refresh": (19.5, 30.0)}
    theirs = {"build": (12.0, 20.0), "full_refresh": (15.2, 24.0),
              **{n: (25.0, 32.0) for n in names[1:5]}}

    def outcomes(times: dict, who: str) -> list:
        return [dbt_bench_report.Outcome(n, who, status="success", model_s=m, process_s=p)
                for n, (m, p) in times.items()]

    for ours, met in ((fast, True), (slow, False)):
        by = {(o.step, o.contender): o for o in outcomes(ours, "a") + outcomes(theirs, "b")}
        lines = dbt_bench_report.target_lines(steps, by, "a", "b")
        assert len(lines) == 6, lines  # 2 batch lines, build, refresh, flat and dbt-spark's drift
        verdicts = [("NOT MET" not in line) for line in lines[:5]]
        assert verdicts == [met] * 5, (met, lines)
    by = {(o.step, o.contender): o for o in outcomes(fast, "a") + outcomes(theirs, "b")}
    median = (25 / 2.0 + 25 / 2.1) / 2  # of 25/1, 25/2, 25/2.1, 25/2.15
    assert f"median **{median:.2f}x**" in dbt_bench_report.target_lines(steps, by, "a", "b")[0]
