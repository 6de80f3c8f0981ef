"""Read images: a model's content on a branch kept as an Iceberg branch (a ref) of the model's root table, so that
reading the model on the branch is one table scan, with no join against the overlay.

The overlay table stays the record of what the branch changed (diff, merge and conflicts read it); the image is
derived from it after every change of the overlay (build, merge, the parent's rebuild) and only serves reads.
For model ``orders`` of schema ``shop`` on branch ``dev`` the image is the ref ``partialcow_dev`` of ``shop.orders``,
published as the read-only Iceberg table ``shop__br_dev.orders`` (:func:`publish_image_table`). Building it:

1. a staging ref is forked from what the parent level shows: the root's ``main`` snapshot, or the parent branch's
   own image;
2. the fork's rows whose key is in the overlay are found (a join of the fork snapshot with the overlay's keys:
   data file and row position) and changed, per the branch's image mode:

   - ``copy-on-write`` (default): each data file they are in is rewritten by the Parquet page engine, as
     ``partial_cow_incremental`` does (only the pages holding changed values re-encoded, every other page copied
     byte for byte); reads then cost what reading the table costs, and the image stores the touched files' bytes.
     Changed rows that fit the driver (``PARTIALCOW_DRIVER_MAX_ROWS``, as for a model's batch) are rewritten there,
     larger sets by a Spark job;
   - ``merge-on-read``: one position-delete file per data file hides them; the image stores only deletes and the
     changed rows, and every read applies the deletes (as Iceberg's own merge-on-read does: +15-20% on a scan);

   a data file that already has deletes in the fork, or lacks a column the table gained later, takes deletes in
   either mode (Iceberg refuses to replace a file that has deletes, and rightly: they would stop hiding rows);
3. the overlay's upserted rows not written in place are appended to the staging ref;
4. one metadata commit points the image ref at the staging ref's snapshot and removes the staging ref, so readers
   see the old image or the new one, never a half-built one. ``main`` is never written;
5. the image table's metadata is pointed at the new snapshot in one metastore commit (readers see the old image or
   the new one); the first build registers the table.

A batch of ``partial_cow_incremental`` on the branch changes the overlay at its keys only, so it *extends* the image
instead (:func:`extend_image`): the staging ref is forked from the image itself, the image's rows of the batch's keys
(their positions read with the branch's current rows, no join of the whole table) are changed as in step 2 and the
batch's new rows appended. That is done only while the image's snapshot records the parent level's current snapshot,
the overlay's snapshot before the batch and the image mode (summary properties ``partialcow.image-*`` on every
snapshot a build commits); otherwise (the parent moved, a crash left the overlay ahead of the image) it is rebuilt.

An image pins the parent as of its build: rows the parent changes later show up on the branch at the next build or
``branch_refresh``. The image's snapshots keep the parent's data files they share alive until the branch is dropped.
No image (the view joins the overlay to the parent at read time instead) for detached or materialized models, a root
that is not an Iceberg table of format version 1 or 2 (version 3 takes deletion vectors only), a parent level without
an image, an overlay whose columns or types differ from the root's, or an empty overlay.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from partialcow.branch.catalog import holds_no_rows, iceberg_snapshot, load_iceberg
from partialcow.branch.frames import key_join, same_key_sql
from partialcow.branch.image_files import image_lease, marked, rewrite_in_place, write_position_deletes
from partialcow.branch.naming import (
    IMAGE_OF_PROPERTY,
    MAIN,
    OP_COLUMN,
    OP_DELETE,
    OP_UPSERT,
    overlay_schema,
    overlay_table,
    qualified,
    quote,
)
from partialcow.branch.types import (
    COPY_ON_WRITE,
    IMAGE_MODES,
    MERGE_ON_READ,
    ImageMode,
    OverlayInfo,
    validate_image_mode,
)
from partialcow.exceptions import BranchError
from partialcow.spark.journal import data_file_prefix
from partialcow.spark.rewrite_job import DELETE, FILE, POS
from partialcow.spark.tables import iceberg_file_schema
from partialcow.table.java import jvm as java_gateway

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "COPY_ON_WRITE",
    "IMAGE_MODES",
    "MERGE_ON_READ",
    "ImageMode",
    "ImageReport",
    "drop_image",
    "drop_reader_relation",
    "extend_image",
    "extendable_image",
    "fork_level",
    "has_image",
    "image_ref",
    "image_relation",
    "publish_image_table",
    "refresh_image",
    "validate_image_mode",
]

_REF_PREFIX = "partialcow_"
_STAGE_SUFFIX = "__staging"

# Summary properties of every snapshot an image build commits: what the image reflects (the parent level's snapshot
# it forked from, the overlay's snapshot, the image mode), so that the next batch on the branch can tell whether it
# may extend the image (:func:`extendable_image`) rather than rebuild it.
_FORK_MARK = "partialcow.image-fork"
_OVERLAY_MARK = "partialcow.image-overlay"
_MODE_MARK = "partialcow.image-mode"
_SPEC = "_pcow_spec"
# per key of a batch given to extend_image: false when the batch deletes it from the branch; where the image holds it
ALIVE, AT = "_pcow_alive", "_pcow_at"

@dataclass(frozen=True)
class ImageReport:
    """What building an image wrote: data files rewritten in place (their pages re-encoded or copied) and rows
    hidden by position deletes (in how many data files); ``extended`` when one batch's changes were applied to the
    image as it was, rather than the image rebuilt from the parent; ``unchanged`` when the image had been built
    from the parent's and the overlay's current snapshots already (nothing written).

    >>> ImageReport(COPY_ON_WRITE, files_rewritten=2, pages_rewritten=50, pages_copied=200, files_with_deletes=1,
    ...             rows_hidden_by_deletes=7).describe()
    'copy-on-write image: 2 data files rewritten (50 pages re-encoded, 200 copied), 7 rows hidden by position deletes in 1 data files'
    """  # noqa: E501 - a doctest output line cannot wrap

    mode: ImageMode
    files_rewritten: int
    pages_rewritten: int
    pages_copied: int
    files_with_deletes: int
    rows_hidden_by_deletes: int
    extended: bool = False
    unchanged: bool = False

    def describe(self) -> str:
        if self.unchanged:
            return f"{self.mode} image: unchanged (the parent and the overlay are as when it was built)"
        return (
            f"{self.mode} image{' (extended)' if self.extended else ''}: {self.files_rewritten} data files "
            f"rewritten ({self.pages_rewritten} pages re-encoded, "
            f"{self.pages_copied} copied), {self.rows_hidden_by_deletes} rows hidden by position deletes in "
            f"{self.files_with_deletes} data files"
        )


def image_ref(branch: str) -> str:
    """The name of branch ``branch``'s image ref on a root table.

    >>> image_ref("dev")
    'partialcow_dev'
    """
    return _REF_PREFIX + branch


def image_relation(base_schema: str, identifier: str, branch: str) -> str:
    """The SQL name that reads the image of ``base_schema.identifier`` on ``branch``.

    >>> image_relation("shop", "orders", "dev")
    '`shop`.`orders`.`branch_partialcow_dev`'
    """
    return f"{qualified(base_schema, identifier)}.{quote('branch_' + image_ref(branch))}"


def _ref_snapshot(table: Any, ref: str) -> int | None:
    found = table.refs().get(ref)
    return None if found is None else int(found.snapshotId())


def has_image(spark: SparkSession, base_schema: str, identifier: str, branch: str) -> bool:
    table = load_iceberg(spark, base_schema, identifier)
    return table is not None and _ref_snapshot(table, image_ref(branch)) is not None


def drop_image(spark: SparkSession, base_schema: str, identifier: str, branch: str) -> None:
    """Remove ``branch``'s image ref (and a staging ref a crash left) from the root table, if there is one."""
    table = load_iceberg(spark, base_schema, identifier)
    if table is None:
        return
    refs = [r for r in (image_ref(branch), image_ref(branch) + _STAGE_SUFFIX) if table.refs().containsKey(r)]
    if not refs:
        return
    manage = table.manageSnapshots()
    for ref in refs:
        manage = manage.removeBranch(ref)
    manage.commit()
    spark.catalog.refreshTable(qualified(base_schema, identifier))


