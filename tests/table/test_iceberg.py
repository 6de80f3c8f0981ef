"""IcebergTable against real Iceberg tables in the embedded Spark session.

Replacement files are written with pyarrow from the live file (keeping its schema and Parquet field ids), and every
result is read back through Spark, an independent reader of the committed metadata.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from partialcow.table.base import FileReplacement, Table
from partialcow.table.iceberg import IcebergTable
from partialcow.exceptions import CommitConflictError, CommitError, UnsupportedTableFeatureError
from partialcow.metrics import WriteMetrics

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

_counter = itertools.count()


def _local(path: str) -> str:
    return "/" + path[len("file:") :].lstrip("/") if path.startswith("file:") else path


@pytest.fixture()
def table(spark) -> str:
    """A fresh two-file table: file one holds ids 1-3, file two ids 4-6."""
    name = f"commit_test.t{next(_counter)}"
    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING) USING iceberg")
    # one file per INSERT (local[2] would otherwise split each insert in two)
    spark.sql(f"INSERT INTO {name} SELECT /*+ COALESCE(1) */ * FROM VALUES (1, 'a'), (2, 'b'), (3, 'c') AS s(id, v)")
    spark.sql(f"INSERT INTO {name} SELECT /*+ COALESCE(1) */ * FROM VALUES (4, 'd'), (5, 'e'), (6, 'f') AS s(id, v)")
    assert len(IcebergTable(spark, name).live_files()) == 2
    yield name
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def _rows(spark, sql: str) -> dict[int, str]:
    rows = spark.sql(sql).collect()
    result = {r.id: r.v for r in rows}
    assert len(result) == len(rows), f"duplicate ids in {sorted(r.id for r in rows)}"
    return result


def _file_with(committer: IcebergTable, key: int, version: int | None = None) -> str:
    for f in committer.live_files(version):
        if key in pq.read_table(_local(f.path), columns=["id"]).column("id").to_pylist():
            return f.path
    raise AssertionError(f"no live file holds id {key}")


def _rewrite(path: str, updates: dict[int, str], *, tag: str, keep_field_ids: bool = True) -> str:
    """Copy a live data file with some values changed, next to it, like the page engine would."""
    source = pq.read_table(_local(path))
    values = [updates.get(i, v) for i, v in zip(source["id"].to_pylist(), source["v"].to_pylist())]
    patched = source.set_column(source.schema.get_field_index("v"), source.schema.field("v"), pa.array(values))
    if not keep_field_ids:
        patched = pa.table({c: patched[c] for c in patched.column_names})
    assert (patched.schema.field("id").metadata or {}).get(b"PARQUET:field_id") == (b"1" if keep_field_ids else None)
    target = _local(path).replace(".parquet", f"-{tag}.parquet")
    pq.write_table(patched, target)
    return target


def test_implements_the_protocol(spark, table: str) -> None:
    assert isinstance(IcebergTable(spark, table), Table)


def test_replace_one_file(spark, table: str) -> None:
    committer = IcebergTable(spark, table)
    before = _rows(spark, f"SELECT id, v FROM {table}")
    base = committer.current_version()
    old = _file_with(committer, 2)
    new = _rewrite(old, {2: "B"}, tag="one")

    result = committer.replace_files(
        FileReplacement(
            base_version=base, removed=[old], added=[new], conflict_keys={"id": [2]},
            metrics=WriteMetrics(rows_updated=1, pages_rewritten=1, pages_copied=3),
        )
    )

    assert _rows(spark, f"SELECT id, v FROM {table}") == {**before, 2: "B"}
    assert _rows(spark, f"SELECT id, v FROM {table} VERSION AS OF {base}") == before
    assert result.previous_version == base and result.version == committer.current_version()
    assert result.removed == (old,)
    live = {f.path for f in committer.live_files()}
    assert old not in live and any(_local(p) == new for p in live) and len(live) == 2
    snapshot = spark.sql(f"SELECT * FROM {table}.snapshots WHERE snapshot_id = {result.version}").collect()[0]
    assert snapshot.operation == "overwrite" and snapshot.parent_id == base
    assert snapshot.summary["partialcow.operation"] == "partial_cow_upsert"
    assert snapshot.summary["partialcow.rows_updated"] == "1"
    assert snapshot.summary["partialcow.pages_copied"] == "3"
    assert snapshot.summary["deleted-data-files"] == "1" and snapshot.summary["added-data-files"] == "1"
    # the new file's metrics came from its footer: Spark prunes on them
    files = spark.sql(f"SELECT file_path, record_count, lower_bounds FROM {table}.files").collect()
    mine = next(f for f in files if _local(f.file_path) == new)
    assert mine.record_count == 3 and mine.lower_bounds[1] is not None


def test_same_key_on_same_base_conflicts_and_loses_nothing(spark, table: str) -> None:
    first, second = IcebergTable(spark, table), IcebergTable(spark, table)
    base = first.current_version()
    old = _file_with(first, 2)
    new_a, new_b = _rewrite(old, {2: "A"}, tag="a"), _rewrite(old, {2: "Z"}, tag="b")
    first.replace_files(FileReplacement(base_version=base, removed=[old], added=[new_a], conflict_keys={"id": [2]}))
    after_first = _rows(spark, f"SELECT id, v FROM {table}")
    head = first.current_version()

    with pytest.raises(CommitConflictError, match=rf"{table}.*base snapshot {base}"):
        second.replace_files(FileReplacement(base_version=base, removed=[old], added=[new_b], conflict_keys={"id": [2]}))

    assert after_first[2] == "A"
    assert _rows(spark, f"SELECT id, v FROM {table}") == after_first
    assert second.current_version() == head
    assert not os.path.exists(new_b), "the loser's new file must be cleaned up"
    assert os.path.exists(new_a)


def test_other_keys_of_the_same_file_conflict_too(spark, table: str) -> None:
    # Both writers replace the same file: letting the second in would duplicate all of the file's rows.
    first, second = IcebergTable(spark, table), IcebergTable(spark, table)
    base = first.current_version()
    old = _file_with(first, 1)
    new_a, new_b = _rewrite(old, {1: "A"}, tag="a"), _rewrite(old, {3: "C"}, tag="b")
    first.replace_files(FileReplacement(base_version=base, removed=[old], added=[new_a], conflict_keys={"id": [1]}))
    with pytest.raises(CommitConflictError):
        second.replace_files(FileReplacement(base_version=base, removed=[old], added=[new_b], conflict_keys={"id": [3]}))
    assert _rows(spark, f"SELECT id, v FROM {table}") == {1: "A", 2: "b", 3: "c", 4: "d", 5: "e", 6: "f"}


def test_different_files_on_same_base_both_commit(spark, table: str) -> None:
    first, second = IcebergTable(spark, table), IcebergTable(spark, table)
    base = first.current_version()
    old_a, old_b = _file_with(first, 2), _file_with(first, 5)
    assert old_a != old_b
    new_a, new_b = _rewrite(old_a, {2: "B"}, tag="a"), _rewrite(old_b, {5: "E"}, tag="b")
    r1 = first.replace_files(FileReplacement(base_version=base, removed=[old_a], added=[new_a], conflict_keys={"id": [2]}))
    r2 = second.replace_files(FileReplacement(base_version=base, removed=[old_b], added=[new_b], conflict_keys={"id": [5]}))
    assert r2.previous_version == r1.version  # rebased on the first commit
    assert _rows(spark, f"SELECT id, v FROM {table}") == {1: "a", 2: "B", 3: "c", 4: "d", 5: "E", 6: "f"}


def test_unrelated_concurrent_insert_is_rebased(spark, table: str) -> None:
    committer = IcebergTable(spark, table)
    base = committer.current_version()
    old = _file_with(committer, 2)
    new = _rewrite(old, {2: "B"}, tag="x")
    spark.sql(f"INSERT INTO {table} VALUES (100, 'z')")
    committer.replace_files(FileReplacement(base_version=base, removed=[old], added=[new], conflict_keys={"id": [2]}))
    assert _rows(spark, f"SELECT id, v FROM {table}") == {1: "a", 2: "B", 3: "c", 4: "d", 5: "e", 6: "f", 100: "z"}


def test_concurrent_insert_of_a_touched_key_conflicts(spark, table: str) -> None:
    committer = IcebergTable(spark, table)
    base = committer.current_version()
    old = _file_with(committer, 2)
    new = _rewrite(old, {2: "B"}, tag="x")
    spark.sql(f"INSERT INTO {table} VALUES (2, 'other writer')")
    expected = spark.sql(f"SELECT id, v FROM {table}").collect()
    with pytest.raises(CommitConflictError):
        committer.replace_files(FileReplacement(base_version=base, removed=[old], added=[new], conflict_keys={"id": [2]}))
    assert sorted(spark.sql(f"SELECT id, v FROM {table}").collect()) == sorted(expected)


@pytest.mark.parametrize("seen", ["before the commit", "during the commit"])
def test_an_equality_delete_of_another_key_of_a_replaced_file_conflicts(spark, table: str, seen: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: another writer's equality delete of key 3 (a Flink upsert, say) committed while we rewrote the
    file holding keys 1-3 for key 2. Iceberg validated the new delete files against our keys only, so the commit
    landed, and our file, newer than the delete, brought key 3 back. Now a snapshot since the base that added
    equality deletes makes every concurrent change a conflict, and one landing between that look and the commit
    (simulated: the look finds none) meets the new file's key range in Iceberg's own validation: either way the
    commit conflicts and key 3 stays deleted."""
    from tablestate import commit_equality_delete

    if seen == "during the commit":
        monkeypatch.setattr(IcebergTable, "_equality_deletes_since", lambda self, table, version: False)
    committer = IcebergTable(spark, table)
    base = committer.current_version()
    old = _file_with(committer, 2)
    new = _rewrite(old, {2: "B"}, tag="eq")
    commit_equality_delete(spark, table, "id", [3])
    expected = {1: "a", 2: "b", 4: "d", 5: "e", 6: "f"}
    assert _rows(spark, f"SELECT id, v FROM {table}") == expected
    with pytest.raises(CommitConflictError):
        committer.replace_files(FileReplacement(base_version=base, removed=[old], added=[new], conflict_keys={"id": [2]}))
    assert _rows(spark, f"SELECT id, v FROM {table}") == expected


