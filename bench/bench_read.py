"""Spark read benchmark, side by side in one session on the same data (run by ``bench_spark.py``, or alone):

* every column into the ``noop`` sink; an aggregate over all six columns; an aggregate over two of them;
  each through the data source (``spark.read.format("txnlog")`` with ``readPath=python``), the same
  ``format("txnlog")`` read in a session with :func:`txnsource.enable_native` ("native rule"), the native path
  (``txnsource.read``) and, for
  the two-column aggregate, both again with the two columns as a given schema, against Spark's Parquet reader;
  for the first two also the floor of any Python data source (:mod:`pyarrow_floor`: the topic's segment files
  decoded by pyarrow and handed to Spark, no metadata columns, no checks);
* a streaming read of 1,000 records of a 1,000,000-record segment (``maxRecordsPerTrigger``): the micro-batch
  time, and the row groups that read decodes, against Spark's Parquet reader reading the same 1,000 rows of the
  same file.

Every variant runs once per round, so a machine that slows down slows all of them, in an order shuffled for each
round (seeded), so that no variant always runs after the same one; the figures are the medians over the rounds of
wall time and of CPU time (Spark's JVM and Python workers, and this process).

    python bench/bench_read.py [--rows 10000000] [--partitions 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

AGG6 = ("sum(id)", "sum(category)", "sum(amount)", "max(customer)", "max(event_time)", "sum(cast(flagged AS int))")
AGG2 = ("sum(amount)", "max(category)")
TWO = "category int, amount double"
SIX = "id bigint, category int, amount double, customer string, event_time timestamp, flagged boolean"
BIG = 1_000_000
TARGETS = {("noop", "data source"): "1.5x", ("noop", "native"): "1.2x", ("agg6", "data source"): "1.2x",
           ("agg6", "native"): "1.1x", ("agg2", "data source"): "1.3x", ("agg2", "native"): "1.3x"}


def _proc_cpu(pid: int) -> tuple[int, float] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = sum(int(x) for x in fields[11:15])  # utime, stime and reaped children's
    return int(fields[1]), ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds(root: int) -> float:
    """CPU seconds of process ``root`` and all its descendants (Spark's JVM and its Python workers), plus this
    process (Linux ``/proc``; 0 elsewhere)."""
    if not os.path.isdir("/proc"):
        return 0.0
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (got := _proc_cpu(int(name))) is not None:
            procs[int(name)] = got
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += procs.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, []))
    return total + time.process_time()


def rounds(spark: Any, variants: dict[str, Callable[[], Any]], n: int) -> dict[str, tuple[float, float]]:
    """Run every variant once per round, in an order shuffled for each round (seeded: the same in every run), so
    that what one variant leaves behind, such as garbage in the JVM's heap, does not always weigh on the same next
    one; (median wall s, median CPU s) of each."""
    jvm = spark.sparkContext._gateway.proc.pid
    got: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in variants}
    for fn in variants.values():  # warm-up: class loading, code generation, file cache
        fn()
    shuffle = random.Random(20261122).shuffle
    for _ in range(n):
        order = list(variants.items())
        shuffle(order)
        for name, fn in order:
            c0, t0 = cpu_seconds(jvm), time.perf_counter()
            fn()
            got[name][0].append(time.perf_counter() - t0)
            got[name][1].append(cpu_seconds(jvm) - c0)
    return {k: (statistics.median(w), statistics.median(c)) for k, (w, c) in got.items()}


def read_measures(spark: Any, parquet: str, lake: str, tmp: str, n: int) -> dict[str, dict[str, tuple[float, float]]]:
    """The read measures over Spark's Parquet copy ``parquet`` and topic ``bench`` of ``lake`` (the same rows).

    Returns:
        measure -> variant -> (median wall s, median CPU s).
    """
    import txnsource

    def noop(df: Any) -> None:
        df.write.format("noop").mode("overwrite").save()

    def txn(schema: str | None = None, path: str = "python") -> Any:
        """``format("txnlog")``: the data source (``readPath=python``), or with ``path="auto"`` what
        :func:`txnsource.enable_native`'s rule makes of it."""
        r = spark.read.format("txnlog").option("topic", "bench").option("readPath", path)
        return (r if schema is None else r.schema(schema)).load(lake)

    def native(schema: str | None = None) -> Any:
        return txnsource.read(spark, lake, schema, topic="bench", readPath="native")

    floor_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyarrow_floor.py")
    spark.sparkContext.addPyFile(floor_py)  # the Python workers import the floor data source from it
    from pyarrow_floor import FloorSource

    spark.dataSource.register(FloorSource)
    segments = ",".join(sorted(glob.glob(f"{lake}/topics/bench/*/data/*.parquet")))

    def floor() -> Any:
        return spark.read.format("pyarrow-floor").option("paths", segments).option("schema", SIX).load()

    txnsource.enable_native(spark)
    out = {
        "noop": rounds(spark, {"Spark Parquet": lambda: noop(spark.read.parquet(parquet)),
                               "data source": lambda: noop(txn()),
                               "data source, native rule": lambda: noop(txn(path="auto")),
                               "pyarrow floor": lambda: noop(floor()),
                               "native": lambda: noop(native())}, n),
        "agg6": rounds(spark, {"Spark Parquet": lambda: spark.read.parquet(parquet).selectExpr(*AGG6).collect(),
                               "data source": lambda: txn().selectExpr(*AGG6).collect(),
                               "data source, native rule": lambda: txn(path="auto").selectExpr(*AGG6).collect(),
                               "pyarrow floor": lambda: floor().selectExpr(*AGG6).collect(),
                               "native": lambda: native().selectExpr(*AGG6).collect()}, n),
        "agg2": rounds(spark, {"Spark Parquet": lambda: spark.read.parquet(parquet).selectExpr(*AGG2).collect(),
                               "data source": lambda: txn().selectExpr(*AGG2).collect(),
                               "data source, schema": lambda: txn(TWO).selectExpr(*AGG2).collect(),
                               "data source, native rule": lambda: txn(path="auto").selectExpr(*AGG2).collect(),
                               "native": lambda: native().selectExpr(*AGG2).collect(),
                               "native, schema": lambda: native(TWO).selectExpr(*AGG2).collect()}, n),
    }
    txnsource.disable_native(spark)
    out["stream"] = stream_measure(spark, tmp, n)
    return out


def stream_measure(spark: Any, tmp: str, n: int) -> dict[str, tuple[float, float]]:
    """1,000 records of a 1,000,000-record segment: a txnlog micro-batch (its ``triggerExecution`` time) and
    Spark's Parquet reader reading the same rows of the same file; and the row groups the read decodes."""
    import json

    import pyarrow as pa

    from coordinator import Producer, ProducerConfig, create_topic, open_store
    from coordinator.segments import DECODED
    from txnsource import make_stream_reader, read_schema

    lake = f"{tmp}/stream-lake"
    ids = pa.array(range(BIG), pa.int64())
    create_topic(open_store(lake), "big", pa.schema([("id", pa.int64()), ("v", pa.float64())]), partitions=1)
    producer = Producer(lake, "bench-big", config=ProducerConfig(segment_target_bytes=1 << 40))
    producer.init_transactions()
    with producer.transaction():
        producer.send("big", pa.table({"id": ids, "v": pa.compute.multiply(ids, 0.5)}), partition=0)
    (segment,) = open_store(lake).list("topics/big/0/data")
    first = BIG // 2 + 7_000
    start = json.dumps({"big": {"0": first}})
    runs = 0

    def micro_batch() -> float:
        """One micro-batch of 1,000 records (the query is stopped after its first batch)."""
        nonlocal runs
        runs += 1
        q = (spark.readStream.format("txnlog").option("topic", "big").option("startingOffsets", start)
             .option("maxRecordsPerTrigger", "1000").load(lake).writeStream.format("noop")
             .option("checkpointLocation", f"{tmp}/stream-ck-{runs}").start())
        try:
            while not any(p["numInputRows"] for p in q.recentProgress):
                q.awaitTermination(0.05)
        finally:
            spark.sparkContext.setLogLevel("OFF")  # stopping interrupts the next batch, which Spark logs as errors
            q.stop()
            spark.sparkContext.setLogLevel("WARN")
        batch = next(p for p in q.recentProgress if p["numInputRows"])
        assert batch["numInputRows"] == 1000, batch
        return float(batch["durationMs"]["triggerExecution"]) / 1000

    seg_path = f"{lake}/topics/big/0/data/{segment}"
    times: list[float] = []
    got = rounds(spark, {
        "txnlog stream": lambda: times.append(micro_batch()),
        "Spark Parquet": lambda: spark.read.parquet(seg_path).where(f"id >= {first} AND id < {first + 1000}")
        .write.format("noop").mode("overwrite").save(),
    }, n)
    got["txnlog micro-batch"] = (statistics.median(times), 0.0)
    options = {"path": lake, "topic": "big", "startingOffsets": start, "maxRecordsPerTrigger": "1000"}
    reader = make_stream_reader(options, read_schema(options))
    begin = reader.initialOffset()
    end = reader.latestOffset(begin, reader.getDefaultReadLimit())
    DECODED.reset()
    rows = sum(b.num_rows for p in reader.partitions(begin, end) for b in reader.read(p))
    got["decoded"] = (float(DECODED.row_groups), float(DECODED.rows))
    assert rows == 1000, rows
    return got


LABELS = {"noop": "read all columns into noop", "agg6": "aggregate over all six columns",
          "agg2": "aggregate over two of six columns"}


def print_reads(reads: dict[str, dict[str, tuple[float, float]]], n: int) -> None:
    """Print the read measures with ratios to Spark's Parquet reader (wall and CPU)."""
    print(f"\nbatch reads, medians of {n} rounds (ratio: txnlog / Spark Parquet)")
    print(f"{'':<36}{'variant':<26}{'wall s':>8}{'cpu s':>8}{'wall x':>8}{'cpu x':>8}{'target':>8}")
    for key, label in LABELS.items():
        base_w, base_c = reads[key]["Spark Parquet"]
        for i, (variant, (w, c)) in enumerate(reads[key].items()):
            ratios = "" if variant == "Spark Parquet" else f"{w / base_w:>7.2f}x{c / base_c:>7.2f}x"
            target = TARGETS.get((key, variant.split(",")[0]), "")
            print(f"{label if i == 0 else '':<36}{variant:<26}{w:>8.2f}{c:>8.2f}{ratios:<16}{target:>8}")
    s = reads["stream"]
    groups, rows = s["decoded"]
    print(f"\nstreaming read of 1,000 records of a {BIG:,}-record segment: micro-batch "
          f"{s['txnlog micro-batch'][0]:.2f} s (query {s['txnlog stream'][0]:.2f} s); Spark Parquet reads the same "
          f"rows in {s['Spark Parquet'][0]:.2f} s; decoded {groups:.0f} row groups ({rows:,.0f} rows), target <= 2")


def main() -> None:
    import bench_spark
    from pyspark.sql import SparkSession

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=8, help="Spark partitions of the data and topic partitions")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (medians)")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark: SparkSession = bench_spark.session(args.cores)
    tmp = tempfile.mkdtemp(prefix="txnlog-bench-read-")
    try:
        df = bench_spark.bench_frame(spark, args.rows, args.partitions)
        df.write.parquet(f"{tmp}/parquet")
        df.write.format("txnlog").option("topic", "bench").option("numPartitions", str(args.partitions)) \
            .mode("append").save(f"{tmp}/lake")
        reads = read_measures(spark, f"{tmp}/parquet", f"{tmp}/lake", tmp, args.rounds)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{args.rows:,} rows (6 columns: long, int, double, string, timestamp, boolean); {args.partitions} "
          f"partitions; local[{args.cores}]")
    print_reads(reads, args.rounds)


if __name__ == "__main__":
    main()
