"""``partial_cow_incremental`` through dbt on a ``table_format: delta`` profile (dbt runs in this process).

SQL and Python models: the first run and ``--full-refresh`` create the Delta table through Spark, incremental runs
apply batches; each state is compared with the DuckDB oracle and read by delta-spark, delta-rs and polars. A first
build that died before its commit is built again. What cannot work on a Delta profile says so: an Iceberg model
(one session catalog holds one table format) and branches (implemented on Iceberg tables).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt

from cdc_oracle import CdcOracle, sorted_rows
from delta_readers import DeltaCheck, assert_readers_agree

from partialcow.index import RowIndex
from partialcow.spark.tables import delta_root, open_table

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.slow]

COLUMNS = ("id", "v", "_ts")
BATCHES = {  # (id, v, _op, _ts)
    1: [(1, 10, "I", 1), (2, 20, "I", 1), (3, 30, "I", 1), (3, 31, "U", 2), (4, 40, "I", 1)],
    2: [(1, 11, "U", 5), (2, None, "D", 5), (4, 41, "U", 5), (5, 50, "U", 5), (9, None, "D", 5)],
    3: [(7, 70, "I", 9), (8, 80, "I", 9)],
}
SQL_MODEL = """
{{ config(materialized='partial_cow_incremental', unique_key='id', op_column='_op', sequence_column='_ts',
          tblproperties={'delta.checkpointInterval': '5'}) }}
{% set rows = %s[var('batch') | string] %}
select * from values {% for r in rows %}({{ r[0] }}L, cast({{ 'null' if r[1] is none else r[1] }} as int),
  '{{ r[2] }}', {{ r[3] }}L){{ ',' if not loop.last }}{% endfor %} as t(id, v, _op, _ts)
