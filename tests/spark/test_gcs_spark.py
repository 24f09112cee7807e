"""Spark on the loopback GCS endpoint (fake-gcs-server): batch and streaming writes and reads through
``format("txnlog")`` with the ``gcs.*`` options (a streaming driver killed and restarted stays exactly once), and the
native paths, which do not reach ``gs://`` stores, falling back saying so. The SIGKILLed driver streams into an Azure
store (Azurite) at the same time: one Spark start-up per run for both stores."""

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
from typing import Any

import pytest
from test_stream_write import await_quietly, make_input, run_stream  # tests/spark is on sys.path

import txnsink
import txnsource
from coordinator import open_store, read_snapshot
from coordinator.errors import InvalidOptionError

pytestmark = [pytest.mark.spark, pytest.mark.gcs]


def test_batch_write_and_read_on_gcs_with_options(spark: Any, gcs_lake: Any) -> None:
    df = spark.range(40).selectExpr("id", "cast(id % 4 as string) as k")
    w = df.write.format("txnlog").mode("append").option("topic", "g").option("numPartitions", "2")
    for k, v in gcs_lake.options.items():
        w = w.option(k, v)
    w.option("partitionKey", "k").save(gcs_lake.url)
    w.option("partitionKey", "k").save(gcs_lake.url)  # a second job: a second transaction
    got = read_snapshot(gcs_lake.url, ["g"], options=gcs_lake.options)["g"]
    assert sorted(got.column("id").to_pylist()) == sorted(list(range(40)) * 2)
    r = spark.read.format("txnlog").option("topic", "g")
    for k, v in gcs_lake.options.items():
        r = r.option(k, v)
    read = r.load(gcs_lake.url)
    assert sorted(r.id for r in read.select("id").collect()) == sorted(list(range(40)) * 2)
    for p in (0, 1):  # dense offsets per partition: each job's rows committed once
        offsets = sorted(r._offset for r in read.where(f"_partition = {p}").select("_offset").collect())
        assert offsets == list(range(len(offsets)))


def test_native_paths_fall_back_on_gcs_and_say_why(spark: Any, gcs_lake: Any) -> None:
    url, options = gcs_lake.url, dict(gcs_lake.options)
    df = spark.range(12).selectExpr("id")
    got = txnsink.write(df, url, "n", numPartitions=1, **options)
    assert got.path == "python" and "do not reach gs:// stores" in (got.reason or "")
    with pytest.raises(InvalidOptionError, match="do not reach gs:// stores"):
        txnsink.write(df, url, "n", writePath="native", **options)
    auto = txnsource.read(spark, url, topic="n", **options)
    assert sorted(r.id for r in auto.select("id").collect()) == list(range(12)) and auto.inputFiles() == []
    with pytest.raises(InvalidOptionError, match="do not reach gs:// stores"):
        txnsource.read(spark, url, topic="n", readPath="native", **options)
    assert open_store(url, options).counters.total() == 0  # opening reads nothing


