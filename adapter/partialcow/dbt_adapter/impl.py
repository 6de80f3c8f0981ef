"""The ``partialcow`` adapter: dbt-spark's SparkAdapter plus defaults, Python models and our write paths."""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from dbt.adapters.base import PythonJobHelper, available
from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.contracts.relation import RelationType
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.impl import LIST_RELATIONS_SHOW_TABLES_MACRO_NAME, SparkAdapter
from dbt.flags import get_flags
from dbt_common.exceptions import DbtRuntimeError

from partialcow.branch.naming import IMAGE_OF_PROPERTY
from partialcow.dbt_adapter.branching import BranchingMixin
from partialcow.dbt_adapter.connections import (
    PartialcowConnectionManager,
    skip_final_collection,
    start_session_early,
)
from partialcow.dbt_adapter.materialization import PartialCowMixin
from partialcow.dbt_adapter.python_models import sql_literal
from partialcow.dbt_adapter.python_submission import SessionPythonJobHelper
from partialcow.dbt_adapter.settings_scope import SettingsScope
from partialcow.dbt_adapter.snapshots import SnapshotMixin
from partialcow.spark.metastore import EMBEDDED_LIMITS
from partialcow.spark.session import resolve_warehouse
from partialcow.table.base import quote_identifier

_LOGGER = AdapterLogger("partialcow")
# one per process: models of every adapter instance share the one embedded session
_SETTINGS = SettingsScope()
# the materialization of the model each dbt thread runs (None between models): a drop of dbt's knows no more
_MATERIALIZING = threading.local()
_TABLE_TYPE = re.compile(r"\btable_type=([A-Za-z_-]+)")


def iceberg_table_type(information: str) -> str | None:
    """The ``table_type`` table property in a ``SHOW TABLE EXTENDED`` answer, lower case (None without one).

    >>> iceberg_table_type("Table Properties: [owner=root, table_type=ICEBERG-VIEW, uuid=1]")
    'iceberg-view'
    >>> iceberg_table_type("Provider: hive, Table Properties: [table_type=ICEBERG]"), iceberg_table_type("Type: VIEW")
    ('iceberg', None)
    """
    match = _TABLE_TYPE.search(information)
    return match.group(1).lower() if match else None


def _dbt_command(config: Any) -> str | None:
    """The dbt command this process runs (``run``, ``build``, ...), from the project config's parsed arguments."""
    which = getattr(getattr(config, "args", None), "which", None)
    return which if isinstance(which, str) else None


def enforce_contracts_of_our_materialization() -> None:
    """Count ``partial_cow_incremental`` among the materializations that apply a contract's constraints.

    dbt-core decides that at parse time from a fixed list (``table``, ``incremental``): every constraint of our
    models warned "will be ignored", which ``--warn-error`` turns into a failed parse, although our first builds set
    them as dbt-spark's ``incremental`` does and every batch is checked against them. The same property feeds
    ``state:modified``'s contract checks, which now see our models' constraints as enforced."""
    from dbt.contracts.graph.nodes import ModelNode

    original = ModelNode.materialization_enforces_constraints
    if not isinstance(original, property) or getattr(original.fget, "partialcow", False):
        return

    def enforces(self: Any) -> bool:
        return self.config.materialized == "partial_cow_incremental" or bool(original.fget(self))

    enforces.partialcow = True  # type: ignore[attr-defined]
    ModelNode.materialization_enforces_constraints = property(enforces)  # type: ignore[method-assign,assignment]


def embedded_metastore(spark_config: Mapping[str, str]) -> bool:
    """Whether a profile's ``spark_config`` keeps the embedded Derby metastore (no remote or other JDBC metastore).

    >>> embedded_metastore({}), embedded_metastore({"spark.hadoop.hive.metastore.uris": "thrift://hms:9083"})
    (True, False)
    """
    url = spark_config.get("spark.hadoop.javax.jdo.option.ConnectionURL", "jdbc:derby:")
    return url.startswith("jdbc:derby:") and not spark_config.get("spark.hadoop.hive.metastore.uris")


