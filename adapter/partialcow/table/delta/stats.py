"""Delta ``add`` action stats from a new file's Parquet footer, and partition values in the protocol's string form.

Stats must be bounds readers can skip files by: a bound we cannot prove is left out (readers treat missing stats as
"unknown"), strings are truncated as delta-spark's writer truncates them.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from partialcow.exceptions import CommitError

__all__ = [
    "STATS_STRING_PREFIX",
    "delta_type",
    "file_stats",
    "logged_partition_strings",
    "partition_strings",
    "truncate_string_max",
    "truncate_string_min",
]

#: Characters of a string column kept in min/max stats (Delta's default prefix length).
STATS_STRING_PREFIX = 32
_INTEGER_TYPES = frozenset({"byte", "short", "integer", "long"})
_TIME_UNITS = {"milliseconds": 1_000, "microseconds": 1_000_000, "nanoseconds": 1_000_000_000}
_EPOCH = _dt.datetime(1970, 1, 1)
# the bounds Python's datetime (years 1 to 9999) can write, as days and milliseconds since the epoch
_MIN_DAYS = (_dt.date.min - _EPOCH.date()).days
_MAX_DAYS = (_dt.date.max - _EPOCH.date()).days
_MIN_MILLIS = (_dt.datetime.min - _EPOCH) // _dt.timedelta(milliseconds=1)
_MAX_MILLIS = (_dt.datetime.max - _EPOCH) // _dt.timedelta(milliseconds=1)


def partition_strings(values: Mapping[str, Any]) -> dict[str, str | None]:
    """Typed partition values (as delta-rs returns them) -> the protocol's string form."""
    out: dict[str, str | None] = {}
    for name, value in values.items():
        if value is None:
            out[name] = None
        elif isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, _dt.datetime) and value.tzinfo is not None:
            # a zoned instant as ISO 8601 in UTC: without a zone the protocol reads it in the reader's time zone
            utc = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
            out[name] = utc.isoformat(timespec="microseconds") + "Z"
        elif isinstance(value, _dt.datetime):
            out[name] = value.isoformat(sep=" ", timespec="microseconds")  # timestamp_ntz: a wall clock, no zone
        elif isinstance(value, _dt.date):
            out[name] = value.isoformat()
        elif isinstance(value, bytes):
            out[name] = value.decode("latin-1")
        else:
            out[name] = str(value)
    return out


def logged_partition_strings(
    values: Mapping[str, Any], logged: Iterable[Mapping[str, str | None]]
) -> dict[str, str | None]:
    """The log's own spelling of typed partition ``values``, from the partitions the log holds (``logged``).

    A timestamp partition value written without a zone is read by delta-spark in its session's time zone and by
    delta-rs in UTC, so no spelling we make up reads as the old one for every reader: a new file that replaces files
    of a partition takes the spelling the log already has. Where none matches, or the log spells the instant both
    with and without a zone, the value is spelled in UTC (:func:`partition_strings`).

    >>> ts = _dt.datetime(2024, 1, 1, 10, tzinfo=_dt.timezone.utc)
    >>> logged_partition_strings({"ts": ts}, [{"ts": "2024-01-01 09:00:00"}, {"ts": "2024-01-01 10:00:00"}])
    {'ts': '2024-01-01 10:00:00'}
    >>> logged_partition_strings({"ts": ts}, [{"ts": "2024-01-01 10:00:00"}, {"ts": "2024-01-01T10:00:00Z"}])
    {'ts': '2024-01-01T10:00:00.000000Z'}
    """
    canonical = partition_strings(values)
    matches = {tuple(sorted(raw.items())) for raw in logged if _spells(raw, values, canonical)}
    zoned = {name for name, v in values.items() if isinstance(v, _dt.datetime) and v.tzinfo is not None}
    forms = {tuple(_has_zone(dict(m)[name]) for name in sorted(zoned)) for m in matches}
    if not matches or len(forms) > 1:
        return canonical
    return dict(min(matches))


def _spells(raw: Mapping[str, str | None], values: Mapping[str, Any], canonical: Mapping[str, str | None]) -> bool:
    if set(raw) != set(values):
        return False
    for name, value in values.items():
        text = raw[name]
        if value is None or text is None:
            if value is not None or text is not None:
                return False
        elif isinstance(value, _dt.datetime) and value.tzinfo is not None:
            try:
                parsed = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                return False
            # delta-rs reads a value without a zone in UTC: that is how it produced ``value``
            if (parsed if parsed.tzinfo else parsed.replace(tzinfo=_dt.timezone.utc)) != value:
                return False
        elif text != canonical[name]:
            return False
    return True


