"""Readers agree: every state of a Delta table is read the same by delta-spark, delta-rs and polars.

A reusable checker for tests that write Delta tables (issue 22 item 2, issue 26 item 5):

- every version asked for (time travel to the version before each write included) is read by delta-rs, polars and,
  when its jars are here, delta-spark (vectorized and not, under the Spark session time zones given), and each read
  must equal the expected rows when the test gives them, and the other readers' rows in any case;
- the log's stats of every live file our committer added are checked against the file itself: ``numRecords`` and
  ``nullCount`` exactly, ``minValues``/``maxValues`` as bounds (exact for numbers, dates and decimals; timestamps
  within the millisecond Delta keeps; strings a prefix of the true bound, the max with at most one tie-breaker);
- our string bounds can be compared with delta-spark's own truncation (``stats_strings``);
- filtered reads on each column's smallest and largest value (data skipping uses the stats) return every row that
  holds the value, through all three readers.

delta-spark runs in one child process for everything a call asks (the test process's SparkSession has Iceberg's
catalog, and a JVM cannot switch its session catalog), or in the caller's own session when it has Delta
(``spark=``: the Delta-inside-Spark suite). A table whose protocol lists deletion vectors cannot be read by delta-rs
or polars 1.x: its versions are then read by delta-spark alone, which must equal the expected rows.

``assert_readers_agree([DeltaCheck(root, expected={0: rows_v0, 1: rows_v1})], spark_time_zones=("Asia/Tokyo",))``
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[2]
UTC = dt.timezone.utc
_ONE_MS = dt.timedelta(milliseconds=1)


# ------------------------------------------------------------------------------------------------ delta-spark jars

from delta_env import NO_DELTA_SPARK, delta_spark_jars  # noqa: E402,F401 - re-exported for the tests using this module


# ------------------------------------------------------------------------------------------------ what to check


@dataclass
class DeltaCheck:
    """One Delta table to check: ``expected`` maps versions to their rows (dicts; maps as lists of pairs).

    ``versions`` defaults to every version in ``expected``, or every version of the table without it.
    """

    root: str
    key: str = "id"
    expected: Mapping[int, Sequence[Mapping[str, Any]]] | None = None
    versions: Sequence[int] | None = None
    filters: bool = True  # boundary-value filtered reads on the latest version
    schema: dict[str, Any] = field(default_factory=dict, init=False)

    def chosen_versions(self) -> list[int]:
        if self.versions is not None:
            return list(self.versions)
        if self.expected is not None:
            return sorted(self.expected)
        from deltalake import DeltaTable

        return list(range(DeltaTable(self.root).version() + 1))


def assert_readers_agree(
    checks: Sequence[DeltaCheck],
    *,
    spark_time_zones: Sequence[str] = ("UTC",),
    delta_spark: bool | None = None,
    stats_strings: Sequence[str] = (),
    spark: Any = None,
) -> None:
    """Check every table of ``checks`` (see the module docstring); raises AssertionError naming reader and version.

    ``delta_spark``: None reads through delta-spark when its jars are here, True requires them, False skips it.
    ``stats_strings``: strings whose stats bounds our committer must truncate exactly as delta-spark's own writer
    does (its ``substring`` for the min and ``truncateMaxStringAgg`` for the max, called in the same JVM).
    ``spark``: a session with Delta to read through instead of a child process.
    """
    jars = delta_spark_jars() if spark is None else ["in-process"]
    if delta_spark and not jars:
        raise AssertionError(NO_DELTA_SPARK)
    use_spark = bool(jars) if delta_spark is None else delta_spark
    spark_reads: list[dict[str, Any]] = []
    pending: list[tuple[str, Any]] = []  # (what, how to check the child's answer)
    for check in checks:
        check.schema = _log_schema(check.root)
        versions = check.chosen_versions()
        latest = max(versions)
        states: dict[int, dict[Any, dict[str, Any]]] = {}
        for version in versions:
            where = f"{check.root} at version {version}"
            expected = None if check.expected is None else canonical_rows(check.expected[version], check.schema,
                                                                          check.key)
            if _has_deletion_vectors(check.root, version):
                assert use_spark, f"{where}: a deletion vector table only delta-spark reads, and it is not here"
                assert expected is not None, f"{where}: a deletion vector table needs the expected rows"
                states[version] = expected  # delta-spark's read is compared with them below
            else:
                rs = _canonical_rows(_read_delta_rs(check.root, version), check, f"delta-rs read of {where}")
                pl_rows = _canonical_rows(_read_polars(check.root, version), check, f"polars read of {where}")
                if expected is not None:
                    assert_same_rows(rs, expected, f"delta-rs read of {where}")
                assert_same_rows(pl_rows, rs, f"polars read of {where} (against delta-rs)")
                states[version] = rs
            rs = states[version]
            _check_stats(check.root, version)
            for vectorized in (True, False) if use_spark else ():
                tz = spark_time_zones[(version + (not vectorized)) % len(spark_time_zones)]
                spark_reads.append({"root": check.root, "version": version, "tz": tz, "vectorized": vectorized})
                pending.append((f"delta-spark ({'vectorized' if vectorized else 'row'} reader, session time zone "
                                f"{tz}) read of {where}", ("rows", check, rs)))
        if check.filters:
            boundaries = boundary_values(check.schema, states[latest])
            for column, value, wanted in boundaries if not _has_deletion_vectors(check.root, latest) else ():
                what = f"filter {column} = {value!r} on {check.root} at version {latest}"
                assert_same_keys(_filter_delta_rs(check.root, latest, column, value, check), wanted, f"delta-rs {what}")
                assert_same_keys(_filter_polars(check.root, latest, column, value, check), wanted, f"polars {what}")
            if use_spark and boundaries:
                # one query, a filtered scan per value (each skips files by the stats on its own)
                tz = spark_time_zones[len(spark_reads) % len(spark_time_zones)]
                wheres = [f"`{column}` = {sql_literal(value, _type_of(check, column))}"
                          for column, value, _ in boundaries]
                spark_reads.append({"root": check.root, "version": latest, "tz": tz, "vectorized": True,
                                    "wheres": wheres, "key": check.key})
                pending.append((f"delta-spark (session time zone {tz}) filters on {check.root} at version {latest}",
                                ("filters", check, boundaries)))
    if use_spark and stats_strings:
        spark_reads.append({"truncate": list(stats_strings), "prefix": 32})
        pending.append(("delta-spark's string stats truncation", ("truncate", None, list(stats_strings))))
    if not spark_reads:
        return
    answers = _run_delta_spark(spark_reads, jars) if spark is None else _read_in_process(spark, spark_reads)
    for (what, (kind, check, want)), answer in zip(pending, answers):
        if kind == "truncate":
            from partialcow.table.delta import truncate_string_max, truncate_string_min

            ours = [[truncate_string_min(t), truncate_string_max(t)] for t in want]
            wrong = [(t, o, a) for t, o, a in zip(want, ours, answer) if o != a]
            assert not wrong, f"{what}: (string, ours, delta-spark's) {wrong[:5]}"
        elif kind == "rows":
            assert_same_rows(_canonical_rows(answer, check, what), want, what)
        else:
            for i, (column, value, wanted) in enumerate(want):
                assert_same_keys([k for f, k in answer if f == i], wanted, f"{what}: {column} = {value!r}")


def assert_same_rows(got: Mapping[Any, Any], want: Mapping[Any, Any], what: str) -> None:
    if got == want:
        return
    missing = sorted(set(want) - set(got), key=repr)[:5]
    extra = sorted(set(got) - set(want), key=repr)[:5]
    diffs = [(k, c, got[k].get(c), want[k].get(c)) for k in want if k in got for c in want[k]
             if got[k].get(c) != want[k].get(c)][:5]
    raise AssertionError(f"{what}: missing keys {missing}, extra keys {extra}, differing (key, column, got, "
                         f"expected) {diffs}")


def assert_same_keys(got: Sequence[Any], want: set[Any], what: str) -> None:
    assert set(got) == want, f"{what}: got keys {sorted(got, key=repr)}, expected {sorted(want, key=repr)}"


# ------------------------------------------------------------------------------------------------ readers


def _read_delta_rs(root: str, version: int) -> pa.Table:
    from deltalake import DeltaTable

    return DeltaTable(root, version=version).to_pyarrow_table()


def _read_polars(root: str, version: int) -> pa.Table:
    import polars as pl

    return pl.read_delta(root, version=version).to_arrow()


def _filter_delta_rs(root: str, version: int, column: str, value: Any, check: DeltaCheck) -> list[Any]:
    from deltalake import DeltaTable

    table = DeltaTable(root, version=version).to_pyarrow_table(columns=[check.key], filters=[(column, "=", value)])
    return table.column(check.key).to_pylist()


def _filter_polars(root: str, version: int, column: str, value: Any, check: DeltaCheck) -> list[Any]:
    import polars as pl

    frame = pl.scan_delta(root, version=version).filter(pl.col(column) == pl.lit(value)).select(check.key)
    return frame.collect()[check.key].to_list()


_READS = r"""
import pyarrow as pa
answers = []
for i, r in enumerate(args["reads"]):
    if "truncate" in r:  # delta-spark's own stats truncation (StatisticsCollection), for the same strings
        stats = getattr(getattr(spark.sparkContext._jvm.org.apache.spark.sql.delta.stats, "StatisticsCollection$"),
                        "MODULE$")
        texts = spark.createDataFrame([(t,) for t in r["truncate"]], "s string")
        mins = [row[0] for row in texts.selectExpr(f"substring(s, 0, {r['prefix']})").collect()]
        answers.append([[low, stats.truncateMaxStringAgg(r["prefix"], t)] for t, low in zip(r["truncate"], mins)])
        continue
    spark.conf.set("spark.sql.session.timeZone", r["tz"])
    spark.conf.set("spark.sql.parquet.enableVectorizedReader", str(r["vectorized"]).lower())
    frame = spark.read.format("delta").option("versionAsOf", str(r["version"])).load(r["root"])
    if "wheres" in r:
        frame.createOrReplaceTempView("pcow_checked")
        query = " UNION ALL ".join(f"SELECT {i} AS f, `{r['key']}` AS k FROM pcow_checked WHERE {w}"
                                   for i, w in enumerate(r["wheres"]))
        answers.append([[row[0], row[1]] for row in spark.sql(query).collect()])
        continue
    out = f"{args['out']}/{i}.arrow"
    batches = frame._collect_as_arrow()
    table = pa.Table.from_batches(batches) if batches else None
    if table is not None:
        with pa.OSFile(out, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    answers.append(out if table is not None else None)
"""
_CHILD = r"""
import json, sys
from partialcow.spark.session import get_or_create_session
args = json.loads(sys.argv[1])
spark = get_or_create_session(table_format="delta", warehouse=args["warehouse"], master="local[1]",
                              delta_jars=args["jars"])
""" + _READS + r"""
spark.stop()
print("RESULT" + json.dumps(answers))
"""


def _read_in_process(spark: Any, reads: list[dict[str, Any]]) -> list[Any]:
    """The child's reads, in the caller's Delta session (its time zone and reader settings restored after)."""
    with tempfile.TemporaryDirectory(prefix="delta-spark-reads-") as folder:
        saved = {k: spark.conf.get(k) for k in ("spark.sql.session.timeZone", "spark.sql.parquet.enableVectorizedReader")}
        scope: dict[str, Any] = {"spark": spark, "args": {"reads": reads, "out": folder}}
        try:
            exec(_READS, scope)  # noqa: S102 - the same code the child runs
        finally:
            for key, value in saved.items():
                spark.conf.set(key, value)
        return _answers(reads, scope["answers"])


def _run_delta_spark(reads: list[dict[str, Any]], jars: list[str]) -> list[Any]:
    with tempfile.TemporaryDirectory(prefix="delta-spark-reads-") as folder:
        args = {"reads": reads, "jars": jars, "warehouse": os.path.join(folder, "wh"), "out": folder}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "adapter"), os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], capture_output=True, text=True,
                              env=env, timeout=900)
        if proc.returncode != 0 or "RESULT" not in proc.stdout:
            causes = [line for line in proc.stderr.splitlines() if "Exception" in line or "Error" in line]
            raise AssertionError("delta-spark reader failed: " + "\n".join(causes[:10]) + "\n" + proc.stderr[-2000:])
        return _answers(reads, json.loads(proc.stdout.split("RESULT", 1)[1]))


def _answers(reads: list[dict[str, Any]], answers: list[Any]) -> list[Any]:
    """The reads' answers as the checks take them: rows as Arrow tables (read from the files the reader left)."""
    out: list[Any] = []
    for read, answer in zip(reads, answers):
        if "wheres" in read or "truncate" in read:
            out.append(answer)
        elif answer is None:
            out.append(pa.table({}))
        else:
            out.append(pa.ipc.open_file(answer).read_all())
    return out


# ------------------------------------------------------------------------------------------------ canonical rows


def _canonical_rows(table: pa.Table, check: DeltaCheck, what: str) -> dict[Any, dict[str, Any]]:
    return canonical_rows(table.to_pylist(), check.schema, check.key, what=what)


def canonical_rows(
    rows: Sequence[Mapping[str, Any]], schema: Mapping[str, Any], key: str, *, what: str = "rows"
) -> dict[Any, dict[str, Any]]:
    """key -> {column: value} in one form whatever the reader: instants in UTC, maps as sorted pairs, NaN as text.

    ``schema`` is a schema in Spark's (= Delta's) JSON form: ``json.loads(df.schema.json())`` or a Delta schema.

    >>> schema = {"fields": [{"name": "id", "type": "long"}, {"name": "m", "type": {"type": "map",
    ...           "keyType": "string", "valueType": "integer"}}]}
    >>> canonical_rows([{"id": 1, "m": [{"key": "b", "value": 2}, {"key": "a", "value": None}]}], schema, "id")
    {1: {'id': 1, 'm': [('a', None), ('b', 2)]}}

    A key given twice is an error (an update that became a second row must not collapse into one).
    """
    fields = {f["name"]: f["type"] for f in schema["fields"]}
    out: dict[Any, dict[str, Any]] = {}
    for row in rows:
        assert row[key] not in out, f"{what}: key {key}={row[key]!r} appears twice"
        out[row[key]] = {name: _canonical(row.get(name), dtype) for name, dtype in fields.items()}
    return out


def _canonical(value: Any, dtype: Any) -> Any:
    if value is None:
        return None
    if isinstance(dtype, dict):
        kind = dtype["type"]
        if kind == "struct":
            return {f["name"]: _canonical(value.get(f["name"]), f["type"]) for f in dtype["fields"]}
        if kind == "array":
            return [_canonical(v, dtype["elementType"]) for v in value]
        if kind == "map":
            pairs = value.items() if isinstance(value, dict) else (
                (p["key"], p["value"]) if isinstance(p, dict) else p for p in value)
            return sorted(((_canonical(k, dtype["keyType"]), _canonical(v, dtype["valueType"])) for k, v in pairs),
                          key=repr)
    if dtype == "timestamp":
        assert value.tzinfo is not None, f"zoned timestamp read without a zone: {value!r}"
        return value.astimezone(UTC)
    if dtype == "timestamp_ntz":
        assert value.tzinfo is None, f"timestamp_ntz read with a zone: {value!r}"
        return value
    if dtype in ("float", "double"):
        return "NaN" if math.isnan(value) else value
    if dtype == "binary":
        return bytes(value)
    if isinstance(dtype, str) and dtype.startswith("decimal"):
        return decimal.Decimal(value)
    return value


# ------------------------------------------------------------------------------------------------ stats vs. files


def _log_files(root: str, version: int) -> dict[str, tuple[dict[str, Any], bool]]:
    """The add actions live at ``version``, replayed from the JSON commits (independent of delta-rs), each with
    whether our committer wrote it (its commit carries ``partialcow.commitId``)."""
    live: dict[str, tuple[dict[str, Any], bool]] = {}
    for v in range(version + 1):
        path = os.path.join(root, "_delta_log", f"{v:020d}.json")
        with open(path, encoding="utf-8") as f:
            actions = [json.loads(line) for line in f if line.strip()]
        ours = any("partialcow.commitId" in a.get("commitInfo", {})  # delta-rs commits: a commitInfo field
                   or "partialcow.commitId" in (a.get("commitInfo", {}).get("tags") or {})  # delta-spark: a tag
                   for a in actions)
        for action in actions:
            if "add" in action:
                live[unquote(action["add"]["path"])] = (action["add"], ours)
            elif "remove" in action:
                live.pop(unquote(action["remove"]["path"]), None)
    return live


def _log_schema(root: str, version: int | None = None) -> dict[str, Any]:
    """The table's schema at ``version`` (default: latest) from its JSON log (delta-rs cannot open every table)."""
    schema = None
    last = version if version is not None else max(
        int(n.split(".")[0]) for n in os.listdir(os.path.join(root, "_delta_log")) if n.endswith(".json"))
    for v in range(last + 1):
        for action in _log_actions(root, v):
            if "metaData" in action:
                schema = json.loads(action["metaData"]["schemaString"])
    assert schema is not None, f"{root}: no metaData action up to version {last}"
    return schema


def _log_actions(root: str, version: int) -> list[dict[str, Any]]:
    with open(os.path.join(root, "_delta_log", f"{version:020d}.json"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _has_deletion_vectors(root: str, version: int) -> bool:
    """Whether the protocol at ``version`` lists deletion vectors (delta-rs and polars 1.x then refuse the table)."""
    features: list[str] = []
    for v in range(version + 1):
        for action in _log_actions(root, v):
            if "protocol" in action:
                features = action["protocol"].get("readerFeatures") or []
    return "deletionVectors" in features


def _check_stats(root: str, version: int) -> None:
    schema = _log_schema(root, version)
    for rel, (add, ours) in _log_files(root, version).items():
        if not ours or not add.get("stats"):
            # Other writers' stats are theirs to answer for: delta-rs 1.6 writes decimal bounds as floats, which
            # for decimal(38, 10) are not even bounds (-9.999999999999997E+27 as the min of -9999...9999.0000000070)
            continue
        stats = json.loads(add["stats"], parse_float=decimal.Decimal)
        data = pq.read_table(os.path.join(root, rel))
        where = f"stats of {rel} in {root} at version {version}"
        assert stats["numRecords"] == data.num_rows, f"{where}: numRecords {stats['numRecords']} != {data.num_rows}"
        rows = data.to_pylist()
        for f in schema["fields"]:
            values = [r.get(f["name"]) for r in rows]
            _check_column_stats(f["name"], f["type"], values, stats, (f["name"],), where, exact=ours)


def _dig(doc: Mapping[str, Any], path: Sequence[str]) -> Any:
    for part in path:
        if not isinstance(doc, Mapping) or part not in doc:
            return None
        doc = doc[part]
    return doc


def _check_column_stats(name: str, dtype: Any, values: list[Any], stats: Mapping[str, Any], path: tuple[str, ...],
                        where: str, *, exact: bool) -> None:
    """``exact``: numbers, dates and decimals must be the true bounds, not merely bounds."""
    if isinstance(dtype, dict) and dtype["type"] == "struct":
        for f in dtype["fields"]:
            child = [None if v is None else v.get(f["name"]) for v in values]
            _check_column_stats(f["name"], f["type"], child, stats, (*path, f["name"]), where, exact=exact)
        return
    label = ".".join(path)
    nulls = _dig(stats.get("nullCount", {}), path)
    if nulls is not None and not isinstance(nulls, Mapping):
        assert nulls == sum(v is None for v in values), f"{where}: nullCount of {label} {nulls}"
    present = [v for v in values if v is not None]
    low, high = _dig(stats.get("minValues", {}), path), _dig(stats.get("maxValues", {}), path)
    if isinstance(dtype, dict) or not present or dtype in ("binary", "boolean"):
        return
    if low is not None:
        _check_bound(dtype, low, min(present, key=_order_key(dtype)), upper=False, exact=exact,
                     what=f"{where}: min of {label}")
    if high is not None:
        _check_bound(dtype, high, max(present, key=_order_key(dtype)), upper=True, exact=exact,
                     what=f"{where}: max of {label}")


def _order_key(dtype: str) -> Any:
    if dtype == "string":
        return lambda v: v.encode("utf-8")  # Delta's and Spark's string order: UTF-8 bytes
    if dtype in ("float", "double"):
        return lambda v: (math.isnan(v), v)
    return lambda v: v


def _check_bound(dtype: str, stat: Any, true: Any, *, upper: bool, exact: bool, what: str) -> None:
    if dtype in ("timestamp", "timestamp_ntz"):
        parsed = dt.datetime.fromisoformat(str(stat).replace("Z", "+00:00"))
        if dtype == "timestamp":
            assert parsed.tzinfo is not None, f"{what}: {stat!r} has no zone"
            true = true.astimezone(UTC)
        else:
            assert parsed.tzinfo is None, f"{what}: {stat!r} has a zone on a timestamp_ntz column"
        floor = true.replace(microsecond=true.microsecond // 1000 * 1000)
        # Delta keeps milliseconds: the min truncated down; the max truncated down (Delta's readers add 1 ms) or
        # rounded up (a bound as it stands)
        allowed = {floor} if not upper else {floor, floor + _ONE_MS if floor != true else floor}
        assert parsed in allowed, f"{what}: {stat!r} for {true!r}"
    elif dtype == "string":
        a, b = str(stat).encode(), true.encode()
        if upper:
            assert a >= b, f"{what}: {stat!r} below {true!r}"
            assert true.startswith(stat[:-1]) or stat == true, f"{what}: {stat!r} is not a truncation of {true!r}"
        else:
            assert a <= b and true.startswith(stat), f"{what}: {stat!r} is not a prefix of {true!r}"
    else:
        if dtype == "date":
            bound: Any = dt.date.fromisoformat(str(stat))
        elif dtype.startswith("decimal"):
            bound = decimal.Decimal(str(stat))
        elif dtype in ("float", "double"):
            bound, exact = float(stat), False  # a float bound may be rounded outwards
        else:
            bound = stat
        if exact:
            assert bound == true, f"{what}: {stat!r} for {true!r}"
        else:
            assert (bound >= true) if upper else (bound <= true), f"{what}: {stat!r} does not bound {true!r}"


# ------------------------------------------------------------------------------------------------ filtered reads

_FILTERED_TYPES = ("byte", "short", "integer", "long", "date", "timestamp", "timestamp_ntz", "string")


def _type_of(check: DeltaCheck, column: str) -> Any:
    return next(f["type"] for f in check.schema["fields"] if f["name"] == column)


def boundary_values(
    schema: Mapping[str, Any], rows: Mapping[Any, Mapping[str, Any]]
) -> list[tuple[str, Any, set[Any]]]:
    """(column, value, keys holding it) for the smallest and largest value of each filterable top-level column of
    canonical ``rows`` (see :func:`canonical_rows`): the values a reader skipping files by their stats may lose."""
    out = []
    for f in schema["fields"]:
        dtype = f["type"]
        if not (isinstance(dtype, str) and (dtype in _FILTERED_TYPES or dtype.startswith("decimal"))):
            continue
        present = [r[f["name"]] for r in rows.values() if r[f["name"]] is not None]
        for value in {min(present, key=_order_key(dtype)), max(present, key=_order_key(dtype))} if present else ():
            out.append((f["name"], value, {k for k, r in rows.items() if r[f["name"]] == value}))
    return out


def sql_literal(value: Any, dtype: str) -> str:
    """A Spark SQL literal of ``value`` as a column of Delta/Spark type ``dtype``, whatever the session time zone."""
    if dtype == "string":
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if dtype == "date":
        return f"DATE'{value.isoformat()}'"
    if dtype == "timestamp":
        return f"TIMESTAMP'{value.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'"
    if dtype == "timestamp_ntz":
        return f"TIMESTAMP_NTZ'{value.strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    if dtype.startswith("decimal"):
        return f"CAST('{value}' AS {dtype.upper()})"
    return f"CAST({value} AS {dtype.upper()})"
