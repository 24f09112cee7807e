"""``readStream.format("txnlog")`` under txnlog's session extension: the JVM stream (``io.txnlog.spark.TxnlogStream``)
takes the query, so no Python process starts for it, and every micro-batch is read by Spark's Parquet scan; the
offsets are the stream reader's, so rows arrive exactly once across admission limits, restarts (from a checkpoint
the Python stream wrote, too), a replayed micro-batch and a SIGKILLed driver. Queries the native scan cannot read
keep the Python stream. The extension alone also writes ``writeStream.format("txnlog")`` micro-batches natively.

The extension is a static setting, so each configured application runs in a child process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator import TransactionCoordinator, open_store, read_snapshot

pytestmark = pytest.mark.spark

PYTHON_STREAM = "PythonMicroBatchStream"

COMMON = r'''
import contextlib, faulthandler, io, json, os, sys
faulthandler.dump_traceback_later(400, exit=True)  # a hang fails with the stacks in stderr
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
from pyspark_txnlog import configure_spark_with_txnlog

JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
builder = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
           .config("spark.sql.shuffle.partitions", "2").config("spark.driver.extraJavaOptions", JVM))
spark = configure_spark_with_txnlog(builder).getOrCreate()

def append(lake, topic, lo, hi):
    (spark.range(lo, hi, numPartitions=2).selectExpr("id", "concat('g', cast(id % 3 AS string)) AS grp")
     .write.format("txnlog").option("topic", topic).option("numPartitions", "2").mode("append").save(lake))

def stream(lake, topic, **options):
    reader = spark.readStream.format("txnlog").option("topic", topic).option("startingOffsets", "earliest")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(lake)
'''

SCENARIOS = COMMON + r'''
lake, ck = sys.argv[1], sys.argv[2]
got = {}

def drain(name, df, **options):
    """Run ``df`` into Spark's Parquet file sink until everything available is read; the ids the sink holds, the
    run's batches and its source."""
    q = (df.writeStream.format("parquet").option("path", f"{ck}/{name}-out")
         .option("checkpointLocation", f"{ck}/{name}").trigger(availableNow=True).start())
    q.awaitTermination()
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        q.explain()
    ids = sorted(r.id for r in spark.read.parquet(f"{ck}/{name}-out").select("id").collect())
    return {"ids": ids, "batches": len(batches), "source": batches[0]["sources"][0]["description"] if batches else "",
            "plan": out.getvalue()}

append(lake, "t", 0, 1000)
got["all"] = drain("all_rows", stream(lake, "t"))
got["limited"] = drain("limited", stream(lake, "t", maxRecordsPerTrigger="300"))
got["by_bytes"] = drain("by_bytes", stream(lake, "t", maxBytesPerTrigger="2000"))
got["by_files"] = drain("by_files", stream(lake, "t", maxFilesPerTrigger="1"))
from coordinator import TransactionCoordinator, open_store
_logs = [TransactionCoordinator(open_store(lake)).partition("t", p) for p in (0, 1)]
for _log in _logs:
    _log.refresh()
got["files"] = sum(len(_log.segments) for _log in _logs)
got["headers"] = drain("headers", stream(lake, "t", includeHeaders="true"))
got["python"] = drain("python", stream(lake, "t", readPath="python"))
cast = (spark.readStream.format("txnlog").schema("id int, grp string").option("topic", "t")
        .option("startingOffsets", "earliest").load(lake))
got["cast"] = drain("cast", cast)  # the Python reader casts: the native scan cannot
# a checkpoint the Python stream wrote, continued by the JVM stream after more commits
append(lake, "t", 1000, 1500)
got["after_python"] = drain("python", stream(lake, "t"))
counts = stream(lake, "t").groupBy("grp").count()
q = (counts.writeStream.format("memory").queryName("counts").outputMode("complete")
     .option("checkpointLocation", f"{ck}/counts").trigger(availableNow=True).start())
q.awaitTermination()
append(lake, "t", 1500, 1800)
q = (counts.writeStream.format("memory").queryName("counts2").outputMode("complete")
     .option("checkpointLocation", f"{ck}/counts").trigger(availableNow=True).start())
q.awaitTermination()
got["counts"] = {r.grp: r["count"] for r in spark.sql("SELECT * FROM counts2").collect()}
# txnlog into txnlog under the extension alone: the JVM stream's batches written by the native write path
copy = (stream(lake, "t", maxRecordsPerTrigger="600").select("id", "grp").writeStream.format("txnlog")
        .option("topic", "copied").option("numPartitions", "2").option("checkpointLocation", f"{ck}/copy")
        .trigger(availableNow=True).start(lake))
