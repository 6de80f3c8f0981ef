"""Table contents read without Spark, as a second reader of what Spark committed.

``iceberg_rows`` reads an Iceberg table of the embedded warehouse through pyiceberg, from the table folder's newest
metadata file. The embedded catalog (Hive over Derby) keeps the pointer to the current metadata file in its
database, which only a JVM can open; every commit writes ``<n>-<uuid>.metadata.json`` with ``n`` one higher than
its parent, so the highest ``n`` is the current one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def newest_metadata(table_dir: Path) -> Path:
    """The table's current metadata file (the highest sequence number in its name)."""
    files = list(table_dir.glob("metadata/*.metadata.json"))
    if not files:
        raise AssertionError(f"{table_dir} holds no Iceberg metadata file")
    return max(files, key=lambda p: int(p.name.split("-", 1)[0]))


def iceberg_rows(table_dir: Path, columns: tuple[str, ...] | None = None) -> list[tuple[Any, ...]]:
    """The rows of the Iceberg table in ``table_dir`` (``columns`` in that order, default all), sorted."""
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(str(newest_metadata(table_dir))).scan().to_arrow()
    if columns is not None:
        table = table.select(list(columns))
    return sorted(tuple(row.values()) for row in table.to_pylist())
