"""Streaming write benchmark, side by side in one run on the same rows and the same local SparkSession:

1. ``txnlog -> txnlog``: a streaming query over a backlog of ``--rows`` records of a txnlog topic
   (``Trigger.AvailableNow``; ``--limit files``, the default: ``maxFilesPerTrigger`` = the topic's segment files /
   ``--batches``, as the Parquet side's limit, so each micro-batch reads whole files; ``--limit rows``:
   ``maxRecordsPerTrigger`` = rows / ``--batches``, so micro-batches end inside files) into another topic, by
   default in a
   session with txnlog's session extension and no call (the source is the JVM stream, which starts no Python
   process, and the extension writes the micro-batches natively); ``--session plain``: a session without it, with
   ``txnsource.enable_native`` and ``txnsink.enable_native`` (the Python stream), against ``parquet -> parquet``:
   Spark's Parquet file source over the same rows (``--batches`` micro-batches of one file per core) into Spark's
   exactly-once file sink;
2. the read alone: the same txnlog backlog into Spark's ``noop`` sink;
3. the write alone: the same Parquet file source into the txnlog sink (the native micro-batch write, and with
   ``--python`` the data source's streaming writer, ``writePath`` = ``python``) against the file sink.

Runs are interleaved (``--runs``, default 3, after ``--warmup`` untimed runs, default 1); each query starts on a
fresh checkpoint and a fresh output. Each row reports the median wall time of a query (start to end) and of a
micro-batch, and the median ratio over the runs (txnlog / Spark; below 1 means txnlog was faster).

    python bench/bench_stream_write.py [--rows 4000000] [--partitions 8] [--batches 8] [--runs 3] [--warmup 1]
                                       [--python] [--session extension|plain] [--limit files|rows]
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

from bench_spark import bench_frame, session

#: What one run measures: (label, key), the Spark side of each comparison after its txnlog side.
MEASURES = (("txnlog -> txnlog (both native paths)", "t2t"), ("txnlog -> noop (the read alone)", "t2n"),
            ("parquet -> parquet file sink", "p2p"),
            ("parquet source -> txnlog (native)", "p2t"), ("parquet source -> txnlog (python)", "p2t_python"))


#: Each measure's micro-batches' phases (Spark's ``durationMs``), for ``--phases``.
PHASES: dict[str, list[dict[str, int]]] = {}


def run_query(start: Callable[[], Any], key: str = "") -> tuple[float, float, int, int]:
    """Run an availableNow query to its end: (wall seconds, median ms of a micro-batch, batches, rows); its
    micro-batches' phases are kept in :data:`PHASES` under ``key``."""
    t0 = time.perf_counter()
    q = start()
    q.awaitTermination()
    wall = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(f"query failed: {q.exception()}")
    done = [p for p in q.recentProgress if p["numInputRows"] > 0]
    batch_ms = statistics.median(p["durationMs"].get("triggerExecution", 0) for p in done) if done else 0.0
    PHASES.setdefault(key, []).extend(dict(p["durationMs"]) for p in done)
    return wall, batch_ms, len(done), sum(p["numInputRows"] for p in done)


