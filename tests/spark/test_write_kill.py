"""A batch job whose driver is SIGKILLed mid-write leaves nothing visible; running it again publishes every row
exactly once. Through the data source, and through the native write rule (``txnsink.enable_native``), killed while
Spark's Parquet writer writes the staging folder."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from coordinator import TopicNotFoundError, open_store, read_snapshot
from coordinator.layout import NATIVE_LEASE

CHILD = r'''
import os, sys, time
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
lake = sys.argv[1]
slow = sys.argv[2] == "slow"
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate())
if sys.argv[3] == "native":
    import txnsink
    txnsink.enable_native(spark)

def pace(batches):
    for b in batches:
        if slow:
            time.sleep(0.5)
        yield b

df = spark.range(0, 20000, numPartitions=8).selectExpr("id", "cast(id % 7 as string) AS grp")
df = df.mapInArrow(pace, df.schema)
df.write.format("txnlog").option("topic", "out").option("numPartitions", "3").option("transactionalId", "job") \
    .mode("append").save(lake)
'''


def published(lake: str) -> list[int]:
    try:
        return read_snapshot(lake, ["out"])["out"].column("id").to_pylist()
    except TopicNotFoundError:
        return []


def staged_files(lake: str, path: str) -> int:
    """Files the write has under way: segments the data source's tasks staged, or the files Spark's Parquet writer
    has opened in the native path's staging folder."""
    if path == "native":  # the write's lease is not one of them
        return sum(len([f for f in files if f != NATIVE_LEASE])
                   for _d, _s, files in os.walk(os.path.join(lake, "_native-staging")))
    store = open_store(lake, probe=False)
    return sum(1 for p in range(3) for _ in store.list(f"topics/out/{p}/data"))


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("path", ["python", "native"])
def test_batch_job_killed_mid_write_leaves_nothing_visible(tmp_path: Path, path: str) -> None:
    lake = str(tmp_path / "lake")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), lake, "slow", path], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while child.poll() is None and time.time() < deadline and (
        not os.path.isdir(os.path.join(lake, "topics", "out")) or staged_files(lake, path) == 0
    ):
        time.sleep(0.2)
    assert child.poll() is None, "the job ended before it could be killed mid-write"
    assert staged_files(lake, path) > 0  # the write is under way
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    assert published(lake) == []  # nothing of the killed job is visible
    rc = subprocess.run([sys.executable, str(script), lake, "fast", path], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, timeout=300).returncode
    assert rc == 0
    got = Counter(published(lake))
    assert [i for i, c in got.items() if c > 1] == []
    assert sorted(got) == list(range(20000))
    store = open_store(lake, probe=False)
    names = [n for p in range(3) for n in store.list(f"topics/out/{p}/data")]
    native_names = [n for n in names if re.search(r"~spark-\d{5}-\d{3}-[0-9a-f]{16}-\d{5}\.parquet$", n)]
    assert len(native_names) == (len(names) if path == "native" else 0)  # the path under test wrote them