def test_many_keys_become_a_range_filter(spark, table: str) -> None:
    # > 1000 keys: the filter is min..max, a superset, so a concurrent insert inside the range still conflicts.
    committer = IcebergTable(spark, table)
    many = {"id": [2, *range(10_000, 11_500)]}
    base = committer.current_version()
    old = _file_with(committer, 2)
    spark.sql(f"INSERT INTO {table} VALUES (20000, 'outside')")
    committer.replace_files(
        FileReplacement(base_version=base, removed=[old], added=[_rewrite(old, {2: "B"}, tag="r1")], conflict_keys=many)
    )
    base = committer.current_version()
    old = _file_with(committer, 5)
    spark.sql(f"INSERT INTO {table} VALUES (10500, 'inside')")
    with pytest.raises(CommitConflictError):
        committer.replace_files(
            FileReplacement(base_version=base, removed=[old], added=[_rewrite(old, {5: "E"}, tag="r2")], conflict_keys=many)
        )
    assert _rows(spark, f"SELECT id, v FROM {table}")[2] == "B"


def test_file_without_field_ids_is_refused(spark, table: str) -> None:
    committer = IcebergTable(spark, table)
    base = committer.current_version()
    old = _file_with(committer, 2)
    new = _rewrite(old, {2: "B"}, tag="noids", keep_field_ids=False)
    with pytest.raises(CommitError, match="field id"):
        committer.replace_files(FileReplacement(base_version=base, removed=[old], added=[new]))
    assert committer.current_version() == base
    assert not os.path.exists(new)


