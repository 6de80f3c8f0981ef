"""``spark_log.known_empty``: whether a Delta version holds no file, read from its checksum file (no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from partialcow.table.delta.spark_log import known_empty


def _crc(root: Path, version: int, text: str) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"{version:020d}.crc").write_text(text)


@pytest.mark.parametrize(("text", "expected"), [
    (json.dumps({"numFiles": 0, "tableSizeBytes": 0}), True),
    (json.dumps({"numFiles": 3, "tableSizeBytes": 10}), False),
    (json.dumps({"tableSizeBytes": 0}), False),  # a checksum that does not count files says nothing
    ("{not json", False),  # a torn checksum says nothing either
])
def test_known_empty_reads_the_versions_checksum(tmp_path: Path, text: str, expected: bool) -> None:
    _crc(tmp_path, 4, text)
    assert known_empty(str(tmp_path), 4) is expected
    assert known_empty(str(tmp_path), 5) is False  # no checksum for that version


def test_known_empty_takes_file_uris(tmp_path: Path) -> None:
    _crc(tmp_path, 0, json.dumps({"numFiles": 0}))
    assert known_empty(f"file://{tmp_path}/", 0) is True
