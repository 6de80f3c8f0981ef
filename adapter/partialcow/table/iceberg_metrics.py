"""Iceberg ``DataFile`` objects for new Parquet files, their metrics computed in Python from the footer.

Iceberg reads a new file's metrics (column sizes, value and null counts, lower and upper bounds) with its own,
relocated copy of parquet-java. In a fresh process that copy's first use loads and compiles its classes: a sizeable
part of a small batch's commit (measured in ``bench/README.md``). The page engine reads the same footer in
milliseconds; :func:`footer_metrics` applies Iceberg 1.10's rules to it (``ParquetMetrics`` with parquet-java 1.16's
reading of statistics), and Iceberg parses the result with its own ``ContentFileParser``.

The rules are reproduced where they are simple: a flat schema whose columns all carry field ids and have the types
of :func:`_kind`, statistics in ``min_value``/``max_value``, and no name mapping (the partition, if any, is
serialized by Iceberg's ``SingleValueParser``). Every other file takes Iceberg's own path.
``tests/table/test_iceberg_metrics.py`` compares both paths' results field by field.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from partialcow.exceptions import ParquetRewriteError, UnsupportedFileError
from partialcow.parquet.footer import FooterColumn, ParquetFooter, read_footer
from partialcow.table.java import java_map
from partialcow.table.paths import local_path

__all__ = ["DataFileBuilder", "FileMetrics", "footer_metrics"]

# (mode, truncate length): MetricsModes' "none", "counts", "truncate(n)" and "full"
Mode = tuple[str, int]
FULL_LENGTH = 2**31 - 1  # Integer.MAX_VALUE, what Iceberg uses for "full"

# converted types (enum ConvertedType) that map to the kinds below
_UTF8, _DECIMAL, _DATE, _TIMESTAMP_MICROS = 0, 5, 6, 10
_INT_8, _INT_16, _INT_32, _INT_64 = 15, 16, 17, 18
_FIXED_SIZE = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "FLOAT": 4, "DOUBLE": 8}


@dataclass
class FileMetrics:
    """Iceberg's ``Metrics`` of one file: maps keyed by field id; bounds serialized as Iceberg single values."""

    record_count: int
    column_sizes: dict[int, int] = field(default_factory=dict)
    value_counts: dict[int, int] = field(default_factory=dict)
    null_value_counts: dict[int, int] = field(default_factory=dict)
    lower_bounds: dict[int, bytes] = field(default_factory=dict)
    upper_bounds: dict[int, bytes] = field(default_factory=dict)

    def data_file_json(self, *, path: str, size: int, spec_id: int) -> str:
        """The ``ContentFileParser`` JSON of an unpartitioned data file with these metrics."""

        def counts(values: dict[int, int]) -> dict[str, list[int]]:
            return {"keys": list(values), "values": list(values.values())}

        def bounds(values: dict[int, bytes]) -> dict[str, list[Any]]:
            return {"keys": list(values), "values": [v.hex().upper() for v in values.values()]}

        return json.dumps({
            "spec-id": spec_id, "content": "DATA", "file-path": path, "file-format": "PARQUET",
            "file-size-in-bytes": size, "record-count": self.record_count,
            "column-sizes": counts(self.column_sizes), "value-counts": counts(self.value_counts),
            "null-value-counts": counts(self.null_value_counts), "nan-value-counts": counts({}),
            "lower-bounds": bounds(self.lower_bounds), "upper-bounds": bounds(self.upper_bounds),
            "sort-order-id": 0,  # unsorted, as DataFiles.builder leaves it
        })


class _NotReproduced(Exception):
    """The file is outside the cases reproduced here: Iceberg computes its metrics."""


def footer_metrics(footer: ParquetFooter, mode_of: Callable[[str], Mode]) -> FileMetrics | None:
    """Iceberg's metrics of the file ``footer`` describes, or None where Iceberg's own reading must compute them.

    ``mode_of`` gives the metrics mode of a column name (``MetricsConfig.columnMode``).

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> field = pa.field("s", pa.string(), metadata={"PARQUET:field_id": "1"})
    >>> pq.write_table(pa.table({"s": ["b", "abcdefghijklmnopqrstuvwxyz"]}, pa.schema([field])), p)
    >>> m = footer_metrics(read_footer(p), lambda name: ("truncate", 16))
    >>> m.value_counts, m.lower_bounds[1], m.upper_bounds[1]
    ({1: 2}, b'abcdefghijklmnop', b'b')
    """
    try:
        return _metrics(footer, mode_of)
    except _NotReproduced:
        return None


