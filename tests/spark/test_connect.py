"""``format("txnlog")`` through Spark Connect: a ``SparkSession.builder.remote("local[2]")`` session (a Connect
server started in a local JVM, the client talking to it over gRPC) writes and reads topics, batch and streaming, on
the local store and on the loopback S3 endpoint with credentials passed as options.

The server finds the data source the way a classic session does: its Python workers import the installed
``pyspark_txnlog`` module (the ``pyspark_*`` naming convention) and register its ``DefaultSource``; the client
sends only the format name and the options. A Connect session cannot share the JVM of the suite's classic
session, so it runs in a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from coordinator import read_snapshot
from s3_lake import S3Lake

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROWS = 1000

CHILD = r'''
import faulthandler, json, os, sys, time
faulthandler.dump_traceback_later(240, exit=True)  # a hang fails with the stacks in stderr
t0 = time.time()
def step(what): print(f"{time.time() - t0:6.1f}s {what}", file=sys.stderr, flush=True)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
from pyspark.sql.connect.session import SparkSession as ConnectSession

stores, rows, cp = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
# SPARK_TESTING (set by the test, as Spark's own suite does) makes the local server take an ephemeral port and its
# client ask the JVM which one, so parallel runs never collide on the default port 15002
spark = SparkSession.builder.remote("local[2]").config("spark.sql.shuffle.partitions", "2").getOrCreate()
assert isinstance(spark, ConnectSession), type(spark)
step("session")
import txnsink
import txnsource
from coordinator import InvalidOptionError
for package in (txnsource, txnsink):
    try:
        package.enable_native(spark)
        raise SystemExit(f"{package.__name__}.enable_native accepted a Connect session")
    except InvalidOptionError as exc:
        assert "classic SparkSession" in str(exc), exc
    assert not package.native_enabled(spark)
for name, (url, options) in stores.items():
    df = spark.range(0, rows, numPartitions=4).selectExpr("id", "concat('g', cast(id % 3 AS string)) AS grp")
    df.write.format("txnlog").options(**options).option("topic", "t").option("numPartitions", "2") \
        .option("partitionKey", "grp").mode("append").save(url)
    step(f"{name}: written")
    src = spark.read.format("txnlog").options(**options).option("topic", "t").load(url)
    batch = src.select("id", "grp", "_partition", "_offset").collect()
    first = src.where("_partition = 0").select("id").collect()
    step(f"{name}: read")
    q = (spark.readStream.format("txnlog").options(**options).option("topic", "t")
         .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", str(rows // 2)).load(url)
         .selectExpr("id", "upper(grp) AS grp").writeStream.format("txnlog").options(**options)
         .option("topic", "out").option("numPartitions", "2").option("partitionKey", "grp")
         .option("checkpointLocation", f"{cp}/{name}").trigger(availableNow=True).start(url))
    q.awaitTermination()
    step(f"{name}: streamed")
    batches = [p.batchId for p in q.recentProgress if p.numInputRows > 0]
    print(json.dumps({"store": name, "batch": [[r.id, r.grp, r._partition, r._offset] for r in batch],
                      "partition0": sorted(r.id for r in first), "micro_batches": batches}), flush=True)
'''


def test_connect_session_writes_and_reads_batch_and_streaming(tmp_path: Path, s3_lake: S3Lake) -> None:
    where = {"local": (str(tmp_path / "lake"), {}), "s3": (s3_lake.url, dict(s3_lake.options))}
    script = tmp_path / "connect.py"
    script.write_text(CHILD)
    run = subprocess.run([sys.executable, str(script), json.dumps(where), str(ROWS), str(tmp_path / "cp")],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "SPARK_TESTING": "1"})
    assert run.returncode == 0, run.stderr[-4000:]
    results = {r["store"]: r for r in map(json.loads, run.stdout.splitlines())}
    assert sorted(results) == ["local", "s3"]
    expected = list(range(ROWS))
    for name, (url, options) in where.items():
        got = results[name]
        assert sorted(r[0] for r in got["batch"]) == expected, name
        by_key = {grp: {p for _, g, p, _ in got["batch"] if g == grp} for grp in ("g0", "g1", "g2")}
        assert all(len(parts) == 1 for parts in by_key.values()), f"{name}: a key in two partitions: {by_key}"
        assert len({(p, o) for _, _, p, o in got["batch"]}) == ROWS, f"{name}: an offset twice"
        assert got["partition0"] == sorted(i for i, _, p, _ in got["batch"] if p == 0), name
        assert len(got["micro_batches"]) == 2, f"{name}: maxRecordsPerTrigger not honoured"
        snap = read_snapshot(url, ["t", "out"], options=options)
        for topic in ("t", "out"):
            counts = Counter(snap[topic].column("id").to_pylist())
            assert sorted(counts) == expected and set(counts.values()) == {1}, f"{name}/{topic}: not exactly once"
        assert set(snap["out"].column("grp").to_pylist()) == {"G0", "G1", "G2"}
