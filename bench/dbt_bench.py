"""dbt-level benchmark (issue 25): ``partial_cow_incremental`` against dbt-spark's incremental merge, one fresh
``dbt run`` process per step, as a scheduler runs them.

Data: TPC-DS ``store_sales`` (key ``ss_item_sk, ss_ticket_number``) from ``bench/data/sf<scale>/store_sales.parquet``,
generated on first use with ``tpcgen-cli tpcds parquet -s <scale> --tables=store_sales``.

A throw-away dbt project in ``bench/work/dbt_<tag>/`` holds one model per contender, all with the same SQL,
``select * from parquet.`{{ var('batch') }}```, the batch file of the step passed with ``--vars`` (as a scheduled
job passes its date or file):

- ``ours_iceberg``: ``materialized='partial_cow_incremental'``, ``unique_key=['ss_item_sk','ss_ticket_number']``,
  ``op_column='_op'``, full row images (no ``merge_update_columns``);
- ``spark_iceberg``: dbt-spark's ``incremental`` with ``incremental_strategy='merge'``, ``file_format='iceberg'``, the
  same ``unique_key``. Its merge has no delete clause: on the delete step only (``--vars apply_deletes: true``) a
  post-hook ``delete from {{ this }} where _op = 'D'`` removes the rows the merge marked;
- ``ours_delta`` / ``spark_delta``: the same two on Delta (target ``delta``, its own warehouse: one session catalog per
  format), where delta-spark's jars are found (``PARTIALCOW_DELTA_JARS`` or ``../shared/jars``).

Both families run through this adapter's profile (same Spark settings, same warehouse); dbt-spark's materialization
is what a ``materialized='incremental'`` model runs there.

Steps (``--steps``): ``build`` (first run on the whole table), ``batch`` (``--batches`` consecutive 1% batches of full
row images: fresh keys each time with ``ss_quantity`` and ``ss_net_profit`` changed, ``_op='U'``, plus 0.1% new keys,
``_op='I'``), ``batch10`` (one 10% batch, 1% new keys), ``delete`` (1% of the keys, ``_op='D'``, full row images),
``full_refresh`` (``--full-refresh`` from a file of the whole current table) and, with ``--snapshot``, ``snapshot``
(``dbt snapshot``, ``check_cols='all'``, of the whole table and then of it with 1% of the keys changed; Iceberg and Delta).
Within each step the contenders run one after the other (ours, dbt-spark, ours, dbt-spark), so a slow moment of the
machine falls on both.

Every batch is generated up front from ``--seed`` with the expected table after each step: a row count and one
checksum per column (see ``checksum_sql``). After the last step (``--check each``: after every step) one
``dbt run-operation`` per target computes the same checksums over each contender's table through Spark; a contender
whose table differs is flagged ``WRONG`` in the tables and on stderr.

    PYTHONPATH=adapter python bench/dbt_bench.py                              # SF1, all steps (an hour or more)
    PYTHONPATH=adapter python bench/dbt_bench.py --rows 200000 --batches 3    # smoke run on a prefix of the table
    PYTHONPATH=adapter python bench/dbt_bench.py --scale 10 --contenders ours_iceberg,spark_iceberg

Writes ``bench/results/dbt_sf<scale>[_r<rows>].{md,json,png}`` after every step and prints the markdown at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from upsert_bench import code_version, ensure_data, write_batch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
KEYS = ("ss_item_sk", "ss_ticket_number")
CDC_COLUMNS = ("ss_quantity", "ss_net_profit")
OP = "_op"
SCHEMA = "bench"
MODULUS = 1_000_000_007  # a prime: products of two residues stay below 2**63
KEY_MULTIPLIER = 1_000_003
PHASES_RE = re.compile(r"partialcow phases:\s*(\{.*\})")
CHECK_RE = re.compile(r"BENCHCHECK (\{.*\})")
STEP_KINDS = ("build", "batch", "batch10", "delete", "full_refresh", "snapshot")
DEFAULT_STEPS = ("build", "batch", "batch10", "delete", "full_refresh")


# ---------------------------------------------------------------------------------------------------------------
# the table's state as integer columns (decimals as unscaled integers), batches and expected results


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
    return pa.Array.from_buffers(t, len(values), [validity, pa.py_buffer(words.tobytes())], null_count=int((~valid).sum()))


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
        value = f"cast({f.name} as bigint)" if pa.types.is_integer(f.type) else f"cast({f.name} * {10 ** f.type.scale} as bigint)"
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
    if "snapshot" in kinds:
        steps.append(maker.whole("snapshot_init", "snapshot: first run", "snapshot"))
        positions = maker._pick(maker._count(0.01))
        maker.state.update(positions, CDC_COLUMNS)
        step = maker.whole("snapshot_1pct", "snapshot: 1% changed", "snapshot")
        step.updates, step.inserts = len(positions), 0
        steps.append(step)
    return steps


# ---------------------------------------------------------------------------------------------------------------
# the dbt project


@dataclass(frozen=True)
class Contender:
    name: str  # the model's (or snapshot's) name
    family: str  # ours | dbt_spark
    fmt: str  # iceberg | delta
    label: str
    snapshot: bool = False


CONTENDERS = (
    Contender("ours_iceberg", "ours", "iceberg", "partial_cow_incremental (Iceberg)"),
    Contender("spark_iceberg", "dbt_spark", "iceberg", "dbt-spark incremental merge (Iceberg)"),
    Contender("ours_delta", "ours", "delta", "partial_cow_incremental (Delta)"),
    Contender("spark_delta", "dbt_spark", "delta", "dbt-spark incremental merge (Delta)"),
)
SNAPSHOTS = (
    Contender("snap_iceberg", "ours", "iceberg", "dbt snapshot (Iceberg, this adapter)", snapshot=True),
    Contender("snap_delta", "dbt_spark", "delta", "dbt snapshot (Delta, dbt-spark's merge)", snapshot=True),
)
BATCH_SQL = "select * from parquet.`{{ var('batch') }}`\n"
KEY_CONFIG = "unique_key=['ss_item_sk', 'ss_ticket_number']"


def model_sql(c: Contender) -> str:
    if c.snapshot:
        return (
            f"{{% snapshot {c.name} %}}\n{{{{ config(target_schema='{SCHEMA}', {KEY_CONFIG}, strategy='check', "
            f"check_cols='all', file_format='{c.fmt}') }}}}\n{BATCH_SQL}{{% endsnapshot %}}\n"
        )
    if c.family == "ours":
        config = f"materialized='partial_cow_incremental', {KEY_CONFIG}, op_column='{OP}', file_format='{c.fmt}'"
    else:
        # dbt-spark's merge has no delete clause; the delete step enables this hook (a var) to remove what it marked
        hook = "{% if var('apply_deletes', false) %}delete from {{ this }} where " + OP + " = 'D'{% endif %}"
        config = (
            f"materialized='incremental', incremental_strategy='merge', file_format='{c.fmt}', {KEY_CONFIG}, "
            f"post_hook=[\"{hook}\"]"
        )
    return f"{{{{ config({config}) }}}}\n{BATCH_SQL}"


CHECK_MACRO = """{% macro bench_checksums(queries) %}
  {%- for name, q in queries.items() -%}
    {%- set relation = adapter.get_relation(database=none, schema=q['schema'], identifier=q['identifier']) -%}
    {%- if relation is none -%}
      {%- do log('BENCHCHECK ' ~ tojson({'name': name, 'error': 'table not found'}), info=True) -%}
    {%- else -%}
      {%- set result = run_query(q['sql']) -%}
      {%- set values = {} -%}
      {%- for column in result.column_names -%}{%- do values.update({column: result.rows[0][column]}) -%}{%- endfor -%}
      {%- do log('BENCHCHECK ' ~ tojson({'name': name, 'values': values}), info=True) -%}
    {%- endif -%}
  {%- endfor -%}
{% endmacro %}
"""


def delta_jars() -> list[str]:
    """delta-spark + delta-storage jars from PARTIALCOW_DELTA_JARS or ../shared/jars, [] when absent."""
    listed = [p.strip() for p in os.environ.get("PARTIALCOW_DELTA_JARS", "").split(",") if p.strip()]
    jars = listed or sorted(str(p) for p in (REPO.parent / "shared" / "jars").glob("delta-*.jar"))
    jars = [str(Path(j).resolve()) for j in jars if Path(j).is_file()]
    for jar in jars:
        try:
            with zipfile.ZipFile(jar) as zf:
                if "io/delta/sql/DeltaSparkSessionExtension.class" in zf.namelist():
                    return jars
        except zipfile.BadZipFile:
            continue
    return []


def write_project(project: Path, contenders: list[Contender], jars: list[str], master: str | None) -> None:
    (project / "models").mkdir(parents=True, exist_ok=True)
    (project / "snapshots").mkdir(exist_ok=True)
    (project / "macros").mkdir(exist_ok=True)
    (project / "dbt_project.yml").write_text(
        "name: dbt_bench\nversion: '1.0'\nconfig-version: 2\nprofile: dbt_bench\n"
        "flags:\n  send_anonymous_usage_stats: false\n"
    )
    outputs: dict[str, Any] = {}
    for fmt in ("iceberg", "delta"):
        target = {"type": "partialcow", "schema": SCHEMA, "table_format": fmt, "threads": 1,
                  "warehouse": str(project.parent / f"warehouse_{fmt}")}
        if master:
            target["master"] = master
        if fmt == "delta":
            target["delta_jars"] = jars
        outputs[fmt] = target
    (project / "profiles.yml").write_text(json.dumps({"dbt_bench": {"target": "iceberg", "outputs": outputs}}, indent=1))
    for c in contenders:
        folder = "snapshots" if c.snapshot else "models"
        (project / folder / f"{c.name}.sql").write_text(model_sql(c))
    (project / "macros" / "bench_checksums.sql").write_text(CHECK_MACRO)


# ---------------------------------------------------------------------------------------------------------------
# running dbt


@dataclass
class Outcome:
    step: str
    contender: str
    status: str = ""  # success | error | timeout | skipped
    model_s: float | None = None
    process_s: float | None = None
    rows_affected: int | None = None
    message: str = ""
    adapter_response: dict[str, Any] = field(default_factory=dict)
    phases: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    error: str = ""
    check: str = ""
    load_avg: float | None = None


def dbt_command() -> list[str]:
    exe = Path(sys.executable).parent / "dbt"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "dbt.cli.main"]


def dbt_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "adapter"), os.environ.get("PYTHONPATH", "")) if p)
    env["DBT_SEND_ANONYMOUS_USAGE_STATS"] = "false"
    return env


def run_process(cmd: list[str], log_dir: Path, timeout: float) -> tuple[int | None, float, str]:
    """Run ``cmd`` in its own process group (its JVM included); on timeout the whole group is killed."""
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log_dir / "stdout.txt", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=dbt_env(), start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if not isinstance(sys.exc_info()[1], subprocess.TimeoutExpired):
                raise
            code = None
    elapsed = time.perf_counter() - started
    return code, elapsed, (log_dir / "stdout.txt").read_text(errors="replace")


def error_excerpt(text: str, lines: int = 12) -> str:
    """The first lines of the error in dbt's output (or its last lines when no error line is found)."""
    all_lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    for i, line in enumerate(all_lines):
        if re.search(r"Error|ERROR|Exception|Traceback", line):
            return "\n".join(all_lines[i : i + lines])
    return "\n".join(all_lines[-lines:])