def _has_zone(text: str | None) -> bool:
    return text is not None and (text.endswith("Z") or bool(re.search(r"[+-]\d\d:?\d\d$", text)))


def _indexed_columns(config: Mapping[str, str], fields: Sequence[Mapping[str, Any]]) -> set[str]:
    """Top-level columns Delta collects stats for (delta.dataSkippingStatsColumns / NumIndexedCols)."""
    listed = config.get("delta.dataSkippingStatsColumns")
    if listed:
        return {c.strip().strip("`") for c in listed.split(",")}
    limit = int(config.get("delta.dataSkippingNumIndexedCols") or 32)
    chosen: set[str] = set()
    leaves = 0
    for field in fields:
        if 0 <= limit <= leaves:
            break
        chosen.add(field["name"])
        leaves += _leaf_count(field["type"])
    return chosen


def _leaf_count(dtype: Any) -> int:
    if not isinstance(dtype, dict):
        return 1
    if dtype.get("type") == "struct":
        return sum(_leaf_count(f["type"]) for f in dtype["fields"])
    return 1  # arrays and maps are not indexed leaf by leaf


def file_stats(
    metadata: pq.FileMetaData,
    schema: Mapping[str, Any],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    rel: str,
    table_uri: str,
    *,
    missing_nullable_ok: bool = False,
) -> str:
    """Delta stats JSON for one new file, from its footer; columns whose bounds we cannot prove are left out.

    ``schema`` is the table's schema in Delta's JSON form (the log's ``schemaString``), ``configuration`` its table
    properties; the file must hold every non-partition column with the table's type, except, with
    ``missing_nullable_ok``, nullable columns the table gained after the file's rows were first written (readers
    read them as null; a rewritten copy of an older file keeps its columns).

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> sink = io.BytesIO(); pq.write_table(pa.table({"id": [3, 1]}), sink)
    >>> meta = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata
    >>> file_stats(meta, {"fields": [{"name": "id", "type": "long", "nullable": True}]}, [], {}, "f", "t")
    '{"numRecords":2,"minValues":{"id":1},"maxValues":{"id":3},"nullCount":{"id":0}}'
    """
    partition_set = set(partition_columns)
    fields = [f for f in schema["fields"] if f["name"] not in partition_set]
    _check_file_schema(metadata, fields, partition_set, rel, table_uri, missing_nullable_ok=missing_nullable_ok)
    indexed = _indexed_columns(configuration, fields)
    leaf_index = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}

    mins: dict[str, Any] = {}
    maxes: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for field in fields:
        name, dtype = field["name"], field["type"]
        if name not in indexed or isinstance(dtype, dict) or name not in leaf_index:
            continue  # nested columns: no stats (readers treat missing stats as "unknown")
        chunks = [metadata.row_group(g).column(leaf_index[name]) for g in range(metadata.num_row_groups)]
        stats = [c.statistics for c in chunks]
        if all(s is not None and s.has_null_count for s in stats):
            nulls[name] = sum(s.null_count for s in stats)
            if not field.get("nullable", True) and nulls[name]:
                raise CommitError(
                    f"new file {rel} has {nulls[name]} nulls in NOT NULL column {name} of Delta table {table_uri}"
                )
        # A row group holding only nulls has no bounds and needs none; any other one without bounds is unknown.
        bounded = [(c, s) for c, s in zip(chunks, stats) if not (s is not None and _all_null(c, s))]
        if not bounded or not all(s is not None and s.has_min_max for _, s in bounded):
            continue
        low = [_stat_value(dtype, c, s.min_raw, upper=False) for c, s in bounded]
        high = [_stat_value(dtype, c, s.max_raw, upper=True) for c, s in bounded]
        if all(v is not None for v in low):
            mins[name] = min(low)
        if all(v is not None for v in high):
            maxes[name] = max(high)
        if dtype == "string":  # truncated once, from the file's own bounds, as Delta's writer does
            if name in mins:
                mins[name] = truncate_string_min(mins[name])
            if name in maxes:
                maxes[name] = truncate_string_max(maxes[name])
                if maxes[name] is None:
                    del maxes[name]
    doc = {
        "numRecords": metadata.num_rows,
        "minValues": {k: _json_value(v) for k, v in mins.items()},
        "maxValues": {k: _json_value(v) for k, v in maxes.items()},
        "nullCount": nulls,
    }
    return _dumps_with_decimals(doc)


