"""The Jackson relocation and the choice of runtime jars (no Spark started here)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from partialcow.exceptions import JarNotFoundError
from partialcow.spark import jars

NEW = "org/apache/iceberg/shaded/com/fasterxml/jackson/"


def _jackson_inputs() -> list[Path]:
    folder = jars.pyspark_jars_dir()
    return [next(folder.glob(f"{a}-2*.jar")) for a in ("jackson-core", "jackson-databind", "jackson-annotations")]


@pytest.fixture(scope="module")
def relocated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return jars.relocate_jars(_jackson_inputs(), tmp_path_factory.mktemp("jars") / "relocated.jar")


def test_relocated_jar_holds_every_class_under_the_iceberg_package(relocated: Path) -> None:
    names = set(zipfile.ZipFile(relocated).namelist())
    assert f"{NEW}databind/ObjectMapper.class" in names
    assert f"{NEW}core/JsonFactory.class" in names
    assert f"{NEW}annotation/JsonProperty.class" in names
    # same number of classes as the inputs, minus module descriptors
    expected = {
        n.replace("com/fasterxml/jackson/", NEW)
        for jar in _jackson_inputs()
        for n in zipfile.ZipFile(jar).namelist()
        if n.endswith(".class") and not n.endswith("module-info.class")
    }
    assert {n for n in names if n.endswith(".class")} == expected
    assert not [n for n in names if n.startswith("com/") or "module-info" in n]


def test_no_relocated_class_still_references_the_old_package(relocated: Path) -> None:
    archive = zipfile.ZipFile(relocated)
    leftovers = []
    for name in archive.namelist():
        if name.endswith(".class"):
            for text in jars.class_references(archive.read(name)):
                if "com/fasterxml/jackson/" in text.replace(NEW, "") or "com.fasterxml.jackson." in text.replace(
                    NEW.replace("/", "."), ""
                ):
                    leftovers.append((name, text))
    assert leftovers == []


def test_relocation_only_changes_jackson_names() -> None:
    source = zipfile.ZipFile(_jackson_inputs()[1]).read("com/fasterxml/jackson/databind/ObjectMapper.class")
    before = jars.class_references(source)
    after = jars.class_references(jars.relocate_class(source))
    unchanged = {t for t in before if "com/fasterxml/jackson" not in t and "com.fasterxml.jackson" not in t}
    assert unchanged <= after
    assert "com/fasterxml/jackson/databind/ObjectMapper" in before
    assert f"{NEW}databind/ObjectMapper" in after
    assert len(after) == len(before)


def test_service_files_are_renamed_and_point_at_relocated_classes(relocated: Path) -> None:
    archive = zipfile.ZipFile(relocated)
    services = [n for n in archive.namelist() if n.startswith("META-INF/services/")]
    assert "META-INF/services/org.apache.iceberg.shaded.com.fasterxml.jackson.core.ObjectCodec" in services
    assert all(n.startswith("META-INF/services/org.apache.iceberg.shaded.") for n in services)
    codec = archive.read("META-INF/services/org.apache.iceberg.shaded.com.fasterxml.jackson.core.ObjectCodec")
    assert codec.decode().strip() == "org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper"


def test_licenses_are_kept(relocated: Path) -> None:
    names = zipfile.ZipFile(relocated).namelist()
    assert any(n.startswith("META-INF/jackson/jackson-databind-") and n.endswith("/LICENSE") for n in names)


@pytest.mark.skipif(shutil.which("javap") is None, reason="javap (JDK) not installed: cannot verify class files")
def test_javap_parses_relocated_classes(relocated: Path, tmp_path: Path) -> None:
    # An independent class-file parser: javap rejects a broken constant pool.
    zipfile.ZipFile(relocated).extractall(tmp_path)
    out = subprocess.run(
        ["javap", "-v", "-cp", str(tmp_path), "org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactory" in out
    assert "Lcom/fasterxml/jackson" not in out and " com/fasterxml/jackson" not in out


def test_build_is_deterministic_and_atomic(tmp_path: Path) -> None:
    inputs = _jackson_inputs()[2:]  # annotations only: small
    a = jars.relocate_jars(inputs, tmp_path / "a.jar")
    b = jars.relocate_jars(inputs, tmp_path / "b.jar")
    assert a.read_bytes() == b.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jar", "b.jar"]  # no temporary files left


def test_cache_key_follows_the_input_contents(tmp_path: Path) -> None:
    original = _jackson_inputs()[2]
    copy = tmp_path / original.name
    shutil.copy(original, copy)
    same = jars.relocated_jackson_jar([copy], folder=tmp_path)
    assert same == jars.relocated_jackson_jar([original], folder=tmp_path)
    with zipfile.ZipFile(copy, "a") as archive:
        archive.writestr("extra.txt", "changed")
    assert jars.relocated_jackson_jar([copy], folder=tmp_path) != same


def test_cache_dir_honours_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert jars.cache_dir() == tmp_path / "partialcow"
    assert jars.relocated_jackson_jar().parent == tmp_path / "partialcow"


@pytest.mark.parametrize("xdg", [None, "relative/cache"])
def test_cache_dir_without_a_home_folder_is_not_inside_the_project(monkeypatch: pytest.MonkeyPatch, xdg) -> None:
    """Regression: with HOME unset and a user id without a passwd entry (containers), ``~`` stays ``~`` and the
    cache (jars, the JVM's class archive: 160 MB) went to ``./~/.cache`` inside the dbt project."""
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(jars.os.path, "expanduser", lambda path: path)  # what Python does without a passwd entry
    folder = jars.cache_dir()
    assert folder.is_absolute() and "~" not in folder.parts and folder.name == "partialcow"


def test_auto_uses_the_wheel_plus_relocated_jackson_and_builds_it_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if jars._wheel_runtime_jar() is None:
        pytest.skip("snowpark-connect-deps-iceberg is not installed")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(jars, "_maven_reachable", lambda timeout=3.0: pytest.fail("auto must not probe Maven"))
    first = jars.resolve_iceberg_runtime("auto")
    assert first.packages == () and len(first.jars) == 2 and first.pending == (first.jars[1],)
    jars.ensure_jars(first)
    assert Path(first.jars[1]).is_file()
    again = jars.resolve_iceberg_runtime("offline")
    assert again.jars == first.jars and again.pending == () and "cached" in again.source


def test_unwritable_cache_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if jars._wheel_runtime_jar() is None:
        pytest.skip("snowpark-connect-deps-iceberg is not installed")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with pytest.raises(JarNotFoundError, match="XDG_CACHE_HOME"):
        jars.ensure_jars(jars.resolve_iceberg_runtime("offline"))


def test_offline_without_wheel_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jars, "_wheel_runtime_jar", lambda: None)
    with pytest.raises(JarNotFoundError, match="snowpark-connect-deps-iceberg"):
        jars.resolve_iceberg_runtime("offline")


