"""Consumer latency benchmark (issue "a consumer that follows a busy store at low latency"), on a store that adds
S3-like latency per request (``latency_store.LatencyStore``: PUT 30, GET 15, LIST 20 ms) over a real backend:

1. serial round trips, requests, wall and CPU time of one consumer poll after N new one-row commits spread over 16
   partitions (memory store, one process; the consumer has read everything before and found nothing new);
2. end-to-end latency: N producer processes (``--producers``, 1 and 16 by default), each on its own partition,
   each committing a one-row transaction every ``--interval`` ms, one consumer process polling every 10 ms
   (``poll(0)``, then a 10 ms sleep), all on the same local folder; a record's latency is from just before the
   producer's ``send`` to the poll that returned it (one machine, one clock); also shown, from the record's commit
   time (``_timestamp``: the store's time the committing writer puts in its entry); and the commits/s achieved.
   "steady" is the same over the rows sent after the first second (all producers start at the same instant,
   before any writer serves the queue) and received before the first producer stopped (a process that stops while
   it serves the queue leaves the others' last commits to a take-over, after a few idle looks at the log).
   Each producer count runs twice (``--commit-modes``): producers blocking on ``commit_transaction()``, and
   producers keeping up to ``max_in_flight`` commits in flight with ``commit_transaction_async()``; with the
   producers' CPU and store requests per commit. ``TMPDIR=/dev/shm`` puts the folder on tmpfs (no disk syncs).

    python bench/bench_latency.py [--commits 1,10,40] [--rounds 3] [--seconds 20] [--interval 100] [--only 1,2]
                                  [--producers 1,16] [--commit-modes blocking,async] [--trace FILE] [--rows FILE]

Prints one table per measure.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import Future
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyarrow as pa  # noqa: E402
from bench_scale import table  # noqa: E402
from latency_store import LatencyStore  # noqa: E402

from coordinator import Consumer, MemoryStore, Producer, create_topic, open_store  # noqa: E402

SCHEMA = pa.schema([("v", pa.int64())])
PARTITIONS = 16
POLL_EVERY_S = 0.010
#: measure 2's steady state starts this long after the producers start
WARM_UP_S = 1.0


# -- 1. one poll after N commits ---------------------------------------------------------------------------------------


def poll_round_trips(commits: int) -> dict[str, Any]:
    url = f"memory://latency-{uuid.uuid4().hex}"
    try:
        raw = open_store(url)
        create_topic(raw, "t", SCHEMA, PARTITIONS)
        p = Producer(open_store(url), "w")
        p.init_transactions()
        with p.transaction():
            p.send("t", [{"v": -1}], partition=0)
        store = LatencyStore(open_store(url))
        c = Consumer(store)
        c.subscribe(["t"])
        assert c.poll().num_rows == 1
        assert c.poll().num_rows == 0
        for i in range(commits):
            with p.transaction():
                p.send("t", [{"v": i}], partition=i % PARTITIONS)
        store.trace.clear()
        t0, c0 = time.monotonic(), time.process_time()
        got = c.poll()
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
        return {"commits": commits, "rows": got.num_rows, "round_trips": store.trace.round_trips(),
                "requests": store.trace.requests(), "wall_ms": 1000 * wall, "cpu_ms": 1000 * cpu}
    finally:
        MemoryStore.drop(url)


# -- 2. end to end -----------------------------------------------------------------------------------------------------


def _producer_main(url: str, i: int, ready: Any, go: Any, seconds: float, interval: float, out: Any,
                   pipelined: bool = False, trace: bool = False) -> None:
    store = LatencyStore(open_store(url))
    store.trace.detail = trace
    p = Producer(store, f"w{i}")
    p.init_transactions()
    with p.transaction():  # warm up: imports, encoders, the log's view
        p.send("t", [{"v": 0}], partition=i)
    ready.release()
    start = go.get()
    go.put(start)
    while time.time() < start:
        time.sleep(0.002)
    commit_s: list[float] = []
    failed: list[BaseException] = []

    def done(f: Future[Any], t0: float) -> None:
        if f.exception() is not None:
            failed.append(f.exception())  # type: ignore[arg-type]
        else:
            commit_s.append(time.monotonic() - t0)

    n = 0
    store.trace.clear()
    cpu0 = time.process_time()
    while time.time() < start + seconds:
        due = start + n * interval
        if time.time() < due:
            time.sleep(due - time.time())
        t0 = time.monotonic()
        if pipelined:
            p.begin_transaction()
            p.send("t", [{"v": time.time_ns() // 1000}], partition=i)
            p.commit_transaction_async().add_done_callback(functools.partial(done, t0=t0))
        else:
            with p.transaction():
                p.send("t", [{"v": time.time_ns() // 1000}], partition=i)
            commit_s.append(time.monotonic() - t0)
        n += 1
    stopped = time.time()  # (the serving writer of a process stops when it closes: others then take over)
    p.close()  # waits for the commits in flight
    cpu_s = time.process_time() - cpu0
    kinds = collections.Counter(k for k, _s, _e in store.trace.events)
    out.put((f"producer {i}", (commit_s, len(failed), cpu_s, kinds, stopped, store.trace.log)))


def _consumer_main(url: str, ready: Any, go: Any, seconds: float, out: Any, trace: bool = False) -> None:
    store = LatencyStore(open_store(url))
    store.trace.detail = trace
    c = Consumer(store, auto_offset_reset="latest")
    c.subscribe(["t"])
    c.poll()
    store.trace.clear()
    ready.release()
    start = go.get()
    go.put(start)
    from_send: list[float] = []
    from_commit: list[float] = []
    sent_at: list[float] = []
    received_at: list[float] = []
    polls = 0
    while time.time() < start + seconds + 1.0:
        got = c.poll()
        now_us = time.time_ns() // 1000
        polls += 1
        committed = got.column("_timestamp").cast(pa.int64()).to_pylist()
        for v, ts in zip(got.column("v").to_pylist(), committed, strict=True):
            if v > 0:
                from_send.append((now_us - v) / 1000)
                from_commit.append((now_us - ts) / 1000)
                sent_at.append(v / 1e6)
                received_at.append(now_us / 1e6)
        time.sleep(POLL_EVERY_S)
    out.put(("consumer", (from_send, from_commit, polls, sent_at, received_at, store.trace.log)))


def _pct(xs: list[float], q: int) -> float:
    if len(xs) < 2:
        return xs[0] if xs else float("nan")
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


def end_to_end(seconds: float, interval_ms: float, producers: int = 1, pipelined: bool = False,
               trace: str | None = None, rows: str | None = None) -> dict[str, Any]:
    """One process per producer, each on its own partition, each committing a one-row transaction every
    ``interval_ms`` (or as soon as its previous commit returns, when that took longer; with ``pipelined``, as soon
    as fewer than ``max_in_flight`` of its commits are undecided: ``commit_transaction_async``), and one consumer
    process. With ``trace``, every request of every process is written to that file (JSON lines) and the gaps
    between the log's entries are analysed (:func:`entry_gaps`); with ``rows``, every row received is written to
    that file (CSV: seconds from the start when sent, when received, and its latency in ms)."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as d:
        url = "file://" + d
        create_topic(open_store(url), "t", SCHEMA, producers)
        ready, go, out = mp.Semaphore(0), mp.Queue(), mp.Queue()
        procs = [mp.Process(target=_producer_main, args=(url, i, ready, go, seconds, interval_ms / 1000, out,
                                                                pipelined, trace is not None))
                 for i in range(producers)]
        procs.append(mp.Process(target=_consumer_main, args=(url, ready, go, seconds, out, trace is not None)))
        for pr in procs:
            pr.start()
        for _ in procs:
            ready.acquire()
        start = time.time() + 1.0
        go.put(start)
        got = dict(out.get() for _ in procs)
        for pr in procs:
            pr.join()
        commit_s = sorted(x for k, v in got.items() if k.startswith("producer") for x in v[0])
        failed = sum(v[1] for k, v in got.items() if k.startswith("producer"))
        cpu_s = sum(v[2] for k, v in got.items() if k.startswith("producer"))
        kinds: collections.Counter[str] = sum((v[3] for k, v in got.items() if k.startswith("producer")),
                                              collections.Counter())
        per = max(1, len(commit_s))
        from_send, from_commit, polls, sent_at, received_at, _ = got["consumer"]
        # The steady state: rows sent after the first WARM_UP_S (every producer starts at the same instant, before
        # any writer serves the queue) and received before the first producer stopped (a process that stops while
        # serving the queue leaves the others' last commits to a take-over).
        first_stop = min(v[4] for k, v in got.items() if k.startswith("producer"))
        steady = [x for x, sent, at in zip(from_send, sent_at, received_at, strict=True)
                  if sent >= start + WARM_UP_S and at < first_stop]
        if rows is not None:
            with open(rows, "w") as f:
                f.write("sent_s,received_s,latency_ms\n")
                for sent, at, ms in sorted(zip(sent_at, received_at, from_send, strict=True)):
                    f.write(f"{sent - start:.4f},{at - start:.4f},{ms:.1f}\n")
        if trace is not None:
            requests = [(who, *ev) for who, v in got.items() for ev in v[-1]]
            write_trace(trace, requests)
            entry_gaps(requests)
        return {"producers": producers, "commits": "async" if pipelined else "blocking",
                "wanted_per_s": producers * 1000 / interval_ms,
                "commits_per_s": len(commit_s) / seconds, "failed": failed,
                "producer_cpu_ms_per_commit": 1000 * cpu_s / per,
                "requests_per_commit": f"{sum(kinds.values()) / per:.1f} ("
                                       + " ".join(f"{k} {v / per:.1f}" for k, v in sorted(kinds.items())) + ")",
                "received": len(from_send), "polls": polls,
                "commit_p50_ms": 1000 * statistics.median(commit_s), "commit_p99_ms": 1000 * _pct(commit_s, 99),
                "e2e_p50_ms": _pct(from_send, 50), "e2e_p99_ms": _pct(from_send, 99),
                "e2e_max_ms": max(from_send, default=float("nan")),
                "e2e_steady_p50_ms": _pct(steady, 50), "e2e_steady_p99_ms": _pct(steady, 99),
                "after_commit_time_p50_ms": _pct(from_commit, 50), "after_commit_time_p99_ms": _pct(from_commit, 99)}


