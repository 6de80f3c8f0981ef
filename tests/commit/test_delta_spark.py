"""A DeltaCommitter commit read back by delta-spark (Delta's reference implementation) when its jars exist.

delta-spark's JVM jars are not on PyPI and Maven is unreachable here, so this module is skipped unless
``PARTIALCOW_DELTA_JARS`` lists local jar paths (``delta-spark_2.12-3.x.jar,delta-storage-3.x.jar``). Spark runs
in a child process: the test session's own SparkSession is configured for Iceberg, and static catalog settings
cannot change inside one JVM.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("pyspark")

# the table builders of the delta-rs tests (pytest puts this folder on sys.path: tests/ has no __init__.py)
from test_delta import batch, file_with_id, make_table, rewrite  # noqa: E402

from partialcow.commit.base import FileReplacement  # noqa: E402
from partialcow.commit.delta import DeltaCommitter  # noqa: E402
from partialcow.metrics import WriteMetrics  # noqa: E402
from delta_env import NO_DELTA_SPARK, delta_spark_jars  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
_EXTENSION_CLASS = "io/delta/sql/DeltaSparkSessionExtension.class"


def _loadable(jars: list[str]) -> bool:
    for jar in jars:
        try:
            with zipfile.ZipFile(jar) as zf:
                if _EXTENSION_CLASS in zf.namelist():
                    return True
        except zipfile.BadZipFile:
            return False
    return False


JARS = delta_spark_jars()  # the PARTIALCOW_DELTA_JARS list, else ../shared/jars
pytestmark = [
    pytest.mark.spark,
    pytest.mark.delta_spark,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (JARS and _loadable(JARS) and shutil.which("java")),
        reason=NO_DELTA_SPARK,
    ),
]

_CHILD = r"""
import json, sys
from partialcow.spark.session import get_or_create_session
args = json.loads(sys.argv[1])
spark = get_or_create_session(table_format="delta", warehouse=args["warehouse"], master="local[1]",
                              delta_jars=args["jars"])
reader = lambda **o: spark.read.format("delta").options(**o).load(args["root"])
out = {
    "current": [r.asDict() for r in reader().select("id", "name").collect()],
    "previous": [r.asDict() for r in reader(versionAsOf=str(args["previous"])).select("id", "name").collect()],
    "history": [r.asDict() for r in spark.sql(f"DESCRIBE HISTORY delta.`{args['root']}` LIMIT 1")
                .select("version", "userMetadata").collect()],
    # Boundary predicates: if our stats were not bounds, data skipping would drop the file and lose the row.
    "filtered": {p: sorted(r["id"] for r in reader().where(p).select("id").collect()) for p in args["predicates"]},
}
spark.stop()
print("RESULT" + json.dumps(out, default=str))
"""


def test_delta_spark_reads_our_commit(tmp_path: Path) -> None:
    root = make_table(tmp_path / "t")
    c = DeltaCommitter(str(root))
    old = file_with_id(c, 2)
    new = rewrite(root, old, {2: "changed-" + "x" * 60})  # a long string: the truncated max must still bound it
    result = c.replace_files(
        FileReplacement(base_version=1, removed=[old], added=[new], metrics=WriteMetrics(rows_updated=1))
    )
    data = pq.read_table(root / new)
    ts_max = max(data["ts"].to_pylist()).strftime("%Y-%m-%d %H:%M:%S.%f")
    predicates = [
        f"name = 'changed-{'x' * 60}'",
        f"ts = TIMESTAMP '{ts_max}'",
        f"id = {max(data['id'].to_pylist())}",
        f"amount = {max(data['amount'].to_pylist())}",
    ]
    args = {
        "root": str(root),
        "warehouse": str(tmp_path / "wh"),
        "jars": JARS,
        "previous": result.previous_version,
        "predicates": predicates,
    }
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "adapter"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(args)], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.split("RESULT", 1)[1])

    expected_before = {i: batch([i])["name"][0].as_py() for i in range(12)}
    expected_after = {**expected_before, 2: "changed-" + "x" * 60}
    assert {r["id"]: r["name"] for r in out["current"]} == expected_after
    assert {r["id"]: r["name"] for r in out["previous"]} == expected_before
    assert out["history"][0]["version"] == result.version
    assert out["history"][0]["userMetadata"] == "partial_cow_upsert"
    assert out["filtered"][predicates[0]] == [2]
    for p in predicates[1:]:
        assert out["filtered"][p], p  # the boundary row is found, not skipped
