"""Core benchmark: commit latency and store requests per transaction against touched partitions, and producer
throughput against a plain pyarrow Parquet write of the same data to the same store.

Runs on local disk and on an S3-compatible endpoint (moto's server on loopback, started here), side by side in one
run, and prints a table with ratios.

    python bench/bench_core.py [--commits 20] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from coordinator import Producer, ProducerConfig, Store, TransactionCoordinator, create_topic, open_store
from coordinator.segments import stage_segment

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.float64()), ("name", pa.string()), ("ts", pa.int64())])


def make_table(rows: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "value": pa.array(rng.random(rows)),
            "name": pa.array([f"name-{i % 1000}" for i in range(rows)]),
            "ts": pa.array(rng.integers(0, 2**40, rows, dtype=np.int64)),
        },
        schema=SCHEMA,
    )


@contextmanager
def s3_endpoint() -> Iterator[tuple[str, dict[str, str]]]:
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    opts = {"s3.endpoint": endpoint, "s3.key": "bench", "s3.secret": "bench", "s3.region": "us-east-1"}
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                 region_name="us-east-1").create_bucket(Bucket="bench")
    try:
        yield "s3://bench/" + uuid.uuid4().hex, opts
    finally:
        server.stop()


def bench_commits(store: Store, commits: int) -> list[tuple[int, float, float, float]]:
    """(touched partitions, median commit ms, conditional writes per commit, all requests per commit)."""
    topic = "c" + uuid.uuid4().hex[:8]
    create_topic(store, topic, SCHEMA, 16)
    coord = TransactionCoordinator(store)
    ident = coord.init_producer("bench-" + topic)
    small = make_table(10)
    out = []
    n = 0
    for touched in (1, 4, 16):
        times, cond, total = [], [], []
        for _ in range(commits):
            txn = ident.txn_id(n)
            n += 1
            segs = [stage_segment(store, topic, p, small, f"{txn}~{p}") for p in range(touched)]
            before = store.counters.snapshot()
            t0 = time.perf_counter()
            coord.commit(ident, txn, segs)
            times.append((time.perf_counter() - t0) * 1000)
            after = store.counters.snapshot()
            cond.append(after.get("put_if_absent", 0) - before.get("put_if_absent", 0))
            total.append(sum(after.values()) - sum(before.values()))
        out.append((touched, statistics.median(times), statistics.mean(cond), statistics.mean(total)))
    return out


def bench_throughput(store: Store, table: pa.Table, topic: str | None = None) -> tuple[float, float]:
    """(txnlog producer MB/s, plain pyarrow Parquet write MB/s) for the same table to the same store: the producer
    writes ``topic`` (4 partitions; a fresh name if None) in one transaction, the plain write four Parquet files
    under ``plain/<topic>/``."""
    topic = topic or "p" + uuid.uuid4().hex[:8]
    create_topic(store, topic, SCHEMA, 4)
    mb = table.nbytes / 1e6
    producer = Producer(store, "tp-" + topic, config=ProducerConfig(segment_target_bytes=32 * 1024 * 1024))
    producer.init_transactions()
    t0 = time.perf_counter()
    with producer.transaction():
        producer.send(topic, table)
    txn_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for part in range(4):
        sub = table.slice(part * table.num_rows // 4, table.num_rows // 4)
        buf = io.BytesIO()
        pq.write_table(sub, buf, compression="zstd")
        store.put(f"plain/{topic}/{part}.parquet", buf.getvalue())
    plain_s = time.perf_counter() - t0
    return mb / txn_s, mb / plain_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=20, help="commits per configuration")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows for the throughput comparison")
    args = ap.parse_args()
    table = make_table(args.rows)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["local"] = (bench_commits(open_store(tmp + "/c"), args.commits),
                            bench_throughput(open_store(tmp + "/t"), table))
    with s3_endpoint() as (url, opts):
        results["s3 (loopback)"] = (bench_commits(open_store(url + "/c", opts), args.commits),
                                    bench_throughput(open_store(url + "/t", opts), table))
    print("\nCommit cost (median latency; store requests per commit)")
    print(f"{'store':<15}{'partitions':>11}{'commit ms':>11}{'cond. writes':>14}{'limit (N+2)':>13}"
          f"{'all requests':>14}")
    for name, (commits, _) in results.items():
        for touched, ms, cond, total in commits:
            print(f"{name:<15}{touched:>11}{ms:>11.1f}{cond:>14.1f}{touched + 2:>13}{total:>14.1f}")
    print(f"\nProducer throughput, {args.rows:,} rows ({table.nbytes / 1e6:.0f} MB in memory)")
    print(f"{'store':<15}{'txnlog MB/s':>13}{'pyarrow MB/s':>14}{'ratio':>8}")
    for name, (_, (txn, plain)) in results.items():
        print(f"{name:<15}{txn:>13.1f}{plain:>14.1f}{plain / txn:>7.2f}x")


if __name__ == "__main__":
    main()
