"""Profile fields and connections of the ``partialcow`` adapter: an embedded SparkSession, created by us.

dbt-spark's ``session`` method builds its session with ``SparkSession.builder...getOrCreate()`` on every
statement; static settings (jars, catalogs, the warehouse) only take effect in whichever call creates the
session. So ``open`` creates it first, from the profile, and dbt-spark's calls then reuse it.

A fresh ``dbt run`` creates the adapter before it parses the project, and parses before it opens a connection: for
commands that run SQL, :func:`start_session_early` starts the session in a background thread at that point, so the
JVM starts while dbt parses (a scheduled job passing ``--vars`` parses in full every time), and ``open`` waits for
it. ``PARTIALCOW_EARLY_SESSION=0`` turns that off. At the end of such a process :func:`skip_final_collection` spares
the interpreter's last garbage collection over dbt's parsed project.
"""

from __future__ import annotations

import atexit
import gc
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.connections import SparkConnectionManager, SparkConnectionMethod, SparkCredentials
from dbt_common.dataclass_schema import ValidationError
from dbt_common.exceptions import DbtRuntimeError

from partialcow.exceptions import MetastoreInUseError, PartialCowError
from partialcow.formats import TABLE_FORMATS

if TYPE_CHECKING:
    from partialcow.spark.session import SessionSettings

_LOGGER = AdapterLogger("partialcow")


@dataclass
class PartialcowCredentials(SparkCredentials):
    """The profile. Only ``schema`` is required; everything else has an embedded-Spark default.

    ``warehouse`` is where tables and the embedded metastore live (relative paths are resolved against the dbt
    project folder); ``table_format`` is the default ``file_format`` of every model that sets none;
    ``spark_config`` entries override our Spark settings; ``class_cache: false`` stops the driver JVM from
    sharing loaded classes across processes (:mod:`partialcow.spark.class_cache`).
    """

    method: SparkConnectionMethod = SparkConnectionMethod.SESSION  # type: ignore[assignment]
    host: str | None = "localhost"
    table_format: str = "iceberg"
    warehouse: str = "warehouse"
    master: str = "local[*]"
    iceberg_runtime: str = "auto"
    delta_jars: list[str] = field(default_factory=list)
    spark_config: dict[str, Any] = field(default_factory=dict)
    class_cache: bool = True

    def __post_init__(self) -> None:
        # ValidationError, not DbtRuntimeError: dbt reports a profile's validation error by its message, and the
        # text of a DbtRuntimeError would add a nested "Runtime Error" to it
        if self.method != SparkConnectionMethod.SESSION:
            raise ValidationError(
                f"partialcow runs an embedded Spark: profile `method` must be `session`, not `{self.method}`"
            )
        if self.table_format not in TABLE_FORMATS:
            raise ValidationError(
                f"Unknown table_format `{self.table_format}` in profile: use one of {', '.join(TABLE_FORMATS)}"
            )
        super().__post_init__()
        self.spark_config = {str(k): str(v) for k, v in self.spark_config.items()}

    @property
    def type(self) -> str:
        return "partialcow"

    def session_settings(self) -> SessionSettings:
        """The profile as the embedded session's typed settings (dbt-spark's ``server_side_parameters`` included)."""
        from partialcow.spark.session import SessionSettings

        return SessionSettings(
            table_format=self.table_format,  # type: ignore[arg-type]
            warehouse=self.warehouse,
            master=self.master,
            extra={**self.server_side_parameters, **self.spark_config},
            iceberg_runtime=self.iceberg_runtime,
            delta_jars=tuple(self.delta_jars),
            class_cache=self.class_cache,
        )

    @property
    def unique_field(self) -> str:
        return f"{self.master}:{self.warehouse}"

    def _connection_keys(self) -> tuple[str, ...]:
        return ("method", "master", "table_format", "warehouse", "schema", "iceberg_runtime")