""".replace("%s", repr({str(k): [list(r) for r in v] for k, v in BATCHES.items()}))

PY_MODEL = f'''
def model(dbt, session):
    dbt.config(materialized="partial_cow_incremental", unique_key="id", op_column="_op", sequence_column="_ts")
    batches = {BATCHES!r}
    return session.createDataFrame(batches[2 if dbt.is_incremental else 1], "id bigint, v int, _op string, _ts bigint")
'''

ICEBERG_MODEL = """
{{ config(materialized='partial_cow_incremental', unique_key='id', file_format='iceberg') }}
select 1L as id
"""


def _arrow(batch: int) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(("id", "v", "_op", "_ts"), r)) for r in BATCHES[batch]])


def _response(project, model: str) -> dict:
    results = json.loads(Path(project.project_root, "target", "run_results.json").read_text())["results"]
    return next(r for r in results if r["unique_id"].endswith(f".{model}"))["adapter_response"]


class TestDeltaModels:
    @pytest.fixture(scope="class")
    def models(self):
        return {"changes.sql": SQL_MODEL, "py_changes.py": PY_MODEL}

    def test_first_build_batches_and_full_refresh(self, project, spark):
        name = f"{project.test_schema}.changes"
        oracle = CdcOracle(key_columns=("id",), columns=COLUMNS, op_column="_op", sequence_column="_ts")
        expected_versions: dict[int, list[dict]] = {}
        for step, (batch, args) in enumerate([(1, []), (2, []), (3, ["--full-refresh"])]):
            if args:  # a full refresh starts again from the batch alone
                oracle = CdcOracle(key_columns=("id",), columns=COLUMNS, op_column="_op", sequence_column="_ts")
            counts = oracle.apply(_arrow(batch))
            run_dbt(["run", "--select", "changes", "--vars", f"batch: {batch}", *args])
            response = _response(project, "changes")
            assert (response["rows_inserted"], response["rows_updated"], response["rows_deleted"]) == (
                counts.inserted, counts.updated, counts.deleted), (step, response)
            assert sorted_rows(spark.table(name).select(*COLUMNS).collect()) == oracle.rows(), step
            detail = spark.sql(f"DESCRIBE DETAIL {name}").first()
            assert detail["format"] == "delta"
            assert detail["properties"].get("delta.checkpointInterval") == "5"  # the model's tblproperties
            assert "partialcow.create-pending" not in detail["properties"]
            version = int(spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()["version"])
            expected_versions[version] = [dict(zip(COLUMNS, r)) for r in oracle.rows()]
        index = RowIndex.open(open_table(spark, name, table_format="delta").format_table)
        assert index.verify().ok
        assert_readers_agree([DeltaCheck(delta_root(spark, name), expected=expected_versions)], spark=spark)

    def test_python_model_batches(self, project, spark):
        oracle = CdcOracle(key_columns=("id",), columns=COLUMNS, op_column="_op", sequence_column="_ts")
        for batch in (1, 2):
            counts = oracle.apply(_arrow(batch))
            run_dbt(["run", "--select", "py_changes"])
            response = _response(project, "py_changes")
            assert (response["rows_inserted"], response["rows_updated"], response["rows_deleted"]) == (
                counts.inserted, counts.updated, counts.deleted), (batch, response)
            rows = spark.table(f"{project.test_schema}.py_changes").select(*COLUMNS).collect()
            assert sorted_rows(rows) == oracle.rows(), batch
        assert spark.sql(f"DESCRIBE DETAIL {project.test_schema}.py_changes").first()["format"] == "delta"

    def test_a_first_build_that_died_is_built_again(self, project, spark):
        """A table left with the pending marker and no rows (a first build killed before its commit, which adds the
        rows and removes the marker at once) is rebuilt by the next incremental run instead of being added to."""
        name = f"{project.test_schema}.changes"
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.sql(f"CREATE TABLE {name} (id BIGINT, v INT, _ts BIGINT) USING delta "
                  "TBLPROPERTIES ('partialcow.create-pending' = 'true')")
        run_dbt(["run", "--select", "changes", "--vars", "batch: 1"])
        oracle = CdcOracle(key_columns=("id",), columns=COLUMNS, op_column="_op", sequence_column="_ts")
        oracle.apply(_arrow(1))
        assert sorted_rows(spark.table(name).select(*COLUMNS).collect()) == oracle.rows()
        assert _response(project, "changes")["_message"].startswith("CREATE")

    def test_rows_another_writer_added_after_a_dead_build_are_kept(self, project, spark):
        """Regression: a pending table that another writer filled (an INSERT after the build died, or a RESTORE to
        the empty first version and an INSERT) was rebuilt from the batch alone: their rows were lost, silently.
        Its rows are the table's now: the batch applies to them."""
        name = f"{project.test_schema}.changes"
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.sql(f"CREATE TABLE {name} (id BIGINT, v INT, _ts BIGINT) USING delta "
                  "TBLPROPERTIES ('partialcow.create-pending' = 'true')")
        spark.sql(f"INSERT INTO {name} VALUES (1, 100, 0), (99, 99, 0)")
        run_dbt(["run", "--select", "changes", "--vars", "batch: 1"])
        oracle = CdcOracle(key_columns=("id",), columns=COLUMNS, op_column="_op", sequence_column="_ts")
        oracle.apply(pa.table({"id": [1, 99], "v": [100, 99], "_op": ["I", "I"], "_ts": [0, 0]}))
        oracle.apply(_arrow(1))
        assert sorted_rows(spark.table(name).select(*COLUMNS).collect()) == oracle.rows()
        assert not _response(project, "changes")["_message"].startswith("CREATE")

    def test_a_model_whose_first_build_died_is_not_incremental(self, project, spark):
        """Regression: ``is_incremental()`` was true over the table a killed first build left, so the model chose
        its rows as for an existing table (an incremental filter such as ``where _ts > (select max(_ts) from
        {{ this }})`` gives none there, every run after) and the rebuild created the table from those alone. Here
        the Python model takes batch 2 when incremental, batch 1 on a first build."""
        name = f"{project.test_schema}.py_changes"
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.sql(f"CREATE TABLE {name} (id BIGINT, v INT, _ts BIGINT) USING delta "
                  "TBLPROPERTIES ('partialcow.create-pending' = 'true')")
        run_dbt(["run", "--select", "py_changes"])
        oracle = CdcOracle(key_columns=("id",), columns=COLUMNS, op_column="_op", sequence_column="_ts")
        oracle.apply(_arrow(1))
        assert sorted_rows(spark.table(name).select(*COLUMNS).collect()) == oracle.rows()


