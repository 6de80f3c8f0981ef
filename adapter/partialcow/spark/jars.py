"""Find the JVM jars the embedded Spark needs: the Iceberg Spark runtime (offline or from Maven) and delta-spark.

Offline Iceberg comes from the PyPI wheel ``snowpark-connect-deps-iceberg``, whose official runtime jar lacks the
relocated Jackson classes it links against (``org.apache.iceberg.shaded.com.fasterxml.jackson...``). We complete it
with one extra jar: pyspark's own Jackson jars with every class moved into that package, built once into the user's
cache folder. The class files are rewritten here, in Python, by editing their constant pools: a class refers to other
classes only through CONSTANT_Utf8 strings (internal names, descriptors, signatures), so renaming those strings and
moving the entries relocates the code without touching any bytecode.

Maven is never tried unless the user asks for it, or ``auto`` finds no offline jar and Maven Central answers, so
an offline default never hangs in dependency resolution.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import socket
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from partialcow.exceptions import JarNotFoundError

__all__ = [
    "DELTA_MAVEN",
    "ICEBERG_MAVEN",
    "ICEBERG_VERSION",
    "JarSet",
    "cache_dir",
    "class_references",
    "ensure_jars",
    "pyspark_jars_dir",
    "relocate_class",
    "relocate_jars",
    "relocated_jackson_jar",
    "resolve_delta_jars",
    "resolve_iceberg_runtime",
]

ICEBERG_VERSION = "1.10.2"
# pyspark 3.5 is built with Scala 2.12; the runtime must match both Spark's minor version and its Scala.
ICEBERG_ARTIFACT = "iceberg-spark-runtime-3.5_2.12"
ICEBERG_MAVEN = f"org.apache.iceberg:{ICEBERG_ARTIFACT}:{ICEBERG_VERSION}"
# delta-spark 3.x is the line built for Spark 3.5; it pulls delta-storage transitively. 3.3.3, not 3.3.2: on
# pyspark >= 3.5.6, 3.3.2 fails CREATE OR REPLACE, REPLACE TABLE and overwrite saveAsTable ("does not support truncate
# in batch mode", delta-io/delta#4671), and a first build or --full-refresh of a Delta model is a CREATE OR REPLACE.
DELTA_MAVEN = "io.delta:delta-spark_2.12:3.3.3"
MAVEN_HOST = ("repo1.maven.org", 443)

_WHEEL_MODULE = "snowpark_connect_deps_iceberg"
_JACKSON_JARS = ("jackson-core", "jackson-databind", "jackson-annotations", "jackson-datatype-jsr310")
_OLD_INTERNAL = b"com/fasterxml/jackson/"
_OLD_DOTTED = b"com.fasterxml.jackson."
_NEW_INTERNAL = b"org/apache/iceberg/shaded/" + _OLD_INTERNAL
_NEW_DOTTED = b"org.apache.iceberg.shaded." + _OLD_DOTTED
# Bump when the rewriter's output changes, so caches built by an older version are not reused.
_RELOCATOR_VERSION = "1"
# Sizes in bytes of the constant pool entries after their tag byte, except Utf8 (tag 1, variable length).
_CP_SIZES = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # reproducible archive: same inputs give the same bytes


@dataclass(frozen=True)
class JarSet:
    """What Spark needs to load a runtime: local jar files (``spark.jars``) and/or Maven coordinates.

    ``source`` says how they were found (shown by ``partialcow doctor``); ``pending`` lists jars that still have to
    be built by :func:`ensure_jars` before the session starts.
    """

    jars: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    source: str = ""
    pending: tuple[str, ...] = ()


def cache_dir() -> Path:
    """The folder for jars we build: ``$XDG_CACHE_HOME/partialcow``, else ``~/.cache/partialcow``.

    >>> cache_dir().name
    'partialcow'
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        # no home folder (HOME unset, a user id without a passwd entry: "~" stays "~") or a relative setting: a
        # relative folder would land inside the dbt project, so a per-user folder in the temporary directory
        user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
        base = os.path.join(tempfile.gettempdir(), f"partialcow-cache-{user}")
    return Path(base) / "partialcow"


