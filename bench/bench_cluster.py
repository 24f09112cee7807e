"""The same txnlog batch writes on a real multi-executor cluster (``local-cluster[2,1,1024]``: two executor JVMs
with one core each, their Python workers, and shuffle-free tasks spread over both) and on ``local[2]`` (one JVM, two
task threads), side by side, each against Spark's own Parquet writer on the same master.

    python bench/bench_cluster.py [--rows 2000000] [--partitions 4] [--repeat 2] [--writes spark,source,...]

Writes (``--writes``, comma-separated; all by default): ``spark`` (Spark's Parquet writer, the reference),
``source`` (``df.write.format("txnlog")``, the Python data source), ``source_keyed`` (the same with
``partitionKey`` on the timestamp column), ``native`` (``txnsink.write``: Spark's Parquet writer and one commit) and
``native_keyed`` (``txnsink.write`` keyed on the timestamp column: the jar's partitioner in the executor JVMs).

Each master runs in its own child process (one SparkContext per process). A child starts its session, runs every
write once on a small batch (executors registered, Python workers started, modules imported, the jar shipped),
then times ``--repeat`` rounds of every write of ``--rows`` rows, each into a fresh folder, and keeps the best of
each (each txnlog write checked with the core reader, outside the timing). It prints the start-up (session to the
first finished write), the write times of both masters with their ratio to Spark's writer on the same master, and
the ratio cluster / local of each write (above 1 means the cluster was slower).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MASTERS = ("local-cluster[2,1,1024]", "local[2]")
WRITES = ("spark", "source", "source_keyed", "native", "native_keyed")

CHILD = r'''
import json, os, shutil, sys, time
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
start = time.perf_counter()
from pyspark.sql import SparkSession
from coordinator import read_snapshot
import txnsink

master, rows, partitions, repeat, root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
writes = sys.argv[6].split(",")
spark = (SparkSession.builder.master(master).appName("txnlog-bench-cluster").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g").getOrCreate())

def frame(n):
    return spark.range(n, numPartitions=partitions).selectExpr(
        "id", "cast(id % 1000 AS int) AS category", "rand(7) * 1000 AS amount",
        "concat('customer-', cast(id % 100000 AS string)) AS customer",
        "timestamp_micros(1700000000000000 + id * 1000) AS event_time")

def write(kind, n, lake):
    df = frame(n)
    if kind == "spark":
        df.write.mode("append").parquet(lake)
    elif kind.startswith("source"):
        w = df.write.format("txnlog").option("topic", "bench").option("numPartitions", 8)
        if kind == "source_keyed":
            w = w.option("partitionKey", "event_time")
        w.mode("append").save(lake)
    else:
        key = "event_time" if kind == "native_keyed" else None
        txnsink.write(df, lake, "bench", key=key, numPartitions=8, writePath="native")

for kind in writes:
    write(kind, 1000, f"{root}/warm-up-{kind}")
startup = time.perf_counter() - start
times = {kind: [] for kind in writes}
for i in range(repeat):
    for kind in writes:
        lake = f"{root}/{kind}-{i}"
        t = time.perf_counter()
        write(kind, rows, lake)
        times[kind].append(time.perf_counter() - t)
        if kind != "spark":
            assert read_snapshot(lake, ["bench"])["bench"].num_rows == rows, f"{kind} lost or duplicated rows"
        shutil.rmtree(lake)
print(json.dumps({"startup": startup, "writes": times}))
spark.stop()
'''


def run(master: str, rows: int, partitions: int, repeat: int, writes: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="txnlog-bench-cluster-") as root:
        script = Path(root) / "child.py"
        script.write_text(CHILD)
        out = subprocess.run([sys.executable, str(script), master, str(rows), str(partitions), str(repeat), root,
                              ",".join(writes)],
                             capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"{master} failed:\n{out.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4, help="Spark partitions (write tasks)")
    parser.add_argument("--repeat", type=int, default=2, help="timed rounds per master (the best of each is kept)")
    parser.add_argument("--writes", default=",".join(WRITES), help=f"comma-separated, of {', '.join(WRITES)}")
    args = parser.parse_args()
    writes = [w.strip() for w in args.writes.split(",") if w.strip()]
    unknown = [w for w in writes if w not in WRITES]
    if unknown or not writes:
        parser.error(f"--writes: unknown {unknown}; choose from {', '.join(WRITES)}")
    results = {}
    for master in MASTERS:
        t = time.perf_counter()
        results[master] = run(master, args.rows, args.partitions, args.repeat, writes)
        print(f"{master:<24} start-up {results[master]['startup']:6.1f} s   [{time.perf_counter() - t:.0f} s in all]",
              flush=True)
    best = {m: {w: min(ts) for w, ts in results[m]["writes"].items()} for m in MASTERS}
    print(f"\nwrites of {args.rows:,} rows, best of {args.repeat} (ratio to Spark's Parquet writer on the same master)")
    print(f"{'write':<14}" + "".join(f"{m:>30}" for m in MASTERS) + f"{'cluster / local':>18}")
    for w in writes:
        cells = []
        for m in MASTERS:
            ratio = f" ({best[m][w] / best[m]['spark']:.2f}x)" if "spark" in best[m] and w != "spark" else ""
            cells.append(f"{best[m][w]:.2f} s{ratio}")
        print(f"{w:<14}" + "".join(f"{c:>30}" for c in cells) + f"{best[MASTERS[0]][w] / best[MASTERS[1]][w]:>17.2f}x")
    cluster, local = (results[m] for m in MASTERS)
    print(f"start-up {MASTERS[0]} / {MASTERS[1]}: {cluster['startup'] / local['startup']:.2f}x")


if __name__ == "__main__":
    main()
