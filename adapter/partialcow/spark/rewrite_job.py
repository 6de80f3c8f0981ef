"""The executor side of a partial copy-on-write: locate the changes, then one rewrite per touched file and new files
for inserts.

Two Spark jobs, both in Python workers:

1. ``locate_partition`` (``mapInArrow`` over the batch routed by index bucket, or over the batch's own partitions
   when it is large against the index): each task reads the index buckets of its keys, joins them with Arrow, and
   leaves its rows, split by the data file they touch, as Arrow IPC fragments in a scratch folder (inserts in
   fragments of their own).
2. ``run_file_tasks`` (one task per touched file, plus the insert writers): reads the fragments of its file from
   every locate task and rewrites the file with the Parquet page engine.

The scratch folder is the exchange between the two jobs: the batch is shuffled by Spark at most once (by bucket)
and its rows never pass through the JVM again, nor through the driver. Every task returns one small row, so only
file-level results reach the driver.

Branch images (``partialcow.branch.image``) know their rows' files and positions from a Spark join instead of the
row index: ``rewrite_files_in_place`` takes those rows routed by file and runs the same per-file rewrite.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from partialcow.exceptions import InvalidChangeError, UnsupportedFileError
from partialcow.index.lookup import join_keys, read_buckets
from partialcow.parquet import ROW_POSITION, rewrite_file, write_table
from partialcow.parquet.writer import conform
from partialcow.spark.decimal_transfer import restore_decimals

__all__ = [
    "IN_PLACE_RESULT_SCHEMA",
    "LOCATE_RESULT_SCHEMA",
    "FileTask",
    "constrains",
    "holds_column",
    "is_parquet",
    "locate_partition",
    "narrower",
    "new_file_name",
    "require_parquet",
    "rewrite_changed_file",
    "rewrite_files_in_place",
    "run_file_tasks",
    "unfit",
    "whole_rows",
    "write_partition",
]

POS = "_pcow_pos"
DELETE = "_pcow_delete"
BUCKET = "_pcow_bucket"
FILE = "_pcow_file"

LOCATE_RESULT_SCHEMA = (
    "rows long, file_ids array<int>, file_rows array<long>, fragments array<string>, inserts long, "
    "inserts_file string, null_keys long, repeated_keys long, samples array<string>, keys_file string"
)


def new_file_name(prefix: str = "pcow-") -> str:
    """A fresh data file name (never reused, so an aborted attempt cannot clash with a later one); ``prefix`` names
    the write that creates it (see ``partialcow.spark.journal``), so a killed write's files can be found."""
    return f"{prefix}{uuid.uuid4().hex}.parquet"


def _local(location: str) -> str:
    """A live file's local path. Its location is as the table format spells it (Iceberg's is unescaped: its partition
    folders' "%3A" are on disk as they stand), so it is not decoded as a URI."""
    from partialcow.spark.tables import local_path

    return local_path(location)


def narrower(written: pa.DataType, table: pa.DataType) -> bool:
    """Whether a file's column type holds fewer values than the table's type now (a file written before Iceberg
    promoted the column: int -> bigint, float -> double, a decimal's precision).

    >>> narrower(pa.int32(), pa.int64()), narrower(pa.int64(), pa.int64()), narrower(pa.float32(), pa.float64())
    (True, False, True)
    >>> narrower(pa.decimal128(9, 2), pa.decimal128(12, 2)), narrower(pa.string(), pa.large_string())
    (True, False)
    """
    if (pa.types.is_integer(written) and pa.types.is_integer(table)) or (
            pa.types.is_floating(written) and pa.types.is_floating(table)):
        return bool(written.bit_width < table.bit_width)
    if pa.types.is_decimal(written) and pa.types.is_decimal(table):
        return bool(written.precision < table.precision)
    return False


