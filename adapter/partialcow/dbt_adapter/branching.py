"""Branch environments in dbt: the ``@available`` adapter methods the macros in ``macros/branch/`` call.

Jinja stays thin: every macro passes its arguments here, these methods turn them into typed calls of
:mod:`partialcow.branch` on the process's SparkSession, and branch errors become one-line dbt errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from dbt.adapters.base import available
from dbt.adapters.base.meta import AdapterMeta
from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from partialcow.exceptions import PartialCowError

__all__ = ["BranchingMixin", "build_python_model_on_branch"]

_T = TypeVar("_T")
_LOGGER = AdapterLogger("partialcow")


def _dbt_errors(call: Callable[[], _T]) -> _T:
    try:
        return call()
    except PartialCowError as exc:
        raise DbtRuntimeError(str(exc)) from None


def _key_columns(unique_key: Any) -> list[str]:
    if unique_key is None or unique_key == "":
        return []
    if isinstance(unique_key, str):
        return [unique_key]
    return [str(k) for k in unique_key]


def _require_iceberg(identifier: str, file_format: str | None) -> None:
    if file_format not in (None, "", "iceberg"):
        raise PartialCowError(
            f"model {identifier}: branches are implemented for Iceberg tables, and {identifier} is a "
            f"{file_format!r} model (file_format={file_format!r}): build it without a branch, or make it an Iceberg "
            "model (file_format='iceberg')"
        )


def _base_schema(schema: str, identifier: str, branch: str) -> str:
    from partialcow.branch import base_schema_of, overlay_schema, validate_branch_name

    validate_branch_name(branch)
    base_schema = base_schema_of(schema)
    if overlay_schema(base_schema, branch) != schema:
        raise PartialCowError(f"model {identifier}: schema {schema} is not an overlay schema of branch {branch}")
    return base_schema


def _build(df: Any, *, schema: str, identifier: str, unique_key: Any, branch: str, meta_schema: str,
           file_format: str | None = None, materialized: str | None = None) -> str:
    from partialcow.branch import build_model

    _require_iceberg(identifier, file_format)
    base_schema = _base_schema(schema, identifier, branch)
    summary = build_model(
        df.sparkSession,
        df,
        branch=branch,
        base_schema=base_schema,
        identifier=identifier,
        key_columns=_key_columns(unique_key),
        meta_schema=meta_schema,
        # an incremental model's runs on the parent upsert and never delete: its rows stay where the branch's
        # full result lacks them (a tombstone would delete them from the parent at the merge)
        keep_missing=materialized == "incremental",
    )
    return summary.describe()


def build_python_model_on_branch(spark: Any, df: Any, spec_json: str) -> str:
    """Called by the code a Python model compiles to on a branch: store ``df`` as the model's overlay.

    ``spec_json`` carries ``schema``, ``identifier``, ``unique_key``, ``branch`` and ``meta_schema``.
    """
    from partialcow.table.java import bind_to_current_thread

    spec = json.loads(spec_json)
    bind_to_current_thread(spark)
    return _dbt_errors(lambda: _build(df, **spec))


class BranchingMixin(metaclass=AdapterMeta):
    """Adapter methods for branch environments (mixed into ``PartialcowAdapter``).

    ``AdapterMeta`` collects the ``@available`` names into ``_available_``, which the adapter class merges from
    its bases.
    """

    def _branch_spark(self) -> Any:
        # Through dbt's connection, never a bare getOrCreate(): see PartialcowConnectionManager.spark_session
        from partialcow.spark.session import session_table_format

        spark = self.connections.spark_session()  # type: ignore[attr-defined]
        running = session_table_format(spark)
        if running not in (None, "iceberg"):
            # the branch records, overlays and images are Iceberg tables (images are Iceberg branches)
            raise DbtRuntimeError(
                f"branches are implemented for Iceberg tables, and this profile's Spark session holds {running} "
                f"tables (table_format: {running}): run branch operations and `--vars '{{branch: ...}}'` builds "
                "with an Iceberg profile (table_format: iceberg)"
            )
        return spark

    @available
    def partialcow_branch_name(self, value: Any) -> str | None:
        """The validated branch selected by ``--vars '{branch: ...}'`` / ``DBT_PARTIALCOW_BRANCH``; None for main."""
        from partialcow.branch import MAIN, validate_branch_name

        if value is None or value == "" or value == MAIN:
            return None
        return _dbt_errors(lambda: validate_branch_name(value))

    @available
    def partialcow_overlay_schema(self, base_schema: str, branch: str) -> str:
        from partialcow.branch import overlay_schema

        return _dbt_errors(lambda: overlay_schema(base_schema, branch))

    @available
    def partialcow_is_branch_schema(self, schema: str, branch: str) -> bool:
        """Whether ``schema`` is one of ``branch``'s overlay schemas (what every node built on it should write)."""
        from partialcow.branch import overlay_schema
        from partialcow.branch.naming import base_schema_of

        return _dbt_errors(lambda: overlay_schema(base_schema_of(schema), branch) == schema)

    @available
    def partialcow_branch_resolve(self, relation: Any, branch: str, meta_schema: str) -> Any:
        """Where ``ref()`` reads inside ``branch``: the branch's view if the model was built on the branch, else
        the nearest ancestor's (parent branch views, then the table built without a branch)."""
        from partialcow.branch import BranchStore, base_schema_of, overlay_schema

        schema = getattr(relation, "schema", None)
        identifier = getattr(relation, "identifier", None)
        if not schema or not identifier or base_schema_of(schema) == schema:
            return relation  # ephemeral CTEs and relations outside the branch pass through
        base_schema = base_schema_of(schema)
        if overlay_schema(base_schema, branch) != schema:
            return relation

        def resolve() -> Any:
            from partialcow.branch.overlay import resolve_restoring

            spark = self._branch_spark()
            store = BranchStore(spark, meta_schema=meta_schema)
            # Once per invocation (dbt gives each its own adapter), not at every ref(): the branch's chain (a
            # Spark query of the branch records; no command changes it while models build) and, per model, whether
            # an empty overlay follows its parent's ALTER TABLE (a table load)
            chains = self.__dict__.setdefault("_partialcow_chains", {})
            levels = chains.get((meta_schema, branch)) or chains.setdefault((meta_schema, branch), store.chain(branch))
            followed = self.__dict__.setdefault("_partialcow_followed", set())
            key = (meta_schema, branch, base_schema, identifier.lower())
            found = resolve_restoring(spark, store=store, levels=levels, base_schema=base_schema,
                                      identifier=identifier, follow=key not in followed)
            followed.add(key)
            return relation.incorporate(path={"schema": found[0] if found else base_schema})

        return _dbt_errors(resolve)

    @available
    def partialcow_drop_branch_reader(self, relation: Any) -> bool:
        """Drop ``relation`` if it is what readers of a model on a branch query in an overlay schema: its view or its
        image table (which dbt lists as a view; unregistered, never purged). False elsewhere: dbt drops it."""
        from partialcow.branch import base_schema_of
        from partialcow.branch.image import drop_reader_relation

        # dbt-spark stages Iceberg snapshots in a view without a schema (relation.schema is None): never a branch's
        if not relation.schema or base_schema_of(relation.schema) == relation.schema:
            return False
        _dbt_errors(lambda: drop_reader_relation(self._branch_spark(), relation.schema, relation.identifier))
        return True

    @available
    def partialcow_branch_build(
        self, relation: Any, compiled_code: str, unique_key: Any, branch: str, meta_schema: str,
        file_format: str | None = None, materialized: str | None = None,
    ) -> str:
        """Build a SQL model on ``branch``: its result is diffed against the parent into the overlay table."""
        _dbt_errors(lambda: _require_iceberg(relation.identifier, file_format))
        return _dbt_errors(
            lambda: _build(
                self._branch_spark().sql(compiled_code),
                schema=relation.schema,
                identifier=relation.identifier,
                unique_key=unique_key,
                branch=branch,
                meta_schema=meta_schema,
                file_format=file_format,
                materialized=materialized,
            )
        )

    @available
    def partialcow_require_branch(self, branch: str, meta_schema: str) -> None:
        """Refuse, naming how to create it, a ``branch`` that does not exist (a seed loaded on it)."""
        from partialcow.branch import BranchStore

        _dbt_errors(lambda: BranchStore(self._branch_spark(), meta_schema=meta_schema).chain(branch))

    @available
    def partialcow_branch_has_model(self, relation: Any, branch: str, meta_schema: str) -> bool:
        """True if ``branch`` or one of its parent levels has the model (``is_incremental()`` of a
        ``partial_cow_incremental`` model on a branch)."""
        from partialcow.branch import BranchStore, resolve_parent

        def find() -> bool:
            base_schema = _base_schema(relation.schema, relation.identifier, branch)
            spark = self._branch_spark()
            levels = BranchStore(spark, meta_schema=meta_schema).chain(branch)
            return resolve_parent(spark, levels, base_schema, relation.identifier) is not None

        return _dbt_errors(find)

    @available
    def partialcow_branch_forget(self, relation: Any, branch: str, meta_schema: str) -> bool:
        """Before a view model is created on ``branch``: the rows the branch held for it as a table model go
        (``partialcow.branch.overlay.remove_model``), so diff and merge no longer see them. Returns whether it held
        any."""
        from partialcow.branch import BranchStore
        from partialcow.branch.overlay import remove_model

        def forget() -> bool:
            base_schema = _base_schema(relation.schema, relation.identifier, branch)
            spark = self._branch_spark()
            return remove_model(spark, store=BranchStore(spark, meta_schema=meta_schema), branch=branch,
                                base_schema=base_schema, identifier=relation.identifier, descendants=False)

        return _dbt_errors(forget)

    @available
    def partialcow_branch_prepare(self, relation: Any, config: dict[str, Any], branch: str, meta_schema: str) -> bool:
        """Before a ``partial_cow_incremental`` model's SQL runs on ``branch``: refuse Delta models, and give the
        model a relation on the branch (``{{ this }}``) when only a parent level has it."""
        from partialcow.branch.incremental import prepare_model

        def prepare() -> bool:
            _require_iceberg(relation.identifier, config.get("file_format"))
            base_schema = _base_schema(relation.schema, relation.identifier, branch)
            return prepare_model(self._branch_spark(), branch=branch, base_schema=base_schema,
                                 identifier=relation.identifier, key_columns=_key_columns(config.get("unique_key")),
                                 meta_schema=meta_schema)

        return _dbt_errors(prepare)

    @available
    def partialcow_branch_apply(
        self, relation: Any, changes_view: str, config: dict[str, Any], branch: str, meta_schema: str,
        full_refresh: bool,
    ) -> Any:
        """Apply a ``partial_cow_incremental`` model's staged changes to its overlay on ``branch`` (the parent's
        table is never written); returns the run result dbt records."""
        from partialcow.branch.incremental import apply_changes_on_branch
        from partialcow.dbt_adapter.materialization import PartialCowResponse, change_spec

        def apply() -> Any:
            _require_iceberg(relation.identifier, config.get("file_format"))
            base_schema = _base_schema(relation.schema, relation.identifier, branch)
            spec = change_spec(config, model=str(relation.identifier))
            spark = self._branch_spark()
            done = apply_changes_on_branch(
                spark, spark.table(f"`{changes_view}`"), spec, branch=branch, base_schema=base_schema,
                identifier=relation.identifier, meta_schema=meta_schema, full_refresh=bool(full_refresh),
            )
            return PartialCowResponse(
                _message=f"BRANCH {branch}: INSERT {done.inserted}, UPDATE {done.updated}, DELETE {done.deleted}",
                rows_affected=done.inserted + done.updated + done.deleted,
                rows_inserted=done.inserted, rows_updated=done.updated, rows_deleted=done.deleted,
            ), done.describe()

        response, summary = _dbt_errors(apply)
        _LOGGER.info(summary)
        return response

    @available
    def partialcow_branch_operation(self, operation: str, options: dict[str, Any], meta_schema: str) -> str:
        """Run one branch operation (create, diff, merge, drop, list, materialize, refresh); returns its log summary.

        ``options`` (the run-operation's arguments) are parsed into the operation's typed options first: a bad
        argument stops before Spark is touched.
        """
        from partialcow.branch.options import parse_options, run_operation

        parsed = _dbt_errors(lambda: parse_options(operation, options))
        spark = self._branch_spark()
        return _dbt_errors(lambda: run_operation(spark, parsed, meta_schema=meta_schema).describe())