def parse_phases(log_text: str) -> dict[str, Any]:
    """The adapter's ``partialcow phases: {json}`` log line (the last one of the run), {} when it logs none.

    >>> parse_phases('x\\n12:00:01 partialcow phases: {"stage": 1.5, "apply": 2.0}\\n')
    {'stage': 1.5, 'apply': 2.0}
    """
    found: dict[str, Any] = {}
    for match in PHASES_RE.finditer(log_text):
        try:
            found = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
    return found


def run_step(project: Path, work: Path, step: Step, c: Contender, timeout: float) -> Outcome:
    log_dir = work / "logs" / step.name / c.name
    target_dir = project / f"target_{c.fmt}"  # one per target: its partial-parse state survives the other's runs
    variables: dict[str, Any] = {"batch": str(step.path)}
    if step.kind == "delete" and c.family == "dbt_spark":
        variables["apply_deletes"] = True
    cmd = dbt_command() + [
        "snapshot" if c.snapshot else "run", "--select", c.name, "--target", c.fmt, "--vars", json.dumps(variables),
        "--project-dir", str(project), "--profiles-dir", str(project), "--log-path", str(log_dir),
        "--target-path", str(target_dir),
    ] + (["--full-refresh"] if step.full_refresh else [])
    outcome = Outcome(step.name, c.name, load_avg=os.getloadavg()[0])
    (target_dir / "run_results.json").unlink(missing_ok=True)
    code, outcome.process_s, output = run_process(cmd, log_dir, timeout)
    log_file = log_dir / "dbt.log"
    log_text = log_file.read_text(errors="replace") if log_file.exists() else ""
    outcome.phases = parse_phases(log_text)
    results_file = target_dir / "run_results.json"
    if results_file.exists():
        shutil.copy(results_file, log_dir / "run_results.json")
        result = next(iter(json.loads(results_file.read_text()).get("results", [])), None)
        if result:
            outcome.model_s = result.get("execution_time")
            outcome.adapter_response = result.get("adapter_response") or {}
            outcome.rows_affected = outcome.adapter_response.get("rows_affected")
            outcome.message = outcome.adapter_response.get("_message") or ""
            for t in result.get("timing") or []:
                if t.get("started_at") and t.get("completed_at"):
                    outcome.timing[t["name"]] = _seconds(t["completed_at"]) - _seconds(t["started_at"])
            if result.get("status") not in ("success", "pass"):
                outcome.error = str(result.get("message") or "")
    if code is None:
        outcome.status, outcome.model_s = "timeout", None
        outcome.error = f"timed out after {timeout:.0f} s"
    elif code != 0 or outcome.error:
        outcome.status, outcome.model_s = "error", None
        outcome.error = (outcome.error + "\n" if outcome.error else "") + error_excerpt(output)
    else:
        outcome.status = "success"
    return outcome


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run_checks(project: Path, work: Path, tag: str, contenders: list[Contender], schema: pa.Schema,
               timeout: float) -> dict[str, dict[str, Any]]:
    """Checksums of each contender's table through Spark: one ``dbt run-operation`` per target."""
    found: dict[str, dict[str, Any]] = {}
    for fmt in ("iceberg", "delta"):
        mine = [c for c in contenders if c.fmt == fmt and not c.snapshot]
        if not mine:
            continue
        queries = {c.name: {"schema": SCHEMA, "identifier": c.name, "sql": checksum_sql(f"{SCHEMA}.{c.name}", schema)}
                   for c in mine}
        cmd = dbt_command() + [
            "run-operation", "bench_checksums", "--args", json.dumps({"queries": queries}), "--target", fmt,
            "--project-dir", str(project), "--profiles-dir", str(project), "--log-path",
            str(work / "logs" / f"check_{tag}" / fmt), "--target-path", str(project / f"target_{fmt}"),
        ]
        code, _, output = run_process(cmd, work / "logs" / f"check_{tag}" / fmt, timeout)
        for match in CHECK_RE.finditer(output):
            record = json.loads(match.group(1))
            found[record["name"]] = record
        for c in mine:
            if c.name not in found:
                why = "timed out" if code is None else error_excerpt(output, 4)
                found[c.name] = {"name": c.name, "error": f"check failed: {why}"}
    return found


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