def test_file_without_field_ids_is_read_through_the_name_mapping(spark, table: str) -> None:
    mapping = '[{"field-id": 1, "names": ["id"]}, {"field-id": 2, "names": ["v"]}]'
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('schema.name-mapping.default'='{mapping}')")
    committer = IcebergTable(spark, table)
    base = committer.current_version()
    old = _file_with(committer, 2)
    new = _rewrite(old, {2: "B"}, tag="mapped", keep_field_ids=False)
    # columns in another order than the field ids: only the mapping (not position) pairs them correctly
    plain = pq.read_table(new)
    pq.write_table(plain.select(["v", "id"]), new)
    committer.replace_files(FileReplacement(base_version=base, removed=[old], added=[new], conflict_keys={"id": [2]}))
    assert _rows(spark, f"SELECT id, v FROM {table}") == {1: "a", 2: "B", 3: "c", 4: "d", 5: "e", 6: "f"}
    # metrics came through the mapping too (without it the footer's columns have no ids and no bounds)
    files = spark.sql(f"SELECT file_path, lower_bounds, upper_bounds FROM {table}.files").collect()
    mine = next(f for f in files if _local(f.file_path) == new)
    assert mine.lower_bounds[1] == (1).to_bytes(8, "little") and mine.upper_bounds[1] == (3).to_bytes(8, "little")


def test_committer_works_from_a_worker_thread(spark, table: str) -> None:
    # dbt runs models on worker threads, whose JVM thread has no active SparkSession of its own.
    import threading

    outcome: dict[str, object] = {}

    def work() -> None:
        try:
            committer = IcebergTable(spark, table)
            base = committer.current_version()
            old = _file_with(committer, 2)
            new = _rewrite(old, {2: "T"}, tag="thread")
            outcome["result"] = committer.replace_files(
                FileReplacement(base_version=base, removed=[old], added=[new], conflict_keys={"id": [2]})
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            outcome["error"] = exc

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(timeout=300)
    assert "error" not in outcome, outcome.get("error")
    assert _rows(spark, f"SELECT id, v FROM {table}")[2] == "T"


def test_non_iceberg_table_is_refused(spark) -> None:
    name = f"commit_test.plain{next(_counter)}"
    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spark.sql(f"CREATE TABLE {name} (id BIGINT) USING parquet")
    try:
        with pytest.raises(UnsupportedTableFeatureError, match=f"{name} is not an Iceberg table"):
            IcebergTable(spark, name).current_version()
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_one_committer_follows_its_table_through_drop_and_re_create(spark, table: str, tmp_path: Path) -> None:
    """The committer loads the table once and only refreshes it later: a re-created table must be seen as new, and a
    dropped or replaced one refused as on a first load."""
    committer = IcebergTable(spark, table)
    first = committer.current_version()
    spark.sql(f"DROP TABLE {table} PURGE")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, v STRING) USING iceberg")
    assert committer.current_version() == -1
    assert committer.live_files() == []
    spark.sql(f"INSERT INTO {table} VALUES (9, 'z')")
    assert committer.current_version() not in (-1, first)
    assert [f.record_count for f in committer.live_files()] == [1]
    spark.sql(f"DROP TABLE {table} PURGE")
    with pytest.raises(CommitError, match=f"cannot load Iceberg table {table}"):
        committer.current_version()
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING parquet LOCATION '{tmp_path / 'plain'}'")
    with pytest.raises(UnsupportedTableFeatureError, match=f"{table} is not an Iceberg table"):
        committer.current_version()


