"""Consume-transform-produce with Spark, killed and restarted, exactly once.

    python examples/ctp_demo.py [--lake DIR] [--records N] [--kills K] [--seed S]

1. Creates topic ``orders`` and fills it with N records through the Python producer, in several transactions,
   plus some aborted transactions whose records must never be read.
2. Runs ``orders -> transform -> enriched`` as a Spark streaming query (``spark.readStream.format("txnlog")`` ...
   ``writeStream.format("txnlog")``) in a child process, SIGKILLs the whole child (driver, JVM and workers) K times
   at seeded random moments mid-stream, and restarts it from the same checkpoint until the input is processed.
3. Reads ``enriched`` with the core client and compares it with the transformed input: records in, records out,
   duplicates, missing. Exits 0 only if the output is exactly once.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

IN_TOPIC, OUT_TOPIC = "orders", "enriched"
ABORTED_ID_BASE = 10_000_000


def transform_expected(row: dict) -> tuple:
    """What the streaming query makes of one input record (kept in step with ``run_child``)."""
    return (row["id"], row["customer"].upper(), round(row["amount"] * 100))


def check_java() -> None:
    """Exit with a clear message when no Java runtime is available (Spark needs Java 17 or 21)."""
    java = shutil.which("java") or (os.path.join(os.environ["JAVA_HOME"], "bin", "java")
                                    if os.environ.get("JAVA_HOME") else None)
    if not java or not os.path.exists(java):
        print("This demo runs Spark, which needs a Java runtime (17 or 21). Install one, e.g.\n"
              "  sudo apt-get install openjdk-17-jre-headless   (Debian/Ubuntu)\n"
              "  brew install openjdk@17                        (macOS)\n"
              "and make sure `java` is on PATH or JAVA_HOME is set.", file=sys.stderr)
        sys.exit(2)


def produce_input(lake: str, records: int, rng: random.Random) -> tuple[int, int, int]:
    """Fill ``orders`` with ``records`` committed records and some aborted ones. Returns the committed count, the
    aborted records and the aborted transactions."""
    import pyarrow as pa

    from coordinator import Producer, create_topic, open_store

    schema = pa.schema([("id", pa.int64()), ("customer", pa.string()), ("amount", pa.float64())])
    create_topic(open_store(lake), IN_TOPIC, schema, 3)
    producer = Producer(lake, "demo-input")
    producer.init_transactions()
    sent, txn, aborted, aborts = 0, 0, 0, 0
    while sent < records:
        n = min(records - sent, max(1, rng.randint(records // 12 + 1, records // 6 + 1)))
        rows = [{"id": i, "customer": f"c{rng.randint(0, 49)}", "amount": round(rng.uniform(1, 500), 2)}
                for i in range(sent, sent + n)]
        with producer.transaction():
            producer.send(IN_TOPIC, rows, key="customer")
        sent += n
        txn += 1
        if txn % 3 == 1:  # an aborted transaction now and then: its records must never come out
            producer.begin_transaction()
            producer.send(IN_TOPIC, [{"id": ABORTED_ID_BASE + txn * 1000 + j, "customer": "aborted", "amount": 0.0}
                                     for j in range(5)])
            producer.flush()
            producer.abort_transaction()
            aborted, aborts = aborted + 5, aborts + 1
    return sent, aborted, aborts


def run_child(lake: str, checkpoint: str, per_trigger: int) -> None:
    """The streaming query (runs in a child process; killed and restarted by the parent)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("txnlog-ctp-demo")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    src = (spark.readStream.format("txnlog").option("topic", IN_TOPIC).option("startingOffsets", "earliest")
           .option("maxRecordsPerTrigger", str(per_trigger)).load(lake))
    out = src.selectExpr("id", "upper(customer) as customer", "cast(round(amount * 100) as long) as cents")
    q = (out.writeStream.format("txnlog").option("topic", OUT_TOPIC).option("numPartitions", "2")
         .option("partitionKey", "customer").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start(lake))
    q.awaitTermination()
    spark.stop()


def out_count(lake: str) -> int:
    from coordinator import TopicNotFoundError, read_snapshot

    try:
        return read_snapshot(lake, [OUT_TOPIC])[OUT_TOPIC].num_rows
    except TopicNotFoundError:
        return 0


