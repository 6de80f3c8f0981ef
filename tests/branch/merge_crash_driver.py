"""One step of the killed-merge test, run as its own process (``python merge_crash_driver.py STEP.json``).

A step opens the embedded session on a warehouse, then:

- ``verify``: looks at what a merge killed in the previous step left in schema ``schema`` (main's and the branch's
  rows, both readable), then goes on as a user would (``how``): ``rerun`` runs the merge again, then reverts ``aaa``'s
  key 1 on the branch and merges that; ``build_first`` reverts ``aaa``'s key 1 on the branch first (the branch's model
  rebuilt, as it showed it with key 1 back to a), then merges;
- ``crash``: sets up a fresh scenario in schema ``schema`` and merges it with ``PARTIALCOW_CRASH_AT`` set to
  ``point``, which kills this process there.

The report goes to ``report`` as JSON before the killed merge starts.

The scenario, on main: ``aaa`` (1 a, 2 b, 3 c), ``bbb`` (1 p). The branch changes aaa's key 1 to x and key 2 to y and
bbb's key 1 to q; main changes aaa's key 2 to z (a conflict, merged with ``on_conflict: theirs``: z stays).
"""

from __future__ import annotations

import json
import os
import sys

COLS = "id bigint, v string"
BRANCH = "dev"


def _rows(spark, relation: str) -> list[list]:
    return sorted([list(r) for r in spark.table(relation).collect()])


def _state(spark, schema: str) -> dict:
    return {
        "main": {t: _rows(spark, f"{schema}.{t}") for t in ("aaa", "bbb")},
        "branch": {t: _rows(spark, f"{schema}__br_{BRANCH}.{t}") for t in ("aaa", "bbb")},
    }


def _build(spark, schema: str, identifier: str, rows: list[tuple]) -> None:
    from partialcow.branch import build_model

    build_model(spark, spark.createDataFrame(rows, COLS), branch=BRANCH, base_schema=schema, identifier=identifier,
                key_columns=["id"], meta_schema=schema)


def _merge(spark, schema: str) -> str:
    from partialcow.branch import merge_branch

    return merge_branch(spark, name=BRANCH, meta_schema=schema, on_conflict="theirs").describe()


def _setup(spark, schema: str) -> None:
    from partialcow.branch import create_branch

    spark.sql(f"CREATE SCHEMA {schema}")
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], COLS).writeTo(f"{schema}.aaa").using("iceberg").create()
    spark.createDataFrame([(1, "p")], COLS).writeTo(f"{schema}.bbb").using("iceberg").create()
    create_branch(spark, name=BRANCH, meta_schema=schema, models=[(schema, "aaa"), (schema, "bbb")])
    _build(spark, schema, "aaa", [(1, "x"), (2, "y"), (3, "c")])
    _build(spark, schema, "bbb", [(1, "q")])
    spark.sql(f"UPDATE {schema}.aaa SET v = 'z' WHERE id = 2")


def main(step_file: str) -> None:
    with open(step_file) as handle:
        step = json.load(handle)
    from partialcow.faults import CRASH_ENV
    from partialcow.spark.session import get_or_create_session

    spark = get_or_create_session(table_format="iceberg", warehouse=step["warehouse"], master="local[2]")
    report: dict = {}
    verify = step.get("verify")
    if verify:
        schema = verify["schema"]
        report["found"] = _state(spark, schema)
        if verify["how"] == "rerun":
            report["merge"] = _merge(spark, schema)
            report["merged"] = _state(spark, schema)
            shown = dict((k, v) for k, v in report["merged"]["branch"]["aaa"])
            _build(spark, schema, "aaa", sorted({**shown, 1: "a"}.items()))
        else:
            shown = dict((k, v) for k, v in report["found"]["branch"]["aaa"])
            _build(spark, schema, "aaa", sorted({**shown, 1: "a"}.items()))
        report["reverted"] = _state(spark, schema)
        report["merge_after_revert"] = _merge(spark, schema)
        report["final"] = _state(spark, schema)
    crash = step.get("crash")
    if crash:
        _setup(spark, crash["schema"])
        report["before_crash"] = _state(spark, crash["schema"])
    with open(step["report"], "w") as handle:
        json.dump(report, handle)
    if crash:
        os.environ[CRASH_ENV] = crash["point"]
        _merge(spark, crash["schema"])
        report["not_killed"] = True
        with open(step["report"], "w") as handle:
            json.dump(report, handle)


if __name__ == "__main__":
    main(sys.argv[1])