def publish_image_table(spark: SparkSession, *, schema: str, base_schema: str, identifier: str, branch: str) -> None:
    """Make ``schema.identifier`` (what readers of the model on ``branch`` query) a read-only Iceberg table over the
    image: a copy of the root table's metadata whose ``main`` is the image ref's snapshot, registered in the catalog.

    Why a table and not a view: resolving a view costs two metastore look-ups and a metadata read per query (see
    bench/README.md, "Measurements behind code choices"); a table costs what the root table costs. The image table
    shares the root's data, delete and manifest files, which the root's image ref keeps alive; ``gc.enabled=false``
    makes Iceberg refuse to expire its snapshots or purge it (that would delete the root's files), and it is only ever
    unregistered (:func:`drop_reader_relation`). Its own folder holds one metadata file.

    When the image table is already there, the new metadata is committed to it (one metastore update): readers see
    the old image or the new one, never a missing table, and the previous metadata file is deleted. Otherwise the
    relation in its place (a view, an image table of another layout) is dropped and the table registered.
    """
    jvm = java_gateway(spark)
    root = load_iceberg(spark, base_schema, identifier)
    snapshot = None if root is None else _ref_snapshot(root, image_ref(branch))
    if snapshot is None:
        raise BranchError(f"model {base_schema}.{identifier} has no image on branch {branch} to publish")
    current = root.operations().current()
    location = f"{spark.catalog.getDatabase(schema).locationUri.rstrip('/')}/{identifier}"
    builder = jvm.org.apache.iceberg.TableMetadata.buildFrom(current)
    for ref in list(current.refs().keySet().toArray()):
        if ref != MAIN:
            builder.removeRef(ref)
    properties = jvm.java.util.HashMap()
    for key, value in {
        "gc.enabled": "false",
        "write.metadata.delete-after-commit.enabled": "false",  # the metadata log lists the root's files
        IMAGE_OF_PROPERTY: f"{base_schema}.{identifier}@{image_ref(branch)}",
    }.items():
        properties.put(key, value)
    metadata = builder.setBranchSnapshot(snapshot, MAIN).setLocation(location).setProperties(properties).build()
    if _swap_image_metadata(spark, schema, identifier, metadata, location):
        return
    path = f"{location}/metadata/{uuid.uuid4()}.metadata.json"
    jvm.org.apache.iceberg.TableMetadataParser.write(metadata, root.io().newOutputFile(path))
    drop_reader_relation(spark, schema, identifier)
    spark.sql(
        f"CALL spark_catalog.system.register_table(table => '{qualified(schema, identifier)}', "
        f"metadata_file => '{path}')"
    )


