"""DeltaRsTable against delta-rs as the independent reader (no Spark).

Each test builds a small Delta table with ``deltalake.write_deltalake``, writes replacement files with plain
pyarrow (not the page engine), commits through ``DeltaRsTable`` and checks the result with a fresh
``DeltaTable``: snapshot rows against an oracle computed in Python, version numbers, time travel, history,
and the raw add actions in the log.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import struct
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from deltalake.schema import Field as DeltaField  # noqa: E402

from partialcow.table.base import FileReplacement, Table  # noqa: E402
from partialcow.table.delta import STATS_STRING_PREFIX, DeltaRsTable  # noqa: E402
from partialcow.exceptions import (  # noqa: E402
    CommitConflictError,
    CommitError,
    CommitStateUnknownError,
    UnsupportedTableFeatureError,
)
from partialcow.metrics import WriteMetrics  # noqa: E402

UTC = dt.timezone.utc
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("day", pa.date32()),
        ("score", pa.float64()),
    ]
)


def batch(ids: range | list[int], *, tag: str = "v0") -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": ids,
            "name": [None if i % 4 == 3 else f"{tag}-name-{i}" for i in ids],
            "amount": [decimal.Decimal(i * 100 + 7) / 100 for i in ids],
            "ts": [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i, microseconds=i * 1001) for i in ids],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in ids],
            "score": [float(i) / 3 for i in ids],
        },
        schema=SCHEMA,
    )


def make_table(root: Path, files: int = 2, rows: int = 6, **kwargs: Any) -> Path:
    for f in range(files):
        write_deltalake(str(root), batch(range(f * rows, (f + 1) * rows)), mode="append", **kwargs)
    return root


def rows_by_id(table: pa.Table) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in table.to_pylist()}


def live_rows(root: Path, version: int | None = None) -> dict[int, dict[str, Any]]:
    return rows_by_id(DeltaTable(str(root), version=version).to_pyarrow_table())


def log_entry(root: Path, version: int) -> list[dict[str, Any]]:
    text = (root / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def log_snapshot(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "_delta_log").iterdir())}


def log_live_paths(root: Path, version: int | None = None) -> set[str]:
    """Live paths by replaying the JSON log ourselves (tests never create checkpoints)."""
    live: set[str] = set()
    for entry in sorted((root / "_delta_log").glob("*.json")):
        if version is not None and int(entry.stem) > version:
            break
        for action in log_entry(root, int(entry.stem)):
            if "add" in action:
                live.add(action["add"]["path"])
            elif "remove" in action:
                live.discard(action["remove"]["path"])
    return live


def rewrite(root: Path, path: str, update: dict[int, str], *, name: str | None = None) -> str:
    """Read live file ``path`` with pyarrow, set ``name`` of the given ids, write a new file; return its path."""
    from urllib.parse import unquote

    table = pq.read_table(root / unquote(path))
    names = [update.get(i, n) for i, n in zip(table["id"].to_pylist(), table["name"].to_pylist())]
    table = table.set_column(table.schema.get_field_index("name"), "name", pa.array(names, pa.string()))
    new = name or f"pcow-{uuid.uuid4().hex}.parquet"
    (root / new).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / new)
    return new


def log_spelling(root: Path, path: str) -> str:
    """The log's spelling (relative to the root, URL-encoded) of live file ``path`` (absolute, as ``live_files``
    names it): the form commits report and error messages quote."""
    rel = str(Path(path).relative_to(root))
    return next(p for p in log_live_paths(root) if unquote(p) == rel)


def file_with_id(table: DeltaRsTable, key: int, version: int | None = None) -> str:
    """The live file holding ``key``, spelled as the log spells it (``replace_files`` takes either spelling)."""
    uri = table.table_uri
    root = Path("/" + unquote(uri.split(":", 1)[1].lstrip("/")) if uri.startswith("file:") else uri)
    for f in table.live_files(version):
        if key in pq.read_table(f.path, columns=["id"])["id"].to_pylist():
            return log_spelling(root, f.path) if version is None else str(Path(f.path).relative_to(root))
    raise AssertionError(f"id {key} not found")


# ------------------------------------------------------------------ basic replace


def test_implements_protocol(tmp_path: Path) -> None:
    assert isinstance(DeltaRsTable(str(make_table(tmp_path))), Table)


def test_live_files_match_the_log_and_footers(tmp_path: Path) -> None:
    root = make_table(tmp_path, files=3, rows=4)
    c = DeltaRsTable(str(root))
    files = c.live_files()
    # absolute paths (as the index records them), decoded from the log's relative, URL-encoded spelling
    assert {f.path for f in files} == {f"{root}/{unquote(p)}" for p in log_live_paths(root)}
    for f in files:
        assert f.record_count == pq.read_metadata(f.path).num_rows
        assert f.file_size_bytes == Path(f.path).stat().st_size
        assert f.deletes is None
    assert len(c.live_files(0)) == 1


def test_replace_one_file(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    base = c.current_version()
    before = live_rows(root)
    old = file_with_id(c, 2)
    new = rewrite(root, old, {2: "changed-2", 4: "changed-4"})
    metrics = WriteMetrics(rows_updated=2, files_rewritten=1, pages_rewritten=3, pages_copied=9)

    result = c.replace_files(FileReplacement(base_version=base, removed=[old], added=[new], metrics=metrics))

    assert (result.version, result.previous_version) == (base + 1, base)
    assert result.removed == (old,) and result.added == (new,)
    fresh = DeltaTable(str(root))
    assert fresh.version() == base + 1
    expected = {i: dict(r, name={2: "changed-2", 4: "changed-4"}.get(i, r["name"])) for i, r in before.items()}
    assert rows_by_id(fresh.to_pyarrow_table()) == expected
    assert log_live_paths(root) == (log_live_paths(root, base) - {old}) | {new}
    assert live_rows(root, base) == before  # time travel still reads the replaced file

    [commit] = fresh.history(1)
    assert commit["userMetadata"] == "partial_cow_upsert"
    assert commit["partialcow.operation"] == "partial_cow_upsert"
    assert commit["readVersion"] == base
    assert commit["operationMetrics"]["partialcow.rows_updated"] == "2"
    assert commit["operationMetrics"]["partialcow.pages_rewritten"] == "3"
    assert commit["operationMetrics"]["partialcow.pages_copied"] == "9"
    [remove] = [a["remove"] for a in log_entry(root, base + 1) if "remove" in a]
    assert remove["path"] == old and remove["dataChange"] is True


def test_custom_operation_and_absolute_paths(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(f"file://{root}")
    old = file_with_id(c, 1)
    new = rewrite(root, old, {1: "x"})
    c.replace_files(
        FileReplacement(
            base_version=c.current_version(),
            removed=[str(root / old)],
            added=[str(root / new)],
            operation="partial_cow_delete",
        )
    )
    assert DeltaTable(str(root)).history(1)[0]["userMetadata"] == "partial_cow_delete"
    assert live_rows(root)[1]["name"] == "x"


def test_paths_that_need_encoding_round_trip(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    old = file_with_id(c, 0)
    new = rewrite(root, old, {0: "first"}, name="sub dir/a%b=1.parquet")
    result = c.replace_files(FileReplacement(base_version=1, removed=[old], added=[new]))
    live = log_live_paths(root)
    encoded = next(p for p in live if p.startswith("sub"))
    assert encoded != new  # the log holds the URL-encoded form
    assert result.added == (encoded,)
    assert live_rows(root)[0]["name"] == "first"
    # the log form and the file-system form both name the file to remove next time
    newer = rewrite(root, encoded, {0: "second"})
    c.replace_files(FileReplacement(base_version=2, removed=[encoded], added=[newer]))
    assert live_rows(root)[0]["name"] == "second"
    assert live_rows(root, 2)[0]["name"] == "first"


def test_a_file_the_log_spells_outside_ascii_is_refused_not_kept_live_twice(tmp_path: Path) -> None:
    """Regression: delta-spark logs a path such as ``p=é/part-0.parquet`` as it is; delta-rs wrote its remove
    percent-encoded, which matched no add, so the old file stayed live beside its rewrite and every row of it was
    read twice. Refused, with the table as it was (the log edited by hand to spell the file as delta-spark does)."""
    root = make_table(tmp_path, files=1, rows=4)
    entry = root / "_delta_log" / f"{0:020d}.json"
    actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
    for action in actions:
        if "add" in action:
            (root / unquote(action["add"]["path"])).rename(root / "dé.parquet")
            action["add"]["path"] = "dé.parquet"
    entry.write_text("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in actions))
    c = DeltaRsTable(str(root))
    base = c.current_version()
    before = rows_by_id(DeltaTable(str(root)).to_pyarrow_table())
    new = rewrite(root, "dé.parquet", {1: "x"})
    with pytest.raises(UnsupportedTableFeatureError, match="outside ASCII.*Spark session with Delta"):
        c.replace_files(FileReplacement(base_version=base, removed=["dé.parquet"], added=[new]))
    assert DeltaTable(str(root)).version() == base
    assert rows_by_id(DeltaTable(str(root)).to_pyarrow_table()) == before
    assert not (root / new).exists()


def test_pure_insert_and_pure_delete(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    pq.write_table(batch([100, 101]), root / "inserted.parquet")
    c.replace_files(FileReplacement(base_version=1, added=["inserted.parquet"]))
    assert set(live_rows(root)) == set(range(12)) | {100, 101}
    victim = file_with_id(c, 0)
    c.replace_files(FileReplacement(base_version=2, removed=[victim]))
    assert set(live_rows(root)) == set(range(6, 12)) | {100, 101}


# ------------------------------------------------------------------ stats


def add_action(root: Path, version: int, path_suffix: str) -> dict[str, Any]:
    return next(a["add"] for a in log_entry(root, version) if "add" in a and a["add"]["path"].endswith(path_suffix))


def test_stats_match_an_independent_computation(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    old = file_with_id(c, 0)
    new = rewrite(root, old, {0: "aaa", 5: None})  # a null more, a new minimum string
    c.replace_files(FileReplacement(base_version=1, removed=[old], added=[new]))
    add = add_action(root, 2, new)
    stats = json.loads(add["stats"])
    data = pq.read_table(root / new)

    assert add["size"] == (root / new).stat().st_size and add["dataChange"] is True
    assert stats["numRecords"] == data.num_rows
    assert stats["nullCount"] == {name: data[name].null_count for name in data.column_names}
    for name in ("id", "name", "day"):
        mm = pc.min_max(data[name]).as_py()
        lo, hi = mm["min"], mm["max"]
        if isinstance(lo, dt.date):
            lo, hi = lo.isoformat(), hi.isoformat()
        assert (stats["minValues"][name], stats["maxValues"][name]) == (lo, hi), name
    # decimals are exact JSON numbers, not rounded floats
    mm = pc.min_max(data["amount"]).as_py()
    raw = add["stats"]
    assert f'"amount":{mm["min"]}' in raw and f'"amount":{mm["max"]}' in raw
    # timestamps keep milliseconds: the min rounds down and the max rounds up, so both stay bounds
    mm = pc.min_max(data["ts"]).as_py()
    lo = dt.datetime.fromisoformat(stats["minValues"]["ts"].replace("Z", "+00:00"))
    hi = dt.datetime.fromisoformat(stats["maxValues"]["ts"].replace("Z", "+00:00"))
    assert lo <= mm["min"] < lo + dt.timedelta(milliseconds=1)
    assert hi - dt.timedelta(milliseconds=1) < mm["max"] <= hi
    assert mm["max"].microsecond % 1000 and hi > mm["max"]  # the fixture really has sub-millisecond values
    # float bounds are left out (footers drop NaN, Spark orders NaN above every number)
    assert "score" not in stats["minValues"] and "score" not in stats["maxValues"]

    # delta-rs reads our stats back as the same values
    dr = pa.table(DeltaTable(str(root)).get_add_actions(flatten=True)).to_pylist()
    mine = next(r for r in dr if r["path"] == new)
    assert mine["num_records"] == data.num_rows and mine["min.id"] == pc.min(data["id"]).as_py()


def test_long_strings_keep_safe_bounds(tmp_path: Path) -> None:
    root = tmp_path / "t"
    long_a = "m" * 40 + "a"
    long_z = "z" * 31 + "\U0010ffff" * 5  # U+10FFFF cannot be outgrown: Delta keeps those characters
    write_deltalake(str(root), pa.table({"id": [1, 2], "s": [long_a, "b"]}))
    c = DeltaRsTable(str(root))
    pq.write_table(pa.table({"id": [1, 2, 3], "s": [long_a, "b", long_z]}), root / "n.parquet")
    c.replace_files(FileReplacement(base_version=0, removed=[c.live_files()[0].path], added=["n.parquet"]))
    stats = json.loads(add_action(root, 1, "n.parquet")["stats"])
    lo, hi = stats["minValues"]["s"], stats["maxValues"]["s"]
    assert len(lo) <= STATS_STRING_PREFIX
    values = [long_a, "b", long_z]
    assert lo <= min(values) and hi >= max(values)
    assert hi.encode() >= max(v.encode() for v in values)  # byte order, as Spark compares strings
    assert hi == long_z  # within twice the prefix, as delta-spark's truncateMaxStringAgg keeps it


def test_stats_honour_num_indexed_cols(tmp_path: Path) -> None:
    root = make_table(tmp_path, files=1, configuration={"delta.dataSkippingNumIndexedCols": "2"})
    c = DeltaRsTable(str(root))
    old = c.live_files()[0].path
    new = rewrite(root, old, {1: "q"})
    c.replace_files(FileReplacement(base_version=0, removed=[old], added=[new]))
    stats = json.loads(add_action(root, 1, new)["stats"])
    assert set(stats["nullCount"]) == {"id", "name"}


# ------------------------------------------------------------------ validation


def test_file_not_live_at_base_is_rejected_and_new_file_deleted(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    newest = file_with_id(c, 8)  # added in version 1
    new = rewrite(root, newest, {8: "x"})
    before = log_snapshot(root)
    with pytest.raises(CommitConflictError, match="not live"):
        c.replace_files(FileReplacement(base_version=0, removed=[newest], added=[new]))
    assert log_snapshot(root) == before and not (root / new).exists()


def test_added_file_already_live_is_never_deleted(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    live = c.live_files()[0].path
    with pytest.raises(CommitError, match="already live"):
        c.replace_files(FileReplacement(base_version=1, added=[live]))
    assert (root / live).exists() and len(live_rows(root)) == 12


def test_schema_mismatch_is_rejected(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    # a nullable column may be missing (an older file's copy, see test_a_rewritten_file_older_than_an_added_column);
    # a required one may not
    strict = tmp_path / "strict"
    required = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    write_deltalake(str(strict), pa.table({"id": [1], "name": ["a"]}, schema=required))
    pq.write_table(pa.table({"name": ["b"]}), strict / "missing.parquet")
    with pytest.raises(CommitError, match="lacks columns"):
        DeltaRsTable(str(strict)).replace_files(FileReplacement(base_version=0, added=["missing.parquet"]))
    assert DeltaTable(str(strict)).version() == 0 and not (strict / "missing.parquet").exists()
    pq.write_table(batch([50]).set_column(0, "id", pa.array(["50"])), root / "wrongtype.parquet")
    with pytest.raises(CommitError, match="column id"):
        c.replace_files(FileReplacement(base_version=1, added=["wrongtype.parquet"]))
    assert c.current_version() == 1
    assert not (root / "wrongtype.parquet").exists()


def test_unreadable_new_file_is_a_typed_error(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    (root / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(CommitError, match="junk.parquet"):
        DeltaRsTable(str(root)).replace_files(FileReplacement(base_version=1, added=["junk.parquet"]))
    assert DeltaTable(str(root)).version() == 1


def test_extra_columns_are_rejected(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    pq.write_table(batch([50]).append_column("surprise", pa.array([1])), root / "extra.parquet")
    with pytest.raises(CommitError, match="surprise"):
        DeltaRsTable(str(root)).replace_files(FileReplacement(base_version=1, added=["extra.parquet"]))


def test_nulls_in_a_not_null_column_are_rejected(tmp_path: Path) -> None:
    root = tmp_path / "t"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    write_deltalake(str(root), pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    c = DeltaRsTable(str(root))
    pq.write_table(pa.table({"id": [1, None], "v": ["a", "b"]}), root / "n.parquet")
    with pytest.raises(CommitError, match="NOT NULL column id"):
        c.replace_files(FileReplacement(base_version=0, removed=[c.live_files()[0].path], added=["n.parquet"]))
    assert c.current_version() == 0


def test_added_file_outside_the_table_is_rejected_and_kept(tmp_path: Path) -> None:
    root = make_table(tmp_path / "t")
    outside = tmp_path / "elsewhere.parquet"
    pq.write_table(batch([1]), outside)
    with pytest.raises(CommitError, match="outside"):
        DeltaRsTable(str(root)).replace_files(FileReplacement(base_version=1, added=[str(outside)]))
    assert outside.exists()


# ------------------------------------------------------------------ concurrency


def test_same_file_replaced_twice_second_conflicts(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    a, b = DeltaRsTable(str(root)), DeltaRsTable(str(root))
    old = file_with_id(a, 3)
    new_a = rewrite(root, old, {3: "from-a"})
    new_b = rewrite(root, old, {3: "from-b", 1: "from-b"})
    a.replace_files(FileReplacement(base_version=1, removed=[old], added=[new_a]))
    with pytest.raises(CommitConflictError) as err:
        b.replace_files(FileReplacement(base_version=1, removed=[old], added=[new_b]))
    assert old in str(err.value) and "version 2" in str(err.value)
    assert not (root / new_b).exists()
    assert DeltaTable(str(root)).version() == 2
    rows = live_rows(root)
    assert rows[3]["name"] == "from-a" and rows[1]["name"] == batch([1])["name"][0].as_py()
    assert len(rows) == 12


def test_different_files_both_commit(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    a, b = DeltaRsTable(str(root)), DeltaRsTable(str(root))
    file_a, file_b = file_with_id(a, 0), file_with_id(a, 6)
    new_a = rewrite(root, file_a, {0: "a"})
    new_b = rewrite(root, file_b, {6: "b"})
    ra = a.replace_files(FileReplacement(base_version=1, removed=[file_a], added=[new_a]))
    rb = b.replace_files(FileReplacement(base_version=1, removed=[file_b], added=[new_b]))
    assert (ra.version, rb.version, rb.previous_version) == (2, 3, 2)
    rows = live_rows(root)
    assert (rows[0]["name"], rows[6]["name"], len(rows)) == ("a", "b", 12)


def test_concurrent_blind_append_is_rebased(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    old = file_with_id(c, 2)
    new = rewrite(root, old, {2: "mine"})
    write_deltalake(str(root), batch([200, 201]), mode="append")  # lands as version 2
    result = c.replace_files(
        FileReplacement(base_version=1, removed=[old], added=[new], conflict_keys={"id": [2]})
    )
    assert result.version == 3
    rows = live_rows(root)
    assert set(rows) == set(range(12)) | {200, 201} and rows[2]["name"] == "mine"


def test_concurrent_append_of_a_key_we_write_conflicts(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    pq.write_table(batch([300], tag="mine"), root / "ins.parquet")
    write_deltalake(str(root), batch([300], tag="theirs"), mode="append")
    with pytest.raises(CommitConflictError, match="holding keys"):
        c.replace_files(FileReplacement(base_version=1, added=["ins.parquet"], conflict_keys={"id": [300]}))
    assert not (root / "ins.parquet").exists()
    assert [r["name"] for r in live_rows(root).values() if r["id"] == 300] == ["theirs-name-300"]


def test_key_appended_then_removed_concurrently_is_no_conflict(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c, other = DeltaRsTable(str(root)), DeltaRsTable(str(root))
    write_deltalake(str(root), batch([300], tag="theirs"), mode="append")  # version 2
    gone = file_with_id(other, 300)
    other.replace_files(FileReplacement(base_version=2, removed=[gone]))  # version 3
    (root / gone).unlink()  # as a vacuum would: the key check must not need it
    pq.write_table(batch([300], tag="mine"), root / "ins.parquet")
    result = c.replace_files(FileReplacement(base_version=1, added=["ins.parquet"], conflict_keys={"id": [300]}))
    assert result.version == 4
    assert [r["name"] for r in live_rows(root).values() if r["id"] == 300] == ["mine-name-300"]


def test_composite_conflict_keys_match_as_tuples(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    write_deltalake(str(root), batch([400]), mode="append")
    pq.write_table(batch([401]), root / "ins.parquet")
    other_name = batch([400])["name"][0].as_py()
    # same id, other name: not our composite key -> rebased
    c.replace_files(
        FileReplacement(base_version=1, added=["ins.parquet"], conflict_keys={"id": [400], "name": ["nope"]})
    )
    pq.write_table(batch([402]), root / "ins2.parquet")
    with pytest.raises(CommitConflictError):
        c.replace_files(
            FileReplacement(base_version=1, added=["ins2.parquet"], conflict_keys={"id": [400], "name": [other_name]})
        )


def test_concurrent_metadata_change_conflicts(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    old = file_with_id(c, 0)
    new = rewrite(root, old, {0: "x"})
    DeltaTable(str(root)).alter.set_table_properties({"delta.logRetentionDuration": "interval 40 days"})
    with pytest.raises(CommitConflictError, match="metaData"):
        c.replace_files(FileReplacement(base_version=1, removed=[old], added=[new]))
    assert not (root / new).exists() and DeltaTable(str(root)).version() == 2


def test_lost_race_for_the_version_is_rechecked_and_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    old = file_with_id(c, 0)
    new = rewrite(root, old, {0: "mine"})
    original = DeltaTable.create_write_transaction
    calls = []

    def racing(self: DeltaTable, *args: Any, **kwargs: Any) -> None:
        if not calls:  # another writer takes version 2 between our check and our write
            write_deltalake(str(root), batch([500]), mode="append")
        calls.append(self.version())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", racing)
    result = c.replace_files(FileReplacement(base_version=1, removed=[old], added=[new]))
    assert calls == [1, 2] and result.version == 3
    rows = live_rows(root)
    assert set(rows) == set(range(12)) | {500} and rows[0]["name"] == "mine"


def test_lost_race_to_a_conflicting_writer_fails_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_table(tmp_path)
    c, other = DeltaRsTable(str(root)), DeltaRsTable(str(root))
    old = file_with_id(c, 0)
    mine, theirs = rewrite(root, old, {0: "mine"}), rewrite(root, old, {0: "theirs"})
    original = DeltaTable.create_write_transaction
    state = {"raced": False}

    def racing(self: DeltaTable, *args: Any, **kwargs: Any) -> None:
        if not state["raced"]:
            state["raced"] = True
            other.replace_files(FileReplacement(base_version=1, removed=[old], added=[theirs]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", racing)
    with pytest.raises(CommitConflictError, match="removed by concurrent version 2"):
        c.replace_files(FileReplacement(base_version=1, removed=[old], added=[mine]))
    assert not (root / mine).exists() and (root / theirs).exists()
    assert live_rows(root)[0]["name"] == "theirs" and DeltaTable(str(root)).version() == 2


def test_unknown_outcome_keeps_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    old = file_with_id(c, 0)
    new = rewrite(root, old, {0: "x"})
    before = log_snapshot(root)

    def broken(self: DeltaTable, *args: Any, **kwargs: Any) -> None:
        raise OSError("connection reset while writing the log")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", broken)
    with pytest.raises(CommitStateUnknownError, match="kept"):
        c.replace_files(FileReplacement(base_version=1, removed=[old], added=[new]))
    assert (root / new).exists() and log_snapshot(root) == before


def test_failure_after_the_log_write_is_recognised_as_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    old = file_with_id(c, 0)
    new = rewrite(root, old, {0: "x"})
    original = DeltaTable.create_write_transaction

    def checkpoint_fails(self: DeltaTable, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        raise OSError("post-commit checkpoint failed")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", checkpoint_fails)
    result = c.replace_files(FileReplacement(base_version=1, removed=[old], added=[new]))
    assert result.version == 2 and (root / new).exists() and live_rows(root)[0]["name"] == "x"


# ------------------------------------------------------------------ partitions


def test_partitioned_table_new_file_inherits_partition(tmp_path: Path) -> None:
    root = tmp_path / "p"
    data = pa.table({"id": [1, 2, 3, 4], "region": ["eu west", "eu west", "us", "us"], "v": ["a", "b", "c", "d"]})
    write_deltalake(str(root), data, partition_by=["region"])
    c = DeltaRsTable(str(root))
    eu = log_spelling(root, next(f.path for f in c.live_files() if "region=eu" in f.path))
    t = pq.read_table(root / unquote(eu))
    assert "region" not in t.column_names  # delta-rs keeps partition values out of the files
    values = ["A" if i == 1 else v for i, v in zip(t["id"].to_pylist(), t["v"].to_pylist())]
    t = t.set_column(t.column_names.index("v"), "v", pa.array(values))
    new_rel = str(Path(unquote(eu)).parent / "pcow-new.parquet")
    pq.write_table(t, root / new_rel)
    c.replace_files(FileReplacement(base_version=0, removed=[eu], added=[new_rel]))
    got = sorted(DeltaTable(str(root)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    expected = sorted(data.to_pylist(), key=lambda r: r["id"])
    expected[0]["v"] = "A"
    assert [{k: r[k] for k in ("id", "region", "v")} for r in got] == expected
    add = next(a["add"] for a in log_entry(root, 1) if "add" in a)
    assert add["partitionValues"] == {"region": "eu west"}


def _timestamp_partitioned(root: Path, spellings: list[str]) -> list[str]:
    """A Delta table of one row per spelling, each in a file of partition ``ts`` 10:00 UTC spelled so in the log."""
    ts = dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc)
    for i, _ in enumerate(spellings):
        write_deltalake(str(root), pa.table({"id": [i], "ts": pa.array([ts], pa.timestamp("us", tz="UTC"))}),
                        partition_by=["ts"], mode="append")
    for i, spelling in enumerate(spellings):
        entry = root / "_delta_log" / f"{i:020d}.json"
        entry.write_text(entry.read_text().replace('"ts":"2024-01-01 10:00:00.000000"', f'"ts":"{spelling}"'))
    return [log_spelling(root, f.path) for f in DeltaRsTable(str(root)).live_files()]


@pytest.mark.parametrize(
    "spelling", ["2024-01-01 10:00:00.000000", "2024-01-01 10:00:00", "2024-01-01T10:00:00.000000Z"]
)
def test_a_timestamp_partition_value_keeps_the_logs_spelling(tmp_path: Path, spelling: str) -> None:
    """Regression: a rewritten file's timestamp partition value was spelled anew. A value without a zone is read by
    delta-spark in its session's time zone and by delta-rs in UTC (the typed value we had), so neither spelling we
    could make up reads as before for both: spelled in UTC, the rows of a table delta-spark wrote in a New York
    session moved by five hours for delta-spark. The new file takes the log's own spelling of the partition."""
    root = tmp_path / "p"
    (old,) = _timestamp_partitioned(root, [spelling])
    new_rel = str(Path(unquote(old)).parent / "pcow-new.parquet")
    pq.write_table(pq.read_table(root / unquote(old)), root / new_rel)
    DeltaRsTable(str(root)).replace_files(FileReplacement(base_version=0, removed=[old], added=[new_rel]))
    add = next(a["add"] for a in log_entry(root, 1) if "add" in a)
    assert add["partitionValues"] == {"ts": spelling}
    ts = dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc)
    assert DeltaTable(str(root)).to_pyarrow_table().column("ts").to_pylist() == [ts]


