"""What branch tests share about their tables: a fresh schema per test, and a relation's rows in a stable order."""

from __future__ import annotations

import uuid


def fresh_schema(spark, prefix: str) -> str:
    """A new schema named ``<prefix>_<8 hex>``; the branches' metadata lives there too."""
    meta = f"{prefix}_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    return meta


def sorted_rows(spark, relation: str) -> list:
    """The relation's rows as tuples, sorted by their text (rows may hold nulls, which do not compare)."""
    return sorted((tuple(r) for r in spark.table(relation).collect()), key=repr)
