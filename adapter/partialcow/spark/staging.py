"""Stage a batch of changes: validate it, store-assign its values to the table's types, one change per key.

Everything a batch can get wrong is found here, by one Spark job that counts every problem, before anything is
written: missing key or control columns, null or NaN keys, unknown op codes, null sequence values, values that the
table's column types cannot hold (see :mod:`partialcow.spark.casting`), nulls where the table requires a value (NOT
NULL columns, and required fields, elements and values nested in columns: :func:`required_paths`), type changes
under ``on_schema_change='fail'``/``'sync_all_columns'``. Only when a problem is found are samples fetched for the
message.

Float keys are normalised (``-0.0`` is stored and looked up as ``0.0``) so that a key compares the same in the
batch, the row index and every engine's join.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from partialcow.exceptions import ChangeFeedError, RepeatedKeysError
from partialcow.spark.casting import cast_type, conversion, is_orderable_sequence, lossy_value
from partialcow.spark.rewrite_job import DELETE
from partialcow.spark.spec import ChangeSpec
from partialcow.table.base import quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructField, StructType

__all__ = ["BAD_OP", "NAN_KEY", "NULL_KEY", "NULL_SEQUENCE", "SAMPLE", "RequiredPath", "keys_text", "lossy_error",
           "null_value_error", "null_value_flag", "problem_error", "problem_flags", "refuse_unlistable_fields",
           "refuse_untyped",
           "repeated_keys_error", "require_columns", "required_paths", "stage", "stage_changes", "table_spelling",
           "zero_normalized"]

SAMPLE = 5


def keys_text(rows: Sequence[Any], key_columns: Sequence[str]) -> str:
    return ", ".join("(" + ", ".join(f"{c}={r[c]!r}" for c in key_columns) + ")" for r in rows)


def require_columns(columns: Sequence[str], spec: ChangeSpec) -> list[str]:
    """``columns`` (a batch's), after checking that the key and control columns are among them and that no name
    holds a dot.

    >>> require_columns(["id", "a.b"], ChangeSpec(key_columns=("id",), model="orders"))
    Traceback (most recent call last):
    ...
    partialcow.exceptions.ChangeFeedError: model orders: column name(s) ['a.b'] contain a dot, which partial copy-on-write cannot write (PySpark's Arrow tasks read such a name as a nested field); rename them in the model, e.g. `a.b` AS a_b
    """  # noqa: E501 - a doctest output line cannot wrap
    dotted = [c for c in columns if "." in c]
    if dotted:
        raise ChangeFeedError(
            f"model {spec.model}: column name(s) {dotted} contain a dot, which partial copy-on-write cannot write "
            f"(PySpark's Arrow tasks read such a name as a nested field); rename them in the model, e.g. "
            f"`{dotted[0]}` AS {dotted[0].replace('.', '_')}"
        )
    for column in (*spec.key_columns, *spec.control_columns):
        if column not in columns:
            raise ChangeFeedError(
                f"model {spec.model}: column {column!r} is missing from the changes (columns: {list(columns)})")
    return list(columns)


# The row problems every path checks (staging job, driver path, first builds), in the order they are reported.
NULL_KEY, NAN_KEY, NULL_SEQUENCE, BAD_OP = "null key", "NaN key", "null sequence", "bad op"


def problem_error(problem: str, spec: ChangeSpec, count: object, rows: Sequence[Any]) -> ChangeFeedError:
    """The error for ``count`` rows of a batch with ``problem``; ``rows`` are samples (key columns, and the op
    column for ``BAD_OP``).

    >>> spec = ChangeSpec(key_columns=("id",), op_column="op", model="orders")
    >>> print(problem_error(BAD_OP, spec, 1, [{"id": 7, "op": "X"}]))
    model orders: column 'op' has op code(s) ['X'] outside the configured ['I', 'U', 'D'] (keys (id=7)); set op_codes in the model config
    """  # noqa: E501 - a doctest output line cannot wrap
    keys, sample = list(spec.key_columns), keys_text(rows, spec.key_columns)
    if problem == NULL_KEY:
        text = f"key column(s) {keys} must not be null; {count} row(s) with null keys, e.g. {sample}"
    elif problem == NAN_KEY:
        text = (f"key column(s) {keys} hold NaN in {count} row(s), e.g. {sample}; NaN equals nothing (not even NaN), "
                "so it cannot name a row")
    elif problem == NULL_SEQUENCE:
        text = (f"sequence column {spec.sequence_column!r} is null or NaN for key(s) {sample}; every change needs a "
                "sequence value that orders it")
    elif problem == BAD_OP:
        found = sorted({str(r[spec.op_column]) for r in rows})
        known = [*spec.insert_ops, *spec.update_ops, *spec.delete_ops]
        text = (f"column {spec.op_column!r} has op code(s) {found} outside the configured {known} (keys {sample}); "
                "set op_codes in the model config")
    else:
        raise ValueError(f"unknown batch problem {problem!r}")
    return ChangeFeedError(f"model {spec.model}: {text}")


def lossy_error(spec: ChangeSpec, name: str, count: int, source: DataType, target: DataType, values: Sequence[Any],
                rows: Sequence[Any]) -> ChangeFeedError:
    """The error for ``count`` values of column ``name`` that the table's type cannot hold exactly."""
    what = "key column" if name in spec.key_columns else "column"
    return ChangeFeedError(
        f"model {spec.model}: {what} {name!r} has {count} value(s) that the table's type {target.simpleString()} "
        f"cannot hold exactly (the model delivers {source.simpleString()}): {list(values)} for key(s) "
        f"{keys_text(rows, spec.key_columns)}. Values are never rounded, truncated or wrapped: fix or cast them in "
        "the model, or widen the column with --full-refresh"
    )


# a step down into a column's value: a struct's field, an array's elements, a map's values
NestedStep = Literal["field", "element", "value"]


@dataclass(frozen=True)
class RequiredPath:
    """A value the table requires: a NOT NULL column (no ``steps``), or one nested in a column, required wherever
    its parent holds a value: a NOT NULL field of a struct, the elements of an array or the values of a map that
    hold no null (Iceberg's required fields, Delta's ``nullable: false``). A null parent has no such value: a null
    struct has no fields, so a nullable struct column may be null even though one of its fields is required.

    ``steps`` go down from ``column``: a struct field by its name, an array's elements (``"element"``) or a map's
    values (``"value"``), as Iceberg names them.
    """

    column: str
    steps: tuple[tuple[NestedStep, str], ...] = ()

    @property
    def name(self) -> str:
        """The path as the errors name it.

        >>> RequiredPath("addr", (("field", "zip"),)).name, RequiredPath("tags", (("element", "element"),)).name
        ('addr.zip', 'tags.element')
        """
        return ".".join([self.column, *(name for _, name in self.steps)])


def required_paths(columns: Sequence[str], spec: ChangeSpec, table_schema: StructType | None) -> list[RequiredPath]:
    """The values of the batch's value columns (of ``columns``) that the table requires (keys are checked apart):
    NOT NULL columns and what is required inside columns, at any depth (see :class:`RequiredPath`). Both ways a
    batch is applied check exactly these, each with its engine (``stage``: Spark; ``small_batch``: Arrow).

    >>> from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType
    >>> addr = StructType([StructField("zip", StringType(), False), StructField("city", StringType())])
    >>> table = StructType([StructField("k", LongType(), False), StructField("v", LongType(), False),
    ...                     StructField("addr", addr), StructField("tags", ArrayType(addr, containsNull=False))])
    >>> [p.name for p in required_paths(["k", "v", "addr", "tags"], ChangeSpec(key_columns=("k",)), table)]
    ['v', 'addr.zip', 'tags.element', 'tags.element.zip']
    """
    if table_schema is None:
        return []
    from pyspark.sql.types import ArrayType, MapType, StructType

    def nested(column: str, steps: tuple[tuple[NestedStep, str], ...], data_type: DataType) -> list[RequiredPath]:
        children: list[tuple[NestedStep, str, DataType, bool]] = []
        if isinstance(data_type, StructType):
            children = [("field", f.name, f.dataType, f.nullable) for f in data_type.fields]
        elif isinstance(data_type, ArrayType):
            children = [("element", "element", data_type.elementType, data_type.containsNull)]
        elif isinstance(data_type, MapType):  # a map's keys are never null
            children = [("value", "value", data_type.valueType, data_type.valueContainsNull)]
        found = []
        for kind, name, child_type, nullable in children:
            below = (*steps, (kind, name))
            found += ([] if nullable else [RequiredPath(column, below)]) + nested(column, below, child_type)
        return found

    paths = []
    for f in table_schema.fields:
        if f.name in columns and f.name not in spec.key_columns:
            paths += ([] if f.nullable else [RequiredPath(f.name)]) + nested(f.name, (), f.dataType)
    return paths


def _nested(path: str, data_type: DataType, name: str | None = None) -> Iterator[tuple[str, DataType, str | None]]:
    """A column's type and every type inside it (``path``: the column's name): (path, type, ``name``: the struct
    field's own name, None for the column itself, an array's element, a map's key or value)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    yield path, data_type, name
    if isinstance(data_type, StructType):
        for f in data_type.fields:
            yield from _nested(f"{path}.{f.name}", f.dataType, f.name)
    elif isinstance(data_type, ArrayType):
        yield from _nested(f"{path}.element", data_type.elementType)
    elif isinstance(data_type, MapType):
        yield from _nested(f"{path}.key", data_type.keyType)
        yield from _nested(f"{path}.value", data_type.valueType)


def refuse_unlistable_fields(fields: Sequence[StructField], spec: ChangeSpec) -> None:
    """Refuse struct fields (inside ``fields``, a new Iceberg table's columns or those a batch adds) whose names are
    not plain identifiers (letters a-z, digits and ``_``, not starting with a digit): the Hive metastore stores a column's type as text, and Spark
    cannot parse ``struct<x y:int>`` back, so every later listing of the schema, every dbt process, fails
    (``CANNOT_RECOGNIZE_HIVE_TYPE``) until the table is dropped. Top-level names are stored apart and may be any.

    >>> from pyspark.sql.types import IntegerType, StructField, StructType
    >>> refuse_unlistable_fields([StructField("s", StructType([StructField("x y", IntegerType())]))],
    ...                          ChangeSpec(key_columns=("id",), model="m"))
    Traceback (most recent call last):
    ...
    partialcow.exceptions.ChangeFeedError: model m: struct field(s) s.x y have names the Hive metastore cannot list (inside structs: letters a-z, digits and _, not starting with a digit); rename them in the model, e.g. named_struct('x_y', ...); nothing was written
    """  # noqa: E501 - a doctest output line cannot wrap
    import re

    found = [(p, name) for f in fields for p, _, name in _nested(f.name, f.dataType)
             if name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)]
    if found:
        raise ChangeFeedError(
            f"model {spec.model}: struct field(s) {', '.join(p for p, _ in found)} have names the Hive metastore "
            "cannot list (inside structs: letters a-z, digits and _, not starting with a digit); rename them in the "
            f"model, e.g. named_struct('{re.sub(r'[^A-Za-z0-9_]', '_', found[0][1])}', ...); nothing was written"
        )


def refuse_untyped(fields: Sequence[StructField], spec: ChangeSpec) -> None:
    """Refuse columns (``fields`` of a first build's batch, or the new columns a batch adds to a table) that hold
    values of no type: a bare ``NULL`` in the model's query is Spark's ``void``, which Iceberg cannot store and
    which Delta stored as a column no later value could fill (Spark then failed to read the table at all).

    >>> from pyspark.sql.types import ArrayType, NullType, StructField
    >>> refuse_untyped([StructField("n", NullType()), StructField("tags", ArrayType(NullType()))],
    ...                ChangeSpec(key_columns=("id",), model="m"))
    Traceback (most recent call last):
    ...
    partialcow.exceptions.ChangeFeedError: model m: column(s) n, tags.element have no type (a bare NULL in the model's query): give each one, e.g. `cast(null as int) as n`; nothing was written
    """  # noqa: E501 - a doctest output line cannot wrap
    from pyspark.sql.types import NullType

    found = [p for f in fields for p, t, _ in _nested(f.name, f.dataType) if isinstance(t, NullType)]
    if found:
        example = found[0].split(".")[0]
        raise ChangeFeedError(
            f"model {spec.model}: column(s) {', '.join(found)} have no type (a bare NULL in the model's query): give "
            f"each one, e.g. `cast(null as int) as {example}`; nothing was written"
        )


def null_value_flag(path: RequiredPath, batch_type: DataType) -> Column:
    """Per row of a batch whose column ``path.column`` has ``batch_type``: whether it holds null at ``path`` under
    a parent that is not null."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NullType

    if not path.steps:
        return F.col(quote_identifier(path.column)).isNull()
    if isinstance(batch_type, NullType):  # a column of nulls holds nothing nested
        return F.lit(False)

    def below(parent: Column, steps: tuple[tuple[NestedStep, str], ...]) -> Column:
        (kind, name), rest = steps[0], steps[1:]
        if kind == "field":
            child = parent.getField(name)
            return parent.isNotNull() & (child.isNull() if not rest else below(child, rest))
        items = parent if kind == "element" else F.map_values(parent)
        # exists() of a null array is null; every predicate here is true or false
        return F.coalesce(F.exists(items, lambda item: item.isNull() if not rest else below(item, rest)),
                          F.lit(False))

    return below(F.col(quote_identifier(path.column)), path.steps)


def null_value_error(spec: ChangeSpec, path: RequiredPath, count: int, rows: Sequence[Any]) -> ChangeFeedError:
    """The error for ``count`` rows that insert or update a row with null at ``path``, which the table requires.

    >>> spec = ChangeSpec(key_columns=("id",), model="orders")
    >>> print(null_value_error(spec, RequiredPath("qty"), 2, [{"id": 3}, {"id": 4}]))
    model orders: column 'qty' is NOT NULL in the table, but 2 change(s) of the batch that insert or update a row hold null in it, for key(s) (id=3), (id=4); deliver a value, or drop the column's NOT NULL constraint
    >>> print(null_value_error(spec, RequiredPath("addr", (("field", "zip"),)), 1, [{"id": 5}]))
    model orders: field 'addr.zip' is NOT NULL in the table, but 1 change(s) of the batch that insert or update a row hold null in it where 'addr' is not null, for key(s) (id=5); deliver a value, or drop the field's NOT NULL constraint
    """  # noqa: E501 - a doctest output line cannot wrap
    what, where = "column", ""
    if path.steps:
        parent = RequiredPath(path.column, path.steps[:-1]).name
        what, where = "field", f" where {parent!r} is not null"
    return ChangeFeedError(
        f"model {spec.model}: {what} {path.name!r} is NOT NULL in the table, but {count} change(s) of the batch that "
        f"insert or update a row hold null in it{where}, for key(s) {keys_text(rows, spec.key_columns)}; deliver a "
        f"value, or drop the {what}'s NOT NULL constraint"
    )


def stage_changes(
    changes: DataFrame, spec: ChangeSpec, *, table_columns: Sequence[str] | None = None,
    table_schema: StructType | None = None,
) -> DataFrame:
    """Validate a batch and collapse it to one change per key: the value columns plus ``_pcow_delete``.

    Raises ``ChangeFeedError`` naming the model, the column and sample keys for: a missing key column, null or NaN
    keys, op codes outside the configured ones, several changes of one key without a sequence column, two changes
    of one key with the same (latest) sequence value, a sequence column that does not order (strings, booleans),
    and values the table's types cannot hold (``table_schema``). ``table_columns`` (or ``table_schema``) drops the
    batch's columns the table lacks, per ``spec.on_schema_change``.
    """
    if table_schema is None and table_columns is not None:
        from pyspark.sql.types import StructType

        schema = changes.schema
        table_schema = StructType([schema[c] for c in table_columns if c in schema.names])
        columns_only = list(table_columns)
    else:
        columns_only = None
    return stage(changes, spec, table_schema=table_schema, check_unique=True, table_columns=columns_only)[0]


def stage(
    changes: DataFrame, spec: ChangeSpec, *, table_schema: StructType | None, check_unique: bool,
    table_columns: Sequence[str] | None = None,
) -> tuple[DataFrame, int]:
    """:func:`stage_changes`, plus the batch's row count (before collapsing), counted by the validation job.

    ``check_unique=False`` leaves the one-change-per-key checks (repeated keys, ties on the latest sequence) to the
    caller: ``apply_changes``' locate job sees every change of a key in one task and checks them there, which
    spares the validation a shuffle and the sequence ranking a second run.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = require_columns(changes.columns, spec)
    table_types = {f.name: f.dataType for f in table_schema.fields} if table_schema is not None else {}
    if table_columns is None:
        table_columns = list(table_types) if table_schema is not None else None
    plan = assignment_plan(changes, spec, table_types)

    keys = [F.col(quote_identifier(c)) for c in spec.key_columns]
    null_key, nan_key, bad_op, null_seq, is_delete = problem_flags(changes, spec)
    lossy = {name: lossy_value(quote_identifier(name), source, target, exact=name in spec.key_columns)
             for name, (kind, source, target) in plan.items() if kind == "checked"}
    # a null where the table requires a value would be committed as it is (Delta's log stats cover only some
    # top-level columns, and the files Delta writes declare every field nullable)
    nulls = [(path, ~is_delete & null_value_flag(path, changes.schema[path.column].dataType))
             for path in required_paths(columns, spec, table_schema)]

    # One job counts every problem (when it checks uniqueness without a sequence column, per key, so repeated keys
    # are counted too); the samples for the message are only fetched when there is a problem. collect(), not
    # first(): first() may run one job per partition it scans.
    flags = [bad_op.cast("int").alias("_bad"), null_seq.cast("int").alias("_null_seq"),
             nan_key.cast("int").alias("_nan"),
             *[flag.cast("int").alias(f"_lossy{i}") for i, flag in enumerate(lossy.values())],
             *[flag.cast("int").alias(f"_nulls{i}") for i, (_, flag) in enumerate(nulls)]]
    flag_names = ["_bad", "_null_seq", "_nan", *[f"_lossy{i}" for i in range(len(lossy))],
                  *[f"_nulls{i}" for i in range(len(nulls))]]
    if spec.sequence_column or not check_unique:
        counted = changes.select(*keys, F.lit(1).alias("_n"), *flags)
        repeated = F.lit(0)
    else:
        counted = changes.select(*keys, *flags).groupBy(*keys).agg(
            F.count(F.lit(1)).alias("_n"), *[F.sum(n).alias(n) for n in flag_names])
        repeated = F.sum((F.col("_n") > 1).cast("int"))
    counts = counted.select(
        F.coalesce(F.sum("_n"), F.lit(0)).alias("rows"),
        F.sum(F.when(null_key, F.col("_n"))).alias("null_keys"),
        repeated.alias("repeated_keys"),
        *[F.sum(n).alias(n) for n in flag_names],
    ).collect()[0]
    problems = ((NULL_KEY, counts["null_keys"], null_key), (NAN_KEY, counts["_nan"], nan_key),
                (NULL_SEQUENCE, counts["_null_seq"], null_seq), (BAD_OP, counts["_bad"], bad_op))
    for problem, count, flag in problems:
        if count:
            shown = [*spec.key_columns, *([spec.op_column] if problem == BAD_OP and spec.op_column else [])]
            raise problem_error(problem, spec, count, changes.where(flag).select(*shown).limit(SAMPLE).collect())
    for i, (name, flag) in enumerate(lossy.items()):
        if counts[f"_lossy{i}"]:
            _, source, target = plan[name]
            bad = changes.where(flag).select(*dict.fromkeys([*spec.key_columns, name])).limit(SAMPLE).collect()
            raise lossy_error(spec, name, counts[f"_lossy{i}"], source, target, [r[name] for r in bad], bad)
    for i, (path, flag) in enumerate(nulls):
        if counts[f"_nulls{i}"]:
            bad = changes.where(flag).select(*spec.key_columns).limit(SAMPLE).collect()
            raise null_value_error(spec, path, counts[f"_nulls{i}"], bad)

    frame = changes.select(*[assigned(name, plan, spec, changes.schema[name].dataType) for name in columns])
    if spec.sequence_column:
        seq = F.col(quote_identifier(spec.sequence_column))
        by_key = Window.partitionBy(*keys)
        ranked = frame.withColumn("_pcow_latest", F.max(seq).over(by_key)).where(seq == F.col("_pcow_latest"))
        ties = ranked.groupBy(*keys).count().where("count > 1").limit(SAMPLE).collect() if check_unique else []
        if ties:
            raise repeated_keys_error(spec, keys_text(ties, spec.key_columns))
        latest = ranked.drop("_pcow_latest")
    else:
        dups = (
            frame.groupBy(*keys).count().where("count > 1").limit(SAMPLE).collect() if counts["repeated_keys"] else []
        )
        if dups:
            raise repeated_keys_error(spec, keys_text(dups, spec.key_columns))
        latest = frame

    staged = latest.withColumn(DELETE, is_delete).drop(*([spec.op_column] if spec.op_column else []))
    if table_columns is not None:
        staged = _conform_schema(staged, spec, table_columns)
    return staged, counts["rows"]


def repeated_keys_error(spec: ChangeSpec, keys: str) -> RepeatedKeysError:
    if spec.sequence_column:
        return RepeatedKeysError(
            f"model {spec.model}: several changes share the latest {spec.sequence_column!r} for key(s) {keys}; "
            "make the sequence unique per key",
            keys,
        )
    return RepeatedKeysError(
        f"model {spec.model}: key(s) {keys} appear more than once in one batch; set sequence_column so the latest "
        "change wins",
        keys,
    )


def batch_spelling(changes: DataFrame, spec: ChangeSpec) -> ChangeSpec:
    """``spec`` with the columns it names spelled as the batch spells them (see ``ChangeSpec.spelled_for``), unless
    Spark compares names case-sensitively (``spark.sql.caseSensitive``)."""
    if str(changes.sparkSession.conf.get("spark.sql.caseSensitive", "false")).lower() == "true":
        return spec
    return spec.spelled_for(changes.columns)


def table_spelling(changes: DataFrame, spec: ChangeSpec, table_columns: Sequence[str]) -> DataFrame:
    """``changes`` with each column that names a table column in other letter case renamed to the table's spelling,
    as Spark resolves names (``spark.sql.caseSensitive`` off, its default) and dbt-spark's MERGE matches them.
    Without it a model that spelled ``amount`` for ``Amount`` had the column dropped as new (``ignore``) and the
    table's left undelivered. Key columns too: spell ``spec`` for the result again (:func:`batch_spelling`).
    """
    if str(changes.sparkSession.conf.get("spark.sql.caseSensitive", "false")).lower() == "true":
        return changes
    by_lower = {c.lower(): c for c in table_columns}
    renames = {c: by_lower[c.lower()] for c in changes.columns
               if c not in table_columns and c.lower() in by_lower and by_lower[c.lower()] not in changes.columns}
    return changes.withColumnsRenamed(renames) if renames else changes


def _conform_schema(staged: DataFrame, spec: ChangeSpec, table_columns: Sequence[str]) -> DataFrame:
    keep = conform_schema_names(staged.columns, spec, table_columns)
    return staged if len(keep) == len(staged.columns) else staged.select(*map(quote_identifier, keep))


def conform_schema_names(columns: Sequence[str], spec: ChangeSpec, table_columns: Sequence[str]) -> list[str]:
    """The batch columns kept per ``on_schema_change``: all with ``append_new_columns``/``sync_all_columns``
    (``apply_changes`` adds the new ones to the table first), the table's under ``ignore``; ``fail`` refuses any
    difference. Internal columns (``_pcow_*``) are always kept.

    >>> spec = ChangeSpec(key_columns=("k",))
    >>> conform_schema_names(["k", "v", "extra", "_pcow_delete"], spec, ["k", "v"])
    ['k', 'v', '_pcow_delete']
    """
    internal = [c for c in columns if c.startswith("_pcow_")]
    own = [c for c in columns if c not in internal]
    extra = [c for c in own if c not in table_columns]
    missing = [c for c in table_columns if c not in own]
    if (extra or missing) and spec.on_schema_change == "fail":
        raise ChangeFeedError(
            f"model {spec.model}: the changes' columns differ from the table's (new: {extra}, missing: {missing}) "
            "and on_schema_change='fail'; nothing was written. Deliver the table's columns, set on_schema_change to "
            "'append_new_columns' or 'sync_all_columns', or rebuild the table with --full-refresh"
        )
    if spec.on_schema_change in ("append_new_columns", "sync_all_columns"):
        return list(columns)
    return [c for c in columns if c not in extra]


def problem_flags(changes: DataFrame, spec: ChangeSpec) -> tuple[Column, Column, Column, Column, Column]:
    """Per row of the batch: null key, NaN key, unknown op code, null (or NaN) sequence value, and whether it is a
    delete."""
    from pyspark.sql import functions as F

    null_key = F.lit(False)
    nan_key = F.lit(False)
    for name in spec.key_columns:
        null_key = null_key | F.col(quote_identifier(name)).isNull()
        if changes.schema[name].dataType.simpleString() in ("float", "double"):
            nan_key = nan_key | F.isnan(F.col(quote_identifier(name)))
    if spec.op_column:
        op = F.col(quote_identifier(spec.op_column))
        known = [*spec.insert_ops, *spec.update_ops, *spec.delete_ops]
        bad_op, is_delete = op.isNull() | ~op.isin(known), op.isin(list(spec.delete_ops))
    else:
        bad_op, is_delete = F.lit(False), F.lit(False)
    null_seq = F.lit(False)
    if spec.sequence_column:
        seq = F.col(quote_identifier(spec.sequence_column))
        null_seq = seq.isNull()
        if changes.schema[spec.sequence_column].dataType.simpleString() in ("float", "double"):
            # NaN orders above every number in Spark and in Arrow but ties with nothing in Arrow's comparison: the
            # driver path picked one of two NaN changes of a key where the Spark path failed on the tie
            null_seq = null_seq | F.isnan(seq)
    return null_key, nan_key, bad_op, null_seq, is_delete


def assignment_plan(changes: DataFrame, spec: ChangeSpec, table_types: dict[str, DataType]
                     ) -> dict[str, tuple[str, DataType, DataType]]:
    """Per batch column the table also has: (conversion, batch type, table type); raises for refused ones."""
    model = spec.model
    if spec.sequence_column:
        check_sequence_type(spec, changes.schema[spec.sequence_column].dataType, "the model delivers")
    plan: dict[str, tuple[str, DataType, DataType]] = {}
    for field in changes.schema.fields:
        name = field.name
        if name == spec.op_column or name not in table_types:
            continue
        kind = conversion(field.dataType, table_types[name])
        if kind == "refuse":
            sample = changes.where(f"{quote_identifier(name)} is not null").select(
                *dict.fromkeys([*spec.key_columns, name])).limit(3).collect()
            values = f": {[r[name] for r in sample]} for key(s) {keys_text(sample, spec.key_columns)}" if sample else ""
            raise ChangeFeedError(
                f"model {model}: column {name!r} is {table_types[name].simpleString()} in the table but the model "
                f"delivers {field.dataType.simpleString()}{values}. Only lossless conversions are applied "
                "(README: casting rules): cast it in the model, or change the column's type with --full-refresh"
            )
        if kind == "checked" and spec.on_schema_change in ("fail", "sync_all_columns"):
            raise ChangeFeedError(
                f"model {model}: column {name!r} changed type (table {table_types[name].simpleString()}, model "
                f"{field.dataType.simpleString()}) and on_schema_change={spec.on_schema_change!r}; partial "
                "copy-on-write does not change column types: cast it in the model, or run with --full-refresh"
            )
        plan[name] = (kind, field.dataType, table_types[name])
    seq = spec.sequence_column
    if seq and seq in plan:
        check_sequence_type(spec, plan[seq][2], "the table stores it as")
    return plan


def check_sequence_type(spec: ChangeSpec, seq_type: DataType, how: str) -> None:
    if not is_orderable_sequence(seq_type):
        raise ChangeFeedError(
            f"model {spec.model}: sequence column {spec.sequence_column!r} does not order changes: {how} "
            f"{seq_type.simpleString()} (strings compare as text: '9' > '10'); make it a number, date or timestamp"
        )


def assigned(name: str, plan: dict[str, tuple[str, DataType, DataType]], spec: ChangeSpec,
              batch_type: DataType) -> Column:
    """Column ``name`` of the batch as the table stores it (float keys normalised: -0.0 becomes 0.0)."""
    from pyspark.sql import functions as F

    column = F.col(quote_identifier(name))
    kind, source, target = plan.get(name, ("same", batch_type, batch_type))
    if kind == "widen":
        column = column.cast(cast_type(source, target))
    elif kind == "checked":
        # the value of a row that passed the checks; evaluated with them on the driver path, where a plain cast
        # would fail the query under spark.sql.ansi.enabled before the checks name the column and keys
        column = F.expr(f"try_cast({quote_identifier(name)} as {target.simpleString()})")
    if name in spec.key_columns:
        column = zero_normalized(column, target)
    return column.alias(name)


def zero_normalized(column: Column, spark_type: DataType) -> Column:
    """A key column of ``spark_type`` as it is stored and looked up: a float's -0.0 as 0.0 (-0.0 == 0 holds, so
    both become 0.0 and the key hashes, joins and groups as one value everywhere); other types as they are."""
    from pyspark.sql import functions as F

    if spark_type.simpleString() not in ("float", "double"):
        return column
    return F.when(column == F.lit(0), F.lit(0.0).cast(spark_type)).otherwise(column)
