"""Branch images (a model's branch content as an Iceberg branch of its root table): the view reads one table and
returns what the overlay over the parent returns; the parent is pinned until a build or ``refresh_branch``;
nesting forks from the parent branch's image; ``main`` is never written; dropping a branch removes its refs.
Both image modes: copy-on-write (touched data files rewritten by the page engine) and merge-on-read (position
deletes). Expected rows are plain Python dicts; the overlay-over-parent form (the view without an image) is
cross-checked, and the files the copy-on-write image wrote are read by pyarrow and DuckDB."""

from __future__ import annotations

import os
import re
import uuid

import duckdb
import pyarrow.parquet as pq
import pytest
from budget import LONG
from merge_oracle import three_way
from partialcow.branch import build_model, create_branch, drop_branch, materialize_branch, merge_branch, refresh_branch
from partialcow.branch.catalog import load_iceberg
from partialcow.branch.levels import overlay_info, resolve_parent
from partialcow.branch.overlay import view_sql
from partialcow.branch.types import COPY_ON_WRITE, MERGE_ON_READ
from partialcow.spark.small_batch import DRIVER_ROWS_ENV
from partialcow.spark.tables import local_path

pytestmark = [pytest.mark.spark, pytest.mark.iceberg, pytest.mark.slow]

ROWS = {i: (i, f"name-{i}", i % 3, i * 10) for i in range(60)}  # id, name, part, qty


def _rows(spark, relation: str) -> dict:
    return {r[0]: tuple(r) for r in spark.table(relation).collect()}


def _frame(spark, rows: dict):
    return spark.createDataFrame(sorted(rows.values()), "id bigint, name string, part int, qty bigint")


def _live_rows(spark, meta: str, branch: str, levels: list[str]) -> dict:
    """The same branch content through the view form without an image: overlay UNION ALL anti-joined parent."""
    info = overlay_info(spark, f"{meta}__br_{branch}", "items")
    parent = resolve_parent(spark, levels, meta, "items")
    return {r[0]: tuple(r) for r in spark.sql(view_sql(info, parent, materialized=False)).collect()}


def _view_text(spark, relation: str) -> str:
    return spark.sql(f"SHOW CREATE TABLE {relation}").collect()[0][0]


def _image_of(spark, relation: str) -> str | None:
    """What an image table reads (root table and ref, its table property); None for a view."""
    rows = spark.sql(f"SHOW TBLPROPERTIES {relation}").collect()
    return {r[0]: r[1] for r in rows}.get("partialcow.image-of")


def _check_image_table(spark, relation: str, root: str, ref: str) -> None:
    """``relation`` is an image table at ``ref``'s snapshot of ``root``, protected from file deletion."""
    assert _image_of(spark, relation) == f"{root}@{ref}"
    image_snapshot = spark.sql(f"SELECT snapshot_id FROM {root}.refs WHERE name = '{ref}'").collect()[0][0]
    assert [r[0] for r in spark.sql(f"SELECT snapshot_id FROM {relation}.refs").collect()] == [image_snapshot]
    with pytest.raises(Exception, match="GC is disabled"):
        spark.sql(f"DROP TABLE {relation} PURGE")


def _scan_files(spark, meta: str, ref: str) -> tuple[set[str], set[str]]:
    """The data files and the delete files a scan of ``ref`` reads (Iceberg's own planning)."""
    tasks = load_iceberg(spark, meta, "items").newScan().useRef(ref).planFiles()
    data, deletes = set(), set()
    iterator = tasks.iterator()
    while iterator.hasNext():
        task = iterator.next()
        data.add(str(task.file().location()))
        deletes |= {str(d.location()) for d in task.deletes()}
    tasks.close()
    return data, deletes


def _refs(spark, table: str) -> set[str]:
    return {r["name"] for r in spark.sql(f"SELECT name FROM {table}.refs").collect()}


def _file_of(spark, root: str, key: int) -> str:
    return spark.sql(f"SELECT _file FROM {root} WHERE id = {key}").collect()[0][0]


