"""Branch operations as users run them: one ``dbt`` command per fresh process, each run-operation the first (and
only) command of its process, starting right after a ``dbt build``.

Regression case for issue 24: the branch entry point took ``SparkSession.builder.getOrCreate()`` before dbt had
opened its configured session, so ``branch_create`` as the first command after a build failed with
``DATA_SOURCE_NOT_FOUND ... iceberg``, ``branch_list`` answered "no branches" with exit code 0, and both left a stray
``spark-warehouse/`` in the project folder. In-process dbt tests cannot see this (a session already runs there).

One realistic sequence, to keep the number of processes small (each costs a Spark start): build, create, build on
the branch (a keyed table model, an aggregate without a key, a ``partial_cow_incremental`` model), a conflicting
change on main (in the long mode only, tests/budget.py), list, merge with ``on_conflict: ours``; then pyiceberg
reads the tables back (no Spark) and they are compared with plain Python oracles. Diff, refresh, materialize, a refused merge and drop run in-process in
``test_branch_dbt.py``: what is particular to a fresh process is the session it opens, which a reading step (list)
and a writing one (merge) after create show.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from budget import LONG
from independent_read import iceberg_rows
from merge_oracle import apply_cdc, three_way

pytestmark = [pytest.mark.dbt, pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

SEED = [(i, f"n{i}", i * 10) for i in range(1, 7)]
ITEMS_MAIN = "{{ config(materialized='table', unique_key='id') }}\nselect id, name, qty from {{ ref('base_items') }}\n"
# on dev: 1 changes, 6 is deleted, 7 is new
ITEMS_DEV = (
    "{{ config(materialized='table', unique_key='id') }}\n"
    "select id, name, case when id = 1 then qty + 1 else qty end as qty from {{ ref('base_items') }} where id <> 6\n"
    "union all select 7L, 'n7', 70L\n"
)
ITEM_COUNT = "{{ config(materialized='table') }}\nselect count(*) as n, sum(qty) as total from {{ ref('items') }}\n"
BATCHES = {  # the partial_cow_incremental model: (id, v, _op, _ts); 1 on main, 2 on dev, 3 on main
    "1": [[1, 10, "I", 1], [2, 20, "I", 1], [3, 30, "I", 1]],
    "2": [[2, 25, "U", 2], [3, 0, "D", 2], [4, 40, "I", 2]],
    "3": [[2, 99, "U", 3]],
}
CDC = """
{{ config(materialized='partial_cow_incremental', unique_key='id', op_column='_op', sequence_column='_ts') }}
{% set rows = %s[var('batch') | string] %}
select * from values {% for r in rows %}({{ r[0] }}L, {{ r[1] }}L, '{{ r[2] }}', {{ r[3] }}L){{ ',' if not loop.last }}
{%- endfor %} as t(id, v, _op, _ts)
{% if is_incremental() %} where _ts > (select coalesce(max(_ts), 0) from {{ this }}) {% endif %}
"""


def _project(root: Path) -> Path:
    (root / "models").mkdir(parents=True)
    (root / "seeds").mkdir()
    (root / "dbt_project.yml").write_text(
        "name: branch_processes\nversion: '1.0'\nconfig-version: 2\nprofile: p\n"
        "seeds:\n  branch_processes:\n    +column_types: {id: bigint, name: string, qty: bigint}\n"
    )
    (root / "profiles.yml").write_text(json.dumps({"p": {"target": "t", "outputs": {"t": {
        "type": "partialcow", "schema": "shop", "warehouse": "warehouse", "master": "local[2]"}}}}))
    (root / "seeds" / "base_items.csv").write_text("id,name,qty\n" + "".join(f"{i},{n},{q}\n" for i, n, q in SEED))
    (root / "models" / "items.sql").write_text(ITEMS_MAIN)
    (root / "models" / "item_count.sql").write_text(ITEM_COUNT)
    (root / "models" / "cdc.sql").write_text(CDC.replace("%s", json.dumps(BATCHES)))
    return root


def _dbt(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One dbt command in a fresh process, run from the project folder (where a stray session would write)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBT_")}
    env.update(DBT_USE_COLORS="false", DBT_SEND_ANONYMOUS_USAGE_STATS="false")
    run = subprocess.run(
        [sys.executable, "-m", "dbt.cli.main", *args, "--project-dir", str(project), "--profiles-dir", str(project)],
        capture_output=True, text=True, timeout=900, env=env, cwd=project,
    )
    stray = [p.name for p in project.iterdir() if p.name in ("spark-warehouse", "metastore_db", "derby.log")]
    assert not stray, f"`dbt {' '.join(args)}` left {stray} in the project folder:\n{run.stdout[-3000:]}"
    return run


def _ok(project: Path, *args: str) -> str:
    run = _dbt(project, *args)
    assert run.returncode == 0, f"`dbt {' '.join(args)}` failed:\n{run.stdout[-4000:]}"
    return run.stdout


def test_every_branch_operation_from_a_fresh_process(tmp_path: Path) -> None:
    project = _project(tmp_path / "proj")
    _ok(project, "build", "--vars", "{batch: 1}")

    # the first command of a fresh process, right after the build
    out = _ok(project, "run-operation", "branch_create", "--args", "{name: dev}")
    assert "branch dev created from main" in out

    (project / "models" / "items.sql").write_text(ITEMS_DEV)
    _ok(project, "run", "--vars", "{branch: dev, batch: 2}")
    (project / "models" / "items.sql").write_text(ITEMS_MAIN)
    if LONG:  # one more fresh process (tests/budget.py); conflicts with ours are in test_branch_dbt.py in-process
        _ok(project, "run", "-s", "cdc", "--vars", "{batch: 3}")  # main changes key 2 of cdc, which dev changed too

    out = _ok(project, "run-operation", "branch_list")
    assert "dev (parent main, copy-on-write images" in out and "no branches" not in out
    for model in ("items", "item_count", "cdc"):
        assert f"shop.{model}:" in out

    out = _ok(project, "run-operation", "branch_merge", "--args", "{name: dev, on_conflict: ours}")
    assert "branch dev -> main: merged" in out and "item_count replaced the parent's rows" in out

    # read back without Spark (pyiceberg over the tables' files): a second reader of what the merge committed
    warehouse = project / "warehouse"
    got = {t: [list(r) for r in iceberg_rows(warehouse / "shop.db" / t)] for t in ("items", "item_count", "cdc")}
    base_items = {i: (i, n, q) for i, n, q in SEED}
    dev_items = {i: (i, n, q + 1 if i == 1 else q) for i, n, q in SEED if i != 6} | {7: (7, "n7", 70)}
    merged_items, conflicts = three_way(base_items, dev_items, base_items, policy="ours")
    assert not conflicts and got["items"] == sorted(list(r) for r in merged_items.values())
    # the aggregate was replaced by what dev computed (the README's warning: rebuild it on main after a merge)
    assert got["item_count"] == [[len(dev_items), sum(r[2] for r in dev_items.values())]]
    cdc_base = apply_cdc({}, [tuple(r) for r in BATCHES["1"]])
    cdc_ours = apply_cdc(cdc_base, [tuple(r) for r in BATCHES["2"]])
    cdc_theirs = apply_cdc(cdc_base, [tuple(r) for r in BATCHES["3"]]) if LONG else cdc_base
    merged_cdc, cdc_conflicts = three_way(cdc_base, cdc_ours, cdc_theirs, policy="ours")
    assert cdc_conflicts == ({2} if LONG else set())
    assert got["cdc"] == sorted(list(r) for r in merged_cdc.values())
    assert (warehouse / "shop__br_dev.db").is_dir()  # the branch stays after a merge (dropping it is a separate step)
