"""Branch merge and drop in fresh processes, two versions of the package in turn: what a change to those operations
is worth where a `dbt run-operation branch_merge` / `branch_drop` user sees it (a fresh process each time).

    PYTHONPATH=adapter python bench/branch_ops_ab.py --base <git revision> --rounds 3

Each round runs one process per version, in alternating order (the `--base` revision from a `git worktree`, then
the work tree's `adapter/`, then the other way round): a local session on a new warehouse, `--models` Iceberg tables
of 1,000 rows, a branch with each model built with one row changed, one deleted and one added; `merge_branch` timed;
each model built again on the branch (one row back to its old value); `drop_branch` timed. Prints a markdown table
with the command on top (`--out` to write it to a file).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from partialcow.branch import build_model, create_branch, drop_branch, merge_branch
from partialcow.spark.session import get_or_create_session

models = int(sys.argv[2])
spark = get_or_create_session(table_format="iceberg", warehouse=tempfile.mkdtemp(), master="local[2]")
spark.sql("CREATE SCHEMA ab")
frame = lambda rows: spark.createDataFrame(rows, "k long, v long, s string")
base = [(i, i, f"s{i}") for i in range(1000)]
for m in range(models):
    frame(base).writeTo(f"ab.items{m}").using("iceberg").create()
create_branch(spark, name="b", meta_schema="ab", models=[("ab", f"items{m}") for m in range(models)])
ours = [(1, 100, "x") if r[0] == 1 else r for r in base[:-1]] + [(5000, 1, "n")]
build = lambda rows: [build_model(spark, frame(rows), branch="b", base_schema="ab", identifier=f"items{m}",
                                  key_columns=["k"], meta_schema="ab") for m in range(models)]
build(ours)
began = time.perf_counter(); merge_branch(spark, name="b", meta_schema="ab"); merge = time.perf_counter() - began
build(base)
began = time.perf_counter(); drop_branch(spark, name="b", meta_schema="ab"); drop = time.perf_counter() - began
print("RESULT " + json.dumps({"merge": merge, "drop": drop}), flush=True)
"""


def _run(adapter: Path, models: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(adapter), str(models)], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise SystemExit(f"a run of {adapter} failed:\n{out.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare the work tree with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    worktree = Path(tempfile.mkdtemp(prefix="branch_ab_")) / "base"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(worktree), args.base], check=True)
    versions = {args.base: worktree / "adapter", "work tree": REPO / "adapter"}
    times: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
    try:
        for n in range(args.rounds):
            order = list(versions) if n % 2 == 0 else list(reversed(versions))
            for name in order:
                times[name].append(_run(versions[name], args.models))
                print(f"round {n + 1} {name}: {times[name][-1]}", file=sys.stderr, flush=True)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False)
    command = "PYTHONPATH=adapter python bench/branch_ops_ab.py " + shlex.join(sys.argv[1:])
    lines = [f"Command: `{command}`", "", f"{args.models} models of 1,000 rows; seconds per fresh process", "",
             "| version | merge (each round) | merge median | drop (each round) | drop median |",
             "|---|---|---:|---|---:|"]
    for name, runs in times.items():
        cells = []
        for op in ("merge", "drop"):
            values = [r[op] for r in runs]
            cells += [", ".join(f"{v:.2f}" for v in values), f"{statistics.median(values):.2f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
