"""Spark benchmark, side by side in one run on the same data and the same local SparkSession:

1. batch write: ``df.write.format("txnlog")`` against Spark's own Parquet writer;
2. batch reads (see :mod:`bench_read`): every column into the ``noop`` sink, an aggregate over all six columns,
   an aggregate over two of them, through the data source (``spark.read.format("txnlog")``) and the native path
   (``txnsource.read``), against Spark's Parquet reader; and a streaming read of 1,000 records of a 1M-record
   segment;
3. streaming: the same Parquet file source and trigger into the txnlog sink against Spark's exactly-once file
   sink, and a txnlog -> txnlog pipeline; time per micro-batch.

    python bench/bench_spark.py [--rows 10000000] [--partitions 8] [--batches 10] [--repeat 2] [--read-rounds 5]

It prints the timings and ratios (txnlog / Spark; below 1 means txnlog was faster).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench_read import print_reads, read_measures


def session(cores: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("txnlog-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.memory", "6g")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
        .getOrCreate()
    )


def bench_frame(spark: Any, rows: int, partitions: int) -> Any:
    """The benchmark's data, cached: six columns (long, int, double, string, timestamp, boolean)."""
    df = spark.range(rows, numPartitions=partitions).selectExpr(
        "id",
        "cast(id % 1000 as int) AS category",
        "rand(7) * 1000 AS amount",
        "concat('customer-', cast(id % 100000 as string)) AS customer",
        "timestamp_seconds(1700000000 + id % 86400) AS event_time",
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
    args = ap.parse_args()

    spark = session(args.cores)
    tmp = tempfile.mkdtemp(prefix="txnlog-bench-")
    try:
        df = bench_frame(spark, args.rows, args.partitions)
        parquet, lake = f"{tmp}/parquet", f"{tmp}/lake"

        def rm_parquet() -> None:
            shutil.rmtree(parquet, ignore_errors=True)

        def rm_lake() -> None:
            shutil.rmtree(lake, ignore_errors=True)

        w_spark = best(lambda: df.write.mode("overwrite").parquet(parquet), args.repeat, rm_parquet)
        w_txn = best(lambda: df.write.format("txnlog").option("topic", "bench")
                     .option("numPartitions", str(args.partitions)).mode("append").save(lake),
                     args.repeat, rm_lake)
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
    print(f"{'batch write (vs Parquet writer)':<34}{w_txn:>10.1f}{w_spark:>10.1f}{w_txn / w_spark:>7.2f}x{'1.3x':>8}")
    print(f"\nstreaming, median ms per micro-batch ({args.rows // args.batches:,} rows each)")
    print(f"{'':<34}{'txnlog ms':>10}{'Spark ms':>10}{'ratio':>8}{'target':>8}")
    print(f"{'file source -> sink (vs file sink)':<34}{txn_ms:>10.0f}{file_ms:>10.0f}{txn_ms / file_ms:>7.2f}x"
          f"{'1.2x':>8}   ({txn_n} and {file_n} batches)")
    print(f"{'txnlog -> txnlog (vs file->file sink)':<34}{t2t_ms:>10.0f}{file_ms:>10.0f}{t2t_ms / file_ms:>7.2f}x"
          f"{'':>8}   ({t2t_n} batches)")
    print_reads(reads, args.read_rounds)


if __name__ == "__main__":
    main()
