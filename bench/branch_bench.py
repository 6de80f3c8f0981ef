"""Benchmark of branch environments (Python API on the embedded Spark + Iceberg, no dbt in the timings).

Measures:
1. ``branch_create`` of 10 models of 1K rows vs 10 models of 1M rows (creation records snapshots, copies nothing):
   as the first operation of a fresh process (what ``dbt run-operation branch_create`` pays after its session
   started: a cold JVM) and in a warm session;
2. full scan of a model on a branch (what users and ref() read: its image table) over a 1M-row table with a 1K-row
   and a 100K-row overlay vs the table itself (targets: +5% and +20%), for both image modes (copy-on-write, the default, and
   merge-on-read), with each build's time and the bytes its image adds to the table; plus the view form used
   without an image (anti-join, live parent);
3. merge of a 1K-key overlay into a 1M-row vs a 100K-row table (fast-forward and three-way).

Run:  PYTHONPATH=adapter python bench/branch_bench.py [--rows 1000000] [--repeat 5] [--read-rounds 31]
      [--scan values|noop] [--only create read merge]
Writes bench/results/branch_bench.md, .json and .png; ``--only`` re-runs those sections and keeps the others'
results (each section records when and under which load it was measured).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
META = "bench"


def _size(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows % 1_000_000 == 0 else f"{rows // 1000}K"


def _interleaved(relations: dict[str, str], scan, repeat: int) -> dict[str, list[float]]:
    """Scan each relation once per round, ``repeat`` rounds, after three warm-up rounds (JIT), each round in a
    shuffled order: a branch relation read right after the table in every round measured +26% in one probe,
    -3% in shuffled rounds the next."""
    for _ in range(3):
        for relation in relations.values():
            scan(relation)
    times: dict[str, list[float]] = {label: [] for label in relations}
    order = list(relations.items())
    shuffle = random.Random(6).shuffle
    for _ in range(repeat):
        shuffle(order)
        for label, relation in order:
            start = time.perf_counter()
            scan(relation)
            times[label].append(time.perf_counter() - start)
    return times


def _make_table(spark, name: str, rows: int) -> None:
    (
        spark.range(rows)
        .selectExpr(
            "id",
            "concat('item-', id) AS name",
            "id % 1000 AS qty",
            "cast(id % 997 AS double) * 1.5 AS price",
            "concat('cat-', id % 50) AS category",
        )
        .repartition(2)
        .writeTo(f"{META}.{name}")
        .using("iceberg")
        .createOrReplace()
    )


def _changed(spark, table: str, every: int, offset: int = 0):
    """The table with ``qty`` changed on every ``every``-th id: the model result a branch build diffs."""
    from pyspark.sql import functions as F

    frame = spark.table(f"{META}.{table}")
    return frame.withColumn(
        "qty", F.when((F.col("id") + offset) % every == 0, F.col("qty") + 1).otherwise(F.col("qty"))
    )


# What a "full scan" does with the rows it reads.
SCANS = {
    "values": "every value read: count(*) and sum(hash(*)), as the upsert benchmark's full scan",
    "noop": "Spark's noop sink: rows produced, no value read",
}


def _scan(spark, relation: str, *, kind: str) -> None:
    if kind == "noop":
        spark.table(relation).write.format("noop").mode("overwrite").save()
    else:
        spark.sql(f"SELECT count(*), sum(cast(hash(*) AS bigint)) FROM {relation}").collect()


def _image_bytes(spark, ref: str) -> int:
    """Bytes of the data and delete files ``ref`` of the big table reads that ``main`` does not (all of main's for
    ``main``)."""
    from partialcow.branch.catalog import load_iceberg

    table = load_iceberg(spark, META, "t_big")

    def files(name: str) -> dict[str, int]:
        found, tasks = {}, table.newScan().useRef(name).planFiles()
        iterator = tasks.iterator()
        while iterator.hasNext():
            task = iterator.next()
            for f in [task.file(), *task.deletes()]:
                found[str(f.location())] = int(f.fileSizeInBytes())
        tasks.close()
        return found

    main = files("main")
    return sum(main.values()) if ref == "main" else sum(v for k, v in files(ref).items() if k not in main)


CREATE_MODELS = 10
_FRESH_PROCESSES = 3


def _session(warehouse: str):
    from partialcow.spark.session import get_or_create_session

    spark = get_or_create_session(table_format="iceberg", warehouse=warehouse, master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _create_models(size: str) -> list[tuple[str, str]]:
    return [(META, f"c{size.lower()}_{i}") for i in range(CREATE_MODELS)]


def _child(task: str, warehouse: str, rows: int) -> dict:
    """Work a fresh process does for the creation benchmark: ``setup`` writes the 2 x 10 tables; ``create`` times
    one ``create_branch`` of each set as the process's first branch operation (after its session started)."""
    from partialcow.branch import create_branch, drop_branch

    start = time.perf_counter()
    spark = _session(warehouse)
    session_seconds = time.perf_counter() - start
    if task == "setup":
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {META}")
        for size, count in (("1K", 1000), (_size(rows), rows)):
            for _, table in _create_models(size):
                _make_table(spark, table, count)
        return {}
    size = task.split(":", 1)[1]
    name = f"fresh_{size.lower()}"
    result = create_branch(spark, name=name, meta_schema=META, models=_create_models(size))
    drop_branch(spark, name=name, meta_schema=META)
    return {"session_seconds": session_seconds, "create_seconds": result.seconds, "steps": result.steps}