class TestWhatADeltaProfileRefuses:
    @pytest.fixture(scope="class")
    def models(self):
        return {"iceberg_changes.sql": ICEBERG_MODEL}

    def test_an_iceberg_model_is_refused(self, project):
        results = run_dbt(["run", "--select", "iceberg_changes"], expect_pass=False)
        message = results.results[0].message
        assert "iceberg_changes" in message and "one session catalog holds one table format" in message, message

    def test_branches_are_refused(self, project):
        from dbt.tests.util import run_dbt_and_capture

        _, out = run_dbt_and_capture(["run-operation", "branch_create", "--args", "{name: dev}"], expect_pass=False)
        assert "branches are implemented for Iceberg tables" in out and "table_format: delta" in out, out[-2000:]


SNAPSHOT = """
{% snapshot snap %}
{{ config(unique_key='id', strategy='check', check_cols=['v'], target_schema=schema) }}
select * from values (1L, 10), (2L, 20) as t(id, v)
{% endsnapshot %}
"""


class TestDeltaSnapshotPending:
    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snap.sql": SNAPSHOT}

    def test_a_first_snapshot_that_died_is_built_again(self, project, spark):
        """A snapshot's Delta table left with the pending marker and no rows (its first run killed before the
        commit, which adds the rows and removes the marker at once) is built again by the next `dbt snapshot`, not
        treated as an empty snapshot (every source row would be an insert against it, and no update ever closed)."""
        name = f"{project.test_schema}.snap"
        run_dbt(["snapshot"])
        columns = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in spark.table(name).schema)
        spark.sql(f"DROP TABLE {name}")
        spark.sql(f"CREATE TABLE {name} ({columns}) USING delta TBLPROPERTIES ('partialcow.create-pending' = 'true')")
        run_dbt(["snapshot"])
        rows = spark.sql(f"SELECT id, v, dbt_valid_to IS NULL FROM {name}").collect()
        assert sorted(tuple(r) for r in rows) == [(1, 10, True), (2, 20, True)]
        assert "partialcow.create-pending" not in spark.sql(f"DESCRIBE DETAIL {name}").first()["properties"]


CONTRACTED = """
{{ config(materialized='partial_cow_incremental', unique_key='id', op_column='_op') }}
select cast({{ var('id', 1) }} as bigint) as id, cast({{ var('v', 7) }} as int) as v, 'U' as _op
"""

CONTRACT_YML = """
models:
  - name: contracted
    config:
      contract: {enforced: true}
    constraints:
      - type: check
        name: v_not_negative
        expression: "v >= 0"
    columns:
      - name: id
        data_type: bigint
        constraints: [{type: not_null}]
      - name: v
        data_type: int
"""