def pyspark_jars_dir() -> Path:
    """The ``jars/`` folder of the installed pyspark (the jars Spark runs with).

    >>> any(pyspark_jars_dir().glob("spark-core_*.jar"))
    True
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise JarNotFoundError("pyspark is not installed: pip install 'pyspark==3.5.*'")
    return Path(spec.origin).parent / "jars"


def _wheel_runtime_jar() -> Path | None:
    spec = importlib.util.find_spec(_WHEEL_MODULE)
    if spec is None or spec.origin is None:
        return None
    candidates = sorted((Path(spec.origin).parent / "jars").glob(f"{ICEBERG_ARTIFACT}-*.jar"))
    return candidates[-1] if candidates else None


def _jar_has(jar: Path, entry: str) -> bool:
    """Whether ``jar`` holds ``entry``, kept per version of the jar: every dbt connection resolves the runtime again,
    and reading the whole central directory of the Iceberg runtime each time was a visible part of a fresh process
    (``bench/README.md``, measurements behind code choices)."""
    stat = jar.stat()
    return _jar_has_version(str(jar), stat.st_size, stat.st_mtime_ns, entry)


@functools.lru_cache(maxsize=16)
def _jar_has_version(jar: str, size: int, mtime_ns: int, entry: str) -> bool:
    with zipfile.ZipFile(jar) as archive:
        try:
            archive.getinfo(entry)
        except KeyError:
            return False
    return True


def _jackson_inputs() -> list[Path]:
    jars_dir = pyspark_jars_dir()
    found = []
    for artifact in _JACKSON_JARS:
        # e.g. jackson-core-2.15.2.jar, not jackson-core-asl-1.9.13.jar
        matches = [
            p for p in jars_dir.glob(f"{artifact}-*.jar") if re.fullmatch(rf"{artifact}-\d[\w.\-]*\.jar", p.name)
        ]
        if not matches:
            if artifact == "jackson-datatype-jsr310":
                continue  # only used by Arrow's JSON helpers inside the runtime; the rest works without it
            raise JarNotFoundError(
                f"{artifact} jar not found in {jars_dir}: reinstall pyspark, or set iceberg_runtime to a complete "
                f"Iceberg runtime jar path or to 'maven'"
            )
        found.append(sorted(matches)[-1])
    return found


def relocated_jackson_jar(inputs: Sequence[Path] | None = None, *, folder: Path | None = None) -> Path:
    """Where the relocated Jackson jar for ``inputs`` (default: pyspark's Jackson jars) lives in the cache.

    The name carries a hash of the input jars' contents and of this rewriter's version, so a pyspark upgrade builds a
    new jar instead of reusing a stale one. Nothing is built here (see :func:`ensure_jars`).

    >>> relocated_jackson_jar().name.startswith("iceberg-jackson-")
    True
    """
    inputs = list(inputs) if inputs is not None else _jackson_inputs()
    digest = hashlib.sha256(_RELOCATOR_VERSION.encode() + _NEW_INTERNAL)
    for jar in inputs:
        digest.update(jar.name.encode())
        digest.update(hashlib.sha256(jar.read_bytes()).digest())
    version = re.sub(r"^jackson-core-|\.jar$", "", inputs[0].name) if inputs else "none"
    return (folder or cache_dir()) / f"iceberg-jackson-{version}-{digest.hexdigest()[:16]}.jar"


def resolve_iceberg_runtime(runtime: str = "auto") -> JarSet:
    """Find the Iceberg Spark runtime without building or downloading anything.

    ``runtime`` is ``auto`` (the offline wheel if installed, else Maven if Maven Central is reachable), ``offline``
    (the wheel, or an error), ``maven`` (coordinates :data:`ICEBERG_MAVEN`), Maven coordinates
    ``group:artifact:version``,
    or the path of a complete runtime jar.

    >>> resolve_iceberg_runtime("maven").packages == (ICEBERG_MAVEN,)
    True
    """
    runtime = runtime.strip()
    if runtime == "maven":
        return JarSet(packages=(ICEBERG_MAVEN,), source=f"maven {ICEBERG_MAVEN}")
    if runtime not in ("auto", "offline"):
        return _explicit_jars([runtime], what="iceberg_runtime")
    wheel_jar = _wheel_runtime_jar()
    if wheel_jar is not None:
        if _jar_has(wheel_jar, (_NEW_INTERNAL + b"databind/ObjectMapper.class").decode()):
            return JarSet(jars=(str(wheel_jar),), source=f"wheel {wheel_jar.name} (complete)")
        jackson = relocated_jackson_jar()
        built = jackson.exists()
        return JarSet(
            jars=(str(wheel_jar), str(jackson)),
            source=f"wheel {wheel_jar.name} + relocated Jackson {'(cached' if built else '(to build'}: {jackson})",
            pending=() if built else (str(jackson),),
        )
    offline_help = "pip install 'dbt-partialcow[iceberg-offline]', or set iceberg_runtime to a runtime jar path"
    if runtime == "offline":
        raise JarNotFoundError(
            f"iceberg_runtime 'offline': the wheel snowpark-connect-deps-iceberg is not installed: {offline_help}"
        )
    if not _maven_reachable():
        raise JarNotFoundError(
            f"no offline Iceberg runtime and Maven Central ({MAVEN_HOST[0]}) is unreachable: {offline_help}"
        )
    return JarSet(packages=(ICEBERG_MAVEN,), source=f"maven {ICEBERG_MAVEN} (auto: no offline jar installed)")


def resolve_delta_jars(delta_jars: Sequence[str] | None) -> JarSet:
    """The delta-spark jars from the profile's ``delta_jars``: local jar paths, Maven coordinates, or ``maven``.

    delta-spark's JVM jar is not on PyPI, so there is no offline default: without ``delta_jars`` this raises
    ``JarNotFoundError`` rather than quietly trying Maven.

    >>> resolve_delta_jars(["maven"]).packages == (DELTA_MAVEN,)
    True
    """
    if not delta_jars:
        raise JarNotFoundError(
            "table_format 'delta' in Spark needs the delta-spark jars, which are not on PyPI: set delta_jars to the "
            f"jar paths (delta-spark_2.12-3.x.jar and delta-storage-3.x.jar) or to ['maven'] to fetch {DELTA_MAVEN}"
        )
    items = [DELTA_MAVEN if item.strip() == "maven" else item for item in delta_jars]
    return _explicit_jars(items, what="delta_jars")


def _explicit_jars(items: Iterable[str], *, what: str) -> JarSet:
    jars: list[str] = []
    packages: list[str] = []
    for item in items:
        item = item.strip()
        path = Path(item).expanduser()
        if path.suffix == ".jar" or os.sep in item:
            if not path.is_file():
                raise JarNotFoundError(f"{what}: jar {item!r} does not exist: fix the path or use Maven coordinates")
            jars.append(str(path.resolve()))
        elif re.fullmatch(r"[\w.\-]+:[\w.\-]+:[\w.\-]+", item):
            packages.append(item)
        else:
            raise JarNotFoundError(
                f"{what}: {item!r} is neither a .jar path nor Maven coordinates group:artifact:version"
            )
    parts = [f"path {', '.join(jars)}"] if jars else []
    parts += [f"maven {', '.join(packages)}"] if packages else []
    return JarSet(jars=tuple(jars), packages=tuple(packages), source="; ".join(parts))


def _maven_reachable(timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection(MAVEN_HOST, timeout=timeout):
            return True
    except OSError:
        return False


def ensure_jars(jar_set: JarSet) -> JarSet:
    """Build the jars ``jar_set`` still lacks (the relocated Jackson jar) and return it with nothing pending.

    >>> ensure_jars(JarSet(jars=("/x.jar",))).pending
    ()
    """
    for pending in jar_set.pending:
        try:
            relocate_jars(_jackson_inputs(), Path(pending))
        except OSError as exc:
            raise JarNotFoundError(
                f"cannot write the relocated Jackson jar {pending} ({exc.strerror or exc}): set XDG_CACHE_HOME to a "
                "writable folder, or set iceberg_runtime to a complete Iceberg runtime jar"
            ) from exc
    return JarSet(jars=jar_set.jars, packages=jar_set.packages, source=jar_set.source.replace("(to build", "(built"))


def _rename(data: bytes) -> bytes:
    # The lookbehind keeps an already-relocated name from being relocated twice.
    data = re.sub(rb"(?<!shaded/)" + re.escape(_OLD_INTERNAL), _NEW_INTERNAL, data)
    return re.sub(rb"(?<!shaded\.)" + re.escape(_OLD_DOTTED), _NEW_DOTTED, data)


def _constant_pool(data: bytes) -> Iterable[tuple[int, int, int]]:
    """Yield (tag, start, end) of every constant pool entry of a class file."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a Java class file (bad magic number)")
    count = int.from_bytes(data[8:10], "big")
    pos, index = 10, 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            end = pos + 3 + int.from_bytes(data[pos + 1 : pos + 3], "big")
        elif tag in _CP_SIZES:
            end = pos + 1 + _CP_SIZES[tag]
        else:
            raise ValueError(f"unknown constant pool tag {tag} at byte {pos}")
        yield tag, pos, end
        # Long and Double take two constant pool slots.
        index += 2 if tag in (5, 6) else 1
        pos = end