def _check_rewritten_files(spark, meta: str, ref: str, expected: dict) -> None:
    """The data files the copy-on-write image wrote: pyarrow and DuckDB read the same rows, all expected ones, as
    many as Iceberg records; at least one exists."""
    tasks = load_iceberg(spark, meta, "items").newScan().useRef(ref).planFiles()
    iterator, written = tasks.iterator(), []
    while iterator.hasNext():
        task = iterator.next()
        path = str(task.file().location())
        if "/pcow-" in path:
            assert task.deletes().isEmpty()
            written.append((local_path(path), task.file().recordCount()))
    tasks.close()
    assert written
    for path, count in written:
        by_arrow = sorted(tuple(r.values()) for r in pq.read_table(path).to_pylist())
        by_duckdb = sorted(duckdb.sql(f"SELECT id, name, part, qty FROM read_parquet('{path}')").fetchall())
        assert by_arrow == by_duckdb and len(by_arrow) == count
        assert all(expected[row[0]] == row for row in by_arrow)


# CI runs each layout and each mode once (the partitioned table with copy-on-write images, which rewrites files in
# partitions; the unpartitioned one with merge-on-read images): each case costs half a minute of CI's 25-minute
# budget. PARTIALCOW_TESTS_LONG=1 runs all four.
_LAYOUT_MODES = [(layout, mode) for layout in ("unpartitioned", "partitioned") for mode in (COPY_ON_WRITE, MERGE_ON_READ)
                 if LONG or (layout, mode) in {("partitioned", COPY_ON_WRITE), ("unpartitioned", MERGE_ON_READ)}]


