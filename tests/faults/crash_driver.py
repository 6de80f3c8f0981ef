"""One step of the crash suite, run as its own process (``python crash_driver.py STEP.json``).

A step: open the embedded session on a warehouse; create the table from batch 0 if it does not exist; report the
table's rows (what a crash left); apply batch ``apply`` normally, then report the rows, whether the index verifies
and what is left over; finally apply batch ``crash`` with ``PARTIALCOW_CRASH_AT`` set, which kills this process at
that point (or, with ``kill_after`` seconds, a timer kills it wherever it is). The report goes to ``report`` as JSON
before the crash batch starts.

Batches are generated from their number alone, so the test computes the expected rows without this process.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading

TABLE = "faults.t"
KEYS = 600


def batch(n: int) -> list[tuple]:
    """(k, v, name, _op, _ts) changes of batch ``n``: updates, deletes and inserts of keys in [0, KEYS * 2)."""
    rnd = random.Random(n)
    if n == 0:
        return [(k, k, f"n{k}", "I", 0) for k in range(KEYS)]
    out = []
    for k in rnd.sample(range(KEYS * 2), 40):
        op = rnd.choice("IUUD")
        out.append((k, rnd.randrange(10**6), f"b{n}-{k}", op, n))
    return out


def expected(batches: list[int]) -> dict[int, tuple]:
    """The table's rows after ``batches`` in order: k -> (v, name)."""
    rows: dict[int, tuple] = {}
    for n in batches:
        for k, v, name, op, _ in batch(n):
            if op == "D":
                rows.pop(k, None)
            else:
                rows[k] = (v, name)
    return rows


def _rows(spark) -> dict[int, list]:
    return {r["k"]: [r["v"], r["name"]] for r in spark.table(TABLE).collect()}


def main(step_file: str) -> None:
    with open(step_file) as handle:
        step = json.load(handle)
    from partialcow.index import RowIndex
    from partialcow.table.iceberg import IcebergTable
    from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
    from partialcow.spark.session import get_or_create_session
    from partialcow.spark.tables import open_table
    from tablestate import leftovers

    spark = get_or_create_session(table_format="iceberg", warehouse=step["warehouse"], master="local[2]")
    spec = ChangeSpec(key_columns=("k",), op_column="_op", sequence_column="_ts", model="crashy")
    schema = "k bigint, v bigint, name string, _op string, _ts bigint"
    report: dict = {}

    def frame(n: int):
        return spark.createDataFrame(batch(n), schema)

    spark.sql("create schema if not exists faults")
    exists = spark.catalog.tableExists(TABLE)
    if not exists:
        report["created"] = True
        create_table(spark, TABLE, frame(0), spec)
    report["found"] = _rows(spark)
    if step.get("apply") is not None:
        apply_changes(spark, open_table(spark, TABLE, table_format="iceberg"), frame(step["apply"]), spec)
        report["after"] = _rows(spark)
        report["index_ok"] = RowIndex.open(IcebergTable(spark, TABLE)).verify().ok
        report["leftovers"] = leftovers(spark, TABLE)
    with open(step["report"], "w") as out:
        json.dump(report, out)
    if step.get("crash") is not None:
        if step.get("kill_after") is not None:
            timer = threading.Timer(step["kill_after"], lambda: os.kill(os.getpid(), signal.SIGKILL))
            timer.daemon = True
            timer.start()
        else:
            os.environ["PARTIALCOW_CRASH_AT"] = step["point"]
        apply_changes(spark, open_table(spark, TABLE, table_format="iceberg"), frame(step["crash"]), spec)
        sys.exit(3)  # the crash point was never reached


if __name__ == "__main__":
    main(sys.argv[1])
