"""Seeded random workloads over a real store, with faults, recorded as :class:`checker.History`.

A history has one to a few *workers* (threads, or processes on a local-disk or S3 store). Each worker owns a few
transactional ids, Spark sink jobs and streaming queries, and per step picks one of: a producer transaction over
several topics and partitions (committed or aborted), a consumer poll (read_committed or read_uncommitted), a
snapshot read, a re-read of an earlier pinned snapshot, a Spark batch job, a micro-batch of a Spark streaming
query, a maintenance pass, a timeout/expiration sweep with a skewed clock, a zombie operation, or (worker 0) one
consume-transform-produce step. Faults (all drawn from the seed, see :class:`history.stores.FaultPlan`):

* **crashes**: ``InjectedCrash`` at protocol points; the crashed "process" is replaced by a fresh one (new Store
  object, coordinator and producer on the same URL, ``init_transactions`` again);
* **errors** at every store call (:class:`history.stores.FaultyStore`): the process lives and the caller runs its
  real error path: the producer calls ``commit_transaction()`` again, or ``abort_transaction()``, or
  ``init_transactions()``; Spark calls the sink's ``abort(messages)`` after a failed ``commit``, retries failed
  tasks, and replays a failed micro-batch with a new writer; a consumer polls again; a reader reads again;
* **lost replies** of conditional writes; **zombies** (crashed producers and Spark drivers used later);
* **stalls**: a committer paused just before it creates its log entry, longer than the scaled truncation grace (a
  GC pause, a frozen VM), while the other workers commit, checkpoint and truncate the log;
* **pauses** at store calls of every kind, reads included, before or after the backend applied them (and on local
  disk inside a conditional create), longer than the scaled truncation grace, while another process checkpoints and
  truncates the log past the paused one (:mod:`history.pauses`); whole worker processes stopped with ``SIGSTOP``
  in the multi-process mode;
* **process clocks** hours or days off, in either direction, for every decision a worker's process takes on its
  host clock, maintenance included (:mod:`history.clocks`);
* **a lying store**: a store that ignores conditional writes, opened through one writing path (producer, batch
  sink, stream sink, maintenance, command line), which must refuse it (:mod:`history.lying`);
* **damaged log files**: a coordinator checkpoint overwritten half way, and (behind a switch, ``damage_log``) a
  log entry overwritten at the end, followed by the operator's repair (:mod:`history.repair`);
* **maintenance races**: compaction, retention, GC with a short grace period, truncation, checkpoints, the timeout
  sweep and expiry, as steps of their own and run from another process *at* a protocol point of another operation;
* **skewed clocks** (sweeps minutes off, expiry eight days ahead); **corrupt files** (one segment or partition
  record of one partition overwritten);
* **read-only readers** (:class:`history.stores.ReadOnlyStore`): any write they attempt is an anomaly.

Core defects the checker found and that are fixed are :data:`KNOWN_DEFECTS` (each guarded by a regression test in
``tests/test_history.py``); those found and not fixed yet are :data:`OPEN_DEFECTS`. The default run exercises the
triggers of both, and ``avoid`` skips a trigger, to tell a known defect from a new one.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from coordinator import (
    AlreadyCommittedError,
    CommitStateUnknownError,
    Consumer,
    CorruptLogError,
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    Producer,
    ProducerConfig,
    ProducerFencedError,
    Snapshot,
    Store,
    TransactionAbortedError,
    TransactionCoordinator,
    TxnLogError,
    create_topic,
    faults,
    open_store,
    parallel,
    read_snapshot,
)
from coordinator.faults import InjectedCrash
from coordinator.layout import marker_dir
from coordinator.reader import output_schema, read_range
from coordinator.topics import get_topic
from history import clocks, lying, pauses, repair
from history.checker import FAILED, OK, UNKNOWN, History, MiscOp, ReadOp, TxnOp
from history.stores import FaultPlan, FaultyStore, PausingLocalStore, ReadOnlyStore

SCHEMA = pa.schema([pa.field("v", pa.string(), nullable=False)])
#: topic -> partitions. Producers write a, b and in; only the consume-transform-produce step writes out; the Spark
#: sinks write s.
TOPICS: dict[str, int] = {"a": 3, "b": 2, "in": 2, "out": 2, "s": 2}
WRITTEN = ("a", "b", "in")
GROUP, SRC, DST = "ctp", "in", "out"
SINK = "s"
#: Retention runs on these (explicit limits, and b's own retention.ms through ``maintain``); damage hits one of them.
RETAINED = ("a", "b")
TOPIC_CONFIG: dict[str, dict[str, str]] = {"b": {"retention.ms": "1500"}}
MINUTE_MS = 60_000
DAY_MS = 24 * 60 * MINUTE_MS
#: Grace periods (ms) of GC and partition truncation: short enough that they matter within a history.
GRACES = (0, 50, 1000)

#: Defects in the core that the checker found, all fixed; ``avoid`` makes the workload skip the path that triggered
#: one (see ``docs/reliability.md``, Findings, and the regression tests in ``tests/test_history.py``).
KNOWN_DEFECTS: dict[str, str] = {
    "stalled-committer": "a committer paused past the log truncation grace between reading the log and creating its "
                         "entry creates it under a number a truncation freed (a ghost below a checkpoint) and "
                         "acknowledges a commit no reader sees",
    "flush-retry": "commit_transaction() retried after a StoreError while staging drops the rows whose staging "
                   "failed (Producer._stage pops the buffer first) and acknowledges the rest",
    "consumer-advance": "a poll that raises has already advanced the positions of the partitions it read before "
                        "the error; a re-poll skips those records",
    "log-truncation-grace": "TransactionLog.truncate with a grace period shorter than RECENT_S (30 s) lets a "
                            "process that read the log recently re-create a deleted entry: its commit is "
                            "acknowledged and lost",
    "intent-put": "a StoreError from the intent put of a commit is raised as a plain failure although the intent "
                  "may have landed and be committed later (a Spark batch job then fails but publishes)",
    "partition-truncation": "after truncate_partition deleted every record of a partition, a reader whose view is "
                            "behind gets CorruptLogError (record missing) instead of reopening from the partition "
                            "checkpoint; and the coordinator's checkpoint writer re-creates truncated records, after "
                            "which verify reports a gap in a healthy partition",
    "abort-after-commit": "abort_transaction() after an unknown commit that turns out committed "
                          "(AlreadyCommittedError) rewinds the producer's sequence numbers; the next transaction "
                          "reuses them and its segments are dropped as duplicates: acknowledged, lost",
    "retry-fenced-guess": "commit_transaction() called again after CommitStateUnknownError answers "
                          "ProducerFencedError (nothing visible) when the producer was fenced or expired after the "
                          "commit was decided in entries this process skipped: the transaction is committed",
    "gc-stale-live": "gc_partition judges later files against a state its own reap refreshed but a live set it "
                     "does not: a segment committed while GC runs is deleted (the partition becomes unreadable)",
    "sink-abort-fenced": "a Spark batch job's abort after an unknown commit deletes the staged files whenever the "
                         "abort is answered 'fenced', but the commit may have been decided before the fence (its "
                         "ephemeral producer removed by that commit, or expiry or a newer writer with the same "
                         "transactionalId since): the committed job's files are deleted",
    "gc-merged": "GC deletes an unpublished compaction output older than its grace period, but compaction still "
                 "publishes it for an hour (MAX_PUBLISH_MS): with a grace shorter than the compaction, the merged "
                 "segment a committed replace names is gone",
    "paused-log-reader": "a process paused inside a read of the transaction log (after the store answered, or "
                         "before it asked by name) for longer than the truncation grace holds a view the "
                         "truncation passed by, and its next read within RECENT_S of the paused one asks for the "
                         "next entry by name, finds it deleted and takes the view for fresh: its next commits are "
                         "created under numbers the truncation freed, acknowledged and never read",
    "linked-ghost": "on the local store a conditional create paused between writing its temp file and linking it "
                    "creates the object with the temp file's time, from before the pause: the ghost check, judging "
                    "by the store's times, takes a log entry created under a freed number for a real one",
    "paused-after-create": "a writer paused right after creating its log entry, for longer than the truncation "
                           "grace, finds its entry truncated meanwhile and takes it for a possible ghost: the "
                           "request it decided is decided again and answered as not done; a compaction then deletes "
                           "the merged segment its entry published (readers find it missing)",
    "orphaned-ghost": "a committer paused before creating its entry past a truncation creates a ghost under a freed "
                      "number and dies before its ghost check: the ghost stays, next to the entry the truncation "
                      "kept, and a process whose view predates the truncation reads it as the log's (the zombie's "
                      "retry is acknowledged from it; no reader sees the commit)",
    "lying-stream-sink": "the streaming sink opens its stores with probe=False and never checks conditional writes: "
                         "a store that ignores them is trusted and its log entries overwrite others",
    "lying-cli": "the command line opens its store with probe=False, so the probe its writing commands ask for "
                 "(Settings.open(write=True)) returns at once: a store that ignores conditional writes is trusted "
                 "by produce, compact, expire, repair and the coordinator daemon",
    "unnamed-last-checkpoint": "a damaged _last.json is neither checked by verify nor rewritten by the repair: "
                               "readers fall back to the numbered checkpoints (with a warning), but the operator's "
                               "tools never name it, and it stays damaged until a writer checkpoints again",
}

#: Defects in the core that the checker found and that are not fixed yet; ``avoid`` skips their triggers the same way
#: (see ``docs/reliability.md``, "Found by pauses, clocks and lying stores").
OPEN_DEFECTS: dict[str, str] = {}
#: The writing path each ``lying-*`` open defect names.
_LYING_DEFECTS = {"stream-sink": "lying-stream-sink", "cli": "lying-cli"}

#: Compaction and GC never overlap within one process while ``gc-merged`` is avoided (reentrant: a maintenance
#: race run inside a compaction holds it already, and then skips GC).
_COMPACTION = threading.RLock()


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


# -- the Spark sinks' connections ---------------------------------------------------------------------------------

_sink = threading.local()


def _sink_open_store(url: str, options: Any = None, *, probe: bool = True) -> Store:
    """``open_store`` as the sinks call it: the history's faulty connection when this thread set one."""
    factory: Callable[[], Store] | None = getattr(_sink, "factory", None)
    return factory() if factory is not None else open_store(url, options, probe=probe)


