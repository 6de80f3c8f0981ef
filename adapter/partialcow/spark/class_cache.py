"""Class-data sharing for the driver JVM: a fresh process maps the classes an earlier process loaded.

Every ``dbt run`` starts a driver JVM that loads some 15,000 classes (Spark, Hive's metastore client, Iceberg or
Delta) from jar files, verifying and parsing each one: seconds of every process, the same work each time. The JVM
can write the classes it loaded into an archive when it exits (``-XX:ArchiveClassesAtExit``, JDK 13+) and map such
an archive when it starts (``-XX:SharedArchiveFile``). One session's JVM writes the archive of its set of jars;
the sessions after it map it.

**Only a complete archive is ever used.** A truncated archive does not make the JVM fall back: it crashes at start
(SIGBUS). So a writing JVM gets files of its own (``<key>.<token>.dump.jsa`` and its log), and a later session start
promotes the archive to ``<key>.jsa`` (an atomic rename) only when the log says the dump finished and the file holds
every byte the log announced. One dump per key runs at a time (``<key>.claim``; a claim older than
:data:`STALE_DUMP_SECONDS` is taken over, and a second dump that finishes later is discarded).

**Only a cache that outlives a process gets an archive.** Writing one costs the writing process more than the
archive saves it (while it runs, and at exit, when the JVM writes the archive). The first session of a key only
leaves a mark (``<key>.seen``); the second, finding the mark, writes the archive; the third maps it. A container
started from a clean cache every time never pays for a dump it could not reuse.

**An archive that does not fit is the JVM's to refuse.** It checks the JVM build and the class path itself and then
starts without the archive (its warning is silenced by ``-Xlog:cds*=off``). The key still covers the
Java binary, Spark's jars and the session's jars, so that a changed set gets an archive of its own.

**Dumps that never come are not retried for ever.** Where JVMs are killed before they write (a container runtime
that ends the process group at exit), two unfinished dumps of a key stop further tries until they are a day old; a
session that maps its archive sweeps what sessions of other keys left more than a day ago.

The archives live in ``<cache>/jvm/`` (``$XDG_CACHE_HOME/partialcow``, else ``~/.cache/partialcow``; or
``$PARTIALCOW_CLASS_CACHE_DIR``), about 160 MB each; the :data:`KEEP` most recently used stay.
``PARTIALCOW_CLASS_CACHE=0`` (or the profile's ``class_cache: false``) turns it off, and so does any class-sharing
option of the user's own (in the session's Java options or ``JAVA_TOOL_OPTIONS``-like variables) and a non-empty
folder on the driver's class path (``SPARK_CONF_DIR``, ``spark.driver.extraClassPath``), with which the JVM writes
no archive.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "KEEP",
    "STALE_DUMP_SECONDS",
    "archive_key",
    "class_cache_folder",
    "describe",
    "discard",
    "driver_class_sharing_options",
    "java_feature_version",
]

# Archives kept per cache folder (Iceberg and Delta sessions, and a jar upgrade, each have their own).
KEEP = 3
# A claim this old belongs to a JVM that died before writing its archive (or runs that long): another may write one.
STALE_DUMP_SECONDS = 3600.0
# Dynamic archives exist since Java 13; Spark 3.5 runs on 8, 11 and 17, and only 17 is tried with them here.
_MIN_JAVA = 17
# Free space a new dump needs (an archive is ~160 MB; never fill a nearly full disk with one).
_MIN_FREE_BYTES = 2 << 30

# A dump's files with no finished log after this long belong to a JVM that died (or never started).
_ORPHAN_SECONDS = 86400.0
# Dumps of a key that never finished after which no other is tried until they are a day old.
_FAILED_DUMPS = 2
_ARCHIVE_NAME = re.compile(r"[0-9a-f]{16}\.jsa")
_WRITTEN = re.compile(r"Written dynamic archive .* (\d+) bytes total\]")
_USER_OPTIONS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare", "-XX:+AutoCreateSharedArchive")


def class_cache_folder() -> Path:
    """Where the archives live: ``$PARTIALCOW_CLASS_CACHE_DIR``, else ``jvm/`` in our cache folder.

    >>> class_cache_folder().name if "PARTIALCOW_CLASS_CACHE_DIR" not in os.environ else "jvm"
    'jvm'
    """
    from partialcow.spark.jars import cache_dir

    configured = os.environ.get("PARTIALCOW_CLASS_CACHE_DIR")
    return Path(configured) if configured else cache_dir() / "jvm"


def _file_identity(path: str | Path) -> list[object]:
    try:
        real = os.path.realpath(path)
        stat = os.stat(real)
        return [real, stat.st_size, stat.st_mtime_ns]
    except OSError:
        return [str(path), None, None]


def _java_binary() -> str:
    # spark-submit's choice: $JAVA_HOME/bin/java, else `java` on the PATH
    home = os.environ.get("JAVA_HOME")
    if home:
        return os.path.join(home, "bin", "java")
    return shutil.which("java") or "java"


def java_feature_version(java: str | None = None) -> int | None:
    """The feature version (8, 11, 17, ...) of the Java that spark-submit starts, from its home's ``release`` file;
    None when that cannot be told (then no class-sharing option is passed: Java 8 refuses ``-Xlog`` at start).

    >>> java_feature_version("/nonexistent/bin/java") is None
    True
    """
    home = Path(os.path.realpath(java or _java_binary())).parent.parent
    try:
        text = (home / "release").read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r'^JAVA_VERSION="(\d+)(?:\.(\d+))?', text, re.MULTILINE)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # "1.8.0_392" is Java 8


def archive_key(conf: Mapping[str, str]) -> str:
    """A name for the archive of a session with ``conf``: the Java binary, Spark's jars and the session's class path.

    >>> key = archive_key({"spark.jars": "/nonexistent/a.jar"})
    >>> len(key), key == archive_key({"spark.jars": "/nonexistent/a.jar"}), key == archive_key({})
    (16, True, False)
    """
    from partialcow.spark.jars import pyspark_jars_dir

    spark_jars = pyspark_jars_dir()
    inputs = {
        "java": _file_identity(_java_binary()),
        "spark_jars": sorted(p.name for p in spark_jars.glob("*.jar")) if spark_jars.is_dir() else [],
        "jars": [_file_identity(j) for j in conf.get("spark.jars", "").split(",") if j],
        "packages": conf.get("spark.jars.packages", ""),
        "class_path": conf.get("spark.driver.extraClassPath", ""),
        "python": sys.version_info[:2],
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def _finished_size(log: Path) -> int | None:
    """The archive size the dump's log announces once it is written, None while it is not (or never will be)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    found = _WRITTEN.findall(text)
    return int(found[-1]) if found else None