@pytest.mark.parametrize(("layout", "mode"), _LAYOUT_MODES)
def test_image_reads_like_the_overlay_and_pins_the_parent(spark, layout, mode):
    meta = f"img_{uuid.uuid4().hex[:8]}"
    root = f"{meta}.items"
    spark.sql(f"CREATE SCHEMA {meta}")
    partitioning = "PARTITIONED BY (part)" if layout == "partitioned" else ""
    spark.sql(f"CREATE TABLE {root} (id bigint, name string, part int, qty bigint) USING iceberg {partitioning} "
              "TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')")
    for chunk in range(3):  # several data files per partition
        _frame(spark, {k: v for k, v in ROWS.items() if k % 3 == chunk}).writeTo(root).append()
    # main hides a row with a position delete: its file (which dev changes too) must keep it hidden in either mode
    spark.sql(f"DELETE FROM {root} WHERE id = 20")
    base = {k: v for k, v in ROWS.items() if k != 20}
    file_with_deletes = _file_of(spark, root, 5)
    main_snapshot = spark.sql(f"SELECT snapshot_id FROM {root}.refs WHERE name = 'main'").collect()[0][0]

    # a crashed earlier build left a staging ref: the next build clears it
    spark.sql(f"ALTER TABLE {root} CREATE BRANCH partialcow_dev__staging")
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")], image_mode=mode)
    dev = dict(base)
    dev[1] = (1, "changed", 1, 10)
    dev[5] = (5, "name-5", 2, 555)
    del dev[7], dev[8]
    dev[100] = (100, "new", 7, 1)  # a partition value main does not have
    summary = build_model(spark, _frame(spark, dev), branch="dev", base_schema=meta, identifier="items",
                          key_columns=["id"], meta_schema=meta)
    # ids 1 and 7 share a data file, 5 and 8 the file with main's delete: copy-on-write rewrites the first only
    image = summary.image
    assert image is not None and image.mode == mode and image.describe() in summary.describe()
    if mode == COPY_ON_WRITE:
        assert (image.files_rewritten, image.files_with_deletes, image.rows_hidden_by_deletes) == (1, 1, 2)
        assert image.pages_rewritten > 0
    else:
        assert (image.files_rewritten, image.files_with_deletes, image.rows_hidden_by_deletes) == (0, 2, 4)
    view = f"{meta}__br_dev.items"
    _check_image_table(spark, view, root, "partialcow_dev")  # read as a table: one scan, no join, no view
    assert _rows(spark, view) == dev
    assert _live_rows(spark, meta, "dev", ["main"]) == dev
    assert _refs(spark, root) == {"main", "partialcow_dev"}
    assert _rows(spark, root) == base  # main never written
    assert spark.sql(f"SELECT snapshot_id FROM {root}.refs WHERE name = 'main'").collect()[0][0] == main_snapshot
    data_files, delete_files = _scan_files(spark, meta, "partialcow_dev")
    main_data, main_deletes = _scan_files(spark, meta, "main")
    assert file_with_deletes in data_files and main_deletes < delete_files
    if mode == MERGE_ON_READ:  # main's data files shared, changed keys hidden by position deletes
        assert main_data < data_files
    else:  # the touched file without deletes rewritten, untouched ones shared
        assert _file_of(spark, root, 1) not in data_files and data_files & main_data
        _check_rewritten_files(spark, meta, "partialcow_dev", dev)

    # nested: feat forks from dev's image
    create_branch(spark, name="feat", parent="dev", meta_schema=meta, models=[(meta, "items")], image_mode=mode)
    feat = dict(dev)
    feat[2] = (2, "feat", 2, 20)
    del feat[100], feat[3]
    build_model(spark, _frame(spark, feat), branch="feat", base_schema=meta, identifier="items", key_columns=["id"],
                meta_schema=meta)
    _check_image_table(spark, f"{meta}__br_feat.items", root, "partialcow_feat")
    assert _rows(spark, f"{meta}__br_feat.items") == feat
    assert _live_rows(spark, meta, "feat", ["dev", "main"]) == feat
    if mode == COPY_ON_WRITE:
        _check_rewritten_files(spark, meta, "partialcow_feat", feat)

    # main moves on: the branches keep showing main as of their builds until refreshed
    spark.sql(f"UPDATE {root} SET qty = -1 WHERE id IN (1, 10)")
    spark.sql(f"DELETE FROM {root} WHERE id = 11")
    theirs = dict(base)
    theirs[1], theirs[10] = (1, "name-1", 1, -1), (10, "name-10", 1, -1)
    del theirs[11]
    assert _rows(spark, root) == theirs
    assert _rows(spark, view) == dev and _rows(spark, f"{meta}__br_feat.items") == feat
    result = refresh_branch(spark, name="dev", meta_schema=meta)
    assert result.models == ((f"{meta}.items", True),)
    # the refreshed image was committed to the image table in place (no window without a table): its folder holds
    # one metadata file, numbered by that commit, not the registered one
    _check_image_table(spark, view, root, "partialcow_dev")
    folder = local_path(str(load_iceberg(spark, f"{meta}__br_dev", "items").location())) + "/metadata"
    image_metadata = [name for name in os.listdir(folder) if not name.startswith(".")]  # Hadoop's .crc files
    # a commit's file is "<version>-<uuid>.metadata.json" (the version parsed from the previous name, so a registered
    # file whose uuid starts with digits gives a long one), a registered one "<uuid>.metadata.json"
    committed = r"\d+-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.metadata\.json$"
    assert len(image_metadata) == 1 and re.match(committed, image_metadata[0]), image_metadata
    dev_now = {k: v for k, v in theirs.items() if k not in {1, 5, 7, 8, 100}} | {k: dev[k] for k in (1, 5, 100)}
    assert _rows(spark, view) == dev_now == _live_rows(spark, meta, "dev", ["main"])
    feat_now = {k: v for k, v in dev_now.items() if k not in {2, 3, 100}} | {2: feat[2]}
    assert _rows(spark, f"{meta}__br_feat.items") == feat_now  # descendants are re-pinned too

    drop_branch(spark, name="feat", meta_schema=meta)
    assert _refs(spark, root) == {"main", "partialcow_dev"}
    drop_branch(spark, name="dev", meta_schema=meta)
    assert _refs(spark, root) == {"main"}
    assert _rows(spark, root) == theirs
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_without_an_image_the_view_joins_the_live_parent(spark):
    """A format-version 3 root takes deletion vectors, not position-delete files: no image, the join form."""
    meta = f"img_{uuid.uuid4().hex[:8]}"
    root = f"{meta}.items"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.sql(f"CREATE TABLE {root} (id bigint, name string, part int, qty bigint) USING iceberg "
              "TBLPROPERTIES ('format-version' = '3')")
    _frame(spark, ROWS).writeTo(root).append()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    dev = {k: v for k, v in ROWS.items() if k != 4}
    summary = build_model(spark, _frame(spark, dev), branch="dev", base_schema=meta, identifier="items",
                          key_columns=["id"], meta_schema=meta)
    assert summary.image is None and summary.describe().endswith("; no image")
    view = f"{meta}__br_dev.items"
    assert "LEFT ANTI JOIN" in _view_text(spark, view) and _image_of(spark, view) is None
    assert _rows(spark, view) == dev
    assert _refs(spark, root) == {"main"}
    spark.sql(f"UPDATE {root} SET qty = 0 WHERE id = 9")  # read live: seen at once
    assert _rows(spark, view)[9] == (9, "name-9", 0, 0)
    drop_branch(spark, name="dev", meta_schema=meta)
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_image_mode_is_recorded_and_checked(spark):
    """A branch keeps its image mode; a metadata table written before modes existed gains the column, its branches
    read as copy-on-write; an unknown mode is refused with nothing recorded."""
    from partialcow.branch.store import BranchStore
    from partialcow.exceptions import BranchError

    meta = f"img_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.sql(f"CREATE TABLE {meta}.partialcow_branches (name STRING, parent STRING, created_at TIMESTAMP, "
              "merged_at TIMESTAMP, base_snapshots MAP<STRING, BIGINT>) USING iceberg")
    spark.sql(f"INSERT INTO {meta}.partialcow_branches VALUES ('old', 'main', current_timestamp(), NULL, map())")
    create_branch(spark, name="small", meta_schema=meta, image_mode=MERGE_ON_READ)
    store = BranchStore(spark, meta_schema=meta)
    assert {r.name: r.image_mode for r in store.all()} == {"old": COPY_ON_WRITE, "small": MERGE_ON_READ}
    with pytest.raises(BranchError, match="image mode 'fastest' is not one of copy-on-write, merge-on-read"):
        create_branch(spark, name="fast", meta_schema=meta, image_mode="fastest")
    assert store.get("fast") is None
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


