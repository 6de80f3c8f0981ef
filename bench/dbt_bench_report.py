"""The dbt benchmark's results (``bench/dbt_bench.py``): one outcome per step and contender, the markdown report
with issue 25's targets, and the plot."""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from dbt_bench_batches import Step

# where a dbt process's wall time goes, in order (dbt_bench.process_segments)
SEGMENTS = ("start", "parse", "session", "prepare", "model", "exit")


@dataclass(frozen=True)
class Contender:
    name: str  # the model's (or snapshot's) name
    family: str  # ours | dbt_spark
    fmt: str  # iceberg | delta
    label: str
    snapshot: bool = False


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
    timing: dict[str, float] = field(default_factory=dict)  # dbt's compile / execute
    segments: dict[str, float] = field(default_factory=dict)  # process_segments
    error: str = ""
    check: str = ""
    load_avg: float | None = None


def secs(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _x(theirs: float | None, ours: float | None) -> str:
    return "" if theirs is None or not ours else f"{theirs / ours:.2f}x"


def cell(o: Outcome | None) -> str:
    if o is None:
        return ""
    if o.status == "success":
        return f"{secs(o.model_s)} / {secs(o.process_s)}"
    if o.status == "skipped":
        return o.error
    return f"{o.status.upper()} (process {secs(o.process_s)})"


def check_summary(per_step: dict[str, str]) -> str:
    """One contender's check verdicts in a line: the failures in full, the passes counted.

    >>> check_summary({"delete": "OK", "full_refresh": "OK"})
    'OK (after delete, full_refresh)'
    >>> check_summary({"batch01": "OK", "batch02": "WRONG: rows 3 (expected 2)", "batch03": "OK"})
    'WRONG: rows 3 (expected 2) (after batch02); OK after 2 other steps'
    """
    bad = [f"{verdict} (after {step})" for step, verdict in per_step.items() if verdict != "OK"]
    good = [step for step, verdict in per_step.items() if verdict == "OK"]
    if not bad:
        return f"OK (after {', '.join(good)})" if len(good) <= 3 else f"OK after all {len(good)} checked steps"
    return "; ".join(bad) + (f"; OK after {len(good)} other steps" if good else "")


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
                f"- 1% batches, {what}: dbt-spark / ours median **{med:.2f}x** "
                f"(range {min(values):.2f}-{max(values):.2f}x "
                f"over {len(values)} batches); target >= {goal:g}x: {'met' if med >= goal else '**NOT MET**'}"
            )
    for name, what in (("build", "first build"), ("full_refresh", "full refresh")):
        a, b = pair(name)
        if ok(a) and ok(b):
            r = a.model_s / b.model_s  # type: ignore[union-attr,operator]
            lines.append(
                f"- {what}, model time: ours {secs(a.model_s)} s vs dbt-spark's CTAS {secs(b.model_s)} s "
                f"= **{r:.2f}x**; "
                f"target <= 1.25x: {'met' if r <= 1.25 else '**NOT MET**'}"
            )
    ours_batches = [by.get((n, ours)) for n in batch_steps]
    times = [o.model_s if ok(o) else None for o in ours_batches]
    if len(times) >= 3 and times[1] and times[-1]:
        drift = times[-1] / times[1] - 1
        line = (
            f"- flat over time (ours): batch {len(times)} {secs(times[-1])} s vs batch 2 {secs(times[1])} s "
            f"= **{drift:+.0%}**; "
            f"target within 10%: {'met' if drift <= 0.10 else '**NOT MET**'}"
        )
        clean = [t for t in times if t]
        if len(times) >= 6 and len(clean) == len(times):
            smooth = statistics.median(times[-3:]) / statistics.median(times[1:4]) - 1
            line += f" (median of the last 3 vs batches 2-4: {smooth:+.0%})"
        lines.append(line)
        theirs_times = [o.model_s if ok(o) else None for o in (by.get((n, theirs)) for n in batch_steps)]
        if theirs_times[1] and theirs_times[-1]:
            theirs_drift = theirs_times[-1] / theirs_times[1] - 1
            lines.append(f"  (dbt-spark: batch {len(times)} vs batch 2 = {theirs_drift:+.0%})")
    return lines