def _swap_image_metadata(spark: SparkSession, schema: str, identifier: str, metadata: Any, location: str) -> bool:
    """Commit ``metadata`` to the image table ``schema.identifier`` if it is one of the same root and ref at
    ``location``, delete the metadata file it replaced, and say whether it did."""
    loaded = load_iceberg(spark, schema, identifier)
    if loaded is None:
        return False
    current = loaded.operations().current()
    wanted = metadata.properties().get(IMAGE_OF_PROPERTY)
    if current.properties().get(IMAGE_OF_PROPERTY) != wanted or str(loaded.location()).rstrip("/") != location:
        return False
    old_file = str(current.metadataFileLocation())
    loaded.operations().commit(current, metadata)
    spark.catalog.refreshTable(qualified(schema, identifier))
    if old_file.startswith(location + "/metadata/"):
        with contextlib.suppress(Exception):  # a file left behind costs bytes, not correctness
            loaded.io().deleteFile(old_file)
    return True


def drop_reader_relation(spark: SparkSession, schema: str, identifier: str) -> None:
    """Drop what readers of a model on a branch query, ``schema.identifier``: its view, or its image table, which is
    unregistered (never purged: its data files are the root table's) and its own metadata file deleted."""
    loaded = load_iceberg(spark, schema, identifier)
    if loaded is None or not loaded.properties().containsKey(IMAGE_OF_PROPERTY):
        spark.sql(f"DROP VIEW IF EXISTS {qualified(schema, identifier)}")
        return
    metadata_file = str(loaded.operations().current().metadataFileLocation())
    spark.sql(f"DROP TABLE {qualified(schema, identifier)}")
    if metadata_file.startswith(str(loaded.location()).rstrip("/") + "/metadata/"):
        loaded.io().deleteFile(metadata_file)