def test_unknown_base_snapshot_is_a_conflict(spark, table: str) -> None:
    committer = IcebergTable(spark, table)
    old = _file_with(committer, 2)
    new = _rewrite(old, {2: "B"}, tag="x")
    with pytest.raises(CommitConflictError, match="snapshot 12345"):
        committer.replace_files(FileReplacement(base_version=12345, removed=[old], added=[new]))
    assert os.path.exists(new)  # kept: without the base snapshot we cannot prove nothing references it


def test_parallel_commits_to_one_table_both_land(spark, table: str) -> None:
    # Threads committing different files of one table at once: neither commit may be lost (see _COMMIT_LOCKS).
    import threading

    base = IcebergTable(spark, table).current_version()
    jobs = []
    for key, value in ((2, "B"), (5, "E")):
        committer = IcebergTable(spark, table)
        old = _file_with(committer, key, base)
        jobs.append((committer, FileReplacement(
            base_version=base, removed=[old], added=[_rewrite(old, {key: value}, tag=f"par{key}")], conflict_keys={"id": [key]}
        )))
    barrier = threading.Barrier(len(jobs))
    errors: list[BaseException] = []

    def run(committer: IcebergTable, change: FileReplacement) -> None:
        try:
            barrier.wait()
            committer.replace_files(change)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == []
    assert _rows(spark, f"SELECT id, v FROM {table}") == {1: "a", 2: "B", 3: "c", 4: "d", 5: "E", 6: "f"}
    assert len(spark.sql(f"SELECT * FROM {table}.snapshots").collect()) == 4  # two inserts, two overwrites


def test_file_not_live_at_base_is_refused(spark, table: str, tmp_path: Path) -> None:
    committer = IcebergTable(spark, table)
    base = committer.current_version()
    old = _file_with(committer, 2)
    new = _rewrite(old, {2: "B"}, tag="x")
    with pytest.raises(CommitError, match="not a live data file"):
        committer.replace_files(FileReplacement(base_version=base, removed=[old + ".missing"], added=[new]))
    assert committer.current_version() == base


def test_unknown_conflict_key_column_is_refused(spark, table: str) -> None:
    committer = IcebergTable(spark, table)
    base = committer.current_version()
    old = _file_with(committer, 2)
    with pytest.raises(CommitError, match="'nope'"):
        committer.replace_files(
            FileReplacement(base_version=base, removed=[old], added=[_rewrite(old, {}, tag="x")], conflict_keys={"nope": [1]})
        )


def test_file_with_position_deletes_is_refused(spark) -> None:
    name = f"commit_test.mor{next(_counter)}"
    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, v STRING) USING iceberg "
        "TBLPROPERTIES ('write.delete.mode'='merge-on-read')"
    )
    try:
        spark.sql(f"INSERT INTO {name} SELECT /*+ COALESCE(1) */ * FROM VALUES (1, 'a'), (2, 'b'), (3, 'c') AS s(id, v)")
        spark.sql(f"DELETE FROM {name} WHERE id = 2")
        assert spark.sql(f"SELECT count(*) FROM {name}.delete_files").collect()[0][0] == 1
        committer = IcebergTable(spark, name)
        base = committer.current_version()
        old = committer.live_files()[0].path
        with pytest.raises(UnsupportedTableFeatureError, match="position delete"):
            committer.replace_files(FileReplacement(base_version=base, removed=[old], added=[_rewrite(old, {}, tag="x")]))
        assert committer.current_version() == base
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def test_format_v3_is_refused(spark) -> None:
    name = f"commit_test.v3_{next(_counter)}"
    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ('format-version'='3')")
    try:
        spark.sql(f"INSERT INTO {name} VALUES (1, 'a')")
        committer = IcebergTable(spark, name)
        old = committer.live_files()[0].path
        with pytest.raises(UnsupportedTableFeatureError, match=r"v3.*never turns a table back.*DROP TABLE"):
            committer.replace_files(
                FileReplacement(base_version=committer.current_version(), removed=[old], added=[_rewrite(old, {}, tag="x")])
            )
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def test_identity_partition_is_carried_over(spark) -> None:
    name = f"commit_test.part{next(_counter)}"
    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING, region STRING) USING iceberg PARTITIONED BY (region)")
    try:
        spark.sql(f"INSERT INTO {name} VALUES (1, 'a', 'eu'), (2, 'b', 'eu'), (3, 'c', 'us')")
        committer = IcebergTable(spark, name)
        base = committer.current_version()
        old = _file_with(committer, 2)
        new = _rewrite(old, {2: "B"}, tag="p")
        committer.replace_files(FileReplacement(base_version=base, removed=[old], added=[new], conflict_keys={"id": [2]}))
        assert _rows(spark, f"SELECT id, v FROM {name} WHERE region = 'eu'") == {1: "a", 2: "B"}
        files = spark.sql(f"SELECT file_path, partition FROM {name}.files").collect()
        partitions = {_local(r.file_path): r.partition.region for r in files}
        assert partitions[new] == "eu"

        # a file whose rows belong to another partition must not inherit this one
        base = committer.current_version()
        source = pq.read_table(new)
        moved = source.set_column(
            source.schema.get_field_index("region"), source.schema.field("region"), pa.array(["us"] * source.num_rows)
        )
        wrong = new.replace(".parquet", "-moved.parquet")
        pq.write_table(moved, wrong)
        with pytest.raises(CommitError, match="region"):
            current = next(f.path for f in committer.live_files() if _local(f.path) == new)
            committer.replace_files(FileReplacement(base_version=base, removed=[current], added=[wrong]))
        assert committer.current_version() == base
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


