"""A batch whose rewrite fails in one file after another file's rewrite was written leaves no file behind.

Regression: the rewrites run side by side (driver threads, or Spark tasks); when one raised, the files the others had
written stayed in the table's folder for good: no commit took them, the write's lease was released as after any
refused batch, so no later write's recovery looked for them either.
"""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from partialcow.spark import rewrite_job
from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import local_path, open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

SPEC = ChangeSpec(key_columns=("k",), op_column="_op", model="half_rewritten")
SCHEMA = "k bigint, v string, _op string"


def _files(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, names in os.walk(root) for f in names}


def test_a_rewrite_failing_in_one_file_removes_the_files_of_the_others(spark, monkeypatch):
    schema = f"pcow_half_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    try:
        create_table(spark, name, spark.createDataFrame([(k, f"v{k}", "I") for k in range(100)], SCHEMA), SPEC)
        # a second data file: a batch of new keys only
        apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                      spark.createDataFrame([(k, f"v{k}", "I") for k in range(100, 200)], SCHEMA), SPEC)
        spark.catalog.refreshTable(name)
        assert spark.sql(f"select count(*) from {name}.files").first()[0] >= 2
        root = local_path(spark.sql(f"describe table extended {name}").where("col_name = 'Location'").first()[1])
        before = _files(root)
        real, calls, lock = rewrite_job.rewrite_changed_file, [], threading.Lock()

        def second_fails(*args, **kwargs):  # type: ignore[no-untyped-def]
            with lock:
                calls.append(1)
                nth = len(calls)
            if nth == 2:
                raise RuntimeError("this file's rewrite failed")
            return real(*args, **kwargs)

        monkeypatch.setattr(rewrite_job, "rewrite_changed_file", second_fails)
        with pytest.raises(RuntimeError, match="rewrite failed"):
            apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                          spark.createDataFrame([(5, "new", "U"), (150, "new", "U")], SCHEMA), SPEC)
        monkeypatch.undo()
        assert len(calls) == 2
        assert _files(root) == before
        apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                      spark.createDataFrame([(5, "new", "U"), (150, "new", "U")], SCHEMA), SPEC)
        spark.catalog.refreshTable(name)
        assert dict(spark.sql(f"select k, v from {name} where k in (5, 150)").collect()) == {5: "new", 150: "new"}
    finally:
        spark.sql(f"drop schema {schema} cascade")
