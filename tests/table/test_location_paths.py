"""Locations and URIs as local paths (no Spark).

Iceberg writes a file's location unescaped (Hadoop ``Path``): ``file:/wh/t/data/ts=2024-01-01T10%3A00%3A00/f.parquet``
names a folder whose name holds ``%3A`` (Iceberg escaped the partition value itself), in a warehouse whose path may
hold a space, an accent or ``#``. Delta's log, delta-rs and ``java.net.URI`` write percent-encoded URIs. Regression
cases: locations were decoded as URIs (a partition folder or a warehouse path that does not exist) and cut at ``#``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from partialcow.exceptions import CommitError, ConfigurationError
from partialcow.spark import tables
from partialcow.table.iceberg import IcebergTable
from partialcow.table.paths import local_path, uri_local_path

# (location as Iceberg spells it, the path on disk)
LOCATIONS = [
    ("file:/wh/t/data/ts=2024-01-01T10%3A00%3A00/f.parquet", "/wh/t/data/ts=2024-01-01T10%3A00%3A00/f.parquet"),
    ("file:///wh/t/data/city=S%C3%A3o+Paulo/f.parquet", "/wh/t/data/city=S%C3%A3o+Paulo/f.parquet"),
    ("file:/wh/t/data/city=a%2Fb/f.parquet", "/wh/t/data/city=a%2Fb/f.parquet"),
    ("file:/Users/John Doe/wh/t", "/Users/John Doe/wh/t"),
    ("file:/tmp/café #2/t?x", "/tmp/café #2/t?x"),
    ("file://localhost/tmp/a%20b#c", "/tmp/a%20b#c"),
    ("/tmp/a%20b #c", "/tmp/a%20b #c"),
]

# (URI as java.net.URI or delta-rs spells it, the path on disk)
URIS = [
    ("file:///tmp/a%20b%23c%C3%A9/t", "/tmp/a b#cé/t"),
    ("file:/tmp/x%2541", "/tmp/x%41"),
    ("file://localhost/tmp/a%20b", "/tmp/a b"),
    ("/tmp/a%20b", "/tmp/a%20b"),  # a plain path is a path: its "%" are part of the name
]


@pytest.mark.parametrize(("location", "path"), LOCATIONS)
def test_a_location_is_taken_as_spelled(location: str, path: str) -> None:
    assert local_path(location) == path
    assert tables.local_path(location) == path
    assert tables.table_root(location, "iceberg") == path


@pytest.mark.parametrize(("uri", "path"), URIS)
def test_a_uri_is_decoded(uri: str, path: str) -> None:
    assert uri_local_path(uri) == path
    assert tables.uri_local_path(uri) == path
    assert tables.table_root(uri, "delta") == path


@pytest.mark.parametrize("remote", ["s3://bucket/t", "s3a://bucket/t#x", "file://otherhost/t"])
def test_other_file_systems_are_not_local(remote: str) -> None:
    assert local_path(remote) is None and uri_local_path(remote) is None
    with pytest.raises(ConfigurationError, match="local or mounted file system"):
        tables.local_path(remote)
    with pytest.raises(ConfigurationError, match="local or mounted file system"):
        tables.uri_local_path(remote)


def test_relative_paths_stay_relative() -> None:
    assert local_path("data/f.parquet") is None  # the row index joins it to the table root (Delta)
    assert tables.local_path("data/f.parquet") == "data/f.parquet"


def _iceberg_file(folder: Path, *, field_ids: bool) -> Path:
    folder.mkdir(parents=True)
    meta = {b"PARQUET:field_id": b"1"} if field_ids else None
    path = folder / "f.parquet"
    pq.write_table(pa.table([pa.array([1, 2], pa.int64())], schema=pa.schema([pa.field("id", pa.int64(),
                                                                                          metadata=meta)])), path)
    return path


@pytest.mark.parametrize("warehouse", ["John Doe #1", "café%20 #x"])
def test_field_ids_are_checked_in_a_warehouse_with_odd_characters(tmp_path: Path, warehouse: str) -> None:
    """Regression: the new file's location went to pyarrow's ``FileSystem.from_uri``, which refused a space or an
    accent (a CommitError on every write of the table), decoded ``%3A`` and cut the path at ``#``."""
    table = IcebergTable(SimpleNamespace(_jvm=None), "db.t")  # the check reads the file only
    data = tmp_path / warehouse / "t" / "data" / "ts=2024-01-01T10%3A00%3A00"
    good = _iceberg_file(data, field_ids=True)
    table._check_field_ids(f"file:{good}", {1})
    # the file was read, not merely found: one without field ids is refused by name
    bad = _iceberg_file(data.with_name("ts=2024-01-02T10%3A00%3A00"), field_ids=False)
    with pytest.raises(CommitError, match="no Parquet field id on column 'id'"):
        table._check_field_ids(f"file:{bad}", {1})


def test_a_delta_table_named_by_a_relative_path_has_an_absolute_root(tmp_path, monkeypatch) -> None:
    """Regression: a relative path stayed relative as the table's data folder while recovery compared it with
    absolute referenced paths, so a dead write's committed files looked unreferenced."""
    from partialcow.spark.tables import delta_root

    monkeypatch.chdir(tmp_path)
    assert delta_root(None, "data/events") == str(tmp_path / "data" / "events")  # type: ignore[arg-type]