def fork_level(spark: SparkSession, levels: Sequence[str], base_schema: str, identifier: str) -> str | None:
    """The level an image of the model on a branch starts from (its ``parent_level``): the nearest of ``levels``
    (the branch's parents, nearest first) that has the model, or past a parent branch that changes nothing in it and
    has no image of its own (it shows its parent through a view), the level that one shows. So a child's image pins
    what it showed, as one of ``main``'s does, where it read its parent live before (and failed to read once the
    parent's columns changed)."""
    from partialcow.branch.levels import parent_level, shows_its_parent

    level = parent_level(spark, levels, base_schema, identifier)
    while (level is not None and level != MAIN and not has_image(spark, base_schema, identifier, level)
           and shows_its_parent(spark, overlay_schema(base_schema, level), identifier)):
        level = parent_level(spark, levels[list(levels).index(level) + 1:], base_schema, identifier)
    return level


def _fork_snapshot(table: Any, parent_level: str) -> int | None:
    """The snapshot that holds what the parent level shows: ``main``'s, or the parent branch's image."""
    if parent_level == MAIN:
        current = table.currentSnapshot()
        return None if current is None else int(current.snapshotId())
    return _ref_snapshot(table, image_ref(parent_level))


def _image_fork(spark: SparkSession, table: Any, *, info: OverlayInfo, parent_level: str, root: str) -> int | None:
    """The snapshot an image of the model forks from, or None when the model cannot have an image (see the module
    docstring; an empty overlay is tested apart, since that check may cost a scan)."""
    if table is None or info.mode != "delta" or int(table.operations().current().formatVersion()) >= 3:
        return None
    fork = _fork_snapshot(table, parent_level)
    root_types = {f.name.lower(): f.dataType for f in spark.table(root).schema}
    columns = {c.lower() for c in info.columns}
    overlay_types = {f.name.lower(): f.dataType for f in spark.table(info.table).schema if f.name.lower() in columns}
    return fork if root_types == overlay_types else None