def markdown(meta: dict[str, Any], steps: list[Step], contenders: list[Contender], outcomes: list[Outcome],
             unavailable: dict[str, str], checks: dict[str, dict[str, str]], final: bool) -> str:
    by = {(o.step, o.contender): o for o in outcomes}
    names = {c.name for c in contenders}
    out = [
        f"# dbt benchmark: TPC-DS store_sales SF{meta['scale']}"
        + (f" — SMOKE RUN, first {meta['rows']:,} rows only" if meta["rows_limited"] else ""),
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} when written (per step in the JSON), "
        f"Python {platform.python_version()}, {meta['versions']}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"{meta['table_rows']:,} rows. Code: {meta['code']}.",
        "",
        "Every cell is one fresh `dbt run --select <model>` process (`dbt snapshot` for snapshots), contenders one "
        "after the other within each step. `model / process` = `execution_time` in run_results.json / wall time of "
        "the dbt process, in seconds. `speed-up` = dbt-spark's time / ours (above 1: ours is faster). The model SQL is "
        "`select * from parquet.`<batch file>`` for every contender.",
    ]
    if meta.get("class_cache"):
        out += ["", meta["class_cache"] + "."]
    if not final:
        out += ["", "**Partial results: the run was still going when this file was written.**"]
    wrong = sorted(name for name, per_step in checks.items() if any(v.startswith("WRONG") for v in per_step.values()))
    if wrong:
        out += ["", f"**WRONG RESULTS: {', '.join(wrong)} (see the check rows)**"]
    if unavailable:
        out += [""] + [f"- {name}: **n/a**: {why}" for name, why in unavailable.items()]
    # per table format: ours and dbt-spark's (either may be missing when --contenders names one)
    pairs = []
    for fmt in dict.fromkeys(c.fmt for c in contenders if not c.snapshot):
        mine = [c for c in contenders if c.fmt == fmt and not c.snapshot]
        pairs.append((next((c for c in mine if c.family == "ours"), None),
                      next((c for c in mine if c.family == "dbt_spark"), None)))
    out += ["", "## Targets (issue 25)", ""]
    for a, b in pairs:
        if a is None or b is None:
            continue
        lines = target_lines(steps, by, a.name, b.name)
        missing = [f"- {n}: n/a: {unavailable[n]}" for n in (a.name, b.name) if n in unavailable]
        out += [f"{a.label} vs {b.label}:", ""] + (lines or missing or ["- not enough successful steps yet"]) + [""]
    out += ["- results check: " + ("; ".join(f"{k} {check_summary(v)}" for k, v in checks.items())
                                   or ("not run (--check none)" if meta["check"] == "none" else "not run yet")), ""]
    for a, b in pairs:
        present = [c for c in (a, b) if c is not None]
        out += [f"## {present[0].fmt.capitalize()}: {' vs '.join(c.name for c in present)}", ""]
        out += ["| step | batch rows (U/I/D) | ours model / process s | dbt-spark model / process s "
                "| speed-up model / process | ours result |", "|---|---|---:|---:|---:|---|"]
        for s in steps:
            if s.kind == "snapshot":
                continue
            oa = by.get((s.name, a.name)) if a else None
            ob = by.get((s.name, b.name)) if b else None
            if oa is None and ob is None:
                continue
            ok = oa is not None and ob is not None and oa.status == ob.status == "success"
            speed = f"{_x(ob.model_s, oa.model_s)} / {_x(ob.process_s, oa.process_s)}" if ok else ""  # type: ignore[union-attr]
            counts = f"{s.rows:,} ({s.updates:,}/{s.inserts:,}/{s.deletes:,})"
            result = (oa.message if oa else "").replace("|", "/")
            out.append(f"| {s.label} | {counts} | {cell(oa)} | {cell(ob)} | {speed} | {result} |")
        for c in present:
            if c.name in checks:
                out.append(f"| check: {c.name} | | | | | {check_summary(checks[c.name])} |")
        out.append("")
    snaps = [c for c in contenders if c.snapshot]
    if snaps:
        # each of ours against dbt-spark's MERGE (Delta: the only format dbt-spark snapshots on this stack)
        theirs = next((c for c in snaps if c.family == "dbt_spark"), None)
        ours = [c for c in snaps if c.family == "ours"] if theirs else []
        out += ["## Snapshots (`dbt snapshot`, strategy='check' on the two changed columns)", "",
                "| step | " + " | ".join(f"{c.label} model / process s" for c in snaps)
                + "".join(f" | speed-up {c.name} vs {theirs.name} model / process" for c in ours if theirs) + " |",
                "|---|" + "---:|" * (len(snaps) + len(ours))]
        for s in steps:
            if s.kind != "snapshot":
                continue
            speeds = []
            for c in ours:
                oa, ob = by.get((s.name, c.name)), by.get((s.name, theirs.name)) if theirs else None
                ok = oa is not None and ob is not None and oa.status == ob.status == "success"
                speeds.append(f"{_x(ob.model_s, oa.model_s)} / {_x(ob.process_s, oa.process_s)}" if ok else "")  # type: ignore[union-attr]
            out.append(f"| {s.label} | " + " | ".join([cell(by.get((s.name, c.name))) for c in snaps] + speeds) + " |")
        out.append("")
    segment_rows = []
    for c in contenders:
        for kinds, what in ((("batch",), "1% batches"), (("build", "full_refresh"), "build / full refresh")):
            mine = [o for o in outcomes if o.contender == c.name and o.status == "success" and o.segments
                    and next((s.kind for s in steps if s.name == o.step), "") in kinds]
            if mine:
                med = {k: statistics.median(o.segments.get(k, 0.0) for o in mine) for k in SEGMENTS}
                total = statistics.median(o.process_s or 0.0 for o in mine)
                values = " | ".join(f"{v:.1f}" for v in med.values())
                segment_rows.append(f"| {c.name} | {what} ({len(mine)}) | {values} | {total:.1f} |")
    if segment_rows:
        out += ["## Where a dbt process spends its wall time (medians, seconds, from dbt.log timestamps)", "",
                "start = interpreter and dbt imports; parse = project parse; session = up to the first statement's "
                "result (the SparkSession starts there); prepare = relation listing up to the model's start; model = "
                "the model node; exit = after it, until the process ended.", "",
                "| contender | steps | start | parse | session | prepare | model | exit | process |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|"] + segment_rows + [""]
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
    """A phase of the ``partialcow phases:`` line (milliseconds) in seconds.

    >>> _phase(2248), _phase(None)
    ('2.25', '')
    """
    return f"{value / 1000:.2f}" if isinstance(value, (int, float)) else ""


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
            found = [by.get((s.name, c.name)) for s in shown]
            ys = [getattr(o, attr) if o is not None and o.status == "success" else np.nan for o in found]
            if not np.all(np.isnan(ys)):
                top.plot(x, ys, style, marker="o" if attr == "model_s" else ".", color=f"C{i}",
                         label=f"{c.name} {'model' if attr == 'model_s' else 'process'}")
    top.set_yscale("log")
    top.set_ylabel("seconds (log)")
    top.grid(True, which="both", alpha=0.3)
    if top.get_legend_handles_labels()[0]:
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
        bottom.scatter(build_x, [0.8] * len(build_x), marker="_", s=400, color="r",
                       label="target: build >= 0.8x (ours <= 1.25x)")
    bottom.axhline(1, color="grey", lw=0.8)
    bottom.set_yscale("log")
    bottom.set_ylabel("dbt-spark / ours (log)")
    bottom.grid(True, which="both", alpha=0.3)
    if bottom.get_legend_handles_labels()[0]:
        bottom.legend(fontsize=7)
    bottom.set_xticks(x)
    bottom.set_xticklabels([s.name for s in shown], rotation=60, ha="right", fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