@pytest.mark.parametrize("mode", [COPY_ON_WRITE, MERGE_ON_READ])
def test_a_key_the_parent_holds_twice_reads_as_the_live_form(spark, mode, monkeypatch):
    """Regression case: a parent with a repeated key (two files): the branch shows the model's one row for it, in
    the image (not patched in place in both files) as in the live join form (the diff joins once per copy).

    The copy-on-write case rewrites the files with Spark's job (``PARTIALCOW_DRIVER_MAX_ROWS=0``); the image test
    above rewrites them on the driver, as small changes are."""
    if mode == COPY_ON_WRITE:
        monkeypatch.setenv(DRIVER_ROWS_ENV, "0")
    meta = f"img_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.sql(f"CREATE TABLE {meta}.items (id bigint, name string, part int, qty bigint) USING iceberg")
    _frame(spark, {i: (i, f"a{i}", 0, i) for i in range(5)}).writeTo(f"{meta}.items").append()
    _frame(spark, {3: (3, "again", 0, 3), 7: (7, "b7", 0, 7)}).writeTo(f"{meta}.items").append()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")], image_mode=mode)
    dev = {i: (i, f"a{i}", 0, i) for i in range(5)} | {3: (3, "new", 0, 3), 7: (7, "b7", 0, 7)}
    summary = build_model(spark, _frame(spark, dev), branch="dev", base_schema=meta, identifier="items",
                          key_columns=["id"], meta_schema=meta)
    assert summary.image is not None
    assert summary.image.files_rewritten == (2 if mode == COPY_ON_WRITE else 0)
    info = overlay_info(spark, f"{meta}__br_dev", "items")
    live = sorted(tuple(r) for r in spark.sql(view_sql(info, (meta, "items"), materialized=False)).collect())
    assert sorted(tuple(r) for r in spark.table(f"{meta}__br_dev.items").collect()) == live
    assert [r for r in live if r[0] == 3] == [(3, "new", 0, 3)]  # once, as the model's result has it
    assert spark.table(f"{meta}__br_dev.items__pcow_overlay").where("id = 3").count() == 1
    drop_branch(spark, name="dev", meta_schema=meta)
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