def _metrics(footer: ParquetFooter, mode_of: Callable[[str], Mode]) -> FileMetrics:
    out = FileMetrics(record_count=footer.num_rows)
    for column in footer.columns:
        if column.nested or column.field_id is None:
            raise _NotReproduced
        kind = _kind(column)
        fid = column.field_id
        mode, length = mode_of(column.path[0])
        if mode == "none":
            continue
        if column.chunks:
            out.column_sizes[fid] = sum(c.total_compressed_size for c in column.chunks)
        if kind == "int96":  # Iceberg keeps no counts or bounds of INT96 timestamps
            continue
        values = nulls = 0
        lower: Any = None
        upper: Any = None
        complete = True
        for chunk in column.chunks:
            low, high, has_value = _chunk_bounds(column, kind, chunk.min_value, chunk.max_value, chunk.legacy_min_max)
            null_count = -1 if chunk.null_count is None else chunk.null_count  # parquet-java's "not set"
            if not chunk.has_statistics or (not has_value and chunk.null_count is None):
                complete = False  # stats missing or empty in one chunk: no counts or bounds at all
                break
            nulls += null_count
            values += chunk.num_values
            if has_value and mode != "counts":
                if lower is None or _order(kind, low) < _order(kind, lower):
                    lower = low
                if upper is None or _order(kind, high) > _order(kind, upper):
                    upper = high
        if not complete:
            continue
        if values >= 0:
            out.value_counts[fid] = values
        if nulls >= 0:
            out.null_value_counts[fid] = nulls
        if mode == "counts" or lower is None:
            continue
        low_bytes = _serialize(kind, _truncate_lower(kind, lower, length))
        high_value = _truncate_upper(kind, upper, length)
        out.lower_bounds[fid] = low_bytes
        if high_value is not None:
            out.upper_bounds[fid] = _serialize(kind, high_value)
    return out


def _kind(column: FooterColumn) -> str:
    """The Iceberg type Iceberg derives from the column's Parquet type, where reproduced here."""
    ptype, logical, converted = column.physical_type, column.logical_type, column.converted_type
    if logical is not None:
        if logical == "STRING" and ptype == "BYTE_ARRAY":
            return "string"
        if logical == "DECIMAL" and ptype in ("INT32", "INT64", "FIXED_LEN_BYTE_ARRAY", "BYTE_ARRAY"):
            return "decimal"
        if logical == "DATE" and ptype == "INT32":
            return "date"
        if logical == "TIMESTAMP" and ptype == "INT64" and column.timestamp_unit == "MICROS":
            return "long"  # Iceberg's timestamp, serialized and ordered as a long
        if logical == "INTEGER" and column.int_signed:
            if ptype == "INT32" and (column.int_bit_width or 32) <= 32:
                return "int"
            if ptype == "INT64" and column.int_bit_width == 64:
                return "long"
        raise _NotReproduced
    if converted is not None:
        if converted == _UTF8 and ptype == "BYTE_ARRAY":
            return "string"
        if converted == _DECIMAL and ptype in ("INT32", "INT64", "FIXED_LEN_BYTE_ARRAY", "BYTE_ARRAY"):
            return "decimal"
        if converted == _DATE and ptype == "INT32":
            return "date"
        if converted == _TIMESTAMP_MICROS and ptype == "INT64":
            return "long"
        if converted in (_INT_8, _INT_16, _INT_32) and ptype == "INT32":
            return "int"
        if converted == _INT_64 and ptype == "INT64":
            return "long"
        raise _NotReproduced
    plain = {"BOOLEAN": "boolean", "INT32": "int", "INT64": "long", "FLOAT": "float", "DOUBLE": "double",
             "BYTE_ARRAY": "binary", "INT96": "int96"}
    if ptype not in plain:
        raise _NotReproduced
    return plain[ptype]


