"""``partialcow index verify|rebuild``: a Delta table by path, an Iceberg table by name with --warehouse."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from index_oracle import corrupt_bucket

from partialcow.cli import main
from partialcow.index import RowIndex
from partialcow.table.delta import DeltaRsTable
from partialcow.table.iceberg import IcebergTable

deltalake = pytest.importorskip("deltalake")

pytestmark = pytest.mark.spark


def test_delta_rebuild_verify_and_corruption(spark, tmp_path, capsys) -> None:
    root = str(tmp_path / "events")
    for f in range(2):
        deltalake.write_deltalake(root, pa.table({"k": list(range(f * 300, f * 300 + 300)), "v": ["x"] * 300}), mode="append")
    assert main(["index", "verify", root]) == 1  # no index yet: a typed error, exit 1
    assert "no row index" in capsys.readouterr().err
    assert main(["index", "rebuild", root]) == 1  # first build needs --key
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


@pytest.mark.iceberg
def test_iceberg_by_name_with_warehouse(spark, spark_warehouse, capsys) -> None:
    spark.sql("CREATE TABLE default.cli_idx (id bigint, s string) USING iceberg")
    try:
        spark.sql("INSERT INTO default.cli_idx VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        warehouse = str(spark_warehouse)  # the fixture session's warehouse: the CLI reuses that session
        assert main(["index", "verify", "default.cli_idx"]) == 1
        assert "--warehouse" in capsys.readouterr().err
        assert main(["index", "rebuild", "default.cli_idx", "--warehouse", warehouse, "--key", "id"]) == 0
        assert main(["index", "verify", "default.cli_idx", "--warehouse", warehouse]) == 0
        spark.sql("INSERT INTO default.cli_idx VALUES (4, 'd')")  # the index is now behind the table
        assert main(["index", "verify", "default.cli_idx", "--warehouse", warehouse]) == 1
        assert "FAILED" in capsys.readouterr().out
        assert RowIndex.open(IcebergTable(spark, "default.cli_idx")).ensure_fresh().rows_total == 4
        assert main(["index", "verify", "default.cli_idx", "--warehouse", warehouse]) == 0
    finally:
        spark.sql("DROP TABLE IF EXISTS default.cli_idx PURGE")


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