def refresh_image(
    spark: SparkSession,
    *,
    info: OverlayInfo,
    branch: str,
    parent_level: str,
    base_schema: str,
    identifier: str,
    mode: ImageMode = COPY_ON_WRITE,
) -> ImageReport | None:
    """(Re)build ``branch``'s image of the model from its overlay and report what it wrote; None (and no image ref)
    when it cannot have one.

    ``parent_level`` is the nearest level above ``branch`` that has the model (``main`` or a branch); ``mode`` one
    of :data:`IMAGE_MODES`.
    """
    validate_image_mode(mode)
    root = qualified(base_schema, identifier)
    table = load_iceberg(spark, base_schema, identifier)
    if table is None:
        return None
    fork = _image_fork(spark, table, info=info, parent_level=parent_level, root=root)
    if fork is None or holds_no_rows(spark, info.schema, overlay_table(info.identifier)):
        drop_image(spark, base_schema, identifier, branch)
        return None
    overlay = iceberg_snapshot(spark, info.schema, overlay_table(info.identifier))
    current = _ref_snapshot(table, image_ref(branch))
    if current is not None and overlay is not None:
        summary = dict(table.snapshot(current).summary())
        if summary | _marks(fork, overlay, mode) == summary:
            # built from the same parent snapshot, overlay snapshot and mode: the same rows. Keeping its snapshot
            # keeps a child branch's merge a fast-forward (a child's merge base records it).
            return ImageReport(mode, 0, 0, 0, 0, 0, unchanged=True)
    pinned = info.table + (f" VERSION AS OF {overlay}" if overlay is not None and overlay >= 0 else "")
    root_columns = spark.table(root).columns
    keys = list(info.key_columns)
    on = same_key_sql(keys, "p", "o")  # a tombstone's key may have a null part: the parent's row it deletes has it
    partition_by = ", ".join(f"o.{quote(k)}" for k in keys)
    values = ", ".join(f"o.{quote(c)}" for c in root_columns)
    moved = "".join(f" OR NOT (p.{quote(c)} <=> o.{quote(c)})" for c in _partition_sources(table, root_columns))
    # The fork's rows the overlay changes. A key the parent holds more than once is deleted wherever it is and the
    # overlay's rows for it appended, as the live view form shows them; so is a row whose partition changes (a
    # rewritten file keeps its partition).
    changed = spark.sql(
        f"SELECT p._spec_id AS {_SPEC}, p._file AS {FILE}, p._pos AS {POS}, "
        f"o.{OP_COLUMN} = '{OP_DELETE}' OR count(*) OVER (PARTITION BY {partition_by}) > 1{moved} AS {DELETE}, "
        f"{values} FROM {root} VERSION AS OF {fork} p JOIN {pinned} o ON {on}"
    )
    upserts = spark.sql(f"SELECT {', '.join(quote(c) for c in root_columns)} FROM {pinned} "
                        f"WHERE {OP_COLUMN} = '{OP_UPSERT}'")
    return _guarded(spark, root, branch, partial(
        _build, spark, table, branch=branch, start=fork, changed=changed, upserts=upserts, keys=keys, root=root,
        mode=mode, marks=_marks(fork, overlay, mode), extended=False))


def extendable_image(
    spark: SparkSession, *, info: OverlayInfo, branch: str, parent_level: str, base_schema: str, identifier: str,
    mode: ImageMode,
) -> int | None:
    """The overlay's current snapshot when the next change of the overlay (one batch of ``partial_cow_incremental``)
    can extend the model's image on ``branch`` (:func:`extend_image`) instead of rebuilding it, else None. It can
    when the image ref's snapshot records the parent level's current snapshot, the overlay's current snapshot and
    ``mode``, and what readers of the model on the branch query is the image table at that snapshot (so the rows
    read from it carry the image's row positions).

    Anything else (the parent moved, the overlay changed without the image, as after a crash between the two, the
    image mode changed, the table's columns changed) takes the rebuild.
    """
    root = qualified(base_schema, identifier)
    table = load_iceberg(spark, base_schema, identifier)
    if table is None:
        return None
    image = _ref_snapshot(table, image_ref(branch))
    fork = _image_fork(spark, table, info=info, parent_level=parent_level, root=root)
    if image is None or fork is None:
        return None
    if [c.lower() for c in spark.table(root).columns] != [c.lower() for c in info.columns]:
        return None  # the branch shows a view over the image, not the image table
    summary = table.snapshot(image).summary()
    overlay = iceberg_snapshot(spark, info.schema, overlay_table(info.identifier))
    if overlay is None or dict(summary) | _marks(fork, overlay, mode) != dict(summary):
        return None
    readers = load_iceberg(spark, info.schema, info.identifier)
    current = None if readers is None else readers.currentSnapshot()
    if (
        current is None
        or int(current.snapshotId()) != image
        or readers.properties().get(IMAGE_OF_PROPERTY) != f"{base_schema}.{identifier}@{image_ref(branch)}"
    ):
        return None
    return overlay


