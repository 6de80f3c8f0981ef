"""The two executor jobs of ``apply_changes`` run directly on Arrow (no Spark): ``locate_partition`` joins a task's
changes with an index bucket file and leaves them per touched file in a scratch folder; ``run_file_tasks`` rewrites
each file from its fragments and writes the inserts. Checked against hand-computed expectations and with pyarrow
reading the files written.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from partialcow.table.base import FILE_ID as INDEX_FILE_ID
from partialcow.table.base import POS as INDEX_POS
from partialcow.parquet import write_table
from partialcow.spark.rewrite_job import BUCKET, DELETE, POS, FileTask, locate_partition, run_file_tasks

KEYS = ["k1", "k2"]
TABLE = ["k1", "k2", "v"]


def index_bucket(path, rows: list[tuple[int, str, int, int]]) -> str:
    """A bucket file as the row index writes it: keys, file id, row position."""
    k1, k2, file_id, pos = zip(*rows)
    pq.write_table(pa.table({"k1": pa.array(k1, pa.int64()), "k2": pa.array(k2, pa.string()),
                             INDEX_FILE_ID: pa.array(file_id, pa.int32()), INDEX_POS: pa.array(pos, pa.int64())}), path)
    return str(path)


def changes(rows: list[tuple[int | None, str, int | None, bool]], bucket: int = 0) -> pa.RecordBatch:
    k1, k2, v, delete = zip(*rows)
    return pa.RecordBatch.from_pydict({
        "k1": pa.array(k1, pa.int64()), "k2": pa.array(k2, pa.string()), "v": pa.array(v, pa.int32()),
        DELETE: pa.array(delete), BUCKET: pa.array([bucket] * len(rows), pa.int32()),
    })


def locate(batches, buckets, scratch, keys_limit=10):
    results = [r for b in locate_partition(iter(batches), key_columns=KEYS, bucket_paths=buckets, carried=TABLE,
                                           insert_columns=TABLE, scratch=str(scratch), keys_limit=keys_limit)
               for r in b.to_pylist()]
    assert len(results) == 1
    return results[0]


def fragment(path) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(str(path))).read_all()


@pytest.fixture
def bucket_file(tmp_path):
    # file 3 holds (1,a) at 0, (2,a) at 1, (3,a) at 2; file 7 holds (1,b) at 0
    return index_bucket(tmp_path / "b00000.parquet", [(1, "a", 3, 0), (2, "a", 3, 1), (3, "a", 3, 2), (1, "b", 7, 0)])


def test_rows_are_split_by_file_with_positions_and_inserts_kept_apart(tmp_path, bucket_file):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    batch = changes([(3, "a", 30, False), (1, "a", 10, False), (1, "b", None, True), (9, "z", 90, False),
                     (8, "z", None, True)])
    result = locate([batch], {0: (bucket_file,)}, scratch)
    assert dict(zip(result["file_ids"], result["file_rows"])) == {3: 2, 7: 1}
    assert result["inserts"] == 1 and result["null_keys"] == 0 and result["repeated_keys"] == 0

    fragments = dict(zip(result["file_ids"], result["fragments"]))
    file3 = fragment(fragments[3])
    assert sorted(zip(file3[POS].to_pylist(), file3["v"].to_pylist(), file3[DELETE].to_pylist())) == [
        (0, 10, False), (2, 30, False)]
    # the bucket travels with the row: the rewrite writes the index rows of the file it writes (see write_index_rows)
    assert file3.column_names == [POS, DELETE, *TABLE, BUCKET]
    file7 = fragment(fragments[7])
    assert file7[POS].to_pylist() == [0] and file7[DELETE].to_pylist() == [True]
    # keys not in the table: (9, z) is the only insert; the delete of (8, z) is kept, flagged, for the repeat check
    assert fragment(result["inserts_file"]).to_pylist() == [{"k1": 9, "k2": "z", "v": 90, BUCKET: 0, DELETE: False},
                                                            {"k1": 8, "k2": "z", "v": None, BUCKET: 0, DELETE: True}]
    written = {result["inserts_file"], result["keys_file"], *result["fragments"]}
    assert written == {str(scratch / n) for n in os.listdir(scratch)}
    keys = fragment(result["keys_file"])
    assert sorted(zip(keys["k1"].to_pylist(), keys["k2"].to_pylist())) == [(1, "a"), (1, "b"), (3, "a"), (8, "z"), (9, "z")]


def test_keys_beyond_the_limit_are_not_kept_for_the_conflict_filter(tmp_path, bucket_file):
    result = locate([changes([(1, "a", 1, False), (2, "a", 2, False)])], {0: (bucket_file,)}, tmp_path, keys_limit=1)
    assert result["keys_file"] is None
    assert not any(n.startswith("keys-") for n in os.listdir(tmp_path))


@pytest.mark.parametrize("rows, counted, sample", [
    ([(None, "a", 1, False), (2, "a", 2, False)], "null_keys", "k1=None, k2='a'"),
    ([(2, "a", 1, False), (2, "a", 2, True), (3, "a", 3, False)], "repeated_keys", "k1=2, k2='a'"),
], ids=["null key", "repeated key"])
def test_a_bad_partition_is_counted_and_writes_nothing(tmp_path, bucket_file, rows, counted, sample):
    result = locate([changes(rows)], {0: (bucket_file,)},tmp_path)
    assert result[counted] == 1
    assert any(sample in s for s in result["samples"]), result["samples"]
    assert [n for n in os.listdir(tmp_path) if n.endswith(".arrow")] == []


def test_without_index_buckets_every_upsert_is_an_insert(tmp_path):
    result = locate([changes([(1, "a", 1, False), (2, "a", None, True)])], {}, tmp_path)
    assert result["file_ids"] == [] and result["inserts"] == 1


def rewrite_tasks(tmp_path, bucket_file, *batches):
    """Locate each batch as a task of its own (as in place: a key may reach several tasks); return the file tasks."""
    data = tmp_path / "data"
    data.mkdir()
    src = data / "f3.parquet"
    write_table(pa.table({"k1": pa.array([1, 2, 3], pa.int64()), "k2": pa.array(["a"] * 3),
                          "v": pa.array([1, 2, 3], pa.int32())}), src)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    located = [locate([changes(rows)], {0: (bucket_file,)}, scratch) for rows in batches]
    fragments = tuple(f for r in located for i, f in zip(r["file_ids"], r["fragments"]) if i == 3)
    inserts = tuple(r["inserts_file"] for r in located if r["inserts_file"])
    tasks = [FileTask(src=str(src), fragments=fragments)] if fragments else []
    tasks += [FileTask(src=None, fragments=inserts, part=p, parts=2) for p in range(2)] if inserts else []
    return tasks, data


def run(tasks, data, check_keys=tuple(KEYS)):
    schema = pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("v", pa.int32())])
    return list(run_file_tasks(iter(tasks), update_columns=["v"], moved_schema=None, insert_schema=schema,
                               data_dir=str(data), check_keys=check_keys))


def test_file_tasks_rewrite_from_fragments_and_write_inserts(tmp_path, bucket_file):
    # two locate tasks touch file 3: one updates (1,a), the other deletes (2,a); (9,z) is new
    tasks, data = rewrite_tasks(tmp_path, bucket_file, [(1, "a", 100, False), (9, "z", 90, False)], [(2, "a", None, True)])
    results = run(tasks, data, check_keys=())
    rewrite = next(r for r in results if r["kind"] == "rewrite")
    insert = next(r for r in results if r["kind"] == "insert")
    assert rewrite["src"] == str(data / "f3.parquet") and rewrite["rows_updated"] == 1 and rewrite["rows_deleted"] == 1
    assert rewrite["removed_positions"] == [1]
    assert pq.read_table(rewrite["dst"]).to_pylist() == [{"k1": 1, "k2": "a", "v": 100}, {"k1": 3, "k2": "a", "v": 3}]
    assert insert["rows"] == 1
    assert pq.read_table(insert["dst"]).to_pylist() == [{"k1": 9, "k2": "z", "v": 90}]


@pytest.mark.parametrize("batches, sample", [
    ([[(1, "a", 10, False)], [(1, "a", 11, False)]], "(k1=1, k2='a')"),
    ([[(2, "a", 10, False)], [(2, "a", None, True)]], "(k1=2, k2='a')"),
    ([[(9, "z", 90, False)], [(9, "z", 91, False)]], "(k1=9, k2='z')"),
    ([[(9, "z", 90, False)], [(9, "z", None, True)]], "(k1=9, k2='z')"),
    ([[(8, "z", None, True)], [(8, "z", None, True)]], "(k1=8, k2='z')"),
], ids=["update twice", "update and delete", "insert twice", "insert and delete", "absent key deleted twice"])
def test_keys_repeated_across_locate_tasks_are_reported_and_not_written(tmp_path, bucket_file, batches, sample):
    tasks, data = rewrite_tasks(tmp_path, bucket_file, *batches)
    results = run(tasks, data)
    repeated = [r for r in results if r["kind"] == "repeated"]
    assert len(repeated) == 1 and repeated[0]["count"] == 1 and repeated[0]["samples"] == [sample]
    # the task that found the repeat wrote nothing: every file in the folder is one another task reported (the
    # driver discards those)
    written = {r["dst"] for r in results if r["kind"] != "repeated"}
    assert {str(data / n) for n in os.listdir(data) if n != "f3.parquet"} == written


def test_without_repeats_checked_tasks_write_and_deletes_of_absent_keys_write_nothing(tmp_path, bucket_file):
    tasks, data = rewrite_tasks(tmp_path, bucket_file, [(1, "a", 10, False), (8, "z", None, True)],
                                [(9, "z", 90, False), (7, "z", None, True)])
    results = run(tasks, data)
    assert sorted(r["kind"] for r in results) == ["insert", "rewrite"]  # part 1 of the inserts had no rows
    insert = next(r for r in results if r["kind"] == "insert")
    assert pq.read_table(insert["dst"]).to_pylist() == [{"k1": 9, "k2": "z", "v": 90}]
    rewrite = next(r for r in results if r["kind"] == "rewrite")
    assert pq.read_table(rewrite["dst"]).column("v").to_pylist() == [10, 2, 3]
