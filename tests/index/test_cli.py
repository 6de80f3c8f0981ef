"""``partialcow index verify|rebuild``: a Delta table by path, an Iceberg table by name with --warehouse."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from index_oracle import corrupt_bucket

from partialcow.cli import main
from partialcow.index import RowIndex
from partialcow.table.delta import DeltaRsTable
from partialcow.table.iceberg import IcebergTable
from partialcow.table.paths import local_path

deltalake = pytest.importorskip("deltalake")

pytestmark = pytest.mark.spark


def test_delta_rebuild_verify_and_corruption(spark, tmp_path, capsys) -> None:
    root = str(tmp_path / "events")
    for f in range(2):
        deltalake.write_deltalake(root, pa.table({"k": list(range(f * 300, f * 300 + 300)), "v": ["x"] * 300}), mode="append")
    assert main(["index", "verify", root]) == 2  # no index yet: a typed error, exit 2
    assert "no row index" in capsys.readouterr().err
    assert main(["index", "rebuild", root]) == 2  # first build needs --key
    assert "--key" in capsys.readouterr().err
    assert main(["index", "rebuild", root, "--key", "k", "--buckets", "3", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows_total"] == 600
    assert main(["index", "verify", root]) == 0
    assert "OK" in capsys.readouterr().out

    index = RowIndex.open(DeltaRsTable(root, spark=spark))
    corrupt_bucket(index.store.root, index.state.buckets[0], shift_first_pos=5)
    assert main(["index", "verify", root, "--output", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["extra_in_index"] == 1

    assert main(["index", "rebuild", root]) == 0  # keys come from the existing index
    assert main(["index", "verify", root]) == 0

    # regression: a torn state and a missing bucket file ended both commands with a traceback
    index = RowIndex.open(DeltaRsTable(root, spark=spark))
    os.remove(os.path.join(index.store.root, index.state.buckets[0]))
    assert main(["index", "verify", root]) == 2
    assert "missing or damaged" in capsys.readouterr().err
    assert main(["index", "rebuild", root]) == 0  # keyed as the damaged index was
    assert main(["index", "verify", root]) == 0
    state = os.path.join(index.store.root, "_state", sorted(os.listdir(os.path.join(index.store.root, "_state")))[-1])
    open(state, "w").close()
    assert main(["index", "verify", root]) == 2
    assert "cannot be read" in capsys.readouterr().err
    assert main(["index", "rebuild", root]) == 2
    assert "--key" in capsys.readouterr().err
    assert main(["index", "rebuild", root, "--key", "k"]) == 0
    assert main(["index", "verify", root]) == 0


@pytest.mark.iceberg
def test_iceberg_by_name_with_warehouse(spark, spark_warehouse, capsys) -> None:
    spark.sql("CREATE TABLE default.cli_idx (id bigint, s string) USING iceberg")
    try:
        spark.sql("INSERT INTO default.cli_idx VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        warehouse = str(spark_warehouse)  # the fixture session's warehouse: the CLI reuses that session
        assert main(["index", "verify", "default.cli_idx"]) == 2
        assert "--warehouse" in capsys.readouterr().err
        assert main(["index", "rebuild", "default.cli_idx", "--warehouse", warehouse, "--key", "id"]) == 0
        assert main(["index", "verify", "default.cli_idx", "--warehouse", warehouse]) == 0
        spark.sql("INSERT INTO default.cli_idx VALUES (4, 'd')")  # the index is now behind the table
        assert main(["index", "verify", "default.cli_idx", "--warehouse", warehouse]) == 1
        assert "BEHIND" in capsys.readouterr().out  # right at its snapshot: the next write catches up
        # regression: with the index's snapshot expired by another writer, verify ended with a traceback
        spark.sql("CALL spark_catalog.system.expire_snapshots(table => 'default.cli_idx', "
                  "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)")
        assert main(["index", "verify", "default.cli_idx", "--warehouse", warehouse]) == 1
        out = capsys.readouterr().out
        # nothing could be compared: not reported as right at its snapshot, nor as zero rows
        assert "no longer in the table (expired), so it was not compared" in out and "rows in table    -" in out, out
        assert RowIndex.open(IcebergTable(spark, "default.cli_idx")).ensure_fresh().rows_total == 4
        assert main(["index", "verify", "default.cli_idx", "--warehouse", warehouse]) == 0
    finally:
        spark.sql("DROP TABLE IF EXISTS default.cli_idx PURGE")


def test_a_mistyped_warehouse_is_an_error_and_leaves_no_folder(spark, spark_warehouse, tmp_path, capsys) -> None:
    """Regression: a --warehouse naming no embedded catalog created that folder with an empty catalog in it, and the
    command reported the table missing rather than the warehouse."""
    typo = tmp_path / "warehouse-typo"
    assert main(["index", "verify", "default.anything", "--warehouse", str(typo)]) == 2
    err = capsys.readouterr().err
    assert "--warehouse" in err and "no embedded catalog" in err and str(typo) in err
    assert not typo.exists()


@pytest.mark.iceberg
def test_iceberg_by_name_in_a_dbt_project_with_progress(spark, spark_warehouse, tmp_path, monkeypatch, capsys) -> None:
    """The warehouse comes from the project's profile; the steps are shown when asked for (a terminal)."""
    project = tmp_path / "shop"
    project.mkdir()
    (project / "dbt_project.yml").write_text('name: shop\nversion: "1.0"\nconfig-version: 2\nprofile: shop\n')
    (project / "profiles.yml").write_text(
        f"shop:\n  target: t\n  outputs:\n    t: {{type: partialcow, schema: s, warehouse: {spark_warehouse}}}\n")
    spark.sql("CREATE TABLE default.cli_proj (id bigint) USING iceberg")
    try:
        spark.sql("INSERT INTO default.cli_proj VALUES (1), (2)")
        monkeypatch.setenv("PARTIALCOW_PROGRESS", "1")
        assert main(["index", "rebuild", "default.cli_proj", "--project-dir", str(project), "--key", "id"]) == 0
        monkeypatch.chdir(project)
        assert main(["index", "verify", "default.cli_proj"]) == 0
        captured = capsys.readouterr()
        assert "OK" in captured.out
        assert "done: verifying the row index of default.cli_proj" in captured.err
        monkeypatch.setenv("PARTIALCOW_PROGRESS", "0")
        assert main(["index", "verify", "default.cli_proj"]) == 0
        assert capsys.readouterr().err == ""
    finally:
        spark.sql("DROP TABLE IF EXISTS default.cli_proj PURGE")


