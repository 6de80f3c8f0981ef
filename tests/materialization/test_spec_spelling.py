"""Column names a model's config spells in other letter case than its rows (``unique_key='ID'`` for a column ``id``):
resolved as Spark and dbt-spark's MERGE resolve them, on the first build and on every batch (regression: "key
column 'ID' is missing from the changes")."""

from __future__ import annotations

import uuid

import pytest

from partialcow.spark.changes import ChangeSpec, apply_changes, create_table
from partialcow.spark.tables import open_table

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.usefixtures("pipeline_path")]

SPEC = ChangeSpec(key_columns=("ID",), op_column="_OP", sequence_column="Seq", model="spelled")
SCHEMA = "id bigint, v string, _op string, seq bigint"


def test_names_in_other_letter_case_are_the_batchs_columns(spark):
    schema = f"pcow_spell_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create schema {schema}")
    name = f"{schema}.t"
    try:
        create_table(spark, name, spark.createDataFrame([(k, f"v{k}", "I", 1) for k in range(5)], SCHEMA), SPEC)
        batch = [(1, "new", "U", 2), (1, "older", "U", 1), (2, None, "D", 2), (9, "nine", "I", 2)]
        metrics = apply_changes(spark, open_table(spark, name, table_format="iceberg"),
                                spark.createDataFrame(batch, SCHEMA), SPEC)
        assert (metrics.rows_updated, metrics.rows_deleted, metrics.rows_inserted) == (1, 1, 1)
        rows = {r.id: r.v for r in spark.table(name).collect()}
        assert rows == {0: "v0", 1: "new", 3: "v3", 4: "v4", 9: "nine"}
        assert spark.table(name).columns == ["id", "v", "seq"]
    finally:
        spark.sql(f"drop schema {schema} cascade")


def test_an_op_code_in_two_roles_is_refused() -> None:
    """Regression: ``op_codes={'delete': ['U', 'D']}`` (update kept its default ``['U']``) was accepted, and every
    update then deleted its row (deletes were tested first), silently."""
    from dbt_common.exceptions import DbtRuntimeError

    from partialcow.dbt_adapter.materialization import change_spec

    config = {"unique_key": "id", "op_column": "_op", "op_codes": {"delete": ["U", "D"]}}
    with pytest.raises(DbtRuntimeError, match=r"model m: op code\(s\) \['U'\] are in more than one of insert, update "
                                              r"and delete .*delete \['U', 'D'\]"):
        change_spec(config, model="m")
    assert change_spec({**config, "op_codes": {"delete": ["X", "D"]}}, model="m").delete_ops == ("X", "D")