@pytest.mark.parametrize("partition", ["0.0", "-1.5"])
def test_a_floating_point_partition_of_zero_takes_its_rewritten_file(spark, partition: str) -> None:
    """Regression: a file of partition ``d = 0.0`` has a lower bound of -0.0 (writers widen a zero bound so that no
    zero is skipped), so the check that a rewritten file's rows lie in their partition refused every upsert there."""
    name = f"commit_test.fpart{next(_counter)}"
    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING, d DOUBLE) USING iceberg PARTITIONED BY (d)")
    try:
        spark.sql(f"INSERT INTO {name} SELECT /*+ COALESCE(1) */ * FROM VALUES (1, 'a', {partition}), "
                  f"(2, 'b', {partition}) AS s(id, v, d)")
        committer = IcebergTable(spark, name)
        base = committer.current_version()
        old = _file_with(committer, 2)
        new = _rewrite(old, {2: "B"}, tag="p")
        committer.replace_files(FileReplacement(base_version=base, removed=[old], added=[new], conflict_keys={"id": [2]}))
        assert _rows(spark, f"SELECT id, v FROM {name}") == {1: "a", 2: "B"}
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def test_a_partition_column_without_null_counts_is_counted(spark, monkeypatch) -> None:
    """A writer may leave null counts out of a file's statistics: a null in a partition column of a file for
    partition ``eu`` is then found by reading the column, not taken as no null."""
    from partialcow.table.iceberg_metrics import DataFileBuilder

    name = f"commit_test.nopart{next(_counter)}"
    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING, region STRING) USING iceberg PARTITIONED BY (region)")
    exact = DataFileBuilder.exact_metrics

    def without_null_counts(self, path):
        metrics = exact(self, path)
        metrics.null_value_counts.clear()
        return metrics

    monkeypatch.setattr(DataFileBuilder, "exact_metrics", without_null_counts)
    try:
        spark.sql(f"INSERT INTO {name} VALUES (1, 'a', 'eu'), (2, 'b', 'eu')")
        committer = IcebergTable(spark, name)
        base = committer.current_version()
        old = _file_with(committer, 2)
        source = pq.read_table(_local(old))
        index = source.schema.get_field_index("region")
        holed = source.set_column(index, source.schema.field("region").with_nullable(True), pa.array(["eu", None]))
        wrong = _local(old).replace(".parquet", "-null.parquet")
        pq.write_table(holed, wrong)
        with pytest.raises(CommitError, match="region"):
            committer.replace_files(FileReplacement(base_version=base, removed=[old], added=[wrong]))
        assert committer.current_version() == base
        fine = _rewrite(old, {2: "B"}, tag="ok")
        committer.replace_files(FileReplacement(base_version=base, removed=[old], added=[fine]))
        assert _rows(spark, f"SELECT id, v FROM {name}") == {1: "a", 2: "B"}
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def test_bucket_partition_is_refused(spark) -> None:
    name = f"commit_test.bucket{next(_counter)}"
    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING) USING iceberg PARTITIONED BY (bucket(4, id))")
    try:
        spark.sql(f"INSERT INTO {name} VALUES (1, 'a')")
        committer = IcebergTable(spark, name)
        old = committer.live_files()[0].path
        with pytest.raises(UnsupportedTableFeatureError, match="bucket"):
            committer.replace_files(
                FileReplacement(base_version=committer.current_version(), removed=[old], added=[_rewrite(old, {}, tag="x")])
            )
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def test_conflict_filters_bind_for_common_key_types(spark) -> None:
    # Each key type must become a literal Iceberg can bind to the column, else the filter would be useless.
    name = f"commit_test.types{next(_counter)}"
    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spark.sql(
        f"CREATE TABLE {name} (i INT, l BIGINT, s STRING, d DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, "
        "dec DECIMAL(10, 2), f DOUBLE) USING iceberg"
    )
    try:
        committer = IcebergTable(spark, name)
        table = committer._table()
        keys = {
            "i": [1, 2], "l": [2**40], "s": ["x"], "d": [dt.date(2024, 1, 2)],
            "ts": [dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)], "ntz": [dt.datetime(2024, 1, 2, 3, 4, 5)],
            "dec": [decimal.Decimal("1.5")], "f": [0.5],
        }
        jvm = spark._jvm
        for column, values in keys.items():
            expression = committer._conflict_filter(table, {column: values}, [])
            assert "true" != str(expression), f"{column} fell back to alwaysTrue"
            bound = jvm.org.apache.iceberg.expressions.Binder.bind(table.schema().asStruct(), expression, False)
            assert f"ref(id={table.schema().findField(column).fieldId()}," in str(bound)
        assert str(committer._conflict_filter(table, {"s": [b"raw"]}, [])) == "true"  # unsupported: conservative
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def test_new_files_key_ranges_bind_for_common_key_types(spark) -> None:
    """The conflict filter's part for the new files' rows (``_key_ranges``): their key bounds as a range Iceberg can
    bind, per key type (an epoch timestamp included: a small microsecond count crossed py4j as an Integer, which
    Iceberg does not turn into a timestamp); null keys where a file may hold some; past 32 files one min..max range
    (over longs on both sides of 2**31, which Java's comparator could not compare); a double key, whose NaN lies
    outside any bounds, and a file without bounds fall back to always true; no new file gives always false."""
    name = f"commit_test.ranges{next(_counter)}"
    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spark.sql(f"CREATE TABLE {name} (i INT, l BIGINT, s STRING, d DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, "
              "dec DECIMAL(10, 2), f DOUBLE, u STRING) USING iceberg")
    try:
        committer = IcebergTable(spark, name)
        table, jvm = committer._table(), spark._jvm
        iceberg = jvm.org.apache.iceberg
        schema = table.schema()

        def data_file(column, low, high, nulls=0, type_=None):
            field = schema.findField(column)
            bounds = [jvm.java.util.HashMap(), jvm.java.util.HashMap()]
            for bound, value in zip(bounds, (low, high)):
                if value is not None:
                    literal = iceberg.expressions.Literal.of(value).to(type_ or field.type())
                    bound.put(field.fieldId(), literal.toByteBuffer())
            null_counts = jvm.java.util.HashMap()
            null_counts.put(field.fieldId(), jvm.java.lang.Long.valueOf(str(nulls)))
            metrics = iceberg.Metrics(jvm.java.lang.Long.valueOf("2"), None, None, null_counts, None, *bounds)
            return (iceberg.DataFiles.builder(table.spec()).withPath(f"/nowhere/{column}-{low}.parquet")
                    .withFileSizeInBytes(1).withFormat("parquet").withMetrics(metrics).build())

        def bound(expression, column):
            text = str(iceberg.expressions.Binder.bind(schema.asStruct(), expression, False))
            assert f"ref(id={schema.findField(column).fieldId()}," in text, (column, text)
            return text

        cases = {"i": (1, 9), "l": (2**40, 2**41), "s": ("a", "b"), "d": ("2024-01-02", "2024-02-03"),
                 "ts": ("1970-01-01T00:00:00+00:00", "1970-01-01T00:00:01+00:00"),
                 "ntz": ("2024-01-02T03:04:05", "2024-01-03T03:04:05"),
                 "dec": (decimal.Decimal("1.50"), decimal.Decimal("2.50"))}
        for column, (low, high) in cases.items():
            expression = committer._key_ranges(table, column, [data_file(column, low, high)])
            assert "is_null" not in bound(expression, column) and str(expression) not in ("true", "false"), column
        uuid_type = iceberg.types.Types.UUIDType.get()  # UUID bounds over a string column: the literal path only
        low, high = "00000000-0000-0000-0000-000000000001", "ffffffff-0000-0000-0000-000000000000"
        assert _range_literal_ok(committer, data_file("u", low, high, type_=uuid_type), uuid_type)
        assert "is_null" in bound(committer._key_ranges(table, "l", [data_file("l", 1, 2, nulls=1)]), "l")
        many = [data_file("l", 2**31 - 20 + n, 2**31 - 19 + n) for n in range(40)]  # past _MAX_FILE_RANGES
        merged = bound(committer._key_ranges(table, "l", many), "l")
        assert merged.count(">=") == 1 and str(2**31 - 20) in merged and str(2**31 + 20) in merged, merged
        strings = bound(committer._key_ranges(table, "s", [data_file("s", f"k{n:02}", f"k{n:02}z") for n in range(40)]),
                        "s")
        assert strings.count(">=") == 1 and "k00" in strings and "k39z" in strings, strings
        assert str(committer._key_ranges(table, "f", [data_file("f", 0.5, 1.5)])) == "true"
        assert str(committer._key_ranges(table, "l", [data_file("l", None, None)])) == "true"
        assert str(committer._key_ranges(table, "l", [])) == "false"
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def _range_literal_ok(committer: IcebergTable, data_file, iceberg_type) -> bool:
    """A UUID bound read back and spelled as a range literal binds to a UUID column."""
    from partialcow.table.iceberg import _bound, _range_literal

    jvm = committer.spark._jvm
    field_id = next(iter(data_file.lowerBounds().keySet()))
    value = _bound("UUID", jvm.org.apache.iceberg.types.Conversions.fromByteBuffer(
        iceberg_type, data_file.lowerBounds().get(field_id)))
    schema = jvm.org.apache.iceberg.Schema(jvm.java.util.List.of(
        jvm.org.apache.iceberg.types.Types.NestedField.optional(1, "u", iceberg_type)))
    expression = jvm.org.apache.iceberg.expressions.Expressions.greaterThanOrEqual(
        "u", _range_literal("UUID", value, iceberg_type))
    return "ref(id=1," in str(jvm.org.apache.iceberg.expressions.Binder.bind(schema.asStruct(), expression, False))


