"""Branch environments end to end through dbt (in-process, embedded Spark + Iceberg).

The expected rows are computed here in plain Python from the seed and from the same edit specs the model SQL is
generated from; the three-way merge oracle below is independent of the Spark implementation.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from budget import LONG
from merge_oracle import three_way
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

SEED = [
    (1, "apple", 10),
    (2, "banana", 20),
    (3, "cherry", 30),
    (4, "date", 40),
    (5, "elder", 50),
    (6, "fig", 60),
]
SEED_CSV = "id,name,qty\n" + "".join(f"{i},{n},{q}\n" for i, n, q in SEED)

# Edit specs: updates {id: {column: value}}, deletes {ids}, inserts [rows].
DEV_V1 = {"updates": {2: {"qty": 25}}, "deletes": {3, 4}, "inserts": [(7, "grape", 70)]}
# second build on dev: 3 comes back (re-insert after delete) with a new qty; 4 stays deleted
DEV_V2 = {"updates": {2: {"qty": 25}, 3: {"qty": 33}}, "deletes": {4}, "inserts": [(7, "grape", 70)]}
# feature branches off dev and renames 5
FEAT = {"updates": {2: {"qty": 25}, 3: {"qty": 33}, 5: {"name": "elderberry"}}, "deletes": {4},
        "inserts": [(7, "grape", 70)]}
# meanwhile main changes 2 (conflicts with dev), 6 and deletes 1
MAIN_V1 = {"updates": {2: {"qty": 99}, 6: {"qty": 61}}, "deletes": {1}, "inserts": []}

COLUMNS = ("id", "name", "qty")


def apply_spec(rows, spec):
    """The oracle for a model built from ``spec``: plain dict edits of the seed rows."""
    out = {}
    for row in rows:
        if row[0] in spec["deletes"]:
            continue
        values = dict(zip(COLUMNS, row))
        values.update(spec["updates"].get(row[0], {}))
        out[row[0]] = tuple(values[c] for c in COLUMNS)
    for row in spec["inserts"]:
        out[row[0]] = row
    return out


def model_sql(spec) -> str:
    """The same edits as SQL over the seed (what dbt runs)."""
    def case(column: str) -> str:
        whens = [
            f"when id = {key} then {repr(values[column]) if isinstance(values[column], str) else values[column]}"
            for key, values in spec["updates"].items()
            if column in values
        ]
        return f"case {' '.join(whens)} else {column} end" if whens else column

    where = f"where id not in ({', '.join(str(k) for k in sorted(spec['deletes']))})" if spec["deletes"] else ""
    inserts = "".join(
        f"\nunion all select cast({i} as bigint) as id, '{n}' as name, cast({q} as bigint) as qty"
        for i, n, q in spec["inserts"]
    )
    return (
        "{{ config(materialized='table', unique_key='id') }}\n"
        f"select id, {case('name')} as name, cast({case('qty')} as bigint) as qty\n"
        f"from {{{{ ref('base_items') }}}} {where}{inserts}"
    )


ITEM_TOTALS = """
{{ config(materialized='table', unique_key='id') }}
select id, qty * 2 as double_qty from {{ ref('items') }}
"""
ITEM_COUNT = """
{{ config(materialized='table') }}
select count(*) as n, sum(qty) as total from {{ ref('items') }}
"""
# On a branch the model's relation is its image table, which dbt must see as a view: never incremental there.
ITEM_LATEST = """
{{ config(materialized='incremental', unique_key='id') }}
select id, qty from {{ ref('items') }}
{% if is_incremental() %} where id > (select max(id) from {{ this }}) {% endif %}
"""
ITEM_NAMES = "{{ config(materialized='view') }}\nselect id, upper(name) as uname from {{ ref('items') }}\n"
ITEM_PY = """
def model(dbt, session):
    dbt.config(materialized="table", unique_key="id")
    return dbt.ref("items").selectExpr("id", "qty + 1 as qty_plus")