class PartialcowConnectionManager(SparkConnectionManager):
    TYPE = "partialcow"

    # The session each profile opened (key: ``unique_field``) and the settings it was opened with: dbt opens a
    # connection several times per process, and Python entry points ask for the session too; none of them resolves
    # the jars and settings again while the same settings' session runs.
    _sessions: ClassVar[dict[str, tuple[SessionSettings, Any]]] = {}

    @contextmanager
    def exception_handler(self, sql: str) -> Iterator[None]:
        """dbt-spark's handler, except that a dbt error passes as it is: dbt-spark wraps every exception into a new
        ``DbtRuntimeError(str(exc))``, and the text of a dbt error starts with "Runtime Error", so an error raised
        while opening the connection (a missing Iceberg runtime) was shown wrapped three times."""
        try:
            with super().exception_handler(sql):
                try:
                    yield
                except PartialCowError as exc:
                    raise DbtRuntimeError(str(exc)) from None
        except DbtRuntimeError as wrapped:
            if isinstance(wrapped.__context__, DbtRuntimeError):
                raise wrapped.__context__ from None
            raise

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        if connection.state == ConnectionState.OPEN:
            return connection
        cls._profile_session(connection.credentials)
        return super().open(connection)

    @classmethod
    def _profile_session(cls, credentials: PartialcowCredentials) -> Any:
        """The running session of the profile's settings, else the one started early, else a new one. One thread
        at a time: dbt's threads open their connections at once, and only one of them may start the session."""
        from pyspark import SparkContext

        settings = credentials.session_settings()
        with _open_lock:
            known = cls._sessions.get(credentials.unique_field)
            active = SparkContext._active_spark_context
            if known is not None and known[0] == settings and active is not None and known[1].sparkContext is active:
                return known[1]
            session = _early_session(credentials, settings)
            if session is None:
                session = configured_session(credentials)
            cls._sessions[credentials.unique_field] = (settings, session)
            return session

    def running_session(self) -> Any | None:
        """The profile's SparkSession if it runs in this process, else None (nothing is started)."""
        from pyspark import SparkContext

        known = type(self)._sessions.get(self.profile.credentials.unique_field)
        active = SparkContext._active_spark_context
        return known[1] if known is not None and active is not None and known[1].sparkContext is active else None

    def spark_session(self) -> Any:
        """The SparkSession of this thread's dbt connection, bound to the calling thread.

        Adapter methods that use Spark from Python (branch operations, ``ref()`` on a branch) call this instead of
        ``SparkSession.builder.getOrCreate()``: a run-operation may call them before any SQL statement opened dbt's
        connection, and a bare ``getOrCreate()`` would then start a session without the profile's catalog,
        extensions and warehouse (a wrong catalog, a stray ``spark-warehouse/`` folder, answers about another
        metastore). Opening the connection here creates the profile's session; a session that runs with other
        static settings is refused.
        """
        from partialcow.table.java import bind_to_current_thread

        connection = self.get_if_exists()
        if connection is None:
            raise DbtRuntimeError(
                "partialcow: Spark was asked for outside a dbt connection (no connection on this thread)"
            )
        connection.handle  # noqa: B018 - resolves dbt's lazy handle: open() creates or checks the session
        return bind_to_current_thread(self._profile_session(connection.credentials))


class MetastoreInUse(DbtRuntimeError):
    """The session could not start: another process kept the embedded metastore for the whole wait."""


def configured_session(credentials: PartialcowCredentials) -> Any:
    """The profile's SparkSession (created or reused), with a configuration problem as one dbt error line instead
    of a Java stack trace."""
    from partialcow.spark.session import start_session

    try:
        session = start_session(credentials.session_settings())
    except MetastoreInUseError as exc:
        raise MetastoreInUse(str(exc)) from None
    except PartialCowError as exc:
        raise DbtRuntimeError(str(exc)) from None
    from partialcow.spark.prewarm import start_prewarm

    start_prewarm(session, credentials.table_format)
    return session


# dbt commands that open a connection (``dbt ls``, ``parse``, ``deps``, ``debug``, ``docs serve`` do not)
COMMANDS_WITH_SQL = frozenset({
    "build", "clone", "compile", "freshness", "generate", "retry", "run", "run-operation", "seed", "show",
    "snapshot", "test",
})
_early: dict[str, tuple[SessionSettings, Future[Any]]] = {}
_early_lock = threading.Lock()
_open_lock = threading.Lock()


def start_session_early(credentials: PartialcowCredentials, command: str | None) -> bool:
    """Start the profile's session in a background thread when dbt ``command`` will open a connection and no
    Spark runs in this process yet; returns whether it started. A failure is kept for ``open``, which then starts
    the session itself and reports the error as it always does."""
    from pyspark import SparkContext

    if os.environ.get("PARTIALCOW_EARLY_SESSION", "1") == "0" or command not in COMMANDS_WITH_SQL:
        return False
    if SparkContext._active_spark_context is not None:
        return False
    settings = credentials.session_settings()
    future: Future[Any] = Future()
    with _early_lock:
        if credentials.unique_field in _early:
            return False
        _early[credentials.unique_field] = (settings, future)

    def start() -> None:
        began = time.monotonic()
        try:
            future.set_result(configured_session(credentials))
        except BaseException as exc:  # noqa: BLE001 - kept for open(), which starts again and reports it
            future.set_exception(exc)
            return
        _LOGGER.debug(f"partialcow: Spark session started early, while dbt parsed ({time.monotonic() - began:.1f} s)")

    threading.Thread(target=start, name="partialcow-session-start", daemon=True).start()
    return True


def _early_session(credentials: PartialcowCredentials, settings: SessionSettings) -> Any:
    """The session started early for these settings, once it runs; None when none was started, it failed or
    another session runs now. Raises ``MetastoreInUse`` when it failed for that reason."""
    from pyspark import SparkContext

    with _early_lock:
        started = _early.pop(credentials.unique_field, None)
    if started is None:
        return None
    try:
        session = started[1].result()  # waited for even when unused: never two starts at once
    except MetastoreInUse:
        raise  # it already waited for the other process: a second start would wait as long again, then fail
    except BaseException:  # noqa: BLE001 - the caller starts the session itself and reports the error
        return None
    if started[0] != settings or session.sparkContext is not SparkContext._active_spark_context:
        return None
    return session


_final_collection_skipped = False


def skip_final_collection() -> None:
    """At interpreter exit, after the exit handlers registered later than this call (Spark's, ours), move every
    object to the collector's permanent generation: the interpreter's last collection then skips the parsed project
    and the Spark proxies, whose memory the process gives back anyway. Only finalizers of objects left in reference
    cycles are skipped, which Python does not promise to run at exit; handlers registered earlier (logging's flush)
    still run."""
    global _final_collection_skipped
    if not _final_collection_skipped:
        _final_collection_skipped = True
        atexit.register(gc.freeze)
