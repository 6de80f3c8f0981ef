"""Which Delta table features a writer that replaces whole data files can honour, and which it must refuse by name.

:class:`DeltaTableInfo` is what the checks read (protocol, table properties, schema), taken from delta-rs or from
delta-spark's snapshot alike. A writer that enforces check constraints and generated columns itself (the Spark path
checks every new file against them before committing) says so with ``enforced``; everything else that would need
work from a writer we do not do is refused by name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ENFORCED_BY_SPARK", "DeltaTableInfo", "constraints", "generated_columns", "unsupported_features"]

# Features whose only obligations we can check (usage-based refusals below) or that do not concern a writer
# that replaces whole files. Anything else a table lists is refused by name.
_WRITER_FEATURES_OK = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "identityColumns",
        "deletionVectors",
        "timestampNtz",
        "vacuumProtocolCheck",
    }
)
_READER_FEATURES_OK = frozenset({"columnMapping", "deletionVectors", "timestampNtz", "vacuumProtocolCheck"})

#: What the Spark path enforces on every new file before it commits (see ``partialcow.spark.delta_checks``).
ENFORCED_BY_SPARK = frozenset({"checkConstraints", "generatedColumns"})


@dataclass(frozen=True)
class DeltaTableInfo:
    """A Delta table version's protocol, table properties, schema (Delta's JSON form) and partition columns.

    >>> info = DeltaTableInfo(1, 2, configuration={"delta.enableChangeDataFeed": "true"})
    >>> unsupported_features(info, removing=True)
    ['change data feed (delta.enableChangeDataFeed)']
    """

    min_reader_version: int
    min_writer_version: int
    reader_features: frozenset[str] = frozenset()
    writer_features: frozenset[str] = frozenset()
    configuration: Mapping[str, str] = field(default_factory=dict)
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "struct", "fields": []})
    partition_columns: tuple[str, ...] = ()

    @classmethod
    def of_delta_rs(cls, table: Any) -> DeltaTableInfo:
        """From a ``deltalake.DeltaTable``."""
        protocol, metadata = table.protocol(), table.metadata()
        return cls(
            min_reader_version=int(protocol.min_reader_version),
            min_writer_version=int(protocol.min_writer_version),
            reader_features=frozenset(protocol.reader_features or ()),
            writer_features=frozenset(protocol.writer_features or ()),
            configuration={k: (v or "") for k, v in metadata.configuration.items()},
            schema=json.loads(table.schema().to_json()),
            partition_columns=tuple(metadata.partition_columns),
        )


def unsupported_features(info: DeltaTableInfo, *, removing: bool, enforced: Iterable[str] = (),
                         partitioned_ok: bool = True) -> list[str]:
    """Everything about the table this writer cannot honour, each named, in a stable order.

    ``enforced``: features the caller enforces itself (``ENFORCED_BY_SPARK``); they are not refused.
    ``partitioned_ok=False`` (a batch of changes, which may insert rows or change a partition column) refuses a
    partitioned table: a new file takes the partition values of the files it replaces, so a row a batch inserts or
    moves into another partition would be read back in the wrong one.

    >>> unsupported_features(DeltaTableInfo(1, 2, partition_columns=("p",)), removing=True, partitioned_ok=False)
    ["partitioning by ['p'] (a row a batch inserts or moves would take the partition of the file it is written to)"]
    """
    enforced = frozenset(enforced)
    config = {k: (v or "") for k, v in info.configuration.items()}
    problems: list[str] = []
    if info.min_reader_version > 3 or info.min_writer_version > 7:
        problems.append(f"protocol version reader {info.min_reader_version} / writer {info.min_writer_version}")
    for feature in sorted(set(info.writer_features) - _WRITER_FEATURES_OK):
        problems.append(f"writer feature {feature}" + (" (row tracking)" if feature == "rowTracking" else ""))
    for feature in sorted(set(info.reader_features) - _READER_FEATURES_OK):
        problems.append(f"reader feature {feature}")
    if config.get("delta.enableRowTracking", "").lower() == "true":
        problems.append("row tracking (delta.enableRowTracking)")
    if config.get("delta.enableChangeDataFeed", "").lower() == "true":
        problems.append("change data feed (delta.enableChangeDataFeed)")
    if config.get("delta.columnMapping.mode", "none").lower() != "none":
        problems.append(f"column mapping (delta.columnMapping.mode={config['delta.columnMapping.mode']})")
    if removing and config.get("delta.appendOnly", "").lower() == "true":
        problems.append("append-only table (delta.appendOnly) while removing files")
    if "checkConstraints" not in enforced:
        problems += [f"check constraint {k}" for k in sorted(constraints(info))]
    problems += _schema_problems(info.schema, "", generated_ok="generatedColumns" in enforced)
    if info.partition_columns and not partitioned_ok:
        problems.append(f"partitioning by {list(info.partition_columns)} (a row a batch inserts or moves would take "
                        "the partition of the file it is written to)")
    return problems


def constraints(info: DeltaTableInfo) -> dict[str, str]:
    """The table's check constraints: name -> SQL expression (``delta.constraints.<name>`` properties).

    >>> constraints(DeltaTableInfo(1, 3, configuration={"delta.constraints.positive": "v > 0"}))
    {'delta.constraints.positive': 'v > 0'}
    """
    return {k: v for k, v in info.configuration.items() if k.startswith("delta.constraints.")}


def generated_columns(info: DeltaTableInfo) -> dict[str, str]:
    """Top-level generated columns: name -> generation expression (Delta generates only top-level columns).

    >>> generated_columns(DeltaTableInfo(1, 4, schema={"fields": [{"name": "d", "type": "date",
    ...     "metadata": {"delta.generationExpression": "CAST(ts AS DATE)"}}]}))
    {'d': 'CAST(ts AS DATE)'}
    """
    return {f["name"]: f["metadata"]["delta.generationExpression"] for f in info.schema.get("fields", [])
            if "delta.generationExpression" in (f.get("metadata") or {})}


def _schema_problems(node: Mapping[str, Any], prefix: str, *, generated_ok: bool) -> list[str]:
    problems: list[str] = []
    for field_ in node.get("fields", []):
        name = prefix + field_["name"]
        meta = field_.get("metadata") or {}
        if "delta.invariants" in meta:
            problems.append(f"invariant on column {name}")
        if "delta.generationExpression" in meta and not (generated_ok and not prefix):
            problems.append(f"generated column {name}")
        if any(k.startswith("delta.identity.") for k in meta):
            problems.append(f"identity column {name}")
        problems += _nested_problems(field_["type"], name + ".", generated_ok=generated_ok)
    return problems


def _nested_problems(dtype: Any, prefix: str, *, generated_ok: bool) -> list[str]:
    if not isinstance(dtype, dict):
        return []
    kind = dtype.get("type")
    if kind == "struct":
        return _schema_problems(dtype, prefix, generated_ok=generated_ok)
    if kind == "array":
        return _nested_problems(dtype.get("elementType"), prefix, generated_ok=generated_ok)
    if kind == "map":
        return (_nested_problems(dtype.get("keyType"), prefix, generated_ok=generated_ok)
                + _nested_problems(dtype.get("valueType"), prefix, generated_ok=generated_ok))
    return []