class TestDeltaContractConstraints:
    @pytest.fixture(scope="class")
    def models(self):
        return {"contracted.sql": CONTRACTED, "schema.yml": CONTRACT_YML}

    def test_a_contracts_constraints_are_set_on_the_first_build_and_hold_for_batches(self, project, spark):
        """Regression: an enforced contract's constraints were never set on a ``partial_cow_incremental`` Delta
        table (dbt-spark sets them on its Delta tables), so a batch breaking them was committed."""
        name = f"{project.test_schema}.contracted"
        run_dbt(["run"])
        properties = spark.sql(f"DESCRIBE DETAIL {name}").first()["properties"]
        assert properties.get("delta.constraints.v_not_negative") == "v >= 0", properties
        assert not spark.table(name).schema["id"].nullable
        version = spark.sql(f"DESCRIBE HISTORY {name}").first()["version"]
        results = run_dbt(["run", "--vars", "{id: 2, v: -1}"], expect_pass=False)
        assert "v_not_negative" in results.results[0].message or "v >= 0" in results.results[0].message, \
            results.results[0].message
        assert spark.sql(f"DESCRIBE HISTORY {name}").first()["version"] == version
        run_dbt(["run", "--vars", "{id: 2, v: 8}"])
        assert sorted(tuple(r) for r in spark.table(name).collect()) == [(1, 7), (2, 8)]


class TestParquetTableBecomesDeltaModel:
    """A dbt-spark Parquet table model switched to partial_cow_incremental on a Delta profile: a batch is refused
    (the table stays), naming --full-refresh, which rebuilds it as a Delta table; batches then apply."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"m.sql": "{{ config(materialized=var('kind'), file_format=var('format'), unique_key='id') }}\n"
                         "select {{ var('id') }}L as id, 'v{{ var('id') }}' as name"}

    def test_switch_needs_a_full_refresh_and_then_works(self, project, spark):
        from dbt.tests.util import run_dbt_and_capture

        name = f"{project.test_schema}.m"
        run_dbt(["run", "--vars", "{kind: table, format: parquet, id: 1}"])
        switched = "{kind: partial_cow_incremental, format: delta, id: 2}"
        _, log = run_dbt_and_capture(["run", "--vars", switched], expect_pass=False)
        assert "is not a Delta table" in log and "`dbt run --full-refresh --select m` rebuilds" in log, log[-3000:]
        assert [tuple(r) for r in spark.table(name).collect()] == [(1, "v1")]
        run_dbt(["run", "--full-refresh", "--vars", switched])
        run_dbt(["run", "--vars", "{kind: partial_cow_incremental, format: delta, id: 3}"])
        assert sorted(tuple(r) for r in spark.table(name).collect()) == [(2, "v2"), (3, "v3")]
        assert spark.sql(f"DESCRIBE DETAIL {name}").first()["format"] == "delta"
        # the model's own Delta table: a full refresh is a new version of it, history kept (never dropped)
        versions = spark.sql(f"DESCRIBE HISTORY {name}").count()
        run_dbt(["run", "--full-refresh", "--vars", "{kind: partial_cow_incremental, format: delta, id: 4}"])
        assert spark.sql(f"DESCRIBE HISTORY {name}").count() == versions + 1
        assert [tuple(r) for r in spark.table(name).collect()] == [(4, "v4")]


class TestIcebergTableBecomesDeltaModel:
    """A model moved from an Iceberg profile to a Delta one: its Iceberg table is external to the metastore, so the
    Delta session's drop left its files where the Delta table goes, and the --full-refresh the refusal names failed
    (DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION) with the old table gone, as did every run after it. Now it is
    refused before the drop, naming the folder (other tables may read its files: it is not deleted for the user);
    with the folder removed, the full refresh builds the Delta table. The table is simulated (no Iceberg in a Delta
    session): an external table marked ``table_type=ICEBERG`` in the metastore, with an Iceberg table's folders at
    the model's default location."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"m.sql": "{{ config(materialized='partial_cow_incremental', unique_key='id') }}\n"
                         "select {{ var('id') }}L as id, 'v{{ var('id') }}' as name"}

    def test_the_full_refresh_builds_the_delta_table_where_the_iceberg_one_was(self, project, spark):
        from dbt.tests.util import run_dbt_and_capture

        name = f"{project.test_schema}.m"
        schema_location = spark.sql(f"describe schema {project.test_schema}").where("info_name = 'Location'").first()
        location = f"{schema_location['info_value'].rstrip('/')}/m"
        folder = Path(location.removeprefix("file:"))
        (folder / "metadata").mkdir(parents=True)
        (folder / "metadata" / "00000-x.metadata.json").write_text("{}")
        (folder / "data").mkdir()
        spark.sql(f"create table {name} (id bigint, name string) using parquet location '{location}' "
                  "tblproperties ('table_type'='ICEBERG')")
        _, log = run_dbt_and_capture(["run", "--vars", "{id: 1}"], expect_pass=False)
        assert "rebuilds" in log and (folder / "metadata").exists(), log[-3000:]  # refused, nothing removed
        _, log = run_dbt_and_capture(["run", "--full-refresh", "--vars", "{id: 2}"], expect_pass=False)
        assert "is an Iceberg table whose files lie in" in log and "Remove that folder" in log, log[-3000:]
        assert spark.catalog.tableExists(name) and (folder / "metadata").exists()  # left as it was
        shutil.rmtree(folder)
        run_dbt(["run", "--full-refresh", "--vars", "{id: 2}"])
        assert spark.sql(f"DESCRIBE DETAIL {name}").first()["format"] == "delta"
        run_dbt(["run", "--vars", "{id: 3}"])
        assert sorted(tuple(r) for r in spark.table(name).collect()) == [(2, "v2"), (3, "v3")]