def test_a_timestamp_partition_spelled_with_and_without_a_zone_is_written_in_utc(tmp_path: Path) -> None:
    """Files of one delta-rs partition spelled both ways mean two instants to delta-spark in a session away from UTC:
    the log cannot say which one the rows had, so the new file takes the one spelling that reads alike everywhere."""
    root = tmp_path / "p"
    old = _timestamp_partitioned(root, ["2024-01-01 10:00:00", "2024-01-01T10:00:00Z"])
    first = sorted(old)[0]
    new_rel = str(Path(unquote(first)).parent / "pcow-new.parquet")
    pq.write_table(pq.read_table(root / unquote(first)), root / new_rel)
    DeltaRsTable(str(root)).replace_files(FileReplacement(base_version=1, removed=[first], added=[new_rel]))
    add = next(a["add"] for a in log_entry(root, 2) if "add" in a)
    assert add["partitionValues"] == {"ts": "2024-01-01T10:00:00.000000Z"}


def test_partitioned_table_refuses_mixed_partitions(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write_deltalake(str(root), pa.table({"id": [1, 2], "region": ["eu", "us"]}), partition_by=["region"])
    c = DeltaRsTable(str(root))
    pq.write_table(pa.table({"id": [1, 2]}), root / "both.parquet")
    with pytest.raises(CommitError, match="one partition"):
        both = [f.path for f in c.live_files()]
        c.replace_files(FileReplacement(base_version=0, removed=both, added=["both.parquet"]))
    assert c.current_version() == 0


# ------------------------------------------------------------------ refused features


def append_commit(root: Path, *actions: dict[str, Any]) -> None:
    """Write the next log version by hand (features delta-rs cannot create), as another engine would."""
    version = DeltaTable(str(root)).version() + 1
    lines = [{"commitInfo": {"operation": "SET TBLPROPERTIES", "timestamp": 0}}, *actions]
    (root / "_delta_log" / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in lines) + "\n")