def _children(t: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [t.value_field]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    return []


def constrains(written: pa.DataType, table: pa.DataType) -> bool:
    """Whether a file's column type may not hold every value of the table's type: it is narrower (see
    :func:`narrower`), or somewhere inside it a field is narrower or required where the table's is optional (Iceberg
    promotes nested fields too, and Spark's writes store a struct field or list element as required when the
    query could not produce a null).

    >>> s = lambda x, nullable=True: pa.struct([pa.field("x", x, nullable=nullable)])
    >>> constrains(s(pa.float32()), s(pa.float64())), constrains(s(pa.int64(), False), s(pa.int64()))
    (True, True)
    >>> constrains(pa.list_(pa.field("e", pa.int64(), nullable=False)), pa.list_(pa.int64())), constrains(s(pa.int64()), s(pa.int64()))
    (True, False)
    >>> constrains(s(pa.int64()), pa.struct([pa.field("x", pa.int64()), pa.field("y", pa.int64())]))
    True
    """  # noqa: E501 - a doctest line cannot wrap
    if narrower(written, table):
        return True
    inner, wanted = _children(written), _children(table)
    if pa.types.is_struct(written) and pa.types.is_struct(table) and not _same_fields(inner, wanted):
        # other fields (one added, renamed, or dropped and added again under its name since the file was
        # written): a cast into the file's struct matches fields by name and drops or nulls the rest
        return True
    if len(inner) != len(wanted):  # another shape: the cast refuses it
        return False
    return any((not w.nullable and t.nullable) or constrains(w.type, t.type) for w, t in zip(inner, wanted))


def _same_fields(written: Sequence[pa.Field], table: Sequence[pa.Field]) -> bool:
    """Whether two structs' fields are the same ones: names in order, and Parquet field ids where both have them."""
    if [f.name for f in written] != [f.name for f in table]:
        return False
    ids = [[(f.metadata or {}).get(_FIELD_ID) for f in fields] for fields in (written, table)]
    return all(None in pair or pair[0] == pair[1] for pair in zip(*ids))


def _other_fields(written: pa.DataType, table: pa.DataType) -> bool:
    """Whether a struct somewhere in a file's column type holds other fields than the table's type (names in order,
    Parquet field ids where both have them); types and nullability aside, which :func:`constrains` weighs.

    >>> f = lambda i: pa.struct([pa.field("x", pa.int64(), metadata={_FIELD_ID: i})])
    >>> _other_fields(pa.list_(f(b"4")), pa.list_(f(b"7"))), _other_fields(f(b"4"), f(b"4"))
    (True, False)
    """
    inner, wanted = _children(written), _children(table)
    if pa.types.is_struct(written) and pa.types.is_struct(table) and not _same_fields(inner, wanted):
        return True
    if len(inner) != len(wanted):
        return False
    return any(_other_fields(w.type, t.type) for w, t in zip(inner, wanted))


def unfit(values: pa.Array, field: pa.Field) -> pa.Array:
    """Per value: whether the file column ``field`` cannot hold it exactly: a null in a column the file stores as
    required (Spark's own writes do so where the query could not produce a null, though the table's column is
    optional), a value beyond a narrower type (see :func:`narrower`; a double is held only if it survives the
    round trip through float, NaN included), or any value of a nested column the file constrains inside (see
    :func:`constrains`; rare, so not looked into).

    >>> unfit(pa.array([1, 2**40, None]), pa.field("n", pa.int32())).to_pylist()
    [False, True, False]
    >>> unfit(pa.array([1.0, 0.1, float("nan"), None]), pa.field("x", pa.float32(), nullable=False)).to_pylist()
    [False, True, False, True]
    >>> unfit(pa.array([{"x": 1.0}, None]), pa.field("s", pa.struct([pa.field("x", pa.float32())]))).to_pylist()
    [True, False]
    """
    mask = pc.is_null(values) if not field.nullable else _none(len(values))
    if narrower(field.type, values.type):
        if pa.types.is_floating(values.type):
            back = pc.cast(pc.cast(values, field.type, safe=False), values.type)
            lost = pc.and_(pc.not_equal(back, values), pc.invert(pc.is_nan(values)))
        elif pa.types.is_integer(values.type):
            lost = pc.not_equal(pc.cast(pc.cast(values, field.type, safe=False), values.type), values)
        else:  # a decimal with fewer integer digits: |value| >= 10^(precision - scale) does not fit
            import decimal

            bound = pa.scalar(decimal.Decimal(10) ** (field.type.precision - field.type.scale), values.type)
            lost = pc.greater_equal(pc.abs(values), bound)
    elif constrains(field.type, values.type):
        lost = pc.is_valid(values)
    else:
        return mask
    return pc.or_(mask, pc.fill_null(lost, False))


def _none(n: int) -> pa.Array:
    return pa.array(np.zeros(n, dtype=bool))


_FIELD_ID = b"PARQUET:field_id"


def holds_column(written: pa.Schema, table: pa.Schema | None, column: str) -> bool:
    """Whether a data file of schema ``written`` holds the table's ``column`` (``table``: the schema new files get,
    None when unknown): by name, and by Parquet field id where both have one. Iceberg reads a file's columns by id,
    so a column dropped and added again under its name is another column, which the file lacks.

    >>> old, new = (pa.schema([pa.field("a", pa.int64(), metadata={_FIELD_ID: i})]) for i in (b"2", b"5"))
    >>> holds_column(old, new, "a"), holds_column(old, old, "a"), holds_column(old, None, "a")
    (False, True, True)
    """
    if column not in written.names:
        return False
    if table is None or column not in table.names:
        return True
    ids = [(schema.field(column).metadata or {}).get(_FIELD_ID) for schema in (written, table)]
    return None in ids or ids[0] == ids[1]


def held_elsewhere(written: pa.Schema, table: pa.Schema | None, column: str) -> bool:
    """Whether a file of schema ``written`` holds the table's ``column`` under another name: its Parquet field id on
    a column of another name (renamed after the file was written; Iceberg reads it by id, the rewrite by name).

    >>> old = pa.schema([pa.field("a", pa.int64(), metadata={_FIELD_ID: b"2"})])
    >>> new = pa.schema([pa.field("b", pa.int64(), metadata={_FIELD_ID: b"2"})])
    >>> held_elsewhere(old, new, "b"), held_elsewhere(old, old, "a"), held_elsewhere(old, None, "b")
    (True, False, False)
    """
    if table is None or column not in table.names:
        return False
    wanted = (table.field(column).metadata or {}).get(_FIELD_ID)
    return wanted is not None and any(
        f.name != column and (f.metadata or {}).get(_FIELD_ID) == wanted for f in written)


def _names(t: pa.DataType) -> list[str]:
    return [f.name for f in _children(t)]


def added_struct_fields(written: pa.DataType, table: pa.DataType) -> list[str] | None:
    """The fields the table's struct column gained after a file stored it as ``written``, when that is all that
    differs: the file's fields are the table's first ones, one for one by name and Parquet field id, of the same types
    and nullability. None for any other difference (a field renamed, retyped, dropped and added again under its name,
    a field without an id, a difference deeper inside), where only a whole-row move is safe.

    >>> f = lambda name, i, t=pa.string(): pa.field(name, t, metadata={_FIELD_ID: i})
    >>> added_struct_fields(pa.struct([f("zip", b"3")]), pa.struct([f("zip", b"3"), f("country", b"9")]))
    ['country']
    >>> added_struct_fields(pa.struct([f("zip", b"3")]), pa.struct([f("zip", b"8"), f("country", b"9")]))
    >>> added_struct_fields(pa.struct([f("zip", b"3")]), pa.struct([f("zip", b"3")]))
    """
    if not (pa.types.is_struct(written) and pa.types.is_struct(table)):
        return None
    inner, wanted = _children(written), _children(table)
    if len(inner) >= len(wanted):
        return None
    for w, t in zip(inner, wanted):
        ids = [(f.metadata or {}).get(_FIELD_ID) for f in (w, t)]
        if w.name != t.name or None in ids or ids[0] != ids[1] or w.type != t.type or w.nullable != t.nullable:
            return None
    return [f.name for f in wanted[len(inner):]]


def _moves(upserts: pa.Table, absent: Sequence[str], written: pa.Schema, present: Sequence[str], *,
           renamed: Sequence[str] = (), table: pa.Schema | None = None) -> pa.Array:
    """Rows that set a value in a column their file lacks (added to the table after the file was written), or a
    value a column of their file cannot hold (see :func:`unfit`): written whole to a new file instead. With a
    column the file holds under another name (``renamed``) every row moves: its old value is there, null or not.

    A struct column whose fields the table only added to since the file was written (``table``: the schema with
    the table's field ids; see :func:`added_struct_fields`) moves only the rows that set an added field: the others
    are patched into the file's struct, which reads the added fields as null, so a row re-sent unchanged stays
    unchanged (nothing rewritten, nothing committed)."""
    if renamed:
        return pa.array(np.ones(upserts.num_rows, dtype=bool))
    mask = _none(upserts.num_rows)  # typed: a delete-only file has no upserts
    for column in absent:
        mask = pc.or_(mask, pc.is_valid(upserts[column]))
    for column in present:
        field = written.field(column)
        values = upserts[column].combine_chunks()
        table_type = table.field(column).type if table is not None and column in table.names else None
        # the batch's types carry no field ids: only the table's show a nested field dropped and added again under
        # its name, which the file still holds under the old id (Iceberg would read the new value back as null)
        by_ids = table_type is not None and _other_fields(field.type, table_type)
        if field.nullable and not by_ids and not constrains(field.type, values.type):
            continue
        added = added_struct_fields(field.type, table_type) if table_type is not None and field.nullable else None
        if added is not None and table_type is not None and _names(values.type) == _names(table_type):
            for name in added:
                mask = pc.or_(mask, pc.fill_null(pc.and_(pc.is_valid(values), pc.is_valid(values.field(name))), False))
            continue
        mask = pc.or_(mask, unfit(values, field))
        if by_ids:
            mask = pc.or_(mask, pc.is_valid(values))
    return mask


def old_values(moved: pa.Table, src: str, written: pa.Schema, table: pa.Schema | None,
               schema: pa.Schema) -> pa.Table:
    """``moved`` (rows leaving file ``src`` whole, see :func:`_moves`) completed to ``schema``'s columns: a column
    the batch does not update (left out of the model, ``merge_update_columns``, ``merge_exclude_columns``) keeps the
    row's value in ``src``, read at its ``_pcow_pos``, also under the name the file holds it by (``table``: the
    schema with the table's field ids); a column the file lacks is null, as the table format reads it there.

    >>> import tempfile
    >>> path = tempfile.mkdtemp() + "/f.parquet"
    >>> pq.write_table(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}), path)
    >>> moved = pa.table({POS: pa.array([2, 0], pa.int64()), "k": [3, 1], "new": [7, 8]})
    >>> schema = pa.schema({"k": pa.int64(), "v": pa.string(), "new": pa.int64(), "later": pa.int8()})
    >>> old_values(moved, path, pq.read_schema(path), None, schema).select(["v", "later"]).to_pylist()
    [{'v': 'c', 'later': None}, {'v': 'a', 'later': None}]
    """
    wanted = [f for f in schema if f.name not in moved.column_names]
    sources: dict[str, str] = {}
    for f in wanted:
        if holds_column(written, table, f.name):
            sources[f.name] = f.name
        elif held_elsewhere(written, table, f.name) and table is not None:
            field_id = (table.field(f.name).metadata or {}).get(_FIELD_ID)
            sources[f.name] = next(w.name for w in written if (w.metadata or {}).get(_FIELD_ID) == field_id)
    stored = pq.read_table(src, columns=sorted(set(sources.values()))) if sources else None
    positions = moved[POS].combine_chunks()
    for f in wanted:
        if f.name in sources and stored is not None:
            values = _with_fields(stored[sources[f.name]].take(positions).combine_chunks(), f.type)
        else:
            values = pa.chunked_array([pa.nulls(moved.num_rows, f.type)])
        moved = moved.append_column(f.name, values)
    return moved


def _with_fields(values: pa.Array, target: pa.DataType) -> pa.Array:
    """A struct column read from an older file, with the fields the table added since as nulls (a cast matches
    struct fields by position)."""
    if not (pa.types.is_struct(values.type) and pa.types.is_struct(target)) or _names(values.type) == _names(target):
        return values
    held = _names(values.type)
    children = [values.field(held.index(f.name)) if f.name in held else pa.nulls(len(values), f.type)
                for f in _children(target)]
    mask = values.is_null() if values.null_count else None
    return pa.StructArray.from_arrays(children, names=_names(target), mask=mask)


def is_parquet(path: str) -> bool:
    """Whether the file at ``path`` is a Parquet file (its magic bytes at both ends)."""
    with open(path, "rb") as handle:
        head = handle.read(4)
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(size - 4, 0))
        tail = handle.read(4)
    return size >= 12 and head == b"PAR1" and tail in (b"PAR1", b"PARE")