def extend_image(
    spark: SparkSession, *, info: OverlayInfo, branch: str, parent_level: str, base_schema: str, identifier: str,
    mode: ImageMode, states: DataFrame, keys: Sequence[str], overlay: int,
) -> ImageReport:
    """Apply one batch to the model's image on ``branch`` (when :func:`extendable_image` said it can) and publish it.

    ``states``: per key of the batch that changes the branch, its new row (the model's columns), whether it is
    alive (``ALIVE``: false for a delete) and where the image holds it (``AT``: per copy, ``_spec_id``, ``_file``,
    ``_pos`` and the row there, as read from the image table; empty or null when it lacks the key); ``overlay``: the
    overlay's snapshot after the batch. Only the data files holding those keys are rewritten (or take deletes), and
    only the batch's new rows appended: the image is ``fork + overlay`` before the batch, and the batch changes the
    overlay at its keys only.
    """
    from pyspark.sql import functions as F

    root = qualified(base_schema, identifier)
    table = load_iceberg(spark, base_schema, identifier)
    fork = _fork_snapshot(table, parent_level)
    start = _ref_snapshot(table, image_ref(branch))
    if fork is None or start is None:
        raise BranchError(f"model {root} has no image on branch {branch} to extend")
    root_columns = spark.table(root).columns
    alive, was = F.col(ALIVE), F.col("_pcow_was")
    moved = [~was.getField(c).eqNullSafe(F.col(quote(c))) for c in _partition_sources(table, root_columns)]
    changed = states.select("*", (F.size(AT) > 1).alias("_pcow_copies"), F.explode(AT).alias("_pcow_was")).select(
        was.getField("_spec_id").alias(_SPEC), was.getField("_file").alias(FILE), was.getField("_pos").alias(POS),
        functools.reduce(operator.or_, moved, ~alive | F.col("_pcow_copies")).alias(DELETE),
        *[quote(c) for c in root_columns]
    )
    upserts = states.where(alive).select(*[quote(c) for c in root_columns])
    report = _guarded(spark, root, branch, partial(
        _build, spark, table, branch=branch, start=start, changed=changed, upserts=upserts, keys=list(keys),
        root=root, mode=mode, marks=_marks(fork, overlay, mode), extended=True))
    publish_image_table(spark, schema=info.schema, base_schema=base_schema, identifier=identifier, branch=branch)
    return report


def _partition_sources(table: Any, columns: Sequence[str]) -> list[str]:
    """Of ``columns``, those a partition spec of the root table (any, old ones included) derives partitions from:
    a row whose value of one changes may belong to another partition, so it is appended, not rewritten in place."""
    schema = table.schema()
    names = set()
    for spec in table.specs().values():
        for field in spec.fields():
            column = schema.findColumnName(field.sourceId())
            if column is not None:
                names.add(str(column).lower())
    return [c for c in columns if c.lower() in names]


def _marks(fork: int, overlay: int | None, mode: ImageMode) -> dict[str, str]:
    """The summary properties of an image's snapshots: what the image reflects.

    >>> _marks(7, 9, "copy-on-write")
    {'partialcow.image-fork': '7', 'partialcow.image-overlay': '9', 'partialcow.image-mode': 'copy-on-write'}
    """
    return {_FORK_MARK: str(fork), _OVERLAY_MARK: str(overlay), _MODE_MARK: mode}


def _guarded(spark: SparkSession, root: str, branch: str, build: Any) -> ImageReport:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    try:
        report: ImageReport = build()
    except (Py4JJavaError, CapturedException) as exc:
        message = str(exc).strip().splitlines()[0]
        raise BranchError(
            f"model {root}: building its image on branch {branch} failed ({message}); the branch's model still "
            "reads what it read before, and the next build retries"
        ) from exc
    return report