copy.awaitTermination()
out = io.StringIO()
with contextlib.redirect_stdout(out):
    copy.explain()
got["copy"] = {"id": str(copy.id), "plan": out.getvalue(),
               "batches": len([p for p in copy.recentProgress if p["numInputRows"] > 0])}
# a replayed micro-batch: the run's last batch logged but not committed (a crash between the two), more commits
# meanwhile; Spark runs the logged offsets again and the batch reads exactly the rows it read the first time
seen = {}
def record(df, batch_id):
    seen.setdefault(str(batch_id), []).append(sorted(r.id for r in df.select("id").collect()))
def replay_run():
    q = (stream(lake, "r", maxRecordsPerTrigger="400").writeStream.foreachBatch(record)
         .option("checkpointLocation", f"{ck}/replay").trigger(availableNow=True).start())
    q.awaitTermination()
    return q.lastProgress["sources"][0]["description"]
append(lake, "r", 0, 1000)
got["replay_source"] = replay_run()
for name in ("2", ".2.crc"):
    os.remove(f"{ck}/replay/commits/{name}")
append(lake, "r", 1000, 1100)
replay_run()
got["replay"] = seen
# failures under the extension alone: a task failing mid-batch leaves nothing of its batch visible, the restart
# replays it once; then a zombie driver (a copy of the checkpoint, so the same query id, run after the live query
# went further) commits nothing
import shutil
def fallible(bad, where):
    df = stream(lake, "f", maxRecordsPerTrigger="200").select("id", "grp")
    if bad:
        df = df.selectExpr("if(id = 250, raise_error('bad row 250'), id) AS id", "grp")
    q = (df.writeStream.format("txnlog").option("topic", "f_out").option("numPartitions", "2")
         .option("checkpointLocation", f"{ck}/{where}").trigger(availableNow=True).start(lake))
    try:
        q.awaitTermination()
    except Exception as e:
        return {"error": str(e)[-3000:], "bad_row": "bad row 250" in str(e)}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        q.explain()
    return {"id": str(q.id), "plan": out.getvalue(), "error": None,
            "progress": [(p["batchId"], p["numInputRows"]) for p in q.recentProgress]}
def visible(topic):
    snap = read_snapshot(lake, [topic])
    return sorted(snap[topic].column("id").to_pylist()) if topic in snap else []
from coordinator import read_snapshot
append(lake, "f", 0, 400)
got["failed"] = fallible(True, "fail")
got["failed"]["visible"] = visible("f_out")
got["restarted"] = fallible(False, "fail")
got["restarted"]["visible"] = visible("f_out")
shutil.copytree(f"{ck}/fail", f"{ck}/zombie")
append(lake, "f", 400, 800)
got["live"] = fallible(False, "fail")
got["zombie"] = fallible(False, "zombie")
got["zombie"]["visible"] = visible("f_out")
staging = os.path.join(lake, "_native-staging")
got["staging_left"] = sorted(os.listdir(staging)) if os.path.isdir(staging) else []
print(json.dumps(got), flush=True)
'''

COPY = COMMON + r'''
lake, ck, mode = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "setup":
    append(lake, "src", 0, 6000)
    sys.exit(0)
writer = (stream(lake, "src", maxRecordsPerTrigger="500").select("id", "grp").writeStream.format("txnlog")
          .option("topic", "out").option("numPartitions", "2").option("checkpointLocation", ck))
if mode == "run":
    print("started", flush=True)
    writer.trigger(processingTime="0 seconds").start(lake).awaitTermination()
else:
    q = writer.trigger(availableNow=True).start(lake)
    q.awaitTermination()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        q.explain()
    print(json.dumps({"source": q.lastProgress["sources"][0]["description"], "plan": out.getvalue()}), flush=True)