@contextmanager
def sink_connections() -> Iterator[None]:
    """While the workers run, the sinks' modules open their stores through :func:`_sink_open_store` (the real
    ``open_store`` for any thread that set no factory); restored afterwards."""
    import txnsink.batch
    import txnsink.plan
    import txnsink.stream

    mods = (txnsink.batch, txnsink.plan, txnsink.stream)
    saved = [m.open_store for m in mods]
    for m in mods:
        m.open_store = _sink_open_store
    try:
        yield
    finally:
        for m, f in zip(mods, saved, strict=True):
            m.open_store = f


@contextmanager
def _connecting(factory: Callable[[], Store]) -> Iterator[None]:
    old = getattr(_sink, "factory", None)
    _sink.factory = factory
    try:
        yield
    finally:
        _sink.factory = old


def spark_schema() -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField("v", StringType(), False)])


# -- workers ------------------------------------------------------------------------------------------------------


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
    error_rate: float = 0.0
    race_rate: float = 0.0
    read_only_rate: float = 0.0
    maintenance: bool = False
    damage: bool = False
    sinks: bool = False
    streams: int = 0
    avoid: frozenset[str] = frozenset()
    tids: int = 2
    pause_rate: float = 0.0
    clock_skew_ms: int = 0
    damage_checkpoint: bool = False
    async_commits: float = 0.0


@dataclass
class WorkerResult:
    ops: list[TxnOp | ReadOp | MiscOp] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)


@dataclass
class Proc:
    """One simulated process of one transactional id."""

    store: Store
    coord: TransactionCoordinator
    producer: Producer
    gen: int
    consumer: Consumer | None = None
    session: str | None = None
    #: commits sent with ``commit_transaction_async`` whose futures the worker has not looked at yet, each with
    #: the time its answer came (filled by the future's callback)
    futures: list[tuple[TxnOp, Future[Any], list[int]]] = field(default_factory=list)
    #: what those futures said undecided (refused, or the store failed first): aborted by the next resync
    undecided: list[TxnOp] = field(default_factory=list)
    #: the last commit sent async since the producer last aborted or initialised: the next commit follows it
    behind: TxnOp | None = None
    #: the process died in a commit's thread (the worker replaces it at its next step)
    died: TxnOp | None = None
    #: the process ever sent a commit async (it is then never kept as a zombie: a zombie's first call would
    #: answer for its failed commits in flight, not with ProducerFencedError)
    pipelined: bool = False


@dataclass
class Zombie:
    producer: Producer
    tid: str
    gen: int
    open_op: TxnOp | None


@dataclass
class Query:
    """A Spark streaming query writing to the sink topic: its id (kept in its checkpoint), the batch it has not
    committed yet, and attempts whose driver died (zombies that may commit late)."""

    name: str
    query_id: str
    next_batch: int = 0
    pending: TxnOp | None = None
    zombies: list[tuple[Any, list[Any], int]] = field(default_factory=list)


