"""The committer's listing of a Delta version's live files from the log (delta-rs, no Spark job) against
delta-spark's own state reconstruction, and the tables it leaves to delta-spark.

A wrong listing would remove the wrong files in a commit (or keep a replaced one live): every case compares the
two listings file by file, across checkpoints, OPTIMIZE, deletes and time travel.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from partialcow.table.base import FileReplacement
from partialcow.table.delta import spark_log
from partialcow.table.delta.spark_table import DeltaSparkTable
from partialcow.spark.tables import delta_root

pytestmark = [pytest.mark.spark]


def _spark_listing(spark, root: str, version: int) -> dict[str, tuple[int, int | None]]:
    snapshot = spark_log.snapshot_at(spark, root, version)
    rows = spark_log.add_actions(spark, snapshot).selectExpr(
        "path", "size", "cast(get_json_object(stats, '$.numRecords') as long) AS n").collect()
    return {r["path"]: (int(r["size"]), r["n"]) for r in rows}


def _log_listing(committer: DeltaSparkTable, version: int) -> dict[str, tuple[int, int | None]] | None:
    live = committer._live_from_log(spark_log.snapshot_at(committer.spark, committer.root, version))
    if live is None:
        return None
    return {p: (a["size"], json.loads(a["stats"])["numRecords"] if "stats" in a else None) for p, a in live.items()}


def test_the_log_listing_matches_delta_spark_across_checkpoints_and_rewrites(spark, schema) -> None:
    name = f"{schema}.t"
    # a checkpoint every other version: later listings start from a checkpoint file, not only from JSON commits
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING) USING delta "
              "TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    for start in range(0, 300, 100):  # versions 1-3 (a checkpoint at 2)
        spark.sql(f"INSERT INTO {name} SELECT id, cast(id AS string) FROM range({start}, {start + 100})")
    spark.sql(f"DELETE FROM {name} WHERE id < 150")  # 4: files removed and rewritten (no deletion vectors here)
    spark.sql(f"OPTIMIZE {name}")  # 5: every file replaced by one
    spark.sql(f"INSERT INTO {name} VALUES (1000, 'x')")  # 6 (checkpoints at 2, 4 and 6)
    root = delta_root(spark, name)
    committer = DeltaSparkTable(spark, root, name=name)
    assert committer.current_version() == 6
    assert any(p.endswith(".checkpoint.parquet") for p in os.listdir(f"{root}/_delta_log"))
    for version in (1, 3, 4, 5, 6):  # JSON only, JSON after a checkpoint, removals, a rewrite, a new checkpoint
        listed = _log_listing(committer, version)
        assert listed is not None, version
        assert listed == _spark_listing(spark, root, version), version


def test_tables_whose_removals_need_more_are_listed_by_delta_spark(spark, schema) -> None:
    for case, ddl in [
        ("partitioned", "(id BIGINT, p STRING) USING delta PARTITIONED BY (p)"),
        ("deletion vectors", "(id BIGINT, p STRING) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"),
        ("row tracking", "(id BIGINT, p STRING) USING delta TBLPROPERTIES ('delta.enableRowTracking' = 'true')"),
    ]:
        name = f"{schema}.t_{case.replace(' ', '_')}"
        spark.sql(f"CREATE TABLE {name} {ddl}")  # version 0 lists no file, so nothing to insert
        committer = DeltaSparkTable(spark, delta_root(spark, name), name=name)
        assert _log_listing(committer, committer.current_version()) is None, case


def test_a_table_root_with_a_space_is_listed_from_the_log(spark, tmp_path) -> None:
    root = str(tmp_path / "a table")  # the root is not part of the relative paths the log holds
    spark.sql(f"CREATE TABLE delta.`{root}` (id BIGINT) USING delta")
    spark.sql(f"INSERT INTO delta.`{root}` VALUES (1)")
    committer = DeltaSparkTable(spark, root, name="spaced")
    version = committer.current_version()
    assert _log_listing(committer, version) == _spark_listing(spark, root, version)


def test_a_file_name_the_log_spells_encoded_is_listed_by_delta_spark(spark, tmp_path) -> None:
    root = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{root}` (id BIGINT) USING delta")
    spark.sql(f"INSERT INTO delta.`{root}` VALUES (1)")
    committer = DeltaSparkTable(spark, root, name="odd names")
    first = next(f for f in os.listdir(root) if f.endswith(".parquet"))
    shutil.copyfile(os.path.join(root, first), os.path.join(root, "copy 1%.parquet"))
    result = committer.replace_files(FileReplacement(base_version=committer.current_version(),
                                                     added=(os.path.join(root, "copy 1%.parquet"),)))
    assert "copy%201%25.parquet" in _spark_listing(spark, root, result.version)
    assert _log_listing(committer, result.version) is None
    # and a removal of that file, listed by delta-spark, removes it
    after = committer.replace_files(FileReplacement(base_version=result.version,
                                                    removed=(os.path.join(root, "copy 1%.parquet"),)))
    assert sorted(r["id"] for r in spark.read.format("delta").load(root).collect()) == [1]
    assert after.version == result.version + 1


def test_the_delta_rs_listing_signs_each_deletion_vector(spark, schema) -> None:
    """delta-rs' add actions leave deletion vectors out: the listing must still tell a file with one, and a file
    whose vector deletes more rows from one whose vector deleted fewer."""
    from partialcow.table.delta import DeltaRsTable

    name = f"{schema}.t_dv_signs"
    spark.sql(f"CREATE TABLE {name} (id BIGINT) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"INSERT INTO {name} SELECT /*+ COALESCE(1) */ id FROM range(100)")
    spark.sql(f"INSERT INTO {name} SELECT /*+ COALESCE(1) */ id FROM range(100, 200)")
    table = DeltaRsTable(delta_root(spark, name))
    assert [f.deletes for f in table.live_files()] == [None, None]
    spark.sql(f"DELETE FROM {name} WHERE id = 7")
    signed = {f.path: f.deletes for f in table.live_files()}
    assert sorted(s is None for s in signed.values()) == [False, True], signed
    spark.sql(f"DELETE FROM {name} WHERE id = 8")
    again = {f.path: f.deletes for f in table.live_files()}
    assert again.keys() == signed.keys()
    changed = [p for p in again if again[p] != signed[p]]
    assert len(changed) == 1 and signed[changed[0]] is not None