def test_auto_without_wheel_and_without_network_refuses_instead_of_hanging(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jars, "_wheel_runtime_jar", lambda: None)
    monkeypatch.setattr(jars, "_maven_reachable", lambda timeout=3.0: False)
    with pytest.raises(JarNotFoundError, match="unreachable"):
        jars.resolve_iceberg_runtime("auto")
    monkeypatch.setattr(jars, "_maven_reachable", lambda timeout=3.0: True)
    assert jars.resolve_iceberg_runtime("auto").packages == (jars.ICEBERG_MAVEN,)


def test_explicit_runtime_forms(tmp_path: Path) -> None:
    jar = tmp_path / "iceberg.jar"
    jar.write_bytes(b"PK")
    assert jars.resolve_iceberg_runtime(str(jar)).jars == (str(jar),)
    assert jars.resolve_iceberg_runtime("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0").packages == (
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0",
    )
    with pytest.raises(JarNotFoundError, match="does not exist"):
        jars.resolve_iceberg_runtime(str(tmp_path / "missing.jar"))
    with pytest.raises(JarNotFoundError, match="neither"):
        jars.resolve_iceberg_runtime("sometimes")


def test_delta_jars(tmp_path: Path) -> None:
    with pytest.raises(JarNotFoundError, match="delta_jars"):
        jars.resolve_delta_jars(None)
    with pytest.raises(JarNotFoundError, match="delta_jars"):
        jars.resolve_delta_jars([])
    assert jars.resolve_delta_jars(["maven"]).packages == (jars.DELTA_MAVEN,)
    spark_jar, storage_jar = tmp_path / "delta-spark_2.12-3.3.3.jar", tmp_path / "delta-storage-3.3.3.jar"
    spark_jar.write_bytes(b"PK")
    storage_jar.write_bytes(b"PK")
    assert jars.resolve_delta_jars([str(spark_jar), str(storage_jar)]).jars == (str(spark_jar), str(storage_jar))


def test_regression_delta_4671_maven_default_is_3_3_3() -> None:
    """delta-spark 3.3.2 fails CREATE OR REPLACE (a Delta model's first build and --full-refresh) on pyspark >= 3.5.6
    (delta-io/delta#4671); 3.3.3 fixes it. The Maven default must not fall back to the broken release."""
    group, artifact, version = jars.DELTA_MAVEN.split(":")
    assert (group, artifact) == ("io.delta", "delta-spark_2.12")
    assert tuple(int(p) for p in version.split(".")) >= (3, 3, 3)
    assert jars.resolve_delta_jars(["maven"]).packages == ("io.delta:delta-spark_2.12:3.3.3",)


def _u2(data: bytes, pos: int) -> int:
    return int.from_bytes(data[pos : pos + 2], "big")