class Worker:
    """Runs one worker's steps and records them."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed * 7919 + spec.wid)
        self.plan = FaultPlan(spec.seed, spec.wid, crash_rate=spec.fault_rate, error_rate=spec.error_rate,
                              lost_reply_rate=spec.lost_reply_rate, race_rate=spec.race_rate,
                              pause_rate=spec.pause_rate, avoid=spec.avoid)
        self.result = WorkerResult()
        #: this process's host clock offset (read by :mod:`history.clocks` through the fault injector)
        self.clock_skew_ms = spec.clock_skew_ms
        self.pauser = pauses.Pauser(self.plan, spec.url, spec.options, spec.wid, self.result.ops.append,
                                    lambda: f"w{spec.wid}.{self.n}",
                                    truncate="log-truncation-grace" not in spec.avoid)
        self.plan.pauser = self.pauser.pause
        self.tids = [f"w{spec.wid}t{k}" for k in range(spec.tids)] + (["ctp"] if spec.ctp else [])
        self.procs: dict[str, Proc] = {}
        self.txn_no: dict[str, int] = dict.fromkeys(self.tids, 0)
        self.zombies: list[Zombie] = []
        #: replaced processes (their commits in flight may still be decided)
        self.gone: list[Proc] = []
        self.readers: dict[bool, tuple[Store, TransactionCoordinator]] = {}
        self.sessions: dict[tuple[str, bool], tuple[str, Consumer]] = {}
        self.pinned: list[tuple[Snapshot, str, tuple[str, ...]]] = []
        self.queries = [Query(f"w{spec.wid}q{k}", f"q{spec.seed}w{spec.wid}k{k}-{uuid.uuid4().hex[:8]}")
                        for k in range(spec.streams)]
        self.jobs = 0
        self.n = 0
        self.races = 0
        self.damaged = not spec.damage  # True once done (or never wanted)
        self.ckpt_damaged = not spec.damage_checkpoint
        self._following = ""
        self.reading: ReadOp | None = None
        self._racing = threading.local()
        #: the worker's own thread (its process's main thread): zombies run on it only
        self._main_thread: int | None = None

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _id(self, kind: str) -> str:
        self.n += 1
        self.plan.begin_op(self.n)
        return f"w{self.spec.wid}.{self.n}.{kind}"

    def store(self) -> Store:
        """A new connection of a new or running process: the real backend behind the fault plan."""
        inner = PausingLocalStore.of(open_store(self.spec.url, self.spec.options))
        return FaultyStore(inner, self.plan, avoid_intent_errors="intent-put" in self.spec.avoid,
                           txn_write_latency_s=0.02 if self.spec.async_commits else 0.0)

    def host_ms(self) -> int:
        """This process's wall clock (ms): the host's, skewed by :attr:`clock_skew_ms`."""
        return int(time.time() * 1000) + self.clock_skew_ms

    def plain_store(self) -> Store:
        return open_store(self.spec.url, self.spec.options)

    def coordinator(self, store: Store) -> TransactionCoordinator:
        return TransactionCoordinator(store, checkpoint_interval=self.spec.checkpoint_interval)

    def injector(self, name: str) -> None:
        """The protocol-point hook: a crash, or a maintenance pass from another process run right here."""
        if not self.plan.enabled or getattr(self._racing, "on", False):
            return
        stalled, self._racing.stalled = getattr(self._racing, "stalled", False), False
        orphan = stalled and name == "txnlog.entry.after" and "orphaned-ghost" in self.spec.avoid
        if self.spec.fault_rate and self.plan.draw("crash", name) < self.spec.fault_rate and not orphan:
            self.plan.hit("crash")
            raise InjectedCrash(name)
        if name == STALL_POINT and "stalled-committer" not in self.spec.avoid and self.spec.fault_rate and \
                self.plan.draw("stall", name) < self.spec.fault_rate / STALL_SHARE:
            self._racing.stalled = True  # a crash right after the entry is created would orphan a ghost
            self.plan.hit("stall")
            time.sleep(STALL_S)  # the other workers go on meanwhile
            if "log-truncation-grace" not in self.spec.avoid:
                self._racing.on = True  # then another process truncates the log below its new checkpoint
                try:
                    with faults.injected(None):
                        self.maintenance(race_at=name, kind="truncate-log")
                finally:
                    self._racing.on = False
        if self.spec.race_rate and self.plan.draw("race", name) < self.spec.race_rate:
            self.plan.hit("maintenance-race")
            self._racing.on = True
            try:
                with faults.injected(None):
                    self.maintenance(race_at=name)
            finally:
                self._racing.on = False
        elif self.spec.race_rate and self.plan.draw("zombie-race", name) < self.spec.race_rate / 2 and \
                (any(z.tid in self.procs for z in self.zombies) or any(q.zombies for q in self.queries)) and \
                threading.get_ident() == self._main_thread:
            # A zombie's late commit lands right here, inside another operation. Only on the worker's own thread:
            # a background thread (serving the queue, writing records) may belong to the zombie's own process,
            # which cannot be re-entered from inside one of its own store calls.
            self._racing.on = True
            try:
                with faults.injected(None):
                    self.zombie()
            finally:
                self._racing.on = False

    def no_faults(self) -> contextlib.AbstractContextManager[None]:
        return self.plan.suspended()

    def start(self, tid: str, gen: int) -> None:
        """Start a fresh process for ``tid`` and initialise it (a failed init is another fresh process)."""
        for _ in range(100):
            op = MiscOp(self._id("init"), "init", now(), detail=f"{tid} gen {gen}")
            self.result.ops.append(op)
            try:
                store = self.store()
                coord = self.coordinator(store)  # opening the log reads the store too
                config = ProducerConfig(segment_target_bytes=self.spec.segment_bytes,
                                        segment_format=self.spec.segment_format)
                producer = Producer(store, tid, coordinator=coord, config=config)
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
        self.gone.append(old)  # its commits in flight go on: their outcomes are looked at in the end
        if keep_zombie and not old.pipelined and old.producer.identity is not None and \
                self.rng.random() < self.spec.zombie_rate:
            self.zombies.append(Zombie(old.producer, tid, old.gen, zombie_op))
        self.start(tid, old.gen + 1)

    def run(self) -> WorkerResult:
        if self.clock_skew_ms:
            self.plan.hit("clock-skew")
        self._main_thread = threading.get_ident()
        with faults.injected(self.injector):
            for tid in self.tids:
                self.start(tid, 0)
            actions: list[tuple[Callable[[], None], int]] = [
                (self.txn, 10), (self.poll, 3), (self.snapshot, 2), (self.reread, 1), (self.sweep, 1),
                (self.zombie, 2), (self.ctp_step, 6 if self.spec.ctp else 0),
                (self.batch_job, 2 if self.spec.sinks else 0), (self.stream_step, 3 if self.queries else 0),
                (self.maintenance_step, 2 if self.spec.maintenance else 0),
            ]
            fns, weights = zip(*actions, strict=True)
            for i in range(self.spec.steps):
                if not self.damaged and i >= self.spec.steps // 2:
                    self.damage()
                if not self.ckpt_damaged and i >= self.spec.steps // 2:
                    self.damage_checkpoint()
                self.rng.choices(fns, weights)[0]()
        with self.no_faults():
            self.finish_queries()
            self.finish_commits()
        # Derived work its processes started in the background (records, checkpoints) carries the injector and
        # may still fire a crash or a maintenance race: it ends before this worker does, and so before the final
        # read, which a maintenance pass with a zero grace period would otherwise race.
        _drain(f"worker {self.spec.wid}")
        self.result.faults.update(self.plan.counts)
        return self.result

    # -- producer transactions --------------------------------------------------------------------------------

    def txn(self, tid: str | None = None) -> None:
        """One producer transaction of ``tid`` (drawn when None); after a commit sent async, often another of
        the same producer at once, behind it."""
        tid = tid or self.rng.choice([t for t in self.tids if t != "ctp"])
        proc = self._alive(tid)
        op = self._new_txn(tid, proc.gen)
        abort = self.rng.random() < 0.15
        burst = False
        try:
            proc.producer.begin_transaction()
            for _ in range(self.rng.randint(1, 4)):
                topic = self.rng.choice(WRITTEN)
                part = self.rng.randrange(TOPICS[topic])
                self._send(proc.producer, op, topic, part, self.rng.randint(1, 3))
            if abort:
                op.outcome = FAILED
                proc.behind = None  # (a commit in flight that failed makes this abort resync the producer)
                proc.producer.abort_transaction()
                self._resynced(proc)
            elif self.spec.async_commits and self.rng.random() < self.spec.async_commits:
                self._commit_async(proc, op)
                burst = self.rng.random() < 0.75
            else:
                self._commit(proc.producer, op)
        except InjectedCrash as exc:
            self._crashed(tid, op, exc)
        except Exception as exc:
            self._recover(tid, op, exc, aborting=op.outcome == FAILED)  # the abort itself failed
        op.end = max(op.end, now())
        if burst:
            self.txn(tid)

    # -- commits in flight (``commit_transaction_async``) -------------------------------------------------------

    def _commit_async(self, proc: Proc, op: TxnOp) -> None:
        """Send ``op``'s commit without waiting: its future is looked at in a later step (:meth:`_collect`)."""
        op.commit_start = now()
        op.after = proc.behind.id if proc.behind is not None else None
        proc.pipelined = True
        fut = proc.producer.commit_transaction_async()
        if op.after is not None:
            self.plan.hit("pipelined")  # (perhaps decided before it was sent: then not pipelined after all)
        proc.behind = op
        answered: list[int] = []
        fut.add_done_callback(lambda _f: answered.append(now()))
        proc.futures.append((op, fut, answered))

    def _alive(self, tid: str) -> Proc:
        """``tid``'s process, after looking at the commits it had in flight; a new process if it died in one."""
        proc = self.procs[tid]
        self._collect(proc)
        if proc.died is not None:
            self.replace(tid, zombie_op=None, keep_zombie=False)
            proc = self.procs[tid]
        return proc

    def _collect(self, proc: Proc, *, timeout: float | None = 0) -> None:
        """Record the outcomes of ``proc``'s commits in flight that are answered (waiting up to ``timeout``)."""
        if timeout != 0 and proc.futures:
            wait_futures([f for _op, f, _t in proc.futures], timeout=timeout)
        for item in [item for item in proc.futures if item[1].done()]:
            proc.futures.remove(item)
            op, fut, answered = item
            # when it was answered (now, if the future's callback has not run yet)
            op.end = max(op.end, answered[0] if answered else now())
            exc = fut.exception()
            if exc is None:
                op.outcome, op.assigned = OK, dict(fut.result().offsets)
                continue
            op.error = err(exc)
            self.plan.hit("in-flight-failed")
            if isinstance(exc, InjectedCrash):
                proc.died = proc.died or op
            elif isinstance(exc, TransactionAbortedError | ProducerFencedError):
                op.outcome = FAILED  # decided aborted (behind a failed one, or timed out), or fenced
                if "which it follows" in op.error:
                    self.plan.hit("pipelined-aborted")
            elif not isinstance(exc, CommitStateUnknownError):
                proc.undecided.append(op)  # refused undecided, or not sent: aborted by the resync

    def _resynced(self, proc: Proc) -> None:
        """The producer aborted (after a commit in flight failed: resynced) or took a new epoch: what its commits
        in flight left undecided can never commit."""
        self._collect(proc)
        for op in proc.undecided:
            op.outcome = FAILED
            op.followups.append("aborted by the resync -> ok")
        proc.undecided.clear()
        proc.behind = None

    def finish_commits(self) -> None:
        """Replace the processes that died in a commit's thread (the new epoch fences what waited behind that
        commit), then record the outcomes of every commit in flight, of live and replaced processes."""
        for tid in list(self.procs):
            if self.procs[tid].died is None:
                self._collect(self.procs[tid])
            if self.procs[tid].died is not None:
                self.replace(tid, zombie_op=None, keep_zombie=False)
        for proc in [*self.procs.values(), *self.gone]:
            self._collect(proc, timeout=180.0)

    def _new_txn(self, tid: str, gen: int, *, zombie: bool = False, kind: str = "producer") -> TxnOp:
        self.txn_no[tid] = self.txn_no.get(tid, 0) + 1
        op = TxnOp(self._id("zombie" if zombie else "txn"), tid, gen, self.txn_no[tid], now(), zombie=zombie,
                   kind=kind)
        self.result.ops.append(op)
        return op

    def _send(self, producer: Producer, op: TxnOp, topic: str, part: int, n: int) -> None:
        vals = op.writes.setdefault((topic, part), [])
        new = [f"{op.tid}/{op.gen}/{op.txn_no}/{len(op.values()) + i}" for i in range(n)]
        vals.extend(new)  # recorded before the send: a failure mid-send leaves them possibly staged
        try:
            producer.send(topic, [{"v": v} for v in new], partition=part)
        except InjectedCrash:
            raise
        except Exception as exc:
            if isinstance(exc, ProducerFencedError) or self.rng.random() < 0.5:
                raise
            op.followups.append(f"send -> {err(exc)}")
        else:
            return
        producer.send(topic, [{"v": v} for v in new], partition=part)  # the caller retries the same rows
        op.followups.append("send again -> ok")

    def _commit(self, producer: Producer, op: TxnOp) -> None:
        if op.commit_start is None:
            op.commit_start = now()
        proc = self.procs[op.tid]
        if proc.producer is producer and proc.behind is not None:
            op.after, proc.behind = proc.behind.id, None
        result = producer.commit_transaction()
        op.outcome = OK
        op.assigned = dict(result.offsets)

    def _crashed(self, tid: str, op: TxnOp, exc: BaseException, *, learned: bool = False,
                 still_open: bool = True) -> None:
        """The process died during ``op``: classify it (unless its outcome was already ``learned``) and replace
        the process; it may live on as a zombie, which carries on with ``op`` if the transaction is
        ``still_open`` in it."""
        aborting = op.outcome == FAILED and op.commit_start is None
        op.error = op.error or err(exc)
        if learned:
            op.followups.append(f"then the process died -> {err(exc)}")
        else:
            op.outcome = FAILED if op.commit_start is None else UNKNOWN
        open_op = op if still_open and not aborting and not learned else None
        self.replace(tid, zombie_op=open_op, keep_zombie=True)

    def _follow(self, op: TxnOp, what: str, fn: Callable[[], Any]) -> BaseException | None:
        """Run one step of the caller's error path, recording what it got; None when it succeeded."""
        self._following = what
        try:
            got = fn()
        except InjectedCrash:
            raise
        except Exception as exc:
            op.followups.append(f"{what} -> {err(exc)}")
            return exc
        op.followups.append(f"{what} -> ok")
        if what == "commit again":
            op.assigned = dict(got.offsets)
        return None

    def _recover(self, tid: str, op: TxnOp, exc: Exception, *, aborting: bool) -> None:
        """The caller's error path after ``exc`` (the process lives): learn or decide the outcome of ``op``.

        Outside ``commit_transaction`` the transaction can never commit (``failed``): the caller aborts it (again,
        after an unknown abort), or starts over with ``init_transactions()``. After an error inside
        ``commit_transaction`` it calls ``commit_transaction()`` again, or ``abort_transaction()``, or
        ``init_transactions()``, and the outcome is what these answer: committed, aborted, or (after an init, or a
        fenced abort) unknown."""
        p = self.procs[tid].producer
        self.procs[tid].behind = None
        op.error = op.error or err(exc)
        try:
            if isinstance(exc, ProducerFencedError):
                op.outcome = FAILED
                self._reinit(tid, op)
                return
            if op.commit_start is None or aborting:
                op.outcome = FAILED
                # An abort that failed plainly has already dropped the transaction locally: start over.
                again = not aborting or isinstance(exc, CommitStateUnknownError)
                if not again or self._follow(op, "abort", p.abort_transaction) is not None:
                    self._reinit(tid, op)
                else:
                    self._resynced(self.procs[tid])
                return
            op.outcome = UNKNOWN
            plan = self.rng.choice(["commit", "commit", "abort", "init"])
            if plan == "commit" and (isinstance(exc, CommitStateUnknownError) or "flush-retry" not in self.spec.avoid):
                for _ in range(2):
                    got = self._follow(op, "commit again", p.commit_transaction)
                    if got is None:
                        op.outcome = OK
                        return
                    if isinstance(got, ProducerFencedError | InvalidTxnStateError):
                        guess = isinstance(got, ProducerFencedError) and "retry-fenced-guess" in self.spec.avoid
                        op.outcome = UNKNOWN if guess else FAILED
                        self._reinit(tid, op)
                        return
            if plan != "init":
                got = self._follow(op, "abort", p.abort_transaction)
                if got is None:
                    op.outcome = FAILED
                    self._resynced(self.procs[tid])
                    return
                if isinstance(got, AlreadyCommittedError):
                    op.outcome = OK
                    if "abort-after-commit" in self.spec.avoid:
                        self._reinit(tid, op)  # a new epoch: fresh sequence numbers
                    return
            self._reinit(tid, op)
        except InjectedCrash as crash:
            # abort_transaction() forgets the transaction locally before it asks the log
            self._crashed(tid, op, crash, learned=op.outcome in (OK, FAILED), still_open=self._following != "abort")

    def _reinit(self, tid: str, op: TxnOp) -> None:
        """Start over with a new epoch on the same producer object (usable again whatever happened), or, if that
        fails too, in a new process."""
        if self._follow(op, "init_transactions", self.procs[tid].producer.init_transactions) is not None:
            self.replace(tid, zombie_op=None, keep_zombie=False)
        else:
            self._resynced(self.procs[tid])
        proc = self.procs[tid]
        proc.consumer = None  # a consume-transform-produce step rewinds to the committed offsets

    def zombie(self) -> None:
        """A superseded producer keeps going (it retries its open commit, or starts a new transaction), or a
        streaming query's dead driver commits its attempt late."""
        stream = [q for q in self.queries if q.zombies]
        # A producer is a zombie only once its successor has initialised (fenced it): not while that is under way.
        fenced = [i for i, z in enumerate(self.zombies) if z.tid in self.procs]
        if stream and (not fenced or self.rng.random() < 0.5):
            self._stream_zombie(self.rng.choice(stream))
            return
        if not fenced:
            return
        z = self.zombies.pop(self.rng.choice(fenced))
        self.plan.hit("zombie")
        with self.no_faults():
            if z.open_op is not None and z.open_op.commit_start is not None:
                op = self._new_txn(z.tid, z.gen, zombie=True)
                op.retry_of = z.open_op.id
                try:
                    self._commit(z.producer, op)
                except (Exception, InjectedCrash) as exc:
                    self._zombie_answered(op, exc)
                op.end = now()
                return
            if z.open_op is not None:
                # A transaction still open in the zombie: finish it with more sends, then try to commit.
                op = z.open_op
                op.zombie = True
                if op.error:  # how the process died; what follows is the zombie's own outcome
                    op.followups.append(f"the process died -> {op.error}; the zombie goes on")
                    op.error = None
            else:
                op = self._new_txn(z.tid, z.gen, zombie=True)
            try:
                if z.open_op is None:
                    z.producer.begin_transaction()
                self._send(z.producer, op, self.rng.choice(WRITTEN), 0, 1)
                self._commit(z.producer, op)
            except (Exception, InjectedCrash) as exc:
                self._zombie_answered(op, exc)
            op.end = now()

    @staticmethod
    def _zombie_answered(op: TxnOp, exc: BaseException) -> None:
        """Record what a zombie's commit got: fenced (it never happened), or anything else (unknown). An
        ``InjectedCrash`` is its process dying: the commit was handed to the process's serving thread, which still
        carries the faults of the process's life and crashed."""
        op.error, op.outcome = err(exc), FAILED if isinstance(exc, ProducerFencedError) else UNKNOWN

    # -- consume-transform-produce ----------------------------------------------------------------------------

    def ctp_step(self) -> None:
        proc = self.procs["ctp"]
        read = ReadOp(self._id("ctp-poll"), "poll", now(), topics=(SRC,))
        self.result.ops.append(read)
        op: TxnOp | None = None
        try:
            if proc.consumer is None:
                c = Consumer(proc.store, group_id=GROUP, coordinator=proc.coord)
                c.subscribe([SRC])
                proc.consumer, proc.session = c, f"{read.id}.session"
                read.start_positions = _positions(c)
            consumer = proc.consumer
            read.session = proc.session
            batch = consumer.poll(max_records=self.rng.randint(1, 5))
            read.records = _records(batch, SRC)
            read.end = now()
            if not read.records:
                return
            op = self._new_txn("ctp", proc.gen, kind="ctp")
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
        except InjectedCrash as exc:
            if op is None:
                read.end, read.outcome, read.error = now(), UNKNOWN, err(exc)
                self.replace("ctp", zombie_op=None, keep_zombie=True)
            else:
                self._crashed("ctp", op, exc)
                op.end = now()
        except Exception as exc:
            if op is None:
                read.end, read.outcome, read.error = now(), UNKNOWN, err(exc)
                if "consumer-advance" in self.spec.avoid or isinstance(exc, OffsetOutOfRangeError):
                    proc.consumer = None  # start again from the committed offsets
                return  # otherwise the consumer polls again at the next step
            self._recover("ctp", op, exc, aborting=op.outcome == FAILED)
            if op.outcome != OK:
                self.procs["ctp"].consumer = None
            op.end = now()

    # -- reads ------------------------------------------------------------------------------------------------

    def _reader(self, read_only: bool) -> tuple[Store, TransactionCoordinator]:
        if read_only not in self.readers:
            store = self.store()
            if read_only:
                store = ReadOnlyStore(store, self._write_attempt)
            self.readers[read_only] = (store, self.coordinator(store))
        return self.readers[read_only]

    def _write_attempt(self, what: str) -> None:
        if self.reading is not None:
            self.reading.write_attempts.append(what)

    def _new_read(self, kind: str, **kw: Any) -> ReadOp:
        read_only = self.rng.random() < self.spec.read_only_rate
        op = ReadOp(self._id(kind), kind, now(), read_only=read_only, **kw)
        self.result.ops.append(op)
        self.reading = op
        return op

    def _read_failed(self, op: ReadOp, exc: BaseException) -> None:
        op.outcome, op.error = UNKNOWN, err(exc)
        if isinstance(exc, InjectedCrash):
            self.readers.pop(op.read_only, None)  # the reading process died: its consumers go with it
            self.sessions = {k: v for k, v in self.sessions.items() if k[1] != op.read_only}

    def poll(self) -> None:
        iso = self.rng.choice(["read_committed", "read_uncommitted"])
        limit = self.rng.choice([None, None, 3])
        op = self._new_read("poll", topics=tuple(WRITTEN), isolation=iso)
        key = (iso, op.read_only)
        try:
            store, coord = self._reader(op.read_only)
            if key not in self.sessions:
                c = Consumer(store, isolation_level=iso, coordinator=coord)
                c.subscribe(WRITTEN)
                self.sessions[key] = (op.id, c)
                op.start_positions = _positions(c)
            op.session, consumer = self.sessions[key]
            table = consumer.poll(max_records=limit)
            op.records = _records(table, None)
            op.complete = limit is None and iso == "read_committed"
        except InjectedCrash as exc:
            self._read_failed(op, exc)
        except Exception as exc:
            self._read_failed(op, exc)
            if "consumer-advance" in self.spec.avoid or isinstance(exc, OffsetOutOfRangeError):
                self.sessions.pop(key, None)  # a new consumer next time; otherwise this one polls again
        op.end = now()
        self.reading = None

    def snapshot(self) -> None:
        topics = tuple(sorted(self.rng.sample(sorted(TOPICS), self.rng.randint(1, len(TOPICS)))))
        for _attempt in range(2):  # after an error (not a crash) the reader reads again
            op = self._new_read("snapshot", topics=topics, complete=True)
            try:
                store, coord = self._reader(op.read_only)
                snap = coord.snapshot(topics)
                op.floors = {(t, p): s for t, ps in snap.starts.items() for p, s in ps.items()}
                op.records = _snapshot_records(read_snapshot(store, topics, snapshot=snap, coordinator=coord))
                self.pinned.append((snap, op.id, topics))
                return
            except (InjectedCrash, Exception) as exc:
                self._read_failed(op, exc)
                if isinstance(exc, InjectedCrash):
                    return
            finally:
                op.end = now()
                self.reading = None

    def reread(self) -> None:
        if not self.pinned:
            return
        snap, first, topics = self.rng.choice(self.pinned)
        op = self._new_read("reread", topics=topics, reread_of=first)
        try:
            store = self.store()  # another process reads the pinned cut
            if op.read_only:
                store = ReadOnlyStore(store, self._write_attempt)
            op.records = _snapshot_records(read_snapshot(store, topics, snapshot=snap,
                                                         coordinator=self.coordinator(store)))
        except (InjectedCrash, Exception) as exc:
            op.outcome, op.error = UNKNOWN, err(exc)
        op.end = now()
        self.reading = None

    # -- sweeps and maintenance -------------------------------------------------------------------------------

    def sweep(self) -> None:
        """Timeout and expiration sweeps from a process whose clock is minutes off (rarely, days ahead)."""
        skew = self.rng.randint(-10 * MINUTE_MS, 10 * MINUTE_MS)
        days = self.rng.random() < 0.1
        op = MiscOp(self._id("sweep"), "sweep", now(), detail=f"skew {skew} ms, expire={days}")
        self.result.ops.append(op)
        self.plan.hit("skewed-clock")
        try:
            coord = self.coordinator(self.store())
            wall = self.host_ms() + skew
            coord.abort_timed_out(now=wall)
            if days:
                self.plan.hit("expiry")
                coord.expire_transactional_ids(now=wall + 8 * DAY_MS)
        except (InjectedCrash, Exception) as exc:
            op.outcome, op.error = UNKNOWN, err(exc)
        op.end = now()

    def maintenance_step(self) -> None:
        self.maintenance(race_at=None)

    def maintenance(self, *, race_at: str | None, kind: str | None = None) -> None:
        """One maintenance pass: a step of its own (its own process, with faults), or, with ``race_at``, run
        from another fault-free process at a protocol point of the operation in progress; ``kind`` picks the
        pass (else drawn)."""
        def pick(options: list[Any], what: str) -> Any:
            if race_at is None:
                return self.rng.choice(options)
            return options[int(self.plan.draw(what, race_at) * len(options))]

        kinds = ["compact"] * 3 + ["retain"] * 2 + ["gc"] * 3 + ["maintain"] * 2 + ["checkpoint", "sweep", "expire"]
        if "partition-truncation" not in self.spec.avoid:
            kinds.append("truncate-partition")
        if "log-truncation-grace" not in self.spec.avoid:
            kinds.append("truncate-log")
        kind = kind or pick(kinds, "race-kind")
        topic = pick(sorted(TOPICS), "race-topic")
        part = pick(list(range(TOPICS[topic])), "race-partition")
        grace = pick(list(GRACES), "race-grace")
        if race_at is None:
            op = MiscOp(self._id("maintenance"), "maintenance", now())
            store = self.store()
        else:
            self.races += 1
            op = MiscOp(f"w{self.spec.wid}.{self.n}.race{self.races}", "maintenance", now(), race=True)
            store = self.plain_store()
        op.detail = f"{kind} {topic}/{part}" + (f" at {race_at} in {threading.current_thread().name}" if race_at
                                                 else "")
        self.result.ops.append(op)
        exclusive = "gc-merged" in self.spec.avoid and kind in ("compact", "gc", "maintain")
        if exclusive and kind != "compact" and getattr(self._racing, "compacting", False):
            op.detail += " (skipped: inside a compaction)"
            op.end = now()
            return
        before = self._observe()
        try:
            with _COMPACTION if exclusive else contextlib.nullcontext():
                self._racing.compacting = kind == "compact"
                self._maintain(self.coordinator(store), op, kind, topic, part, grace, pick)
        except (InjectedCrash, Exception) as exc:
            op.outcome, op.error = UNKNOWN, err(exc)
        finally:
            self._racing.compacting = False
            self._record_effects(op, before, gc=kind in ("gc", "maintain"))
        op.end = now()

    def _maintain(self, coord: TransactionCoordinator, op: MiscOp, kind: str, topic: str, part: int, grace: int,
                  pick: Callable[[list[Any], str], Any]) -> None:
        from coordinator import maintenance as m

        if kind == "compact":
            m.compact_partition(coord, topic, part, target_bytes=pick([256, 4096, 1 << 20], "race-target"),
                                fmt=pick(["parquet", "arrow"], "race-format"))
        elif kind == "retain":
            if topic in RETAINED:
                if pick([True, False], "race-by-size"):
                    m.apply_retention(coord, topic, part, retention_bytes=pick([300, 1500, 6000], "race-bytes"))
                else:
                    m.apply_retention(coord, topic, part, retention_ms=pick([300, 2000], "race-ms"))
        elif kind == "gc":
            op.grace_ms = grace
            if topic != SINK or "gc-stale-live" not in self.spec.avoid:
                op.reaped = m.gc_partition(coord, topic, part, grace_ms=grace).reaped
            else:
                op.detail += " (skipped: gc-stale-live)"
        elif kind == "truncate-partition":
            op.grace_ms, op.truncation = grace, True
            m.truncate_partition(coord, topic, part, grace_ms=grace)
        elif kind == "truncate-log":
            op.grace_ms, op.truncation = grace, True
            coord.log.refresh()
            coord.log.write_checkpoint()
            from coordinator import txnlog

            op.grace_ms = max(grace, txnlog.MIN_LOG_GRACE_MS)  # a shorter one is refused (a test of its own)
            coord.log.truncate(grace_ms=op.grace_ms)
        elif kind == "maintain":
            op.grace_ms = grace
            target = pick([4096, 1 << 20], "race-target")
            if {"partition-truncation", "gc-stale-live"} & self.spec.avoid:
                # the daemon's pass, without the steps that trigger known defects
                report = m.maintain(coord, grace_ms=grace, target_bytes=target, gc=False)
                for t, n in TOPICS.items():
                    if t == SINK and "gc-stale-live" in self.spec.avoid:
                        continue
                    for p in range(n):
                        report.add(m.gc_partition(coord, t, p, grace_ms=grace))
                if "partition-truncation" not in self.spec.avoid:
                    op.truncation = True
                    for t, n in TOPICS.items():
                        for p in range(n):
                            m.truncate_partition(coord, t, p, grace_ms=grace)
            else:
                op.truncation = True
                report = m.maintain(coord, grace_ms=grace, target_bytes=target)
            op.reaped = report.reaped
        elif kind == "checkpoint":
            coord.log.refresh()
            coord.log.write_checkpoint()
        elif kind == "expire":
            self.plan.hit("expiry")
            coord.expire_transactional_ids(now=self.host_ms() + 8 * DAY_MS)
        else:
            coord.abort_timed_out()

    def _observe(self) -> tuple[dict[tuple[str, int], int], set[str]]:
        """What a fault-free observer sees (not the system under test): log starts of the retained partitions and
        every data file."""
        store = self.plain_store()
        st = TransactionCoordinator(store).log.state
        starts = {(t, p): st.partition(t, p).start for t in RETAINED for p in range(TOPICS[t])}
        return starts, {i.path for i in store.list_info("topics") if "/data/" in i.path}

    def _record_effects(self, op: MiscOp, before: tuple[dict[tuple[str, int], int], set[str]], *, gc: bool) -> None:
        """Record, from the observer, what a maintenance pass did that readers may notice (even when it failed
        half way): partitions whose log start moved, and retired segments that were deleted meanwhile."""
        with faults.injected(None):
            starts, files = self._observe()
            op.moved = [tp for tp, s in starts.items() if s > before[0][tp]]
            if not gc:
                return
            gone = before[1] - files
            coord = TransactionCoordinator(self.plain_store())
            retired: set[str] = set()
            for t, n in TOPICS.items():
                for p in range(n):
                    try:
                        retired |= set(coord.partition(t, p).retired)
                    except TxnLogError:
                        continue  # a damaged partition
            op.retired_deleted = sorted(gone & retired)

    def damage(self) -> None:
        """Overwrite one committed segment (or one partition record) of one partition, as a disk or a buggy tool
        would. Readers of that partition may fail naming the file; nothing else may be affected."""
        self.damaged = True
        topic = self.rng.choice(RETAINED)
        part = self.rng.randrange(TOPICS[topic])
        op = MiscOp(self._id("damage"), "damage", now(), detail=f"{topic}/{part}")
        self.result.ops.append(op)
        with self.no_faults(), faults.injected(None):
            store = self.plain_store()
            try:
                plog = TransactionCoordinator(store).partition(topic, part)
                records = store.list(marker_dir(topic, part))
            except TxnLogError as exc:
                op.outcome, op.error = UNKNOWN, err(exc)
                return
            if self.rng.random() < 0.25 and records:
                path = f"{marker_dir(topic, part)}/{self.rng.choice(records)}"
            elif plog.segments:
                path = self.rng.choice(plog.segments).path
            else:
                op.detail += ": nothing committed to damage yet"
                self.damaged = False
                return
            store.put(path, b"overwritten by the history workload")
        op.damaged = [path]
        op.end = now()
        self.plan.hit("corrupt-file")

    def damage_checkpoint(self) -> None:
        """Overwrite one coordinator checkpoint (``_last.json`` or a numbered one). Readers may fail naming it;
        nothing else may change, and the operator's repair at the end must mend it or name it."""
        self.ckpt_damaged = True
        op = MiscOp(self._id("damage"), "damage", now(), detail="coordinator checkpoint")
        self.result.ops.append(op)
        with self.no_faults(), faults.injected(None):
            path = repair.damage_log_file(self.plain_store(), "checkpoint", self.rng,
                                          last="unnamed-last-checkpoint" not in self.spec.avoid)
        if path is None:
            op.detail += ": none written yet"
            self.ckpt_damaged = False
        else:
            op.damaged = [path]
            self.plan.hit("damaged-checkpoint")
        op.end = now()

    # -- Spark sinks ------------------------------------------------------------------------------------------

    def _stage_tasks(self, op: TxnOp, stage: Callable[[Iterator[pa.RecordBatch], Any], Any],
                     ids: Callable[[int, int], Any]) -> tuple[list[Any], bool]:
        """Run the tasks of a job or micro-batch: one row each, task ``i`` staging value ``i`` (which lands in
        partition ``i % 2``). A failed task is retried once, as Spark does; a task failing twice fails the job.
        Returns the commit messages (None for a failed task) and whether every task succeeded."""
        where = {v: tp for tp, vs in op.writes.items() for v in vs}
        values = sorted(where, key=lambda v: int(v.rsplit("/", 1)[1]))
        messages: list[Any] = []
        for task, v in enumerate(values):
            batch = pa.RecordBatch.from_pylist([{"v": v}], schema=SCHEMA)
            for attempt in range(2):
                try:
                    messages.append(stage(iter([batch]), ids(task, attempt)))
                    break
                except InjectedCrash:
                    raise
                except Exception as exc:
                    op.followups.append(f"task {task} attempt {attempt} -> {err(exc)}")
            else:
                messages.append(None)
                return messages, False
        return messages, True

    @staticmethod
    def _sink_values(op: TxnOp, label: str, rows: int) -> None:
        for i in range(rows):
            op.writes.setdefault((SINK, i % TOPICS[SINK]), []).append(f"{label}/{i}")

    def batch_job(self) -> None:
        """``df.write.format("txnlog")``: one job is one transaction; with ``txnAppId``/``txnVersion`` a failed job
        is run again (up to three times) and must publish once."""
        from txnsink import make_writer
        from txnsink.staging import TaskIds, stage_batches

        self.jobs += 1
        tid = f"w{self.spec.wid}j{self.jobs}"
        op = self._new_txn(tid, 0, kind="batch-job")
        self._sink_values(op, f"{tid}/0/{op.txn_no}", self.rng.randint(1, 4))
        idem = self.rng.random() < 0.4
        opts = {"path": self.spec.url, "topic": SINK, **self.spec.options}
        if idem:
            opts.update(txnAppId=f"w{self.spec.wid}app", txnVersion=str(self.jobs))
        outcomes: list[str] = []
        for attempt in range(3 if idem else 1):
            writer: Any = None
            msgs: list[Any] | None = None
            try:
                with _connecting(self.store):
                    writer = make_writer(opts, spark_schema(), False)

                    def stage(it: Iterator[pa.RecordBatch], ids: Any, w: Any = writer) -> Any:
                        return stage_batches(self.store(), w.plan, it, ids, w.txn)

                    def task_ids(task: int, att: int, a: int = attempt) -> Any:
                        return TaskIds(task, att, 1000 * a + 10 * task + att)

                    msgs, ok = self._stage_tasks(op, stage, task_ids)
                    if not ok:
                        writer.abort(msgs)
                        outcomes.append(FAILED)
                        continue
                    if op.commit_start is None:
                        op.commit_start = now()
                    # An unknown commit outcome is the trigger of a known defect: the driver's commit then runs on a
                    # connection without store faults (crashes still happen).
                    quiet = "sink-abort-fenced" in self.spec.avoid
                    with _connecting(self.plain_store) if quiet else contextlib.nullcontext():
                        writer.commit(msgs)
                op.outcome = OK
                op.end = now()
                return
            except InjectedCrash as exc:
                op.followups.append(f"job attempt {attempt} driver -> {err(exc)}")
                outcomes.append(UNKNOWN if msgs is not None else FAILED)  # the driver died: nobody aborts
            except Exception as exc:
                op.followups.append(f"job attempt {attempt} -> {err(exc)}")
                if writer is not None and msgs is not None:
                    try:
                        with _connecting(self.store):
                            writer.abort(msgs)  # what Spark does after a failed commit
                    except InjectedCrash:
                        pass
                outcomes.append(UNKNOWN if isinstance(exc, CommitStateUnknownError) else FAILED)
        op.outcome = UNKNOWN if UNKNOWN in outcomes else FAILED
        op.end = now()

    def stream_step(self) -> None:
        self.stream_batch(self.rng.choice(self.queries))

    def stream_batch(self, q: Query) -> bool:
        """One attempt at a streaming query's next micro-batch (or the replay of a failed one), as Spark runs it:
        a new writer, tasks, ``commit`` on the driver, ``abort`` if a task or the commit failed. Returns whether
        the commit returned."""
        from txnsink import make_stream_writer
        from txnsink.staging import TaskIds

        if q.pending is None:
            q.pending = self._new_txn(q.name, 0, kind="stream-batch")
            q.pending.txn_no = q.next_batch
            self._sink_values(q.pending, f"{q.name}/0/{q.next_batch}", self.rng.randint(1, 3))
        op, batch = q.pending, q.next_batch
        writer: Any = None
        msgs: list[Any] | None = None
        try:
            with _connecting(self.store):
                writer = make_stream_writer({"path": self.spec.url, "topic": SINK, **self.spec.options},
                                            spark_schema(), False)

                def task_ids(task: int, att: int) -> Any:
                    return TaskIds(task, att, 10 * task + att, q.query_id, batch)

                msgs, ok = self._stage_tasks(op, writer.stage, task_ids)
                if not ok:
                    writer.abort(msgs, batch)
                    return False
                if op.commit_start is None:
                    op.commit_start = now()
                writer.commit(msgs, batch)
        except InjectedCrash as exc:
            op.followups.append(f"micro-batch {batch} {_attempt_of(msgs)} driver -> {err(exc)}")
            if writer is not None and msgs is not None and self.rng.random() < self.spec.zombie_rate:
                q.zombies.append((writer, msgs, batch))
            return False
        except Exception as exc:
            op.followups.append(f"micro-batch {batch} {_attempt_of(msgs)} -> {err(exc)}")
            if writer is not None and msgs is not None:
                try:
                    with _connecting(self.store):
                        writer.abort(msgs, batch)
                except InjectedCrash:
                    pass
            return False
        self._batch_done(q, op)
        return True

    @staticmethod
    def _batch_done(q: Query, op: TxnOp) -> None:
        """``op`` committed (by this attempt, or by a dead driver's late commit that landed during it)."""
        if op.outcome != OK:
            op.outcome, op.end = OK, now()
        if q.pending is op:
            q.pending = None
            q.next_batch = op.txn_no + 1

    def _stream_zombie(self, q: Query) -> None:
        """A dead driver of ``q`` commits its attempt late: a no-op if the batch was committed since, else it
        publishes the batch (the same rows: the source is replayable)."""
        writer, msgs, batch = q.zombies.pop(0)
        self.plan.hit("zombie")
        op = MiscOp(self._id("zombie-driver"), "zombie-driver", now(), detail=f"{q.name} batch {batch}")
        self.result.ops.append(op)
        with self.no_faults():
            try:
                writer.commit(msgs, batch)
            except Exception as exc:
                op.outcome, op.error = UNKNOWN, err(exc)
                op.detail += f" {_attempt_of(msgs)}"
        op.end = now()
        if op.error is None and q.pending is not None and batch == q.next_batch:
            q.pending.followups.append("a dead driver's late commit -> ok")
            self._batch_done(q, q.pending)

    def finish_queries(self) -> None:
        """Spark restarts each query at the end: the pending batch is replayed until it commits, then the last
        batch is replayed once more (as after a crash between the sink's commit and Spark's own checkpoint),
        which must publish nothing."""
        for q in self.queries:
            for _ in range(3):
                if q.pending is None or self.stream_batch(q):
                    break
            done = [o for o in self.result.ops if isinstance(o, TxnOp) and o.tid == q.name and o.outcome == OK]
            if q.pending is None and done:
                last, acked = done[-1], done[-1].end
                q.next_batch, q.pending = last.txn_no, last
                if self.stream_batch(q):
                    last.followups.append("replay after a restart -> ok")
                last.end = acked


