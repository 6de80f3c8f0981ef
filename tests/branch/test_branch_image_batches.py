"""Batches of ``partial_cow_incremental`` on a branch extend the model's image (only the batch's keys changed, no
rebuild from the parent) while the image reflects the parent's current snapshot and the overlay's; otherwise they
rebuild it. After every batch the image table reads what the overlay over the live parent reads (the view form)
and what a plain Python replay of the batches gives, in both image modes, through the driver's and Spark's rewrite.

What must force a rebuild: the parent moving on (its new rows show up on the branch, as after any build), and a
crash that left the overlay ahead of the image (the next batch's image holds both batches).
"""

from __future__ import annotations

import uuid

import pytest
from partialcow.branch import create_branch, drop_branch
from partialcow.branch import incremental as branch_incremental
from partialcow.branch.levels import overlay_info, resolve_parent
from partialcow.branch.overlay import view_sql
from partialcow.branch.types import COPY_ON_WRITE, MERGE_ON_READ
from partialcow.spark.changes import ChangeSpec
from partialcow.spark.small_batch import DRIVER_ROWS_ENV

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

SPEC = ChangeSpec(key_columns=("id",), op_column="_op", model="image_batches")
SCHEMA = "id bigint, name string, part int, qty bigint"
# the parent holds key 5 twice: a batch changing it leaves one row, as the view form shows it
PARENT = [(i, f"name-{i}", i % 3, i * 10) for i in range(40)] + [(5, "name-5-copy", 2, 51)]

# (batch rows (id, name, part, qty, op), what the image must have been: extended or rebuilt)
# A key whose partition value changes (11, 9, 1) must be read back in its new partition: a rewritten data file keeps
# the partition of the file it replaces, so such a row is appended instead (regression: the copy-on-write image kept
# it in its old partition).
BATCHES = [
    ([(1, "one", 1, 11, "U"), (2, "two", 2, 22, "U"), (100, "new", 1, 1, "I"), (3, None, None, None, "D"),
      (11, "eleven", 0, 11, "U")], False),
    # the same keys again (their rows now sit in files the image rewrote or appended), a key held twice, a delete
    # of a key the branch lacks, a key updated back to the parent's row (it leaves the overlay)
    ([(1, "one-again", 1, 12, "U"), (100, "new-again", 1, 2, "U"), (5, "five", 2, 5, "U"),
      (3, None, None, None, "D"), (2, "name-2", 2, 20, "U"), (9, "nine", 1, 9, "U")], True),
    # a deleted key comes back with the parent's row, another with a new one; an appended key is deleted
    ([(3, "name-3", 0, 30, "I"), (7, None, None, None, "D"), (100, None, None, None, "D"),
      (1, "one-moved", 2, 13, "U")], True),
    ([(7, "seven", 1, 7, "I"), (8, "eight", 2, 8, "U"), (101, "newer", 2, 3, "I")], True),
]


class Crash(Exception):
    pass


def _apply(spark, meta: str, rows):
    frame = spark.createDataFrame(rows, f"{SCHEMA}, _op string")
    return branch_incremental.apply_changes_on_branch(spark, frame, SPEC, branch="dev", base_schema=meta,
                                                      identifier="items", meta_schema=meta)


def _replay(content: list[tuple], rows) -> list[tuple]:
    """The branch's rows after a batch: every copy of a batch key goes, an upserted key gets the batch's row."""
    keys = {r[0] for r in rows}
    kept = [r for r in content if r[0] not in keys]
    return sorted(kept + [tuple(r[:4]) for r in rows if r[4] != "D"], key=repr)


def _seen(spark, relation: str) -> list[tuple]:
    return sorted((tuple(r) for r in spark.table(relation).collect()), key=repr)


def _live(spark, meta: str) -> list[tuple]:
    info = overlay_info(spark, f"{meta}__br_dev", "items")
    parent = resolve_parent(spark, ["main"], meta, "items")
    return sorted((tuple(r) for r in spark.sql(view_sql(info, parent, materialized=False)).collect()), key=repr)


@pytest.fixture()
def branch_model(spark):
    meta = f"imgb_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.sql(f"CREATE TABLE {meta}.items ({SCHEMA}) USING iceberg PARTITIONED BY (part)")
    for chunk in range(2):  # several data files per partition
        spark.createDataFrame([r for r in PARENT if r[0] % 2 == chunk], SCHEMA).writeTo(f"{meta}.items").append()
    yield meta
    drop_branch(spark, name="dev", meta_schema=meta)
    spark.sql(f"DROP SCHEMA IF EXISTS {meta}__br_dev CASCADE")
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


# copy-on-write through the driver's rewrite, merge-on-read (no file rewritten) with Spark's jobs
# (PARTIALCOW_DRIVER_MAX_ROWS=0); Spark's rewrite job is the image build's (tests/branch/test_branch_images.py)
@pytest.mark.parametrize(("mode", "driver_rows"), [(COPY_ON_WRITE, None), (MERGE_ON_READ, "0")],
                         ids=["copy-on-write-driver", "merge-on-read-spark"])
