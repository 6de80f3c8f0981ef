"""What the fresh-process bench scripts share (`stage_profile.py`, `jit_profile.py`, `phase_cpu.py`,
`first_build_cpu.py`): the session started as a `dbt run` process starts it, the paths of the dbt benchmark a
`--keep` run leaves, CPU times from `/proc`, and a 1% batch in which every row changes.

The scripts run as `python bench/<script>.py`, so this folder is on their import path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: what `dbt_bench.py --keep` leaves: `warehouse_iceberg` (table `bench.ours_iceberg`) and `batches/`
KEPT = HERE / "work" / "dbt_sf1"
KEYS = ("ss_item_sk", "ss_ticket_number")


def dbt_session(warehouse: Path | str, *, java_options: str = "", master: str | None = None) -> Any:
    """The embedded Iceberg session as a dbt process gets it, after its prewarm thread has finished (so what is
    timed next is the work's own cold cost, not the warm-up running beside it)."""
    from partialcow.spark.prewarm import start_prewarm
    from partialcow.spark.session import get_or_create_session

    extra = {"spark.driver.extraJavaOptions": java_options} if java_options else None
    spark = get_or_create_session(table_format="iceberg", warehouse=str(warehouse), extra=extra,
                                  **({"master": master} if master else {}))
    thread = start_prewarm(spark, "iceberg")
    if thread is not None:
        thread.join()
    return spark


def jvm_pid(spark: Any) -> int:
    gateway = spark.sparkContext._jvm
    assert gateway is not None
    return int(gateway.ProcessHandle.current().pid())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (its threads that ended included)."""
    return _stat(pid)[1]


def descendants_cpu(root: int) -> float:
    """CPU time of the live processes below ``root`` (for the driver JVM: PySpark's worker daemon and workers)."""
    processes: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                processes[int(entry)] = _stat(int(entry))
            except (OSError, IndexError, ValueError):
                continue

    def below(pid: int) -> bool:
        while pid in processes and pid > 1:
            pid = processes[pid][0]
            if pid == root:
                return True
        return False

    return sum(cpu for pid, (_, cpu) in processes.items() if below(pid))


def _stat(pid: int) -> tuple[int, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def moved_batch(name: str, amount: int) -> Path:
    """The kept 1% batch with ``ss_quantity`` moved by ``amount``, written as `batches/<name>.parquet`: a new
    amount each time makes every row a change, however often the table took the batch before."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    batch = pq.read_table(KEPT / "batches" / "batch01.parquet")
    moved = pc.add(batch.column("ss_quantity"), amount)
    path = KEPT / "batches" / f"{name}.parquet"
    pq.write_table(batch.set_column(batch.schema.get_field_index("ss_quantity"), "ss_quantity", moved), path)
    return path