def _all_null(chunk: Any, stats: Any) -> bool:
    return bool(stats.has_null_count and stats.null_count == chunk.num_values)


def _check_file_schema(
    metadata: pq.FileMetaData,
    fields: Sequence[Mapping[str, Any]],
    partition_columns: set[str],
    rel: str,
    table: str,
    *,
    missing_nullable_ok: bool = False,
) -> None:
    arrow_schema = metadata.schema.to_arrow_schema()
    file_names = set(arrow_schema.names)
    table_names = {f["name"] for f in fields}
    required = {f["name"] for f in fields if not (missing_nullable_ok and f.get("nullable", True))}
    missing = sorted(required - file_names)
    if missing:
        raise CommitError(f"new file {rel} lacks columns {missing} of Delta table {table}; write every table column")
    extra = sorted(file_names - table_names - partition_columns)
    if extra:
        # Readers would silently ignore them: almost certainly a file meant for another table or schema.
        raise CommitError(f"new file {rel} has columns {extra} that Delta table {table} does not declare")
    int96 = [str(c.path) for c in (metadata.schema.column(i) for i in range(metadata.num_columns))
             if c.physical_type == "INT96"]
    for field in fields:
        if field["name"] not in file_names:
            continue  # a nullable column the file predates (allowed above)
        arrow_field = arrow_schema.field(field["name"])
        file_type = delta_type(_int96_as_timestamps(int96, field["name"], arrow_field.type) if int96
                               else arrow_field.type)
        if file_type == field["type"] or _compatible(file_type, field["type"]):
            continue
        raise CommitError(
            f"column {field['name']} of new file {rel} has type {file_type or arrow_field.type}, but Delta table "
            f"{table} declares {json.dumps(field['type'])}; write the file with the table's types"
        )


_UTC_NAMES = frozenset({"UTC", "+00:00", "Etc/UTC", "Z"})


def delta_type(arrow_type: pa.DataType) -> Any:
    """The Delta type (its schema JSON form) a file column of ``arrow_type`` holds, or None if Delta has none.

    The same mapping delta-rs applies to Arrow schemas: unsigned integers as their signed width, timestamps without a
    zone as ``timestamp_ntz`` (nanoseconds as ``timestamp_nanos_ntz``), dictionary columns as their values.

    >>> delta_type(pa.int32()), delta_type(pa.timestamp("us")), delta_type(pa.timestamp("us", tz="UTC"))
    ('integer', 'timestamp_ntz', 'timestamp')
    >>> delta_type(pa.list_(pa.decimal128(10, 2)))
    {'type': 'array', 'elementType': 'decimal(10,2)', 'containsNull': True}
    >>> delta_type(pa.time64("us")) is None
    True
    """
    t = arrow_type
    if pa.types.is_dictionary(t):
        return delta_type(t.value_type)
    for test, name in _SIMPLE_TYPES:
        if test(t):
            return name
    if pa.types.is_timestamp(t):
        if t.unit == "s" or (t.tz is not None and t.tz not in _UTC_NAMES):
            return None
        nanos = "_nanos" if t.unit == "ns" else ""
        return f"timestamp{nanos}" if t.tz else f"timestamp{nanos}_ntz"
    if pa.types.is_decimal128(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = delta_type(t.value_type)
        return None if element is None else {"type": "array", "elementType": element,
                                             "containsNull": t.value_field.nullable}
    if pa.types.is_map(t):
        key, value = delta_type(t.key_type), delta_type(t.item_type)
        if key is None or value is None:
            return None
        return {"type": "map", "keyType": key, "valueType": value, "valueContainsNull": t.item_field.nullable}
    if pa.types.is_struct(t):
        fields = []
        for child in (t.field(i) for i in range(t.num_fields)):
            child_type = delta_type(child.type)
            if child_type is None:
                return None
            fields.append({"name": child.name, "type": child_type, "nullable": child.nullable, "metadata": {}})
        return {"type": "struct", "fields": fields}
    return None


_SIMPLE_TYPES = (
    (lambda t: pa.types.is_int8(t) or pa.types.is_uint8(t), "byte"),
    (lambda t: pa.types.is_int16(t) or pa.types.is_uint16(t), "short"),
    (lambda t: pa.types.is_int32(t) or pa.types.is_uint32(t), "integer"),
    (lambda t: pa.types.is_int64(t) or pa.types.is_uint64(t), "long"),
    (pa.types.is_float32, "float"),
    (pa.types.is_float64, "double"),
    (pa.types.is_boolean, "boolean"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t), "string"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t), "binary"),
    (lambda t: pa.types.is_date32(t) or pa.types.is_date64(t), "date"),
    (pa.types.is_null, "void"),
)


