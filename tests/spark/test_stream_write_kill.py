"""A streaming driver SIGKILLed mid-stream, then restarted from its checkpoint: the output is exactly once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from coordinator import TopicNotFoundError, read_snapshot

CHILD = r'''
import os, sys
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
src, lake, cp = sys.argv[1:4]
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
df = spark.readStream.schema("id long, grp string").option("maxFilesPerTrigger", 1).json(src)
q = (df.selectExpr("id", "upper(grp) as grp").writeStream.format("txnlog").option("topic", "out")
     .option("numPartitions", "2").option("partitionKey", "grp").option("checkpointLocation", cp)
     .trigger(availableNow=True).start(lake))
q.awaitTermination()
'''


def published(lake: str) -> list[int]:
    try:
        return read_snapshot(lake, ["out"])["out"].column("id").to_pylist()
    except TopicNotFoundError:
        return []


@pytest.mark.slow
@pytest.mark.spark
def test_sigkilled_driver_restarted_from_checkpoint_gives_exactly_once(tmp_path: Path) -> None:
    src, lake, cp = tmp_path / "in", str(tmp_path / "lake"), str(tmp_path / "cp")
    src.mkdir()
    ids = list(range(10 * 25))
    for f in range(10):
        rows = [json.dumps({"id": i, "grp": f"g{i % 3}"}) for i in ids[f * 25:(f + 1) * 25]]
        (src / f"part-{f:03d}.json").write_text("\n".join(rows) + "\n")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    rng = random.Random(11)
    cmd = [sys.executable, str(script), str(src), lake, cp]
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    target = rng.randint(2, 6) * 25  # kill once this many records are published, plus a random delay
    deadline = time.time() + 240
    while child.poll() is None and len(published(lake)) < target and time.time() < deadline:
        time.sleep(0.1)
    assert child.poll() is None, "the query finished before the kill point"
    time.sleep(rng.uniform(0, 0.5))
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    at_kill = len(published(lake))
    assert 0 < at_kill < len(ids)
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300).returncode
    assert rc == 0
    got = Counter(published(lake))
    assert [i for i, c in got.items() if c > 1] == []
    assert sorted(got) == ids