def start_child(lake: str, checkpoint: str, per_trigger: int, log: str) -> subprocess.Popen:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--lake", lake, "--checkpoint", checkpoint,
           "--per-trigger", str(per_trigger)]
    with open(log, "ab") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def in_flight(lake: str, checkpoint: str) -> tuple[int, int] | None:
    """The micro-batch the query is in the middle of, and how many segment files it has staged and not committed
    yet: Spark logged its offsets (``offsets/N``) and not its commit (``commits/N``), and its tasks wrote output.
    None between batches."""
    from coordinator import TransactionCoordinator, open_store
    from coordinator.reader import uncommitted_paths

    def ids(folder: str) -> set[int]:
        try:
            return {int(n) for n in os.listdir(os.path.join(checkpoint, folder)) if n.isdigit()}
        except FileNotFoundError:
            return set()

    pending = ids("offsets") - ids("commits")
    if not pending or not os.path.isdir(os.path.join(lake, "topics", OUT_TOPIC)):
        return None
    store = open_store(lake)
    coord = TransactionCoordinator(store)
    staged = sum(len(uncommitted_paths(store, coord.partition(OUT_TOPIC, p))) for p in range(2))
    return (max(pending), staged) if staged else None


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child and everything it started (its JVM and Python workers): a real driver crash."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def proof(lake: str) -> bool:
    """Compare the output topic with the transformed committed input; print the proof line."""
    from coordinator import read_snapshot

    inp = read_snapshot(lake, [IN_TOPIC])[IN_TOPIC].select(["id", "customer", "amount"]).to_pylist()
    out = read_snapshot(lake, [OUT_TOPIC])[OUT_TOPIC].select(["id", "customer", "cents"]).to_pylist()
    expected = Counter(transform_expected(r) for r in inp)
    got = Counter((r["id"], r["customer"], r["cents"]) for r in out)
    duplicates = sum(c - 1 for c in got.values() if c > 1)
    missing = sum((expected - got).values())
    unexpected = sum((got - expected).values()) - duplicates
    aborted_seen = sum(1 for r in out if r["id"] >= ABORTED_ID_BASE)
    ok = duplicates == 0 and missing == 0 and unexpected == 0 and aborted_seen == 0
    print(f"records in: {len(inp)}, records out: {len(out)}, duplicates {duplicates}, missing {missing}, "
          f"unexpected {unexpected}, aborted records read {aborted_seen} -> "
          f"{'EXACTLY ONCE' if ok else 'NOT EXACTLY ONCE'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lake", help="store root (default: a fresh temporary folder)")
    ap.add_argument("--records", type=int, default=3000, help="input records (default 3000)")
    ap.add_argument("--kills", type=int, default=1, help="SIGKILLs of the streaming driver (default 1)")
    ap.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", help=argparse.SUPPRESS)
    ap.add_argument("--per-trigger", type=int, default=300, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        run_child(args.lake, args.checkpoint, args.per_trigger)
        return 0
    check_java()
    if args.records < 10 or args.kills < 0:
        ap.error("--records must be at least 10 and --kills not negative")
    rng = random.Random(args.seed)
    work = args.lake or tempfile.mkdtemp(prefix="txnlog-demo-")
    lake = os.path.join(work, "lake") if not args.lake else os.path.abspath(args.lake)
    if os.path.exists(os.path.join(lake, "topics", IN_TOPIC)):
        print(f"{lake} already holds a demo run; give a fresh --lake", file=sys.stderr)
        return 2
    checkpoint = os.path.join(os.path.dirname(lake) if args.lake else work, "ctp-checkpoint-" + str(args.seed))
    log = os.path.join(os.path.dirname(checkpoint), "ctp-driver.log")
    t0 = time.time()
    n, aborted, aborts = produce_input(lake, args.records, rng)
    print(f"produced {n} committed records into '{IN_TOPIC}' in {lake}, and {aborted} records in {aborts} aborted "
          "transactions that no reader may see")
    per_trigger = max(10, n // 6)
    targets = sorted(rng.uniform(0.1, 0.85) * n for _ in range(args.kills))
    kills_done = 0
    in_flight_batches: list[int] = []
    for target in targets:
        child = start_child(lake, checkpoint, per_trigger, log)
        while child.poll() is None and out_count(lake) < target:
            time.sleep(0.2)
        if child.poll() is not None:
            print(f"the query finished before kill point {int(target)}; not killed")
            continue
        # kill it in the middle of a micro-batch: its offsets logged, its output staged, its commit not made
        batch = None
        while child.poll() is None and (batch := in_flight(lake, checkpoint)) is None:
            time.sleep(0.02)
        if child.poll() is not None or batch is None:
            print(f"the query finished before kill point {int(target)}; not killed")
            continue
        at = out_count(lake)
        kill_group(child)
        kills_done += 1
        in_flight_batches.append(batch[0])
        print(f"SIGKILLed the streaming driver (pid {child.pid}) with {at} of {n} records published, in the middle of "
              f"micro-batch {batch[0]} ({batch[1]} segment file(s) staged, not committed)")
    restarts = 0
    while True:
        child = start_child(lake, checkpoint, per_trigger, log)
        rc = child.wait(timeout=600)
        restarts += 1
        if rc != 0:
            print(f"the streaming driver exited with {rc}; see {log}", file=sys.stderr)
            return 1
        if out_count(lake) >= n or restarts >= 3:
            break
    print(f"{kills_done} kill(s), {kills_done + restarts} driver run(s), {time.time() - t0:.0f} s")
    if in_flight_batches:
        print(f"micro-batch(es) {', '.join(map(str, sorted(set(in_flight_batches))))} were in flight when killed: the "
              "restarted query ran each again under the same batch id, and the sink committed it once")
    return 0 if proof(lake) else 1


if __name__ == "__main__":
    sys.exit(main())
