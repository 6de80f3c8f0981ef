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
``full_refresh`` (``--full-refresh`` from a file of the whole current table) and, with ``--snapshot``,
``snapshot`` (``dbt snapshot``, ``strategy='check'``, of the whole table and then of it with 1% of the keys
changed; Iceberg and Delta).
Within each step the contenders run one after the other (ours, dbt-spark, ours, dbt-spark), so a slow moment of the
machine falls on both.

Every batch is generated up front from ``--seed`` with the expected table after each step: a row count and one
checksum per column (see ``checksum_sql``). After the last incremental step and after the last step (``--check each``:
after every step) one ``dbt run-operation`` per target computes the same checksums over each contender's table through
Spark; a contender
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
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dbt_bench_batches import (  # noqa: E402
    CDC_COLUMNS,
    DEFAULT_STEPS,
    KEYS,
    OP,
    STEP_KINDS,
    Step,
    checksum_sql,
    compare,
    plan_steps,
)
from dbt_bench_report import Contender, Outcome, markdown, plot, secs  # noqa: E402
from upsert_bench import code_version, ensure_data  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCHEMA = "bench"
PHASES_RE = re.compile(r"partialcow phases:\s*(\{.*\})")
CHECK_RE = re.compile(r"BENCHCHECK (\{.*\})")


# ---------------------------------------------------------------------------------------------------------------
# the dbt project


CONTENDERS = (
    Contender("ours_iceberg", "ours", "iceberg", "partial_cow_incremental (Iceberg)"),
    Contender("spark_iceberg", "dbt_spark", "iceberg", "dbt-spark incremental merge (Iceberg)"),
    Contender("ours_delta", "ours", "delta", "partial_cow_incremental (Delta)"),
    Contender("spark_delta", "dbt_spark", "delta", "dbt-spark incremental merge (Delta)"),
)
SNAPSHOTS = (
    Contender("snap_iceberg", "ours", "iceberg", "dbt snapshot (Iceberg, this adapter)", snapshot=True),
    Contender("snap_ours_delta", "ours", "delta", "dbt snapshot (Delta, this adapter)", snapshot=True),
    Contender("snap_delta", "dbt_spark", "delta", "dbt snapshot (Delta, dbt-spark's merge)", snapshot=True),
)
BATCH_SQL = "select * from parquet.`{{ var('batch') }}`\n"
KEY_CONFIG = f"unique_key={list(KEYS)!r}"


def model_sql(c: Contender) -> str:
    if c.snapshot:
        # A list unique_key fails in dbt-spark's snapshot on both formats ([AMBIGUOUS_REFERENCE]
        # `snapshotted_data`.`dbt_unique_key_1`, dbt-spark 1.11): one expression key instead. check_cols='all' ran
        # Spark's planner out of a 2g driver heap (constraint propagation over the 24 columns' comparisons) on the
        # second run even at 20,000 rows: the two columns the batches change instead.
        key = "concat(" + ", '-', ".join(KEYS) + ")"
        write = "partial_cow" if c.family == "ours" else "merge"
        return (
            f"{{% snapshot {c.name} %}}\n{{{{ config(target_schema='{SCHEMA}', unique_key=\"{key}\", strategy='check', "
            f"check_cols={list(CDC_COLUMNS)!r}, file_format='{c.fmt}', snapshot_write='{write}') }}}}\n"
            f"{BATCH_SQL}{{% endsnapshot %}}\n"
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
    profiles = {"dbt_bench": {"target": "iceberg", "outputs": outputs}}
    (project / "profiles.yml").write_text(json.dumps(profiles, indent=1))
    for c in contenders:
        folder = "snapshots" if c.snapshot else "models"
        (project / folder / f"{c.name}.sql").write_text(model_sql(c))
    (project / "macros" / "bench_checksums.sql").write_text(CHECK_MACRO)


# ---------------------------------------------------------------------------------------------------------------
# running dbt


def dbt_command() -> list[str]:
    exe = Path(sys.executable).parent / "dbt"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "dbt.cli.main"]