def _compatible(file_type: Any, table_type: Any) -> bool:
    """Nested types compare without nullability/metadata details Arrow does not carry the same way."""
    if isinstance(file_type, dict) and isinstance(table_type, dict):
        if file_type.get("type") != table_type.get("type"):
            return False
        if table_type["type"] == "struct":
            a, b = file_type["fields"], table_type["fields"]
            return len(a) == len(b) and all(
                x["name"] == y["name"] and (x["type"] == y["type"] or _compatible(x["type"], y["type"]))
                for x, y in zip(a, b)
            )
        if table_type["type"] == "array":
            return _compatible(file_type["elementType"], table_type["elementType"]) or (
                file_type["elementType"] == table_type["elementType"]
            )
        if table_type["type"] == "map":
            return all(
                file_type[k] == table_type[k] or _compatible(file_type[k], table_type[k])
                for k in ("keyType", "valueType")
            )
    return False


def _int96_as_timestamps(int96_paths: Sequence[str], name: str, arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` of file column ``name`` with its INT96 values as what they are, UTC-adjusted timestamps (Spark's
    and delta-spark's default physical type, at the top level or inside structs, arrays and maps), where pyarrow
    reads them as zone-less nanoseconds. ``int96_paths``: the file's INT96 leaves (Parquet column paths).

    >>> t = pa.struct([("ts", pa.timestamp("ns")), ("n", pa.int32())])
    >>> _int96_as_timestamps(["s.ts"], "s", t)
    StructType(struct<ts: timestamp[us, tz=UTC], n: int32>)
    """
    int96 = sum(1 for path in int96_paths if path == name or path.startswith(name + "."))
    if not int96:
        return arrow_type
    legacy = pa.timestamp("ns")  # how pyarrow reads INT96

    def count(t: pa.DataType) -> int:
        if t == legacy:
            return 1
        return sum(count(t.field(i).type) for i in range(t.num_fields)) if pa.types.is_nested(t) else 0

    def convert(t: pa.DataType) -> pa.DataType:
        if t == legacy:
            return pa.timestamp("us", tz="UTC")
        if pa.types.is_struct(t):
            return pa.struct([t.field(i).with_type(convert(t.field(i).type)) for i in range(t.num_fields)])
        if pa.types.is_map(t):
            return pa.map_(t.key_field.with_type(convert(t.key_type)), t.item_field.with_type(convert(t.item_type)))
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            factory = pa.list_ if pa.types.is_list(t) else pa.large_list
            return factory(t.value_field.with_type(convert(t.value_type)))
        return t

    # only when every zone-less nanosecond timestamp in the column is an INT96 one (the others are what they say)
    return convert(arrow_type) if count(arrow_type) == int96 else arrow_type


def _stat_value(dtype: str, chunk: Any, raw: Any, *, upper: bool) -> Any:
    """One footer bound as a Delta stats value that is still a bound, or None when that cannot be guaranteed."""
    logical = json.loads(chunk.statistics.logical_type.to_json()) if chunk.statistics.logical_type else {}
    physical = chunk.physical_type
    if dtype in _INTEGER_TYPES:
        unsigned = logical.get("Type") == "Int" and not logical.get("isSigned", True)
        return int(raw) if physical in ("INT32", "INT64") and not unsigned else None
    if dtype == "date":
        if physical != "INT32" or not _MIN_DAYS <= int(raw) <= _MAX_DAYS:
            return None  # a date Python's calendar (years 1-9999), and Delta's stats, cannot write
        return _EPOCH.date() + _dt.timedelta(days=int(raw))
    if dtype in ("timestamp", "timestamp_ntz"):
        if physical != "INT64" or logical.get("Type") != "Timestamp":
            return None  # INT96 and untyped integers: no trustworthy bound
        per_second = _TIME_UNITS[logical["timeUnit"]]
        per_milli = per_second // 1000
        # Delta keeps milliseconds: round the lower bound down and the upper bound up so both stay bounds.
        millis = -(-int(raw) // per_milli) if upper else int(raw) // per_milli
        if not _MIN_MILLIS <= millis <= _MAX_MILLIS:
            # 9999-12-31 23:59:59.999999 (a common "valid until" marker) rounds up into year 10000: no bound
            return None
        return ("ts_utc" if dtype == "timestamp" else "ts_ntz", millis)
    if dtype.startswith("decimal"):
        if logical.get("Type") != "Decimal":
            return None
        value = chunk.statistics.max if upper else chunk.statistics.min
        return value if isinstance(value, decimal.Decimal) else None
    if dtype == "string":
        if physical != "BYTE_ARRAY":
            return None
        try:
            return bytes(raw).decode("utf-8") if not isinstance(raw, str) else raw
        except UnicodeDecodeError:
            return None  # a writer cut the bound inside a character
    # float/double: footers leave NaN out of min/max while Spark orders NaN above every number, so a max
    # without NaN could skip files a `> x` predicate must read. boolean/binary: Delta does not index them.
    return None


def truncate_string_min(text: str, prefix: int = STATS_STRING_PREFIX) -> str:
    r"""A string column's ``minValues`` entry: its first ``prefix`` characters (code points), as delta-spark writes it.

    Delta's writer takes Spark's ``substring(min, 0, prefix)``, which counts code points: a prefix never splits a
    character, and a prefix of a string sorts before it.

    >>> truncate_string_min("abcdef", 3), len(truncate_string_min("\U00020000xyz", 2))
    ('abc', 2)
    """
    return text[:prefix]


def truncate_string_max(text: str, prefix: int = STATS_STRING_PREFIX) -> str | None:
    r"""A string column's ``maxValues`` entry, as delta-spark writes it (``truncateMaxStringAgg``), or None.

    Up to ``prefix`` UTF-16 units are kept (a surrogate pair is kept whole), then a tie-breaker is appended that
    sorts above the character it replaces in UTF-8 byte order, Spark's and delta-rs' string order: U+007F when that
    character is below it, U+10FFFF otherwise. U+10FFFF characters in the string cannot be outgrown and are kept
    (up to twice ``prefix`` units); past that there is no short upper bound and None says "leave the max out".

    >>> truncate_string_max("abcdef", 3), truncate_string_max("abc\u00e9f", 3), truncate_string_max("ab", 3)
    ('abc\x7f', 'abc\U0010ffff', 'ab')
    >>> truncate_string_max("ab\U0010ffffz", 2), truncate_string_max("a\U0010ffff\U0010ffffz", 2)
    ('ab\U0010ffff\x7f', None)
    """
    if _utf16_units(text) <= prefix:
        return text
    kept = units = 0
    while units < prefix:  # a pair straddling the limit is kept whole, never split
        units += _utf16_units(text[kept])
        kept += 1
    while units <= 2 * prefix:
        if kept >= len(text):
            return text
        nxt = text[kept]
        if nxt == _MAX_CHAR:
            kept, units = kept + 1, units + 2
        elif nxt < "\x7f":
            return text[:kept] + "\x7f"
        else:
            return text[:kept] + _MAX_CHAR
    return None


_MAX_CHAR = "\U0010ffff"


def _utf16_units(text: str) -> int:
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _json_value(value: Any) -> Any:
    if isinstance(value, tuple):
        kind, millis = value
        moment = _EPOCH + _dt.timedelta(milliseconds=millis)
        # isoformat, not strftime: glibc's %Y does not pad years before 1000, which no Delta reader parses
        text = moment.isoformat(timespec="milliseconds")
        return text + "Z" if kind == "ts_utc" else text
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _dumps_with_decimals(doc: Mapping[str, Any]) -> str:
    """JSON with decimals written as exact numbers (json has no Decimal support; floats would round)."""
    literals: dict[str, str] = {}

    def encode(value: Any) -> Any:
        if isinstance(value, decimal.Decimal):
            token = f"__partialcow_decimal_{len(literals)}__"
            literals[token] = format(value, "f")
            return token
        if isinstance(value, dict):
            return {k: encode(v) for k, v in value.items()}
        return value

    # Raw UTF-8, as Delta's own writers emit: delta-rs decodes some escaped surrogate pairs wrongly (U+10FFFF as
    # U+FFFFF), and a wrong string bound makes readers skip files that hold matching rows.
    text = json.dumps(encode(doc), separators=(",", ":"), ensure_ascii=False)
    for token, literal in literals.items():
        text = text.replace(f'"{token}"', literal)
    return text