"""


def rows(spark, relation: str) -> dict:
    return {r[0]: tuple(r) for r in spark.table(relation).collect()}


def branch_args(name: str, **extra) -> str:
    return "{" + ", ".join([f"name: {name}"] + [f"{k}: {v}" for k, v in extra.items()]) + "}"


# CI's time budget (3-4 minutes on 2 cores): the same operations run in CI from fresh processes
# (test_branch_processes.py), with CDC batches and conflicts (test_branch_cdc.py) and through the library
# (test_branch_api.py, test_branch_nested_base.py); this end-to-end run of them all, nesting included, in the long mode
@pytest.mark.skipif(not LONG, reason="CI's time budget: PARTIALCOW_TESTS_LONG=1 runs it (see tests/budget.py)")
class TestBranchLifecycle:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"base_items.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "items.sql": model_sql({"updates": {}, "deletes": set(), "inserts": []}),
            "item_totals.sql": ITEM_TOTALS,
            "item_count.sql": ITEM_COUNT,
            "item_latest.sql": ITEM_LATEST,
            "item_names.sql": ITEM_NAMES,
            "item_py.py": ITEM_PY,
        }

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"seeds": {"+column_types": {"id": "bigint", "qty": "bigint", "name": "string"}}}

    def test_lifecycle(self, project, spark, spark_warehouse):
        schema = project.test_schema
        dev, feat = f"{schema}__br_dev", f"{schema}__br_feat"
        base = {r[0]: r for r in SEED}
        run_dbt(["seed"])
        run_dbt(["run"])
        assert rows(spark, f"{schema}.items") == base

        # invalid names never reach SQL
        _, out = run_dbt_and_capture(["run-operation", "branch_create", "--args", "{name: Bad-Name}"],
                                     expect_pass=False)
        assert "invalid branch name 'Bad-Name'" in out
        with pytest.raises(Exception, match="invalid branch name"):
            run_dbt(["run", "--vars", "{branch: 'x`; drop table y'}"])
        _, out = run_dbt_and_capture(["run-operation", "branch_merge", "--args", "{name: nosuch}"], expect_pass=False)
        assert "branch 'nosuch' does not exist" in out

        run_dbt(["run-operation", "branch_create", "--args", branch_args("dev")])
        assert not spark.catalog.tableExists(f"{dev}.items")  # O(1): nothing copied or created

        # a model never built on the branch is read from the parent
        run_dbt(["run", "--vars", "{branch: dev}", "-s", "item_totals"])
        assert rows(spark, f"{dev}.item_totals") == {k: (k, v[2] * 2) for k, v in base.items()}
        assert spark.table(f"{dev}.item_totals__pcow_overlay").count() == 0
        view_text = spark.sql(f"SHOW CREATE TABLE {dev}.item_totals").collect()[0][0]
        assert f"FROM `{schema}`.`item_totals`" in view_text and "JOIN" not in view_text  # empty overlay: no join

        # updates, deletes and an insert on dev; main stays as it was
        write_file(model_sql(DEV_V1), project.project_root, "models", "items.sql")
        run_dbt(["run", "--vars", "{branch: dev}"])
        ours_v1 = apply_spec(SEED, DEV_V1)
        assert rows(spark, f"{dev}.items") == ours_v1
        assert rows(spark, f"{schema}.items") == base
        overlay = {(r["id"], r["_pcow_op"]) for r in spark.table(f"{dev}.items__pcow_overlay").collect()}
        assert overlay == {(2, "U"), (7, "U"), (3, "D"), (4, "D")}  # only the differences are stored
        assert rows(spark, f"{dev}.item_totals") == {k: (k, v[2] * 2) for k, v in ours_v1.items()}
        assert spark.table(f"{dev}.item_count").collect()[0][0] == len(ours_v1)  # keyless: detached overlay
        assert {r[0]: r[1] for r in spark.table(f"{dev}.item_names").collect()} == {
            k: v[1].upper() for k, v in ours_v1.items()
        }
        assert rows(spark, f"{dev}.item_py") == {k: (k, v[2] + 1) for k, v in ours_v1.items()}  # Python model
        assert spark.table(f"{dev}.item_py__pcow_overlay").count() == 4

        # re-insert of a deleted key
        write_file(model_sql(DEV_V2), project.project_root, "models", "items.sql")
        run_dbt(["run", "--vars", "{branch: dev}", "-s", "items+"])
        ours = apply_spec(SEED, DEV_V2)
        assert rows(spark, f"{dev}.items") == ours
        properties = dict(tuple(r) for r in spark.sql(f"SHOW TBLPROPERTIES {dev}.item_latest").collect())
        assert properties["partialcow.image-of"] == f"{schema}.item_latest@partialcow_dev"
        # the full result, and main's rows of keys it lacks (an incremental model's runs never delete)
        assert rows(spark, f"{dev}.item_latest") == {**{k: (k, v[2]) for k, v in base.items()},
                                                      **{k: (k, v[2]) for k, v in ours.items()}}

        # diff: per key and column, against the parent's current rows
        run_dbt(["run-operation", "branch_diff", "--args", branch_args("dev")])
        diff = spark.table(f"{dev}.partialcow_branch_diff").where(f"model = '{schema}.items'").collect()
        changes = {(r["key"], r["change"], r["column_name"], r["old_value"], r["new_value"]) for r in diff}
        expected = set()
        for key in set(base) | set(ours):
            if key not in base:
                expected.add((str(key), "insert", None, None, None))
            elif key not in ours:
                expected.add((str(key), "delete", None, None, None))
            else:
                for i, column in enumerate(COLUMNS[1:], start=1):
                    if base[key][i] != ours[key][i]:
                        expected.add((str(key), "update", column, str(base[key][i]), str(ours[key][i])))
        assert changes == expected

        # nested: feat branches off dev and reads dev's views
        feat_args = branch_args("feat", parent="dev", image_mode="merge-on-read")
        run_dbt(["run-operation", "branch_create", "--args", feat_args])
        modes = spark.sql(f"SELECT name, image_mode FROM {schema}.partialcow_branches").collect()
        assert dict(modes) == {"dev": "copy-on-write", "feat": "merge-on-read"}
        write_file(model_sql(FEAT), project.project_root, "models", "items.sql")
        run_dbt(["run", "--vars", "{branch: feat}", "-s", "items"])
        ours_feat = apply_spec(SEED, FEAT)
        assert rows(spark, f"{feat}.items") == ours_feat
        assert {(r["id"], r["_pcow_op"]) for r in spark.table(f"{feat}.items__pcow_overlay").collect()} == {(5, "U")}
        assert rows(spark, f"{feat}.items") == rows(spark, f"{dev}.items") | {5: (5, "elderberry", 50)}
        # materialize collapses the two-level chain into one table without changing what the view shows
        run_dbt(["run-operation", "branch_materialize", "--args", branch_args("feat")])
        assert rows(spark, f"{feat}.items") == ours_feat
        assert "items__pcow_full" in spark.sql(f"SHOW CREATE TABLE {feat}.items").collect()[0][0]

        # dev did not change since feat was created: fast-forward into dev's overlay
        _, out = run_dbt_and_capture(["run-operation", "branch_merge", "--args", branch_args("feat")])
        assert "fast-forward" in out
        assert rows(spark, f"{dev}.items") == ours_feat
        assert rows(spark, f"{feat}.items") == ours_feat  # feat continues from the merge result
        run_dbt(["run-operation", "branch_drop", "--args", branch_args("feat")])
        assert not spark.catalog.databaseExists(feat)
        assert not (Path(spark_warehouse) / f"{feat}.db").exists()
        ours = ours_feat

        # a conflicting change on main (2 changed on both sides)
        write_file(model_sql(MAIN_V1), project.project_root, "models", "items.sql")
        run_dbt(["run", "-s", "items"])
        theirs = apply_spec(SEED, MAIN_V1)
        assert rows(spark, f"{schema}.items") == theirs
        # dev's view reads its image, which pins main as of dev's last change: main's new rows are not seen yet
        properties = dict(tuple(r) for r in spark.sql(f"SHOW TBLPROPERTIES {dev}.items").collect())
        assert properties["partialcow.image-of"] == f"{schema}.items@partialcow_dev"
        assert rows(spark, f"{dev}.items") == ours
        # re-pinned: dev's rows for the keys it changed, main's current rows for every other key
        _, out = run_dbt_and_capture(["run-operation", "branch_refresh", "--args", branch_args("dev")])
        assert f"{schema}.items: image" in out
        changed_on_dev = {r["id"] for r in spark.table(f"{dev}.items__pcow_overlay").collect()}
        assert changed_on_dev == {2, 3, 4, 5, 7}
        expected_view = {k: v for k, v in theirs.items() if k not in changed_on_dev}
        expected_view |= {k: v for k, v in ours.items() if k in changed_on_dev}
        assert rows(spark, f"{dev}.items") == expected_view
        assert rows(spark, f"{schema}.items") == theirs  # main itself never sees the branch's image

        _, out = run_dbt_and_capture(["run-operation", "branch_merge", "--args", branch_args("dev")],
                                     expect_pass=False)
        assert "nothing was applied" in out
        assert rows(spark, f"{schema}.items") == theirs  # nothing applied
        merged, conflict_keys = three_way(base, ours, theirs, policy="ours")
        conflicts = spark.table(f"{dev}.partialcow_merge_conflicts").where(f"model = '{schema}.items'").collect()
        assert {int(r["key"]) for r in conflicts} == conflict_keys == {2}
        assert {(r["column_name"], r["base_value"], r["ours_value"], r["theirs_value"]) for r in conflicts} == {
            ("qty", str(base[2][2]), str(ours[2][2]), str(theirs[2][2]))
        }

        _, out = run_dbt_and_capture(["run-operation", "branch_list"])
        assert "dev (parent main, copy-on-write images, age" in out
        _, out = run_dbt_and_capture(["run-operation", "branch_merge", "--args", branch_args("dev", on_conflict="ours")])
        assert rows(spark, f"{schema}.items") == merged
        # the keyless model: main's copy was not rebuilt since the branch, so dev's result replaces it
        dev_v2 = apply_spec(SEED, DEV_V2)
        assert tuple(spark.table(f"{schema}.item_count").collect()[0]) == (
            len(dev_v2), sum(v[2] for v in dev_v2.values())
        )
        assert rows(spark, f"{dev}.items") == merged

        run_dbt(["run-operation", "branch_drop", "--args", branch_args("dev")])
        assert not [d.name for d in spark.catalog.listDatabases() if d.name.startswith(f"{schema}__br_")]
        for model in ("items", "item_totals", "item_py"):  # the images' refs are gone from the root tables
            assert [r["name"] for r in spark.sql(f"SELECT name FROM {schema}.{model}.refs").collect()] == ["main"]
        assert not list(Path(spark_warehouse).glob(f"{schema}__br_*"))
        assert spark.table(f"{schema}.partialcow_branches").count() == 0


LEGACY_SNAPSHOT = """
{% snapshot items_snap %}
{{ config(unique_key='id', strategy='check', check_cols=['qty'], target_schema=target.schema) }}
select * from {{ ref('items') }}
{% endsnapshot %}
"""


DOCUMENTED = """
version: 2
models:
  - name: item_count
    config: {persist_docs: {columns: true}, file_format: iceberg}
    columns:
      - name: n
        description: how many items