def test_batches_extend_the_image(spark, branch_model, mode, driver_rows, monkeypatch):
    if driver_rows is None:
        monkeypatch.delenv(DRIVER_ROWS_ENV, raising=False)
    else:
        monkeypatch.setenv(DRIVER_ROWS_ENV, driver_rows)
    meta = branch_model
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")], image_mode=mode)
    main_before = _seen(spark, f"{meta}.items")
    content = sorted(PARENT, key=repr)
    for number, (rows, extended) in enumerate(BATCHES, start=1):
        result = _apply(spark, meta, rows)
        content = _replay(content, rows)
        assert result.image is not None and result.image.mode == mode
        assert result.image.extended is extended, f"batch {number}: {result.describe()}"
        assert _seen(spark, f"{meta}__br_dev.items") == content, f"batch {number}"
        assert _live(spark, meta) == content, f"batch {number}"
        in_part_1 = sorted((tuple(r) for r in spark.sql(f"SELECT * FROM {meta}__br_dev.items WHERE part = 1")
                            .collect()), key=repr)
        assert in_part_1 == [r for r in content if r[2] == 1], f"batch {number}"
    assert [r for r in content if r[0] == 5] == [(5, "five", 2, 5)]
    assert _seen(spark, f"{meta}.items") == main_before  # main is never written


def test_the_parent_moving_or_a_crash_rebuilds_the_image(spark, branch_model, monkeypatch):
    meta = branch_model
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    _apply(spark, meta, [(1, "one", 1, 11, "U")])
    assert _apply(spark, meta, [(2, "two", 2, 22, "U")]).image.extended

    # main moves on: the next batch rebuilds from main's new snapshot, so main's change shows on the branch, and
    # the batch applies to what the branch shows over main as it is now: it deletes key 200, which main gained
    # since the image was built (regression: the batch read the pinned image, which lacks 200, so the delete did
    # nothing and the rebuild then showed 200)
    spark.sql(f"UPDATE {meta}.items SET qty = -1 WHERE id IN (1, 10)")
    spark.sql(f"INSERT INTO {meta}.items VALUES (200, 'main-new', 2, 2), (201, 'main-new', 2, 2)")
    result = _apply(spark, meta, [(4, "four", 1, 44, "U"), (200, None, None, None, "D")])
    assert not result.image.extended and result.deleted == 1
    seen = {r[0]: r for r in _seen(spark, f"{meta}__br_dev.items")}
    assert seen[10] == (10, "name-10", 1, -1) and seen[1] == (1, "one", 1, 11) and seen[4] == (4, "four", 1, 44)
    assert 200 not in seen and seen[201] == (201, "main-new", 2, 2)
    assert _seen(spark, f"{meta}__br_dev.items") == _live(spark, meta)

    # a crash after the overlay took a batch and before the image did: the image must not be extended from there
    def crash(*args, **kwargs):
        raise Crash

    with monkeypatch.context() as patched:
        patched.setattr(branch_incremental, "extend_image", crash)
        patched.setattr(branch_incremental, "create_branch_view", crash)
        with pytest.raises(Crash):
            _apply(spark, meta, [(6, "six", 0, 66, "U")])
    assert (6, "six", 0, 66) not in _seen(spark, f"{meta}__br_dev.items")  # readers still see the last image
    result = _apply(spark, meta, [(8, "eight", 2, 88, "U")])
    assert not result.image.extended
    seen = {r[0]: r for r in _seen(spark, f"{meta}__br_dev.items")}
    assert seen[6] == (6, "six", 0, 66) and seen[8] == (8, "eight", 2, 88)
    assert _seen(spark, f"{meta}__br_dev.items") == _live(spark, meta)
    assert _apply(spark, meta, [(9, "nine", 0, 99, "U")]).image.extended
    assert _seen(spark, f"{meta}__br_dev.items") == _live(spark, meta)


class Died(BaseException):
    """Stands for a kill: no ``except Exception`` handler of the build runs."""


def test_an_image_build_that_dies_leaves_its_files_to_the_next_write(spark, branch_model, monkeypatch):
    """Regression: an image build that died after writing files into the root table's folder and before committing
    them (here its position-delete files, merge-on-read) left them there for good: named ``partialcow-image-*``, no
    write's lease covered them. They are a dead write's files now, which the table's next write removes. The table
    names another data folder (``write.data.path``), where Iceberg puts the build's files: the lease searched the
    table's own ``data`` folder only (regression)."""
    import os

    from partialcow.branch import image as image_module
    from partialcow.spark.tables import iceberg_referenced

    meta = branch_model
    root = spark.sql(f"DESCRIBE TABLE EXTENDED {meta}.items").where("col_name = 'Location'").collect()[0][1]
    root = root.removeprefix("file:")
    folders = [os.path.join(root, "data"), os.path.join(root, "elsewhere")]
    spark.sql(f"ALTER TABLE {meta}.items SET TBLPROPERTIES ('write.data.path'='file:{folders[1]}')")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")], image_mode=MERGE_ON_READ)
    _apply(spark, meta, [(1, "one", 1, 11, "U")])

    def unreferenced() -> set[str]:
        files = {os.path.join(d, f) for data in folders for d, _, names in os.walk(data) for f in names
                 if f.endswith(".parquet") and not f.startswith(".")}
        return files - iceberg_referenced(spark, f"{meta}.items")

    assert unreferenced() == set()

    def die(update, marks):
        raise Died

    with monkeypatch.context() as patched:
        patched.setattr(image_module, "marked", die)
        with pytest.raises(Died):
            _apply(spark, meta, [(2, "two", 2, 22, "U")])
    left = unreferenced()
    assert left and all(f.startswith(folders[1]) for f in left), "the build died after writing its delete files"
    content = _replay(_replay(sorted(PARENT, key=repr), [(1, "one", 1, 11, "U")]), [(2, "two", 2, 22, "U")])
    _apply(spark, meta, [(4, "four", 1, 44, "U")])
    content = _replay(content, [(4, "four", 1, 44, "U")])
    assert unreferenced() == set()
    assert _seen(spark, f"{meta}__br_dev.items") == content == _live(spark, meta)
