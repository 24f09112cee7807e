"""Seeded random workloads over a real store, with faults, recorded as :class:`checker.History`.

A history has one to a few *workers* (threads, or processes on a local-disk store). Each worker owns a few
transactional ids and, per step, picks one of: a transaction over several topics and partitions (committed or
aborted), a consumer poll (read_committed or read_uncommitted), a snapshot read, a re-read of an earlier pinned
snapshot, a timeout/expiration sweep with a skewed clock, a zombie operation, or (worker 0) one
consume-transform-produce step. Faults:

* ``InjectedCrash`` at protocol points (before/after every store write), drawn from the worker's seeded RNG at
  ``fault_rate`` per point; the crashed "process" is replaced by a fresh one (new Store object, coordinator and
  producer on the same URL, ``init_transactions`` again);
* the crashed producer may be kept as a zombie and used later: its operations must fail with
  ``ProducerFencedError`` and have no visible effect;
* conditional writes applied but whose reply is lost (:class:`LostReplyStore`);
* sweeps whose clock is minutes (or, rarely, days) off.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from coordinator import (
    CommitStateUnknownError,
    Consumer,
    Producer,
    ProducerConfig,
    ProducerFencedError,
    Snapshot,
    Store,
    TransactionCoordinator,
    create_topic,
    faults,
    open_store,
    read_snapshot,
)
from coordinator.faults import InjectedCrash
from core_helpers import LostReplyStore
from history.checker import FAILED, OK, UNKNOWN, History, MiscOp, ReadOp, TxnOp

SCHEMA = pa.schema([pa.field("v", pa.string(), nullable=False)])
#: topic -> partitions. Producers write a, b and in; only the consume-transform-produce step writes out.
TOPICS: dict[str, int] = {"a": 3, "b": 2, "in": 2, "out": 2}
WRITTEN = ("a", "b", "in")
GROUP, SRC, DST = "ctp", "in", "out"
MINUTE_MS = 60_000


def now() -> int:
    """A clock comparable across threads and processes of one machine (CLOCK_MONOTONIC)."""
    return time.monotonic_ns()


def err(exc: BaseException) -> str:
    """``ClassName: message`` (with the location for errors no fault explains)."""
    text = f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, InjectedCrash | CommitStateUnknownError | ProducerFencedError):
        tb = traceback.extract_tb(exc.__traceback__)
        if tb:
            text += f" [at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}]"
    return text


class RandomLostReplies(LostReplyStore):
    """Conditional writes whose reply is lost at ``rate``: the client then either reads the object back to learn
    the outcome, or (half the time) gives up with CommitStateUnknownError."""

    def __init__(self, inner: Store, rng: random.Random, rate: float, on_fault: Callable[[], None]) -> None:
        super().__init__(inner)
        self.rng, self.rate, self.on_fault = rng, rate, on_fault
        self.enabled = True

    def lose(self, path: str) -> str | None:
        if self.enabled and self.rng.random() < self.rate:
            self.on_fault()
            return "unknown" if self.rng.random() < 0.5 else "read back"
        return None


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker needs; picklable so a worker can run in another process."""

    url: str
    options: dict[str, str]
    seed: int
    wid: int
    steps: int
    fault_rate: float
    lost_reply_rate: float
    zombie_rate: float
    ctp: bool
    checkpoint_interval: int
    segment_bytes: int
    segment_format: str
    tids: int = 2


@dataclass
class WorkerResult:
    ops: list[TxnOp | ReadOp | MiscOp] = field(default_factory=list)
    faults: int = 0


class Crasher:
    """The per-worker crash injector: raises InjectedCrash at a protocol point with probability ``rate``."""

    def __init__(self, rng: random.Random, rate: float) -> None:
        self.rng, self.rate, self.count, self.enabled = rng, rate, 0, True

    def __call__(self, name: str) -> None:
        if self.enabled and self.rate and self.rng.random() < self.rate:
            self.count += 1
            raise InjectedCrash(name)


@dataclass
class Proc:
    """One simulated process of one transactional id."""

    store: Store
    coord: TransactionCoordinator
    producer: Producer
    gen: int
    consumer: Consumer | None = None
    session: str | None = None


@dataclass
class Zombie:
    producer: Producer
    tid: str
    gen: int
    open_op: TxnOp | None