"""


class TestWhatABranchRunRefuses:
    """Regressions of runs on a branch that must fail and leave everything as it was, or must not fail:

    - ``target_schema`` (dbt's older snapshot setting) sets the schema without ``generate_schema_name``, so a
      snapshot run on a branch wrote the base schema's snapshot table from the branch's rows (its ``ref``s read
      the branch): branch edits entered main's history, and dropping the branch did not take them back. It is
      refused before anything is written; on main it runs;
    - a table model rebuilt on a branch with a repeated key is refused, but dbt-spark's table materialization had
      dropped the model's branch relation (its image table, listed as a view) first: ``ref()`` then fell back to
      the parent's table while the overlay still held the branch's changes;
    - a model with ``persist_docs: {columns: true}`` failed on a branch once its overlay was written (``ALTER
      TABLE`` of column comments on the branch's view); a branch's relation gets no comments."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"base_items.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self):
        return {"items.sql": model_sql({"updates": {}, "deletes": set(), "inserts": []}),
                "item_count.sql": ITEM_COUNT, "schema.yml": DOCUMENTED}

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"items_snap.sql": LEGACY_SNAPSHOT}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"seeds": {"+column_types": {"id": "bigint", "qty": "bigint", "name": "string"}}}

    def test_refused_on_a_branch(self, project, spark):
        schema = project.test_schema
        run_dbt(["seed"])
        run_dbt(["run"])
        run_dbt(["run-operation", "branch_create", "--args", branch_args("dev")])
        run_dbt(["run", "--vars", "{branch: dev}"])
        _, out = run_dbt_and_capture(["snapshot", "--vars", "{branch: dev}"], expect_pass=False)
        assert "outside branch dev" in out and "target_schema" in out, out[-3000:]
        assert not spark.catalog.tableExists(f"{schema}.items_snap")
        run_dbt(["snapshot"])
        assert spark.table(f"{schema}.items_snap").count() == len(SEED)

    def test_a_failed_rebuild_keeps_the_branch_relation(self, project, spark):
        schema = project.test_schema
        dev = f"{schema}__br_dev"
        edits = {"updates": {2: {"qty": 25}}, "deletes": {3}, "inserts": []}
        write_file(model_sql(edits), project.project_root, "models", "items.sql")
        run_dbt(["run", "--vars", "{branch: dev}", "-s", "items"])
        shown = apply_spec(SEED, edits)
        assert rows(spark, f"{dev}.items") == shown
        write_file(model_sql(edits) + "\nunion all select 1L as id, 'again' as name, 1L as qty", project.project_root,
                   "models", "items.sql")
        _, out = run_dbt_and_capture(["run", "--vars", "{branch: dev}", "-s", "items"], expect_pass=False)
        assert "repeats in its result" in out, out[-2000:]
        assert rows(spark, f"{dev}.items") == shown

    def test_a_seed_on_a_branch_that_does_not_exist_is_refused(self, project, spark):
        """Regression: the seed was loaded into the overlay schema of a branch nobody created, and
        ``branch_create`` of that name then refused, the schema holding objects of an "earlier branch"."""
        _, out = run_dbt_and_capture(["seed", "--vars", "{branch: typo}"], expect_pass=False)
        assert "branch 'typo' does not exist" in out and "branch_create" in out, out[-3000:]
        assert not spark.catalog.tableExists(f"{project.test_schema}__br_typo.base_items")
        run_dbt(["run-operation", "branch_create", "--args", branch_args("typo")])
        run_dbt(["seed", "--vars", "{branch: typo}"])
        assert spark.table(f"{project.test_schema}__br_typo.base_items").count() == len(SEED)

    def test_documented_columns_build_on_a_branch(self, project, spark):
        schema = project.test_schema
        dev = f"{schema}__br_dev"
        run_dbt(["run", "--vars", "{branch: dev}", "-s", "item_count"])
        assert spark.table(f"{dev}.item_count").collect()[0]["n"] == len(SEED) - 1
        comments = {r[0]: r[2] for r in spark.sql(f"DESCRIBE TABLE {schema}.item_count").collect()}
        assert comments["n"] == "how many items"  # built on main, by the first test's run