def dbt_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "adapter"), os.environ.get("PYTHONPATH", "")) if p)
    env["DBT_SEND_ANONYMOUS_USAGE_STATS"] = "false"
    return env


def run_process(cmd: list[str], log_dir: Path, timeout: float) -> tuple[int | None, float, str]:
    """Run ``cmd`` in its own process group (its JVM included); on timeout the whole group is killed.
    Returns the exit code (None after a timeout), the wall time and the output."""
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


ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
SPARK_LOG_RE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|INFO|DEBUG) ")


def error_excerpt(text: str, lines: int = 12) -> str:
    """The first lines of the error in dbt's output (its last lines when no error line is found), without Spark's
    own log lines.

    >>> error_excerpt("a\\n26/11/25 09:57:41 WARN ObjectStore: x\\nRuntime Error in model m\\n  bad key\\n")
    'Runtime Error in model m\\n  bad key'
    """
    kept = [ANSI_RE.sub("", line).rstrip() for line in text.splitlines()]
    kept = [line for line in kept if line.strip() and not SPARK_LOG_RE.match(line)]
    for i, line in enumerate(kept):
        if re.search(r"Error|ERROR|Exception|Traceback", line):
            return "\n".join(kept[i : i + lines])
    return "\n".join(kept[-lines:])


def parse_phases(log_text: str) -> dict[str, Any]:
    """The adapter's ``partialcow phases: {json}`` log lines of a run merged (a later value of a key wins), {} when
    it logs none.

    >>> parse_phases('12:00:01 partialcow phases: {"stage": 1.5, "apply": 2.0}\\npartialcow phases: {"commit": 0.5}')
    {'stage': 1.5, 'apply': 2.0, 'commit': 0.5}
    """
    found: dict[str, Any] = {}
    for match in PHASES_RE.finditer(log_text):
        try:
            found.update(json.loads(match.group(1)))
        except (json.JSONDecodeError, TypeError, ValueError):
            continue
    return found


LOG_TIME_RE = re.compile(r"^(?:\x1b\[[0-9;]*m)?(\d\d):(\d\d):(\d\d\.\d+) ")
PROCESS_MARKS = (  # (segment name, the dbt.log line that ends it); the first match of each, in order
    ("start", re.compile(r"Running with dbt=")),  # interpreter start and dbt's imports
    ("parse", re.compile(r"\]: Found \d+ ")),  # project parse (partial or full) and manifest
    ("session", re.compile(r"SQL status: ")),  # the first statement: the SparkSession starts here
    ("prepare", re.compile(r" START (sql|snapshot) ")),  # dbt's relation listing up to the model's start
    ("model", re.compile(r"Finished running node ")),
)


def process_segments(log_text: str, started_epoch: float, ended_epoch: float) -> dict[str, float]:
    """Where a dbt process's wall time went, from the timestamps of its dbt.log (local time of day) and the process's
    start and end: start, parse, session, prepare, model, exit (seconds). Segments whose line is missing are left out.

    >>> import datetime as dt
    >>> t0 = dt.datetime(2026, 1, 1, 10, 0, 0).timestamp()
    >>> log = "\\n".join(["10:00:01.000 [info ] [MainThread]: Running with dbt=1.11",
    ...     "10:00:03.000 [info ] [MainThread]: Found 4 models",
    ...     "10:00:13.000 [debug] [P]: SQL status: OK in 9 seconds",
    ...     "10:00:14.000 [info ] [T]: 1 of 1 START sql model x", "10:00:20.000 [debug] [T]: Finished running node m"])
    >>> process_segments(log, t0, t0 + 21)
    {'start': 1.0, 'parse': 2.0, 'session': 10.0, 'prepare': 1.0, 'model': 6.0, 'exit': 1.0}
    """
    import datetime as dt

    day = dt.datetime.fromtimestamp(started_epoch).replace(hour=0, minute=0, second=0, microsecond=0)
    out: dict[str, float] = {}
    previous = started_epoch
    pending = list(PROCESS_MARKS)
    for line in log_text.splitlines():
        if not pending:
            break
        name, mark = pending[0]
        if not mark.search(line):
            continue
        stamp = LOG_TIME_RE.match(line)
        if not stamp:
            continue
        at = (day + dt.timedelta(hours=int(stamp[1]), minutes=int(stamp[2]), seconds=float(stamp[3]))).timestamp()
        if at < previous - 43200:  # the run crossed midnight
            at += 86400
        out[name] = round(at - previous, 3)
        previous = at
        pending.pop(0)
    if out:
        out["exit"] = round(ended_epoch - previous, 3)
    return out


