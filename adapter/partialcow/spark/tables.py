"""A lakehouse table as the write path sees it: its format's ``Table`` (live files, key positions, commits), where new
files go, and what the pipeline asks of its schema.

One small interface over both formats, chosen once from the table format:

- Iceberg: a table name in the session catalog, through Iceberg's Java API (``IcebergTable``).
- Delta in a session that has Delta (``table_format: delta``): a catalog name or a table root folder; read and
  committed through delta-spark (``DeltaSparkTable``: Delta's own transactions, deletion
  vectors honoured).
- Delta without delta-spark: a table root folder; commits through delta-rs (``DeltaRsTable``), read by Spark as
  plain Parquet.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from partialcow.exceptions import ConfigurationError, TableFormatMismatchError, UnsupportedTableFeatureError
from partialcow.formats import TABLE_FORMATS, TableFormat
from partialcow.table import paths as _paths
from partialcow.table.base import Table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from partialcow.spark.journal import WriteLease

__all__ = ["LakehouseTable", "delta_root", "delta_spark_schema", "iceberg_file_schema", "local_path", "open_table",
           "require_session_format", "table_root", "uri_local_path"]

def local_path(location: str) -> str:
    """The local file system path of an Iceberg/Hadoop location (``file:`` location or plain path), as spelled: not
    percent-decoded, since Iceberg writes locations unescaped (see ``partialcow.table.paths``); a data file path that
    any table format gives (Delta's are already local paths). The embedded warehouse is local.

    >>> local_path("file:/tmp/t/data/ts=2024-01-01T10%3A00%3A00/a.parquet"), local_path("/tmp/z")
    ('/tmp/t/data/ts=2024-01-01T10%3A00%3A00/a.parquet', '/tmp/z')
    """
    return _local_or_refuse(location, _paths.local_path(location))


def uri_local_path(uri: str) -> str:
    """The local file system path of a percent-encoded ``file:`` URI (a ``java.net.URI``'s, delta-rs's table root, a
    Delta log's absolute path), decoded; a plain path unchanged.

    >>> uri_local_path("file:///tmp/x%20y%23z"), uri_local_path("file:/tmp/a%3Ab"), uri_local_path("/tmp/a%20b")
    ('/tmp/x y#z', '/tmp/a:b', '/tmp/a%20b')
    """
    return _local_or_refuse(uri, _paths.uri_local_path(uri))


def _local_or_refuse(text: str, local: str | None) -> str:
    if local is not None:
        return local
    if "://" not in text and not text.lower().startswith("file:"):
        return text  # a relative path
    scheme = text.split(":", 1)[0]
    where = f"the {scheme!r} scheme is" if scheme.lower() != "file" else "a file URI naming another host is"
    raise ConfigurationError(
        f"{text}: partial copy-on-write rewrites files on a local or mounted file system; {where} not supported yet"
    )


@dataclass
class LakehouseTable:
    """Everything the change pipeline needs about one table."""

    spark: SparkSession
    name: str
    table_format: TableFormat
    format_table: Table  # the table as its format reads and commits it (see partialcow.table)
    data_dir: str  # local folder for new data files
    delta_spark: bool = False  # a Delta table read and committed through delta-spark

    @property
    def root(self) -> str:
        """The table's folder as a local path."""
        return table_root(self.format_table.location, self.table_format)

    @property
    def sql_name(self) -> str:
        """How Spark SQL names the table: the quoted catalog name, or ``delta.`<root>``` for a Delta table."""
        from partialcow.table.base import quote_identifier

        if self.table_format == "iceberg":
            return quote_identifier(self.name)
        return "delta.`" + self.root.replace("`", "``") + "`"

    def read(self, version: int | None = None) -> Any:
        """The table (at ``version``: a snapshot id for Iceberg, a version for Delta) as a DataFrame."""
        if self.table_format == "iceberg":
            if version is None:
                return self.spark.table(self.sql_name)
            return self.spark.sql(f"SELECT * FROM {self.sql_name} VERSION AS OF {int(version)}")
        if not self.delta_spark:
            raise ConfigurationError(f"Delta table {self.name}: reading it through Spark needs a Delta session")
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", str(int(version)))
        return reader.load(self.root)

    def spark_schema(self) -> Any:
        """The table's schema as Spark sees it (the type every batch column is cast to)."""
        if self.table_format == "iceberg" or self.delta_spark:
            return self.read().schema
        from deltalake import DeltaTable

        return delta_spark_schema(DeltaTable(self.format_table.location).schema().to_json(), table=self.name)

    def check_supported(self, *, removing: bool = True, partitioned_ok: bool = True) -> None:
        """Refuse, before anything is written, a table whose features this write path cannot honour (the commit
        checks again); ``partitioned_ok=False`` for a batch of changes (Delta: see ``unsupported_features``)."""
        check = getattr(self.format_table, "check_supported", None)
        if check is not None:
            check(removing=removing, partitioned_ok=partitioned_ok)

    def parquet_options(self) -> dict[str, Any]:
        """pyarrow options the table asks of new data files (Iceberg: its ``write.parquet.compression-codec`` and
        ``-level`` now); ``{}`` leaves ours. Files rewritten in place keep their own codec, chunk by chunk."""
        options = getattr(self.format_table, "parquet_writer_options", None)
        return options() if options is not None else {}

    def deletion_vectors(self, version: int) -> dict[str, dict[str, Any]]:
        """Local path -> deletion vector descriptor of the files live at ``version`` that have one (Delta)."""
        vectors = getattr(self.format_table, "deletion_vectors", None)
        return vectors(version) if self.delta_spark and vectors is not None and version >= 0 else {}

    def write_lease(self) -> WriteLease:
        """A lease for one write of this table (see ``partialcow.spark.journal``): enter it before writing."""
        from partialcow.spark.journal import WriteLease

        return WriteLease(self.root, [self.data_dir], referenced=self.referenced_files)

    def referenced_files(self) -> set[str]:
        """Local paths of every data file a snapshot of the table references (Iceberg: every snapshot, branch and
        tag; Delta: every version whose log entry or checkpoint is still there)."""
        if self.table_format == "iceberg":
            return iceberg_referenced(self.spark, self.name)
        return delta_referenced(self.root)

    def file_schema(self, spark_schema: Any) -> pa.Schema:
        """The Arrow schema new data files are written with (Iceberg: with the table's Parquet field ids)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        if self.table_format != "iceberg":
            return to_arrow_schema(spark_schema)
        return iceberg_file_schema(self.spark, self.name, spark_schema)


def table_root(location: str, table_format: TableFormat) -> str:
    """The local folder of a table whose format spells its root ``location``: Iceberg's is a Hadoop location taken as
    it stands; a Delta root is a local path or, from delta-rs, a percent-encoded URI.

    >>> table_root("file:/wh/a%20b", "iceberg"), table_root("file:///wh/a%20b", "delta")
    ('/wh/a%20b', '/wh/a b')
    """
    return local_path(location) if table_format == "iceberg" else uri_local_path(location)


def iceberg_file_schema(spark: SparkSession, name: str, spark_schema: Any = None) -> pa.Schema:
    """The Arrow schema of Iceberg table ``name``'s new data files, with its Parquet field ids, for the columns of
    ``spark_schema`` (default: the table's)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(spark.table(name).schema if spark_schema is None else spark_schema)
    columns = {f["name"]: f for f in _iceberg_schema(spark, name)["fields"]}
    fields = []
    for field in schema:
        if field.name not in columns:
            raise ConfigurationError(f"Iceberg table {name} has no column {field.name!r}")
        fields.append(with_iceberg_field_ids(field, columns[field.name]["id"], columns[field.name]["type"]))
    return pa.schema(fields)


def iceberg_referenced(spark: SparkSession, name: str, *, quoted: bool = False) -> set[str]:
    """Local paths of every data and delete file any snapshot, branch or tag of Iceberg table ``name`` references
    (``quoted``: ``name`` is already SQL's spelling)."""
    from partialcow.table.base import quote_identifier

    rows = spark.sql(f"SELECT file_path FROM {name if quoted else quote_identifier(name)}.all_files").collect()
    return {local_path(r[0]) for r in rows}


def delta_referenced(root: str) -> set[str]:
    """Every ``add`` path in the Delta log's JSON entries, checkpoints and checkpoint sidecars under ``root`` (as
    local paths).

    A V2 checkpoint (``delta.checkpointPolicy=v2``) lists its files in sidecars under ``_delta_log/_sidecars``, and
    its top-level file, JSON or Parquet, may hold no ``add`` at all. Every sidecar there is read, not only those the
    newest checkpoint names: a file listed by any of them is kept, which is the safe side for a caller deciding
    what to delete.
    """
    log = os.path.join(root, "_delta_log")
    paths: set[str] = set()
    for name in os.listdir(log) if os.path.isdir(log) else []:
        full = os.path.join(log, name)
        if name.endswith(".json"):
            with open(full, encoding="utf-8") as handle:
                for line in handle:
                    add = json.loads(line).get("add") if line.strip() else None
                    if add:
                        paths.add(add["path"])
        elif ".checkpoint" in name and name.endswith(".parquet"):
            paths.update(_checkpoint_adds(full))
    sidecars = os.path.join(log, "_sidecars")
    for name in os.listdir(sidecars) if os.path.isdir(sidecars) else []:
        if name.endswith(".parquet") and not name.startswith("."):
            paths.update(_checkpoint_adds(os.path.join(sidecars, name)))
    # the log's paths are URIs: percent-encoded, relative to the root or absolute
    return {uri_local_path(p) if "://" in p or p.startswith("file:") else os.path.join(root, unquote(p)) for p in paths}


def _checkpoint_adds(path: str) -> list[str]:
    """The ``add`` paths of one checkpoint part or sidecar (none if it has no ``add`` column)."""
    import pyarrow.parquet as pq

    if "add" not in pq.read_schema(path).names:
        return []
    adds = pq.read_table(path, columns=["add"]).column("add").to_pylist()
    return [a["path"] for a in adds if a]


def delta_spark_schema(schema_json: str, *, table: str) -> Any:
    """A Delta table's schema (its log's ``schemaString``) as the Spark ``StructType`` the change pipeline casts to.

    Delta's schema serialisation is Spark's, so it is parsed as such: ``timestamp_ntz`` stays ``TimestampNTZType``
    (a zoned ``TimestampType`` would shift wall-clock values by the session time zone on their way to the file),
    and decimals, nested types and nullability come through unchanged. A type this Spark cannot represent is
    refused by name.

    >>> delta_spark_schema('{"type":"struct","fields":[{"name":"t","type":"timestamp_ntz","nullable":true,'
    ...                    '"metadata":{}}]}', table="t").simpleString()
    'struct<t:timestamp_ntz>'
    """
    from pyspark.sql.types import StructType

    doc = json.loads(schema_json)
    try:
        return StructType.fromJson(doc)
    except Exception as exc:
        raise UnsupportedTableFeatureError(
            f"Delta table {table} has a column type Spark {_spark_version()} cannot represent ({exc}); "
            "partial copy-on-write needs every column's type in Spark"
        ) from exc


def _spark_version() -> str:
    import pyspark

    return pyspark.__version__


def _iceberg_schema(spark: SparkSession, name: str) -> dict[str, Any]:
    """The table's Iceberg schema as Iceberg's JSON (field ids of nested fields included), in one py4j call."""
    from partialcow.table.java import jvm, load_iceberg_table

    table = load_iceberg_table(spark, name)
    parsed: dict[str, Any] = json.loads(str(jvm(spark).org.apache.iceberg.SchemaParser.toJson(table.schema())))
    return parsed


def with_iceberg_field_ids(field: pa.Field, field_id: int, iceberg_type: Any) -> pa.Field:
    """``field`` with the Parquet field ids of Iceberg column ``field_id`` of type ``iceberg_type`` (Iceberg's schema
    JSON), nested fields included: Iceberg resolves every field by id, and reads a struct member, list element or
    map key/value without one as missing (null), or fails in its vectorized reader.

    >>> t = {"type": "list", "element-id": 7, "element": "long", "element-required": False}
    >>> f = with_iceberg_field_ids(pa.field("xs", pa.list_(pa.int64())), 3, t)
    >>> f.metadata[b"PARQUET:field_id"], f.type.value_field.metadata[b"PARQUET:field_id"]
    (b'3', b'7')
    """
    return field.with_type(_typed_ids(field.type, iceberg_type, field.name)).with_metadata(
        {**(field.metadata or {}), b"PARQUET:field_id": str(field_id).encode()}
    )


def _typed_ids(arrow_type: pa.DataType, iceberg_type: Any, name: str) -> pa.DataType:
    if not isinstance(iceberg_type, dict):
        return arrow_type
    kind = iceberg_type.get("type")
    if kind == "struct" and pa.types.is_struct(arrow_type):
        members = {f["name"]: f for f in iceberg_type["fields"]}
        children = []
        for child in (arrow_type.field(i) for i in range(arrow_type.num_fields)):
            if child.name not in members:
                raise ConfigurationError(f"Iceberg column {name} has no field {child.name!r}")
            member = members[child.name]
            children.append(with_iceberg_field_ids(child, member["id"], member["type"]))
        return pa.struct(children)
    if kind == "list" and pa.types.is_list(arrow_type):
        element = with_iceberg_field_ids(arrow_type.value_field, iceberg_type["element-id"], iceberg_type["element"])
        return pa.list_(element)
    if kind == "map" and pa.types.is_map(arrow_type):
        key = with_iceberg_field_ids(arrow_type.key_field, iceberg_type["key-id"], iceberg_type["key"])
        value = with_iceberg_field_ids(arrow_type.item_field, iceberg_type["value-id"], iceberg_type["value"])
        return pa.map_(key, value)
    raise ConfigurationError(f"Iceberg column {name} is a {kind}, but the batch gives {arrow_type}")


_HIVE_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def check_table_name(spark: SparkSession, name: str, *, model: str) -> None:
    """Refuse a table name the session's Hive metastore cannot hold, before anything is written.

    Hive 2.3 accepts letters, digits and underscores; other characters fail deep inside a commit (a quote even breaks
    its lock queries). Catalogs other than Hive (REST, JDBC, ...) keep their own rules.
    """
    if spark.conf.get("spark.sql.catalog.spark_catalog.type", "") != "hive":
        return
    parts = name.split(".")
    bad = [p for p in parts if not _HIVE_NAME.match(p)]
    if bad:
        raise ConfigurationError(
            f"model {model}: {name!r} is not a valid table name for the Hive metastore ({bad[0]!r}: letters, digits "
            "and underscores only): rename the model or set its alias"
        )


def require_session_format(spark: SparkSession, table_format: str, *, what: str) -> None:
    """Refuse a table format the session's catalog does not hold (one session catalog holds one table format).

    Creating tables needs it; so does writing a catalog table of the other format, which this session's catalog
    cannot even load.
    """
    from partialcow.spark.session import session_table_format

    running = session_table_format(spark)
    if running is None or running == table_format:
        return
    raise ConfigurationError(
        f"{what}: a {table_format} table needs a Spark session whose catalog holds {table_format} tables, and this "
        f"session's spark_catalog holds {running} tables (one session catalog holds one table format). Set the "
        f"profile's table_format to {table_format}" + (" with delta_jars" if table_format == "delta" else "")
        + ", or build the model with file_format='" + running + "'"
    )


def _is_path(name: str) -> bool:
    return name.startswith("/") or name.startswith("file:") or "://" in name or os.sep in name


def delta_root(spark: SparkSession, name: str) -> str:
    """The root folder of Delta table ``name`` (a catalog name, or already a path).

    Read from the catalog entry: ``DESCRIBE DETAIL`` would also compute the table's size and file count from its
    log, a Spark job that a process's first Delta statement pays for in full.
    """
    if _is_path(name):
        # spelled as delta-rs reads it (a file: URI is percent-encoded); absolute, as the paths recovery compares
        # with it are (a relative root made a dead write's committed files look unreferenced)
        return os.path.abspath(uri_local_path(name))
    session = spark._jsparkSession
    try:
        ident = session.sessionState().sqlParser().parseTableIdentifier(name)
        entry = session.sessionState().catalog().getTableMetadata(ident)
    except Exception as exc:  # noqa: BLE001 - a py4j error wrapping NoSuchTableException or a parse error
        first = str(getattr(exc, "java_exception", exc)).splitlines()[0]
        raise ConfigurationError(f"cannot find Delta table {name}: {first}") from None
    provider = entry.provider()
    found = str(provider.get()) if provider.isDefined() else None
    if (found or "").lower() != "delta":
        raise TableFormatMismatchError(f"table {name} is not a Delta table (format {found!r}); use "
                                       "table_format='iceberg' or build it as a Delta table")
    return uri_local_path(str(entry.location().toString()))  # a java.net.URI: percent-encoded


def open_table(spark: SparkSession, name: str, *, table_format: TableFormat) -> LakehouseTable:
    """Open ``name`` for partial copy-on-write: Iceberg ``schema.table``; Delta ``schema.table`` (in a session with
    Delta) or the table's root folder.

    >>> open_table(None, "t", table_format="hudi")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    partialcow.exceptions.ConfigurationError: table t: table format 'hudi' is not supported ...
    """
    from partialcow.table.java import bind_to_current_thread

    if table_format not in TABLE_FORMATS:
        raise ConfigurationError(
            f"table {name}: table format {table_format!r} is not supported ({' or '.join(TABLE_FORMATS)})")
    if table_format == "iceberg" or not _is_path(name):
        require_session_format(spark, table_format, what=f"table {name}")
    bind_to_current_thread(spark)
    if table_format == "iceberg":
        from partialcow.table.iceberg import IcebergTable

        iceberg_table = IcebergTable(spark, name)
        format_table: Table = iceberg_table
        data_dir = table_root(iceberg_table.data_folder(), table_format)
    else:
        from partialcow.table.delta.spark_log import has_delta

        if has_delta(spark):
            from partialcow.table.delta.spark_table import DeltaSparkTable

            root = delta_root(spark, name)
            return LakehouseTable(spark=spark, name=name, table_format=table_format,
                                  format_table=DeltaSparkTable(spark, root, name=name), data_dir=root, delta_spark=True)
        if not _is_path(name):
            raise ConfigurationError(
                f"Delta table {name}: a catalog name needs a Spark session with Delta (profile table_format: delta "
                "and delta_jars); without one, pass the table's root folder (commits then go through delta-rs)"
            )
        from partialcow.table.delta import DeltaRsTable

        format_table = DeltaRsTable(name, spark=spark)
        data_dir = table_root(format_table.location, table_format)
    os.makedirs(data_dir, exist_ok=True)
    return LakehouseTable(spark=spark, name=name, table_format=table_format, format_table=format_table,
                          data_dir=data_dir)