def _build(spark: SparkSession, table: Any, *, branch: str, start: int, changed: DataFrame, upserts: DataFrame,
           keys: Sequence[str], root: str, mode: ImageMode, marks: dict[str, str], extended: bool) -> ImageReport:
    """The image's steps (see the module docstring) from snapshot ``start``: staging ref, ``changed`` rows (the
    positions to change: ``_pcow_spec``, file, position, delete flag, new values), ``upserts`` appended (those not
    written in place), one switch of the ref. Every snapshot committed carries ``marks`` in its summary. Its files
    are written under a lease of the root table (:func:`image_lease`): a build that fails or dies leaves the ones
    no snapshot references to the table's next write."""
    with image_lease(spark, table, root) as lease:
        try:
            return _build_on_stage(spark, table, branch=branch, start=start, changed=changed, upserts=upserts,
                                   keys=keys, root=root, mode=mode, marks=marks, extended=extended,
                                   file_prefix=data_file_prefix(lease.write_id))
        except BaseException:
            lease.keep_for_recovery = True
            raise


def _build_on_stage(spark: SparkSession, table: Any, *, branch: str, start: int, changed: DataFrame,
                    upserts: DataFrame, keys: Sequence[str], root: str, mode: ImageMode, marks: dict[str, str],
                    extended: bool, file_prefix: str) -> ImageReport:
    from pyspark.sql import functions as F

    ref, stage = image_ref(branch), image_ref(branch) + _STAGE_SUFFIX
    manage = table.manageSnapshots()
    if table.refs().containsKey(stage):  # left by a build that crashed
        manage = manage.removeBranch(stage)
    manage.createBranch(stage, start).commit()

    root_columns = spark.table(root).columns
    changed = changed.persist()
    appended = False
    try:
        results = []
        if mode == COPY_ON_WRITE:
            key_names = {k.lower() for k in keys}
            results = rewrite_in_place(spark, table, changed, fork=start, stage=stage, marks=marks,
                                        update_columns=[c for c in root_columns if c.lower() not in key_names],
                                        table_schema=iceberg_file_schema(spark, root), file_prefix=file_prefix)
        rewritten = [r["src"] for r in results]
        in_place = F.col(FILE).isin(rewritten) if rewritten else F.lit(False)
        positions = [
            (int(r[0]), str(r[1]), int(r[2]))
            for r in changed.filter(~in_place).select(_SPEC, FILE, POS).collect()
        ]
        if positions:
            delta = table.newRowDelta().toBranch(stage)
            for delete_file in write_position_deletes(spark, table, positions, start, file_prefix=file_prefix):
                delta = delta.addDeletes(delete_file)
            marked(delta, marks).commit()
        spark.catalog.refreshTable(root)
        if rewritten:
            upserts = key_join(upserts, changed.filter(in_place & ~F.col(DELETE)), keys, "left_anti")
        upserts = upserts.select(*[quote(c) for c in root_columns])
        # An overlay that only changes rows the fork has (a batch of updates) appends nothing: a quick look for one
        # row costs less than an INSERT job that writes none.
        if not upserts.isEmpty():
            writer = upserts.writeTo(f"{root}.{quote('branch_' + stage)}")
            for key, value in marks.items():
                writer = writer.option(f"snapshot-property.{key}", value)
            writer.append()
            appended = True
    finally:
        changed.unpersist()
    table.refresh()
    if not (results or positions or appended):
        marked(table.newAppend().toBranch(stage), marks).commit()  # nothing written: record what it reflects
        table.refresh()
    staged = _ref_snapshot(table, stage)
    manage = table.manageSnapshots()
    manage = manage.replaceBranch(ref, staged) if table.refs().containsKey(ref) else manage.createBranch(ref, staged)
    manage.removeBranch(stage).commit()
    spark.catalog.refreshTable(root)
    return ImageReport(
        mode=mode,
        files_rewritten=len(results),
        pages_rewritten=sum(r["pages_rewritten"] for r in results),
        pages_copied=sum(r["pages_copied"] for r in results),
        files_with_deletes=len({path for _, path, _ in positions}),
        rows_hidden_by_deletes=len(positions),
        extended=extended,
    )