'''


def child(tmp_path: Path, name: str, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(script)
    run = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "SPARK_TESTING": "1"})
    assert run.returncode == 0, run.stderr[-4000:]
    return run


def test_the_jvm_stream_reads_each_row_once_natively_and_leaves_what_it_cannot_read_to_the_python_stream(
        tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    run = child(tmp_path, "scenarios", SCENARIOS, lake, str(tmp_path / "ck"))
    got: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    everything = list(range(1000))
    for name in ("all", "limited"):
        assert got[name]["ids"] == everything, name
        assert got[name]["source"] == "txnlog", got[name]["source"]  # the JVM stream, not the Python one
        assert "FileScan" in got[name]["plan"] and "PythonDataSource" not in got[name]["plan"], got[name]["plan"]
    assert got["all"]["batches"] == 1
    assert got["limited"]["batches"] == 4  # 300 + 300 + 300 + 100: the stream reader's admission
    assert got["by_bytes"]["ids"] == everything and got["by_bytes"]["source"] == "txnlog"
    assert got["by_bytes"]["batches"] > 1  # the read limit in bytes crossed to the stream reader and back
    # a limit in files too: one micro-batch per segment file, each read whole
    assert got["by_files"]["ids"] == everything and got["by_files"]["source"] == "txnlog"
    assert got["by_files"]["batches"] == got["files"] > 1
    for name in ("headers", "python", "cast"):
        assert got[name]["ids"] == everything, name
        assert PYTHON_STREAM in got[name]["source"], got[name]["source"]
    assert got["after_python"]["ids"] == everything + list(range(1000, 1500))  # the sink holds both runs
    assert got["after_python"]["source"] == "txnlog"
    assert got["after_python"]["batches"] == 1
    assert got["counts"] == {"g0": 600, "g1": 600, "g2": 600}  # state kept across the restart
    copy = got["copy"]
    assert "TxnlogNativeStreamWrite" in copy["plan"], copy["plan"]  # the extension alone writes natively
    assert copy["batches"] == 3
    assert sorted(read_snapshot(lake, ["copied"])["copied"].column("id").to_pylist()) == list(range(1800))
    app = TransactionCoordinator(open_store(lake)).log.refresh().apps.get(f"spark.{copy['id']}")
    assert app is not None and app.version == 2 and app.token.startswith("p.")  # one native commit per batch
    replay = got["replay"]
    assert got["replay_source"] == "txnlog"
    assert sorted(replay) == ["0", "1", "2", "3"], sorted(replay)
    assert [len(replay[b]) for b in ("0", "1", "2", "3")] == [1, 1, 2, 1]  # batch 2 ran twice
    assert replay["2"][0] == replay["2"][1]  # the same rows both times, none of the later commits
    assert sorted(i for b in ("0", "1", "2", "3") for i in replay[b][0]) == list(range(1100))
    failed, restarted, live, zombie = got["failed"], got["restarted"], got["live"], got["zombie"]
    assert failed["error"] and failed["bad_row"], failed["error"]
    assert 250 not in failed["visible"] and len(set(failed["visible"])) == len(failed["visible"])
    assert restarted["error"] is None and restarted["visible"] == list(range(400))  # replayed once, nothing twice
    assert "TxnlogNativeStreamWrite" in restarted["plan"], restarted["plan"]
    assert live["error"] is None and live["id"] == restarted["id"] and live["progress"] == [[2, 200], [3, 200]]
    # the zombie (same query id, its checkpoint two batches behind) ran those batches again: each known committed
    # before a task ran (so no rows read), nothing published
    assert zombie["error"] is None and zombie["id"] == live["id"], zombie["error"]
    assert zombie["progress"] == [[2, 0], [3, 0]], zombie["progress"]
    assert "TxnlogNativeStreamWrite" in zombie["plan"], zombie["plan"]
    assert zombie["visible"] == list(range(800))
    fail_app = TransactionCoordinator(open_store(lake)).log.refresh().apps.get(f"spark.{live['id']}")
    assert fail_app is not None and fail_app.token.startswith("p.")
    assert got["staging_left"] == []  # the failed batch's staged files were deleted


@pytest.mark.slow
def test_a_sigkilled_driver_restarts_from_its_checkpoint_and_writes_each_row_once(tmp_path: Path) -> None:
    lake, ck = str(tmp_path / "lake"), str(tmp_path / "ck")
    child(tmp_path, "copy_topic", COPY, lake, ck, "setup")
    script = tmp_path / "copy_topic.py"
    proc = subprocess.Popen([sys.executable, str(script), lake, ck, "run"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "SPARK_TESTING": "1"},
                            start_new_session=True)
    try:
        commits = Path(ck) / "commits"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if commits.is_dir() and len([p for p in commits.iterdir() if p.name.isdigit()]) >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        done = len([p for p in commits.iterdir() if p.name.isdigit()])
        assert done < 12, "the query finished before it was killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the planner process it started
        proc.communicate()
    run = child(tmp_path, "copy_topic", COPY, lake, ck, "finish")
    finished = json.loads(run.stdout.strip().splitlines()[-1])
    assert finished["source"] == "txnlog"  # the JVM stream
    assert "TxnlogNativeStreamWrite" in finished["plan"], finished["plan"]  # written natively, extension alone
    ids = read_snapshot(lake, ["out"])["out"].column("id").to_pylist()
    assert sorted(ids) == list(range(6000))  # each row once: none lost, none written twice
