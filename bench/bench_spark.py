"""Spark benchmark, side by side in one run on the same data and the same local SparkSession:

1. batch write: ``df.write.format("txnlog")`` (the Python data source, and in a session with
   :func:`txnsink.enable_native` its native rule) and the native write path (``txnsink.write``), without a key and
   keyed on the timestamp column, against Spark's own Parquet writer (``df.write.parquet``), interleaved run by run
   (``--write-runs``, default 3, after ``--write-warmup`` untimed runs, default 2: the JVM's JIT and heap settle
   over the first two, where single writes of either side took up to 2x their later time; ``--writes`` picks
   some of the txnlog writes): each row reports the median time and the median and max ratio over the runs;
2. batch reads (see :mod:`bench_read`): every column into the ``noop`` sink, an aggregate over all six columns,
   an aggregate over two of them, through the data source (``spark.read.format("txnlog")``) and the native path
   (``txnsource.read``), against Spark's Parquet reader; and a streaming read of 1,000 records of a 1M-record
   segment;
3. streaming: the same Parquet file source and trigger into the txnlog sink against Spark's exactly-once file
   sink, and a txnlog -> txnlog pipeline; time per micro-batch.

    python bench/bench_spark.py [--rows 10000000] [--partitions 8] [--batches 10] [--repeat 2] [--read-rounds 5]
                                [--write-runs 3] [--write-warmup 2] [--writes-only] [--times day|distinct]
                                [--writes source,rule,native,source_keyed,rule_keyed,native_keyed]

It prints the timings and ratios (txnlog / Spark; below 1 means txnlog was faster).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench_read import print_reads, read_measures


def session(cores: int, extension: bool = False) -> Any:
    """The benchmarks' ``local[cores]`` session; with ``extension``, configured with txnlog's session extension
    (:func:`pyspark_txnlog.configure_spark_with_txnlog`)."""
    from pyspark.sql import SparkSession

    from pyspark_txnlog import configure_spark_with_txnlog

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("txnlog-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.memory", "6g")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
    )
    return (configure_spark_with_txnlog(builder) if extension else builder).getOrCreate()


#: ``event_time`` of the benchmark's rows: 86,400 distinct seconds (``day``, the default), or a distinct
#: millisecond per row (``distinct``), where Spark's writer drops its dictionary for the column early.
TIMES = {"day": "timestamp_seconds(1700000000 + id % 86400)",
         "distinct": "timestamp_micros(1700000000000000 + id * 1000)"}


def bench_frame(spark: Any, rows: int, partitions: int, times: str = "day") -> Any:
    """The benchmark's data, cached: six columns (long, int, double, string, timestamp, boolean); ``times`` picks
    the timestamps (:data:`TIMES`)."""
    df = spark.range(rows, numPartitions=partitions).selectExpr(
        "id",
        "cast(id % 1000 as int) AS category",
        "rand(7) * 1000 AS amount",
        "concat('customer-', cast(id % 100000 as string)) AS customer",
        f"{TIMES[times]} AS event_time",
        "id % 3 = 0 AS flagged",
    ).cache()
    df.count()
    return df


def best(fn: Callable[[], Any], repeat: int, reset: Callable[[], None] | None = None) -> float:
    times = []
    for _ in range(repeat):
        if reset is not None:
            reset()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


#: The txnlog writes, each timed against Spark's Parquet writer.
WRITES = ("source", "rule", "native", "source_keyed", "rule_keyed", "native_keyed")


def write_runs(spark: Any, df: Any, tmp: str, partitions: int, runs: int, warmup: int = 1,
               only: Sequence[str] = ()) -> dict[str, list[float]]:
    """Seconds of each write per run, interleaved (every write once per run, in a shuffled order), after ``warmup``
    untimed runs of every write (Python workers started, modules imported, JIT warm on both sides). The data
    source's unkeyed write of the last run stays in ``{tmp}/lake`` (topic ``bench``) for the reads. ``only``:
    the txnlog writes to run (names of :data:`WRITES`), all when empty."""
    import txnsink

    lake = f"{tmp}/lake"

    def parquet() -> None:
        df.write.mode("overwrite").parquet(f"{tmp}/parquet")

    def source(key: str | None, root: str, path: str = "python") -> Callable[[], None]:
        def go() -> None:
            w = df.write.format("txnlog").option("topic", "bench").option("numPartitions", str(partitions))
            w = w.option("writePath", path)
            (w.option("partitionKey", key) if key else w).mode("append").save(root)
        return go

    def native(key: str | None) -> Callable[[], None]:
        def go() -> None:
            got = txnsink.write(df, f"{tmp}/lake-native", "bench", key=key, numPartitions=partitions,
                                writePath="native")
            assert got.path == "native", got.reason
        return go

    txnsink.enable_native(spark)  # "rule": format("txnlog") with writePath=auto; "source" pins the data source
    writes: dict[str, Callable[[], None]] = {
        "spark": parquet, "source": source(None, lake), "rule": source(None, f"{tmp}/lake-rule", "auto"),
        "native": native(None), "source_keyed": source("event_time", f"{tmp}/lake-keyed"),
        "rule_keyed": source("event_time", f"{tmp}/lake-rule", "auto"),
        "native_keyed": native("event_time"),
    }
    folders = {"spark": "parquet", "source": "lake", "rule": "lake-rule", "native": "lake-native",
               "source_keyed": "lake-keyed", "rule_keyed": "lake-rule", "native_keyed": "lake-native"}
    writes = {k: fn for k, fn in writes.items() if k == "spark" or not only or k in only}
    times: dict[str, list[float]] = {k: [] for k in writes}
    for run in range(warmup + runs):
        order = list(writes.items())
        random.Random(run).shuffle(order)  # no write always follows the same one (a data source write's leftovers)
        for name, fn in order:
            shutil.rmtree(f"{tmp}/{folders[name]}", ignore_errors=True)
            # untimed: the previous write's dirty pages reach the disk now, not during this write (Spark's writer
            # leaves its files to the page cache; txnlog syncs each segment before its commit names it)
            os.sync()
            t0 = time.perf_counter()
            fn()
            if run >= warmup:
                times[name].append(time.perf_counter() - t0)
    for folder in ("lake-native", "lake-keyed", "lake-rule"):
        shutil.rmtree(f"{tmp}/{folder}", ignore_errors=True)
    return times


def print_writes(times: dict[str, list[float]]) -> None:
    """One row per txnlog write: median seconds, Spark's median, median and max ratio over the runs."""
    spark = times["spark"]
    rows = [("data source, no key", "source", "1.1x"), ("data source, native rule, no key", "rule", "1.1x"),
            ("native path, no key", "native", "1.05x"),
            ("data source, keyed on timestamp", "source_keyed", "1.3x"),
            ("data source, native rule, keyed", "rule_keyed", "1.3x"),
            ("native path, keyed on timestamp", "native_keyed", "1.3x")]
    print(f"\nbatch write vs Spark's Parquet writer ({len(spark)} interleaved runs after the warm-up; ratio per run)")
    print(f"{'':<34}{'txnlog s':>10}{'Spark s':>10}{'median':>8}{'max':>8}{'target':>8}   per run")
    for label, name, target in rows:
        if name not in times:
            continue
        ratios = [t / s for t, s in zip(times[name], spark, strict=True)]
        print(f"{label:<34}{statistics.median(times[name]):>10.1f}{statistics.median(spark):>10.1f}"
              f"{statistics.median(ratios):>7.2f}x{max(ratios):>7.2f}x{target:>8}   "
              + " ".join(f"{r:.2f}x" for r in ratios))


