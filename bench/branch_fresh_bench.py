"""A `partial_cow_incremental` model on a branch, as users run it: one fresh `dbt run --vars '{branch: dev}'`
process per batch, against the same batch on main.

A throw-away dbt project (`bench/work/branch_fresh/`, deleted unless `--keep`): two identical models of `--rows`
rows built on main (`cdc`, `cdc_main`), branch `dev` created, then `--rounds` rounds of one batch per variant, each
1% of the keys updated (fresh keys every batch, one column changed, full row images). Variants (`--variants`):

- `driver`: `cdc` on branch `dev`, its copy-on-write image rewritten on the driver (the default);
- `spark`: the same with `PARTIALCOW_DRIVER_MAX_ROWS=0` (the image, and the staging, by Spark jobs);
- `main`: `cdc_main` without a branch, the same batch applied to the table itself;
- `branch@NAME` (one per `--code NAME=PATH`): a model of its own on branch `dev`, built and changed by the package
  found in folder PATH (e.g. `/tmp/wt_old/adapter` of `git worktree add /tmp/wt_old <commit>`), so that two
  versions of the code are timed in one run, each on a model only it writes.

Reported: model time (`execution_time` in `run_results.json`) and process wall time of each run.

Run:  PYTHONPATH=adapter python bench/branch_fresh_bench.py [--rows 200000] [--rounds 3] [--variants driver,main]
          [--code old=/tmp/wt_old/adapter --code new=adapter --variants branch@old,branch@new]
Writes bench/results/branch_fresh.{md,json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
# variant -> (model, on the branch, environment)
VARIANTS = {"driver": ("cdc", True, {}), "spark": ("cdc", True, {"PARTIALCOW_DRIVER_MAX_ROWS": "0"}),
            "main": ("cdc_main", False, {})}
LABELS = {"driver": "on branch dev", "spark": "on branch dev, Spark jobs", "main": "on main"}
MODEL = """{{ config(materialized='partial_cow_incremental', unique_key='id', op_column='_op') }}
select * from parquet.`{{ var('batch') }}`
"""


def _batch(path: Path, ids: list[int], *, generation: int, op: str) -> str:
    table = pa.table({
        "id": pa.array(ids, pa.int64()),
        "v": pa.array([i * 10 + generation for i in ids], pa.int64()),
        "name": pa.array([f"name-{i}" for i in ids]),
        "_op": pa.array([op] * len(ids)),
    })
    pq.write_table(table, path)
    return str(path)


def _dbt(project: Path, *args: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """One dbt command in a fresh process: (model time of its one model, process wall time)."""
    began = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "dbt.cli.main", *args, "--project-dir", str(project),
                          "--profiles-dir", str(project)], capture_output=True, text=True, cwd=project,
                         env={**os.environ, "DBT_USE_COLORS": "false", **(env or {})}, timeout=1800)
    wall = time.monotonic() - began
    if run.returncode != 0:
        raise SystemExit(f"`dbt {' '.join(args)}` failed:\n{run.stdout[-4000:]}")
    results = json.loads((project / "target" / "run_results.json").read_text())["results"]
    return (results[0]["execution_time"] if results else 0.0), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default="driver,main", help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--code", action="append", default=[], metavar="NAME=PATH",
                        help="adds variant branch@NAME: the package in folder PATH on a model of its own")
    args = parser.parse_args()
    for code in args.code:
        name, _, path = code.partition("=")
        if not name or not path or not (Path(path) / "partialcow").is_dir():
            parser.error(f"--code {code!r}: expected NAME=PATH with PATH a folder holding the partialcow package")
        VARIANTS[f"branch@{name}"] = (f"cdc_{name}", True, {"PYTHONPATH": str(Path(path).resolve())})
        LABELS[f"branch@{name}"] = f"on branch dev, code {name}"
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")

    work = HERE / "work" / "branch_fresh"
    shutil.rmtree(work, ignore_errors=True)
    project = work / "proj"
    (project / "models").mkdir(parents=True)
    (project / "dbt_project.yml").write_text("name: branch_fresh\nversion: '1.0'\nconfig-version: 2\nprofile: p\n")
    (project / "profiles.yml").write_text(json.dumps({"p": {"target": "t", "outputs": {"t": {
        "type": "partialcow", "schema": "shop", "warehouse": str(work / "warehouse")}}}}))
    for model in {"cdc", "cdc_main", *(VARIANTS[v][0] for v in variants)}:
        (project / "models" / f"{model}.sql").write_text(MODEL)
    batches = work / "batches"
    batches.mkdir()
    ids = list(range(args.rows))
    first = _batch(batches / "b0.parquet", ids, generation=0, op="I")
    build = _dbt(project, "run", "-s", "cdc", "--vars", json.dumps({"batch": first}))
    for variant in variants:
        model_name, on_branch, env = VARIANTS[variant]
        if model_name != "cdc":
            _dbt(project, "run", "-s", model_name, "--vars", json.dumps({"batch": first}), env=env)
    _dbt(project, "run-operation", "branch_create", "--args", "{name: dev}")

    step = max(1, args.rows // 100)
    runs: list[dict] = []
    generation = 0
    for round_number in range(args.rounds):
        for variant in variants:
            model_name, on_branch, env = VARIANTS[variant]
            generation += 1
            keys = ids[(generation - 1) * step:generation * step]  # fresh keys every batch
            path = _batch(batches / f"b{generation}.parquet", keys, generation=generation, op="U")
            run_vars = {"batch": path, **({"branch": "dev"} if on_branch else {})}
            model, wall = _dbt(project, "run", "-s", model_name, "--vars", json.dumps(run_vars), env=env)
            runs.append({"round": round_number + 1, "variant": variant, "model_s": round(model, 2),
                         "process_s": round(wall, 2), "keys": len(keys)})
            print(f"round {round_number + 1} {variant}: model {model:.2f} s, process {wall:.2f} s", flush=True)

    command = "PYTHONPATH=adapter python bench/branch_fresh_bench.py " + " ".join(sys.argv[1:])
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    medians = {v: statistics.median(r["model_s"] for r in runs if r["variant"] == v) for v in variants}
    processes = {v: statistics.median(r["process_s"] for r in runs if r["variant"] == v) for v in variants}
    lines = [
        "# A partial_cow_incremental model on a branch, fresh dbt processes (variants: "
        + ", ".join(f"`{v}`" for v in variants) + ")",
        "",
        f"Command: `{command.strip()}`",
        "",
        f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end, Python "
        f"{platform.python_version()}, {when}. Table of {args.rows:,} rows built on main (model {build[0]:.2f} s), "
        f"branch `dev` created; each run applies {step:,} updated keys (1%, fresh keys, full row images). Variants "
        "alternate: `driver` = on branch `dev`, image rewritten on the driver (the default); `spark` = on the branch "
        "with `PARTIALCOW_DRIVER_MAX_ROWS=0`; `main` = the same batch on an identical model without a branch"
        + "".join(f"; `{v}` = on the branch, a model of its own, package from `{VARIANTS[v][2]['PYTHONPATH']}`"
                  for v in variants if v.startswith("branch@")) + ".",
        "",
        "| round | variant | model (s) | process (s) |",
        "|---:|---|---:|---:|",
        *[f"| {r['round']} | {r['variant']} | {r['model_s']:.2f} | {r['process_s']:.2f} |" for r in runs],
        "",
        "Medians, model / process: " + ", ".join(f"{v} {medians[v]:.2f} / {processes[v]:.2f} s" for v in variants)
        + ".",
        "",
    ]
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "branch_fresh.md").write_text("\n".join(lines))
    (args.results / "branch_fresh.json").write_text(json.dumps({"command": command, "when": when, "rows": args.rows,
                                                                "variants": variants, "runs": runs}, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        ax.plot([r["round"] for r in mine], [r["model_s"] for r in mine], marker="o", label=LABELS[variant])
    ax.set_xlabel("round")
    ax.set_ylabel("model time (s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"partial_cow_incremental, fresh dbt run, 1% of {args.rows:,} rows: on a branch and on main",
                 fontsize=10)
    ax.legend()
    fig.text(0.01, 0.01, command.strip(), fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(args.results / "branch_fresh.png", dpi=120)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
