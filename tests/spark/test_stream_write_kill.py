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


TWO_TOPICS_CHILD = CHILD.replace(
    '''df.selectExpr("id", "upper(grp) as grp").writeStream.format("txnlog").option("topic", "out")''',
    '''df.selectExpr("id", "upper(grp) as grp", "if(id % 2 = 0, 'even', 'odd') as topic")'''
    '''.writeStream.format("txnlog")''',
)
assert TWO_TOPICS_CHILD != CHILD


def published(lake: str, topics: tuple[str, ...] = ("out",)) -> list[int]:
    """Every id visible in ``topics``, read at one snapshot."""
    try:
        tables = read_snapshot(lake, list(topics))
    except TopicNotFoundError:
        return []
    return [i for t in topics for i in tables[t].column("id").to_pylist()]


def kill_and_restart(tmp_path: Path, child_code: str, topics: tuple[str, ...]) -> tuple[list[int], list[int]]:
    """Run the streaming child over 10 files of 25 records, SIGKILL it mid-stream, restart it from its checkpoint.

    Returns:
        (ids published at the kill, ids published at the end), each read at one snapshot of ``topics``.
    """
    src, lake, cp = tmp_path / "in", str(tmp_path / "lake"), str(tmp_path / "cp")
    src.mkdir()
    ids = list(range(10 * 25))
    for f in range(10):
        rows = [json.dumps({"id": i, "grp": f"g{i % 3}"}) for i in ids[f * 25:(f + 1) * 25]]
        (src / f"part-{f:03d}.json").write_text("\n".join(rows) + "\n")
    script = tmp_path / "child.py"
    script.write_text(child_code)
    rng = random.Random(11)
    cmd = [sys.executable, str(script), str(src), lake, cp]
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    target = rng.randint(2, 6) * 25  # kill once this many records are published, plus a random delay
    deadline = time.time() + 240
    while child.poll() is None and len(published(lake, topics)) < target and time.time() < deadline:
        time.sleep(0.1)
    assert child.poll() is None, "the query finished before the kill point"
    # somewhere inside the next micro-batch or so: a native micro-batch of 25 rows takes ~0.1 s, so a longer delay
    # could let the query finish the 5 or more batches left first
    time.sleep(rng.uniform(0, 0.15))
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    at_kill = published(lake, topics)
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300).returncode
    assert rc == 0
    return at_kill, published(lake, topics)


@pytest.mark.slow
@pytest.mark.spark
def test_sigkilled_driver_restarted_from_checkpoint_gives_exactly_once(tmp_path: Path) -> None:
    at_kill, final = kill_and_restart(tmp_path, CHILD, ("out",))
    assert 0 < len(at_kill) < 250
    got = Counter(final)
    assert [i for i, c in got.items() if c > 1] == []
    assert sorted(got) == list(range(250))


@pytest.mark.slow
@pytest.mark.spark
def test_a_two_topic_micro_batch_is_all_or_nothing_under_sigkill(tmp_path: Path) -> None:
    """Each micro-batch (one input file of 25 records) writes both topics through a ``topic`` column: at the
    kill, every batch is visible in both topics whole, or not at all; after the restart, every record once."""
    at_kill, final = kill_and_restart(tmp_path, TWO_TOPICS_CHILD, ("even", "odd"))
    per_batch = Counter(i // 25 for i in at_kill)
    assert per_batch and all(n == 25 for n in per_batch.values()), per_batch  # no batch torn across topics
    assert len(per_batch) < 10
    got = Counter(final)
    assert [i for i, c in got.items() if c > 1] == []
    assert sorted(got) == list(range(250))