HISTORY = """
{{ config(materialized='incremental', unique_key='id', file_format='iceberg') }}
select id, v from {{ target.schema }}.hist_src
"""


def _source_changed_then_built_on_a_branch(project, source: str, rows_now: str) -> None:
    """The model built on main from ``source`` holding ids 1-3, then ``source`` replaced by ``rows_now``, a branch
    ``dev`` created and the model built on it."""
    table = f"{project.test_schema}.{source}"
    project.run_sql(f"create table {table} using iceberg as "
                    "select * from values (1, 'a'), (2, 'b'), (3, 'c') as t(id, v)")
    run_dbt(["run"])
    project.run_sql(f"create or replace table {table} using iceberg as select * from values {rows_now} as t(id, v)")
    run_dbt(["run-operation", "branch_create", "--args", branch_args("dev")])
    run_dbt(["run", "--vars", "{branch: dev}"])


class TestAnIncrementalModelOnABranch:
    """Regression: a dbt-spark incremental model keeps on main the rows its source no longer has (its runs upsert).
    Built in full on a branch, every such row became a tombstone, and merging the branch deleted them from main,
    silently. Missing keys now keep the parent's rows; what the branch changes still merges."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"hist.sql": HISTORY}

    def test_merge_keeps_the_rows_main_kept(self, project, spark):
        schema = project.test_schema
        _source_changed_then_built_on_a_branch(project, "hist_src", "(3, 'c2'), (4, 'd')")
        expected = {1: (1, "a"), 2: (2, "b"), 3: (3, "c2"), 4: (4, "d")}  # what `dbt run` on main gives
        assert rows(spark, f"{schema}__br_dev.hist") == expected
        _, out = run_dbt_and_capture(["run-operation", "branch_diff", "--args", branch_args("dev")])
        assert "1 inserted, 1 updated, 0 deleted" in out, out[-2000:]
        run_dbt(["run-operation", "branch_merge", "--args", branch_args("dev")])
        assert rows(spark, f"{schema}.hist") == expected


EVENTS = """
{{ config(materialized='incremental', file_format='iceberg') }}
select id, v from {{ target.schema }}.events_src
{% if is_incremental() %} where id > (select max(id) from {{ this }}) {% endif %}
"""


class TestAnAppendOnlyModelOnABranch:
    """Regression: an incremental model without unique_key appends, so main holds rows (its history) its source no
    longer has. Built in full on a branch, the branch showed only the source's rows, and merging replaced main's
    history with them, silently. The branch now shows main's rows plus what the source gained, and the merge leaves
    main's rows to the model's own runs there."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": EVENTS}

    def test_the_branch_shows_the_history_and_the_merge_keeps_it(self, project, spark):
        schema = project.test_schema
        _source_changed_then_built_on_a_branch(project, "events_src", "(3, 'c'), (4, 'd'), (4, 'd')")
        history = [(1, "a"), (2, "b"), (3, "c")]
        expected = sorted([*history, (4, "d"), (4, "d")])  # what `dbt run` on main gives
        assert sorted(map(tuple, spark.table(f"{schema}__br_dev.events").collect())) == expected
        _, out = run_dbt_and_capture(["run-operation", "branch_diff", "--args", branch_args("dev")])
        assert "2 row(s) only on the branch (5 vs 3 on the parent)" in out, out[-2000:]
        _, out = run_dbt_and_capture(["run-operation", "branch_merge", "--args", branch_args("dev")])
        assert "left the parent's rows, its history, as they are" in out, out[-2000:]
        assert sorted(map(tuple, spark.table(f"{schema}.events").collect())) == history
        assert sorted(map(tuple, spark.table(f"{schema}__br_dev.events").collect())) == history
        run_dbt(["run"])  # the model's own run on main appends what the source gained
        assert sorted(map(tuple, spark.table(f"{schema}.events").collect())) == expected


