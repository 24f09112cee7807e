"""txnlog's session extension (``io.txnlog.spark.TxnlogSparkSessionExtension``, put on a builder by
``pyspark_txnlog.configure_spark_with_txnlog``): ``format("txnlog")`` reads are Parquet scans and appends are
written by the native path with no ``enable_native`` call, on ``local[2]``, on ``local-cluster`` and on a Spark
Connect server started with the extension (``remote("local[2]")``). On Connect, ``txnsource.read`` under the
default ``readPath`` falls back to the data source (which the server's extension reads natively) and a keyed
``txnsink.write`` says why it cannot take the native path. A native write to a store this process may not write
fails on the driver in one line.

The extension is a static setting, so each configured application runs in a child process (one per master).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txnsink
from coordinator import StoreError, create_topic, open_store, read_snapshot
from coordinator.layout import data_dir
from pyspark_txnlog import EXTENSION, configure_spark_with_txnlog
from txnsink.native import CONNECT_KEYED_REASON

pytestmark = pytest.mark.spark

ROWS = 1000
#: segment names of the native write path (``spark-<split>-<part>-<tag>-<n>``)
NATIVE = re.compile(r"~spark-\d{5}-\d{3}-[0-9a-f]{16}-\d{5}\.parquet$")

CHILD = r'''
import contextlib, faulthandler, io, json, os, sys
faulthandler.dump_traceback_later(400, exit=True)  # a hang fails with the stacks in stderr
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
from pyspark_txnlog import configure_spark_with_txnlog

master, lake, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
builder = SparkSession.builder.config("spark.sql.shuffle.partitions", "2")
if master == "connect":
    builder = builder.remote("local[2]")  # SPARK_TESTING: an ephemeral port
else:
    builder = (builder.master(master).config("spark.ui.enabled", "false")
               .config("spark.driver.extraJavaOptions", JVM).config("spark.executor.extraJavaOptions", JVM))
spark = configure_spark_with_txnlog(builder).getOrCreate()

def plan(df):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain()
    return out.getvalue()

df = spark.range(0, rows, numPartitions=4).selectExpr("id", "concat('g', cast(id % 3 AS string)) AS grp")
df.write.format("txnlog").option("topic", "t").option("numPartitions", "2").mode("append").save(lake)
df.write.format("txnlog").option("topic", "k").option("numPartitions", "2").option("partitionKey", "grp") \
    .mode("append").save(lake)
src = spark.read.format("txnlog").option("topic", "t").load(lake).where("id % 2 = 0").select("id", "_partition")
got = {"plan": plan(src), "even": sorted(r.id for r in src.collect())}
# a stream from topic to topic in two micro-batches: the JVM stream's batches read and written natively
q = (spark.readStream.format("txnlog").option("topic", "t").option("startingOffsets", "earliest")
     .option("maxRecordsPerTrigger", str(rows // 2)).load(lake).select("id", "grp")
     .writeStream.format("txnlog").option("topic", "s").option("numPartitions", "2")
     .option("checkpointLocation", lake + "-checkpoint").trigger(availableNow=True).start(lake))
q.awaitTermination()
if master == "connect":
    import txnsink, txnsource
    via = txnsource.read(spark, lake, topic="k")  # readPath auto: the data source, read by the server natively
    got["read_plan"] = plan(via)
    got["read_ids"] = sorted(r.id for r in via.select("id").collect())
    got["keyed"] = txnsink.write(df, lake, "k2", key="grp", numPartitions="2").reason
print(json.dumps(got), flush=True)
'''


def writers(lake: str, topic: str) -> set[str]:
    """Which path wrote the data files of ``topic`` (two partitions): ``native`` or ``python``."""
    store = open_store(lake)
    names = [n for p in range(2) for n in store.list(data_dir(topic, p))]
    assert names, f"topic {topic} has no data files"
    return {"native" if NATIVE.search(n) else "python" for n in names}


@pytest.mark.slow
@pytest.mark.parametrize("master", ["local[2]", "local-cluster[2,1,1024]", "connect"])
def test_a_configured_application_reads_and_writes_natively_with_no_call(master: str, tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    run = subprocess.run([sys.executable, str(script), master, lake, str(ROWS)], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "SPARK_TESTING": "1"})
    assert run.returncode == 0, run.stderr[-4000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert "FileScan parquet" in got["plan"] and "PythonDataSource" not in got["plan"], got["plan"]
    assert "PushedFilters: [IsNotNull(id)]" in got["plan"], got["plan"]  # filters reach the Parquet scan
    assert got["even"] == list(range(0, ROWS, 2))
    assert writers(lake, "t") == {"native"} and writers(lake, "k") == {"native"}
    assert writers(lake, "s") == {"native"}  # the stream's micro-batches, by the extension alone
    snap = read_snapshot(lake, ["t", "k", "s"])
    for topic in ("t", "k", "s"):
        assert sorted(snap[topic].column("id").to_pylist()) == list(range(ROWS)), topic
    if master == "connect":
        assert "FileScan parquet" in got["read_plan"], got["read_plan"]
        assert got["read_ids"] == list(range(ROWS))
        assert got["keyed"] == CONNECT_KEYED_REASON
        assert sorted(read_snapshot(lake, ["k2"])["k2"].column("id").to_pylist()) == list(range(ROWS))


def test_configure_adds_the_jar_and_the_extension_keeping_other_values() -> None:
    from pyspark.sql import SparkSession

    from coordinator.jvm import JAR

    builder = SparkSession.Builder()
    builder._options = {}  # this builder's own settings (the class-level dict is shared by every builder)
    builder.config("spark.jars", "/opt/other.jar").config("spark.sql.extensions", "com.example.Ext")
    assert configure_spark_with_txnlog(builder) is builder
    assert builder._options["spark.jars"] == f"/opt/other.jar,{JAR}"
    assert builder._options["spark.sql.extensions"] == f"com.example.Ext,{EXTENSION}"
    configure_spark_with_txnlog(builder)  # twice: each value once
    assert builder._options["spark.sql.extensions"] == f"com.example.Ext,{EXTENSION}"


@pytest.fixture
def read_only(lake: str, spark: Any) -> Iterator[str]:
    """``lake`` with topic ``t`` (2 partitions), then made read-only for this process (immutable for root)."""
    create_topic(open_store(lake), "t", partitions=2, schema=pa.schema([("id", pa.int64())]))
    folders = [lake, *(str(p) for p in Path(lake).rglob("*") if p.is_dir())]
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", *folders], check=True)
    else:
        for f in folders:
            os.chmod(f, 0o555)
    try:
        yield lake
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", *folders], check=True)
        else:
            for f in folders:
                os.chmod(f, 0o755)


def test_a_native_write_to_a_read_only_store_fails_on_the_driver_in_one_line(read_only: str, spark: Any) -> None:
    df = spark.range(0, 10).selectExpr("id")
    with pytest.raises(StoreError) as direct:
        txnsink.write(df, read_only, "t")
    txnsink.enable_native(spark)
    try:
        with pytest.raises(Exception) as ruled:  # noqa: PT011 - Spark's IllegalArgumentException
            df.write.format("txnlog").option("topic", "t").mode("append").save(read_only)
    finally:
        txnsink.disable_native(spark)
    for exc in (direct.value, ruled.value):
        text = str(exc).strip()
        assert "\n" not in text and len(text) < 400, text[:2000]
        assert f"store {read_only} is read-only" in text and "no write permission" in text, text