def _run_child(task: str, warehouse: str, rows: int) -> dict:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, __file__, "--child", task, "--warehouse", warehouse, "--rows", str(rows)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bench child {task} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.split("RESULT", 1)[1])


def _section(results: dict, name: str, started_load: float) -> None:
    results.setdefault("sections", {})[name] = {
        "measured": time.strftime("%Y-%m-%d %H:%M"), "load_average_at_start": started_load,
        "load_average_at_end": os.getloadavg()[0],
    }


def run_create(results: dict, rows: int, repeat: int, warehouse: str) -> None:
    """1. ``branch_create`` of 10 models: the same metadata work whatever the tables' size. Fresh processes first:
    the embedded metastore admits one process at a time, and this one has not started Spark yet."""
    from partialcow.branch import create_branch, drop_branch

    load = os.getloadavg()[0]
    _run_child("setup", warehouse, rows)
    sizes = ("1K", _size(rows))
    fresh: dict[str, list[dict]] = {size: [] for size in sizes}
    for _ in range(_FRESH_PROCESSES):
        for size in sizes:
            fresh[size].append(_run_child(f"create:{size}", warehouse, rows))
    spark = _session(warehouse)
    warm: dict[str, list[float]] = {size: [] for size in sizes}
    steps: dict[str, list[dict]] = {size: [] for size in sizes}
    for i in range(repeat):
        for size in sizes:
            name = f"c{i}_{size.lower()}"
            result = create_branch(spark, name=name, meta_schema=META, models=_create_models(size))
            warm[size].append(result.seconds)
            steps[size].append(result.steps)
            drop_branch(spark, name=name, meta_schema=META)

    def median_steps(found: list[dict]) -> dict[str, float]:
        return {k: statistics.median(s[k] for s in found) for k in found[0]}

    results["create"] = {
        "models": CREATE_MODELS,
        "repeat": repeat,
        "fresh_process_seconds": {s: statistics.median(r["create_seconds"] for r in fresh[s]) for s in sizes},
        "fresh_process_steps": {s: median_steps([r["steps"] for r in fresh[s]]) for s in sizes},
        "session_start_seconds": statistics.median(r["session_seconds"] for s in sizes for r in fresh[s]),
        "warm_seconds": {s: statistics.median(warm[s]) for s in sizes},
        "warm_steps": {s: median_steps(steps[s]) for s in sizes},
    }
    _section(results, "create", load)