class Worker:
    """Runs one worker's steps and records them."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed * 7919 + spec.wid)
        self.crash = Crasher(random.Random(self.rng.random()), spec.fault_rate)
        self.fault_rng = random.Random(self.rng.random())
        self.result = WorkerResult()
        self.tids = [f"w{spec.wid}t{k}" for k in range(spec.tids)] + (["ctp"] if spec.ctp else [])
        self.procs: dict[str, Proc] = {}
        self.txn_no: dict[str, int] = dict.fromkeys(self.tids, 0)
        self.zombies: list[Zombie] = []
        self.reader: tuple[Store, TransactionCoordinator] | None = None
        self.sessions: dict[str, tuple[str, Consumer]] = {}
        self.pinned: list[tuple[Snapshot, str, tuple[str, ...]]] = []
        self.n = 0
        self.stores: list[LostReplyStore] = []

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _id(self, kind: str) -> str:
        self.n += 1
        return f"w{self.spec.wid}.{self.n}.{kind}"

    def _lost_reply(self) -> None:
        self.result.faults += 1

    def store(self) -> Store:
        inner = open_store(self.spec.url, self.spec.options)
        if not self.spec.lost_reply_rate:
            return inner
        s = RandomLostReplies(inner, self.fault_rng, self.spec.lost_reply_rate, self._lost_reply)
        self.stores.append(s)
        return s

    def coordinator(self, store: Store) -> TransactionCoordinator:
        return TransactionCoordinator(store, checkpoint_interval=self.spec.checkpoint_interval)

    @contextmanager
    def no_faults(self) -> Iterator[None]:
        old = self.crash.enabled
        self.crash.enabled = False
        for s in self.stores:
            s.enabled = False
        try:
            yield
        finally:
            self.crash.enabled = old
            for s in self.stores:
                s.enabled = True

    def start(self, tid: str, gen: int) -> None:
        """Start a fresh process for ``tid`` and initialise it (a crashed init is another fresh process)."""
        for _ in range(100):
            store = self.store()
            coord = self.coordinator(store)
            config = ProducerConfig(segment_target_bytes=self.spec.segment_bytes,
                                    segment_format=self.spec.segment_format)
            producer = Producer(store, tid, coordinator=coord, config=config)
            op = MiscOp(self._id("init"), "init", now(), detail=f"{tid} gen {gen}")
            self.result.ops.append(op)
            try:
                producer.init_transactions()
                op.end = now()
                self.procs[tid] = Proc(store, coord, producer, gen)
                return
            except (InjectedCrash, Exception) as exc:
                op.end, op.outcome, op.error = now(), UNKNOWN, err(exc)
            gen += 1
        raise RuntimeError(f"could not initialise {tid} in 100 attempts")

    def replace(self, tid: str, *, zombie_op: TxnOp | None, keep_zombie: bool) -> None:
        old = self.procs.pop(tid)
        if keep_zombie and old.producer.identity is not None and self.rng.random() < self.spec.zombie_rate:
            self.zombies.append(Zombie(old.producer, tid, old.gen, zombie_op))
        self.start(tid, old.gen + 1)

    def run(self) -> WorkerResult:
        with faults.injected(self.crash):
            for tid in self.tids:
                self.start(tid, 0)
            actions: list[tuple[Callable[[], None], int]] = [
                (self.txn, 10), (self.poll, 3), (self.snapshot, 2), (self.reread, 1), (self.sweep, 1),
                (self.zombie, 2), (self.ctp_step, 6 if self.spec.ctp else 0),
            ]
            fns, weights = zip(*actions, strict=True)
            for _ in range(self.spec.steps):
                self.rng.choices(fns, weights)[0]()
        self.result.faults += self.crash.count
        return self.result

    # -- transactions -----------------------------------------------------------------------------------------

    def txn(self) -> None:
        tid = self.rng.choice([t for t in self.tids if t != "ctp"])
        proc = self.procs[tid]
        op = self._new_txn(tid, proc.gen)
        abort = self.rng.random() < 0.15
        try:
            proc.producer.begin_transaction()
            for _ in range(self.rng.randint(1, 4)):
                topic = self.rng.choice(WRITTEN)
                part = self.rng.randrange(TOPICS[topic])
                self._send(proc.producer, op, topic, part, self.rng.randint(1, 3))
            if abort:
                op.outcome = FAILED
                proc.producer.abort_transaction()
            else:
                self._commit(proc.producer, op)
        except BaseException as exc:
            self._failed(tid, op, exc)
        op.end = now()

    def _new_txn(self, tid: str, gen: int, *, zombie: bool = False) -> TxnOp:
        self.txn_no[tid] += 1
        op = TxnOp(self._id("zombie" if zombie else "txn"), tid, gen, self.txn_no[tid], now(), zombie=zombie)
        self.result.ops.append(op)
        return op

    def _send(self, producer: Producer, op: TxnOp, topic: str, part: int, n: int) -> None:
        vals = op.writes.setdefault((topic, part), [])
        new = [f"{op.tid}/{op.gen}/{op.txn_no}/{len(op.values()) + i}" for i in range(n)]
        vals.extend(new)  # recorded before the send: a crash mid-send leaves them possibly staged
        producer.send(topic, [{"v": v} for v in new], partition=part)

    def _commit(self, producer: Producer, op: TxnOp) -> None:
        op.commit_start = now()
        producer.commit_transaction()
        op.outcome = OK

    def _failed(self, tid: str, op: TxnOp, exc: BaseException) -> None:
        """Classify the outcome of ``op`` after ``exc`` and replace the process when it died or was fenced."""
        if not isinstance(exc, InjectedCrash | Exception):
            raise exc
        aborting = op.outcome == FAILED  # set just before abort_transaction, which resets the producer first
        op.error = err(exc)
        if op.commit_start is None or isinstance(exc, ProducerFencedError):
            op.outcome = FAILED  # never reached the commit point
        else:
            op.outcome = UNKNOWN
        crashed = isinstance(exc, InjectedCrash | CommitStateUnknownError)
        self.replace(tid, zombie_op=None if aborting else op, keep_zombie=crashed)

    def zombie(self) -> None:
        """A superseded producer keeps going: it retries its open commit, or starts a new transaction."""
        if not self.zombies:
            return
        z = self.zombies.pop(self.rng.randrange(len(self.zombies)))
        self.result.faults += 1
        with self.no_faults():
            if z.open_op is not None and z.open_op.commit_start is not None:
                op = self._new_txn(z.tid, z.gen, zombie=True)
                op.retry_of = z.open_op.id
                try:
                    self._commit(z.producer, op)
                except Exception as exc:
                    op.error, op.outcome = err(exc), FAILED if isinstance(exc, ProducerFencedError) else UNKNOWN
                op.end = now()
                return
            if z.open_op is not None:
                # A transaction still open in the zombie: finish it with more sends, then try to commit.
                op = z.open_op
                op.zombie = True
            else:
                op = self._new_txn(z.tid, z.gen, zombie=True)
            try:
                if z.open_op is None:
                    z.producer.begin_transaction()
                self._send(z.producer, op, self.rng.choice(WRITTEN), 0, 1)
                self._commit(z.producer, op)
            except Exception as exc:
                op.error, op.outcome = err(exc), FAILED if isinstance(exc, ProducerFencedError) else UNKNOWN
            op.end = now()

    # -- consume-transform-produce ----------------------------------------------------------------------------

    def ctp_step(self) -> None:
        proc = self.procs["ctp"]
        read = ReadOp(self._id("ctp-poll"), "poll", now(), topics=(SRC,))
        op: TxnOp | None = None
        try:
            if proc.consumer is None:
                proc.consumer = Consumer(proc.store, group_id=GROUP, coordinator=proc.coord)
                proc.consumer.subscribe([SRC])
                proc.session = f"{read.id}.session"
                read.start_positions = _positions(proc.consumer)
            consumer = proc.consumer
            read.session = proc.session
            batch = consumer.poll(max_records=self.rng.randint(1, 5))
            read.records = _records(batch, SRC)
            read.end = now()
            self.result.ops.append(read)
            if not read.records:
                return
            op = self._new_txn("ctp", proc.gen)
            proc.producer.begin_transaction()
            for i, (_t, p, _o, v) in enumerate(read.records):
                out = f"ctp/{proc.gen}/{op.txn_no}/{i}|{v}"
                op.writes.setdefault((DST, p % TOPICS[DST]), []).append(out)
                proc.producer.send(DST, [{"v": out}], partition=p % TOPICS[DST])
            op.offsets = {SRC: consumer.positions()[SRC]}
            proc.producer.send_offsets_to_transaction(consumer.positions(), GROUP)
            if self.rng.random() < 0.1:
                op.outcome = FAILED
                proc.producer.abort_transaction()
                proc.consumer = None  # rewind to the committed offsets
            else:
                self._commit(proc.producer, op)
            op.end = now()
        except BaseException as exc:
            if op is None:
                read.end, read.outcome, read.error = now(), UNKNOWN, err(exc)
                if read not in self.result.ops:
                    self.result.ops.append(read)
                if not isinstance(exc, InjectedCrash | Exception):
                    raise
                crashed = isinstance(exc, InjectedCrash | CommitStateUnknownError)
                self.replace("ctp", zombie_op=None, keep_zombie=crashed)
            else:
                self._failed("ctp", op, exc)
                op.end = now()

    # -- reads ------------------------------------------------------------------------------------------------

    def _reader(self) -> tuple[Store, TransactionCoordinator]:
        if self.reader is None:
            store = self.store()
            self.reader = (store, self.coordinator(store))
        return self.reader

    def _read_failed(self, op: ReadOp, exc: BaseException) -> None:
        if not isinstance(exc, InjectedCrash | Exception):
            raise exc
        op.outcome, op.error = UNKNOWN, err(exc)
        self.reader = None  # the reading process died: its consumers go with it
        self.sessions.clear()

    def poll(self) -> None:
        iso = self.rng.choice(["read_committed", "read_uncommitted"])
        limit = self.rng.choice([None, None, 3])
        op = ReadOp(self._id("poll"), "poll", now(), topics=tuple(WRITTEN), isolation=iso)
        self.result.ops.append(op)
        try:
            store, coord = self._reader()
            if iso not in self.sessions:
                c = Consumer(store, isolation_level=iso, coordinator=coord)
                c.subscribe(WRITTEN)
                self.sessions[iso] = (op.id, c)
                op.start_positions = _positions(c)
            op.session, consumer = self.sessions[iso]
            table = consumer.poll(max_records=limit)
            op.records = _records(table, None)
            op.complete = limit is None and iso == "read_committed"
        except BaseException as exc:
            self._read_failed(op, exc)
        op.end = now()

    def snapshot(self) -> None:
        topics = tuple(sorted(self.rng.sample(sorted(TOPICS), self.rng.randint(1, len(TOPICS)))))
        op = ReadOp(self._id("snapshot"), "snapshot", now(), topics=topics, complete=True)
        self.result.ops.append(op)
        try:
            store, coord = self._reader()
            snap = coord.snapshot(topics)
            op.records = _snapshot_records(read_snapshot(store, topics, snapshot=snap, coordinator=coord))
            self.pinned.append((snap, op.id, topics))
        except BaseException as exc:
            self._read_failed(op, exc)
        op.end = now()

    def reread(self) -> None:
        if not self.pinned:
            return
        snap, first, topics = self.rng.choice(self.pinned)
        op = ReadOp(self._id("reread"), "reread", now(), topics=topics, reread_of=first)
        self.result.ops.append(op)
        try:
            store = self.store()  # another process reads the pinned cut
            op.records = _snapshot_records(read_snapshot(store, topics, snapshot=snap,
                                                         coordinator=self.coordinator(store)))
        except BaseException as exc:
            self._read_failed(op, exc)
        op.end = now()

    def sweep(self) -> None:
        """Timeout and expiration sweeps from a process whose clock is minutes off (rarely, days ahead)."""
        skew = self.rng.randint(-10 * MINUTE_MS, 10 * MINUTE_MS)
        days = self.rng.random() < 0.1
        op = MiscOp(self._id("sweep"), "sweep", now(), detail=f"skew {skew} ms, expire={days}")
        self.result.ops.append(op)
        self.result.faults += 1
        try:
            coord = self.coordinator(self.store())
            wall = int(time.time() * 1000) + skew
            coord.abort_timed_out(now=wall)
            if days:
                coord.expire_transactional_ids(now=wall + 8 * 24 * 60 * MINUTE_MS)
        except (InjectedCrash, Exception) as exc:
            op.outcome, op.error = UNKNOWN, err(exc)
        op.end = now()


def _positions(consumer: Consumer) -> dict[tuple[str, int], int]:
    return {(t, p): o for t, ps in consumer.positions().items() for p, o in ps.items()}


def _records(table: pa.Table, topic: str | None) -> list[tuple[str, int, int | None, str]]:
    if table.num_rows == 0 or "v" not in table.column_names:
        return []
    topics = [topic] * table.num_rows if topic else table.column("_topic").to_pylist()
    return list(zip(topics, table.column("_partition").to_pylist(), table.column("_offset").to_pylist(),
                    table.column("v").to_pylist(), strict=True))


def _snapshot_records(tables: dict[str, pa.Table]) -> list[tuple[str, int, int | None, str]]:
    return [r for t, table in sorted(tables.items()) for r in _records(table, t)]


def run_worker(spec: WorkerSpec) -> WorkerResult:
    """Run one worker to completion (in this thread or process)."""
    return Worker(spec).run()


@dataclass(frozen=True)
class HistoryParams:
    """One history's shape, all drawn from its seed except what the caller fixes."""

    seed: int
    url: str
    options: dict[str, str]
    fault_rate: float = 0.03
    lost_reply_rate: float = 0.01
    zombie_rate: float = 0.5
    workers: int = 1
    steps: int = 25
    processes: bool = False
    ctp: bool = True
    checkpoint_interval: int = 5
    segment_bytes: int = 1
    segment_format: str = "arrow"

    def describe(self) -> str:
        kind = "processes" if self.processes else "threads"
        return (f"seed={self.seed} workers={self.workers} ({kind}) steps={self.steps} fault_rate={self.fault_rate} "
                f"lost_reply_rate={self.lost_reply_rate} ckpt={self.checkpoint_interval} "
                f"segment={self.segment_format}/{self.segment_bytes}")


