"""Branch metadata: one row per branch in the Iceberg table ``<target schema>.partialcow_branches``.

Columns: ``name``, ``parent`` (``main`` or another branch), ``created_at``, ``merged_at`` (last merge into the
parent) and ``base_snapshots``: ``schema.table -> snapshot id`` of every parent-chain table (root tables, ancestor
overlays, parent branches' images) when the branch was created or last merged; ``-1`` means the table existed
without a snapshot. These snapshots are the merge base of the three-way merge (Iceberg time travel, ``VERSION AS
OF``); ``image_mode``: how the branch's read images are built (``copy-on-write`` or ``merge-on-read``, see
``partialcow.branch.image``); ``schemas``: the base schemas whose overlay schemas are the branch's
(``BranchRecord.base_schemas``), so that branches of the same name in other meta schemas (other targets on the same
metastore) are never touched.
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from partialcow.branch.catalog import load_iceberg, table_exists
from partialcow.branch.naming import MAIN, METADATA_TABLE, qualified, quote, validate_branch_name
from partialcow.branch.types import COPY_ON_WRITE, BranchRecord
from partialcow.exceptions import BranchError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BranchRecord", "BranchStore"]

# records table uuid -> (snapshot id, the rows it holds), the tables read last (see BranchStore._read)
_READ: dict[str, tuple[int, list[dict[str, Any]]]] = {}
_READ_TABLES = 32
_READ_LOCK = threading.Lock()


class BranchStore:
    """Reads and writes branch records (one small Iceberg table per target schema).

    A store serves one branch operation: its first read is kept for the operation's later reads (an operation asks
    for the records, the chain and the children several times, each a Spark query of the table) until the store
    writes a record itself. So an operation works from one view of the branches.

    >>> store = BranchStore(spark, meta_schema="shop")   # doctest: +SKIP
    >>> store.chain("feature")                           # doctest: +SKIP
    ['feature', 'dev', 'main']
    """

    def __init__(self, spark: SparkSession, *, meta_schema: str) -> None:
        self.spark = spark
        self.meta_schema = meta_schema
        self.table = qualified(meta_schema, METADATA_TABLE)
        self._records: list[BranchRecord] | None = None

    def _exists(self) -> bool:
        return table_exists(self.spark, self.meta_schema, METADATA_TABLE)

    def _ensure(self) -> None:
        self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote(self.meta_schema)}")
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.table} (name STRING, parent STRING, created_at TIMESTAMP, "
            "merged_at TIMESTAMP, base_snapshots MAP<STRING, BIGINT>, image_mode STRING, schemas ARRAY<STRING>) "
            "USING iceberg"
        )
        columns = self.spark.table(self.table).columns
        if "image_mode" not in columns:  # written before image modes existed
            self.spark.sql(f"ALTER TABLE {self.table} ADD COLUMNS (image_mode STRING)")
        if "schemas" not in columns:  # written before branches recorded their schemas: NULL reads as unknown
            self.spark.sql(f"ALTER TABLE {self.table} ADD COLUMNS (schemas ARRAY<STRING>)")

    def all(self) -> list[BranchRecord]:
        if self._records is None:
            self._records = self._read()
        return list(self._records)

    def _read(self) -> list[BranchRecord]:
        """The records as the table's current snapshot holds them. Rows read once per snapshot in this process
        (a snapshot's rows never change; a table dropped and created again has another uuid): every branch
        operation opens a store and reads it, and a look at the table's metadata costs a fraction of a query."""
        loaded = load_iceberg(self.spark, self.meta_schema, METADATA_TABLE)
        if loaded is None:
            return []  # no records table (this module only ever creates it as an Iceberg table)
        snapshot = loaded.currentSnapshot()
        if snapshot is None:
            return []
        table_uuid, snapshot_id = str(loaded.uuid()), int(snapshot.snapshotId())
        with _READ_LOCK:
            seen, rows = _READ.get(table_uuid, (None, None))
        if seen != snapshot_id or rows is None:
            # that snapshot, not the current one: another writer may commit between the look and the query
            rows = [r.asDict() for r in self.spark.sql(
                f"SELECT * FROM {self.table} VERSION AS OF {snapshot_id} ORDER BY name").collect()]
            with _READ_LOCK:
                _READ.pop(table_uuid, None)
                _READ[table_uuid] = (snapshot_id, rows)
                while len(_READ) > _READ_TABLES:  # the oldest read first
                    del _READ[next(iter(_READ))]
        return [
            BranchRecord(
                name=r["name"],
                parent=r["parent"],
                created_at=r["created_at"],
                base_snapshots=dict(r["base_snapshots"] or {}),
                merged_at=r["merged_at"],
                image_mode=r.get("image_mode") or COPY_ON_WRITE,
                schemas=None if r.get("schemas") is None else tuple(r["schemas"]),
            )
            for r in rows
        ]

    def get(self, name: str) -> BranchRecord | None:
        for record in self.all():
            if record.name == name:
                return record
        return None

    def require(self, name: str) -> BranchRecord:
        validate_branch_name(name)
        record = self.get(name)
        if record is None:
            raise BranchError(
                f"branch {name!r} does not exist in {self.meta_schema}.{METADATA_TABLE}: create it with "
                f"`dbt run-operation branch_create --args '{{name: {name}}}'`"
            )
        return record

    def chain(self, name: str, records: Mapping[str, BranchRecord] | None = None) -> list[str]:
        """``name``, its parent, ... up to ``main`` (``['main']`` for main itself); ``records``: all branches by name,
        when the caller read them already."""
        records = {r.name: r for r in self.all()} if records is None else records
        chain = [name]
        while chain[-1] != MAIN:
            record = records.get(chain[-1])
            if record is None:
                self.require(chain[-1])  # raises the "does not exist" error
            assert record is not None
            if record.parent in chain:
                raise BranchError(f"branch {name!r}: its parent chain loops through {record.parent!r}")
            chain.append(record.parent)
        return chain

    def children(self, name: str) -> list[str]:
        return [r.name for r in self.all() if r.parent == name]

    def base_schemas(self, name: str) -> tuple[str, ...]:
        """The base schemas whose overlay schemas belong to branch ``name`` (see ``BranchRecord.base_schemas``)."""
        return self.require(name).base_schemas(self.meta_schema)

    def cover(self, name: str, base_schema: str) -> None:
        """Record that branch ``name`` has a model in ``base_schema`` (a build there), unless it is covered already.

        Only the first build of a branch in a schema its record does not cover writes (one ``UPDATE``). Builds run
        in dbt's threads, so two may add schemas at once: :meth:`put` adds to the schemas the table holds at commit
        time, and a commit that loses the race to another is tried again on a fresh read.

        Raises :class:`BranchError` when another operation dropped the branch meanwhile (the ``UPDATE`` then changes
        no row): the build's objects in the overlay schema belong to no branch, and a branch created later under
        the name would read them (:func:`~partialcow.branch.lifecycle.create_branch` refuses while they are there).
        """
        for attempt in range(3):
            record = self.require(name)
            covered = record.base_schemas(self.meta_schema)
            if base_schema.lower() in covered:
                return
            try:
                self.put(dataclasses.replace(record, schemas=tuple(sorted({*covered, base_schema.lower()}))))
            except Exception:  # a concurrent commit to the records table (Iceberg validation): read again, retry
                self._records = None
                if attempt == 2:
                    raise
                continue
            if self.get(name) is None:  # one read of the table: only a branch's first build in a schema gets here
                raise BranchError(
                    f"branch {name!r} was dropped while a model was being built on it in schema {base_schema!r}: "
                    "what the build wrote there belongs to no branch; remove it with "
                    f"`dbt run-operation branch_drop --args '{{name: {name}}}'`"
                )
            return

    def _frame(self, record: BranchRecord) -> DataFrame:
        from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType, TimestampType

        schema = StructType(
            [
                StructField("name", StringType()),
                StructField("parent", StringType()),
                StructField("created_at", TimestampType()),
                StructField("merged_at", TimestampType()),
                StructField("base_snapshots", MapType(StringType(), LongType())),
                StructField("image_mode", StringType()),
                StructField("schemas", ArrayType(StringType())),
            ]
        )
        schemas = None if record.schemas is None else list(record.schemas)
        row = (record.name, record.parent, record.created_at, record.merged_at, dict(record.base_snapshots),
               record.image_mode, schemas)
        return self.spark.createDataFrame([row], schema)

    def insert(self, record: BranchRecord) -> None:
        """Add the record of a new branch (one Iceberg append; the caller checked the name is free)."""
        self._records = None
        self._ensure()
        self._frame(record).writeTo(self.table).append()  # an append: no MERGE job, so branch_create stays quick

    def put(self, record: BranchRecord) -> None:
        """Insert or replace ``record`` (one Iceberg commit). Its ``schemas`` are added to those the stored record
        has (a branch's schemas only grow): a caller's record read before another writer added one loses nothing.

        A record this store read is replaced by an ``UPDATE`` of its row, which takes half the time of a ``MERGE``
        (no join with a source; ``bench/README.md``, "Measurements behind code choices"): a branch merge writes its
        record once per model. A branch dropped meanwhile then stays dropped, where a ``MERGE`` would insert it
        again.
        """
        known = self.get(record.name) is not None
        self._records = None
        self._ensure()
        if known:
            self.spark.sql(
                f"UPDATE {self.table} SET parent = {_string_literal(record.parent)}, "
                f"created_at = {_timestamp_literal(record.created_at)}, "
                f"merged_at = {_timestamp_literal(record.merged_at)}, "
                f"base_snapshots = {_map_literal(record.base_snapshots)}, "
                f"image_mode = {_string_literal(record.image_mode)}, "
                f"schemas = {_schemas_union('schemas', _array_literal(record.schemas))} "
                f"WHERE name = {_string_literal(record.name)}"
            )
            return
        view = f"_pcow_branch_record_{uuid.uuid4().hex}"  # dbt runs models in threads: no shared temp names
        self._frame(record).createOrReplaceTempView(view)
        schemas = _schemas_union("t.schemas", "s.schemas")
        try:
            self.spark.sql(
                f"MERGE INTO {self.table} t USING {view} s ON t.name = s.name WHEN MATCHED THEN UPDATE SET "
                "t.parent = s.parent, t.created_at = s.created_at, t.merged_at = s.merged_at, "
                f"t.base_snapshots = s.base_snapshots, t.image_mode = s.image_mode, t.schemas = {schemas} "
                "WHEN NOT MATCHED THEN INSERT *"
            )
        finally:
            self.spark.catalog.dropTempView(view)

    def delete(self, name: str) -> None:
        self._records = None
        if self._exists():
            self.spark.sql(f"DELETE FROM {self.table} WHERE name = '{validate_branch_name(name)}'")


def _schemas_union(stored: str, new: str) -> str:
    """The schemas a record holds after a write: the stored ones and the new ones. NULL (a record from before
    schemas were recorded) stays NULL only if both sides are: see ``BranchRecord.base_schemas``."""
    return (f"CASE WHEN {stored} IS NULL THEN {new} WHEN {new} IS NULL THEN {stored} "
            f"ELSE array_sort(array_distinct(concat({stored}, {new}))) END")


def _string_literal(value: str | None) -> str:
    r"""A Spark SQL string literal. Text holding a quote or a backslash is spelled in hex: how Spark reads
    backslashes depends on the session's ``spark.sql.parser.escapedStringLiterals``.

    >>> print(_string_literal("shop.orders"), _string_literal("it's"))
    'shop.orders' decode(unhex('69742773'), 'UTF-8')
    """
    if value is None:
        return "CAST(NULL AS STRING)"
    if "'" in value or "\\" in value:
        return f"decode(unhex('{value.encode().hex()}'), 'UTF-8')"
    return f"'{value}'"


def _timestamp_literal(value: datetime.datetime | None) -> str:
    """The instant Spark stores for ``value`` when a DataFrame holds it (a naive value read in the process's time
    zone), as microseconds: a text literal would be read in the session's time zone instead."""
    from pyspark.sql.types import TimestampType

    if value is None:
        return "CAST(NULL AS TIMESTAMP)"
    return f"timestamp_micros({int(TimestampType().toInternal(value))})"


def _map_literal(value: Mapping[str, int]) -> str:
    keys = ", ".join(_string_literal(k) for k in value)
    values = ", ".join(f"{int(v)}L" for v in value.values())
    return f"map_from_arrays(CAST(array({keys}) AS ARRAY<STRING>), CAST(array({values}) AS ARRAY<BIGINT>))"


def _array_literal(value: tuple[str, ...] | None) -> str:
    if value is None:
        return "CAST(NULL AS ARRAY<STRING>)"
    return f"CAST(array({', '.join(_string_literal(v) for v in value)}) AS ARRAY<STRING>)"