def run_step(project: Path, work: Path, step: Step, c: Contender, timeout: float) -> Outcome:
    log_dir = work / "logs" / step.name / c.name
    # One target folder per contender: dbt keeps its partial-parse state there, and a state left by the other
    # contender's run with the same vars would spare only the second process of a step its parse.
    target_dir = project / f"target_{c.name}"
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
    started = time.time()
    code, outcome.process_s, output = run_process(cmd, log_dir, timeout)
    log_file = log_dir / "dbt.log"
    log_text = log_file.read_text(errors="replace") if log_file.exists() else ""
    outcome.phases = parse_phases(log_text + "\n" + output)  # dbt's logger writes dbt.log, Python's stderr
    outcome.segments = process_segments(log_text, started, started + outcome.process_s)
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
        outcome.error = ANSI_RE.sub("", outcome.error).strip() or error_excerpt(output)
    else:
        outcome.status = "success"
    return outcome


def warm_class_cache(work: Path, steps: list[Step], contenders: list[Contender], jars: list[str],
                     master: str | None, timeout: float) -> str:
    """Bring the driver JVM's class-sharing archive (partialcow.spark.class_cache) to a user's steady state.

    A user's second dbt process writes the archive and every later one maps it; left alone, the bench's second
    process (one contender's first build) would pay for writing it. So the bench keeps its archives in its work
    folder and, before anything is timed, runs per table format the first build and the first 1% batch of every
    contender (the first build and a full refresh when no batch step runs) in a throw-away project and warehouse, all
    contenders' models and snapshots in one ``dbt build`` process each: the first process leaves the mark, the
    second writes the archive of what every contender loads.
    Returns a note for the results.
    """
    cache = work / "jvm_cache"
    os.environ["PARTIALCOW_CLASS_CACHE_DIR"] = str(cache)  # dbt_env() passes it to every dbt process
    warm = work / "warmup"
    models = list(contenders)
    write_project(warm / "project", models, jars, master)
    first_batch = next((s for s in steps if s.kind == "batch"), None)
    spent = time.perf_counter()
    for fmt in sorted({c.fmt for c in models}):
        names = [c.name for c in models if c.fmt == fmt]
        # two processes, always: with one (no batch step) the first timed process would write the archive; without
        # a batch step the second rebuilds (an incremental run of the whole table would take minutes)
        for n, step in enumerate([steps[0], first_batch or steps[0]]):
            cmd = dbt_command() + [
                "build", "--select", *names, "--target", fmt, "--vars", json.dumps({"batch": str(step.path)}),
                "--project-dir", str(warm / "project"), "--profiles-dir", str(warm / "project"),
                "--log-path", str(warm / "logs" / fmt / f"{n}_{step.name}"), "--target-path", str(warm / "target"),
            ] + (["--full-refresh"] if n and first_batch is None else [])
            code, _, output = run_process(cmd, warm / "logs" / fmt / f"{n}_{step.name}", timeout)
            if code != 0:
                print(f"class-cache warm-up ({fmt}, {step.name}) failed: {error_excerpt(output)}", flush=True)
    # the writing JVM finishes its archive after dbt exits: wait for it, so it does not share the CPU with a step
    deadline = time.monotonic() + 300
    while any("Written dynamic archive" not in log.read_text(errors="replace") for log in cache.glob("*.dump.log")):
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    shutil.rmtree(warm, ignore_errors=True)
    return (f"JVM class-sharing archives warmed before the timed steps ({time.perf_counter() - spent:.0f} s, "
            "untimed): every timed process maps one, as a user's third and later processes do")