def _attempt_of(messages: list[Any] | None) -> str:
    """The transaction id of a sink attempt, from its commit messages."""
    txns = {m.txn for m in messages or [] if m is not None}
    return f"attempt {txns.pop()}" if len(txns) == 1 else "attempt ?"


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


#: The log's time constants, scaled down together so that log truncation happens within a history: a grace
#: period must still be at least twice the window in which a process refreshes by name (the safety argument of
#: ``TransactionLog.truncate`` holds at any scale; a pause longer than ``RECENT_S`` is the assumption it rests on).
SCALED_RECENT_S = 0.25
SCALED_MIN_LOG_GRACE_MS = 500
#: The pause rate of a history with pauses, as a share of its fault (crash) rate: per store call under ``_txn/``.
PAUSE_SHARE = 1 / 6
#: A committer stalls at its protocol point at the fault rate divided by this (pauses drawn at store calls cover the
#: same place too: before the conditional create of a log entry).
STALL_SHARE = 16
#: Where a stall pauses a committer (after it read the log, before it creates its entry), and for how long: past
#: the scaled grace period, so that the entry's number may have been used, checkpointed and truncated meanwhile.
STALL_POINT = "txnlog.entry.before"
STALL_S = SCALED_MIN_LOG_GRACE_MS / 1000 + 0.1


