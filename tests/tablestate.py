"""What a failed or crashed write must leave as it was (or repair): read from outside the pipeline.

``table_state`` is the current snapshot id, the rows, and every file under the table folder (data files and the
``_partialcow_index`` folder: names and sizes). ``leftovers`` lists what no snapshot needs and no index state
references: data files outside ``all_files`` (and their fingerprint sidecars), scratch and temporary folders, write leases.
"""

from __future__ import annotations

import json
import os

from partialcow.table.base import quote_identifier
from partialcow.spark.tables import local_path


def location(spark, name: str) -> str:
    return local_path(spark.sql(f"describe table extended {quote_identifier(name)}").where("col_name = 'Location'").first()[1])


def table_state(spark, name: str) -> tuple:
    q = quote_identifier(name)
    snapshot = spark.sql(f"select snapshot_id from {q}.snapshots order by committed_at desc limit 1").collect()
    rows = sorted(tuple(r) for r in spark.table(q).collect())
    root = location(spark, name)
    files = sorted(
        (os.path.relpath(os.path.join(d, f), root), os.path.getsize(os.path.join(d, f)))
        for d, _, names in os.walk(root) for f in names
    )
    assert any(p.startswith("_partialcow_index") for p, _ in files), "the table has no row index to protect"
    return snapshot, rows, files


def _sidecar_of(path: str, referenced: set[str]) -> bool:
    """Whether ``path`` is the row-fingerprint sidecar (``.<name>.pcfp``) of a referenced data file."""
    head, name = os.path.split(path)
    return name.startswith(".") and name.endswith(".pcfp") and os.path.join(head, name[1:-5]) in referenced


def leftovers(spark, name: str) -> list[str]:
    """Files and folders under the table that nothing needs: what a crashed write may leave and the next removes."""
    root = location(spark, name)
    referenced = {local_path(r[0]) for r in spark.sql(f"select file_path from {quote_identifier(name)}.all_files").collect()}
    found = []
    data = os.path.join(root, "data")
    for d, _, names in os.walk(data):
        # .crc: the checksum files Hadoop's local file system writes next to Spark's own data files
        found += [os.path.join(d, f) for f in names if os.path.join(d, f) not in referenced and not f.endswith(".crc")
                  and not _sidecar_of(os.path.join(d, f), referenced)]
    index = os.path.join(root, "_partialcow_index")
    states = sorted(os.listdir(os.path.join(index, "_state")))
    buckets = set()
    for state in states[-2:]:
        with open(os.path.join(index, "_state", state)) as handle:
            body = json.load(handle)
        buckets.update(b for b in body["buckets"] if b)
        buckets.update(name for deltas in body.get("deltas", []) for name in deltas)  # a bucket's delta files
    for d, _, names in os.walk(os.path.join(index, "data")):
        found += [os.path.join(d, f) for f in names if os.path.relpath(os.path.join(d, f), index) not in buckets]
    for sub in ("_tmp", "_writes"):
        folder = os.path.join(index, sub)
        if os.path.isdir(folder):
            found += [os.path.join(folder, f) for f in os.listdir(folder)]
    return sorted(found)


class OtherWriterFirst:
    """A committer wrapper that lets another writer (``other``, a callable) commit right before our first commit
    attempt: the deterministic form of a race lost at the commit."""

    def __init__(self, inner, other):
        self._inner, self._other, self.attempts = inner, other, 0

    def replace_files(self, change):
        self.attempts += 1
        if self.attempts == 1:
            self._other()
        return self._inner.replace_files(change)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def commit_equality_delete(spark, name: str, column: str, values: list) -> None:
    """Another writer's equality delete of ``column`` in ``values`` (as Flink's upserts write them; Spark writes
    position deletes only): one delete file, written with pyarrow, committed as a row delta through Iceberg's API
    with the metrics Iceberg's own Parquet reader takes from the file (so its bounds name the deleted values)."""
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq

    from partialcow.table.java import load_iceberg_table

    jvm = spark.sparkContext._jvm
    table = load_iceberg_table(spark, name)
    field = table.schema().findField(column)
    arrow_type = {"long": pa.int64(), "int": pa.int32(), "string": pa.string()}[str(field.type())]
    path = os.path.join(location(spark, name), "data", f"other-eq-delete-{uuid.uuid4().hex}.parquet")
    schema = pa.schema([pa.field(column, arrow_type, nullable=False,
                                 metadata={b"PARQUET:field_id": str(field.fieldId()).encode()})])
    pq.write_table(pa.table({column: pa.array(values, arrow_type)}, schema=schema), path)
    metrics = jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(
        table.io().newInputFile(f"file:{path}"), jvm.org.apache.iceberg.MetricsConfig.forTable(table))
    ids = spark.sparkContext._gateway.new_array(jvm.int, 1)
    ids[0] = field.fieldId()
    delete = (jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(table.spec()).ofEqualityDeletes(ids)
              .withPath(f"file:{path}").withFormat("parquet").withFileSizeInBytes(os.path.getsize(path))
              .withMetrics(metrics).build())
    table.newRowDelta().addDeletes(delete).commit()
    spark.catalog.refreshTable(name)
