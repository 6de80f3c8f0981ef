"""A damaged or foreign row index is built again by the next write, never trusted.

The index is derived from the table, so a state file that cannot be read, bucket files that are gone or torn, an
older state copied in under a newer name, or the index of another table (a table folder copied with its index)
must not stop or mislead the next batch. Each case damages the index of a fresh table, applies one batch (updates,
a delete, an insert) and compares the table with the rows expected and the index with a scan of the table.
"""

from __future__ import annotations

import os
import shutil
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from partialcow.index import INDEX_DIR, RowIndex
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import local_path, open_table
from partialcow.table.base import FILE_ID

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="damaged")
SCHEMA = "k bigint, v string, _op string"
BATCH = [(1, "one", "U"), (2, "two", "U"), (3, None, "D"), (100, "new", "I")]


def _expected() -> dict:
    rows = {k: f"v{k}" for k in range(50)}
    rows.update({1: "one", 2: "two", 60: "x", 100: "new"})
    rows.pop(3, None)
    return rows


def _index_folder(spark, name: str) -> str:
    location = spark.sql(f"describe table extended {name}").where("col_name = 'Location'").first()[1]
    return os.path.join(local_path(location), INDEX_DIR)


def _states(folder: str) -> list[str]:
    return sorted(os.path.join(folder, "_state", f) for f in os.listdir(os.path.join(folder, "_state"))
                  if f.endswith(".json"))


def _bucket_files(folder: str) -> list[str]:
    return sorted(os.path.join(folder, "data", f) for f in os.listdir(os.path.join(folder, "data")))


def _empty_the_state(folder: str, other: str) -> None:
    open(_states(folder)[-1], "w").close()


def _delete_a_bucket(folder: str, other: str) -> None:
    os.remove(_bucket_files(folder)[0])


def _tear_a_bucket(folder: str, other: str) -> None:
    path = _bucket_files(folder)[0]
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) // 2)


def _point_a_bucket_at_unknown_files(folder: str, other: str) -> None:
    """A whole Parquet bucket whose entries name file ids the state does not list (another generation's file)."""
    path = [p for p in _bucket_files(folder) if os.path.basename(p).startswith("b")][0]
    entries = pq.read_table(path)
    column = entries.schema.get_field_index(FILE_ID)
    stale = pa.array([99] * entries.num_rows, entries.schema.field(column).type)
    pq.write_table(entries.set_column(column, entries.schema.field(column), stale), path)


def _copy_an_older_state_in(folder: str, other: str) -> None:
    states = _states(folder)
    shutil.copy(states[0], os.path.join(folder, "_state", "v00000099.json"))  # its content says version 1


def _copy_another_tables_index(folder: str, other: str) -> None:
    shutil.rmtree(folder)
    shutil.copytree(other, folder)


DAMAGE = [_empty_the_state, _delete_a_bucket, _tear_a_bucket, _point_a_bucket_at_unknown_files,
          _copy_an_older_state_in, _copy_another_tables_index]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
def test_the_next_batch_builds_a_damaged_index_again(spark, schema, damage):
    """Regressions: an emptied state failed every run with a bare JSONDecodeError; a deleted or torn bucket with a
    bare path or Arrow's "magic bytes not found"; a bucket of unknown file ids with a bare KeyError; an older state
    copied in as the latest failed every run as "updated concurrently" (the next number was taken from its
    content)."""
    name, other = (f"{schema}.{p}_{uuid.uuid4().hex[:8]}" for p in ("damaged", "other"))
    for table, first in ((name, 0), (other, 1000)):
        create_table(spark, table, spark.createDataFrame([(k, f"v{k}", "I") for k in range(first, first + 50)],
                                                         SCHEMA), SPEC)
        # a second state (an insert), so that an older one exists to copy in
        apply_changes(spark, open_table(spark, table, table_format="iceberg"),
                      spark.createDataFrame([(first + 60, "x", "I")], SCHEMA), SPEC)
    damage(_index_folder(spark, name), _index_folder(spark, other))
    metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"), spark.createDataFrame(BATCH, SCHEMA),
                            SPEC)
    assert (metrics.rows_updated, metrics.rows_deleted, metrics.rows_inserted) == (2, 1, 1)
    spark.catalog.refreshTable(name)
    assert dict(spark.sql(f"select k, v from {name}").collect()) == _expected()
    assert RowIndex.open(open_table(spark, name, table_format="iceberg").format_table).verify().ok


def test_a_delta_table_copied_with_its_index_is_indexed_again(spark, tmp_path):
    """Regression: a Delta table folder copied with its index (both tables at the same version) trusted the other
    table's index: updates of keys the other table lacked were inserted beside the rows they update, silently."""
    from deltalake import DeltaTable, write_deltalake

    paths = {}
    for label, first in (("a", 0), ("b", 1000)):
        paths[label] = str(tmp_path / label)
        write_deltalake(paths[label], pa.table({"k": pa.array(range(first, first + 50), pa.int64()),
                                                "v": [f"v{k}" for k in range(first, first + 50)]}))
        apply_changes(spark, open_table(spark, paths[label], table_format="delta"),
                      spark.createDataFrame([(first + 60, "x", "I")], SCHEMA), SPEC)  # version 1, index built
    shutil.rmtree(os.path.join(paths["a"], INDEX_DIR))
    shutil.copytree(os.path.join(paths["b"], INDEX_DIR), os.path.join(paths["a"], INDEX_DIR))
    metrics = apply_changes(spark, open_table(spark, paths["a"], table_format="delta"),
                            spark.createDataFrame(BATCH, SCHEMA), SPEC)
    assert (metrics.rows_updated, metrics.rows_deleted, metrics.rows_inserted) == (2, 1, 1)
    rows = DeltaTable(paths["a"]).to_pyarrow_table().to_pylist()
    assert len(rows) == 51 and {r["k"]: r["v"] for r in rows} == _expected()
