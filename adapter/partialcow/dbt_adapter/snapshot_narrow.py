"""Narrow a snapshot run to the records that can have changed, before dbt's staging query sees them.

dbt's ``check`` and ``timestamp`` staging query joins the whole source with every current version of the snapshot, twice
(insertions, updates) or three times (hard deletes), carrying every column through each join. Most records did not
change. So one narrow join runs first, each side contributing its key and only what dbt's ``row_changed`` looks at:
``check`` with named ``check_cols`` those columns, ``check_cols='all'`` a 96-bit fingerprint of every primitive column
and the array and struct columns themselves (Spark's hashes skip NULL elements and fields and leave an array's length
out: ``[1, NULL]``, ``[NULL, 1]`` and ``[1]`` hash alike), ``timestamp`` the source's ``updated_at`` and the snapshot's
``dbt_valid_from`` (plus the deletion flag of ``hard_deletes='new_record'``). A record is a *candidate* when it is new
in the source; when it is gone from the source and dbt acts on that (``hard_deletes`` ``invalidate``, or ``new_record``
while its current version does not record the deletion yet); when its checked values differ (NULL against NULL is no
change, as in dbt's test) or dbt's ``timestamp`` test says it changed; or, under ``new_record``, when it is back in
the source after its deletion. The candidates' rows are read once into memory, and dbt's own staging query then runs
unchanged over them.

Why that gives dbt's answer: for a record outside the candidates, ``row_changed`` is false (it tests nothing else),
it is not new (no insertion), dbt leaves its absence from the source alone, and it is no deletion record back in the
source: dbt's query yields nothing for it either way. Every row of a candidate record reaches dbt's query, as do
rows with a NULL key part, which never join in dbt's query. Equal fingerprints of different values would need a
collision of xxhash64 and murmur3 at once (different fingerprints of equal values, -0.0, only add candidates).

It does not narrow where that reasoning does not hold: other strategies, a source column the snapshot lacks (dbt's
``check_cols='all'`` then treats every row as changed), checked columns Spark cannot compare (maps), ``check_cols``
that are not query columns (dbt then calls every record changed), compared columns whose type changed (Spark's hashes
of a timestamp and a timestamp_ntz, or of decimals of another scale, agree where dbt's comparison sees a change).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from partialcow.table.base import quote_identifier

__all__ = ["BROADCAST_KEYS", "SHUFFLE_HASH_BYTES", "NarrowPlan", "candidate_keys_sql", "current_side_sql",
           "join_by_hash", "narrowed_source_sql", "narrowed_target_sql", "plan_narrowing"]

_KEY = "__pcow_k"  # candidate key parts: __pcow_k0, __pcow_k1, ...
# up to this many candidate keys go to every task that reads the source and the snapshot; more are joined by a shuffle
BROADCAST_KEYS = 1_000_000
# The join of every key builds a hash table of the snapshot's side in each shuffle partition where Spark's estimate of
# that side is at most this many bytes per partition, instead of sorting both sides: a fresh process spends much of
# its CPU in the JIT compiler, and the hash join has no sorts to compile or run (bench/README.md, the snapshot
# runs). Spark's hash join cannot spill, so larger snapshots keep the sort-merge join.
SHUFFLE_HASH_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class NarrowPlan:
    """What the narrowing of one snapshot run needs: the key expressions (dbt's ``unique_key``, evaluated over the
    source and over the snapshot alike), what each side contributes, and the test of a change."""

    key_exprs: tuple[str, ...]
    source_columns: tuple[str, ...]
    current_filter: str
    # check: the columns compared value by value (named check_cols; with check_cols='all' the arrays and structs) or
    # by fingerprint (check_cols='all': the other columns)
    compared: tuple[str, ...] = ()
    fingerprinted: tuple[str, ...] = ()
    # timestamp: the source's updated_at expression and the snapshot's dbt_valid_from column
    updated_at: str | None = None
    valid_from: str | None = None
    # hard_deletes='new_record': the snapshot's dbt_is_deleted column, when the snapshot has it
    is_deleted: str | None = None
    # what dbt does with a record the source no longer has: ignore, invalidate or new_record
    hard_deletes: str = "invalidate"
    # fingerprinted integer columns, hashed as bigint: Spark hashes an int and a bigint of one value apart
    integral: tuple[str, ...] = ()

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(f"{_KEY}{i}" for i in range(len(self.key_exprs)))


def plan_narrowing(*, strategy_name: str, unique_key: str | Sequence[str], check_cols: str | Sequence[str] | None,
                   source_columns: Sequence[str], source_types: Sequence[str], target_columns: Sequence[str],
                   meta_columns: dict[str, str], updated_at: str | None, valid_to_current: str | None,
                   target_types: Sequence[str] | None = None, hard_deletes: str = "invalidate",
                   ) -> tuple[NarrowPlan | None, str]:
    """The plan, or ``None`` and why the run is not narrowed. ``target_types``: the snapshot's column types, in
    ``target_columns``' order (``DataFrame.dtypes``'s spelling); ``hard_deletes``: the snapshot's setting.

    >>> plan, why = plan_narrowing(strategy_name="check", unique_key="id", check_cols=["v"],
    ...     source_columns=["id", "v"], source_types=["bigint", "string"], target_columns=["id", "v", "dbt_valid_to"],
    ...     meta_columns={"dbt_valid_to": "dbt_valid_to", "dbt_is_deleted": "dbt_is_deleted"},
    ...     updated_at=None, valid_to_current=None)
    >>> plan.compared, plan.fingerprinted, plan.current_filter, plan.is_deleted
    (('v',), (), '`dbt_valid_to` is null', None)
    >>> plan_narrowing(strategy_name="check", unique_key="id", check_cols="all", source_columns=["id", "w"],
    ...     source_types=["int", "int"], target_columns=["id", "v"], meta_columns={"dbt_valid_to": "dbt_valid_to"},
    ...     updated_at=None, valid_to_current=None)[1]
    'the source has columns the snapshot lacks: w'
    """
    if strategy_name not in ("check", "timestamp"):
        return None, f"strategy {strategy_name!r} is not check or timestamp"
    missing = [c for c in source_columns if c not in target_columns]  # exact case, as dbt's column_added test
    if missing:
        return None, "the source has columns the snapshot lacks: " + ", ".join(missing)
    compared: tuple[str, ...] = ()
    fingerprinted: tuple[str, ...] = ()
    types = dict(zip(source_columns, source_types, strict=True))
    if strategy_name == "check":
        named = [check_cols] if isinstance(check_cols, str) and check_cols != "all" else check_cols
        if named and not isinstance(named, str) and any(c not in source_columns for c in named):
            # dbt names such a column as the query does (`upper(v)`), finds no snapshot column of that name and
            # calls every record changed
            return None, "check_cols that are not query columns: " + ", ".join(c for c in named
                                                                                if c not in source_columns)
        if isinstance(named, str) or not named:
            # 'all': nested values by value, since a hash that skips NULLs inside them would hide a change
            compared = tuple(c for c in source_columns if _nested(types[c]))
            fingerprinted = tuple(c for c in source_columns if not _nested(types[c]))
        else:
            compared = tuple(named)
    maps = [c for c in compared + fingerprinted if "map<" in types[c].lower()]
    if maps:
        return None, "map columns cannot be compared: " + ", ".join(maps)
    if target_types is not None:
        # Spark's hashes of a value can ignore its type (a timestamp and a timestamp_ntz, decimals of one precision
        # but another scale hash alike), where dbt's comparison converts: a changed type could hide a change
        stored = dict(zip(target_columns, target_types, strict=True))
        retyped = [c for c in compared + fingerprinted if not _same_family(stored[c], types[c])]
        if retyped:
            return None, "compared columns whose type changed: " + ", ".join(retyped)
    valid_to = quote_identifier(meta_columns["dbt_valid_to"])
    # dbt's snapshotted_data: the current versions
    current = f"{valid_to} is null"
    if valid_to_current:
        current = f"({valid_to} = {valid_to_current} or {valid_to} is null)"
    is_deleted = meta_columns.get("dbt_is_deleted")
    timestamp = strategy_name == "timestamp"
    return NarrowPlan(
        key_exprs=(unique_key,) if isinstance(unique_key, str) else tuple(unique_key),
        source_columns=tuple(source_columns),
        current_filter=current,
        compared=compared,
        fingerprinted=fingerprinted,
        updated_at=updated_at if timestamp else None,
        valid_from=quote_identifier(meta_columns["dbt_valid_from"]) if timestamp else None,
        is_deleted=quote_identifier(is_deleted) if is_deleted and is_deleted in target_columns
        and hard_deletes == "new_record" else None,
        hard_deletes=hard_deletes,
        integral=tuple(c for c in fingerprinted if types[c].lower() in _INTEGRAL),
    ), ""


_INTEGRAL = ("tinyint", "smallint", "int", "bigint")


def _same_family(stored: str, delivered: str) -> bool:
    """Whether a snapshot column of type ``stored`` and a source column of type ``delivered`` hash alike only when
    their values are equal: the same type, integers of any width (a table format may store a smallint as an int), or
    strings of any declared length.

    >>> _same_family("int", "smallint"), _same_family("string", "varchar(10)")
    (True, True)
    >>> _same_family("timestamp", "timestamp_ntz"), _same_family("decimal(10,2)", "decimal(10,3)")
    (False, False)
    """
    stored, delivered = stored.lower(), delivered.lower()
    if stored == delivered or (stored in _INTEGRAL and delivered in _INTEGRAL):
        return True
    return all(t == "string" or t.startswith(("varchar(", "char(")) for t in (stored, delivered))


def _nested(spark_type: str) -> bool:
    """Whether a column of this Spark type (``DataFrame.dtypes``'s spelling) holds arrays or structs.

    >>> _nested("array<int>"), _nested("struct<a:int,b:string>"), _nested("decimal(10,2)"), _nested("string")
    (True, True, False, False)
    """
    return spark_type.lower().startswith(("array<", "struct<"))


def _side(plan: NarrowPlan) -> str:
    """What both sides contribute besides the key: the compared columns, the fingerprints."""
    parts = [f"{quote_identifier(c)} as __pcow_c{i}" for i, c in enumerate(plan.compared)]
    if plan.fingerprinted:
        # a NULL argument is skipped by Spark's hashes: each value travels with its null flag, so (NULL, 1) and
        # (1, NULL) differ. Only primitive columns are hashed: the same skipping inside an array or a struct cannot
        # be flagged from here (plan_narrowing compares those by value)
        hashed = [(f"cast({quote_identifier(c)} as bigint)" if c in plan.integral else quote_identifier(c), c)
                  for c in plan.fingerprinted]
        args = ", ".join(f"{value}, isnull({quote_identifier(c)})" for value, c in hashed)
        parts += [f"xxhash64({args}) as __pcow_h1", f"hash({args}) as __pcow_h2"]
    return "".join(f", {p}" for p in parts)


def _keys(plan: NarrowPlan) -> str:
    return ", ".join(f"{expr} as {name}" for expr, name in zip(plan.key_exprs, plan.key_names, strict=True))


def join_by_hash(estimated_bytes: int, partitions: int) -> bool:
    """Whether the join of every key builds hash tables of the snapshot's side (Spark's estimate of it,
    ``estimated_bytes``, over ``partitions`` shuffle partitions; see ``SHUFFLE_HASH_BYTES``).

    >>> join_by_hash(75_000_000, 4), join_by_hash(750_000_000, 4), join_by_hash(750_000_000, 200)
    (True, False, True)
    """
    return estimated_bytes / max(1, partitions) <= SHUFFLE_HASH_BYTES


def current_side_sql(plan: NarrowPlan, target: str) -> str:
    """The snapshot's side of the join in ``candidate_keys_sql``: the current versions' keys and tested values.

    >>> print(current_side_sql(NarrowPlan(key_exprs=("id",), source_columns=("id",), current_filter="c is null"), "t"))
    select id as __pcow_k0, true as __pcow_m
      from t where c is null
    """
    extra = _side(plan) + (f", {plan.valid_from} as __pcow_vf" if plan.valid_from else "")
    if plan.is_deleted:
        extra += f", coalesce({plan.is_deleted} = 'True', false) as __pcow_del"
    return f"select {_keys(plan)}{extra}, true as __pcow_m\n  from {target} where {plan.current_filter}"


def candidate_keys_sql(plan: NarrowPlan, source_sql: str, target: str, *, shuffle_hash: bool = False) -> str:
    """The distinct keys of the candidate records (see the module's docstring). ``shuffle_hash``: join by hash
    tables of the snapshot's side, one per shuffle partition (see ``SHUFFLE_HASH_BYTES``), not by sorting both sides.

    >>> plan = NarrowPlan(key_exprs=("id",), source_columns=("id", "v"), current_filter="`dbt_valid_to` is null",
    ...                   compared=("v",))
    >>> print(candidate_keys_sql(plan, "select 1 as id, 'a' as v", "s.snap"))
    select distinct coalesce(s.__pcow_k0, t.__pcow_k0) as __pcow_k0
    from (select id as __pcow_k0, `v` as __pcow_c0, true as __pcow_m
      from (
    select 1 as id, 'a' as v
    ) __pcow_src) s
    full outer join (select id as __pcow_k0, `v` as __pcow_c0, true as __pcow_m
      from s.snap where `dbt_valid_to` is null) t
    on s.__pcow_k0 = t.__pcow_k0
    where t.__pcow_m is null or s.__pcow_m is null or (s.__pcow_m and t.__pcow_m and (not (s.__pcow_c0 <=> t.__pcow_c0)))
    """  # noqa: E501 - a doctest line cannot wrap
    source_extra = _side(plan) + (f", {plan.updated_at} as __pcow_upd" if plan.updated_at else "")
    # on both sides, by dbt's row_changed
    differ = [f"not (s.__pcow_c{i} <=> t.__pcow_c{i})" for i in range(len(plan.compared))]
    if plan.fingerprinted:
        differ += ["s.__pcow_h1 <> t.__pcow_h1", "s.__pcow_h2 <> t.__pcow_h2"]
    if plan.updated_at:
        differ.append("t.__pcow_vf < s.__pcow_upd")  # dbt's timestamp row_changed, as dbt writes it
    changed = ["t.__pcow_m is null"]  # new in the source
    # gone from the source: dbt acts on it under invalidate, and under new_record unless its current version already
    # records the deletion; never under ignore
    if plan.hard_deletes != "ignore":
        changed.append("(s.__pcow_m is null and not t.__pcow_del)" if plan.is_deleted else "s.__pcow_m is null")
    if differ:
        changed.append(f"(s.__pcow_m and t.__pcow_m and ({' or '.join(differ)}))")
    if plan.is_deleted:
        changed.append("(s.__pcow_m and t.__pcow_del)")  # back in the source after its deletion
    coalesced = ", ".join(f"coalesce(s.{k}, t.{k}) as {k}" for k in plan.key_names)
    on = " and ".join(f"s.{k} = t.{k}" for k in plan.key_names)
    hint = "/*+ SHUFFLE_HASH(t) */ " if shuffle_hash else ""
    return (
        f"select {hint}distinct {coalesced}\n"
        f"from (select {_keys(plan)}{source_extra}, true as __pcow_m\n"
        f"  from (\n{source_sql}\n) __pcow_src) s\n"
        f"full outer join ({current_side_sql(plan, target)}) t\n"
        f"on {on}\n"
        f"where {' or '.join(changed)}"
    )


def _candidate_rows(plan: NarrowPlan, keyed: str, columns: Sequence[str], keys_view: str, broadcast: bool) -> str:
    """The rows of ``keyed`` (a query with the key parts as columns) that belong to a candidate record, or have a
    NULL key part (they never join in dbt's query: keep them there). The candidate keys are distinct, so a left join
    keeps each row once; broadcast, it filters the rows where they are read instead of shuffling them all."""
    hint = "/*+ BROADCAST(__pcow_keys) */ " if broadcast else ""
    on = " and ".join(f"__pcow_keyed.{k} = __pcow_keys.{k}" for k in plan.key_names)
    nulls = " or ".join(f"__pcow_keyed.{k} is null" for k in plan.key_names)
    selected = ", ".join(f"__pcow_keyed.{quote_identifier(c)}" for c in columns)
    return (f"select {hint}{selected} from ({keyed}) __pcow_keyed\n"
            f"left join {keys_view} __pcow_keys on {on}\n"
            f"where __pcow_keys.{plan.key_names[0]} is not null or {nulls}")


def narrowed_source_sql(plan: NarrowPlan, source_sql: str, keys_view: str, *, broadcast: bool = True) -> str:
    """The source query cut to the candidate records, with the source's columns only.

    >>> plan = NarrowPlan(key_exprs=("id",), source_columns=("id",), current_filter="")
    >>> print(narrowed_source_sql(plan, "select 1 as id", "keys"))
    select /*+ BROADCAST(__pcow_keys) */ __pcow_keyed.`id` from (select *, id as __pcow_k0 from (
    select 1 as id
    ) __pcow_src) __pcow_keyed
    left join keys __pcow_keys on __pcow_keyed.__pcow_k0 = __pcow_keys.__pcow_k0
    where __pcow_keys.__pcow_k0 is not null or __pcow_keyed.__pcow_k0 is null
    """
    keyed = f"select *, {_keys(plan)} from (\n{source_sql}\n) __pcow_src"
    return _candidate_rows(plan, keyed, plan.source_columns, keys_view, broadcast)


def narrowed_target_sql(plan: NarrowPlan, target: str, target_columns: Sequence[str], keys_view: str, *,
                        broadcast: bool = True) -> str:
    """The snapshot's rows of the candidate records (dbt's query picks the current versions among them)."""
    return _candidate_rows(plan, f"select *, {_keys(plan)} from {target}", target_columns, keys_view, broadcast)