# ---------------------------------------------------------------------------------------------------------------
# report


def _s(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _x(theirs: float | None, ours: float | None) -> str:
    return "" if theirs is None or not ours else f"{theirs / ours:.2f}x"


def cell(o: Outcome | None) -> str:
    if o is None:
        return ""
    if o.status == "success":
        return f"{_s(o.model_s)} / {_s(o.process_s)}"
    if o.status == "skipped":
        return o.error
    return f"{o.status.upper()} (process {_s(o.process_s)})"


def target_lines(steps: list[Step], by: dict[tuple[str, str], Outcome], ours: str, theirs: str) -> list[str]:
    """Issue 25's targets for one pair of contenders, each line saying met / NOT MET."""
    def pair(step: str) -> tuple[Outcome | None, Outcome | None]:
        return by.get((step, ours)), by.get((step, theirs))

    def ok(o: Outcome | None) -> bool:
        return o is not None and o.status == "success" and bool(o.model_s)

    lines = []
    batch_steps = [s.name for s in steps if s.kind == "batch"]
    model_x, process_x = [], []
    for name in batch_steps:
        a, b = pair(name)
        if ok(a) and ok(b):
            model_x.append(b.model_s / a.model_s)  # type: ignore[union-attr,operator]
            process_x.append(b.process_s / a.process_s)  # type: ignore[union-attr,operator]
    if model_x:
        for what, values, goal in (("model time", model_x, 10.0), ("process time", process_x, 3.0)):
            med = statistics.median(values)
            lines.append(
                f"- 1% batches, {what}: dbt-spark / ours median **{med:.2f}x** (range {min(values):.2f}-{max(values):.2f}x "
                f"over {len(values)} batches); target >= {goal:g}x: {'met' if med >= goal else '**NOT MET**'}"
            )
    for name, what in (("build", "first build"), ("full_refresh", "full refresh")):
        a, b = pair(name)
        if ok(a) and ok(b):
            r = a.model_s / b.model_s  # type: ignore[union-attr,operator]
            lines.append(
                f"- {what}, model time: ours {_s(a.model_s)} s vs dbt-spark's CTAS {_s(b.model_s)} s = **{r:.2f}x**; "
                f"target <= 1.25x: {'met' if r <= 1.25 else '**NOT MET**'}"
            )
    ours_batches = [by.get((n, ours)) for n in batch_steps]
    times = [o.model_s if ok(o) else None for o in ours_batches]
    if len(times) >= 3 and times[1] and times[-1]:
        drift = times[-1] / times[1] - 1
        line = (
            f"- flat over time (ours): batch {len(times)} {_s(times[-1])} s vs batch 2 {_s(times[1])} s = **{drift:+.0%}**; "
            f"target within 10%: {'met' if drift <= 0.10 else '**NOT MET**'}"
        )
        clean = [t for t in times if t]
        if len(times) >= 6 and len(clean) == len(times):
            smooth = statistics.median(times[-3:]) / statistics.median(times[1:4]) - 1
            line += f" (median of the last 3 vs batches 2-4: {smooth:+.0%})"
        lines.append(line)
        theirs_times = [o.model_s if ok(o) else None for o in (by.get((n, theirs)) for n in batch_steps)]
        if theirs_times[1] and theirs_times[-1]:
            lines.append(f"  (dbt-spark: batch {len(times)} vs batch 2 = {theirs_times[-1] / theirs_times[1] - 1:+.0%})")
    return lines


def markdown(meta: dict[str, Any], steps: list[Step], contenders: list[Contender], outcomes: list[Outcome],
             unavailable: dict[str, str], checks: dict[str, str], final: bool) -> str:
    by = {(o.step, o.contender): o for o in outcomes}
    names = {c.name for c in contenders}
    out = [
        f"# dbt benchmark: TPC-DS store_sales SF{meta['scale']}"
        + (f" — SMOKE RUN, first {meta['rows']:,} rows only" if meta["rows_limited"] else ""),
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} when written (per step in the JSON), "
        f"Python {platform.python_version()}, {meta['versions']}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"{meta['table_rows']:,} rows. Code: {meta['code']}.",
        "",
        "Every cell is one fresh `dbt run --select <model>` process (`dbt snapshot` for snapshots), contenders one after "
        "the other within each step. `model / process` = `execution_time` in run_results.json / wall time of the dbt "
        "process, in seconds. `speed-up` = dbt-spark's time / ours (above 1: ours is faster). The model SQL is "
        "`select * from parquet.`<batch file>`` for every contender.",
    ]
    if not final:
        out += ["", "**Partial results: the run was still going when this file was written.**"]
    wrong = sorted(name for name, verdict in checks.items() if verdict.startswith("WRONG"))
    if wrong:
        out += ["", f"**WRONG RESULTS: {', '.join(wrong)} (see the check rows)**"]
    for name, why in unavailable.items():
        out += ["", f"- {name}: n/a: {why}"]
    pairs = [(a, b) for a in contenders for b in contenders
             if a.family == "ours" and b.family == "dbt_spark" and a.fmt == b.fmt and a.snapshot == b.snapshot
             and not a.snapshot]
    out += ["", "## Targets (issue 25)", ""]
    for a, b in pairs:
        lines = target_lines(steps, by, a.name, b.name)
        out += [f"{a.label} vs {b.label}:", ""] + (lines or ["- not enough successful steps yet"]) + [""]
    out += [f"- results check: " + (", ".join(f"{k} {v}" for k, v in checks.items()) or "not run yet"), ""]
    for a, b in pairs:
        out += [f"## {a.fmt.capitalize()}: {a.name} vs {b.name}", ""]
        out += ["| step | batch rows (U/I/D) | ours model / process s | dbt-spark model / process s | speed-up model / process | ours result |",
                "|---|---|---:|---:|---:|---|"]
        for s in steps:
            if s.kind == "snapshot":
                continue
            oa, ob = by.get((s.name, a.name)), by.get((s.name, b.name))
            if oa is None and ob is None:
                continue
            ok = oa is not None and ob is not None and oa.status == ob.status == "success"
            speed = f"{_x(ob.model_s, oa.model_s)} / {_x(ob.process_s, oa.process_s)}" if ok else ""  # type: ignore[union-attr]
            counts = f"{s.rows:,} ({s.updates:,}/{s.inserts:,}/{s.deletes:,})"
            out.append(f"| {s.label} | {counts} | {cell(oa)} | {cell(ob)} | {speed} | {(oa.message if oa else '').replace('|', '/')} |")
        for c in (a, b):
            if c.name in checks:
                out.append(f"| check: {c.name} | | | | | {checks[c.name]} |")
        out.append("")
    snaps = [c for c in contenders if c.snapshot]
    if snaps:
        out += ["## Snapshots (`dbt snapshot`, check_cols='all')", "",
                "| step | " + " | ".join(f"{c.label} model / process s" for c in snaps) + " |",
                "|---|" + "---:|" * len(snaps)]
        for s in steps:
            if s.kind == "snapshot":
                out.append(f"| {s.label} | " + " | ".join(cell(by.get((s.name, c.name))) for c in snaps) + " |")
        out.append("")
    phase_rows = [o for o in outcomes if o.phases and o.contender in names]
    if phase_rows:
        keys = list(dict.fromkeys(k for o in phase_rows for k, v in o.phases.items() if isinstance(v, (int, float))))
        out += ["## Where ours spends its model time (`partialcow phases:` log line, seconds)", "",
                "| step | contender | " + " | ".join(keys) + " |", "|---|---|" + "---:|" * len(keys)]
        for o in phase_rows:
            out.append(f"| {o.step} | {o.contender} | " + " | ".join(_phase(o.phases.get(k)) for k in keys) + " |")
        out.append("")
    errors = [o for o in outcomes if o.error and o.status != "skipped"]
    if errors:
        out += ["## Errors", ""]
        for o in errors:
            out += [f"{o.step} / {o.contender} ({o.status}):", "", "```", o.error.strip()[:3000], "```", ""]
    return "\n".join(out) + "\n"