def metadata_with(
    root: Path, *, configuration: dict[str, str] | None = None, field_meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    meta = next(a["metaData"] for a in log_entry(root, 0) if "metaData" in a)
    meta = json.loads(json.dumps(meta))
    meta["configuration"] = {**meta.get("configuration", {}), **(configuration or {})}
    if field_meta:
        schema = json.loads(meta["schemaString"])
        schema["fields"][1]["metadata"] = field_meta
        meta["schemaString"] = json.dumps(schema)
    return {"metaData": meta}


def protocol_with(writer: list[str], reader: list[str] | None = None) -> dict[str, Any]:
    if reader is None:
        return {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": writer}}
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": reader, "writerFeatures": writer}
    return {"protocol": protocol}


def _z85(data: bytes) -> str:
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        out += [alphabet[(value // 85**k) % 85] for k in range(4, -1, -1)]
    return "".join(out)


def inline_deletion_vector(rows: list[int]) -> dict[str, Any]:
    """An inline DV (PROTOCOL.md: magic, then a one-bucket portable RoaringBitmapArray), Z85-encoded."""
    roaring = struct.pack("<IIHHI", 12346, 1, 0, len(rows) - 1, 16) + b"".join(struct.pack("<H", r) for r in rows)
    data = struct.pack("<iqi", 1681511377, 1, 0) + roaring
    assert len(data) % 4 == 0
    return {"storageType": "i", "pathOrInlineDv": _z85(data), "sizeInBytes": len(data), "cardinality": len(rows)}


def setup_cdf(root: Path) -> None:
    append_commit(root, metadata_with(root, configuration={"delta.enableChangeDataFeed": "true"}))


def setup_append_only(root: Path) -> None:
    append_commit(root, metadata_with(root, configuration={"delta.appendOnly": "true"}))


def setup_constraint(root: Path) -> None:
    DeltaTable(str(root)).alter.add_constraint({"id_positive": "id >= 0"})


def setup_column_mapping(root: Path) -> None:
    config = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "6"}
    meta = metadata_with(root, configuration=config)
    schema = json.loads(meta["metaData"]["schemaString"])
    for i, field in enumerate(schema["fields"], start=1):
        field["metadata"] = {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": f"col-{uuid.uuid4()}"}
    meta["metaData"]["schemaString"] = json.dumps(schema)
    append_commit(root, protocol_with(["columnMapping"], ["columnMapping"]), meta)


def setup_row_tracking(root: Path) -> None:
    append_commit(
        root,
        protocol_with(["rowTracking", "domainMetadata"]),
        metadata_with(root, configuration={"delta.enableRowTracking": "true"}),
    )


def setup_domain_metadata(root: Path) -> None:
    append_commit(root, protocol_with(["domainMetadata"]))


def setup_identity(root: Path) -> None:
    append_commit(
        root,
        protocol_with(["identityColumns"]),
        metadata_with(root, field_meta={"delta.identity.start": 1, "delta.identity.step": 1}),
    )


def setup_generated(root: Path) -> None:
    append_commit(
        root, protocol_with(["generatedColumns"]), metadata_with(root, field_meta={"delta.generationExpression": "'x'"})
    )


def setup_invariant(root: Path) -> None:
    append_commit(
        root,
        protocol_with(["invariants"]),
        metadata_with(
            root, field_meta={"delta.invariants": json.dumps({"expression": {"expression": "name IS NOT NULL"}})}
        ),
    )


def setup_unknown_writer_feature(root: Path) -> None:
    append_commit(root, protocol_with(["inCommitTimestamp"]))


def setup_deletion_vector(root: Path) -> None:
    add = next(a["add"] for a in log_entry(root, 0) if "add" in a)
    remove = {
        "path": add["path"],
        "dataChange": True,
        "deletionTimestamp": 1,
        "extendedFileMetadata": True,
        "size": add["size"],
        "partitionValues": {},
    }
    append_commit(
        root,
        protocol_with(["deletionVectors"], ["deletionVectors"]),
        {"remove": remove},
        {"add": dict(add, deletionVector=inline_deletion_vector([0, 2]))},
    )


REFUSALS = {
    "change data feed": setup_cdf,
    "delta.appendOnly": setup_append_only,
    "check constraint delta.constraints.id_positive": setup_constraint,
    "column mapping": setup_column_mapping,
    "row tracking": setup_row_tracking,
    "writer feature domainMetadata": setup_domain_metadata,
    "identity column name": setup_identity,
    "generated column name": setup_generated,
    "invariant on column name": setup_invariant,
    "writer feature inCommitTimestamp": setup_unknown_writer_feature,
    "deletion vector on replaced file": setup_deletion_vector,
}


@pytest.mark.parametrize("feature", list(REFUSALS))
def test_refused_feature_leaves_the_log_unchanged(tmp_path: Path, feature: str) -> None:
    root = make_table(tmp_path, files=1)
    REFUSALS[feature](root)
    c = DeltaRsTable(str(root))
    base = c.current_version()
    old = c.live_files()[0].path
    pq.write_table(pq.read_table(root / old), root / "new.parquet")
    before = log_snapshot(root)
    with pytest.raises(UnsupportedTableFeatureError) as err:
        c.replace_files(FileReplacement(base_version=base, removed=[old], added=["new.parquet"]))
    assert feature in str(err.value) and str(root) in str(err.value)
    assert log_snapshot(root) == before and not (root / "new.parquet").exists()


def test_deletion_vector_elsewhere_does_not_block_other_files(tmp_path: Path) -> None:
    root = make_table(tmp_path, files=1)
    setup_deletion_vector(root)
    c = DeltaRsTable(str(root))
    pq.write_table(batch([70, 71]), root / "ins.parquet")
    result = c.replace_files(FileReplacement(base_version=c.current_version(), added=["ins.parquet"]))
    entry = log_entry(root, result.version)
    assert [a["add"]["path"] for a in entry if "add" in a] == ["ins.parquet"]


def test_append_only_allows_pure_inserts(tmp_path: Path) -> None:
    root = make_table(tmp_path, files=1)
    setup_append_only(root)
    c = DeltaRsTable(str(root))
    pq.write_table(batch([90]), root / "ins.parquet")
    c.replace_files(FileReplacement(base_version=c.current_version(), added=["ins.parquet"]))
    assert 90 in live_rows(root)


# ------------------------------------------------------------------ object-store code path


def test_object_store_code_path_on_a_local_table(tmp_path: Path) -> None:
    """Remote tables go through delta-rs's storage handler for log reads, stats, stat() and cleanup."""
    root = make_table(tmp_path)
    a, b = DeltaRsTable(str(root)), DeltaRsTable(str(root))
    for c in (a, b):
        c._local_root = None  # what a s3:// or abfss:// URI gets
    old = file_with_id(a, 3)
    new_a, new_b = rewrite(root, old, {3: "a"}), rewrite(root, old, {3: "b"})
    a.replace_files(FileReplacement(base_version=1, removed=[old], added=[new_a]))
    stats = json.loads(add_action(root, 2, new_a)["stats"])
    assert stats["numRecords"] == 6 and stats["minValues"]["id"] == 0
    with pytest.raises(CommitConflictError):
        b.replace_files(FileReplacement(base_version=1, removed=[old], added=[str(root) + "/" + new_b]))
    assert not (root / new_b).exists() and live_rows(root)[3]["name"] == "a"


# ------------------------------------------------------------------ stats used for skipping by a reader


def test_delta_rs_query_finds_boundary_rows(tmp_path: Path) -> None:
    """delta-rs's SQL engine prunes files by our stats: a bound that is not a bound would lose these rows."""
    from deltalake import QueryBuilder

    root = make_table(tmp_path)
    c = DeltaRsTable(str(root))
    old = file_with_id(c, 0)
    long_name = "~" * 50  # above every other name; its max gets truncated
    new = rewrite(root, old, {1: long_name})
    c.replace_files(FileReplacement(base_version=1, removed=[old], added=[new]))
    data = pq.read_table(root / new)
    ts_max = max(data["ts"].to_pylist())
    assert ts_max.microsecond % 1000  # sub-millisecond: a truncated max would exclude it
    queries = {
        f"name = '{long_name}'": [1],
        f"ts = arrow_cast('{ts_max.isoformat()}', 'Timestamp(Microsecond, Some(\"UTC\"))')": [5],
        f"ts >= arrow_cast('{ts_max.isoformat()}', 'Timestamp(Microsecond, Some(\"UTC\"))')": list(range(5, 12)),
        "id = 5": [5],
        "day = DATE '2024-01-06'": [5],
    }
    table = DeltaTable(str(root))
    for where, expected in queries.items():
        got = QueryBuilder().register("t", table).execute(f"SELECT id FROM t WHERE {where}").read_all()
        assert sorted(pa.table(got)["id"].to_pylist()) == expected, where


def test_gives_up_after_max_attempts_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_table(tmp_path)
    c = DeltaRsTable(str(root), max_attempts=3)
    old = file_with_id(c, 0)
    new = rewrite(root, old, {0: "x"})
    original = DeltaTable.create_write_transaction
    appended = []

    def always_beaten(self: DeltaTable, *args: Any, **kwargs: Any) -> None:
        appended.append(600 + len(appended))
        write_deltalake(str(root), batch([appended[-1]]), mode="append")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", always_beaten)
    with pytest.raises(CommitConflictError, match="after 3 attempts"):
        c.replace_files(FileReplacement(base_version=1, removed=[old], added=[new]))
    assert len(appended) == 3 and not (root / new).exists()
    rows = live_rows(root)
    assert set(rows) == set(range(12)) | set(appended) and rows[0]["name"] != "x"


def test_a_rewritten_file_older_than_an_added_column_commits(tmp_path: Path) -> None:
    """Regression: after the table gained a nullable column (``ALTER TABLE ... ADD COLUMNS``), replacing a file
    written before it with a copy that keeps the file's columns (what the page engine writes) failed with "new file
    ... lacks columns"; delta-spark's committer already accepted it. Readers read the column as null."""
    root = make_table(tmp_path, files=1)
    DeltaTable(str(root)).alter.add_columns(DeltaField("note", "string", nullable=True))
    c = DeltaRsTable(str(root))
    old = file_with_id(c, 2)
    new = rewrite(root, old, {2: "changed-2"})
    assert "note" not in pq.read_schema(root / new).names
    c.replace_files(FileReplacement(base_version=c.current_version(), removed=[old], added=[new]))
    got = rows_by_id(DeltaTable(str(root)).to_pyarrow_table())
    assert got[2]["name"] == "changed-2" and got[2]["note"] is None and len(got) == 6