def run(results: dict, rows: int, repeat: int, warehouse: str, scan_kind: str = "values", read_rounds: int = 31,
        only: tuple[str, ...] = ("create", "read", "merge")) -> dict:
    if "create" in only:
        run_create(results, rows, repeat, warehouse)
    if "read" not in only and "merge" not in only:
        return results
    scan = partial(_scan, kind=scan_kind)
    spark = _session(warehouse)
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {META}")
    results.update({"rows": rows, "repeat": repeat, "read_rounds": read_rounds, "python": platform.python_version(),
                    "spark": spark.version, "scan": scan_kind})
    if "read" in only:
        run_read(results, spark, rows, scan, read_rounds)
    if "merge" in only:
        run_merge(results, spark, rows)
    return results


def run_read(results: dict, spark, rows: int, scan, read_rounds: int) -> None:
    """2. reading a model on a branch (full scan, all columns) vs the table."""
    from partialcow.branch import build_model, create_branch, drop_branch
    from partialcow.branch.image import image_ref
    from partialcow.branch.levels import overlay_info
    from partialcow.branch.overlay import view_sql
    from partialcow.branch.types import IMAGE_MODES

    load = os.getloadavg()[0]
    _make_table(spark, "t_big", rows)
    base_times: list[float] = []
    same_rounds: dict[str, float] = {}
    reads = {"table": 0.0}  # filled in below, from every round's scan of the table
    build_seconds, image_bytes = {}, {}
    # what a view costs: a plain view of the table, no branch, read in the same rounds
    spark.sql(f"CREATE VIEW {META}.t_big_view AS SELECT * FROM {META}.t_big")
    for label, every in (("1K", rows // 1000), ("100K", rows // 100_000)):
        forms = {f"plain view of the table (no branch: what a view adds), {label} rounds": f"{META}.t_big_view"}
        for mode in IMAGE_MODES:
            branch = f"read_{label.lower()}_{mode.split('-')[0]}"
            create_branch(spark, name=branch, meta_schema=META, models=[(META, "t_big")], image_mode=mode)
            start = time.perf_counter()
            summary = build_model(spark, _changed(spark, "t_big", every), branch=branch, base_schema=META,
                                  identifier="t_big", key_columns=["id"], meta_schema=META)
            build_seconds[f"{label} changed rows, {mode} image"] = time.perf_counter() - start
            assert summary.upserts == rows // every, summary
            image_bytes[f"{label} changed rows, {mode} image"] = _image_bytes(spark, image_ref(branch))
            forms[f"branch ({mode} image table), {label} overlay"] = f"{META}__br_{branch}.t_big"
        # the same rows through the view form used where a model has no image: overlay anti-joined to the live parent
        info = overlay_info(spark, f"{META}__br_{branch}", "t_big")
        spark.sql(view_sql(info, (META, "t_big"), materialized=False)).createOrReplaceTempView("bench_live_form")
        # The branch forms, the plain view and the table in the same rounds, so drift in the machine's speed hits all alike; the join form
        # in rounds of its own: scans that apply deletes ran 30-40% slower when it ran in the same rounds (Iceberg's
        # own merge-on-read branch too), which a reader of one view never sees.
        for group in (forms, {f"live join form (no image), {label} overlay": "bench_live_form"}):
            timed = _interleaved({"table": f"{META}.t_big", **group}, partial(scan, spark), read_rounds)
            base_times += timed["table"]
            for name in group:
                reads[name] = statistics.median(timed[name])
                same_rounds[name] = statistics.median(timed["table"])
        for mode in IMAGE_MODES:
            drop_branch(spark, name=f"read_{label.lower()}_{mode.split('-')[0]}", meta_schema=META)
    reads["table"] = statistics.median(base_times)
    results["read_seconds"] = reads
    results["read_ratio"] = {k: v / same_rounds.get(k, reads["table"]) for k, v in reads.items()}
    results["build_seconds"] = build_seconds
    results["image_bytes"] = image_bytes
    results["table_bytes"] = _image_bytes(spark, "main")
    _section(results, "read", load)


def run_merge(results: dict, spark, rows: int) -> None:
    """3. merging 1K changed keys into tables of different sizes."""
    from partialcow.branch import build_model, create_branch, drop_branch, merge_branch

    load = os.getloadavg()[0]
    _make_table(spark, "m_small", 100_000)
    merges: dict[str, float] = {}
    for label, table, size in (("100K", "m_small", 100_000), (_size(rows), "m_big", rows)):
        for mode in ("fast-forward", "three-way"):
            _make_table(spark, table, size)
            branch = f"merge_{table.replace('m_', '')}_{mode[:2]}"
            create_branch(spark, name=branch, meta_schema=META, models=[(META, table)])
            build_model(spark, _changed(spark, table, size // 1000), branch=branch, base_schema=META,
                        identifier=table, key_columns=["id"], meta_schema=META)
            if mode == "three-way":  # the parent moves on: other keys change there
                spark.sql(f"UPDATE {META}.{table} SET price = price + 1 WHERE id % {size // 1000} = 7")
            start = time.perf_counter()
            result = merge_branch(spark, name=branch, meta_schema=META)
            merges[f"{label} table, {mode}"] = time.perf_counter() - start
            assert result.models[0].updated == 1000, result.describe()
            assert result.models[0].fast_forward == (mode == "fast-forward")
            drop_branch(spark, name=branch, meta_schema=META)
    results["merge_seconds"] = merges
    _section(results, "merge", load)


def _load_previous() -> dict:
    """The last results, so that ``--only`` keeps the sections it does not re-run (older files had one load
    average for the whole run and measured creation on one model)."""
    path = RESULTS / "branch_bench.json"
    if not path.exists():
        return {}
    previous = json.loads(path.read_text())
    if "sections" not in previous and "load_average_at_start" in previous:
        whole = {"measured": "before sections were recorded", "load_average_at_start": previous["load_average_at_start"],
                 "load_average_at_end": previous.get("load_average_at_end", previous["load_average_at_start"])}
        previous["sections"] = {"read": dict(whole), "merge": dict(whole)}
    for stale in ("create_seconds", "load_average_at_start", "load_average_at_end"):
        previous.pop(stale, None)
    return previous


def _when(results: dict, section: str) -> str:
    info = results["sections"][section]
    return (f"measured {info['measured']}, load average {info['load_average_at_start']:.1f} at start, "
            f"{info['load_average_at_end']:.1f} at the end on 2 cores")


def write_report(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "branch_bench.json").write_text(json.dumps(results, indent=2))
    report = RESULTS / "branch_bench.md"
    old = report.read_text().splitlines() if report.exists() else []
    notes = old[next((i for i, line in enumerate(old) if line.startswith("Notes (")), len(old)):]
    settings = {"repeat": 5, "read_rounds": 31, "scan": "values", "spark": "?", **results}
    lines = [
        "# Branch environments benchmark",
        "",
        f"`PYTHONPATH=adapter python bench/branch_bench.py --rows {settings['rows']} --repeat {settings['repeat']} "
        f"--read-rounds {settings['read_rounds']} --scan {settings['scan']}` "
        f"(local[2], Spark {settings['spark']}, Iceberg, median of {settings['repeat']}, full scans median of "
        f"{settings['read_rounds']} rounds; full scan: {SCANS[settings['scan']]}; "
        "each form's ratio is to the table's scans in its rounds, each round in a shuffled order). "
        "Sections re-run alone with `--only`.",
        "",
    ]
    create = results.get("create")
    if create:
        lines += [
            f"## branch_create, {create['models']} models ({_when(results, 'create')})",
            "",
            "Fresh process: the first branch operation of a new process whose session just started (what `dbt "
            "run-operation branch_create` reports; starting the session itself took "
            f"{create['session_start_seconds']:.1f} s), median of {_FRESH_PROCESSES} processes. Warm: a session "
            f"that already ran the same operation, median of {create['repeat']}. Steps: reading the branch records, "
            "recording the parents' snapshots (metadata only), writing the new record.",
            "",
            "| models' tables | fresh process (s) | its steps | warm session (s) | its steps |",
            "|---|---|---|---|---|",
        ]
        for size, seconds in create["fresh_process_seconds"].items():
            fresh_steps = ", ".join(f"{k} {v:.2f}" for k, v in create["fresh_process_steps"][size].items())
            warm_steps = ", ".join(f"{k} {v:.2f}" for k, v in create["warm_steps"][size].items())
            lines.append(f"| {create['models']} x {size} rows | {seconds:.2f} | {fresh_steps} | "
                         f"{create['warm_seconds'][size]:.2f} | {warm_steps} |")
        lines.append("")
    if "read_seconds" in results or "merge_seconds" in results:
        lines += ["## Reads, builds and merges", ""]
        for section in ("read", "merge"):
            if section in results.get("sections", {}):
                lines.append(f"- {section}: {_when(results, section)}")
        lines += ["", "| measurement | seconds | ratio |", "|---|---|---|"]
    for label, seconds in results.get("read_seconds", {}).items():
        ratio = results["read_ratio"][label]
        lines.append(
            f"| full scan: {label} ({_size(results['rows'])} rows) | {seconds:.3f} | {ratio:.2f}x ({(ratio - 1):+.0%}) |"
        )
    for label, seconds in results.get("build_seconds", {}).items():
        added = results["image_bytes"][label] / results["table_bytes"]
        lines.append(
            f"| build model on branch, {label} (diff vs {_size(results['rows'])}-row parent; the image adds "
            f"{results['image_bytes'][label] / 1e6:.1f} MB, {added:.0%} of the table's bytes) | {seconds:.3f} | |"
        )
    for label, seconds in results.get("merge_seconds", {}).items():
        lines.append(f"| branch_merge 1K keys into {label} | {seconds:.3f} | |")
    report.write_text("\n".join(lines + ([""] + notes if notes else [])) + "\n")

    create_bars = {} if not create else {
        f"{kind}, {create['models']} x {size}": create[key][size]
        for kind, key in (("fresh", "fresh_process_seconds"), ("warm", "warm_seconds"))
        for size in create[key]
    }
    fig, axes = plt.subplots(1, 3, figsize=(15, 5), gridspec_kw={"width_ratios": [1, 2.4, 1.3]})
    for ax, values, title in (
        (axes[0], create_bars, "branch_create (s)"),
        (axes[1], results.get("read_ratio", {}), f"full scan of {_size(results['rows'])} rows, x the table in the same rounds"),
        (axes[2], results.get("merge_seconds", {}), "merge 1K keys (s)"),
    ):
        labels = list(values)
        ax.bar(range(len(labels)), [values[k] for k in labels], color="#4c72b0")
        ax.set_xticks(range(len(labels)), labels, rotation=25, ha="right", fontsize=7)
        ax.set_title(title)
    axes[0].axhline(2.0, color="#c44e52", linestyle="--", linewidth=1)
    axes[0].text(len(create_bars) - 0.5, 2.0, "target", ha="right", va="bottom", fontsize=7)
    for target, label in ((1.05, "target, 1K overlay"), (1.20, "target, 100K overlay")):
        axes[1].axhline(target, color="#c44e52", linestyle="--", linewidth=1)
        axes[1].text(len(results.get("read_ratio", {})) - 0.5, target, label, ha="right", va="bottom", fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "branch_bench.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the large table (default 1M)")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions per measurement (median)")
    parser.add_argument("--read-rounds", type=int, default=31, help="rounds of full scans per form (median)")
    parser.add_argument("--scan", choices=sorted(SCANS), default="values",
                        help="what a full scan does with its rows: " + "; ".join(f"{k}: {v}" for k, v in SCANS.items()))
    parser.add_argument("--only", nargs="+", choices=("create", "read", "merge"), default=("create", "read", "merge"),
                        help="run only these sections; the others keep their last results")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # a fresh process of the creation benchmark
    parser.add_argument("--warehouse", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT" + json.dumps(_child(args.child, args.warehouse, args.rows)))
        return
    warehouse = tempfile.mkdtemp(prefix="branch_bench_")
    results = _load_previous()
    results.setdefault("rows", args.rows)
    try:
        run(results, args.rows, args.repeat, warehouse, args.scan, args.read_rounds, tuple(args.only))
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)
    write_report(results)
    print((RESULTS / "branch_bench.md").read_text())


if __name__ == "__main__":
    main()