def relocate_class(data: bytes) -> bytes:
    """Rewrite a class file so every Jackson name it uses lives under ``org.apache.iceberg.shaded``.

    Only CONSTANT_Utf8 entries change (they hold class names, descriptors, signatures and string literals); entries
    refer to each other by index, so the rest of the file is copied as is.

    >>> import zipfile
    >>> jar = next(pyspark_jars_dir().glob("jackson-annotations-2*.jar"))
    >>> data = zipfile.ZipFile(jar).read("com/fasterxml/jackson/annotation/JsonProperty.class")
    >>> shaded = "org/apache/iceberg/shaded/com/fasterxml/jackson/annotation/JsonProperty"
    >>> shaded in class_references(relocate_class(data))
    True
    """
    out = bytearray()
    copied = 0
    for tag, start, end in _constant_pool(data):
        if tag != 1:
            continue
        text = data[start + 3 : end]
        renamed = _rename(text)
        if renamed == text:
            continue
        if len(renamed) > 0xFFFF:
            raise ValueError(f"relocated constant longer than 65535 bytes at byte {start}")
        out += data[copied:start]
        out += b"\x01" + len(renamed).to_bytes(2, "big") + renamed
        copied = end
    out += data[copied:]
    return bytes(out)


def class_references(data: bytes) -> set[str]:
    """Every CONSTANT_Utf8 string of a class file (names, descriptors, literals): for checks and tests.

    >>> import zipfile
    >>> jar = next(pyspark_jars_dir().glob("jackson-annotations-2*.jar"))
    >>> "com/fasterxml/jackson/annotation/JsonProperty" in class_references(
    ...     zipfile.ZipFile(jar).read("com/fasterxml/jackson/annotation/JsonProperty.class"))
    True
    """
    return {
        data[start + 3 : end].decode("utf-8", errors="replace")
        for tag, start, end in _constant_pool(data)
        if tag == 1
    }


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_FIXED_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def relocate_jars(inputs: Sequence[Path], dest: Path) -> Path:
    """Write one jar holding the classes of ``inputs`` relocated under ``org.apache.iceberg.shaded``; atomic.

    Classes (also multi-release ``META-INF/versions/N/``) and ``META-INF/services`` files are renamed and rewritten;
    each input's LICENSE/NOTICE files are kept under ``META-INF/jackson/<jar>/``; ``module-info.class``, Maven
    metadata and the input manifests are dropped (the module descriptors name the old packages).

    >>> import tempfile
    >>> inputs = sorted(pyspark_jars_dir().glob("jackson-annotations-2*.jar"))
    >>> out = relocate_jars(inputs, Path(tempfile.mkdtemp()) / "a.jar")
    >>> shaded = "org/apache/iceberg/shaded/com/fasterxml/jackson/annotation/JsonProperty.class"
    >>> shaded in zipfile.ZipFile(out).namelist()
    True
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        seen: set[str] = set()
        with zipfile.ZipFile(tmp_name, "w") as out:
            manifest = (
                "Manifest-Version: 1.0\r\nMulti-Release: true\r\n"
                "Created-By: partialcow (Jackson relocated for Iceberg)\r\n\r\n"
            )
            out.writestr(_entry("META-INF/MANIFEST.MF"), manifest)
            for jar in inputs:
                with zipfile.ZipFile(jar) as source:
                    for info in source.infolist():
                        name = info.filename
                        if info.is_dir() or name.endswith("module-info.class") or name == "META-INF/MANIFEST.MF":
                            continue
                        if name.endswith(".class"):
                            new_name, data = _rename(name.encode()).decode(), relocate_class(source.read(info))
                        elif name.startswith("META-INF/services/"):
                            new_name, data = _rename(name.encode()).decode(), _rename(source.read(info))
                        elif name.startswith("META-INF/maven/"):
                            continue
                        elif name.startswith("META-INF/"):
                            new_name, data = f"META-INF/jackson/{jar.stem}/{name[len('META-INF/'):]}", source.read(info)
                        else:
                            continue  # no other resources in Jackson's jars; don't carry unknown files
                        if new_name in seen:
                            raise ValueError(f"two input jars both hold {new_name} (from {jar.name})")
                        seen.add(new_name)
                        out.writestr(_entry(new_name), data)
        os.chmod(tmp_name, 0o644)  # mkstemp creates 0600; the jar is shared like any cached artifact
        os.replace(tmp_name, dest)
    except BaseException:
        os.unlink(tmp_name)
        raise
    return dest
