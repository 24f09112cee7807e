"""The same txnlog batch write on a real multi-executor cluster (``local-cluster[2,1,1024]``: two executor JVMs with
one core each, their Python workers, and shuffle-free tasks spread over both) and on ``local[2]`` (one JVM, two
task threads), side by side.

    python bench/bench_cluster.py [--rows 2000000] [--partitions 4] [--repeat 2]

Each master runs in its own child process (one SparkContext per process). A child starts its session, writes a
small warm-up batch (executors registered, Python workers started, modules imported), then times ``--repeat``
writes of ``--rows`` rows without a key (``df.write.format("txnlog").mode("append")``) into a fresh store each and
keeps the best (each write checked with the core reader, outside the timing). It prints the start-up (session to
first finished write) and the write time of both masters, and the ratio cluster / local (above 1 means the
cluster was slower).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MASTERS = ("local-cluster[2,1,1024]", "local[2]")

CHILD = r'''
import json, os, shutil, sys, time
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
start = time.perf_counter()
from pyspark.sql import SparkSession
from coordinator import read_snapshot

master, rows, partitions, repeat, root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
spark = (SparkSession.builder.master(master).appName("txnlog-bench-cluster").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g").getOrCreate())

def frame(n):
    return spark.range(n, numPartitions=partitions).selectExpr(
        "id", "cast(id % 1000 AS int) AS category", "rand(7) * 1000 AS amount",
        "concat('customer-', cast(id % 100000 AS string)) AS customer")

def write(n, lake):
    frame(n).write.format("txnlog").option("topic", "bench").mode("append").save(lake)

write(1000, f"{root}/warm-up")
startup = time.perf_counter() - start
times = []
for i in range(repeat):
    lake = f"{root}/lake-{i}"
    t = time.perf_counter()
    write(rows, lake)
    times.append(time.perf_counter() - t)
    assert read_snapshot(lake, ["bench"])["bench"].num_rows == rows, "the write lost or duplicated rows"
    shutil.rmtree(lake)
print(json.dumps({"startup": startup, "write": min(times), "writes": times}))
spark.stop()
'''


def run(master: str, rows: int, partitions: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="txnlog-bench-cluster-") as root:
        script = Path(root) / "child.py"
        script.write_text(CHILD)
        out = subprocess.run([sys.executable, str(script), master, str(rows), str(partitions), str(repeat), root],
                             capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"{master} failed:\n{out.stderr[-4000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4, help="Spark partitions (write tasks)")
    parser.add_argument("--repeat", type=int, default=2, help="timed writes per master (the best is kept)")
    args = parser.parse_args()
    results = {}
    for master in MASTERS:
        t = time.perf_counter()
        results[master] = run(master, args.rows, args.partitions, args.repeat)
        print(f"{master:<24} start-up {results[master]['startup']:6.1f} s   write of {args.rows:,} rows "
              f"{results[master]['write']:6.2f} s (best of {args.repeat})   [{time.perf_counter() - t:.0f} s in all]",
              flush=True)
    cluster, local = (results[m] for m in MASTERS)
    print(f"ratio {MASTERS[0]} / {MASTERS[1]}: write {cluster['write'] / local['write']:.2f}x, "
          f"start-up {cluster['startup'] / local['startup']:.2f}x")


if __name__ == "__main__":
    main()
