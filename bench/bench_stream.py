"""Streaming read benchmark, side by side in one session on the same rows: a backlog read by one
``Trigger.AvailableNow`` query into the ``noop`` sink, from start to termination (a new checkpoint each run).

In a session configured with txnlog's session extension (the default, ``--session extension``):

* ``spark.readStream.format("txnlog")``: the JVM stream (no Python process per query; each micro-batch read by
  Spark's Parquet reader), over the backlog as the session writes it (the native write: one file per task and topic
  partition, merged into one task per core);
* the same over the backlog as the data source's Python writer writes it (``writePath=python``: one file per Spark
  task and topic partition, 64 here);
* the same query with ``readPath=python`` (the Python stream and its reader);

In a plain session (``--session plain``): ``spark.readStream.format("txnlog")`` with :func:`txnsource.enable_native`
(the Python stream, each micro-batch read by Spark's Parquet reader), and without it. Both compare with Spark's
file source (``spark.readStream.parquet``) over the same rows written by Spark as Parquet.

The data is :func:`bench_spark.bench_frame`'s (six columns, ``--partitions`` topic partitions). Every variant runs
once per round, in an order shuffled for each round (:func:`bench_read.rounds`); the figures are the medians of
wall and CPU seconds and their ratios to the file source.

    python bench/bench_stream.py [--rows 4000000] [--partitions 8] [--rounds 5] [--session extension|plain]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from bench_read import rounds

TARGET = "1.2x"
#: The variant the target applies to under the session extension.
EXTENDED = "txnlog, extension"


def stream_measures(spark: Any, parquet: str, lake: str, tmp: str, n: int, extension: bool = False
                    ) -> dict[str, tuple[float, float, float]]:
    """(median wall s, median CPU s, median s of the micro-batches' ``triggerExecution``) of each variant over
    ``n`` rounds: the topic ``bench`` of ``lake`` and the Parquet copy ``parquet`` of the same rows, each read whole
    by an availableNow query into ``noop``. The wall time is the whole query's (start-up included: a Python data
    source starts Python processes for its stream reader); the trigger time is its micro-batches' alone."""
    import txnsource

    schema = spark.read.parquet(parquet).schema
    runs = iter(range(1 << 30))
    triggers: dict[str, list[float]] = {}

    def drain(name: str, stream: Any) -> None:
        q = (stream.writeStream.format("noop").option("checkpointLocation", f"{tmp}/ck-{next(runs)}")
             .trigger(availableNow=True).start())
        q.awaitTermination()
        assert q.exception() is None, q.exception()
        batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
        assert batches, "the query read nothing"
        triggers.setdefault(name, []).append(sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000)

    def txnlog(native: bool) -> Callable[[], None]:
        def go() -> None:
            (txnsource.enable_native if native else txnsource.disable_native)(spark)  # taken when the query starts
            stream = spark.readStream.format("txnlog").option("topic", "bench").option("startingOffsets", "earliest")
            drain("txnlog, enable_native" if native else "txnlog, Python reader", stream.load(lake))
        return go

    def extended(name: str, topic: str, **options: str) -> Callable[[], None]:
        def go() -> None:
            stream = spark.readStream.format("txnlog").option("topic", topic).option("startingOffsets", "earliest")
            for k, v in options.items():
                stream = stream.option(k, v)
            drain(name, stream.load(lake))
        return go

    def files() -> None:
        drain("Spark file source", spark.readStream.schema(schema).parquet(parquet))

    variants: dict[str, Callable[[], None]] = {"Spark file source": files}
    if extension:
        variants[EXTENDED] = extended(EXTENDED, "bench")
        variants["extension, 64 files"] = extended("extension, 64 files", "bench_py")
        variants["txnlog, Python reader"] = extended("txnlog, Python reader", "bench", readPath="python")
    else:
        variants.update({"txnlog, enable_native": txnlog(True), "txnlog, Python reader": txnlog(False)})
    try:
        got = rounds(spark, variants, n)
    finally:
        txnsource.disable_native(spark)
    # the warm-up run of each variant is the first of its trigger times
    return {k: (w, c, statistics.median(triggers[k][1:])) for k, (w, c) in got.items()}


def print_stream(got: dict[str, tuple[float, float, float]], rows: int, n: int) -> None:
    """The medians and ratios to Spark's file source (the whole query's wall and CPU time, its micro-batches'
    trigger time)."""
    base_w, base_c, base_t = got["Spark file source"]
    print(f"\nreadStream of a {rows:,}-row backlog, Trigger.AvailableNow into noop, medians of {n} rounds "
          "(ratio: txnlog / Spark's file source; query: start to termination, trigger: its micro-batches)")
    print(f"{'variant':<26}{'query s':>8}{'cpu s':>8}{'trig s':>8}{'query x':>9}{'cpu x':>8}{'trig x':>8}{'target':>8}")
    for variant, (w, c, t) in got.items():
        ratios = "" if variant == "Spark file source" else f"{w / base_w:>8.2f}x{c / base_c:>7.2f}x{t / base_t:>7.2f}x"
        target = TARGET if variant in ("txnlog, enable_native", EXTENDED) else ""
        print(f"{variant:<26}{w:>8.2f}{c:>8.2f}{t:>8.2f}{ratios:<24}{target:>8}")


def main() -> None:
    import bench_spark

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--partitions", type=int, default=8, help="Spark partitions of the data and topic partitions")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (medians)")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--session", choices=("extension", "plain"), default="extension",
                    help="configure txnlog's session extension (the JVM stream), or not (enable_native)")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    extension = args.session == "extension"
    spark = bench_spark.session(args.cores, extension=extension)
    tmp = tempfile.mkdtemp(prefix="txnlog-bench-stream-")
    try:
        df = bench_spark.bench_frame(spark, args.rows, args.partitions)
        df.write.parquet(f"{tmp}/parquet")
        df.write.format("txnlog").option("topic", "bench").option("numPartitions", str(args.partitions)) \
            .mode("append").save(f"{tmp}/lake")
        if extension:
            df.write.format("txnlog").option("topic", "bench_py").option("numPartitions", str(args.partitions)) \
                .option("writePath", "python").mode("append").save(f"{tmp}/lake")
        got = stream_measures(spark, f"{tmp}/parquet", f"{tmp}/lake", tmp, args.rounds, extension)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{args.rows:,} rows (6 columns: long, int, double, string, timestamp, boolean); {args.partitions} "
          f"partitions; local[{args.cores}]; session: {args.session}")
    print_stream(got, args.rows, args.rounds)


if __name__ == "__main__":
    main()