def stream_batches(spark: Any, query_fn: Callable[[str], Any], ckpt: str) -> tuple[float, int]:
    """Run a query to completion (availableNow); (median ms of a micro-batch, number of batches)."""
    q = query_fn(ckpt)
    q.awaitTermination()
    durations = [p["durationMs"].get("triggerExecution", 0) for p in q.recentProgress if p["numInputRows"] > 0]
    return statistics.median(durations), len(durations)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=8, help="Spark partitions of the data and topic partitions")
    ap.add_argument("--batches", type=int, default=10, help="micro-batches of the streaming comparison")
    ap.add_argument("--repeat", type=int, default=2, help="best of N for batch timings")
    ap.add_argument("--read-rounds", type=int, default=5, help="rounds of the read measures (medians)")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--write-runs", type=int, default=3, help="interleaved runs of the batch writes")
    ap.add_argument("--write-warmup", type=int, default=2, help="untimed interleaved runs before them")
    ap.add_argument("--writes-only", action="store_true", help="only the batch writes (no reads, no streaming)")
    ap.add_argument("--times", choices=sorted(TIMES), default="day",
                    help="event_time: 86,400 distinct seconds (day) or distinct per row (distinct)")
    ap.add_argument("--writes", default="", help=f"comma-separated txnlog writes to run with --writes-only, of "
                    f"{','.join(WRITES)} (default: all)")
    args = ap.parse_args()

    spark = session(args.cores)
    tmp = tempfile.mkdtemp(prefix="txnlog-bench-")
    try:
        df = bench_frame(spark, args.rows, args.partitions, args.times)
        parquet, lake = f"{tmp}/parquet", f"{tmp}/lake"

        only = [w for w in args.writes.split(",") if w] if args.writes_only else []
        unknown = sorted(set(only) - set(WRITES))
        if unknown:
            ap.error(f"--writes: unknown {', '.join(unknown)}; known: {', '.join(WRITES)}")
        writes = write_runs(spark, df, tmp, args.partitions, args.write_runs, args.write_warmup, only)
        if args.writes_only:
            print(f"\n{args.rows:,} rows ({args.times} timestamps); {args.partitions} partitions; local[{args.cores}]")
            print_writes(writes)
            return
        n_txn = spark.read.format("txnlog").option("topic", "bench").load(lake).count()
        assert n_txn == args.rows, f"txnlog read {n_txn} rows, wrote {args.rows}"
        reads = read_measures(spark, parquet, lake, tmp, args.read_rounds)

        # Streaming: the same file source (one file per micro-batch) into each sink.
        src = f"{tmp}/stream-src"
        df.repartition(args.batches).write.parquet(src)
        schema = spark.read.parquet(src).schema

        def source() -> Any:
            return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(src)

        file_ms, file_n = stream_batches(spark, lambda ck: source().writeStream.format("parquet")
                                         .option("path", f"{tmp}/file-sink").option("checkpointLocation", ck)
                                         .trigger(availableNow=True).start(), f"{tmp}/ck-file")
        txn_ms, txn_n = stream_batches(spark, lambda ck: source().writeStream.format("txnlog")
                                       .option("topic", "stream_out").option("numPartitions", str(args.partitions))
                                       .option("checkpointLocation", ck).trigger(availableNow=True).start(lake),
                                       f"{tmp}/ck-txn")
        per_batch = max(1, args.rows // args.batches)
        t2t_ms, t2t_n = stream_batches(spark, lambda ck: spark.readStream.format("txnlog").option("topic", "bench")
                                       .option("startingOffsets", "earliest")
                                       .option("maxRecordsPerTrigger", str(per_batch)).load(lake)
                                       .drop("_topic", "_partition", "_offset", "_timestamp")
                                       .writeStream.format("txnlog").option("topic", "t2t")
                                       .option("numPartitions", str(args.partitions))
                                       .option("checkpointLocation", ck).trigger(availableNow=True).start(lake),
                                       f"{tmp}/ck-t2t")
        out = spark.read.format("txnlog").option("topic", "stream_out").load(lake).count()
        assert out == args.rows, f"streaming sink published {out} rows of {args.rows}"
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    mb = "6 columns: long, int, double, string, timestamp, boolean"
    print(f"\n{args.rows:,} rows ({mb}); {args.partitions} partitions; local[{args.cores}]; best of {args.repeat}")
    print(f"{'':<34}{'txnlog s':>10}{'Spark s':>10}{'ratio':>8}{'target':>8}")
    print_writes(writes)
    print(f"\nstreaming, median ms per micro-batch ({args.rows // args.batches:,} rows each)")
    print(f"{'':<34}{'txnlog ms':>10}{'Spark ms':>10}{'ratio':>8}{'target':>8}")
    print(f"{'file source -> sink (vs file sink)':<34}{txn_ms:>10.0f}{file_ms:>10.0f}{txn_ms / file_ms:>7.2f}x"
          f"{'1.2x':>8}   ({txn_n} and {file_n} batches)")
    print(f"{'txnlog -> txnlog (vs file->file sink)':<34}{t2t_ms:>10.0f}{file_ms:>10.0f}{t2t_ms / file_ms:>7.2f}x"
          f"{'':>8}   ({t2t_n} batches)")
    print_reads(reads, args.read_rounds)


if __name__ == "__main__":
    main()
