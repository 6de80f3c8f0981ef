"""How long a fresh process takes to its first query results, with and without the driver JVM's class-sharing archive.

    PYTHONPATH=adapter python bench/session_start.py --rounds 5

Each round starts two fresh Python processes, one after the other (the order alternates per round), that start the
embedded session (``get_or_create_session``, Iceberg or ``--format delta``) and then run what a dbt process runs
first: a metastore query (``show databases``), a Spark SQL query and a Parquet scan collected as Arrow. One process
runs with ``PARTIALCOW_CLASS_CACHE=0``, the other maps an archive written before the rounds (two untimed processes:
the first leaves the mark, the second writes it). Reported per variant: the median over rounds of the time from
the interpreter's start to each point. Output: ``bench/results/session_start.{md,png}`` with the command on top.
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
POINTS = ("session", "show databases", "select", "parquet as arrow")

CHILD = """
import json, sys, time
started = float(sys.argv[3])
marks = {}
from partialcow.spark.session import get_or_create_session
spark = get_or_create_session(table_format=sys.argv[1], warehouse=sys.argv[2], master="local[2]",
                              delta_jars=[j for j in sys.argv[5].split(",") if j])
marks["session"] = time.time() - started
spark.sql("show databases").collect()
marks["show databases"] = time.time() - started
spark.sql("select 41 + 1").collect()
marks["select"] = time.time() - started
spark.read.parquet(sys.argv[4]).where("ss_quantity > 0")._collect_as_arrow()
marks["parquet as arrow"] = time.time() - started
print("MARKS " + json.dumps(marks))
"""


def run(fmt: str, work: Path, cache: Path, on: bool, data: str, jars: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "adapter"), "PARTIALCOW_CLASS_CACHE_DIR": str(cache),
           "PARTIALCOW_PREWARM": "0"}
    if not on:
        env["PARTIALCOW_CLASS_CACHE"] = "0"
    else:
        env.pop("PARTIALCOW_CLASS_CACHE", None)
    done = subprocess.run([sys.executable, "-c", CHILD, fmt, str(work / "warehouse"), repr(time.time()), data, jars],
                          env=env, capture_output=True, text=True, timeout=600)
    line = next((x for x in done.stdout.splitlines() if x.startswith("MARKS ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"child failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(line[len("MARKS "):])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--format", choices=("iceberg", "delta"), default="iceberg")
    parser.add_argument("--results", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    command = "PYTHONPATH=adapter python bench/session_start.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    jars = ""
    if args.format == "delta":
        from dbt_bench import delta_jars

        jars = ",".join(delta_jars())
        if not jars:
            raise SystemExit("no delta-spark jars (PARTIALCOW_DELTA_JARS or ../shared/jars)")
    work = Path(tempfile.mkdtemp(prefix="session-start-"))
    cache = work / "jvm"
    batch = work / "rows.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(HERE / "data" / "sf1" / "store_sales.parquet").slice(0, 30_000), batch)
    for _ in range(2):  # the mark, then the archive
        run(args.format, work, cache, True, str(batch), jars)
    deadline = time.monotonic() + 300  # the second one's JVM writes the archive after its Python exits
    while not any("Written dynamic archive" in log.read_text() for log in cache.glob("*.dump.log")):
        if time.monotonic() > deadline:
            raise SystemExit(f"no archive was written in {cache}")
        time.sleep(1)
    marks: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for r in range(args.rounds):
        for variant in (("off", "on") if r % 2 == 0 else ("on", "off")):
            marks[variant].append(run(args.format, work, cache, variant == "on", str(batch), jars))
            print(variant, marks[variant][-1], flush=True)
    medians = {v: {p: statistics.median(m[p] for m in ms) for p in POINTS} for v, ms in marks.items()}
    lines = [
        f"# Fresh process to first results, class-sharing archive off and on ({args.format})", "",
        f"Command: `{command}`", "",
        f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Seconds from the interpreter's start, medians of "
        f"{args.rounds} rounds (variants alternate); the prewarm thread is off in both.", "",
        "| point | archive off | archive on | saved |", "|---|---:|---:|---:|",
    ]
    for p in POINTS:
        off, on = medians["off"][p], medians["on"][p]
        lines.append(f"| {p} | {off:.2f} | {on:.2f} | {off - on:.2f} |")
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"session_start_{args.format}"
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, v in enumerate(("off", "on")):
        ax.plot(range(len(POINTS)), [medians[v][p] for p in POINTS], marker="o", color=f"C{i}", label=f"archive {v}")
    ax.set_xticks(range(len(POINTS)), POINTS)
    ax.set_ylabel("seconds since the interpreter started")
    ax.set_title(f"fresh process to first results ({args.format})")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=100)
    print("\n".join(lines))
    print(f"wrote {stem}.md, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