@contextlib.contextmanager
def scaled_log_clock() -> Iterator[None]:
    """Run with :data:`SCALED_RECENT_S` and :data:`SCALED_MIN_LOG_GRACE_MS` (restored after)."""
    from coordinator import txnlog

    saved = txnlog.RECENT_S, txnlog.MIN_LOG_GRACE_MS
    txnlog.RECENT_S, txnlog.MIN_LOG_GRACE_MS = SCALED_RECENT_S, SCALED_MIN_LOG_GRACE_MS
    try:
        yield
    finally:
        txnlog.RECENT_S, txnlog.MIN_LOG_GRACE_MS = saved


def _drain(who: str, timeout: float = 120.0) -> None:
    """Wait for the pools' jobs to end (:func:`coordinator.parallel.drain`); when they do not, fail with the
    stacks of the pool threads still busy."""
    if parallel.drain(timeout=timeout):
        return
    frames = sys._current_frames()
    stacks = [f"--- {t.name}\n" + "".join(traceback.format_stack(frames[t.ident], limit=12))
              for t in threading.enumerate() if t.name.startswith("txnlog-") and t.ident in frames]
    stacks = [st for st in stacks if "work_queue.get" not in st]  # idle pool threads
    raise RuntimeError(f"{who}: jobs still running {timeout:.0f} s after it ended\n" + "\n".join(stacks))