def _chunk_bounds(column: FooterColumn, kind: str, low: bytes | None, high: bytes | None,
                  legacy: bool) -> tuple[Any, Any, bool]:
    """(min, max, has a non-null value) of one chunk as parquet-java reads its statistics."""
    if legacy:
        raise _NotReproduced  # parquet-java trusts the deprecated fields by writer version and sort order
    if low is None or high is None or not (column.type_defined_order or low == high):
        return None, None, False
    expected = _FIXED_SIZE.get(column.physical_type)
    if expected is not None and (len(low) != expected or len(high) != expected):
        raise _NotReproduced
    lo, hi = _decode(column, kind, low), _decode(column, kind, high)
    if kind in ("float", "double"):
        if math.isnan(lo) or math.isnan(hi):
            return None, None, False  # parquet-java drops min/max holding NaN
        if lo == 0.0 and math.copysign(1.0, lo) > 0:
            lo = -0.0  # so that no 0.0 is skipped (parquet-java widens a zero bound this way)
        if hi == 0.0 and math.copysign(1.0, hi) < 0:
            hi = 0.0
    return lo, hi, True


def _decode(column: FooterColumn, kind: str, raw: bytes) -> Any:
    if kind == "boolean":
        return raw[0] != 0
    if kind in ("int", "date"):
        return struct.unpack("<i", raw)[0]
    if kind == "long":
        return struct.unpack("<q", raw)[0]
    if kind == "float":
        return struct.unpack("<f", raw)[0]
    if kind == "double":
        return struct.unpack("<d", raw)[0]
    if kind == "string":
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _NotReproduced from None  # Java decodes with replacement characters
    if kind == "binary":
        return raw
    if kind == "decimal":  # the unscaled value; a column's values share one scale
        if column.physical_type == "INT32":
            return struct.unpack("<i", raw)[0]
        if column.physical_type == "INT64":
            return struct.unpack("<q", raw)[0]
        if not raw:
            raise _NotReproduced
        return int.from_bytes(raw, "big", signed=True)
    raise _NotReproduced


def _order(kind: str, value: Any) -> Any:
    """Iceberg's comparator as a sort key: floats order -0.0 before 0.0 (``Float.compare``)."""
    if kind in ("float", "double"):
        return (value, math.copysign(1.0, value) > 0)
    return value


def _truncate_lower(kind: str, value: Any, length: int) -> Any:
    if kind in ("string", "binary"):
        return value[:length]
    return value


def _truncate_upper(kind: str, value: Any, length: int) -> Any:
    """The smallest value of at most ``length`` code points (bytes) above ``value``'s prefix; None if there is none."""
    if kind not in ("string", "binary") or len(value) <= length:
        return value
    if kind == "binary":
        for i in range(length - 1, -1, -1):
            if value[i] != 0xFF:
                return value[:i] + bytes([value[i] + 1])
        return None
    for i in range(length - 1, -1, -1):
        code = ord(value[i])
        if code == 0x10FFFF:
            continue
        return value[:i] + chr(0xE000 if code == 0xD7FF else code + 1)  # never a surrogate
    return None


