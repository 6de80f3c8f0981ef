"""Which Delta table features a writer that replaces whole data files can honour, and which it must refuse by name."""

from __future__ import annotations

from collections.abc import Mapping
import json
from typing import Any

__all__ = ["unsupported_features"]

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


def unsupported_features(table: Any, *, removing: bool) -> list[str]:
    """Everything about ``table`` this writer cannot honour, each named, in a stable order."""
    protocol = table.protocol()
    config = {k: (v or "") for k, v in table.metadata().configuration.items()}
    problems: list[str] = []
    if protocol.min_reader_version > 3 or protocol.min_writer_version > 7:
        problems.append(
            f"protocol version reader {protocol.min_reader_version} / writer {protocol.min_writer_version}"
        )
    for feature in sorted(set(protocol.writer_features or []) - _WRITER_FEATURES_OK):
        problems.append(f"writer feature {feature}" + (" (row tracking)" if feature == "rowTracking" else ""))
    for feature in sorted(set(protocol.reader_features or []) - _READER_FEATURES_OK):
        problems.append(f"reader feature {feature}")
    if config.get("delta.enableRowTracking", "").lower() == "true":
        problems.append("row tracking (delta.enableRowTracking)")
    if config.get("delta.enableChangeDataFeed", "").lower() == "true":
        problems.append("change data feed (delta.enableChangeDataFeed)")
    if config.get("delta.columnMapping.mode", "none").lower() != "none":
        problems.append(f"column mapping (delta.columnMapping.mode={config['delta.columnMapping.mode']})")
    if removing and config.get("delta.appendOnly", "").lower() == "true":
        problems.append("append-only table (delta.appendOnly) while removing files")
    problems += [f"check constraint {k}" for k in sorted(config) if k.startswith("delta.constraints.")]
    problems += _schema_problems(json.loads(table.schema().to_json()), "")
    return problems


def _schema_problems(node: Mapping[str, Any], prefix: str) -> list[str]:
    problems: list[str] = []
    for field in node.get("fields", []):
        name = prefix + field["name"]
        meta = field.get("metadata") or {}
        if "delta.invariants" in meta:
            problems.append(f"invariant on column {name}")
        if "delta.generationExpression" in meta:
            problems.append(f"generated column {name}")
        if any(k.startswith("delta.identity.") for k in meta):
            problems.append(f"identity column {name}")
        problems += _nested_problems(field["type"], name + ".")
    return problems


def _nested_problems(dtype: Any, prefix: str) -> list[str]:
    if not isinstance(dtype, dict):
        return []
    kind = dtype.get("type")
    if kind == "struct":
        return _schema_problems(dtype, prefix)
    if kind == "array":
        return _nested_problems(dtype.get("elementType"), prefix)
    if kind == "map":
        return _nested_problems(dtype.get("keyType"), prefix) + _nested_problems(dtype.get("valueType"), prefix)
    return []