def write_trace(path: str, requests: list[tuple[str, str, str, str, float, float]]) -> None:
    """Write ``requests`` (process, thread, kind, path, start, end) as JSON lines, in start order."""
    with open(path, "w") as f:
        for who, thread, kind, where, start, end in sorted(requests, key=lambda r: r[4]):
            f.write(json.dumps({"process": who, "thread": thread, "kind": kind, "path": where, "start": start,
                                "end": end}) + "\n")
    print(f"trace: {len(requests)} requests written to {path}")


def entry_gaps(requests: list[tuple[str, str, str, str, float, float]], worst: int = 5) -> None:
    """Print the gaps between the starts of consecutive creations of log entries (``put_if_absent`` under
    ``_txn/log/``: lost races included), and for the ``worst`` gaps what the process that created the entry after
    the gap requested during it."""
    creates = sorted((r for r in requests if r[2] == "put_if_absent" and r[3].startswith("_txn/log/")),
                     key=lambda r: r[4])
    if len(creates) < 3:
        print("entry gaps: fewer than 3 entries created")
        return
    gaps = sorted(((b[4] - a[4], a, b) for a, b in zip(creates, creates[1:], strict=False)),
                  key=lambda g: g[0])
    ms = [1000 * g[0] for g in gaps]
    print(f"entry gaps over {len(creates)} creations: p50 {_pct(ms, 50):.0f} ms, p90 {_pct(ms, 90):.0f}, "
          f"p99 {_pct(ms, 99):.0f}, max {ms[-1]:.0f}")
    for gap, a, b in reversed(gaps[-worst:]):
        during = collections.Counter(f"{r[1]} {r[2]} {r[3].rsplit('/', 1)[0]}" for r in requests
                                     if r[0] == b[0] and a[4] <= r[4] < b[4])
        print(f"  {1000 * gap:.0f} ms before {b[3]} ({b[0]}, {b[1]}); that process meanwhile: "
              + (", ".join(f"{n} x {k}" for k, n in during.most_common(6)) or "no request"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", default="1,10,40")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=100.0, help="ms between two commits of the producer")
    ap.add_argument("--rounds", type=int, default=3, help="runs of measure 1 per N")
    ap.add_argument("--only", default="1,2", help="which measures to run")
    ap.add_argument("--producers", default="1,16", help="producer processes of measure 2, one run per number")
    ap.add_argument("--commit-modes", default="blocking,async",
                    help="measure 2: blocking commits (commit_transaction) and/or pipelined ones "
                         "(commit_transaction_async)")
    ap.add_argument("--trace", default=None, metavar="FILE",
                    help="measure 2: write every request of every process to FILE (JSON lines; one file per run, "
                         "suffixed with the run) and print the gaps between the log's entries")
    ap.add_argument("--rows", default=None, metavar="FILE",
                    help="measure 2: write every row received (when sent and received, its latency) to FILE (CSV; "
                         "one file per run, suffixed with the run)")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    print(f"latency (ms) {LatencyStore(MemoryStore('memory://x')).latency_ms}")
    if "1" in only:
        rows = []
        for n in args.commits.split(","):
            runs = sorted((poll_round_trips(int(n)) for _ in range(args.rounds)), key=lambda r: r["wall_ms"])
            rows.append(runs[len(runs) // 2])
        table(f"1. one consumer poll after N one-row commits over {PARTITIONS} partitions (memory store; the run of "
              f"median wall time of {args.rounds})", rows)
    if "2" in only:
        table(f"2. end to end, producer processes each on its own partition (a commit every {args.interval:.0f} ms "
              f"each), one consumer process (a poll every {1000 * POLL_EVERY_S:.0f} ms), local folder",
              [end_to_end(args.seconds, args.interval, int(n), mode == "async",
                          f"{args.trace}.{n}-{mode}" if args.trace else None,
                          f"{args.rows}.{n}-{mode}" if args.rows else None)
               for n in args.producers.split(",") for mode in args.commit_modes.split(",")])
    return 0


if __name__ == "__main__":
    mp.set_start_method("fork")
    sys.exit(main())