def test_an_iceberg_table_is_opened_with_the_profiles_spark_config(tmp_path, monkeypatch) -> None:
    """Regression: ``partialcow index`` took the warehouse from the profile but not its ``spark_config``: a profile
    pointing at its own metastore had the command boot an empty embedded one and report the table missing."""
    import argparse

    from partialcow.cli import index

    project = tmp_path / "proj"
    project.mkdir()
    (project / "dbt_project.yml").write_text("name: p\nversion: '1.0'\nconfig-version: 2\nprofile: p\n")
    (project / "profiles.yml").write_text(json.dumps({"p": {"target": "t", "outputs": {"t": {
        "type": "partialcow", "schema": "s", "warehouse": "wh", "class_cache": False,
        "spark_config": {"spark.hadoop.hive.metastore.uris": "thrift://hms:9083"}}}}}))
    calls = []
    monkeypatch.setattr("partialcow.spark.session.get_or_create_session", lambda **kwargs: calls.append(kwargs))
    args = argparse.Namespace(warehouse=None, project_dir=str(project), profiles_dir=None, target=None,
                              master="local[1]")
    index._session(args, "iceberg")
    (call,) = calls
    assert call["extra"] == {"spark.hadoop.hive.metastore.uris": "thrift://hms:9083"}
    assert call["warehouse"] == str(project / "wh") and call["class_cache"] is False