def check_docs_fit(node: Any) -> None:
    """Refuse, before anything runs, documentation that ``persist_docs`` would write beyond what the embedded
    metastore holds (it failed inside the Iceberg commit, after Iceberg's retries).

    >>> from types import SimpleNamespace as N
    >>> node = N(name="m", description="", config={"persist_docs": {"columns": True}},
    ...          columns={"id": N(description="x" * 40000)})
    >>> check_docs_fit(node)
    Traceback (most recent call last):
    ...
    dbt_common.exceptions.base.DbtRuntimeError: Runtime Error
      model m: the description of column id has 40000 characters; the embedded metastore stores a column comment of at most 32672 (persist_docs): shorten it, set persist_docs columns: false for this model, or use your own metastore (README: the embedded metastore)
    """  # noqa: E501 - a doctest output line cannot wrap
    persist = (node.config or {}).get("persist_docs") or {}
    if not isinstance(persist, Mapping):
        return
    what: list[tuple] = []
    if persist.get("relation") and node.description:
        what.append(("table comment", "the model's description", node.description, "relation"))
    if persist.get("columns"):
        for name, column in (node.columns or {}).items():
            what.append(("column comment", f"the description of column {name}", column.description or "", "columns"))
    for limit_name, subject, text, switch in what:
        limit = EMBEDDED_LIMITS[limit_name]
        if len(text) > limit:
            raise DbtRuntimeError(
                f"model {node.name}: {subject} has {len(text)} characters; the embedded metastore stores a "
                f"{limit_name} of at most {limit} (persist_docs): shorten it, set persist_docs {switch}: false for "
                "this model, or use your own metastore (README: the embedded metastore)"
            )