def test_added_file_already_in_the_table_is_refused_and_kept(spark, table: str) -> None:
    committer = IcebergTable(spark, table)
    base = committer.current_version()
    live = _file_with(committer, 2)
    with pytest.raises(CommitError, match="already a data file"):
        committer.replace_files(FileReplacement(base_version=base, removed=[live], added=[_local(live)]))
    assert os.path.exists(_local(live))
    assert committer.current_version() == base


class _FailingCommit:
    """Wraps the real table so that the overwrite's commit() raises ``exception`` (a real Java exception object)."""

    def __init__(self, table, exception) -> None:
        self._table, self._exception = table, exception

    def __getattr__(self, name: str):
        attribute = getattr(self._table, name)
        if name != "newOverwrite":
            return attribute
        return lambda: _FailingOverwrite(attribute(), self._exception)


class _FailingOverwrite:
    def __init__(self, overwrite, exception) -> None:
        self._overwrite, self._exception = overwrite, exception

    def __getattr__(self, name: str):
        from py4j.protocol import Py4JJavaError

        if name == "commit":
            def fail() -> None:
                raise Py4JJavaError("simulated", self._exception)
            return fail
        method = getattr(self._overwrite, name)

        def chained(*args):
            method(*args)
            return self
        return chained


@pytest.mark.parametrize(
    ("java_exception", "error", "kept"),
    [
        ("CommitStateUnknownException", "CommitStateUnknownError", True),
        ("CommitFailedException", "CommitConflictError", False),
        ("IllegalStateException", "CommitError", False),
    ],
)
def test_failed_commit_outcomes(spark, table: str, monkeypatch: pytest.MonkeyPatch, java_exception, error, kept) -> None:
    import partialcow.exceptions as exceptions

    jvm = spark._jvm
    no_args = spark.sparkContext._gateway.new_array(jvm.java.lang.Object, 0)
    exception = {
        "CommitStateUnknownException": lambda: jvm.org.apache.iceberg.exceptions.CommitStateUnknownException(
            jvm.java.lang.RuntimeException("simulated")
        ),
        "CommitFailedException": lambda: jvm.org.apache.iceberg.exceptions.CommitFailedException("simulated", no_args),
        "IllegalStateException": lambda: jvm.java.lang.IllegalStateException("simulated"),
    }[java_exception]()
    committer = IcebergTable(spark, table)
    real_table = committer._table
    monkeypatch.setattr(committer, "_table", lambda: _FailingCommit(real_table(), exception))
    base = committer.current_version()
    old = _file_with(committer, 2)
    new = _rewrite(old, {2: "B"}, tag="unknown")
    with pytest.raises(getattr(exceptions, error)) as raised:
        committer.replace_files(FileReplacement(base_version=base, removed=[old], added=[new], conflict_keys={"id": [2]}))
    assert type(raised.value).__name__ == error and table in str(raised.value)
    assert os.path.exists(new) is kept  # an unknown outcome never deletes files the table may reference
    assert committer.current_version() == base