def run_worker(spec: WorkerSpec) -> WorkerResult:
    """Run one worker to completion (in this thread or process)."""
    with history_clocks() if multiprocessing.parent_process() is not None else contextlib.nullcontext():
        if spec.sinks or spec.streams:
            with sink_connections():
                return Worker(spec).run()
        return Worker(spec).run()


@contextlib.contextmanager
def history_clocks() -> Iterator[None]:
    """The clocks a history runs on: the log's scaled down (:func:`scaled_log_clock`), and each process's host
    clock skewed by its own offset (:func:`history.clocks.host_clocks`, over every module that reads it)."""
    import coordinator.cli.daemon  # noqa: F401 - loaded before the host clock is patched
    import coordinator.maintenance  # noqa: F401
    import coordinator.sweeps  # noqa: F401

    with scaled_log_clock(), clocks.host_clocks():
        yield


def _process_main(spec: WorkerSpec, results: Any, ready: Any) -> None:
    """A worker process: says it is running (its imports are done), runs, and sends its result (or the failure)."""
    ready.set()
    try:
        results.put((spec.wid, run_worker(spec), None))
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the history
        results.put((spec.wid, None, traceback.format_exc()))


def _run_processes(params: HistoryParams, specs: list[WorkerSpec]) -> tuple[list[WorkerResult], list[MiscOp]]:
    """Run the workers as processes, stopping some of them for a while (``SIGSTOP``, :func:`pauses.stop_processes`)
    as drawn; returns their results and the stops."""
    import queue as queues

    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    ready = [ctx.Event() for _ in specs]
    procs = [ctx.Process(target=_process_main, args=(spec, results, ready[i]), name=f"history-worker-{i}")
             for i, spec in enumerate(specs)]
    for proc in procs:
        proc.start()
    done = threading.Event()
    stops: list[MiscOp] = []
    got: dict[int, WorkerResult] = {}
    stopper = threading.Thread(target=lambda: stops.extend(pauses.stop_processes(
        params.seed, params.url, params.options, [proc.pid or 0 for proc in procs], lambda w: ready[w].is_set(),
        lambda w: w not in got and procs[w].is_alive(), params.process_pauses, done,
        truncate="log-truncation-grace" not in params.avoid)), name="stopper")
    stopper.start()
    failure: str | None = None
    try:
        while len(got) < len(procs) and failure is None:
            try:
                wid, result, tb = results.get(timeout=1.0)
            except queues.Empty:
                dead = [i for i, proc in enumerate(procs) if i not in got and proc.exitcode not in (None, 0)]
                if dead:
                    failure = f"worker process {dead[0]} died with exit code {procs[dead[0]].exitcode}"
                continue
            if tb is not None:
                failure = f"worker {wid} failed:\n{tb}"
            else:
                got[wid] = result
    finally:
        done.set()
        stopper.join()
        for proc in procs:
            if failure is not None:
                proc.terminate()
            proc.join()
    if failure is not None:
        raise RuntimeError(failure)
    return [got[i] for i in range(len(procs))], stops


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
    error_rate: float = 0.0
    race_rate: float = 0.0
    read_only_rate: float = 0.0
    maintenance: bool = False
    damage: bool = False
    sinks: bool = False
    streams: int = 0
    avoid: frozenset[str] = frozenset()
    #: chance that a store call under ``_txn/`` pauses (see :class:`history.stores.FaultPlan`)
    pause_rate: float = 0.0
    #: whole worker processes stopped (``--processes`` only)
    process_pauses: int = 0
    #: each worker's host clock offset (ms); missing workers have none
    clock_skews: tuple[int, ...] = ()
    #: the writing path opened on a store that ignores conditional writes ("": none); ``lying_cli`` picks the
    #: command when it is the command line
    lying: str = ""
    lying_cli: int = 0
    #: worker 0 overwrites a coordinator checkpoint half way
    damage_checkpoint: bool = False
    #: a log entry is overwritten at the end, before the operator's repair (a switch: no repair exists yet)
    damage_log: bool = False
    #: share of producer commits sent with ``commit_transaction_async`` (pipelined behind the ones in flight)
    async_commits: float = 0.0

    def describe(self) -> str:
        kind = "processes" if self.processes else "threads"
        skews = ",".join(clocks.describe(k) if k else "0" for k in self.clock_skews)
        return (f"seed={self.seed} workers={self.workers} ({kind}) steps={self.steps} fault_rate={self.fault_rate} "
                f"error_rate={self.error_rate} lost_reply_rate={self.lost_reply_rate} race_rate={self.race_rate} "
                f"read_only={self.read_only_rate} maintenance={self.maintenance} damage={self.damage} "
                f"sinks={self.sinks} streams={self.streams} ckpt={self.checkpoint_interval} "
                f"segment={self.segment_format}/{self.segment_bytes} pause_rate={self.pause_rate:g}"
                + (f" process_pauses={self.process_pauses}" if self.processes else "")
                + (f" clock_skews={skews}" if any(self.clock_skews) else "")
                + (f" lying={self.lying}" if self.lying else "")
                + (" damage_checkpoint" if self.damage_checkpoint else "")
                + (" damage_log" if self.damage_log else "")
                + (f" async_commits={self.async_commits:g}" if self.async_commits else "")
                + (f" avoided={sorted(self.avoid)}" if self.avoid else ""))

    def skew(self, w: int) -> int:
        return self.clock_skews[w] if w < len(self.clock_skews) else 0


