"""Python models on the ``session`` method: run the compiled model in this process, on the same SparkSession.

dbt-spark only ships Databricks submission helpers; an embedded Spark needs none of their upload/poll steps.
"""

from __future__ import annotations

from typing import Any

from dbt.adapters.base import PythonJobHelper
from dbt_common.exceptions import DbtRuntimeError


class SessionPythonJobHelper(PythonJobHelper):
    """Executes a compiled Python model with the global ``spark`` the compiled code expects."""

    def __init__(self, parsed_model: dict[str, Any], credentials: Any) -> None:
        self.model_name = parsed_model.get("name") or parsed_model.get("alias") or "<python model>"
        self.credentials = credentials

    def submit(self, compiled_code: str) -> Any:
        from partialcow.dbt_adapter.connections import configured_session
        from partialcow.table.java import bind_to_current_thread

        # the profile's session (created or checked against the profile), never a bare getOrCreate()
        spark = bind_to_current_thread(configured_session(self.credentials))
        return run_model_code(compiled_code, self.model_name, spark)


def run_model_code(compiled_code: str, model_name: str, spark: Any) -> Any:
    r"""Run a compiled Python model with ``spark`` as its global; returns what it left in ``partialcow_result``.

    The model is compiled on its own terms (``dont_inherit``): this module's ``from __future__ import annotations``
    would turn the model's annotations into strings, which breaks type-hinted pandas UDFs.

    >>> run_model_code("def f(s: int) -> int: return s\npartialcow_result = f.__annotations__", "m", None)
    {'s': <class 'int'>, 'return': <class 'int'>}
    """
    namespace: dict[str, Any] = {"spark": spark, "__name__": f"dbt_model_{model_name}"}
    try:
        exec(compile(compiled_code, f"<dbt python model {model_name}>", "exec", dont_inherit=True), namespace)
    except Exception as exc:  # the model's own error, attributed to the model
        raise DbtRuntimeError(f"Python model {model_name} failed: {type(exc).__name__}: {exc}") from exc
    return namespace.get("partialcow_result")