def segment_files(lake: str, topic: str, partitions: int) -> int:
    """How many segment files ``topic`` of the store at ``lake`` holds."""
    from coordinator import TransactionCoordinator, open_store

    coord = TransactionCoordinator(open_store(lake))
    logs = [coord.partition(topic, p) for p in range(partitions)]
    for plog in logs:
        plog.refresh()
    return sum(len(plog.segments) for plog in logs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--partitions", type=int, default=8, help="Spark partitions of the data and topic partitions")
    ap.add_argument("--batches", type=int, default=8, help="micro-batches of each query")
    ap.add_argument("--runs", type=int, default=3, help="interleaved timed runs")
    ap.add_argument("--warmup", type=int, default=1, help="untimed interleaved runs before them")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--python", action="store_true", help="also the data source's streaming writer")
    ap.add_argument("--session", choices=("extension", "plain"), default="extension",
                    help="txnlog's session extension and no call, or a session with both enable_native calls")
    ap.add_argument("--limit", choices=("files", "rows"), default="files",
                    help="the txnlog source's limit: maxFilesPerTrigger (its files / batches, as the Parquet side) or "
                         "maxRecordsPerTrigger (rows / batches)")
    ap.add_argument("--phases", action="store_true",
                    help="also print the median ms of each phase of a micro-batch (Spark's durationMs)")
    args = ap.parse_args()

    import txnsink
    import txnsource

    spark = session(args.cores, extension=args.session == "extension")
    spark.sparkContext.setLogLevel("ERROR")
    if args.session == "plain":
        txnsource.enable_native(spark)
        txnsink.enable_native(spark)
    tmp = tempfile.mkdtemp(prefix="txnlog-bench-stream-")
    keys = [k for _, k in MEASURES if k != "p2t_python" or args.python]
    times: dict[str, list[tuple[float, float, int, int]]] = {k: [] for k in keys}
    try:
        df = bench_frame(spark, args.rows, args.partitions)
        lake, src = f"{tmp}/lake", f"{tmp}/parquet-src"
        txnsink.write(df, lake, "src", numPartitions=args.partitions)
        df.repartition(args.batches * args.cores).write.parquet(src)
        schema = spark.read.parquet(src).schema
        per_batch = -(-args.rows // args.batches)

        def files() -> Any:
            return spark.readStream.schema(schema).option("maxFilesPerTrigger", args.cores).parquet(src)

        src_files = segment_files(lake, "src", args.partitions)
        limit = ("maxFilesPerTrigger", str(-(-src_files // args.batches))) if args.limit == "files" else \
            ("maxRecordsPerTrigger", str(per_batch))

        def backlog() -> Any:
            return (spark.readStream.format("txnlog").option("topic", "src").option("startingOffsets", "earliest")
                    .option(*limit).load(lake)
                    .drop("_topic", "_partition", "_offset", "_timestamp", "_producerTimestamp"))

        def t2t(run: int) -> Any:
            return (backlog().writeStream.format("txnlog").option("topic", f"t2t{run}")
                    .option("numPartitions", str(args.partitions)).option("checkpointLocation", f"{tmp}/ck-t2t{run}")
                    .trigger(availableNow=True).start(lake))

        def t2n(run: int) -> Any:
            return (backlog().writeStream.format("noop").option("checkpointLocation", f"{tmp}/ck-t2n{run}")
                    .trigger(availableNow=True).start())

        def p2p(run: int) -> Any:
            return (files().writeStream.format("parquet").option("path", f"{tmp}/sink{run}")
                    .option("checkpointLocation", f"{tmp}/ck-p2p{run}").trigger(availableNow=True).start())

        def p2t(run: int, path: str = "auto") -> Any:
            return (files().writeStream.format("txnlog").option("topic", f"p2t{path}{run}")
                    .option("numPartitions", str(args.partitions)).option("writePath", path)
                    .option("checkpointLocation", f"{tmp}/ck-p2t{path}{run}").trigger(availableNow=True)
                    .start(lake))

        starts: dict[str, Callable[[int], Any]] = {"t2t": t2t, "t2n": t2n, "p2p": p2p, "p2t": p2t,
                                                    "p2t_python": lambda run: p2t(run, "python")}
        for run in range(args.warmup + args.runs):
            for k in keys:
                print(f"run {run}: {k}", file=sys.stderr, flush=True)
                got = run_query(lambda k=k, run=run: starts[k](run), k if run >= args.warmup else "")  # type: ignore[misc]
                # a native micro-batch that reads part of a file reports the file's rows as read (docs/spark.md):
                # for a txnlog source the rows are checked in what the query published, below
                assert got[3] == args.rows or (k.startswith("t2") and got[3] >= args.rows), \
                    f"{k}: the query read {got[3]} rows of {args.rows}"
                if run >= args.warmup:
                    times[k].append(got)
            for folder in os.listdir(tmp):
                if folder.startswith(("sink", "ck-")):
                    shutil.rmtree(f"{tmp}/{folder}", ignore_errors=True)
        out = spark.read.format("txnlog").option("topic", f"t2t{args.warmup + args.runs - 1}").load(lake).count()
        assert out == args.rows, f"txnlog -> txnlog published {out} rows of {args.rows}"
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{args.rows:,} rows (6 columns: long, int, double, string, timestamp, boolean); {args.partitions} "
          f"partitions; {args.batches} micro-batches (txnlog source: {limit[0]} = {limit[1]}); local[{args.cores}]; "
          f"{args.runs} interleaved runs after "
          f"{args.warmup} warm-up")
    print(f"{'':<36}{'query s':>9}{'batch ms':>10}{'batches':>9}{'vs Spark':>10}{'per run':>10}")
    for label, k in MEASURES:
        if k not in times:
            continue
        wall = [t[0] for t in times[k]]
        spark_wall = [t[0] for t in times["p2p"]]
        ratios = [a / b for a, b in zip(wall, spark_wall, strict=True)]
        ratio = "" if k == "p2p" else f"{statistics.median(ratios):>9.2f}x"
        per_run = "" if k == "p2p" else " " + " ".join(f"{r:.2f}x" for r in ratios)
        print(f"{label:<36}{statistics.median(wall):>9.1f}{statistics.median(t[1] for t in times[k]):>10.0f}"
              f"{times[k][0][2]:>9}{ratio:>10}{per_run}")
    if args.phases:
        names = sorted({n for k in times for d in PHASES.get(k, []) for n in d})
        print("\nmedian ms of a micro-batch's phases (Spark's durationMs)")
        print(f"{'':<12}" + "".join(f"{n[:14]:>15}" for n in names))
        for _, k in MEASURES:
            if k in times:
                cells = [statistics.median(d.get(n, 0) for d in PHASES[k]) for n in names]
                print(f"{k:<12}" + "".join(f"{c:>15.0f}" for c in cells))


if __name__ == "__main__":
    main()
