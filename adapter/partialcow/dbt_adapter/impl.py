"""The ``partialcow`` adapter: dbt-spark's SparkAdapter plus defaults, Python models and our write paths."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping, Type

from dbt.adapters.base import PythonJobHelper, available
from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.contracts.relation import RelationType
from dbt.adapters.spark.impl import SparkAdapter

from partialcow.branch.naming import IMAGE_OF_PROPERTY
from partialcow.dbt_adapter.branching import BranchingMixin
from partialcow.dbt_adapter.connections import PartialcowConnectionManager
from partialcow.dbt_adapter.materialization import PartialCowMixin
from partialcow.dbt_adapter.python_submission import SessionPythonJobHelper
from partialcow.dbt_adapter.python_models import sql_literal


class PartialcowAdapter(PartialCowMixin, BranchingMixin, SparkAdapter):
    ConnectionManager = PartialcowConnectionManager  # type: ignore[assignment]

    def __init__(self, config: Any, mp_context: Any) -> None:
        super().__init__(config, mp_context)
        credentials = config.credentials
        project_root = getattr(config, "project_root", None)
        if project_root and not os.path.isabs(os.path.expanduser(credentials.warehouse)):
            credentials.warehouse = os.path.join(project_root, credentials.warehouse)
        credentials.warehouse = os.path.abspath(os.path.expanduser(credentials.warehouse))

    def pre_model_hook(self, config: Mapping[str, Any]) -> Any:
        # The profile's table_format is the default file_format of every model that sets none: dbt-spark's
        # materializations read `config.get('file_format')` with their own defaults (none, or 'parquet').
        node = getattr(config, "model", None)
        node_config = getattr(node, "config", None)
        if node_config is not None and node_config.get("file_format") is None:
            node_config["file_format"] = self.config.credentials.table_format
        return super().pre_model_hook(config)

    def _build_spark_relation_list(self, row_list: Any, relation_info_func: Callable[[Any], Any]) -> List[Any]:
        # Through Iceberg's SparkSessionCatalog, SHOW TABLE EXTENDED reports Iceberg tables as "Provider: hive";
        # only the table_type property tells. dbt-spark would otherwise drop and re-create them (losing history)
        # instead of an atomic CREATE OR REPLACE.
        # A branch's image table (see partialcow.branch.image.publish_image_table) is the model's read-only view
        # of the branch to dbt: never incremental, dropped (unregistered) and rebuilt with the model.
        relations = super()._build_spark_relation_list(row_list, relation_info_func)
        return [
            r.incorporate(type=RelationType.View) if IMAGE_OF_PROPERTY in (r.information or "")
            else r.incorporate(is_iceberg=True) if "table_type=iceberg" in (r.information or "").lower()
            else r
            for r in relations
        ]

    @available
    def partialcow_sql_literal(self, value: Any) -> str:
        """A seed value as a Spark SQL literal (see macros/seed.sql)."""
        return sql_literal(value)

    @property
    def default_python_submission_method(self) -> str:
        return "session"

    @property
    def python_submission_helpers(self) -> Dict[str, Type[PythonJobHelper]]:
        return {"session": SessionPythonJobHelper}

    def generate_python_submission_response(self, submission_result: Any) -> AdapterResponse:
        return AdapterResponse(_message="OK")
