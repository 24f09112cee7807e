"""Maintenance benchmark, side by side in one run:

1. requests and time to open a partition and read its last record after many small commits, with and without
   checkpoints (and after a maintenance pass: compaction + checkpoint);
2. read throughput of the same partition before and after compaction;
3. txnlog against delta-rs (the ``deltalake`` package) on the same store: commits per second for small appends,
   and append throughput for one large append; on local disk and on an S3 endpoint (moto's server on loopback).

    python bench/bench_maintenance.py [--commits 10000] [--s3-commits 500] [--appends 200] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from bench_core import SCHEMA, make_table, s3_endpoint

from coordinator import Producer, Store, TransactionCoordinator, create_topic, open_store, read_snapshot
from coordinator.maintenance import maintain
from coordinator.reader import output_schema, read_range


def fill(store: Store, commits: int, rows_per_commit: int, checkpoint_interval: int) -> None:
    create_topic(store, "t", SCHEMA, 1)
    coord = TransactionCoordinator(store, checkpoint_interval=checkpoint_interval)
    producer = Producer(store, "fill", coordinator=coord)
    producer.init_transactions()
    chunk = make_table(rows_per_commit)
    for _ in range(commits):
        with producer.transaction():
            producer.send("t", chunk, partition=0)


def open_and_read_last(url: str, options: dict[str, str]) -> tuple[float, int]:
    """(seconds, requests) for a new process to open the coordinator and the partition and read the last record."""
    store = open_store(url, options, probe=False)
    t0 = time.perf_counter()
    coord = TransactionCoordinator(store)
    plog = coord.partition("t", 0)
    batches = list(read_range(store, plog, plog.end_offset - 1, plog.end_offset,
                              output_schema(pa.schema(SCHEMA))))
    assert sum(b.num_rows for b in batches) == 1
    return time.perf_counter() - t0, store.counters.total()


def read_all(url: str, options: dict[str, str]) -> tuple[float, int]:
    store = open_store(url, options, probe=False)
    t0 = time.perf_counter()
    table = read_snapshot(store, ["t"])["t"]
    return time.perf_counter() - t0, table.num_rows


def bench_open(name: str, url: str, opts: dict[str, str], commits: int) -> list[tuple[str, ...]]:
    out = []
    for label, interval in (("no checkpoints", 0), ("checkpoints every 100", 100)):
        u = f"{url}/{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        fill(open_store(u, opts), commits, 10, interval)
        fill_s = time.perf_counter() - t0
        secs, reqs = open_and_read_last(u, opts)
        out.append((name, label, f"{commits}", f"{secs * 1000:.0f}", f"{reqs}", f"{commits / fill_s:.0f}"))
        if interval:
            read_s, n = read_all(u, opts)
            maintain(TransactionCoordinator(open_store(u, opts)), grace_ms=0)
            secs2, reqs2 = open_and_read_last(u, opts)
            out.append((name, "after compaction", f"{commits}", f"{secs2 * 1000:.0f}", f"{reqs2}", "-"))
            read2_s, n2 = read_all(u, opts)
            assert n == n2
            COMPACTION_READS.append((name, n, n / read_s, n / read2_s))
    return out


COMPACTION_READS: list[tuple[str, int, float, float]] = []


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_vs_delta(name: str, url: str, opts: dict[str, str], appends: int, big: pa.Table) -> tuple[str, ...]:
    from deltalake import write_deltalake

    small = make_table(100)
    dl_opts: dict[str, str] = {}
    if opts:
        dl_opts = {"AWS_ENDPOINT_URL": opts["s3.endpoint"], "AWS_ALLOW_HTTP": "true",
                   "AWS_ACCESS_KEY_ID": opts["s3.key"], "AWS_SECRET_ACCESS_KEY": opts["s3.secret"],
                   "AWS_REGION": opts["s3.region"], "AWS_CONDITIONAL_PUT": "etag"}
    root = f"{url}/{uuid.uuid4().hex[:8]}"
    store = open_store(root + "/txnlog", opts)
    create_topic(store, "t", SCHEMA, 1)
    producer = Producer(store, "vs-delta")
    producer.init_transactions()

    def txn_small() -> None:
        for _ in range(appends):
            with producer.transaction():
                producer.send("t", small, partition=0)

    def delta_small() -> None:
        for _ in range(appends):
            write_deltalake(root + "/delta-small", small, mode="append", storage_options=dl_opts or None)

    def txn_big() -> None:
        with producer.transaction():
            producer.send("t", big, partition=0)

    def delta_big() -> None:
        write_deltalake(root + "/delta-big", big, mode="append", storage_options=dl_opts or None)

    ts, ds = timed(txn_small), timed(delta_small)
    tb, db = timed(txn_big), timed(delta_big)
    mb = big.nbytes / 1e6
    return (name, f"{appends / ts:.1f}", f"{appends / ds:.1f}", f"{(appends / ts) / (appends / ds):.2f}x",
            f"{mb / tb:.1f}", f"{mb / db:.1f}", f"{(mb / tb) / (mb / db):.2f}x")


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=10_000, help="small commits on local disk")
    ap.add_argument("--s3-commits", type=int, default=500, help="small commits on the S3 endpoint")
    ap.add_argument("--appends", type=int, default=200, help="small appends for the delta-rs comparison")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the large append")
    args = ap.parse_args()
    big = make_table(args.rows)
    tmp = tempfile.mkdtemp()
    open_rows: list[tuple[str, ...]] = []
    delta_rows: list[tuple[str, ...]] = []
    try:
        open_rows += bench_open("local", tmp + "/open", {}, args.commits)
        delta_rows.append(bench_vs_delta("local", tmp + "/vs", {}, args.appends, big))
        with s3_endpoint() as (url, opts):
            open_rows += bench_open("s3 (loopback)", url + "/open", opts, args.s3_commits)
            delta_rows.append(bench_vs_delta("s3 (loopback)", url + "/vs", opts, args.appends, big))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nOpen a partition and read its last record (a new process)")
    table(("store", "history", "commits", "ms", "requests", "commits/s while filling"), open_rows)
    print("\nRead the whole partition, before and after compaction")
    table(("store", "records", "before rec/s", "after rec/s", "speed-up"),
          [(n, f"{r}", f"{a:,.0f}", f"{b:,.0f}", f"{b / a:.1f}x") for n, r, a, b in COMPACTION_READS])
    print(f"\ntxnlog vs delta-rs: {args.appends} appends of 100 rows; one append of {args.rows:,} rows "
          f"({big.nbytes / 1e6:.0f} MB)")
    table(("store", "txnlog commits/s", "delta commits/s", "ratio", "txnlog MB/s", "delta MB/s", "ratio"),
          delta_rows)


if __name__ == "__main__":
    main()
