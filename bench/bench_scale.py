"""Scale benchmark (issue "commits that do not queue behind one chain"): on a store that adds S3-like latency per
request (``latency_store.LatencyStore`` over a real backend), side by side in one run:

1. store-wide commits/s with N producers, each writing its own partition (threads in one process, each with a
   coordinator of its own or all sharing one; or processes);
2. commit latency of a transaction touching 64 partitions against one touching 1;
3. requests a Spark micro-batch commit makes in a fresh process (the stream sink's ``streamWriter()`` + ``commit``);
4. requests a long-lived consumer's poll makes after 1,000 new commits elsewhere;
5. serial round trips of a snapshot of a topic with 256 partitions (fresh process);
6. checkpoint size and objects under ``_txn/`` after many commits and batch jobs (memory store, no latency).

    python bench/bench_scale.py [--seconds 10] [--producers 1,16,64] [--processes] [--backend memory|local|s3]
                                [--commit-modes blocking,async]
                                [--state-commits 100000] [--state-jobs 10000]

Prints one table per measure.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyarrow as pa  # noqa: E402
from latency_store import LatencyStore  # noqa: E402

from coordinator import (  # noqa: E402
    Consumer,
    MemoryStore,
    Producer,
    Store,
    TransactionCoordinator,
    create_topic,
    open_store,
    parallel,
)
from coordinator.segments import stage_segment  # noqa: E402

SCHEMA = pa.schema([("v", pa.int64())])


#: The ``s3.*`` options of the S3 endpoint in use (what a Spark job would pass).
STORE_OPTIONS: dict[str, str] = {}


@contextmanager
def backend(kind: str) -> Iterator[Callable[[], Store]]:
    """A fresh store root; yields a function opening a new (raw, latency-free) store object on it."""
    if kind == "memory":
        url = f"memory://scale-{uuid.uuid4().hex}"
        try:
            yield lambda: open_store(url)
        finally:
            MemoryStore.drop(url)
    elif kind == "local":
        with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as d:
            yield lambda: open_store("file://" + d)
    else:
        from bench_core import s3_endpoint

        with s3_endpoint() as (url, opts):
            STORE_OPTIONS.update(opts)
            try:
                yield lambda: open_store(url, opts)
            finally:
                STORE_OPTIONS.clear()


def lat(raw: Store) -> LatencyStore:
    return LatencyStore(raw)


# -- 1. throughput ---------------------------------------------------------------------------------------------------


def _produce(store: Store, i: int, start: float, seconds: float,
             coord: TransactionCoordinator | None = None) -> tuple[int, int, list[float], list[float]]:
    p = Producer(store, f"p{i}", coordinator=coord)
    p.init_transactions()
    with p.transaction():  # warm up: imports, encoders, the log's view
        p.send("t", [{"v": i}], partition=i)
    return _produce_ready(p, i, start, seconds)


def _proc_main(url: str, opts: dict[str, str], i: int, ready: Any, go: Any, seconds: float, out: Any) -> None:
    store = lat(open_store(url, opts))
    p = Producer(store, f"p{i}")
    p.init_transactions()
    with p.transaction():
        p.send("t", [{"v": i}], partition=i)
    ready.release()
    start = go.get()
    go.put(start)
    out.put(_produce_ready(p, i, start, seconds))


#: measure 1's producers commit with ``commit_transaction_async`` (up to ``max_in_flight`` commits in flight each)
#: instead of blocking on ``commit_transaction``
ASYNC = False
#: measure 1 also reports the rate of the commits acknowledged after this many seconds (the start apart)
SETTLE_S = 2.0


def _produce_ready(p: Producer, i: int, start: float, seconds: float) -> tuple[int, int, list[float], list[float]]:
    while time.time() < start:
        time.sleep(0.002)
    done = fails = 0
    lat_s: list[float] = []
    at_s: list[float] = []  # when each counted commit was acknowledged, from the start
    lock = threading.Lock()

    def finished(f: Any, t0: float) -> None:
        nonlocal done, fails
        with lock:
            if f.exception() is not None:
                fails += 1
                print(f"producer {i}: {type(f.exception()).__name__}: {f.exception()}", file=sys.stderr)
            elif time.time() < start + seconds:  # commits acknowledged within the window count
                done += 1
                lat_s.append(time.monotonic() - t0)
                at_s.append(time.time() - start)

    while time.time() < start + seconds:
        t0 = time.monotonic()
        try:
            if ASYNC:
                p.begin_transaction()
                p.send("t", [{"v": i}], partition=i)
                p.commit_transaction_async().add_done_callback(functools.partial(finished, t0=t0))
                continue
            with p.transaction():
                p.send("t", [{"v": i}], partition=i)
            done += 1
            lat_s.append(time.monotonic() - t0)
            at_s.append(time.time() - start)
        except Exception as exc:  # noqa: BLE001 - counted as a failure and reported
            fails += 1
            print(f"producer {i}: {type(exc).__name__}: {exc}", file=sys.stderr)
    p.close()  # waits for the commits in flight
    return done, fails, lat_s, at_s


def throughput(kind: str, n: int, seconds: float, processes: bool, shared: bool = False) -> dict[str, Any]:
    """Measure 1. ``processes``: one OS process per producer; else threads of this process, each producer with a
    coordinator (and log view) of its own, or with ``shared`` one coordinator for all (as its docstring advises for
    the producers of one process): their commits then share entries."""
    with backend(kind) as fresh:
        create_topic(fresh(), "t", SCHEMA, n)
        results: list[tuple[int, int, list[float], list[float]]] = []
        if processes:
            raw = fresh()
            # the children open the store themselves: the endpoint's options (credentials included) go to them as
            # arguments of the forked process, never through the command line or the output
            url, opts = raw.url, dict(STORE_OPTIONS)
            ready, go, out = mp.Semaphore(0), mp.Queue(), mp.Queue()
            procs = [mp.Process(target=_proc_main, args=(url, opts, i, ready, go, seconds, out)) for i in range(n)]
            for pr in procs:
                pr.start()
            for _ in procs:
                ready.acquire()
            go.put(time.time() + 1.0)
            results = [out.get() for _ in procs]
            for pr in procs:
                pr.join()
        else:
            start = time.time() + 2.0 + 0.05 * n
            lock = threading.Lock()
            common = TransactionCoordinator(lat(fresh())) if shared else None

            def run(i: int) -> None:
                got = _produce(common.store if common else lat(fresh()), i, start, seconds, common)
                with lock:
                    results.append(got)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if common is not None:  # a shared coordinator is not wound down by its producers closing
                common.log.wind_down()
            parallel.drain(30)  # derived work still writing into the folder about to be removed
        done = sum(r[0] for r in results)
        lats = sorted(x for r in results for x in r[2])
        entries = len(fresh().list("_txn/log"))
        # the first seconds (every producer starting at once) apart from the rest
        settled = sum(1 for r in results for at in r[3] if at >= SETTLE_S)
        how = "processes" if processes else "threads, one coordinator" if shared else "threads, a coordinator each"
        return {"producers": n, "as": how, "commits": "async" if ASYNC else "blocking",
                "commits_per_s": done / seconds,
                f"after_{SETTLE_S:.0f}s_per_s": settled / (seconds - SETTLE_S) if seconds > SETTLE_S else 0.0,
                "failures": sum(r[1] for r in results),
                "p50_ms": 1000 * lats[len(lats) // 2] if lats else 0.0,
                "p95_ms": 1000 * lats[int(len(lats) * 0.95)] if lats else 0.0, "entries": entries}


# -- 2. commit latency by touched partitions ---------------------------------------------------------------------------


def wide_commit(kind: str, partitions: int, commits: int = 10) -> dict[str, float]:
    with backend(kind) as fresh:
        create_topic(fresh(), "w", SCHEMA, 64)
        store = lat(fresh())
        coord = TransactionCoordinator(store)
        ident = coord.init_producer("wide")
        times = []
        tbl = pa.table({"v": [1]}, schema=SCHEMA)
        for n in range(commits):
            segs = [stage_segment(store, "w", p, tbl, f"{ident.txn_id(n)}~{p}") for p in range(partitions)]
            store.trace.clear()
            t0 = time.monotonic()
            coord.commit(ident, ident.txn_id(n), segs)
            times.append(time.monotonic() - t0)
        return {"partitions": partitions, "median_ms": 1000 * statistics.median(times),
                "round_trips": store.trace.round_trips(), "requests": store.trace.requests()}


# -- 3. a Spark micro-batch commit in a fresh process ----------------------------------------------------------------


def spark_commit_requests(kind: str, history: int = 50) -> dict[str, float]:
    from pyspark.sql.types import LongType, StructField, StructType

    from txnsink import make_stream_writer
    from txnsink.staging import TaskIds

    with backend(kind) as fresh:
        raw = fresh()
        create_topic(raw, "s", SCHEMA, 2)
        p = Producer(raw, "history")
        p.init_transactions()
        for i in range(history):
            with p.transaction():
                p.send("s", [{"v": i}], partition=i % 2)
        schema = StructType([StructField("v", LongType())])
        opts = {"path": raw.url, "topic": "s", **STORE_OPTIONS}
        qid = str(uuid.uuid4())
        counts, later = [], []
        for batch in range(8):  # 8 batches: at least one writes the coordinator checkpoint (every 4th entry)
            planner = make_stream_writer(opts, schema, False)  # the driver's planning worker
            msg = planner.stage(iter(pa.table({"v": [batch]}, schema=SCHEMA).to_batches()),
                                TaskIds(batch % 2, 0, batch, qid, batch))
            until_return, background = _fresh_commit_requests(opts, schema, msg, batch)
            counts.append(until_return)
            later.append(background)
        return {"history_commits": history, "median_requests": statistics.median(counts), "max_requests": max(counts),
                "max_background_after": max(later)}


def _fresh_commit_requests(opts: dict[str, str], schema: Any, msg: Any, batch: int) -> tuple[int, int]:
    """Requests the fresh commit worker makes on store objects it opens itself: every request made from
    ``streamWriter()`` until ``commit`` returns, from any thread (derived work already started in the background
    is counted if its requests started by then); and the requests derived work (the coordinator checkpoint every
    4th entry) makes in the background after the return, counted over the next second."""
    import txnsink.plan as plan_module
    import txnsink.stream as stream_module
    from coordinator import probe as probe_module
    from txnsink import make_stream_writer

    probe_module._PROBED.clear()  # a fresh process has verified nothing yet
    opened: list[Store] = []
    real_open = plan_module.open_store

    def counting_open(*a: Any, **k: Any) -> Store:
        st = real_open(*a, **k)
        opened.append(st)
        return st

    plan_module.open_store = counting_open  # type: ignore[assignment]
    stream_module.open_store = counting_open  # type: ignore[assignment]
    try:
        make_stream_writer(opts, schema, False).commit([msg], batch)
        until_return = sum(st.counters.total() for st in opened)
    finally:
        plan_module.open_store = real_open  # type: ignore[assignment]
        stream_module.open_store = real_open  # type: ignore[assignment]
    time.sleep(1.0)
    return until_return, sum(st.counters.total() for st in opened) - until_return


# -- 4. a consumer poll after 1,000 commits elsewhere ----------------------------------------------------------------


def poll_requests(kind: str, commits: int = 1000) -> dict[str, float]:
    with backend(kind) as fresh:
        raw = fresh()
        create_topic(raw, "mine", SCHEMA, 1)
        create_topic(raw, "other", SCHEMA, 4)
        p = Producer(raw, "w")
        p.init_transactions()
        with p.transaction():
            p.send("mine", [{"v": 1}])
        cstore = fresh()
        c = Consumer(cstore)
        c.subscribe(["mine"])
        assert c.poll().num_rows == 1
        for i in range(commits):
            with p.transaction():
                p.send("other", [{"v": i}], partition=i % 4)
        with p.transaction():
            p.send("mine", [{"v": 2}])
        cstore.counters.reset()
        got = c.poll()
        return {"commits_elsewhere": commits, "rows": got.num_rows, "requests": cstore.counters.total()}


# -- 5. snapshot of 256 partitions ------------------------------------------------------------------------------------


def snapshot_round_trips(kind: str, partitions: int = 256) -> dict[str, float]:
    with backend(kind) as fresh:
        raw = fresh()
        create_topic(raw, "wide", SCHEMA, partitions)
        p = Producer(raw, "w")
        p.init_transactions()
        for _ in range(20):
            with p.transaction():
                p.send("wide", [{"v": j} for j in range(partitions)], key="v")
        store = lat(fresh())
        t0 = time.monotonic()
        snap = TransactionCoordinator(store).snapshot(["wide"])
        wall = time.monotonic() - t0
        return {"partitions": len(snap.ends["wide"]), "round_trips": store.trace.round_trips(),
                "requests": store.trace.requests(), "wall_ms": 1000 * wall}


# -- 6. bounded state -------------------------------------------------------------------------------------------------


#: Retention of the bounded-state run's topic: about this many bytes of newest segments are kept per partition.
STATE_RETENTION_BYTES = 100 * 100
#: Simulated time between two commits of the bounded-state run (1M commits span about two years), so that what the
#: state forgets by age (retired segments after 7 days) is forgotten within the run.
STATE_TICK_MS = 60_000


def bounded_state(commits: int, jobs: int, producers: int = 16, maintain_every: int = 20_000) -> dict[str, float]:
    """``commits`` producer commits spread over ``producers`` transactional ids and partitions, then ``jobs`` Spark
    batch jobs (an ephemeral producer each), through the real protocol on the memory store. Segments are not
    written (their references are): the log, checkpoints and partition records are. Every ``maintain_every``
    commits (and at the end) a maintenance pass runs as ``txnlog maintain`` does (:func:`maintain`: retention by
    the topic's ``retention.bytes``, GC, partition checkpoints and truncation, coordinator checkpoint), with grace
    periods passed, as if the pass ran an hour later (ages are simulated: ``grace_ms=0`` for partitions, a clock
    an hour ahead for the log's truncation, whose grace period cannot go below a minute). Commit times come from a
    simulated clock advancing :data:`STATE_TICK_MS` per commit (the log's entry times are its only clock here)."""
    import coordinator.clock as clock_module
    from coordinator.maintenance import maintain
    from coordinator.records import SegmentRef

    clock = [time.time() * 1000]

    def tick(store: Store) -> int:
        clock[0] += STATE_TICK_MS
        return int(clock[0])

    def maintenance() -> None:
        maintain(coord, compact=False, gc=True, grace_ms=0)
        coord.log.truncate(now=time.time() + 3600)

    url = f"memory://state-{uuid.uuid4().hex}"
    real_now = clock_module.store_now_ms
    clock_module.store_now_ms = tick
    try:
        store = open_store(url)
        create_topic(store, "t", SCHEMA, producers, {"retention.bytes": str(STATE_RETENTION_BYTES)})
        coord = TransactionCoordinator(store)
        idents = [coord.init_producer(f"p{k}") for k in range(producers)]
        t0 = time.monotonic()
        for n in range(commits):
            ident = idents[n % producers]
            k = n // producers
            seg = SegmentRef("t", n % producers, f"topics/t/{n % producers}/data/{ident.txn_id(k)}~x.parquet",
                             1, 100, 0)
            coord.commit(ident, ident.txn_id(k), [seg])
            if n and n % maintain_every == 0:
                maintenance()
                print(f"  {n} commits, {time.monotonic() - t0:.0f} s, {len(store.list_info(''))} objects",
                      file=sys.stderr)
        for j in range(jobs):
            ident = coord.init_producer(f"spark-batch-{uuid.uuid4().hex}", ephemeral=True)
            seg = SegmentRef("t", j % producers, f"topics/t/{j % producers}/data/{ident.txn_id(0)}~s.parquet",
                             1, 100, 0)
            coord.commit(ident, ident.txn_id(0), [seg], end_producer=True)
            if j and j % maintain_every == 0:
                maintenance()
                print(f"  {j} batch jobs, {time.monotonic() - t0:.0f} s", file=sys.stderr)
        coord.log.flush()
        maintenance()
        last = store.get("_txn/checkpoint/_last.json")
        everything = store.list_info("")
        txn_objects = [i for i in everything if i.path.startswith("_txn/")]
        part_objects = [i for i in everything if "/log/" in i.path or "/checkpoint/" in i.path
                        if i.path.startswith("topics/")]
        return {"commits": commits, "batch_jobs": jobs, "checkpoint_bytes": len(last),
                "objects_under_txn": len(txn_objects), "producers_in_state": len(coord.log.state.producers),
                "partition_log_objects": len(part_objects), "store_objects": len(everything),
                "store_kb": sum(i.size for i in everything) / 1024, "seconds": time.monotonic() - t0}
    finally:
        clock_module.store_now_ms = real_now
        MemoryStore.drop(url)


# -- main --------------------------------------------------------------------------------------------------------------


def table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    if not rows:
        return
    cols = list(rows[0])
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(f"{r[c]:.1f}" if isinstance(r[c], float) else str(r[c]) for c in cols))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--producers", default="1,16,64")
    ap.add_argument("--processes", action="store_true", help="one OS process per producer (local or s3 backend)")
    ap.add_argument("--backend", default="memory", choices=["memory", "local", "s3"])
    ap.add_argument("--state-commits", type=int, default=100_000)
    ap.add_argument("--state-jobs", type=int, default=10_000)
    ap.add_argument("--only", default="1,2,3,4,5,6", help="which measures to run")
    ap.add_argument("--commit-modes", default="blocking",
                    help="measure 1: producers blocking on commit_transaction() and/or keeping up to max_in_flight "
                         "commits in flight with commit_transaction_async() (blocking,async)")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    kind = args.backend
    if args.processes and kind == "memory":
        kind = "local"
    print(f"backend {kind} + latency (ms) {LatencyStore(MemoryStore('memory://x')).latency_ms}")
    if "1" in only:
        runs = [(int(n), False) for n in args.producers.split(",")]
        if not args.processes:
            runs += [(int(n), True) for n in args.producers.split(",") if int(n) > 1]
        rows = []
        global ASYNC
        for mode in args.commit_modes.split(","):
            ASYNC = mode == "async"
            rows += [throughput(kind, n, args.seconds, args.processes, shared) for n, shared in runs]
        ASYNC = False
        table("1. store-wide commits/s, producers on their own partitions", rows)
    if "2" in only:
        one, wide = wide_commit(kind, 1), wide_commit(kind, 64)
        table("2. commit latency by partitions touched", [one, wide])
        print(f"ratio 64 / 1: {wide['median_ms'] / one['median_ms']:.2f}x")
    if "3" in only:
        table("3. requests of one Spark micro-batch commit in a fresh process", [spark_commit_requests(kind)])
    if "4" in only:
        table("4. requests of a consumer poll after 1,000 new commits", [poll_requests(kind)])
    if "5" in only:
        table("5. snapshot of a 256-partition topic from a fresh process", [snapshot_round_trips(kind)])
    if "6" in only:
        table("6. bounded state (memory store, no latency)", [bounded_state(args.state_commits, args.state_jobs)])
    return 0


if __name__ == "__main__":
    mp.set_start_method("fork")
    sys.exit(main())
