"""txnlog on a real multi-executor cluster: ``local-cluster[2,1,1024]`` (a master and two workers in the driver's
JVM, and an executor JVM per worker, started by the pip-installed pyspark), on the local store and on the loopback
S3 endpoint with credentials passed as options.

* batch: a write and a read, each with an executor SIGKILLed mid-stage (its tasks rerun on another executor), and
  the native read path (``txnsource.read`` with ``readPath``); on the local store also the native path's keyed
  write (the jar's partitioner in the executor JVMs), its executor SIGKILLed mid-stage too; every row exactly once;
* streaming ``txnlog -> txnlog``: the driver (and with it the whole cluster) SIGKILLed mid-stream (a micro-batch
  past the middle of the input blocks in its tasks until then), then restarted from its checkpoint; every record
  exactly once.

Each cluster runs in a child process (one SparkContext per process), so these tests never share the session of
the other Spark tests. A cluster costs its start-up (the driver and two executor JVMs): the JVMs run with the
client compiler only (``-XX:TieredStopAtLevel=1``), which halves start-up for jobs this small, and each test uses
one driver for both stores.

The executor to kill is found deterministically: one task of the job (partition 1, first attempt) passes part of
its rows on, leaves a mark naming its Python daemon, and then blocks; the test kills the executor JVM above that
daemon, and the task's rerun (a later attempt) on another executor goes through.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from read_helpers import produce

from coordinator import TopicNotFoundError, create_topic, get_topic, open_store, read_snapshot
from coordinator.partitioner import partition_for
from s3_lake import S3Lake

pytestmark = [pytest.mark.slow, pytest.mark.spark]

MASTER = "local-cluster[2,1,1024]"
ROWS = 4000
TASKS = 8
#: The task that blocks (on its first attempt) until the test kills its executor.
BLOCKED = 1

SESSION = r'''
import json, os, sys, time
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession

JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
def session(master, **conf):
    b = (SparkSession.builder.master(master).config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.extraJavaOptions", JVM).config("spark.executor.extraJavaOptions", JVM))
    for k, v in conf.items():
        b = b.config(k, v)
    return b.getOrCreate()
'''

BATCH_CHILD = SESSION + r'''
from pyspark import TaskContext
import txnsink
import txnsource
from coordinator import InvalidOptionError

master, stores, marks, rows, tasks, blocked = (sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4]),
                                               int(sys.argv[5]), int(sys.argv[6]))
spark = session(master, **{"spark.task.maxFailures": "8", "spark.sql.execution.arrow.maxRecordsPerBatch": "100"})

def paced(job):
    def mark(ctx):
        name = f"{job}-{ctx.partitionId()}-{ctx.attemptNumber()}"
        with open(f"{marks}/.{name}", "w") as f:
            f.write(str(os.getppid()))  # the executor's Python daemon
        os.rename(f"{marks}/.{name}", f"{marks}/{name}")

    def block():  # mid-task, some rows passed on: the test kills this executor now
        time.sleep(300)
        raise RuntimeError("the executor of the blocked task was not killed")

    def run(batches):
        ctx = TaskContext.get()
        blocks = ctx.partitionId() == blocked and ctx.attemptNumber() == 0
        if not blocks:
            mark(ctx)
        for i, batch in enumerate(batches):
            if blocks and i == 2:
                mark(ctx)
                block()
            yield batch
        if blocks:  # fewer than three batches
            mark(ctx)
            block()
    return run

for name, (url, options) in stores.items():
    df = spark.range(0, rows, numPartitions=tasks).selectExpr("id", "cast(id % 7 AS string) AS grp")
    df = df.mapInArrow(paced(f"{name}-write"), df.schema)
    df.write.format("txnlog").options(**options).option("topic", "t").option("numPartitions", "3") \
        .mode("append").save(url)
    src = spark.read.format("txnlog").options(**options).option("topic", "t").option("minPartitions", str(tasks)) \
        .load(url)
    got = src.mapInArrow(paced(f"{name}-read"), src.schema).select("id", "_partition", "_offset").collect()
    result = {"store": name, "read": sorted(r.id for r in got), "read_tasks": src.rdd.getNumPartitions(),
              "read_rows": sorted([r.id, r._partition, r._offset] for r in got)}
    try:
        native = txnsource.read(spark, url, topic="t", readPath="native", **options)
        result["native"] = sorted(r.id for r in native.select("id").collect())
        # the metadata columns computed inside the scan, by the jar the executor JVMs load
        result["native_rows"] = sorted([r.id, r._partition, r._offset]
                                       for r in native.select("id", "_partition", "_offset").collect())
        result["native_files"] = len(native.inputFiles())
    except InvalidOptionError as e:
        result["native_refused"] = str(e)
    auto = txnsource.read(spark, url, topic="t", **options)
    result["auto"] = sorted(r.id for r in auto.select("id").collect())
    result["auto_files"] = len(auto.inputFiles())
    python = txnsource.read(spark, url, topic="t", readPath="python", **options)
    result["python"] = sorted(r.id for r in python.select("id").collect())
    result["python_files"] = len(python.inputFiles())
    if name == "local":  # the native path's keyed write: the jar's JVM partitioner, in the executor JVMs
        kdf = spark.range(0, rows, numPartitions=tasks).selectExpr("id", "cast(id % 7 AS string) AS grp")
        kdf = kdf.mapInArrow(paced(f"{name}-keyed"), kdf.schema)
        result["keyed_path"] = txnsink.write(kdf, url, "k", key="grp", numPartitions=3).path
    print(json.dumps(result), flush=True)
'''

STREAM_CHILD = SESSION + r'''
master, stores, cp, hold_at = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
spark = session(master)

from pyspark import TaskContext

def held(name):
    def run(batches):
        first = TaskContext.get().partitionId() == 0  # one task per query: the other query gets the other core
        for batch in batches:
            # the micro-batch that reaches hold_at blocks while a hold file is there: the test kills the driver
            top = max(batch.column("id").to_pylist(), default=-1)
            if first and top >= hold_at and os.path.exists(f"{cp}/hold-{name}"):
                open(f"{cp}/held-{name}", "w").close()
                time.sleep(300)
                raise RuntimeError("the driver was not killed")
            yield batch
    return run

queries = []
for name, (url, options) in stores.items():
    src = (spark.readStream.format("txnlog").options(**options).option("topic", "in")
           .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", "100").load(url)
           .selectExpr("id", "upper(grp) AS grp"))
    queries.append(
        src.mapInArrow(held(name), src.schema).writeStream.format("txnlog").options(**options)
        .option("topic", "out").option("numPartitions", "2").option("partitionKey", "grp")
        .option("checkpointLocation", f"{cp}/{name}").trigger(availableNow=True).start(url))
for q in queries:
    q.awaitTermination()
'''


def ids_of(url: str, options: dict[str, str], topic: str) -> list[int]:
    try:
        return read_snapshot(url, [topic], options=options)[topic].column("id").to_pylist()
    except TopicNotFoundError:
        return []


def exactly_once(got: list[int], expected: list[int], where: str) -> None:
    counts = Counter(got)
    assert [i for i, c in counts.items() if c > 1] == [], f"{where}: duplicates"
    assert sorted(counts) == sorted(expected), f"{where}: missing or extra records"


def executor_running(mark: Path) -> int:
    """The pid of the executor JVM that runs the task which left ``mark`` (the parent of its Python daemon)."""
    daemon = int(mark.read_text())
    with open(f"/proc/{daemon}/stat") as f:
        jvm = int(f.read().rsplit(")", 1)[1].split()[1])
    with open(f"/proc/{jvm}/cmdline", "rb") as f:
        assert b"CoarseGrainedExecutorBackend" in f.read(), "not an executor JVM"
    return jvm


def tail(path: Path, n: int = 4000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def wait_for(what: str, check: Callable[[], bool], child: subprocess.Popen[bytes], log: Path,
             timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not check():
        assert child.poll() is None, f"the child ended before {what}:\n{tail(log)}"
        assert time.time() < deadline, f"timed out waiting for {what}:\n{tail(log)}"
        time.sleep(0.1)


def stores(tmp_path: Path, s3_lake: S3Lake) -> dict[str, tuple[str, dict[str, str]]]:
    return {"local": (str(tmp_path / "lake"), {}), "s3": (s3_lake.url, dict(s3_lake.options))}


def test_batch_write_and_read_with_an_executor_killed_mid_stage(tmp_path: Path, s3_lake: S3Lake) -> None:
    where = stores(tmp_path, s3_lake)
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "batch.py"
    script.write_text(BATCH_CHILD)
    out, log = tmp_path / "out.jsonl", tmp_path / "child.log"
    jobs = [f"{store}-{job}" for store in where for job in ("write", "read", "keyed")
            if (store, job) != ("s3", "keyed")]
    with open(out, "wb") as sink, open(log, "wb") as err:
        child = subprocess.Popen([sys.executable, str(script), MASTER, json.dumps(where), str(marks), str(ROWS),
                                  str(TASKS), str(BLOCKED)], stdout=sink, stderr=err, start_new_session=True)
        killed = []
        try:
            for job in jobs:
                mark = marks / f"{job}-{BLOCKED}-0"
                wait_for(f"{job} to block", mark.exists, child, log)
                victim = executor_running(mark)
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)
            assert child.wait(timeout=600) == 0, tail(log)
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
    assert len(set(killed)) == len(jobs)  # a fresh executor replaced each one killed
    for job in jobs:
        assert list(marks.glob(f"{job}-{BLOCKED}-*")) != [marks / f"{job}-{BLOCKED}-0"], \
            f"the blocked task of {job} did not run again after its executor was killed"
        # a keyed native write merges its small input partitions into one task per core (keyedTaskBytes)
        assert len({m.name.split("-")[2] for m in marks.glob(f"{job}-*")}) >= (2 if job.endswith("keyed") else TASKS)
    results = {r["store"]: r for r in map(json.loads, out.read_text().splitlines())}
    expected = list(range(ROWS))
    for name, (url, options) in where.items():
        exactly_once(ids_of(url, options, "t"), expected, name)
        got = results[name]
        assert got["read_tasks"] >= TASKS
        for path in ("read", "auto", "python"):
            assert got[path] == expected, f"{name}: {path}"
        assert got["python_files"] == 0  # the Python data source
    assert results["local"]["native"] == expected
    assert results["local"]["native_rows"] == results["local"]["read_rows"]
    assert results["local"]["native_files"] > 0 and results["local"]["auto_files"] > 0  # Spark's Parquet reader
    assert "native_refused" not in results["local"]
    # no s3a file system in the pip-installed pyspark: `native` says so, `auto` falls back to the Python reader
    assert "native" not in results["s3"] and "readPath" in results["s3"]["native_refused"]
    assert results["s3"]["auto_files"] == 0
    url = where["local"][0]
    assert results["local"]["keyed_path"] == "native"
    exactly_once(ids_of(url, {}, "k"), expected, "local keyed")
    keyed = read_snapshot(url, ["k"])["k"]
    assert keyed.column("_partition").to_pylist() == \
        partition_for(keyed, ["grp"], 3, get_topic(open_store(url), "k")).tolist()


def test_stream_with_its_driver_killed_mid_stream_is_exactly_once(tmp_path: Path, s3_lake: S3Lake) -> None:
    where = stores(tmp_path, s3_lake)
    ids = list(range(400))
    for url, options in where.values():
        create_topic(open_store(url, options), "in", pa.schema([("id", pa.int64()), ("grp", pa.string())]),
                     partitions=2)
        for p in range(2):
            produce(url, "in", [[{"id": i, "grp": f"g{i % 3}"} for i in ids[b:b + 200] if i % 2 == p]
                                for b in range(0, 400, 200)], partition=p, tid=f"w{p}", options=options)
    script = tmp_path / "stream.py"
    script.write_text(STREAM_CHILD)
    log, cp = tmp_path / "child.log", tmp_path / "cp"
    cp.mkdir()
    for name in where:
        (cp / f"hold-{name}").touch()
    cmd = [sys.executable, str(script), MASTER, json.dumps(where), str(cp), str(len(ids) // 2)]
    with open(log, "wb") as err:
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            wait_for("both queries to reach the middle of the stream",
                     lambda: all((cp / f"held-{name}").exists() for name in where), child, log)
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    for name, (url, options) in where.items():
        at_kill = len(ids_of(url, options, "out"))
        assert 0 < at_kill < len(ids), f"{name}: the kill was not mid-stream ({at_kill} records out)"
        (cp / f"hold-{name}").unlink()
    with open(log, "wb") as err:
        assert subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=err, timeout=600).returncode == 0, tail(log)
    for name, (url, options) in where.items():
        exactly_once(ids_of(url, options, "out"), ids, name)