def _phase(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else ""


def plot(steps: list[Step], contenders: list[Contender], outcomes: list[Outcome], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(o.step, o.contender): o for o in outcomes}
    shown = [s for s in steps if any((s.name, c.name) in by for c in contenders)]
    if not shown:
        return
    x = np.arange(len(shown))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8, 0.45 * len(shown) + 3), 8), sharex=True)
    for i, c in enumerate(contenders):
        for attr, style in (("model_s", "-"), ("process_s", ":")):
            ys = [getattr(by[(s.name, c.name)], attr) if (s.name, c.name) in by and by[(s.name, c.name)].status == "success"
                  else np.nan for s in shown]
            if not np.all(np.isnan(ys)):
                top.plot(x, ys, style, marker="o" if attr == "model_s" else ".", color=f"C{i}",
                         label=f"{c.name} {'model' if attr == 'model_s' else 'process'}")
    top.set_yscale("log")
    top.set_ylabel("seconds (log)")
    top.grid(True, which="both", alpha=0.3)
    top.legend(fontsize=7, ncol=2)
    for i, c in enumerate(contenders):
        if c.family != "ours" or c.snapshot:
            continue
        theirs = next((t for t in contenders if t.family == "dbt_spark" and t.fmt == c.fmt and not t.snapshot), None)
        if theirs is None:
            continue
        for attr, style in (("model_s", "-"), ("process_s", ":")):
            ys = []
            for s in shown:
                a, b = by.get((s.name, c.name)), by.get((s.name, theirs.name))
                ok = a and b and a.status == b.status == "success" and getattr(a, attr)
                ys.append(getattr(b, attr) / getattr(a, attr) if ok else np.nan)
            if not np.all(np.isnan(ys)):
                bottom.plot(x, ys, style, marker="o", color=f"C{i}", label=f"{c.fmt}: {attr[:-2]} speed-up")
    batch_x = [i for i, s in enumerate(shown) if s.kind == "batch"]
    if batch_x:
        lo, hi = min(batch_x) - 0.4, max(batch_x) + 0.4
        bottom.hlines(10, lo, hi, colors="k", linestyles="-", label="target: 1% model >= 10x")
        bottom.hlines(3, lo, hi, colors="k", linestyles=":", label="target: 1% process >= 3x")
    build_x = [i for i, s in enumerate(shown) if s.kind in ("build", "full_refresh")]
    if build_x:
        bottom.scatter(build_x, [0.8] * len(build_x), marker="_", s=400, color="r", label="target: build >= 0.8x (ours <= 1.25x)")
    bottom.axhline(1, color="grey", lw=0.8)
    bottom.set_yscale("log")
    bottom.set_ylabel("dbt-spark / ours (log)")
    bottom.grid(True, which="both", alpha=0.3)
    bottom.legend(fontsize=7)
    bottom.set_xticks(x)
    bottom.set_xticklabels([s.name for s in shown], rotation=60, ha="right", fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for dist in ("dbt-core", "dbt-spark", "pyspark"):
        try:
            parts.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist} missing")
    return ", ".join(parts)