def params_for(seed: int, url: str, options: dict[str, str] | None = None, *, fault_rate: float = 0.03,
               processes: bool = False, steps: int | None = None, **fixed: Any) -> HistoryParams:
    """Draw a history's shape from ``seed``: workers, steps, checkpoint interval, segment size and format, which
    faults and which clients take part."""
    rng = random.Random(seed)
    drawn: dict[str, Any] = dict(
        workers=rng.choice([1, 1, 2, 3]),
        steps=steps if steps is not None else rng.randint(10, 30),
        checkpoint_interval=rng.choice([0, 3, 7, 100]),
        segment_bytes=rng.choice([1, 1 << 20]),
        segment_format=rng.choice(["arrow", "parquet"]),
        lost_reply_rate=rng.choice([0.0, fault_rate / 2]),
        ctp=rng.random() < 0.8,
        error_rate=rng.choice([0.0, fault_rate / 10, fault_rate / 3]),
        race_rate=rng.choice([0.0, fault_rate / 3, fault_rate]),
        read_only_rate=rng.choice([0.0, 0.5, 1.0]),
        maintenance=rng.random() < 0.7,
        damage=rng.random() < 0.15,
        sinks=rng.random() < 0.5,
        streams=rng.choice([0, 0, 1, 2]),
    )
    # drawn after the others, so that the shapes drawn above stay those of earlier versions
    drawn.update(
        pause_rate=rng.choice([0.0, 0.0, 0.0, fault_rate * PAUSE_SHARE]),
        process_pauses=rng.choice([0, 1, 1, 2]),
        clock_skews=tuple(clocks.draw_skew(rng.random(), rng.random(), rng.random() < 0.5) for _ in range(8))
        if rng.random() < 0.3 else (),
        lying=rng.choice(lying.PATHS) if rng.random() < 0.25 else "",
        lying_cli=rng.randrange(len(lying.CLI_COMMANDS)),
        damage_checkpoint=rng.random() < 0.25,
    )
    if processes:
        drawn["workers"] = max(2, drawn["workers"])
    if fixed.get("clock_skews") == "all":  # every worker skewed (hours or days, either way)
        fixed = {**fixed, "clock_skews": tuple(clocks.draw_skew(1 / 3 + 2 / 3 * rng.random(), rng.random(),
                                                                rng.random() < 0.5) for _ in range(8))}
    drawn.update(fixed)
    avoided = {path for path, name in _LYING_DEFECTS.items() if name in fixed.get("avoid", frozenset())}
    if drawn["lying"] in avoided:  # another path instead
        paths = [p for p in lying.PATHS if p not in avoided]
        drawn["lying"] = paths[lying.PATHS.index(drawn["lying"]) % len(paths)]
    return HistoryParams(seed=seed, url=url, options=dict(options or {}), fault_rate=fault_rate,
                         processes=processes, **drawn)


