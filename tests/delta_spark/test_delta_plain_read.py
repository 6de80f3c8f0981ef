"""A Delta snapshot's data files read as plain Parquet (``DeltaRsTable.plain_parquet_files``, used by the snapshot
narrowing): for every table it lists, Spark's own Parquet reader given the table's schema reads what delta-spark
reads; every table where that could differ is left to delta-spark (None)."""

from __future__ import annotations

import pytest

from partialcow.dbt_adapter.snapshots import _plain_parquet_files

pytestmark = [pytest.mark.spark]

# case -> (DDL after the name, statements run after it ({t}: the table), whether the files read as the table)
CASES = {
    "rows inserted, updated and deleted": (
        "(id BIGINT, v STRING, at TIMESTAMP, amount DECIMAL(7,2)) USING delta",
        ["INSERT INTO {t} VALUES (1, 'a', timestamp'2026-01-01 10:00:00', 1.50), (2, 'b', null, null)",
         "INSERT INTO {t} VALUES (3, 'c', timestamp'1900-01-01 00:00:00', -3.25)",
         "UPDATE {t} SET v = 'B' WHERE id = 2", "DELETE FROM {t} WHERE id = 1"], True),
    "timestamp without time zone": (
        "(id BIGINT, at TIMESTAMP_NTZ, d DATE) USING delta",
        ["INSERT INTO {t} VALUES (1, timestamp_ntz'2026-03-29 02:30:00', date'2026-03-29'), (2, null, null)"], True),
    "column added later": (
        "(id BIGINT, v STRING) USING delta",
        ["INSERT INTO {t} VALUES (1, 'a')", "ALTER TABLE {t} ADD COLUMNS (w INT)", "INSERT INTO {t} VALUES (2, 'b', 7)"],
        True),
    "deletion vectors on, none written": (
        "(id BIGINT, v STRING) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
        ["INSERT INTO {t} VALUES (1, 'a'), (2, 'b')"], True),
    "a deletion vector written": (
        "(id BIGINT, v STRING) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
        ["INSERT INTO {t} SELECT id, cast(id AS string) FROM range(100)", "DELETE FROM {t} WHERE id = 7"], False),
    "partitioned": (
        "(id BIGINT, p STRING) USING delta PARTITIONED BY (p)", ["INSERT INTO {t} VALUES (1, 'x')"], False),
    "column mapping with a rename": (
        "(id BIGINT, v STRING) USING delta TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')",
        ["INSERT INTO {t} VALUES (1, 'a')", "ALTER TABLE {t} RENAME COLUMN v TO v2"], False),
    "no data file": ("(id BIGINT) USING delta", [], False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plain_files_read_as_delta_spark_reads(spark, schema, case: str) -> None:
    ddl, statements, plain = CASES[case]
    name = f"{schema}.plain_{abs(hash(case)) % 10_000}"
    spark.sql(f"CREATE TABLE {name} {ddl}")
    for statement in statements:
        spark.sql(statement.format(t=name))
    files = _plain_parquet_files(spark, name)
    if not plain:
        assert files is None
        return
    assert files
    read = spark.read.schema(spark.table(name).schema).parquet(*files)
    assert sorted(read.collect(), key=str) == sorted(spark.table(name).collect(), key=str)
    assert read.count() == spark.table(name).count() > 0