def require_parquet(path: str) -> None:
    """Refuse a data file that is not Parquet (an Iceberg table takes ORC and Avro files from other writers), which
    partial copy-on-write cannot rewrite, before anything reads it as Parquet.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".orc") as f:
    ...     _ = f.write(b"ORC" + bytes(40)); f.flush()
    ...     require_parquet(f.name)
    Traceback (most recent call last):
    ...
    partialcow.exceptions.UnsupportedFileError: data file ... is not a Parquet file (ORC or Avro, from another writer): ...
    """  # noqa: E501 - a doctest output line cannot wrap
    if not is_parquet(path):
        raise UnsupportedFileError(
            f"data file {path} is not a Parquet file (ORC or Avro, from another writer): partial copy-on-write "
            "rewrites Parquet files only. Rewrite the table's files as Parquet (Iceberg: ALTER TABLE ... SET "
            "TBLPROPERTIES ('write.format.default'='parquet'), then CALL system.rewrite_data_files) and run again; "
            "nothing was written"
        )


def rewrite_changed_file(
    src: str,
    mine: pa.Table,
    *,
    update_columns: Sequence[str],
    moved_schema: pa.Schema | None = None,
    data_dir: str | None = None,
    threads: int = 1,
    file_prefix: str = "pcow-",
    key_columns: Sequence[str] = (),
    index_dir: str | None = None,
    dropped: np.ndarray | None = None,
    append: pa.Table | None = None,
    table_schema: pa.Schema | None = None,
    write_options: Mapping[str, Any] | None = None,
) -> dict[str, object]:
    """Rewrite data file ``src`` with its changed rows ``mine`` (``_pcow_pos``, ``_pcow_delete``, keys, values) and
    report what was done.

    The new file goes next to the old one; it is not yet part of the table (the driver commits all files at once).
    A row that sets a column its file does not have (the table gained it later) cannot be patched in place: it is
    deleted from its file and written, whole, to a new file with ``moved_schema``. ``threads``: column chunks the
    rewrite works on at once. ``dropped``: positions already deleted from ``src`` by the table format (a Delta
    deletion vector): left out of the new file, which replaces the vector; not counted as deleted rows.
    ``append``: new rows (the file's columns, see ``whole_rows``) added after the file's rows, from position
    ``append_offset`` of the result on. ``table_schema``: the schema new files get (default ``moved_schema``), whose
    Parquet field ids tell which of the file's columns is which table column (by name alone, a renamed column read as
    one the file lacks, and columns that swapped names were patched into each other). ``write_options``: the
    table's pyarrow options for the moved rows' new file (its codec, see ``LakehouseTable.parquet_options``).
    """
    local_src = _local(src)
    require_parquet(local_src)
    written = pq.read_schema(local_src)
    identity = moved_schema if table_schema is None else table_schema
    absent = [c for c in update_columns if not holds_column(written, identity, c)]
    present = [c for c in update_columns if c not in absent]
    is_delete = mine[DELETE].combine_chunks().fill_null(False)
    upserts = mine.filter(pc.invert(is_delete))
    move = _moves(upserts, absent, written, present,
                  renamed=[c for c in absent if held_elsewhere(written, identity, c)], table=identity)
    moved = upserts.filter(move)
    upserts = upserts.filter(pc.invert(move))
    deletes = pa.concat_arrays([mine.filter(is_delete)[POS].combine_chunks(), moved[POS].combine_chunks()])
    dropped_count = 0
    if dropped is not None and len(dropped):
        # the table format already hides these rows: the index holds none of them, so no change names them
        dropped_count = len(dropped)
        deletes = pa.concat_arrays([deletes.cast(pa.int64()), pa.array(dropped, pa.int64())])
    moved_dst = moved_index = None
    if moved.num_rows:
        if moved_schema is None or data_dir is None:
            raise InvalidChangeError(
                f"{src}: {moved.num_rows} row(s) set column(s) {absent} this file lacks, or a value its column "
                "cannot hold (a type the table promoted since, a null in a column the file stores as required); "
                "moving them to a new file needs the table's schema"
            )
        whole = old_values(moved, local_src, written, identity, moved_schema)
        moved_dst = write_table(
            conform(whole, moved_schema), os.path.join(data_dir, new_file_name(file_prefix)), **(write_options or {})
        ).path
        if index_dir is not None and BUCKET in moved.column_names:
            moved_index = write_index_rows(moved, key_columns, index_dir)
    updates = None
    if upserts.num_rows and present:
        updates = upserts.select([POS, *present]).rename_columns([ROW_POSITION, *present])
    dst = os.path.join(os.path.dirname(local_src), new_file_name(file_prefix))
    # no fsync: new files are as durable as the ones Spark's and Iceberg's own writers (and our insert writers)
    # leave on a local file system; object stores make a file durable when it is closed
    # fingerprints: the next batch of full row images finds its real changes in this file without decoding it
    report = rewrite_file(local_src, dst, updates=updates, deletes=deletes if len(deletes) else None,
                          append=append, threads=threads, fsync=False, fingerprints=True)
    return {
        "src": src,
        "dst": dst,
        "moved_dst": moved_dst,
        "moved_rows": moved.num_rows,
        "moved_index_rows": moved_index,
        "rows_before": report.rows_before,
        "rows_after": report.rows_after,
        "rows_updated": report.rows_updated,
        "rows_deleted": report.rows_deleted - dropped_count,
        "rows_dropped": dropped_count,
        "rows_appended": report.rows_appended,
        "append_offset": report.rows_after - report.rows_appended,
        "pages_rewritten": report.pages_rewritten,
        "pages_copied": report.pages_copied,
        "bytes_copied": report.bytes_copied,
        "bytes_reencoded": report.bytes_reencoded,
        "duration_ms": int(report.elapsed_seconds * 1000),
        # rows of src missing from dst (deleted or moved), so the row index can shift its entries
        "removed_positions": np.unique(deletes.to_numpy(zero_copy_only=False)).tolist(),
    }


