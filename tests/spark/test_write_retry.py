"""A batch task that fails once and is retried by Spark: the job still publishes every row exactly once.

The shared session is ``local[2]`` (no task retries), so this runs a ``local[2,3]`` driver in a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coordinator import open_store, read_snapshot
from coordinator.layout import data_dir, marker_dir
from coordinator.partrecords import CommitOp, PartitionRecord

CHILD = r'''
import os, sys
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
lake = sys.argv[1]
spark = SparkSession.builder.master("local[2,3]").config("spark.ui.enabled", "false").getOrCreate()

@udf("long")
def fail_first_attempt(x):
    tc = TaskContext.get()
    if tc.partitionId() == 1 and tc.attemptNumber() == 0 and x % 100 == 60:
        raise RuntimeError("first attempt of task 1 dies mid-write")
    return x

df = spark.range(0, 400, 1, 4).select(fail_first_attempt("id").alias("id"))
df.write.format("txnlog").mode("append").option("topic", "retry").option("numPartitions", "2").save(lake)
print("ATTEMPTS-OK")
'''


@pytest.mark.slow
@pytest.mark.spark
def test_a_task_retried_after_failing_once_publishes_each_row_once(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run([sys.executable, str(script), lake], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ATTEMPTS-OK" in proc.stdout, proc.stderr[-3000:]
    assert "first attempt of task 1 dies mid-write" in proc.stderr  # the failure really happened
    ids = read_snapshot(lake, ["retry"])["retry"].column("id").to_pylist()
    assert sorted(ids) == list(range(400))
    store = open_store(lake)
    assert sum(len(store.list(marker_dir("retry", p))) for p in range(2)) == 2  # one transaction
    # the failed attempt deleted what it had staged: every data file left is named by a marker
    files = {n for p in range(2) for n in store.list(data_dir("retry", p))}
    named = {seg.path.rsplit("/", 1)[-1]
             for p in range(2) for name in store.list(marker_dir("retry", p))
             for op in PartitionRecord.from_bytes(store.get(f"{marker_dir('retry', p)}/{name}"), name).ops
             if isinstance(op, CommitOp) for seg in op.segments}
    assert files == named and len(files) >= 4  # one file per successful task and partition it wrote, no orphan
