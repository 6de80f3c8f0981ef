"""Fresh `dbt run` processes of two versions of the adapter, in turn: what a change to a process's fixed costs (start,
session, relation listing, exit) is worth, measured where a scheduler's user sees it.

    PYTHONPATH=adapter python bench/process_ab.py --base <git revision> --runs 8

A throw-away dbt project with one `partial_cow_incremental` model (a few rows, `unique_key`), built once untimed;
then each round runs `dbt run` once with the `--base` revision's adapter (a `git worktree` of it) and once with the
work tree's, in alternating order, each with new `--vars` (so each parses, as a scheduled job passing its date does).
Reported: process wall time and model time (`execution_time`) per run, the medians, and the median of the rounds'
differences. Output: `bench/results/process_ab.{md,png}` (`--results` to change), the command on top.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

PROJECT = """name: process_ab
version: '1.0'
config-version: 2
profile: process_ab
"""
PROFILE = ("process_ab: {target: t, outputs: {t: {type: partialcow, schema: ab, warehouse: warehouse, "
           "master: 'local[2]'}}}\n")
MODEL = """{{ config(materialized='partial_cow_incremental', unique_key='id') }}
select id, concat('v', '{{ var("run", "0") }}') as v from range(100)
"""


def _dbt(adapter: Path, project: Path, run: str) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(adapter), "PYTHONHASHSEED": "0"}
    cmd = [str(Path(sys.executable).parent / "dbt"), "run", "--profiles-dir", ".", "--vars", json.dumps({"run": run})]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"dbt run failed with {adapter}:\n{done.stdout[-3000:]}")
    results = json.loads((project / "target" / "run_results.json").read_text())
    return wall, float(results["results"][0]["execution_time"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare the work tree with")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--results", default=str(HERE / "results" / "process_ab"))
    args = parser.parse_args()
    command = "PYTHONPATH=adapter python bench/process_ab.py " + " ".join(map(shlex.quote, sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="pcow-ab-") as scratch:
        base_tree = Path(scratch) / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(base_tree), args.base],
                       check=True)
        try:
            project = Path(scratch) / "project"
            (project / "models").mkdir(parents=True)
            (project / "dbt_project.yml").write_text(PROJECT)
            (project / "profiles.yml").write_text(PROFILE)
            (project / "models" / "feed.sql").write_text(MODEL)
            trees = {"base": base_tree / "adapter", "head": REPO / "adapter"}
            for name, adapter in trees.items():  # untimed: the first build, and each version's first process
                _dbt(adapter, project, f"warm-{name}")
            times: dict[str, list[tuple[float, float]]] = {"base": [], "head": []}
            for i in range(args.runs):
                for name in ("base", "head") if i % 2 == 0 else ("head", "base"):
                    times[name].append(_dbt(trees[name], project, f"{i}-{name}"))
                    print(f"round {i + 1} {name}: process {times[name][-1][0]:.2f} s, model {times[name][-1][1]:.2f} s",
                          flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base_tree)], check=False)
    _report(times, args, command)


def _report(times: dict[str, list[tuple[float, float]]], args: argparse.Namespace, command: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    head_rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    saved = [b[0] - h[0] for b, h in zip(times["base"], times["head"])]
    lines = [
        "# Fresh `dbt run` processes: two adapter versions in turn", "",
        f"Command: `{command}`", "",
        f"Base: `{args.base}`; head: the work tree at {head_rev} (uncommitted changes included). "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores.", "",
        "| round | base process / model s | head process / model s |", "|---:|---:|---:|",
    ]
    for i, (b, h) in enumerate(zip(times["base"], times["head"])):
        lines.append(f"| {i + 1} | {b[0]:.2f} / {b[1]:.2f} | {h[0]:.2f} / {h[1]:.2f} |")
    lines += [
        f"| median | {statistics.median(b[0] for b in times['base']):.2f} / "
        f"{statistics.median(b[1] for b in times['base']):.2f} | "
        f"{statistics.median(h[0] for h in times['head']):.2f} / "
        f"{statistics.median(h[1] for h in times['head']):.2f} |",
        "", f"Process time saved per round (base - head), median: **{statistics.median(saved):.2f} s** "
        f"(range {min(saved):.2f} to {max(saved):.2f} s).",
    ]
    out = Path(args.results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(7, 4))
    for name in ("base", "head"):
        ax.plot(range(1, len(times[name]) + 1), [t[0] for t in times[name]], marker="o", label=f"{name} process")
    ax.set_xlabel("round")
    ax.set_ylabel("seconds")
    ax.set_title(command, fontsize=7)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=100)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