def _files_under(location: str) -> list[str]:
    return [os.path.join(d, f) for d, _, names in os.walk(_local(location)) for f in names]


def test_purge_drops_the_table_and_every_file_through_the_catalog(spark, table, monkeypatch):
    """Branch operations drop their overlays and base images this way: the catalog on the driver, never Spark's
    ``DROP TABLE ... PURGE`` (whose file deletion runs as Spark jobs)."""
    from partialcow.table.iceberg_create import purge_table
    from partialcow.table.java import load_iceberg_table

    schema, name = table.split(".")
    location = str(load_iceberg_table(spark, table).location())
    spark.sql(f"DELETE FROM {table} WHERE id = 2")  # a second snapshot: files only older metadata reaches
    assert len([f for f in _files_under(location) if f.endswith(".parquet")]) >= 3
    statements: list[str] = []
    sql = spark.sql
    monkeypatch.setattr(spark, "sql", lambda q, *a, **k: (statements.append(q), sql(q, *a, **k))[1])
    assert purge_table(spark, schema, name) is True
    assert statements == []
    assert _files_under(location) == []
    assert not spark.catalog.tableExists(table)
    assert purge_table(spark, schema, name) is False
    monkeypatch.undo()
    # the name is free, and a table created under it again holds only its own rows (no cached object of the old one)
    spark.sql(f"CREATE TABLE {table} (id BIGINT, v STRING) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (7, 'g')")
    assert _rows(spark, f"SELECT * FROM {table}") == {7: "g"}


def test_purge_of_a_table_iceberg_cannot_load_takes_sparks_statement(spark):
    from partialcow.table.iceberg_create import purge_table

    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spark.sql("CREATE TABLE commit_test.plain_parquet (id BIGINT) USING parquet")
    spark.sql("INSERT INTO commit_test.plain_parquet VALUES (1)")
    assert purge_table(spark, "commit_test", "plain_parquet") is True
    assert not spark.catalog.tableExists("commit_test.plain_parquet")
    spark.sql("CREATE VIEW commit_test.a_view AS SELECT 1 AS id")
    try:
        with pytest.raises(Exception, match="(?i)view"):  # as DROP TABLE ... PURGE of a view: refused, kept
            purge_table(spark, "commit_test", "a_view")
        assert spark.catalog.tableExists("commit_test.a_view")
    finally:
        spark.sql("DROP VIEW commit_test.a_view")


