"""Full row images against named columns in the Parquet engine (issue 25: "full row images within 1.3x of named
columns", library level, warm).

On the product-layout SF1 file (``bench/data/sf1/store_sales_partialcow.parquet``, written by
``bench/parquet_bench.py``), a chain of 1% batches (uniform rows, ``ss_quantity`` and ``ss_net_profit`` changed),
each applied to the same source three ways, in an order that rotates per batch:

- ``named``: only the two changed columns given (what ``merge_update_columns`` does);
- ``full, decoding``: every non-key column given, no fingerprints: the changed columns found by decoding all of them;
- ``full, fingerprints``: every non-key column given, the source's sidecar used (the chain's file: each batch's
  fingerprinted output is the next batch's source, as in a table).

The first fingerprinted rewrite of the chain has no sidecar yet: it decodes and also hashes every row, and is
reported on its own line. Two threads, as the driver path of a 2-core machine uses.

    PYTHONPATH=adapter python bench/full_images_bench.py              # 7 batches
    PYTHONPATH=adapter python bench/full_images_bench.py --batches 3

Writes ``bench/results/full_images_sf1.{md,png}``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from partialcow.parquet import ROW_POSITION, rewrite_file

REPO = Path(__file__).resolve().parents[1]
KEYS = ("ss_item_sk", "ss_ticket_number")
CHANGED = ("ss_quantity", "ss_net_profit")
WAYS = ("named", "full, decoding", "full, fingerprints")


def batch(path: Path, rng: np.random.Generator, share: float) -> tuple[pa.Table, pa.Table]:
    """(full row images, named columns) of ``share`` of ``path``'s rows with the two columns changed."""
    table = pq.read_table(path)
    pos = np.sort(rng.choice(table.num_rows, int(table.num_rows * share), replace=False)).astype(np.int64)
    rows = table.take(pa.array(pos)).drop_columns(list(KEYS))
    for name in CHANGED:
        col = rows.column(name)
        bumped = pc.add(pc.cast(col, pa.float64()), 1.0)
        rows = rows.set_column(rows.schema.get_field_index(name), name, pc.cast(bumped, col.type))
    full = rows.append_column(ROW_POSITION, pa.array(pos))
    return full, full.select([ROW_POSITION, *CHANGED])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--share", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--results-dir", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    command = " ".join(["PYTHONPATH=adapter python bench/full_images_bench.py",
                        shlex.join(sys.argv[1:] if argv is None else argv)]).rstrip()
    src = REPO / "bench" / "data" / "sf1" / "store_sales_partialcow.parquet"
    if not src.exists():
        print(f"{src} is missing: run `PYTHONPATH=adapter python bench/parquet_bench.py --quick` once", file=sys.stderr)
        return 2
    work = REPO / "bench" / "work" / "full_images"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rng = np.random.default_rng(args.seed)
    current = work / "chain-0.parquet"
    shutil.copy(src, current)
    full, _ = batch(current, rng, args.share)
    t0 = time.perf_counter()
    first = rewrite_file(current, work / "chain-1.parquet", full, threads=args.threads, fingerprints=True)
    first_seconds = time.perf_counter() - t0
    assert first.fingerprints_written, "the first batch wrote no sidecar"
    current = work / "chain-1.parquet"
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    for i in range(args.batches):
        full, named = batch(current, rng, args.share)
        nxt = work / f"chain-{i + 2}.parquet"
        outputs = {}
        for way in WAYS[i % 3:] + WAYS[:i % 3]:
            dst = nxt if way == "full, fingerprints" else work / f"{way.split(',')[0]}-{i}.parquet"
            t0 = time.perf_counter()
            report = rewrite_file(current, dst, named if way == "named" else full, threads=args.threads,
                                  fingerprints=way == "full, fingerprints")
            times[way].append(time.perf_counter() - t0)
            outputs[way] = (dst, report)
            if way == "full, fingerprints":
                assert report.screening == "fingerprints", report.screening
        if i == 0:  # the three ways wrote the same rows
            rows = [pq.read_table(outputs[w][0]) for w in WAYS]
            assert rows[0].equals(rows[1]) and rows[0].equals(rows[2]), "the three ways disagree"
        for way in WAYS:
            if way != "full, fingerprints":
                os.remove(outputs[way][0])
        os.remove(current)
        current = nxt
    med = {w: statistics.median(v) for w, v in times.items()}
    lines = [
        "# Full row images against named columns (Parquet engine, warm)", "",
        f"Command: `{command}`", "",
        f"{pq.ParquetFile(src).metadata.num_rows:,} rows (product layout), {args.share:.0%} of them per batch, "
        f"{args.batches} batches, {args.threads} threads; medians; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}.", "",
        "| way | median s | against named | per batch (s) |", "|---|---:|---:|---|",
    ]
    for way in WAYS:
        lines.append(f"| {way} | {med[way]:.2f} | {med[way] / med['named']:.2f}x | "
                     + ", ".join(f"{t:.2f}" for t in times[way]) + " |")
    lines.append(f"| first fingerprinted batch (no sidecar yet: decodes and hashes every row) | {first_seconds:.2f} | "
                 f"{first_seconds / med['named']:.2f}x | |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "full_images_sf1.md").write_text(text)
    _plot(times, first_seconds, args.results_dir / "full_images_sf1.png", command)
    return 0


def _plot(times: dict[str, list[float]], first: float, path: Path, command: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for way, values in times.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=way)
    ax.axhline(first, color="grey", linestyle=":", label="first fingerprinted batch")
    ax.set_xlabel("batch")
    ax.set_ylabel("rewrite seconds")
    ax.set_ylim(bottom=0)
    ax.set_title("1% full row images vs named columns (store_sales SF1)", fontsize=10)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, command, fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