def write_index_rows(rows: pa.Table, key_columns: Sequence[str], folder: str) -> str:
    """The index entries of a new file written from ``rows`` in order: keys, position, bucket (an Arrow file)."""
    entries = pa.table([*(rows.column(c) for c in key_columns),
                        pa.array(np.arange(rows.num_rows, dtype=np.int64)), rows.column(BUCKET)],
                       names=[*key_columns, "pos", BUCKET])
    path = os.path.join(folder, f"idx-{uuid.uuid4().hex}.arrow")
    _write_fragment(entries, path)
    return path


def whole_rows(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """New rows as a data file holds them: ``schema``'s columns in its order and types, null where the batch
    delivers no value (``on_schema_change='ignore'``/``'append_new_columns'``).

    >>> whole_rows(pa.table({"v": [1, 2], "id": [7, 8]}), pa.schema({"id": pa.int64(), "v": pa.int32(),
    ...                                                              "added": pa.string()})).to_pylist()
    [{'id': 7, 'v': 1, 'added': None}, {'id': 8, 'v': 2, 'added': None}]
    """
    for f in schema:
        if f.name not in rows.column_names:
            rows = rows.append_column(f.name, pa.nulls(rows.num_rows, f.type))
    return conform(rows, schema)


def write_partition(batches: Iterator[pa.RecordBatch], *, schema: pa.Schema, data_dir: str,
                    file_prefix: str = "pcow-", write_options: Mapping[str, Any] | None = None,
                    ) -> Iterator[pa.RecordBatch]:
    """Write this partition's inserted rows as one new data file with the product's layout (``write_options``: the
    table's own, see ``rewrite_changed_file``)."""
    batch_list = [b for b in batches if b.num_rows]
    if not batch_list:
        return
    table = whole_rows(pa.Table.from_batches(batch_list), schema)
    written = write_table(table, os.path.join(data_dir, new_file_name(file_prefix)), **(write_options or {}))
    yield pa.RecordBatch.from_pylist([{"dst": written.path, "rows": written.num_rows}], schema=_INSERT_ARROW)


_INSERT_ARROW = pa.schema([("dst", pa.string()), ("rows", pa.int64())])


# ---------------------------------------------------------------------------------------------------------------
# locate, then rewrite from the scratch folder


def _write_fragment(table: pa.Table, path: str) -> None:
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _read_fragments(paths: Sequence[str]) -> pa.Table:
    return pa.concat_tables([pa.ipc.open_file(pa.memory_map(p)).read_all() for p in paths])


def _key_text(keys: pa.Table, index: int) -> str:
    return "(" + ", ".join(f"{c}={keys.column(c)[index].as_py()!r}" for c in keys.column_names) + ")"


def locate_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    key_columns: Sequence[str],
    bucket_paths: Mapping[int, Sequence[str]],
    carried: Sequence[str],
    insert_columns: Sequence[str],
    scratch: str,
    keys_limit: int,
    unscaled_decimals: Mapping[str, tuple[int, int]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Locate this partition's changes in the index and leave them in ``scratch``, per touched data file.

    The rows are staged changes (keys, values, ``_pcow_delete``) with their key's index bucket (``_pcow_bucket``);
    only those buckets' files are read (``bucket_paths``: bucket -> local paths; empty when the table has no rows).
    Located rows go to ``f<file id>-<task>.arrow`` (``_pcow_pos``, ``_pcow_delete``, ``carried``), the changes of
    keys not in the table to ``ins-<task>.arrow`` (``insert_columns``, ``_pcow_delete``: the insert writers drop
    the deletes). The result row lists
    the fragments written. Up to ``keys_limit`` rows, the keys also go to ``keys-<task>.arrow`` (the commit's conflict
    filter).
    ``unscaled_decimals``: columns that arrive as their decimals' unscaled integers, by name: (precision, scale)
    (see ``partialcow.spark.decimal_transfer``).

    Keys given more than once in this task are counted here (and nothing is written). A batch routed by bucket
    brings every change of a key to one task; one located in place does not, and ``run_file_tasks`` checks the rest
    (``check_keys``). Null keys are counted too: the validation job refused them unless the query is not
    deterministic.
    """
    batch_list = [b for b in batches if b.num_rows]
    if not batch_list:
        return
    rows = pa.Table.from_batches(batch_list)
    rows = restore_decimals(rows, unscaled_decimals or {})
    task = uuid.uuid4().hex
    keys = rows.select(list(key_columns))
    null = np.zeros(rows.num_rows, dtype=bool)
    for column in keys.columns:
        null |= pc.is_null(column).to_numpy(zero_copy_only=False)
    repeated = _repeated_keys(keys, key_columns)
    if null.any() or repeated.num_rows:
        sample = [_key_text(keys, int(i)) for i in np.flatnonzero(null)[:5]]
        sample += [_key_text(repeated, i) for i in range(min(5, repeated.num_rows))]
        yield _locate_result(rows.num_rows, null_keys=int(null.sum()), repeated_keys=repeated.num_rows, samples=sample)
        return

    wanted = [b for b in pc.unique(rows[BUCKET]).to_pylist() if b in bucket_paths]
    entries = read_buckets([path for b in wanted for path in bucket_paths[b]], key_columns, keys.schema)
    at, file_ids, positions = join_keys(entries, keys)
    is_delete = pc.fill_null(rows.column(DELETE), False).to_numpy(zero_copy_only=False)
    found = np.zeros(rows.num_rows, dtype=bool)
    found[at] = True

    order = np.argsort(file_ids, kind="stable")
    at, file_ids, positions = at[order], file_ids[order], positions[order]
    # the bucket rides along: a row moved to a new file (see rewrite_changed_file) is indexed without rehashing
    located = rows.select([*carried, BUCKET]).take(pa.array(at))
    located = pa.table(
        [pa.array(positions, pa.int64()), pa.array(is_delete[at]), *located.columns],
        names=[POS, DELETE, *located.column_names],
    )
    ids, starts, sizes = np.unique(file_ids, return_index=True, return_counts=True)
    fragments = []
    for file_id, start, size in zip(ids.tolist(), starts.tolist(), sizes.tolist()):
        fragments.append(os.path.join(scratch, f"f{file_id}-{task}.arrow"))
        _write_fragment(located.slice(start, size), fragments[-1])

    # Keys not in the table: upserts to insert, and deletes that change nothing; those stay in the fragment so
    # that a key also changed by another task is seen repeated (see run_file_tasks), and are dropped there.
    unmatched = ~found
    inserts_file = None
    if unmatched.any():
        inserts_file = os.path.join(scratch, f"ins-{task}.arrow")
        # the insert writers fill columns the batch lacks with nulls (see write_partition)
        unmatched_rows = rows.filter(pa.array(unmatched)).select(
            [c for c in insert_columns if c in rows.column_names] + [BUCKET])
        _write_fragment(unmatched_rows.append_column(DELETE, pa.array(is_delete[unmatched])), inserts_file)
    keys_file = None
    if rows.num_rows <= keys_limit:
        keys_file = os.path.join(scratch, f"keys-{task}.arrow")
        _write_fragment(keys, keys_file)
    yield _locate_result(
        rows.num_rows, file_ids=ids.tolist(), file_rows=sizes.tolist(), fragments=fragments,
        inserts=int((unmatched & ~is_delete).sum()),
        inserts_file=inserts_file, keys_file=keys_file,
    )


def _locate_result(rows: int, **fields: object) -> pa.RecordBatch:
    row = {"rows": rows, "file_ids": [], "file_rows": [], "fragments": [], "inserts": 0, "inserts_file": None,
           "null_keys": 0, "repeated_keys": 0, "samples": [], "keys_file": None, **fields}
    return pa.RecordBatch.from_pylist([row], schema=_LOCATE_ARROW)


class FileTask(NamedTuple):
    """One task of the rewrite job: rewrite data file ``src`` with the changes in ``fragments``, or (``src`` None)
    write part ``part`` of ``parts`` of the inserted rows in ``fragments``. ``deletion_vector``: the Delta deletion
    vector of ``src`` (its descriptor as JSON) and ``table_root`` the table folder it is relative to."""

    src: str | None
    fragments: tuple[str, ...]
    part: int = 0
    parts: int = 1
    threads: int = 1
    deletion_vector: str | None = None
    table_root: str | None = None


def run_file_tasks(
    tasks: Iterator[FileTask],
    *,
    update_columns: Sequence[str],
    moved_schema: pa.Schema | None,
    insert_schema: pa.Schema,
    data_dir: str,
    check_keys: Sequence[str] = (),
    file_prefix: str = "pcow-",
    key_columns: Sequence[str] = (),
    write_options: Mapping[str, Any] | None = None,
) -> Iterator[dict[str, object]]:
    """Run this partition's file tasks on the fragments ``locate_partition`` wrote (new files written with the
    table's ``write_options``).

    Yields one result per task: ``kind`` "rewrite" with the fields ``rewrite_changed_file`` reports (``src``, ``dst``,
    rows and pages counts, ``removed_positions``...), or "insert" with ``dst``, ``rows`` and ``index_rows`` (an Arrow
    file of the new file's index entries, see ``_write_index_rows``; given ``key_columns``).

    ``check_keys``: when the locate tasks did not see every change of a key (they took the batch's partitions as
    they were), the key columns to check here: a file task that finds a key changed more than once, or the first
    insert writer finding a key absent from the table changed more than once, writes nothing and yields ``kind``
    "repeated" with
    ``count`` (keys) and ``samples`` instead.
    """
    for task in tasks:
        rows = _read_fragments(task.fragments)
        if check_keys and (task.src is not None or task.part == 0):
            repeated = _repeated_keys(rows, check_keys)
            if repeated.num_rows:
                samples = [_key_text(repeated, i) for i in range(min(5, repeated.num_rows))]
                yield {"kind": "repeated", "count": repeated.num_rows, "samples": samples}
                continue
        if task.src is not None:
            dropped = None
            if task.deletion_vector is not None:
                import json

                from partialcow.table.delta.dv import deleted_positions

                dropped = deleted_positions(json.loads(task.deletion_vector), task.table_root or "")
            report = rewrite_changed_file(task.src, rows, update_columns=update_columns, moved_schema=moved_schema,
                                          data_dir=data_dir, threads=task.threads, file_prefix=file_prefix,
                                          key_columns=key_columns,
                                          index_dir=os.path.dirname(task.fragments[0]) if key_columns else None,
                                          dropped=dropped, table_schema=insert_schema,
                                          write_options=write_options)
            yield {"kind": "rewrite", **report}
        else:
            rows = rows.filter(pc.invert(rows[DELETE])).drop_columns([DELETE])
            start = rows.num_rows * task.part // task.parts
            stop = rows.num_rows * (task.part + 1) // task.parts
            part = rows.slice(start, stop - start)
            for batch in write_partition(iter(part.to_batches()), schema=insert_schema, data_dir=data_dir,
                                         file_prefix=file_prefix, write_options=write_options):
                index_rows = None
                if key_columns and BUCKET in part.column_names:
                    index_rows = write_index_rows(part, key_columns, os.path.dirname(task.fragments[0]))
                yield from ({"kind": "insert", **r, "index_rows": index_rows} for r in batch.to_pylist())


IN_PLACE_RESULT_SCHEMA = (
    "src string, dst string, rows_after long, rows_updated long, rows_deleted long, pages_rewritten long, "
    "pages_copied long"
)
_IN_PLACE_ARROW = pa.schema([
    ("src", pa.string()), ("dst", pa.string()), ("rows_after", pa.int64()), ("rows_updated", pa.int64()),
    ("rows_deleted", pa.int64()),
    ("pages_rewritten", pa.int64()), ("pages_copied", pa.int64()),
])


def rewrite_files_in_place(
    batches: Iterator[pa.RecordBatch], *, rewritable: frozenset[str], update_columns: Sequence[str], threads: int = 1,
    file_prefix: str, table_schema: pa.Schema | None = None,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over changed rows (``_pcow_file``, ``_pcow_pos``, ``_pcow_delete``, values) routed by file:
    rewrite each file of ``rewritable`` they touch with the page engine into a file named with ``file_prefix`` (the
    write's: ``partialcow.spark.journal``), one result row per new file.

    A file that may not hold the new values of ``update_columns`` is left alone: no result row, so the caller hides
    its changed rows another way. That is a file in another format than Parquet (ORC, Avro, from another writer),
    a file lacking one (the table gained it later; by Parquet field id against ``table_schema``, the schema new files
    get, where known: a column dropped and added again is another column), or storing one in a narrower type or as
    required (the table promoted or relaxed it since).
    """
    batch_list = list(batches)
    if not batch_list:
        return
    rows = pa.Table.from_batches(batch_list)
    for src in pc.unique(rows[FILE]).to_pylist():
        if src not in rewritable or not is_parquet(_local(src)) \
                or not _takes_values(pq.read_schema(_local(src)), table_schema, update_columns):
            continue
        report = rewrite_changed_file(src, rows.filter(pc.equal(rows[FILE], src)), update_columns=update_columns,
                                      threads=threads, file_prefix=file_prefix)
        yield pa.RecordBatch.from_pylist([{field.name: report[field.name] for field in _IN_PLACE_ARROW}],
                                         schema=_IN_PLACE_ARROW)


def _takes_values(written: pa.Schema, table: pa.Schema | None, columns: Sequence[str]) -> bool:
    """Whether a file of schema ``written`` holds every table column of ``columns`` as the table types it (``table``;
    None: by name only), so that any new value of theirs can be patched into its pages."""
    for column in columns:
        if not holds_column(written, table, column):
            return False
        if table is not None and column in table.names:
            field, wanted = written.field(column), table.field(column)
            if constrains(field.type, wanted.type) or (wanted.nullable and not field.nullable):
                return False
    return True


def _repeated_keys(rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    """The keys that occur more than once in ``rows`` (key columns only)."""
    counts = (
        rows.select(list(key_columns)).group_by(list(key_columns), use_threads=False).aggregate([([], "count_all")])
    )
    return counts.filter(pc.greater(counts.column("count_all"), 1)).select(list(key_columns))


_LOCATE_ARROW = pa.schema([
    ("rows", pa.int64()), ("file_ids", pa.list_(pa.int32())), ("file_rows", pa.list_(pa.int64())),
    ("fragments", pa.list_(pa.string())), ("inserts", pa.int64()), ("inserts_file", pa.string()),
    ("null_keys", pa.int64()),
    ("repeated_keys", pa.int64()), ("samples", pa.list_(pa.string())), ("keys_file", pa.string()),
])