class PartialcowAdapter(PartialCowMixin, SnapshotMixin, BranchingMixin, SparkAdapter):
    ConnectionManager = PartialcowConnectionManager  # type: ignore[assignment]

    def __init__(self, config: Any, mp_context: Any) -> None:
        super().__init__(config, mp_context)
        credentials = config.credentials
        # `dbt debug` passes a profile without the project: its folder is then the --project-dir flag's
        project_root = getattr(config, "project_root", None) or getattr(get_flags(), "PROJECT_DIR", None)
        credentials.warehouse = resolve_warehouse(credentials.warehouse, project_root)
        command = _dbt_command(config)
        start_session_early(credentials, command)
        if command is not None and os.path.basename(sys.argv[0]) in ("dbt", "dbt.exe"):
            skip_final_collection()  # the dbt command line's own process, not a program that runs dbt inside it

    def pre_model_hook(self, config: Mapping[str, Any]) -> Any:
        # The profile's table_format is the default file_format of every model that sets none: dbt-spark's
        # materializations read `config.get('file_format')` with their own defaults (none, or 'parquet').
        node = getattr(config, "model", None)
        node_config = getattr(node, "config", None)
        if node_config is not None and node_config.get("file_format") is None:
            node_config["file_format"] = self.config.credentials.table_format
        if node is not None and embedded_metastore(self.config.credentials.spark_config):
            check_docs_fit(node)
        _MATERIALIZING.name = node_config.get("materialized") if node_config is not None else None
        if _MATERIALIZING.name == "incremental":
            self._refuse_merge_into_other_format(node)
        super().pre_model_hook(config)
        return _SETTINGS.enter(self.connections.running_session())  # type: ignore[attr-defined]

    def post_model_hook(self, config: Mapping[str, Any], context: Any) -> None:
        _MATERIALIZING.name = None
        left = _SETTINGS.leave(context)
        if left.restored:
            _LOGGER.debug(f"partialcow: Spark settings the model changed, put back: {', '.join(left.restored)}")
        if left.kept:
            _LOGGER.warning(
                f"partialcow: Spark setting(s) {', '.join(left.kept)} changed while models ran at the same time "
                "(threads > 1), so no model's change can be put back: they stay in force for the models after it in "
                "this process. Set them in the profile's spark_config, in every model that needs them, or run with "
                "--threads 1"
            )
        super().post_model_hook(config, None)

    def list_relations_without_caching(self, schema_relation: Any) -> list[Any]:
        try:
            return super().list_relations_without_caching(schema_relation)  # type: ignore[no-any-return]
        except DbtRuntimeError as exc:
            if "CANNOT_RECOGNIZE_HIVE_TYPE" not in str(getattr(exc, "msg", exc)):
                raise
        # SHOW TABLE EXTENDED reads every relation's columns from the Hive metastore, where Iceberg (and Spark, for
        # a view) spell nested field names unquoted: one struct field named `first name` in the schema failed every
        # later run there. The relations one by one (DESCRIBE reads an Iceberg table from its own metadata).
        rows = self.execute_macro(LIST_RELATIONS_SHOW_TABLES_MACRO_NAME, kwargs={"schema_relation": schema_relation})
        return self._build_spark_relation_list(rows, self._get_relation_information_using_describe)

    def _build_spark_relation_list(self, row_list: Any, relation_info_func: Callable[[Any], Any]) -> list[Any]:
        # Through Iceberg's SparkSessionCatalog, SHOW TABLE EXTENDED reports Iceberg tables as "Provider: hive";
        # only the table_type property tells. dbt-spark would otherwise drop and re-create them (losing history)
        # instead of an atomic CREATE OR REPLACE.
        # A branch's image table (see partialcow.branch.image.publish_image_table) is the model's read-only view
        # of the branch to dbt: never incremental, dropped (unregistered) and rebuilt with the model.
        # Iceberg views carry table_type=ICEBERG-VIEW: they are views to dbt, never Iceberg tables (a model changed
        # from view to table must drop the view before `create or replace table`).
        relations = super()._build_spark_relation_list(row_list, relation_info_func)
        listed = []
        for r in relations:
            kind = iceberg_table_type(r.information or "")
            if IMAGE_OF_PROPERTY in (r.information or "") or kind == "iceberg-view":
                r = r.incorporate(type=RelationType.View, is_iceberg=False)
            elif kind == "iceberg":
                r = r.incorporate(is_iceberg=True)
            listed.append(r)
        return listed

    @available
    def partialcow_table_comment(self, relation: Any, description: str) -> bool:
        """Make ``description`` the comment of table ``relation`` (``persist_docs: {relation: true}``) unless it is
        already; True when it wrote. dbt-spark sets it in CREATE TABLE AS SELECT, which partial_cow_incremental,
        partial copy-on-write snapshots and Python models do not run; an unchanged comment is not written again,
        since on Delta every ALTER is a table version."""
        from partialcow.table.java import bind_to_current_thread

        spark = bind_to_current_thread(self.connections.spark_session())  # type: ignore[attr-defined]
        name = f"{relation.schema}.{relation.identifier}"
        if (spark.catalog.getTable(name).description or "") == description:
            return False
        spark.sql(f"COMMENT ON TABLE {quote_identifier(name)} IS {sql_literal(description)}")
        return True

    @available
    def partialcow_drop_leftover_view(self, relation: Any) -> bool:
        """After ``drop view if exists``: drop the view from the metastore if that statement left it there (a view
        another session catalog wrote, see ``partialcow.spark.metastore.drop_leftover_view``); True when it did."""
        from partialcow.spark.metastore import drop_leftover_view
        from partialcow.table.java import bind_to_current_thread

        if not relation.schema or not relation.identifier:
            return False
        spark = bind_to_current_thread(self.connections.spark_session())  # type: ignore[attr-defined]
        dropped = drop_leftover_view(spark, relation.schema, relation.identifier)
        if dropped:
            _LOGGER.debug(f"partialcow: dropped view {relation} from the metastore, which DROP VIEW had left")
        return dropped

    @available
    def partialcow_refuse_iceberg_folder(self, relation: Any) -> None:
        """Before dbt drops table ``relation`` on a Delta session, for a model that builds a table (not a view,
        which needs no folder): refuse, with the table left as it is, when it is an Iceberg table whose files lie
        where the new table goes (see ``partialcow.spark.metastore.iceberg_folder_in_the_way``)."""
        from partialcow.spark.metastore import iceberg_folder_in_the_way
        from partialcow.spark.session import session_table_format
        from partialcow.table.java import bind_to_current_thread

        if not relation.schema or not relation.identifier or getattr(_MATERIALIZING, "name", None) == "view":
            return
        spark = bind_to_current_thread(self.connections.spark_session())  # type: ignore[attr-defined]
        if session_table_format(spark) != "delta":
            return
        folder = iceberg_folder_in_the_way(spark, relation.schema, relation.identifier)
        if folder:
            raise DbtRuntimeError(
                f"{relation} is an Iceberg table whose files lie in {folder}, where its Delta table goes: a Delta "
                "session would drop it from the metastore only, and Delta creates no table in a folder that is not "
                "empty. Remove that folder once no other table reads its files (a renamed copy of this table, a "
                "branch of it), then run this model again; the table is left as it was"
            )

    def _other_format(self, relation: Any) -> tuple[str, str] | None:
        """(the table's format, then what a message says of it) when table ``relation`` is of the other format than
        the session's catalog holds (the profile moved between Iceberg and Delta), else None."""
        from partialcow.spark.session import session_table_format
        from partialcow.table.java import bind_to_current_thread

        stored = "delta" if relation.is_delta else "iceberg" if relation.is_iceberg else None
        if stored is None:
            return None
        spark = bind_to_current_thread(self.connections.spark_session())  # type: ignore[attr-defined]
        session = session_table_format(spark)
        if session is None or stored == session:
            return None
        return stored, (
            f"its table {relation} is a{'n Iceberg' if stored == 'iceberg' else ' Delta'} table, but this profile's "
            f"session catalog holds {session.capitalize()} tables (one session catalog holds one format)"
        )

    def _refuse_merge_into_other_format(self, node: Any) -> None:
        """Refuse, before anything runs, dbt-spark's ``incremental`` run of a model whose table is of the other
        format than the session's: its MERGE or INSERT failed in every run with a raw Spark error (``MERGE INTO
        TABLE is not supported temporarily``, ``DATA_SOURCE_NOT_FOUND``, a task's ``InstantiationException``)."""
        full_refresh = node.config.get("full_refresh")
        if full_refresh if full_refresh is not None else getattr(get_flags(), "FULL_REFRESH", False):
            return
        relation = self.get_relation(node.database, node.schema, node.alias)
        if relation is None or relation.type != RelationType.Table:
            return
        formats = self._other_format(relation)
        if formats is None:
            return
        stored, held = formats
        raise DbtRuntimeError(
            f"model {node.name}: {held}: run it with a profile of table_format: {stored}, or with --full-refresh to "
            "build it again in this profile's format; nothing was written"
        )

    @available
    def partialcow_check_snapshot_format(self, relation: Any, model: str) -> None:
        """Refuse a snapshot whose existing table is of the other format than the session's catalog holds (the
        profile moved between Iceberg and Delta): every run failed with a raw Java error, and a snapshot has no
        ``--full-refresh`` to move its history."""
        formats = self._other_format(relation)
        if formats is None:
            return
        stored, held = formats
        raise DbtRuntimeError(
            f"snapshot {model}: {held}: run it with a profile of table_format: {stored}, where its history is as it "
            "was. A snapshot has no --full-refresh: to go on in the other format, copy its table into one of that "
            "format yourself; nothing was written"
        )

    @available
    def partialcow_sql_literal(self, value: Any) -> str:
        """A seed value as a Spark SQL literal (see macros/seed.sql)."""
        return sql_literal(value)

    @property
    def default_python_submission_method(self) -> str:
        return "session"

    @property
    def python_submission_helpers(self) -> dict[str, type[PythonJobHelper]]:
        return {"session": SessionPythonJobHelper}

    def generate_python_submission_response(self, submission_result: Any) -> AdapterResponse:
        return AdapterResponse(_message="OK")