KEYED_A = "{{{{ config(materialized='table', unique_key='id') }}}}\nselect * from values {rows} as t(id, v)\n"
VIEW_V = "{{ config(materialized='view') }}\nselect * from values (1L, 100L), (2L, 200L) as t(id, v)\n"


class TestAViewModelMadeATableOnABranch:
    """Regression: a view model on main built as a keyed table on a branch made ``branch_merge`` fail for the whole
    branch (``table ... is not an Iceberg table``: it applied the branch's rows to main's view), so no other model's
    change could be merged; and making the model a view again on the branch left its overlay, so diff and merge
    still saw it. The merge now leaves such a model out, saying why, and merges the others; a view build on a
    branch takes the model's rows off the branch."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"a.sql": KEYED_A.format(rows="(1L, 10L), (2L, 20L)"), "v.sql": VIEW_V}

    def test_the_other_models_merge_and_a_view_again_leaves_the_branch(self, project, spark):
        schema = project.test_schema
        run_dbt(["run"])
        run_dbt(["run-operation", "branch_create", "--args", branch_args("dev")])
        write_file(KEYED_A.format(rows="(1L, 11L), (2L, 20L)"), project.project_root, "models", "a.sql")
        write_file(VIEW_V.replace("'view'", "'table', unique_key='id'").replace("100L", "101L"),
                   project.project_root, "models", "v.sql")
        run_dbt(["run", "--vars", "{branch: dev}"])
        assert rows(spark, f"{schema}__br_dev.v") == {1: (1, 101), 2: (2, 200)}
        _, out = run_dbt_and_capture(["run-operation", "branch_merge", "--args", branch_args("dev")])
        assert f"{schema}.v: not merged, the parent's {schema}.v is a view" in out, out[-2000:]
        assert rows(spark, f"{schema}.a") == {1: (1, 11), 2: (2, 20)}
        assert spark.catalog.getTable(f"{schema}.v").tableType == "VIEW"
        assert rows(spark, f"{schema}.v") == {1: (1, 100), 2: (2, 200)}
        write_file(VIEW_V, project.project_root, "models", "v.sql")  # a view again on the branch
        run_dbt(["run", "--vars", "{branch: dev}", "-s", "v"])
        assert rows(spark, f"{schema}__br_dev.v") == {1: (1, 100), 2: (2, 200)}
        _, out = run_dbt_and_capture(["run-operation", "branch_diff", "--args", branch_args("dev")])
        assert f"{schema}.v" not in out, out[-2000:]
        _, out = run_dbt_and_capture(["run-operation", "branch_merge", "--args", branch_args("dev")])
        assert f"{schema}.v" not in out, out[-2000:]


TBL_K = ("{{ config(materialized='table', unique_key='id') }}\n"
         "select cast(id as bigint) id, cast(id * 10 + {{ var('k', 0) }} as bigint) v from range(1, 6) t\n")
DOWN = "{{ config(materialized='table', unique_key='id') }}\nselect id, v from {{ ref('tbl') }}\n"


class TestABranchModelThatLostItsRelation:
    """Regression: dbt's table materialization drops a branch model's relation (its image table, listed as a view)
    before the build publishes it again; a `dbt run` killed in between left the overlay without it, and ref() on
    the branch read main's rows, also into a model built on the branch afterwards (its overlay silently emptied).
    ref() now publishes the relation again from the overlay."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"tbl.sql": TBL_K, "down.sql": DOWN}

    def test_ref_publishes_it_again(self, project, spark):
        from partialcow.branch.image import drop_reader_relation

        schema = project.test_schema
        run_dbt(["run"])
        run_dbt(["run-operation", "branch_create", "--args", branch_args("dev")])
        run_dbt(["run", "--vars", "{branch: dev, k: 1}"])
        branch_rows = {i: (i, i * 10 + 1) for i in range(1, 6)}
        assert rows(spark, f"{schema}__br_dev.tbl") == branch_rows
        drop_reader_relation(spark, f"{schema}__br_dev", "tbl")  # where the killed build stopped
        run_dbt(["run", "-s", "down", "--vars", "{branch: dev}"])
        assert rows(spark, f"{schema}__br_dev.down") == branch_rows
        assert rows(spark, f"{schema}__br_dev.tbl") == branch_rows