def params_for(seed: int, url: str, options: dict[str, str] | None = None, *, fault_rate: float = 0.03,
               processes: bool = False, steps: int | None = None, **fixed: Any) -> HistoryParams:
    """Draw a history's shape from ``seed``: workers, steps, checkpoint interval, segment size and format."""
    rng = random.Random(seed)
    drawn: dict[str, Any] = dict(
        workers=rng.choice([1, 1, 2, 3]),
        steps=steps if steps is not None else rng.randint(10, 30),
        checkpoint_interval=rng.choice([0, 3, 7, 100]),
        segment_bytes=rng.choice([1, 1 << 20]),
        segment_format=rng.choice(["arrow", "parquet"]),
        lost_reply_rate=rng.choice([0.0, fault_rate / 2]),
        ctp=rng.random() < 0.8,
    )
    if processes:
        drawn["workers"] = max(2, drawn["workers"])
    drawn.update(fixed)
    return HistoryParams(seed=seed, url=url, options=dict(options or {}), fault_rate=fault_rate,
                         processes=processes, **drawn)


def setup_topics(url: str, options: dict[str, str]) -> None:
    store = open_store(url, options)
    for name, parts in TOPICS.items():
        create_topic(store, name, SCHEMA, parts, exist_ok=True)


def run_history(params: HistoryParams) -> History:
    """Set up topics, run the workers (threads, or processes), then take the fault-free final read."""
    setup_topics(params.url, params.options)
    specs = [WorkerSpec(params.url, params.options, params.seed, w, params.steps, params.fault_rate,
                        params.lost_reply_rate, params.zombie_rate, params.ctp and w == 0,
                        params.checkpoint_interval, params.segment_bytes, params.segment_format)
             for w in range(params.workers)]
    results: list[WorkerResult] = []
    if params.processes:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(len(specs)) as pool:
            results = pool.map(run_worker, specs)
    elif len(specs) == 1:
        results = [run_worker(specs[0])]
    else:
        slots: list[WorkerResult | BaseException | None] = [None] * len(specs)

        def target(i: int) -> None:
            try:
                slots[i] = run_worker(specs[i])
            except BaseException as exc:  # surfaced below
                slots[i] = exc

        threads = [threading.Thread(target=target, args=(i,)) for i in range(len(specs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in slots:
            if isinstance(s, BaseException):
                raise s
            assert s is not None
            results.append(s)
    h = History(params.seed, params.describe(), ctp=(GROUP, SRC, DST) if params.ctp else None)
    for r in results:
        h.ops += r.ops
        h.faults += r.faults
    h.final, h.final_groups = final_read(params.url, params.options)
    return h


def final_read(url: str, options: dict[str, str]) -> tuple[ReadOp, dict[str, dict[str, dict[int, int]]]]:
    """A fresh, fault-free process reads every topic at one snapshot, and the group offsets."""
    op = ReadOp("final", "final", now(), topics=tuple(sorted(TOPICS)), complete=True)
    store = open_store(url, options)
    coord = TransactionCoordinator(store)
    try:
        op.records = _snapshot_records(read_snapshot(store, op.topics, coordinator=coord))
        groups = {GROUP: {t: {int(p): o for p, o in ps.items()} for t, ps in coord.group_offsets(GROUP).items()}}
    except Exception as exc:
        op.outcome, op.error, groups = UNKNOWN, err(exc), {}
    op.end = now()
    return op, groups