def _unlink(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _promote(folder: Path, key: str) -> bool:
    """Move a finished dump to ``<key>.jsa`` and release the claim; True when that archive exists."""
    final = folder / f"{key}.jsa"
    for log in folder.glob(f"{key}.*.dump.log"):
        dump = log.with_suffix(".jsa")
        size = _finished_size(log)
        if size is None:
            if time.time() - log.stat().st_mtime > _ORPHAN_SECONDS:
                _unlink(log, dump)
            continue
        try:
            complete = dump.stat().st_size >= size
        except OSError:
            complete = False
        if complete and not final.exists():
            with contextlib.suppress(FileNotFoundError):  # another session promoted it first
                # on disk before it is named: a machine that stops right after the rename must not leave a short file
                with dump.open("rb") as handle:
                    os.fsync(handle.fileno())
                os.replace(dump, final)
        _unlink(log, dump)
    if final.exists():
        _unlink(folder / f"{key}.claim")
        return True
    return False


def _claim_dump(folder: Path, key: str) -> str | None:
    """Reserve this session's JVM as the one that writes ``key``'s archive: a name for its files, or None.

    None when another JVM is writing it, when the folder has not yet shown that it outlives a process (the first
    session of a key only leaves a mark: a container that starts from a clean cache every time never pays for a
    dump it cannot reuse), or when the disk is nearly full.
    """
    seen = folder / f"{key}.seen"
    if not seen.exists():
        seen.touch()
        return None
    now = time.time()
    unfinished = [log for log in folder.glob(f"{key}.*.dump.log")
                  if now - log.stat().st_mtime > STALE_DUMP_SECONDS and _finished_size(log) is None]
    if len(unfinished) >= _FAILED_DUMPS:
        return None  # JVMs of this machine end before they write (a container killed at exit): retried a day later
    claim = folder / f"{key}.claim"
    try:
        if time.time() - claim.stat().st_mtime < STALE_DUMP_SECONDS:
            return None  # a JVM is running with it, and writes the archive when it exits
        _unlink(claim)
    except FileNotFoundError:
        pass
    if shutil.disk_usage(folder).free < _MIN_FREE_BYTES:
        return None
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return None  # a session starting at the same moment claimed it
    return f"{key}.{os.getpid()}-{time.time_ns()}.dump"


def _evict(folder: Path, keep: int) -> None:
    archives = [p for p in folder.glob("*.jsa") if _ARCHIVE_NAME.fullmatch(p.name)]
    archives.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[keep:]:
        _unlink(old, old.with_suffix(".seen"))  # a JVM that mapped the archive keeps its mapping
    # what sessions of other keys (an older set of jars, another Java) left: dumps never promoted, claims, marks
    now = time.time()
    for path in folder.glob("*.*"):
        leftover = ".dump." in path.name or path.suffix in (".claim", ".seen")
        with contextlib.suppress(OSError):
            if leftover and now - path.stat().st_mtime > _ORPHAN_SECONDS and not (
                    folder / f"{path.name.split('.')[0]}.jsa").exists():
                _unlink(path)


def _not_used() -> str | None:
    """Why no archive is used on this machine (switched off, or a Java without them), None when they are."""
    if os.environ.get("PARTIALCOW_CLASS_CACHE", "1") == "0":
        return "off (PARTIALCOW_CLASS_CACHE=0)"
    version = java_feature_version()
    if (version or 0) < _MIN_JAVA:
        java = f"Java {version}" if version else "a Java of unknown version"
        return f"not used: {java} (class-sharing archives are used from Java {_MIN_JAVA})"
    return None


def driver_class_sharing_options(
    conf: Mapping[str, str], *, folder: Path | None = None, keep: int = KEEP
) -> str:
    """The driver JVM options for a session with ``conf``: map the finished archive, or write one at exit.

    Returns ``""`` when sharing is off, the user set class-sharing options of their own, the cache folder is not
    writable, the folder has not outlived a process yet, or another session is writing this key's archive.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> driver_class_sharing_options({}, folder=folder)  # the first session leaves a mark
    ''
    >>> "-XX:ArchiveClassesAtExit=" in driver_class_sharing_options({}, folder=folder)  # the second writes
    True
    >>> driver_class_sharing_options({}, folder=folder)  # while it runs, others do without
    ''
    """
    if _not_used() is not None:
        return ""
    if any(option in text for text in _java_option_texts(conf) for option in _USER_OPTIONS):
        return ""
    if _directory_on_class_path(conf):
        return ""
    folder = folder or class_cache_folder()
    if any(c in str(folder) for c in ' :"\''):
        # Spark splits the Java options at spaces and -Xlog its file name at colons: such a folder is not used
        return ""
    key = archive_key(conf)
    # -Xlog:cds*=off: the JVM's class-sharing warnings (a refused archive, classes it cannot archive) would
    # otherwise be printed on dbt's output, some of them after dbt has exited
    # (and a JVM that an archive crashes writes its report here, not into the dbt project it runs in)
    quiet = f"-Xlog:cds*=off -XX:ErrorFile={folder / 'hs_err_pid%p.log'}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if _promote(folder, key):
            archive = folder / f"{key}.jsa"
            os.utime(archive)
            _evict(folder, keep)
            return f"-XX:SharedArchiveFile={archive} {quiet}"
        name = _claim_dump(folder, key)
    except OSError:
        return ""
    if name is None:
        return ""
    dump, log = folder / f"{name}.jsa", folder / f"{name}.log"
    return f"-XX:ArchiveClassesAtExit={dump} {quiet} -Xlog:cds+dynamic=info:file={log}"


def _java_option_texts(conf: Mapping[str, str]) -> list[str]:
    """Everywhere a user's JVM options come from: the session's settings and the variables every JVM reads."""
    return [conf.get("spark.driver.extraJavaOptions", ""), conf.get("spark.driver.defaultJavaOptions", ""),
            *(os.environ.get(v, "") for v in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"))]


def _directory_on_class_path(conf: Mapping[str, str]) -> bool:
    """Whether a non-empty folder is on the driver's class path (Spark's configuration folder, the user's extra
    class path): the JVM refuses to write an archive then, and says so on the terminal after dbt has exited."""
    from partialcow.spark.jars import pyspark_jars_dir

    spark_home = os.environ.get("SPARK_HOME")
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(spark_home or str(pyspark_jars_dir().parent), "conf")
    entries = [conf_dir, *conf.get("spark.driver.extraClassPath", "").split(os.pathsep)]
    for entry in filter(None, entries):
        with contextlib.suppress(OSError):
            if os.path.isdir(entry) and any(os.scandir(entry)):
                return True
    return False


def discard(options: str) -> None:
    """Give up the archive (or the dump) that ``options`` of :func:`driver_class_sharing_options` named, after a JVM
    could not start with them: a damaged archive crashes every JVM that maps it, so it must not stay.

    >>> import tempfile
    >>> archive = Path(tempfile.mkdtemp()) / "0123456789abcdef.jsa"
    >>> _ = archive.write_bytes(b"short")
    >>> discard(f"-XX:SharedArchiveFile={archive} -Xlog:cds*=off")
    >>> archive.exists()
    False
    """
    for option in options.split():
        for flag in ("-XX:SharedArchiveFile=", "-XX:ArchiveClassesAtExit="):
            if option.startswith(flag):
                path = Path(option[len(flag):])
                # a dump's claim too: its JVM never ran, so no other session needs to wait an hour for it
                _unlink(path, path.with_suffix(".log"), path.parent / f"{path.name.split('.')[0]}.claim")


def describe(folder: Path | None = None) -> str:
    """One line on the class cache for ``partialcow doctor``: whether it is used here, and what it holds.

    >>> import tempfile
    >>> describe(Path(tempfile.mkdtemp())).split(": ")[0] in ("on", "off", "not used")
    True
    """
    folder = folder or class_cache_folder()
    reason = _not_used()
    if reason is not None:
        return reason
    archives = [p for p in folder.glob("*.jsa") if _ARCHIVE_NAME.fullmatch(p.name)] if folder.is_dir() else []
    size = sum(p.stat().st_size for p in archives) >> 20
    return (f"on: {len(archives)} archive(s), {size} MB in {folder} (profile class_cache: false or "
            "PARTIALCOW_CLASS_CACHE=0 turns it off)")