def short_reason(error: str) -> str:
    """The line of a dbt error that says what went wrong (dbt's own first line only names the model).

    >>> short_reason("Runtime Error in model m (models/m.sql)\\n  Runtime Error\\n  model m: needs jars\\nmore")
    'model m: needs jars'
    """
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    for line in lines:
        if not re.match(r"^\w+ Error( in (model|snapshot) .*)?$", line):
            return line[:240]
    return lines[0][:240] if lines else "unknown error"


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
            str(work / "logs" / f"check_{tag}" / fmt), "--target-path", str(project / f"target_check_{fmt}"),
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
                        help="compare the tables with the expected result after the last incremental step and the last "
                        "step (default), or after every step")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per dbt process (default 1800)")
    parser.add_argument("--master", help="Spark master for the profile (default: the profile's default, local[*])")
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--class-cache", choices=("warm", "off"), default="warm",
                        help="warm: every timed process maps a JVM class-sharing archive written before the timed "
                        "steps (a user's steady state, the default); off: no archive (PARTIALCOW_CLASS_CACHE=0)")
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
    known = {c.name: c for c in (*CONTENDERS, *SNAPSHOTS)}
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
    if "snapshot" in kinds and not any(c.snapshot for c in contenders):
        # --snapshot alone: every snapshot contender (naming some in --contenders selects those)
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
    if args.class_cache == "off":
        os.environ["PARTIALCOW_CLASS_CACHE"] = "0"
        class_cache = "JVM class-sharing archives off (PARTIALCOW_CLASS_CACHE=0)"
    else:
        class_cache = warm_class_cache(work, steps, contenders, jars, args.master, args.timeout)
    print(class_cache, flush=True)

    meta = {"scale": args.scale, "rows_limited": args.rows is not None, "rows": args.rows, "command": command,
            "versions": versions(), "table_rows": steps[0].rows, "code": code, "check": args.check,
            "class_cache": class_cache}
    outcomes: list[Outcome] = []
    checks: dict[str, dict[str, str]] = {}  # contender -> step -> verdict
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
            checks.setdefault(name, {})[step.name] = verdict
            if not verdict.startswith("OK"):
                print(f"!!! {name} after {step.name}: {verdict}", file=sys.stderr, flush=True)

    try:
        # A full refresh rebuilds the table from the expected state, so it would hide a wrong incremental result:
        # "last" checks after the last incremental step too.
        incremental = [s for s in steps if s.kind in ("batch", "batch10", "delete")]
        model_steps = [s for s in steps if s.kind != "snapshot"]
        checked = {"each": model_steps, "last": incremental[-1:] + model_steps[-1:], "none": []}[args.check]
        check_points = {s.name for s in checked}
        for step in steps:
            for c in contenders:
                if c.snapshot != (step.kind == "snapshot"):
                    continue
                if c.name in failed_build:
                    outcomes.append(Outcome(step.name, c.name, status="skipped", error="n/a: first build failed"))
                    continue
                o = run_step(project, work, step, c, args.timeout)
                outcomes.append(o)
                print(f"{step.name:14s} {c.name:14s} {o.status:8s} model {secs(o.model_s):>7s} s  process "
                      f"{secs(o.process_s):>7s} s  {o.message}", flush=True)
                if o.status != "success":
                    print("  " + o.error.replace("\n", "\n  ")[:2000], flush=True)
                    if step.kind == "build" or (c.snapshot and step.name == "snapshot_init"):
                        failed_build[c.name] = f"first build failed: {short_reason(o.error)}"
                        unavailable[c.name] = failed_build[c.name]
            if step.name in check_points:
                check(step)
            report(final=False)
    finally:
        report(final=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(stem.with_suffix(".md").read_text())
    print(f"wrote {stem}.md, .json, .png")
    return 1 if any(v.startswith("WRONG") for per_step in checks.values() for v in per_step.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