def test_regression_materialize_kept_the_pinned_parent(spark):
    """Regression case (materialize refreshed): ``branch_materialize`` wrote the model's table from the parent as it
    is now, so a parent's change made after the branch's build appeared on the branch, though the image pinned the
    parent and nothing re-pinned it. Materializing changes how the branch is read, not what it shows;
    ``branch_refresh`` re-pins a materialized model (it rewrites the table) and the merge stays three-way."""
    meta = f"img_{uuid.uuid4().hex[:8]}"
    root, view = f"{meta}.items", f"{meta}__br_dev.items"
    spark.sql(f"CREATE SCHEMA {meta}")
    base = {i: (i, f"name-{i}", 0, i) for i in range(4)}
    _frame(spark, base).writeTo(root).using("iceberg").create()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")])
    dev = base | {1: (1, "dev", 0, 1)}
    build_model(spark, _frame(spark, dev), branch="dev", base_schema=meta, identifier="items", key_columns=["id"],
                meta_schema=meta)
    spark.sql(f"UPDATE {root} SET name = 'main' WHERE id = 2")
    spark.sql(f"INSERT INTO {root} VALUES (9, 'main', 0, 9)")
    theirs = base | {2: (2, "main", 0, 2), 9: (9, "main", 0, 9)}
    assert _rows(spark, view) == dev  # the image pins main as of dev's build

    assert materialize_branch(spark, name="dev", meta_schema=meta).models == ((f"{meta}.items", len(dev)),)
    assert "items__pcow_full" in _view_text(spark, view)
    assert _rows(spark, view) == dev  # still main as of the build: no refresh behind the user's back
    materialize_branch(spark, name="dev", meta_schema=meta)  # again: the table already holds what dev shows
    assert _rows(spark, view) == dev

    result = refresh_branch(spark, name="dev", meta_schema=meta)
    assert result.materialized == (f"{meta}.items",) and "materialized table rewritten" in result.describe()
    assert "items__pcow_full" in _view_text(spark, view)
    assert _rows(spark, view) == theirs | {1: dev[1]}  # re-pinned: dev's change over main as it is now

    merged, conflicts = three_way(base, dev, theirs, policy="theirs")
    assert not conflicts
    merge_branch(spark, name="dev", meta_schema=meta)
    assert _rows(spark, root) == merged == _rows(spark, view)
    drop_branch(spark, name="dev", meta_schema=meta)
    spark.sql(f"DROP SCHEMA {meta} CASCADE")


@pytest.mark.parametrize("driver", [True, False], ids=["driver", "spark job"])
def test_a_root_file_in_another_format_is_hidden_not_rewritten(spark, driver, monkeypatch):
    """A copy-on-write image rewrites the root's Parquet files a build touches; an ORC file (another writer's, after
    ``write.format.default`` changed) cannot be: its changed rows are hidden by position deletes instead, as for a
    file that cannot take the new values. The build failed with pyarrow's "Parquet magic bytes not found"."""
    if not driver:
        monkeypatch.setenv(DRIVER_ROWS_ENV, "0")
    meta = f"img_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {meta}")
    spark.sql(f"CREATE TABLE {meta}.items (id bigint, name string, part int, qty bigint) USING iceberg")
    _frame(spark, {i: ROWS[i] for i in range(5)}).writeTo(f"{meta}.items").append()
    spark.sql(f"ALTER TABLE {meta}.items SET TBLPROPERTIES ('write.format.default' = 'orc')")
    _frame(spark, {i: ROWS[i] for i in range(5, 10)}).writeTo(f"{meta}.items").append()
    create_branch(spark, name="dev", meta_schema=meta, models=[(meta, "items")], image_mode=COPY_ON_WRITE)
    dev = {i: ROWS[i] for i in range(10)} | {2: (2, "new", 2, 20), 7: (7, "new", 1, 70)}
    summary = build_model(spark, _frame(spark, dev), branch="dev", base_schema=meta, identifier="items",
                          key_columns=["id"], meta_schema=meta)
    assert summary.image is not None and summary.image.files_rewritten == 1  # the Parquet file only
    assert _rows(spark, f"{meta}__br_dev.items") == dev
    assert _rows(spark, f"{meta}.items") == {i: ROWS[i] for i in range(10)}
    drop_branch(spark, name="dev", meta_schema=meta)
    spark.sql(f"DROP SCHEMA {meta} CASCADE")