def _class_structure(data: bytes) -> tuple[str, list[str], set[tuple[str, str]], set[tuple[str, str | None, str]]]:
    """(this class, supertypes, own members, member references) of a class file: a linker's view, for the test."""
    constants: dict[int, tuple[int, bytes]] = {}
    index, pos, count = 1, 10, _u2(data, 8)
    while index < count:
        tag = data[pos]
        size = 2 + _u2(data, pos + 1) if tag == 1 else jars._CP_SIZES[tag]
        constants[index] = (tag, data[pos + 1 : pos + 1 + size])
        pos += 1 + size
        index += 2 if tag in (5, 6) else 1

    def utf8(i: int) -> str:
        return constants[i][1][2:].decode("utf-8", "replace")

    def class_name(i: int) -> str:
        return utf8(_u2(constants[i][1], 0))

    this = class_name(_u2(data, pos + 2))
    supers = [class_name(_u2(data, pos + 4))] if _u2(data, pos + 4) else []
    interfaces = _u2(data, pos + 6)
    supers += [class_name(_u2(data, pos + 8 + 2 * j)) for j in range(interfaces)]
    pos += 8 + 2 * interfaces
    members = set()
    for _ in ("fields", "methods"):
        n, pos = _u2(data, pos), pos + 2
        for _ in range(n):
            members.add((utf8(_u2(data, pos + 2)), utf8(_u2(data, pos + 4))))
            attributes, pos = _u2(data, pos + 6), pos + 8
            for _ in range(attributes):
                pos += 6 + int.from_bytes(data[pos + 2 : pos + 6], "big")
    references: set[tuple[str, str | None, str]] = set()
    for tag, body in constants.values():
        if tag in (9, 10, 11):  # field, method and interface method references
            name_and_type = constants[_u2(body, 2)][1]
            references.add((class_name(_u2(body, 0)), utf8(_u2(name_and_type, 0)), utf8(_u2(name_and_type, 2))))
        elif tag == 7:
            references.add((utf8(_u2(body, 0)).lstrip("[").removeprefix("L").removesuffix(";"), None, ""))
    return this, supers, members, references


def test_iceberg_runtime_links_against_the_relocated_jackson(tmp_path: Path) -> None:
    # Iceberg was built against a newer Jackson than pyspark's: every class and member it uses must exist in ours,
    # or a code path would fail at run time with NoClassDefFoundError / NoSuchMethodError. (Without
    # jackson-datatype-jsr310 among the inputs, Arrow's ObjectMapperFactory in the runtime would not link.)
    wheel = jars._wheel_runtime_jar()
    if wheel is None:
        pytest.skip("snowpark-connect-deps-iceberg is not installed")
    production = jars.relocate_jars(jars._jackson_inputs(), tmp_path / "production.jar")
    available: dict[str, tuple[list[str], set[tuple[str, str]]]] = {}
    archive = zipfile.ZipFile(production)
    for name in archive.namelist():
        if name.endswith(".class") and not name.startswith("META-INF/"):
            this, supers, members, _ = _class_structure(archive.read(name))
            available[this] = (supers, members)

    def resolves(owner: str, member: tuple[str, str]) -> bool | None:
        """True/False when decided inside the jar; None when the hierarchy leaves it (JDK types)."""
        if owner not in available:
            return None
        supers, members = available[owner]
        if member in members:
            return True
        outcomes = [resolves(s, member) for s in supers]
        return True if True in outcomes else (None if None in outcomes else False)

    unresolved = set()
    with zipfile.ZipFile(wheel) as runtime:
        for name in runtime.namelist():
            data = runtime.read(name) if name.endswith(".class") else b""
            if NEW.encode() not in data:
                continue
            for owner, member, descriptor in _class_structure(data)[3]:
                if not owner.startswith(NEW):
                    continue
                if member is None:
                    if owner not in available:
                        unresolved.add((owner, name))
                elif resolves(owner, (member, descriptor)) is False:
                    unresolved.add((f"{owner}.{member}{descriptor}", name))
    assert sorted(unresolved) == []


def test_a_jar_entry_check_reads_the_jar_once_per_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    jar = tmp_path / "runtime.jar"
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("a/B.class", b"x")
    opened: list[str] = []
    real = zipfile.ZipFile

    def counting(path: str, *args: object, **kwargs: object) -> zipfile.ZipFile:
        opened.append(str(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jars.zipfile, "ZipFile", counting)
    assert [jars._jar_has(jar, "a/B.class") for _ in range(3)] == [True, True, True]
    assert not jars._jar_has(jar, "a/C.class")
    assert len(opened) == 2, opened  # one read per entry asked about
    # a replaced jar (another size) is read again
    with real(jar, "w") as archive:
        archive.writestr("a/C.class", b"longer content")
    assert jars._jar_has(jar, "a/C.class") and not jars._jar_has(jar, "a/B.class")
    assert len(opened) == 4