def test_stream_commit_protocol_on_gcs(gcs_lake: Any, tmp_path: Any) -> None:
    """The streaming sink's commit, as a restarted query replays it: the same micro-batch twice is published once."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    from txnsink import make_stream_writer
    from txnsink.staging import TaskIds

    (tmp_path / "cp").mkdir()
    (tmp_path / "cp" / "metadata").write_text(json.dumps({"id": "q-gcs"}))
    opts = {"path": gcs_lake.url, "topic": "gs", "checkpointLocation": str(tmp_path / "cp"), **gcs_lake.options}
    w = make_stream_writer(opts, StructType([StructField("id", LongType())]), False)
    for attempt in range(2):
        rows = iter([pa.record_batch({"id": pa.array([7, 8], pa.int64())})])
        m = w.stage(rows, TaskIds(0, attempt, attempt, None, 0))
        w.commit([m], 0)
    got = read_snapshot(gcs_lake.url, ["gs"], options=gcs_lake.options)["gs"]
    assert sorted(got.column("id").to_pylist()) == [7, 8]


def _ids(gcs_lake: Any, topic: str) -> list[int]:
    return sorted(read_snapshot(gcs_lake.url, [topic], options=gcs_lake.options)[topic].column("id").to_pylist())


def test_stream_write_restart_and_stream_read_on_gcs(spark: Any, gcs_lake: Any, tmp_path: Path) -> None:
    ids = make_input(tmp_path / "in", 2, 5)
    run_stream(spark, tmp_path / "in", gcs_lake.url, tmp_path / "cp", **gcs_lake.options)
    ids += make_input(tmp_path / "in", 2, 5, start=2)
    q = run_stream(spark, tmp_path / "in", gcs_lake.url, tmp_path / "cp", **gcs_lake.options)
    assert q.exception() is None
    assert _ids(gcs_lake, "out") == ids
    r = spark.readStream.format("txnlog").option("topic", "out").option("startingOffsets", "earliest") \
        .option("maxRecordsPerTrigger", "10")
    for k, v in gcs_lake.options.items():
        r = r.option(k, v)
    w = r.load(gcs_lake.url).select("id").writeStream.format("txnlog").option("topic", "copy") \
        .option("checkpointLocation", str(tmp_path / "cp-copy"))
    for k, v in gcs_lake.options.items():
        w = w.option(k, v)
    copy = w.trigger(availableNow=True).start(gcs_lake.url)
    await_quietly(copy)
    assert copy.exception() is None
    assert _ids(gcs_lake, "copy") == ids


CHILD = r'''
import json, os, sys
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
src, cp, stores = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
queries = []
for name, (lake, options) in stores.items():  # one query per store, all at once in this driver
    df = spark.readStream.schema("id long, grp string").option("maxFilesPerTrigger", 1).json(src)
    w = (df.writeStream.format("txnlog").option("topic", "out").option("numPartitions", "2")
         .option("partitionKey", "grp").option("checkpointLocation", f"{cp}/{name}"))
    for k, v in options.items():
        w = w.option(k, v)
    queries.append(w.trigger(availableNow=True).start(lake))
for q in queries:
    q.awaitTermination()
'''


def sigkilled_stream_restarts_exactly_once(lakes: dict[str, Any], tmp_path: Path) -> None:
    """One driver process runs a streaming query per store of ``lakes`` (name: a lake with ``url`` and
    ``options``), each writing the same 250 rows in ten micro-batches; it is SIGKILLed at a seeded point once every
    query is mid-stream and started again from the checkpoints: every row is published once in every store (one
    driver for all stores: a Spark start-up per store and run is the slowest part)."""
    src = tmp_path / "in"
    src.mkdir()
    for f in range(10):
        rows = [json.dumps({"id": i, "grp": f"g{i % 3}"}) for i in range(f * 25, (f + 1) * 25)]
        (src / f"part-{f:03d}.json").write_text("\n".join(rows) + "\n")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    stores = {name: (lake.url, dict(lake.options)) for name, lake in lakes.items()}
    cmd = [sys.executable, str(script), str(src), str(tmp_path / "cp"), json.dumps(stores)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def published(lake: Any) -> list[int]:
        try:
            return _ids(lake, "out")
        except Exception:  # the topic does not exist yet
            return []

    rng = random.Random(17)
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                             env=env)
    # the slowest store past the kill point, the fastest (micro-batches of 25 rows) still short of the end
    target, deadline = rng.randint(2, 5) * 25, time.time() + 240
    while (child.poll() is None and min(len(published(lake)) for lake in lakes.values()) < target
           and time.time() < deadline):
        time.sleep(0.2)
    assert child.poll() is None, "the query finished before the kill point"
    time.sleep(rng.uniform(0, 0.5))
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    for name, lake in lakes.items():
        at_kill = published(lake)
        assert 0 < len(at_kill) < 250, f"{name}: {len(at_kill)} rows published at the kill, not mid-stream"
    assert subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300,
                          env=env).returncode == 0
    for name, lake in lakes.items():
        got = Counter(published(lake))
        assert [i for i, c in got.items() if c > 1] == [] and sorted(got) == list(range(250)), name


@pytest.mark.slow
def test_sigkilled_streaming_driver_on_gcs_and_azure_restarted_gives_exactly_once(gcs_lake: Any, azure_lake: Any,
                                                                                 tmp_path: Path) -> None:
    """The GCS and Azure stores in one killed and restarted driver (each store's own checkpoint)."""
    sigkilled_stream_restarts_exactly_once({"gcs": gcs_lake, "azure": azure_lake}, tmp_path)