def setup_topics(url: str, options: dict[str, str]) -> None:
    store = open_store(url, options)
    for name, parts in TOPICS.items():
        create_topic(store, name, SCHEMA, parts, TOPIC_CONFIG.get(name), exist_ok=True)


def run_history(params: HistoryParams) -> History:
    """Set up topics, run the workers (threads, or processes), drive a writing path against a lying store and
    damage the log as drawn, let the operator repair damaged log files, then take the fault-free final read."""
    with history_clocks():
        return _run_history(params)


def _run_history(params: HistoryParams) -> History:
    setup_topics(params.url, params.options)

    def solo(w: int) -> bool:
        """Whether worker ``w`` runs maintenance: across processes, compaction and GC cannot be kept apart by a
        lock, so only worker 0 does while ``gc-merged`` is avoided."""
        return not params.processes or w == 0 or "gc-merged" not in params.avoid

    specs = [WorkerSpec(params.url, params.options, params.seed, w, params.steps, params.fault_rate,
                        params.lost_reply_rate, params.zombie_rate, params.ctp and w == 0,
                        params.checkpoint_interval, params.segment_bytes, params.segment_format,
                        error_rate=params.error_rate, race_rate=params.race_rate if solo(w) else 0.0,
                        read_only_rate=params.read_only_rate, maintenance=params.maintenance and solo(w),
                        damage=params.damage and w == 0, sinks=params.sinks, streams=params.streams,
                        avoid=params.avoid, pause_rate=params.pause_rate, clock_skew_ms=params.skew(w),
                        damage_checkpoint=params.damage_checkpoint and w == 0,
                        async_commits=params.async_commits)
             for w in range(params.workers)]
    results: list[WorkerResult] = []
    stops: list[MiscOp] = []
    if params.processes:
        results, stops = _run_processes(params, specs)
    elif len(specs) == 1:
        results = [run_worker(specs[0])]
    else:
        slots: list[WorkerResult | BaseException | None] = [None] * len(specs)

        def target(i: int) -> None:
            try:
                slots[i] = run_worker(specs[i])
            except BaseException as exc:  # surfaced below
                slots[i] = exc

        with sink_connections():
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
    _drain("the history")
    h = History(params.seed, params.describe(), ctp=(GROUP, SRC, DST) if params.ctp else None)
    for r in results:
        h.ops += r.ops
        h.faults.update(r.faults)
    h.faults["maintenance-race"] += _concurrent_maintenance(results)
    h.ops += stops
    h.faults["process-pause"] += sum(o.kind == "process-pause" for o in stops)
    _after_workers(params, h)
    h.final, h.final_groups, h.verify = final_read(params.url, params.options)
    return h


def _after_workers(params: HistoryParams, h: History) -> None:
    """Between the workers and the final read: a writing path opened on a lying store (on a scratch copy of the
    store), a log entry damaged (``damage_log``), and the operator's repair of every damaged log file."""
    if params.lying:
        op = MiscOp("lying", "lying-store", now())
        h.ops.append(lying.open_lying(op, params.url, params.options, params.lying,
                                      lying.CLI_COMMANDS[params.lying_cli], setup_topics, spark_schema, SCHEMA))
        op.end = now()
        h.faults["lying-store"] += 1
    if params.damage_log:
        op = MiscOp("damage-log", "damage", now(), detail="log entry")
        path = repair.damage_log_file(open_store(params.url, params.options), "log-entry",
                                      random.Random(params.seed * 13 + 5), sole=op.sole)
        if path is not None:
            op.damaged = [path]
            h.faults["damaged-log-entry"] += 1
        op.end = now()
        h.ops.append(op)
    log_files = sorted(p for p in h.damaged() if p.startswith("_txn/"))
    if log_files:
        h.ops.append(repair.operator_repair(params.url, params.options, log_files))


def _concurrent_maintenance(results: list[WorkerResult]) -> int:
    """Maintenance steps that ran while another worker's operation was in progress."""
    n = 0
    for i, r in enumerate(results):
        others = [o for j, s in enumerate(results) if j != i for o in s.ops if o.end]
        for m in r.ops:
            if isinstance(m, MiscOp) and m.kind == "maintenance" and not m.race and m.end and \
                    any(o.start <= m.end and m.start <= o.end for o in others):
                n += 1
    return n


def final_read(url: str, options: dict[str, str]) -> tuple[ReadOp, dict[str, dict[str, dict[int, int]]],
                                                          list[tuple[str, str]]]:
    """A fresh, fault-free process reads every partition at one snapshot (a partition it cannot read is
    recorded, not fatal), and the group offsets; then the operator repairs derived records and runs ``verify``."""
    from coordinator.inspect import verify

    op = ReadOp("final", "final", now(), topics=tuple(sorted(TOPICS)), complete=True)
    store = open_store(url, options)
    coord = TransactionCoordinator(store)
    groups: dict[str, dict[str, dict[int, int]]] = {}
    try:
        snap = coord.snapshot(op.topics)
        op.floors = {(t, p): s for t, ps in snap.starts.items() for p, s in ps.items()}
        for t in op.topics:
            schema = output_schema(get_topic(store, t).schema)
            for p, end in sorted(snap.ends[t].items()):
                try:
                    plog = coord.partition(t, p)
                    plog.refresh()
                    batches = list(read_range(store, plog, snap.starts[t][p], end, schema))
                except CorruptLogError as exc:
                    op.part_errors[(t, p)] = err(exc)
                    continue
                op.records += _records(pa.Table.from_batches(batches, schema=schema), t)
        groups = {GROUP: {t: {int(p): o for p, o in ps.items()} for t, ps in coord.group_offsets(GROUP).items()}}
    except Exception as exc:
        op.outcome, op.error = UNKNOWN, err(exc)
    op.end = now()
    problems: list[tuple[str, str]] = []
    try:
        coord.repair_records()
        problems = [(pr.path, pr.message) for pr in verify(store)]
    except TxnLogError as exc:
        problems = [("_txn", f"repair or verify failed: {err(exc)}")]
    return op, groups, problems