def load_base(scale: int, rows: int | None) -> pa.Table:
    table = pq.read_table(ensure_data(scale))
    if rows is not None:
        table = table.slice(0, rows)
    return table.replace_schema_metadata(None).cast(pa.schema([f.remove_metadata() for f in table.schema]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1, help="TPC-DS scale factor (1 or 10)")
    parser.add_argument("--rows", type=int, help="use only the first ROWS rows of store_sales (smoke runs)")
    parser.add_argument("--batches", type=int, default=20, help="consecutive 1%% batches (default 20)")
    parser.add_argument("--steps", default=",".join(DEFAULT_STEPS),
                        help="comma-separated subset of " + ",".join(STEP_KINDS) + " (build is always run)")
    parser.add_argument("--snapshot", action="store_true", help="add the snapshot steps (issue 27)")
    parser.add_argument("--contenders", help="comma-separated subset of "
                        + ",".join(c.name for c in CONTENDERS) + " (default: all; Delta ones need delta-spark's jars)")
    parser.add_argument("--check", choices=("last", "each", "none"), default="last",
                        help="compare the tables with the expected result after the last step (default) or every step")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per dbt process (default 1800)")
    parser.add_argument("--master", help="Spark master for the profile (default: the profile's default, local[*])")
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--keep", action="store_true", help="keep bench/work/dbt_<tag> (warehouses, logs, batches)")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.steps.split(",") if k) + (("snapshot",) if args.snapshot else ())
    unknown = [k for k in kinds if k not in STEP_KINDS]
    if unknown:
        parser.error(f"unknown step kind(s) {unknown}: choose from {', '.join(STEP_KINDS)}")
    if args.batches < 0:
        parser.error("--batches must be >= 0")
    code = code_version()
    command = "PYTHONPATH=adapter python bench/dbt_bench.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))

    tag = f"sf{args.scale}" + (f"_r{args.rows}" if args.rows else "")
    work = REPO / "bench" / "work" / f"dbt_{tag}"
    shutil.rmtree(work, ignore_errors=True)
    (work / "batches").mkdir(parents=True)
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"dbt_{tag}"

    jars = delta_jars()
    wanted = args.contenders.split(",") if args.contenders else [c.name for c in CONTENDERS]
    known = {c.name: c for c in CONTENDERS}
    if any(w not in known for w in wanted):
        parser.error(f"unknown contender in {wanted}: choose from {', '.join(known)}")
    unavailable: dict[str, str] = {}
    contenders = []
    for name in wanted:
        c = known[name]
        if c.fmt == "delta" and not jars:
            unavailable[name] = "no delta-spark jars (set PARTIALCOW_DELTA_JARS or put them in ../shared/jars)"
        else:
            contenders.append(c)
    if "snapshot" in kinds:
        contenders += [s for s in SNAPSHOTS if s.fmt == "iceberg" or jars]
    if not contenders:
        parser.error("no contender can run")

    started = time.perf_counter()
    base = load_base(args.scale, args.rows)
    steps = plan_steps(base, work / "batches", args.seed, kinds, args.batches)
    schema = pa.schema([f.remove_metadata() for f in base.schema])
    print(f"{base.num_rows:,} rows; {len(steps)} steps generated in {time.perf_counter() - started:.1f} s; "
          f"contenders: {', '.join(c.name for c in contenders)}", flush=True)
    del base
    project = work / "project"
    write_project(project, contenders, jars, args.master)

    meta = {"scale": args.scale, "rows_limited": args.rows is not None, "rows": args.rows, "command": command,
            "versions": versions(), "table_rows": steps[0].rows, "code": code}
    outcomes: list[Outcome] = []
    checks: dict[str, str] = {}
    failed_build: dict[str, str] = {}

    def report(final: bool) -> None:
        stem.with_suffix(".md").write_text(markdown(meta, steps, contenders, outcomes, unavailable, checks, final))
        stem.with_suffix(".json").write_text(json.dumps({
            **meta, "unavailable": unavailable, "checks": checks,
            "steps": [{**asdict(s), "path": str(s.path)} for s in steps],
            "contenders": [asdict(c) for c in contenders],
            "outcomes": [asdict(o) for o in outcomes],
        }, indent=1))
        plot(steps, contenders, outcomes, stem.with_suffix(".png"),
             f"dbt run per step, store_sales SF{args.scale}" + (f" (first {args.rows:,} rows)" if args.rows else ""))

    def check(step: Step) -> None:
        found = run_checks(project, work, step.name, [c for c in contenders if c.name not in failed_build], schema,
                           args.timeout)
        for name, record in found.items():
            verdict = compare(step.expected, record)
            checks[name] = f"{verdict} (after {step.name})"
            if not verdict.startswith("OK"):
                print(f"!!! {name} after {step.name}: {verdict}", file=sys.stderr, flush=True)

    try:
        model_steps = [s for s in steps if s.kind != "snapshot"]
        for step in steps:
            for c in contenders:
                if c.snapshot != (step.kind == "snapshot"):
                    continue
                if c.name in failed_build:
                    outcomes.append(Outcome(step.name, c.name, status="skipped", error=f"n/a: {failed_build[c.name]}"))
                    continue
                o = run_step(project, work, step, c, args.timeout)
                outcomes.append(o)
                print(f"{step.name:14s} {c.name:14s} {o.status:8s} model {_s(o.model_s):>7s} s  process "
                      f"{_s(o.process_s):>7s} s  {o.message}", flush=True)
                if o.status != "success":
                    print("  " + o.error.replace("\n", "\n  ")[:2000], flush=True)
                    if step.kind == "build" or (c.snapshot and step.name == "snapshot_init"):
                        failed_build[c.name] = f"first build failed: {o.error.strip().splitlines()[0][:200]}"
            if args.check == "each" and step.kind != "snapshot" or args.check == "last" and model_steps and step is model_steps[-1]:
                check(step)
            report(final=False)
    finally:
        report(final=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(stem.with_suffix(".md").read_text())
    print(f"wrote {stem}.md, .json, .png")
    return 1 if any(v.startswith("WRONG") for v in checks.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