def test_the_profile_is_found_where_dbt_finds_it(tmp_path, monkeypatch) -> None:
    """Regression: the project's own profiles.yml was read before ~/.dbt's, where dbt (run from another folder)
    reads ~/.dbt's first: the two inspected different warehouses."""
    from partialcow.project import profile_target

    project, home = tmp_path / "proj", tmp_path / "home"
    (home / ".dbt").mkdir(parents=True)
    project.mkdir()
    (project / "dbt_project.yml").write_text("name: p\nversion: '1.0'\nconfig-version: 2\nprofile: p\n")
    for folder, warehouse in ((project, "project_wh"), (home / ".dbt", "/home_wh")):
        (folder / "profiles.yml").write_text(json.dumps({"p": {"target": "t", "outputs": {"t": {
            "type": "partialcow", "schema": "s", "warehouse": warehouse}}}}))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("DBT_PROFILES_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert profile_target(project).warehouse == "/home_wh"
    monkeypatch.chdir(project)  # dbt reads the current folder's profiles.yml first
    assert profile_target(project).warehouse == str(project / "project_wh")
    (home / ".dbt" / "profiles.yml").unlink()
    monkeypatch.chdir(tmp_path)  # nowhere else: the project's, as before
    assert profile_target(project).warehouse == str(project / "project_wh")


def _dead_write(root: Path, data_dir: Path) -> Path:
    """The leftovers of a write killed before its commit: its lease (lock free: its process is gone) and a data file
    no snapshot references."""
    from partialcow.spark.journal import JOURNAL_DIR, data_file_prefix

    write_id = uuid.uuid4().hex
    journal = root / "_partialcow_index" / JOURNAL_DIR
    journal.mkdir(parents=True, exist_ok=True)
    (journal / f"{write_id}.json").write_text(json.dumps({"write_id": write_id, "pid": 0}))
    (journal / f"{write_id}.lock").touch()
    orphan = data_dir / f"{data_file_prefix(write_id)}{uuid.uuid4().hex}.parquet"
    pq.write_table(pa.table({"k": [1]}), orphan)
    return orphan


def test_a_rebuild_recovers_a_dead_write_instead_of_orphaning_its_files(spark, tmp_path, monkeypatch) -> None:
    """Regression: ``index rebuild`` took its write lease with no data folders, so its recovery of a dead write found
    none of that write's files and then removed the write's lease: the files stayed, unreferenced, for good. (Then
    the table by a relative folder, which was looked up as an Iceberg table name before.)"""
    root = tmp_path / "events"
    deltalake.write_deltalake(str(root), pa.table({"k": list(range(100)), "v": ["x"] * 100}))
    orphan = _dead_write(root, root)
    assert main(["index", "rebuild", str(root), "--key", "k", "--buckets", "2"]) == 0
    assert not orphan.exists()
    assert not list((root / "_partialcow_index" / "_writes").iterdir())  # the dead lease went, and the rebuild's own
    monkeypatch.chdir(tmp_path)
    assert main(["index", "verify", "events"]) == 0  # the table's own files are all there
    assert main(["index", "rebuild", "./events"]) == 0


@pytest.mark.iceberg
def test_an_iceberg_rebuild_recovers_a_dead_write(spark, spark_warehouse, capsys) -> None:
    spark.sql("CREATE TABLE default.cli_lease (id bigint) USING iceberg")
    try:
        spark.sql("INSERT INTO default.cli_lease VALUES (1), (2), (3)")
        table = IcebergTable(spark, "default.cli_lease")
        root = Path(local_path(table.location))
        kept = Path(local_path(table.live_files()[0].path))
        orphan = _dead_write(root, root / "data")
        warehouse = str(spark_warehouse)
        assert main(["index", "rebuild", "default.cli_lease", "--warehouse", warehouse, "--key", "id"]) == 0
        assert not orphan.exists() and kept.exists()
        assert main(["index", "verify", "default.cli_lease", "--warehouse", warehouse]) == 0
    finally:
        spark.sql("DROP TABLE IF EXISTS default.cli_lease PURGE")


def test_a_delta_table_in_a_folder_with_a_space_and_a_hash_keeps_its_index_inside(tmp_path) -> None:
    """delta-rs spells a table's root as a percent-encoded URI (``a%20b%231``); read as an Iceberg location (not
    decoded), the index went to a folder named with the escapes, beside the table."""
    root = tmp_path / "a b é#1"
    deltalake.write_deltalake(str(root), pa.table({"k": list(range(50)), "v": ["x"] * 50}))
    assert DeltaRsTable(str(root)).location == str(root)
    assert main(["index", "rebuild", str(root), "--key", "k", "--buckets", "2"]) == 0
    assert (root / "_partialcow_index").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a b é#1"]
    assert main(["index", "verify", f"file://{root}".replace(" ", "%20").replace("#", "%23")]) == 0


def test_a_delta_rebuild_runs_its_workers_on_this_interpreter(tmp_path) -> None:
    """Regression: the Delta session of `partialcow index` left PySpark's default worker Python, `python3` on the
    PATH: run by its full path from a venv that was not activated, a rebuild's Python tasks failed (that Python has
    no pyarrow). Its workers now run the interpreter the command runs, as the embedded session's do."""
    import os
    import subprocess
    import sys

    root = tmp_path / "events"
    deltalake.write_deltalake(str(root), pa.table({"k": list(range(200)), "v": ["x"] * 200}))
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/bin:/bin"  # no venv on it: `python3` is the system's, if any
    script = "import sys; from partialcow.cli import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", script, "index", "rebuild", str(root), "--key", "k", "--master",
                           "local[1]"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_key_the_table_lacks_is_named_with_the_tables_columns(spark, tmp_path, capsys) -> None:
    """Regression: `index rebuild --key K` for a column `k` failed with a Spark analysis error's traceback."""
    root = tmp_path / "events"
    deltalake.write_deltalake(str(root), pa.table({"k": list(range(10)), "v": ["x"] * 10}))
    assert main(["index", "rebuild", str(root), "--key", "K"]) == 2
    err = capsys.readouterr().err
    assert "has no column(s) K (--key; did you mean k?); its columns: k, v" in err
    assert not (root / "_partialcow_index").exists() or not any((root / "_partialcow_index").glob("state-*"))