class TestIcebergSnapshotOnADeltaProfile:
    """A snapshot built under an Iceberg profile, run after the profile moved to Delta: every run failed with a raw
    Java error (a snapshot has no --full-refresh). It is refused naming the snapshot and the profile it needs, and
    its table is left as it was (simulated as in TestIcebergTableBecomesDeltaModel)."""

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snap.sql": "{% snapshot snap %}\n{{ config(unique_key='id', strategy='check', check_cols=['name'], "
                            "target_schema=target.schema) }}\nselect 1L as id, 'a' as name\n{% endsnapshot %}\n"}

    def test_refused_naming_the_profile(self, project, spark):
        from dbt.tests.util import run_dbt_and_capture

        name = f"{project.test_schema}.snap"
        spark.sql(f"create table {name} (id bigint, name string) using parquet tblproperties ('table_type'='ICEBERG')")
        _, log = run_dbt_and_capture(["snapshot"], expect_pass=False)
        assert "snapshot snap: its table" in log and "is an Iceberg table" in log and "table_format: iceberg" in log, \
            log[-3000:]
        assert spark.catalog.tableExists(name) and spark.table(name).count() == 0


class TestIcebergIncrementalOnADeltaProfile:
    """A dbt-spark incremental model built under an Iceberg profile, run after the profile moved to Delta: its MERGE
    failed in every run with Spark's "MERGE INTO TABLE is not supported temporarily". It is refused before anything
    runs, naming the profile and --full-refresh, and the table is left as it was (simulated as in
    TestIcebergTableBecomesDeltaModel)."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"m.sql": "{{ config(materialized='incremental', unique_key='id', incremental_strategy='merge') }}\n"
                         "select 1L as id, 'a' as name"}

    def test_refused_naming_the_profile_and_full_refresh(self, project, spark):
        from dbt.tests.util import run_dbt_and_capture

        name = f"{project.test_schema}.m"
        spark.sql(f"create table {name} (id bigint, name string) using parquet tblproperties ('table_type'='ICEBERG')")
        _, log = run_dbt_and_capture(["run"], expect_pass=False)
        assert "model m: its table" in log and "is an Iceberg table" in log and "table_format: iceberg" in log \
            and "--full-refresh" in log, log[-3000:]
        assert spark.catalog.tableExists(name) and spark.table(name).count() == 0


class TestUntypedColumnOnDelta:
    """Regression: a first build whose query had a bare NULL column made a Delta column of type void. Spark then
    failed to read the table at all ("Couldn't find n#1"), and a later batch's value of that column was dropped
    ("nothing changed, nothing committed"). Now the first build, a full refresh and a batch adding such a column
    (append_new_columns) are refused, naming the column."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"m.sql": "{{ config(materialized='partial_cow_incremental', unique_key='id', "
                         "on_schema_change=var('osc', 'ignore')) }}\n"
                         "select {{ var('id') }}L as id, {{ var('n') }} as n"
                         "{% if var('extra', none) is not none %}, {{ var('extra') }} as extra{% endif %}"}

    def test_refused_naming_the_column_and_the_table_stays(self, project, spark):
        from dbt.tests.util import run_dbt_and_capture

        name = f"{project.test_schema}.m"
        _, log = run_dbt_and_capture(["run", "--vars", "{id: 1, n: 'null'}"], expect_pass=False)
        assert "model m: column(s) n have no type" in log and "cast(null as int) as n" in log, log[-3000:]
        assert not spark.catalog.tableExists(name)
        run_dbt(["run", "--vars", "{id: 1, n: 'cast(null as int)'}"])
        run_dbt(["run", "--vars", "{id: 1, n: 5}"])
        assert [tuple(r) for r in spark.table(name).collect()] == [(1, 5)]
        versions = spark.sql(f"DESCRIBE HISTORY {name}").count()
        _, log = run_dbt_and_capture(["run", "--full-refresh", "--vars", "{id: 2, n: 'null'}"], expect_pass=False)
        assert "column(s) n have no type" in log, log[-3000:]
        assert spark.sql(f"DESCRIBE HISTORY {name}").count() == versions
        assert [tuple(r) for r in spark.table(name).collect()] == [(1, 5)]
        # nor does a batch add one (append_new_columns): Delta took `ADD COLUMNS (extra void)`
        added = "{id: 1, n: 6, extra: 'null', osc: append_new_columns}"
        _, log = run_dbt_and_capture(["run", "--vars", added], expect_pass=False)
        assert "column(s) extra have no type" in log, log[-3000:]
        assert spark.sql(f"DESCRIBE HISTORY {name}").count() == versions
        assert [tuple(r) for r in spark.table(name).collect()] == [(1, 5)]


class TestSparkIncrementalBecomesDeltaModel:
    """The common migration on Delta: a dbt-spark incremental merge model switched to partial_cow_incremental keeps
    its table and history; the next batch finds the rows delta-spark wrote, updates, deletes and inserts."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"m.sql": (
            "{% if var('ours', false) %}"
            "{{ config(materialized='partial_cow_incremental', unique_key='id', op_column='op') }}"
            "{% else %}"
            "{{ config(materialized='incremental', incremental_strategy='merge', file_format='delta', unique_key='id') }}"
            "{% endif %}\n"
            "select id, concat('v', id, '-', {{ var('run') }}) as name"
            "{% if var('ours', false) %}, case when id = {{ var('gone', -1) }} then 'D' else 'U' end as op{% endif %}"
            " from range({{ var('start') }}, {{ var('stop') }}) as r(id)")}

    def test_switch_keeps_the_table_and_applies_the_next_batch(self, project, spark):
        name = f"{project.test_schema}.m"
        run_dbt(["run", "--vars", "{run: 1, start: 0, stop: 50}"])
        run_dbt(["run", "--vars", "{run: 2, start: 40, stop: 60}"])
        before = int(spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()["version"])
        run_dbt(["run", "--vars", "{ours: true, run: 3, start: 55, stop: 70, gone: 56}"])
        after = int(spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()["version"])
        assert after == before + 1  # the same table, one more version
        expected = {i: f"v{i}-{1 if i < 40 else 2 if i < 55 else 3}" for i in range(70) if i != 56}
        assert {r[0]: r[1] for r in spark.table(name).collect()} == expected
        previous = {i: f"v{i}-{1 if i < 40 else 2}" for i in range(60)}
        assert_readers_agree([DeltaCheck(delta_root(spark, name), expected={
            version: [{"id": k, "name": v} for k, v in sorted(rows.items())]
            for version, rows in ((before, previous), (after, expected))})], spark=spark)