def _serialize(kind: str, value: Any) -> bytes:
    """Iceberg's single-value serialization (the spec's binary form of bounds)."""
    if kind == "boolean":
        return b"\x01" if value else b"\x00"
    if kind in ("int", "date"):
        return struct.pack("<i", value)
    if kind == "long":
        return struct.pack("<q", value)
    if kind == "float":
        return struct.pack("<f", value)
    if kind == "double":
        return struct.pack("<d", value)
    if kind == "string":
        return str(value).encode("utf-8")
    if kind == "binary":
        return bytes(value)
    # decimal: the unscaled value in the fewest two's-complement bytes (BigInteger.toByteArray)
    bits = (value if value >= 0 else ~value).bit_length()
    return int(value).to_bytes(bits // 8 + 1, "big", signed=True)


def _parse_mode(text: str) -> Mode:
    if text in ("none", "counts"):
        return text, 0
    if text == "full":
        return "full", FULL_LENGTH
    if text.startswith("truncate(") and text.endswith(")"):
        return "truncate", int(text[len("truncate("):-1])
    raise _NotReproduced


class DataFileBuilder:
    """Builds the ``DataFile`` objects of one commit's new files, from the footers where that is reproduced.

    ``table`` is the Java Iceberg table and ``spec`` the spec the files are added under; ``mapping`` the table's
    name mapping (files without field ids), if any. ``fast`` and ``iceberg`` count the files each way took.
    """

    def __init__(self, jvm: Any, table: Any, spec: Any, *, mapping: Any = None, metrics_config: Any = None) -> None:
        self._jvm = jvm
        self._table = table
        self._spec = spec
        self._mapping = mapping
        self._config = metrics_config if metrics_config is not None else (
            jvm.org.apache.iceberg.MetricsConfig.forTable(table))
        self._modes: dict[str, Mode] = {}
        self._footers: dict[str, ParquetFooter | None] = {}
        self.unpartitioned = bool(spec.isUnpartitioned())
        self.fast = 0
        self.iceberg = 0

    def build(self, path: str, *, partition: Any = None) -> Any:
        """The ``DataFile`` of the Parquet file at ``path`` (the table's spelling of it), in ``partition``."""
        data_file = self._from_footer(path, partition) if self._mapping is None else None
        if data_file is not None:
            self.fast += 1
            return data_file
        self.iceberg += 1
        jvm = self._jvm
        input_file = self._table.io().newInputFile(path)
        metrics = jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(input_file, self._config, self._mapping)
        builder = (
            jvm.org.apache.iceberg.DataFiles.builder(self._spec)
            .withPath(path)
            .withFileSizeInBytes(input_file.getLength())
            .withFormat("PARQUET")
            .withMetrics(metrics)
        )
        if partition is not None:
            builder = builder.withPartition(partition)
        return builder.build()

    def exact_metrics(self, path: str) -> FileMetrics:
        """Untruncated metrics of every column (mode "full"): from the footer where that is reproduced, else read by
        Iceberg with a "full" metrics configuration."""
        footer = self._footer(path) if self._mapping is None else None
        metrics = None if footer is None else footer_metrics(footer, lambda name: ("full", FULL_LENGTH))
        if metrics is not None:
            return metrics
        jvm = self._jvm
        config = jvm.org.apache.iceberg.MetricsConfig.fromProperties(
            java_map(jvm, {"write.metadata.metrics.default": "full"}))
        java = jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(
            self._table.io().newInputFile(path), config, self._mapping)
        to_bytes = jvm.org.apache.iceberg.util.ByteBuffers.toByteArray

        def counts(values: Any) -> dict[int, int]:
            return {int(k): int(v) for k, v in values.items()}

        def bounds(values: Any) -> dict[int, bytes]:
            return {int(k): bytes(to_bytes(v)) for k, v in values.items()}

        return FileMetrics(record_count=int(java.recordCount()), column_sizes=counts(java.columnSizes()),
                           value_counts=counts(java.valueCounts()),
                           null_value_counts=counts(java.nullValueCounts()), lower_bounds=bounds(java.lowerBounds()),
                           upper_bounds=bounds(java.upperBounds()))

    def _mode(self, name: str) -> Mode:
        if name not in self._modes:
            self._modes[name] = _parse_mode(str(self._config.columnMode(name)))
        return self._modes[name]

    def _footer(self, path: str) -> ParquetFooter | None:
        local = local_path(path)
        if local is None or os.environ.get("PARTIALCOW_ICEBERG_FOOTER_METRICS", "1") == "0":
            return None
        if path not in self._footers:
            try:
                self._footers[path] = read_footer(local)
            except (OSError, ParquetRewriteError, UnsupportedFileError):
                self._footers[path] = None
        return self._footers[path]

    def _from_footer(self, path: str, partition: Any) -> Any:
        footer = self._footer(path)
        metrics = None if footer is None else footer_metrics(footer, self._mode)
        if metrics is None:
            return None
        jvm = self._jvm
        size = os.path.getsize(local_path(path) or path)
        text = metrics.data_file_json(path=path, size=size, spec_id=int(self._spec.specId()))
        if partition is not None:
            values = str(jvm.org.apache.iceberg.SingleValueParser.toJson(self._spec.partitionType(), partition))
            text = text[:-1] + f', "partition": {values}}}'
        node = jvm.org.apache.iceberg.util.JsonUtil.mapper().readTree(text)
        return jvm.org.apache.iceberg.ContentFileParser.fromJson(node, self._spec)
