"""A bad batch of a ``partial_cow_incremental`` model on a branch: the error names the model, the column, the values
and sample keys, as on main, and nothing on the branch changes (overlay, base image, image, what readers see); the
parent's table is never written either way.

Regression case: values the model's column types cannot hold exactly were cast with Spark's plain ``CAST`` on a
branch, so a decimal 1.5 was stored in a ``bigint`` column as 1 and a ``bigint`` beyond the range of an ``int``
column wrapped around; on main the same batch is refused (README: casting rules).
"""

from __future__ import annotations

import uuid

import pytest

from partialcow.branch import create_branch
from partialcow.branch.incremental import apply_changes_on_branch
from partialcow.exceptions import BranchError, ChangeFeedError
from partialcow.spark.changes import ChangeSpec

pytestmark = [pytest.mark.spark, pytest.mark.iceberg]

SPEC = ChangeSpec(key_columns=("id",), op_column="_op", sequence_column="_ts", model="bad_branch")
ROWS = [(i, i * 10, i, f"n{i}") for i in range(1, 9)]  # id bigint, qty bigint, small int, name string

# (case, the batch as SQL, fragments the message must contain)
CASES = [
    ("decimal with a fraction into bigint", "select 2L id, cast(1.5 as decimal(10, 1)) qty, 2 small, 'n2' name, "
     "'U' _op, 5L _ts union all select 3L, cast(4 as decimal(10, 1)), 3, 'n3', 'U', 5L",
     ["bad_branch", "'qty'", "1.5", "bigint", "id=2"]),
    ("bigint beyond int", "select 4L id, 40L qty, 1099511627776L small, 'n4' name, 'U' _op, 5L _ts",
     ["bad_branch", "'small'", "1099511627776", "int", "id=4"]),
    ("text that is no number", "select 5L id, 'five' qty, 5 small, 'n5' name, 'U' _op, 5L _ts",
     ["bad_branch", "'qty'", "'five'", "id=5"]),
    ("null key", "select cast(null as bigint) id, 1L qty, 1 small, 'x' name, 'U' _op, 5L _ts",
     ["bad_branch", "id", "null"]),
    ("op code outside the configured ones", "select 6L id, 60L qty, 6 small, 'n6' name, 'X' _op, 5L _ts",
     ["bad_branch", "'_op'", "'X'", "id=6"]),
]


def _state(spark, meta: str) -> tuple:
    """What a refused batch must leave as it was: every table's current snapshot and the rows readers see."""
    branch_schema = f"{meta}__br_dev"
    snapshots = {}
    for table in (f"{meta}.t", f"{branch_schema}.t__pcow_overlay", f"{branch_schema}.t__pcow_base"):
        snapshots[table] = spark.sql(f"SELECT snapshot_id, committed_at FROM {table}.snapshots "
                                     "ORDER BY committed_at DESC LIMIT 1").collect()
    refs = sorted(tuple(r) for r in spark.sql(f"SELECT name, snapshot_id FROM {meta}.t.refs").collect())
    seen = sorted(tuple(r) for r in spark.table(f"{branch_schema}.t").collect())
    return snapshots, refs, seen


@pytest.fixture(scope="module")
def branch_model(spark):
    meta = f"badbr_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.createDataFrame(ROWS, "id bigint, qty bigint, small int, name string").writeTo(f"{meta}.t").using(
        "iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "t")])
    good = spark.sql("select 1L id, 11L qty, 1 small, 'one' name, 'U' _op, 1L _ts")
    apply_changes_on_branch(spark, good, SPEC, branch="dev", base_schema=meta, identifier="t", meta_schema=meta)
    yield meta
    spark.sql(f"DROP SCHEMA {meta}__br_dev CASCADE")
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


@pytest.mark.parametrize("case, sql, fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_batch_on_a_branch_is_refused_and_nothing_changes(spark, branch_model, case, sql, fragments):
    meta = branch_model
    before = _state(spark, meta)
    assert (1, 11, 1, "one") in before[2]  # the good batch went in
    with pytest.raises((ChangeFeedError, BranchError)) as info:
        apply_changes_on_branch(spark, spark.sql(sql), SPEC, branch="dev", base_schema=meta, identifier="t",
                                meta_schema=meta)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{case}: {fragment!r} not in {message!r}"
    assert _state(spark, meta) == before
    assert sorted(tuple(r) for r in spark.table(f"{meta}.t").collect()) == ROWS