def test_purge_of_a_table_without_garbage_collection_is_refused_and_deletes_nothing(spark, table):
    """A branch's image table has ``gc.enabled=false`` and holds its root table's manifests and metadata log: Spark
    refuses to purge it, and so must the catalog's drop (which would delete all but its data files)."""
    from partialcow.table.iceberg_create import purge_table
    from partialcow.table.java import load_iceberg_table

    schema, name = table.split(".")
    location = str(load_iceberg_table(spark, table).location())
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('gc.enabled'='false')")
    files = sorted(_files_under(location))
    with pytest.raises(Exception, match="(?i)gc"):
        purge_table(spark, schema, name)
    assert sorted(_files_under(location)) == files
    assert _rows(spark, f"SELECT * FROM {table}") == {1: "a", 2: "b", 3: "c", 4: "d", 5: "e", 6: "f"}
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('gc.enabled'='true')")


def test_purge_of_a_table_whose_metadata_log_is_full_deletes_its_older_metadata_too(spark, table):
    """The catalog's drop deletes the metadata files its log lists; older ones (the log keeps
    ``write.metadata.previous-versions-max``) only Spark's action finds."""
    from partialcow.table.iceberg_create import purge_table
    from partialcow.table.java import load_iceberg_table

    schema, name = table.split(".")
    location = str(load_iceberg_table(spark, table).location())
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.metadata.previous-versions-max'='1')")
    for n in range(3):
        spark.sql(f"INSERT INTO {table} VALUES ({10 + n}, 'x')")
    assert len([f for f in _files_under(location) if f.endswith(".metadata.json")]) > 2
    assert purge_table(spark, schema, name) is True
    assert _files_under(location) == []


def _keyed_table(spark, label: str):
    """A table built by ``create_table`` with keys 1 and 2: (name, its ChangeSpec, the batch schema)."""
    from partialcow.spark.changes import ChangeSpec, create_table

    name = f"commit_test.{label}_{next(_counter)}"
    spark.sql("CREATE SCHEMA IF NOT EXISTS commit_test")
    spec = ChangeSpec(key_columns=("k",), op_column="_op", model=label)
    rows = "k bigint, v bigint, _op string"
    create_table(spark, name, spark.createDataFrame([(1, 1, "I"), (2, 2, "I")], rows), spec, table_format="iceberg")
    return name, spec, rows


def _refs(spark, name: str) -> dict[str, int]:
    return {r.name: r.snapshot_id for r in spark.sql(f"SELECT name, snapshot_id FROM {name}.refs").collect()}


def test_write_audit_publish_is_refused_not_bypassed(spark) -> None:
    """Regression: with write.wap.enabled and the session staging writes (a WAP id, or a branch to audit), Spark's
    own writes are staged while ours went straight to main, past the audit (with a WAP branch, main then no longer
    fast-forwards to it). Refused with the table, its branches and its rows as they were."""
    from partialcow.spark.changes import apply_changes
    from partialcow.spark.tables import open_table

    name, spec, rows = _keyed_table(spark, "wap")
    try:
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('write.wap.enabled'='true')")
        spark.sql(f"ALTER TABLE {name} CREATE BRANCH audit")
        for staging in ("spark.wap.id", "spark.wap.branch"):
            spark.conf.set(staging, "audit")
            spark.sql(f"INSERT INTO {name} VALUES (9, 9)")  # Spark's own write: staged
            refs = _refs(spark, name)
            with pytest.raises(UnsupportedTableFeatureError, match=rf"write.wap.enabled.*{staging}=audit"):
                apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                              spark.createDataFrame([(1, 10, "U"), (3, 3, "I")], rows), spec)
            spark.conf.unset(staging)
            assert _refs(spark, name) == refs, staging
            assert sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {name} VERSION AS OF 'main'").collect()) == [
                (1, 1), (2, 2)], staging
        # without staging, the write goes to main as any other
        apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                      spark.createDataFrame([(1, 10, "U"), (3, 3, "I")], rows), spec)
        assert sorted(tuple(r) for r in spark.table(name).collect()) == [(1, 10), (2, 2), (3, 3)]
    finally:
        spark.conf.unset("spark.wap.id")
        spark.conf.unset("spark.wap.branch")
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


def test_a_name_of_a_branch_tag_or_metadata_table_is_refused(spark) -> None:
    """Regression: `db.t.branch_audit` resolved to the whole table, and the batch landed on main (then failed
    reading it back). Refused before anything is written; the table's own name still works."""
    from partialcow.exceptions import ConfigurationError
    from partialcow.spark.changes import apply_changes
    from partialcow.spark.tables import open_table

    name, spec, rows = _keyed_table(spark, "named")
    try:
        spark.sql(f"ALTER TABLE {name} CREATE BRANCH audit")
        spark.sql(f"ALTER TABLE {name} CREATE TAG v1")
        refs = _refs(spark, name)
        for suffix in ("branch_audit", "tag_v1", "snapshots"):
            with pytest.raises(ConfigurationError, match=r"names a branch, tag, snapshot or metadata table"):
                apply_changes(spark, open_table(spark, f"{name}.{suffix}", table_format="iceberg"),
                              spark.createDataFrame([(1, 10, "U")], rows), spec)
            assert _refs(spark, name) == refs, suffix
        apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                      spark.createDataFrame([(1, 10, "U")], rows), spec)
        assert sorted(tuple(r) for r in spark.table(name).collect()) == [(1, 10), (2, 2)]
        assert _refs(spark, name)["audit"] == refs["audit"]
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
