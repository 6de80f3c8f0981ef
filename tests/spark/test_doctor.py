"""``partialcow doctor`` without --probe (fast: no JVM start)."""

from __future__ import annotations

import argparse
import json
import shutil
import time

import pytest

from partialcow.spark import doctor


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    doctor.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_missing_runtime_jar_makes_iceberg_unusable(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.run(_args("--iceberg-runtime", "/nonexistent/iceberg.jar", "--output", "json")) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["iceberg_usable"] is False
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["iceberg runtime"]
    assert "/nonexistent/iceberg.jar" in failed[0]["detail"]


def test_delta_jar_failure_does_not_block_iceberg(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    code = doctor.run(_args("--iceberg-runtime", "maven", "--delta-jar", str(tmp_path / "nope.jar"), "--output", "json"))
    report = json.loads(capsys.readouterr().out)
    delta = next(c for c in report["checks"] if c["name"] == "delta-spark")
    assert delta["status"] == "fail" and "nope.jar" in delta["detail"]
    assert code == (0 if report["iceberg_usable"] else 1)


@pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH")
def test_text_report_is_fast_and_names_each_component(capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    doctor.run(_args("--iceberg-runtime", "maven"))
    elapsed = time.monotonic() - start
    out = capsys.readouterr().out
    for name in ("java", "pyspark", "iceberg runtime", "delta-spark", "delta-rs", "warehouse"):
        assert name in out
    assert "Iceberg in Spark: usable" in out
    assert elapsed < 10  # no Spark start without --probe


def test_missing_java_fails_the_iceberg_check(monkeypatch: pytest.MonkeyPatch, tmp_path, capsys) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert doctor.run(_args("--iceberg-runtime", "maven", "--output", "json")) == 1
    java = next(c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "java")
    assert java["status"] == "fail" and "no-jdk" in java["detail"]


PROFILE = """shop:
  target: local
  outputs:
    local: {type: partialcow, schema: s, warehouse: "{{ env_var('PCOW_TEST_WH', 'lake') }}", iceberg_runtime: maven}
    other: {type: partialcow, schema: s, warehouse: /tmp/elsewhere}
"""


def _project(root) -> None:
    (root / "models").mkdir(parents=True)
    (root / "dbt_project.yml").write_text('name: shop\nversion: "1.0"\nconfig-version: 2\nprofile: shop\n')
    (root / "profiles.yml").write_text(PROFILE)


def _checks(capsys) -> dict:
    return {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}


def test_doctor_checks_the_warehouse_of_the_project_around_it(monkeypatch, tmp_path, capsys) -> None:
    """issue 27: `partialcow doctor` looked at ./warehouse of the current folder, not the project's warehouse."""
    monkeypatch.delenv("DBT_PROJECT_DIR", raising=False)
    monkeypatch.delenv("DBT_PROFILES_DIR", raising=False)
    monkeypatch.delenv("PCOW_TEST_WH", raising=False)
    root = tmp_path / "shop"
    _project(root)
    monkeypatch.chdir(root / "models")  # inside the project, as dbt users are
    doctor.run(_args("--output", "json"))
    checks = _checks(capsys)
    assert checks["warehouse"]["detail"].startswith(f"{root / 'lake'} ")
    assert "profile shop, target local" in checks["project"]["detail"]
    assert "Maven" in checks["iceberg runtime"]["detail"] or "maven" in checks["iceberg runtime"]["detail"]

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PCOW_TEST_WH", "from_env")
    doctor.run(_args("--project-dir", str(root), "--output", "json"))
    assert _checks(capsys)["warehouse"]["detail"].startswith(f"{root / 'from_env'} ")
    doctor.run(_args("--project-dir", str(root), "--target", "other", "--output", "json"))
    assert _checks(capsys)["warehouse"]["detail"].startswith("/tmp/elsewhere ")
    doctor.run(_args("--project-dir", str(root), "--warehouse", str(tmp_path / "given"), "--output", "json"))
    assert _checks(capsys)["warehouse"]["detail"].startswith(f"{tmp_path / 'given'} ")


def test_a_delta_profile_without_delta_spark_is_not_usable(monkeypatch, tmp_path, capsys) -> None:
    """Regression: the exit code counted Iceberg's checks only, so a Delta profile whose delta-spark jar is missing
    was reported usable (exit 0), and every Delta model then failed in dbt."""
    monkeypatch.delenv("DBT_PROFILES_DIR", raising=False)
    root = tmp_path / "shop"
    (root / "models").mkdir(parents=True)
    (root / "dbt_project.yml").write_text('name: shop\nversion: "1.0"\nconfig-version: 2\nprofile: shop\n')
    (root / "profiles.yml").write_text(json.dumps({"shop": {"target": "t", "outputs": {"t": {
        "type": "partialcow", "schema": "s", "table_format": "delta", "delta_jars": [str(tmp_path / "no.jar")]}}}}))
    monkeypatch.chdir(root)
    assert doctor.run(_args("--output", "json")) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["table_format"], report["usable"]) == ("delta", False)
    assert report["checks"][[c["name"] for c in report["checks"]].index("delta-spark")]["status"] == "fail"


def test_the_probe_takes_the_profiles_format_master_and_spark_config(monkeypatch, tmp_path) -> None:
    """issue 27: `doctor --probe` started an Iceberg session on local[1] whatever the profile said: a Delta profile,
    a cluster master or a spark_config setting that breaks the session went unchecked."""
    monkeypatch.delenv("DBT_PROFILES_DIR", raising=False)
    root = tmp_path / "shop"
    (root / "models").mkdir(parents=True)
    (root / "dbt_project.yml").write_text('name: shop\nversion: "1.0"\nconfig-version: 2\nprofile: shop\n')
    (root / "profiles.yml").write_text(json.dumps({"shop": {"target": "t", "outputs": {"t": {
        "type": "partialcow", "schema": "s", "table_format": "delta", "delta_jars": ["/jars/delta.jar"],
        "master": "spark://127.0.0.1:7077", "class_cache": False,
        "spark_config": {"spark.sql.shuffle.partitions": 3, "spark.sql.warehouse.dir": "/lake",
                         "spark.sql.catalog.spark_catalog.uri": "thrift://metastore:9083"}}}}}))
    monkeypatch.chdir(root)
    _, settings = doctor._settings(_args())
    session, left_out = doctor.probe_settings(settings, str(tmp_path / "probe"))
    assert (session.table_format, session.master, session.delta_jars, session.class_cache) == (
        "delta", "spark://127.0.0.1:7077", ("/jars/delta.jar",), False)
    assert dict(session.extra) == {"spark.sql.shuffle.partitions": "3"}
    assert left_out == ["spark.sql.catalog.spark_catalog.uri", "spark.sql.warehouse.dir"]
    assert session.warehouse == str(tmp_path / "probe")
    # without a master in the profile, the probe keeps to one core
    assert doctor.probe_settings(doctor.DoctorSettings(), "/tmp/p")[0].master == "local[1]"
