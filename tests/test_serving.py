"""The writer serving the queue does so on a thread of its own (``coordinator/serving.py``): its caller is answered
at once, the process's next requests join the served rounds without an intent, and a round that fails answers the
requests handed to it honestly (their callers learn the outcome from the log)."""

from __future__ import annotations

import builtins
import json
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable

import pyarrow as pa
import pytest

from coordinator import (
    CommitStateUnknownError,
    CorruptLogError,
    Producer,
    Store,
    StoreError,
    TransactionCoordinator,
    faults,
    groupcommit,
    intentqueue,
    parallel,
    serving,
    stage_segment,
)
from coordinator.answers import is_answer
from coordinator.decisions import Outcome
from coordinator.layout import TXN_INTENTS, TXN_LOG, intent_path, marker_dir, txn_log_path
from coordinator.records import LogEntry
from coordinator.requests import Request, commit_request, init_request, request_bytes
from coordinator.txnlog import TransactionLog
from core_helpers import SCHEMA, Backend, LostReplyStore, committed_ids, make_topic, rows


class ByThread(LostReplyStore):
    """The real store, noting which thread created each log entry and which intents were written."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.entries_by: list[str] = []
        self.intents: list[str] = []
        self.fail_served_entry = False

    def lose(self, path: str) -> str | None:
        if path.startswith(TXN_LOG + "/"):
            by = threading.current_thread().name
            self.entries_by.append(by)
            if self.fail_served_entry and by == "txnlog-serve":
                self.fail_served_entry = False
                return "unknown"  # created, but the serving thread cannot tell
        return None

    def put(self, path: str, data: bytes) -> None:
        if path.startswith("_txn/intents/"):
            self.intents.append(path)
        super().put(path, data)


def _intent_waiting(backend: Backend, n: int = 0) -> str:
    """A commit of producer ``waiter`` published as an intent (its process lost a race and waits). Returns its
    request id."""
    store, req = _waiting_request(backend, n)
    store.put(intent_path(req.id), request_bytes(req))
    return req.id


def _waiting_request(backend: Backend, n: int = 0) -> tuple[Store, Request]:
    """The commit :func:`_intent_waiting` publishes (row ``1000 + n`` in partition 1), not published yet, and the
    store to publish it on."""
    store = backend.open()
    coord = TransactionCoordinator(store)
    ident = coord.init_producer(f"waiter{n}")
    seg = stage_segment(store, "t", 1, pa.Table.from_pylist(rows([1000 + n], "w"), schema=SCHEMA),
                        f"{ident.txn_id(0)}~a", seq=0)
    return store, commit_request(txn=ident.txn_id(0), tid=ident.tid, pid=ident.pid, epoch=ident.epoch, n=0,
                                 segments=(seg,))


def _stack_of(ident: int | None) -> str:
    """The stack of thread ``ident`` now (for a test's failure message)."""
    frame = sys._current_frames().get(ident) if ident is not None else None
    return "".join(traceback.format_stack(frame)) if frame is not None else "(no such thread)"


def _serving_producer(backend: Backend, store: Store) -> Producer:
    """Producer ``a`` on ``store`` whose first commit (row 1, partition 0 of topic ``t``) decided another process's
    waiting intent (row 1000) too, so its process serves the queue on a thread of its own."""
    make_topic(backend.open(), partitions=2)
    _intent_waiting(backend)
    p = Producer(store, "a")
    p.init_transactions()
    with p.transaction():
        p.send("t", rows([1], "a"), partition=0)
    return p


@pytest.fixture
def serving_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """Serving goes on while the queue is empty (for 3 s), so a test's next commit finds it serving."""
    monkeypatch.setattr(serving, "SERVE_EMPTY_LOOKS", 1_000_000)
    monkeypatch.setattr(serving, "SERVE_S", 3.0)


@pytest.mark.usefixtures("serving_long")
def test_the_serving_writers_caller_is_answered_at_once_and_its_next_commit_joins_the_served_rounds(
    backend: Backend,
) -> None:
    make_topic(backend.open(), partitions=2)
    waiting = _intent_waiting(backend)
    store = ByThread(backend.open())
    p = Producer(store, "a")
    p.init_transactions()
    with p.transaction():  # decides the waiting intent too, then serves the queue on its own thread
        p.send("t", rows([1], "a"), partition=0)
    log = p.coordinator.log
    assert log._serving, "the caller waited for the serving to end"
    first_entries, first_intents = len(store.entries_by), len(store.intents)
    with p.transaction():
        p.send("t", rows([2], "a"), partition=0)
    # the second commit was decided by an entry of the serving thread, with no intent of its own
    assert store.entries_by[first_entries:] == ["txnlog-serve"]
    assert store.intents[first_intents:] == []
    assert parallel.drain(30)
    assert not log._serving
    assert log.decision(waiting) is not None
    assert committed_ids(backend) == [1, 2, 1000]


@pytest.mark.usefixtures("serving_long")
def test_a_request_handed_to_a_served_round_whose_entry_is_unknown_learns_its_outcome_from_the_log(
    backend: Backend,
) -> None:
    store = ByThread(backend.open())
    p = _serving_producer(backend, store)
    assert p.coordinator.log._serving
    store.fail_served_entry = True
    p.begin_transaction()
    p.send("t", rows([2], "a"), partition=0)
    try:
        p.commit_transaction()
    except CommitStateUnknownError:
        p.commit_transaction()  # the caller's retry learns the outcome
    assert store.entries_by[-1] == "txnlog-serve" and not store.fail_served_entry
    assert parallel.drain(30)
    assert committed_ids(backend) == [1, 2, 1000]


def test_entries_read_ahead_are_applied_only_while_each_links_to_the_one_before(backend: Backend) -> None:
    """G1/G5. A reader following a busy log asks for several next entries at once; one that does not name the entry
    before it (a ghost a paused writer created under a number a truncation freed) must not be applied, as when it
    is listed: the reader reports the gap instead of taking it for the log."""
    make_topic(backend.open(), partitions=1)
    reader = TransactionCoordinator(backend.open(), checkpoint_interval=0)
    p = Producer(backend.open(), "p")
    p.init_transactions()
    reader.log.refresh()
    with p.transaction():
        p.send("t", rows([1], "p"))
    reader.log.refresh()  # found one new entry: the next refresh asks for two
    with p.transaction():
        p.send("t", rows([2], "p"))
    seq = p.coordinator.log.state.seq
    ghost = {"v": 2, "seq": seq + 1, "ts": int(time.time() * 1000), "writer": uuid.uuid4().hex,
             "prev": "not-the-entry-before", "items": [], "touched": []}
    assert backend.open().put_if_absent(txn_log_path(seq + 1), json.dumps(ghost).encode())
    with pytest.raises(CorruptLogError, match="does not follow on"):
        reader.log.refresh()
    assert reader.log.state.seq == seq


class FailsFirstIntentsListing(LostReplyStore):
    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.failed = True  # armed by the test

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        if prefix == "_txn/intents" and not self.failed:
            self.failed = True
            raise StoreError("listing _txn/intents failed")
        return super().list(prefix, start_after, limit)


def test_a_failed_listing_of_intents_made_while_staging_does_not_fail_the_commit(backend: Backend) -> None:
    """G7. The listing a producer starts beside staging its last segment is only made early: when it fails, the
    commit lists again itself (before, a store error of a request made ahead of time, or in another process's
    life, failed the commit)."""
    make_topic(backend.open(), partitions=1)
    store = FailsFirstIntentsListing(backend.open())
    p = Producer(store, "p")
    p.init_transactions()
    store.failed = False
    with p.transaction():
        p.send("t", rows([1], "p"))
    assert store.failed
    assert committed_ids(backend) == [1]


class SlowProof(LostReplyStore):
    """The real store, with the proof's listing of checkpoints slow, so that the requests a refresh starts beside
    the proof are running in the request pool before the refresh waits for them."""

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        if prefix == "_txn/checkpoint":
            time.sleep(0.3)
        return super().list(prefix, start_after, limit)


def test_a_waiter_looking_for_its_records_beside_the_proof_never_deadlocks_on_the_log(backend: Backend) -> None:
    """G6. A committer waiting for its decision looks for its partition records while the entry deciding it is
    proven, in the request pool, while its refresh holds the log's lock and waits for those looks: a look that took
    the log's lock as well hung the committer for good (found by the history checker)."""
    make_topic(backend.open(), partitions=1)
    waiter = TransactionCoordinator(SlowProof(backend.open()), checkpoint_interval=0)
    waiter.log.refresh()
    p = Producer(backend.open(), "p")
    p.init_transactions()
    with p.transaction():
        p.send("t", rows([1], "p"))
    rid = f"c-{p.identity.txn_id(0)}"  # type: ignore[union-attr]
    assert p.coordinator.log.decision(rid) is not None
    log = waiter.log

    def wait_for_decision() -> None:
        with log._lock:
            log._read_ahead = log._records_ahead(rid)
            try:
                log._catch_up()
            finally:
                log._read_ahead = None

    t = threading.Thread(target=wait_for_decision, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the waiter hung on the log's lock"
    assert log.decision(rid) is not None and log._records_found, "the records were not looked for beside the proof"


@pytest.mark.usefixtures("serving_long")
def test_the_serving_thread_never_hands_a_request_to_itself(backend: Backend) -> None:
    """A request submitted on the serving thread itself is decided there, not handed over: the thread would wait
    for itself until the submit budget ran out (and then answer an unknown outcome to a request nobody decided)."""
    make_topic(backend.open(), partitions=2)
    store = backend.open()
    other = TransactionCoordinator(store).init_producer("other")
    _intent_waiting(backend)
    req = commit_request(txn=other.txn_id(0), tid=other.tid, pid=other.pid, epoch=other.epoch, n=0, segments=())
    p = Producer(store, "a")
    handed: list[object] = []

    def injector(name: str) -> None:
        if threading.current_thread().name == "txnlog-serve" and name == "txnlog.entry.before" and not handed:
            handed.append(p.coordinator.log._hand_over(req))

    with faults.injected(injector):
        p.init_transactions()
        with p.transaction():  # decides the waiting intent, then serves the queue on its own thread
            p.send("t", rows([1], "a"), partition=0)
        assert p.coordinator.log._serving
        with p.transaction():  # handed to the serving thread, whose round creates an entry for it
            p.send("t", rows([2], "a"), partition=0)
    assert parallel.drain(30)
    assert handed == [None]
    assert committed_ids(backend) == [1, 2, 1000]


class SlowEntries(ByThread):
    """:class:`ByThread` whose log entries take ``delay_s`` to create, as on an object store: a try holding the log's
    lock lasts long enough for other threads of the process to ask for the log meanwhile."""

    def __init__(self, inner: Store, delay_s: float = 0.02) -> None:
        super().__init__(inner)
        self.delay_s = delay_s

    def lose(self, path: str) -> str | None:
        if path.startswith(TXN_LOG + "/"):
            time.sleep(self.delay_s)
        return super().lose(path)


def test_threads_of_one_process_share_entries_instead_of_taking_the_log_lock_in_turn(backend: Backend) -> None:
    """Producers on threads of one process that share a coordinator (one log view, as its docstring advises) join
    one entry per round: a request made while another thread decides one itself is handed to a serving thread.
    Before, each thread took the log's lock for a whole try in turn, so every commit cost an entry of its own and
    16 threads committed at a 16th of the pace. Nothing is lost or doubled, and no request needs an intent (there
    is no other process to race)."""
    threads, commits = 16, 3
    make_topic(backend.open(), partitions=threads)
    store = SlowEntries(backend.open())
    coord = TransactionCoordinator(store)
    errors: list[BaseException] = []
    go = threading.Barrier(threads)

    def run(i: int) -> None:
        try:
            p = Producer(store, f"w{i}", coordinator=coord)
            p.init_transactions()
            go.wait()
            for k in range(commits):
                with p.transaction():
                    p.send("t", rows([1000 * i + k], f"w{i}"), partition=i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    assert parallel.drain(30)
    assert errors == []
    assert committed_ids(backend) == sorted(1000 * i + k for i in range(threads) for k in range(commits))
    commit_entries = len(store.entries_by) - threads  # one init entry per producer at most
    assert commit_entries <= threads * commits // 3, f"{commit_entries} entries for {threads * commits} commits"
    assert "txnlog-serve" in store.entries_by
    assert store.intents == []


def test_a_refresh_shares_another_threads_read_only_when_that_read_began_after_it(backend: Backend) -> None:
    """Threads waiting for the log's lock share one read of the log, but only a read that began after the call:
    a refresh still sees every commit acknowledged before it began, even right after a refresh of its own."""
    make_topic(backend.open())
    mine = TransactionCoordinator(backend.open())
    mine.log.refresh()
    other = Producer(backend.open(), "other")
    other.init_transactions()
    with other.transaction():
        other.send("t", rows([1], "o"), partition=0)
    assert "other" in mine.log.refresh().producers


def test_a_request_made_inside_a_try_of_the_same_thread_is_decided_there_not_handed_over(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread deciding a request holds the log's lock for its whole try; a request it makes meanwhile (a hook
    inside the try) is decided on that thread, not handed to a serving thread, which would wait for the lock the
    caller holds while the caller waits for it, until the submit budget ran out."""
    monkeypatch.setattr(groupcommit, "SUBMIT_BUDGET_S", 5.0)
    make_topic(backend.open(), partitions=2)
    store = backend.open()
    coord = TransactionCoordinator(store)
    a = Producer(store, "a", coordinator=coord)
    b = Producer(store, "b", coordinator=coord)
    a.init_transactions()
    b.init_transactions()
    inner: list[str] = []

    def injector(name: str) -> None:
        if name == "txnlog.entry.before" and not inner:
            inner.append(threading.current_thread().name)
            with faults.injected(None), b.transaction():
                b.send("t", rows([2], "b"), partition=1)

    with faults.injected(injector), a.transaction():
        a.send("t", rows([1], "a"), partition=0)
    assert inner and inner[0] != "txnlog-serve"
    assert parallel.drain(30)
    assert committed_ids(backend) == [1, 2]


class HeldRecords(ByThread):
    """:class:`ByThread` whose partition records of ``held`` (a topic's partition) wait for ``release`` before they
    are created, as a slow request to an object store does."""

    def __init__(self, inner: Store, held: str) -> None:
        super().__init__(inner)
        self.held = held
        self.release = threading.Event()
        self.read: list[str] = []

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if path.startswith(self.held + "/"):
            self.release.wait(60)
        return super().put_if_absent(path, data)

    def get(self, path: str) -> bytes:
        self.read.append(path)
        return super().get(path)


def _commit_of(store: Store, coord: TransactionCoordinator, tid: str, partition: int, value: int) -> Request:
    ident = coord.init_producer(tid)
    seg = stage_segment(store, "t", partition, pa.Table.from_pylist(rows([value], tid), schema=SCHEMA),
                        f"{ident.txn_id(0)}~a", seq=0)
    return commit_request(txn=ident.txn_id(0), tid=tid, pid=ident.pid, epoch=ident.epoch, n=0, segments=(seg,))


def fast_and_slow_decided(backend: Backend, *, intents: bool = False,
                          ) -> tuple[HeldRecords, TransactionLog, Request, Request, LogEntry]:
    """Commits ``fast`` (partition 0) and ``slow`` (partition 1, whose records wait for ``store.release``), and the
    entry that decided both: (store, log, fast, slow, entry); with ``intents``, written as intents first."""
    make_topic(backend.open(), partitions=2)
    store = HeldRecords(backend.open(), held=marker_dir("t", 1))
    coord = TransactionCoordinator(store)
    fast, slow = _commit_of(store, coord, "fast", 0, 1), _commit_of(store, coord, "slow", 1, 2)
    for req in (fast, slow) if intents else ():
        store.put(intent_path(req.id), request_bytes(req))
    log = coord.log
    with log._lock:
        log._catch_up()
        won = log._append([fast, slow])
    assert won is not None
    return store, log, fast, slow, won[0]


def test_a_served_commit_is_answered_once_its_own_partitions_records_exist_not_the_whole_entrys(
    backend: Backend,
) -> None:
    """A round's entry decides many commits; each caller is answered as soon as the records of the partitions it
    published rows in are written (its second copy: docs/design.md, "A commit", step 4), not after the slowest
    record of the entry. Before, one slow record put held every caller of the round."""
    store, log, fast, slow, entry = fast_and_slow_decided(backend)
    handed = [serving.HandedOver(fast), serving.HandedOver(slow)]
    writing = threading.Thread(target=log._records_then_answer, args=(entry, handed))
    writing.start()
    try:
        assert handed[0].done.wait(10), "the commit in partition 0 waited for the record of partition 1"
        assert handed[0].outcome is not None and handed[0].outcome.status == "committed"
        assert not handed[1].done.is_set()  # its own record is not written yet
        # the caller's check of its second copy knows the record this process wrote, without asking the store
        before = len(store.read)
        log.secure_records(entry.seq, handed[0].outcome.item)  # type: ignore[arg-type]
        assert store.read[before:] == []
    finally:
        store.release.set()
        writing.join(30)
    assert handed[1].done.is_set() and handed[1].outcome is not None
    assert handed[1].outcome.status == "committed"
    assert committed_ids(backend) == [1, 2]


class ReadsByThread(ByThread):
    """:class:`ByThread` noting which thread read each log entry."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.entry_reads: list[str] = []

    def get(self, path: str) -> bytes:
        if path.startswith(TXN_LOG + "/"):
            self.entry_reads.append(threading.current_thread().name)
        return super().get(path)


@pytest.mark.usefixtures("serving_long")
def test_a_commit_handed_to_this_processs_serving_thread_reads_nothing_of_the_log_itself(backend: Backend) -> None:
    """While a thread of the process serves the queue, a commit staging its rows does not read the log to check
    that its producer is not fenced (the serving thread decides the commit from its own view, which answers a
    fenced producer just as well): that read only held the log's lock against the serving thread's next round."""
    store = ReadsByThread(backend.open())
    p = _serving_producer(backend, store)
    assert p.coordinator.serving_here
    before = len(store.entry_reads)
    with p.transaction():
        p.send("t", rows([2], "a"), partition=0)
    assert store.entries_by[-1] == "txnlog-serve"
    assert store.entry_reads[before:] == []
    assert parallel.drain(30)
    assert committed_ids(backend) == [1, 2, 1000]


class HeldListing(ByThread):
    """:class:`ByThread` whose next listing of intents once ``arm`` is set is made at once, then held (``held`` set)
    until ``release`` is: it returns what the store held when it began."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.arm, self.held, self.release = threading.Event(), threading.Event(), threading.Event()
        self._arm_lock = threading.Lock()

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        names = super().list(prefix, start_after, limit)
        with self._arm_lock:
            hold = prefix.startswith(TXN_INTENTS) and self.arm.is_set()
            if hold:
                self.arm.clear()
        if hold:
            self.held.set()
            self.release.wait(60)
        return names


@pytest.mark.usefixtures("serving_long")
def test_closing_a_producer_whose_process_serves_the_queue_decides_the_intents_waiting_before_it_returns(
    backend: Backend, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A closing producer's serving thread stops on an empty listing begun after the close, not on one begun before
    it: an intent written meanwhile would wait for another writer's idle take-over. Here the listing in flight when
    another process's intent is written and the producer closes comes back (empty) only after the close began."""
    monkeypatch.setattr(serving, "SERVE_S", 60.0)  # only the close stops it
    store = HeldListing(backend.open())
    p = _serving_producer(backend, store)
    log = p.coordinator.log
    assert log._serving
    late_store, late = _waiting_request(backend, 1)  # another process's commit, about to wait
    store.arm.set()
    assert store.held.wait(30), "the serving thread made no listing"
    late_store.put(intent_path(late.id), request_bytes(late))  # nobody else would decide it
    served = store.entries_by.count("txnlog-serve")

    def release_once_closing() -> None:
        deadline = time.monotonic() + 30
        while log._wind_down_from == float("inf") and time.monotonic() < deadline:
            time.sleep(0.001)
        store.release.set()

    releaser = threading.Thread(target=release_once_closing, daemon=True)
    releaser.start()
    try:
        p.close()
    finally:
        store.release.set()  # (a close that did not wind down returned at once)
    releaser.join(10)
    # closing stopped the serving (it would otherwise go on for a minute) once the waiting intent was decided by it
    assert not log._serving
    assert log.decision(late.id) is not None
    assert store.entries_by.count("txnlog-serve") > served
    assert committed_ids(backend) == [1, 1000, 1001]


@pytest.mark.usefixtures("serving_long")
def test_closing_a_producer_stops_its_serving_in_bounded_time_while_intents_keep_coming(
    backend: Backend, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(serving, "SERVE_S", 10.0)
    monkeypatch.setattr(serving, "WIND_DOWN_S", 0.3)
    monkeypatch.setattr(serving, "LAST_ROUND_S", 3.0)  # a round can be slow on a loaded machine: not 10 s though
    monkeypatch.setattr(intentqueue, "MAX_INTENTS_PER_ENTRY", 4)
    p = _serving_producer(backend, backend.open())
    log = p.coordinator.log
    assert log._serving
    feed_store = backend.open()
    stop = threading.Event()
    fed: list[str] = []

    def feed() -> None:  # other processes' requests keep arriving: the queue is never empty
        while not stop.is_set():
            # many more waiting than one entry decides (MAX_INTENTS_PER_ENTRY): never empty at a listing
            if sum(log.decision(r) is None for r in fed[-100:]) < 60:
                req = init_request(f"feed{len(fed)}", None, 60_000, False)
                feed_store.put(intent_path(req.id), request_bytes(req))
                fed.append(req.id)
            else:
                time.sleep(0.001)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        while len(fed) < 60:
            time.sleep(0.01)
        p.close()  # serving would go on for 10 s (SERVE_S), the queue never empty
        assert not log._serving, _stack_of(log._serving_thread)
    finally:
        stop.set()
        feeder.join()
    assert parallel.drain(30)


def _mine_and_another_process(backend: Backend, store: Store,
                              ) -> tuple[TransactionCoordinator, Request, TransactionCoordinator]:
    """A topic; this process's coordinator over ``store`` with the commit of its producer ``mine`` (row 1 in
    partition 0, not submitted); and another process's coordinator."""
    make_topic(backend.open(), partitions=2)
    here = TransactionCoordinator(store)
    return here, _commit_of(store, here, "mine", 0, 1), TransactionCoordinator(backend.open())


def _serve_handed(log: TransactionLog, req: Request) -> serving.HandedOver:
    """Serve the queue on this thread as a serving thread started for ``req`` handed over (another thread of the
    process was in a try), until it stops. Returns the hand-over, answered."""
    handed = serving.HandedOver(req)
    with log._serving_lock:
        log._serving = True
        log._handed.append(handed)
    log._serve_then_stop(catch_up=True)
    return handed


def test_a_serving_thread_started_for_handed_requests_joins_another_processs_serving_instead_of_racing_it(
    backend: Backend,
) -> None:
    """A process's serving thread started for requests handed over (another thread of the process was in a try)
    reads the log first; when another process turns out to serve the queue (its newest entry decided several
    requests), the thread hands them back to join that queue instead of racing its writer. Before, processes
    starting at once each started a serving thread, and their writers raced one another for every entry."""
    make_topic(backend.open(), partitions=2)
    here = TransactionCoordinator(backend.open())
    mine = _commit_of(here.log.store, here, "mine", 0, 1)
    # another process serving the queue: its newest entry decided two commits
    other = TransactionCoordinator(backend.open())
    served = [_commit_of(other.log.store, other, "o1", 1, 2), _commit_of(other.log.store, other, "o2", 1, 3)]
    with other.log._lock:
        other.log._catch_up()
        won = other.log._append(served)
    assert won is not None
    other.log._write_records(won[0])
    log = here.log
    handed = _serve_handed(log, mine)
    assert handed.done.is_set() and handed.error is None
    assert handed.outcome is None, "the request was decided by a writer racing the one serving the queue"
    assert log.decision(mine.id) is None
    assert committed_ids(backend) == [2, 3]


class IntentReads(LostReplyStore):
    """The real store, counting the reads of intents (``_txn/intents/``)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.intent_reads = 0

    def get(self, path: str) -> bytes:
        if path.startswith(TXN_INTENTS + "/"):
            self.intent_reads += 1
        return super().get(path)


def test_a_serving_thread_started_for_handed_requests_reads_no_intent_when_another_process_wrote_the_newest_entry(
    backend: Backend,
) -> None:
    """Processes starting at once each hand their pipelined commits to a serving thread while their first commit
    tries the log; all but one lose that try. A serving thread of a process whose try lost (another process created
    the newest entry, deciding its own request only) starts no writer: its requests join the queue, and it reads
    none of the intents. Before, each such thread read every intent waiting (hundreds, with 64 processes) before
    it looked at the log, then raced the others for each entry: seconds with no entry at all."""
    store = IntentReads(backend.open())
    here, mine, other = _mine_and_another_process(backend, store)
    direct = _commit_of(other.log.store, other, "direct", 1, 2)
    waiting = _intent_waiting(backend)  # another process's commit, queued behind the race
    # another process's direct try: the newest entry, deciding its own request only
    with other.log._lock:
        other.log._catch_up()
        assert other.log._append([direct]) is not None
    log = here.log
    before = store.intent_reads
    handed = _serve_handed(log, mine)
    assert handed.done.is_set() and handed.error is None
    assert handed.outcome is None, "the request was decided by a writer racing the one that won the log"
    assert store.intent_reads == before, "the thread read intents it was not going to decide"
    assert log.decision(mine.id) is None and log.decision(waiting) is None
    assert parallel.drain(30)


class RaceLostOnce(LostReplyStore):
    """The real store; the first conditional write of a log entry after :attr:`race` is set loses its race: just
    before it, ``race()`` runs (another writer takes that entry, and others queue behind it)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.race: Callable[[], None] | None = None

    def put_if_absent(self, path: str, data: bytes) -> bool:
        race, self.race = (self.race, None) if path.startswith(TXN_LOG + "/") else (None, self.race)
        if race is not None:
            race()
        return super().put_if_absent(path, data)


class ByThreadRaced(ByThread, RaceLostOnce):
    """:class:`ByThread` with :class:`RaceLostOnce`'s hook run before the next creation of a log entry."""


def test_threads_of_a_fresh_process_committing_at_once_are_served_together_once_one_of_them_wins(
    backend: Backend,
) -> None:
    """In a process whose newest entry read is another process's (every fresh process), threads committing while
    one of them tries the log hand their commits to a serving thread, which reads the log and serves them together
    once that try won. They must not each try in turn (one entry each, one after another, behind the log's lock)."""
    make_topic(backend.open(), partitions=2)
    store = ByThreadRaced(backend.open())
    here = TransactionCoordinator(store)
    reqs = [_commit_of(store, here, f"t{i}", 0, i + 1) for i in range(8)]
    TransactionCoordinator(backend.open()).init_producer("elsewhere")  # the newest entry: another process's
    log = here.log
    with log._lock:
        log._catch_up()

    def hold() -> None:  # the first try waits (at most 5 s) until the other threads handed their commits over
        deadline = time.monotonic() + 5
        while len(log._handed) < len(reqs) - 1 and time.monotonic() < deadline:
            time.sleep(0.005)

    store.race = hold
    created = len(store.entries_by)
    go = threading.Barrier(len(reqs))
    got: list[Outcome] = []

    def commit(req: Request) -> None:
        go.wait()
        got.append(log.submit(req))

    threads = [threading.Thread(target=commit, args=(r,)) for r in reqs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [o.status for o in got] == ["committed"] * len(reqs)
    assert len(store.entries_by) - created <= 3, f"entries for {len(reqs)} commits: {store.entries_by[created:]}"
    assert parallel.drain(30)
    assert committed_ids(backend) == list(range(1, len(reqs) + 1))


def test_the_first_writer_to_retry_after_a_lost_race_decides_every_intent_it_lists(backend: Backend) -> None:
    """Writers that lose one race queue at the same moment; the one that retries first (the log standing still)
    decides every intent it lists, not only its own: before, each such retry decided its own request in an entry of
    its own, and every winner then served the queue, racing the others."""
    store = RaceLostOnce(backend.open())
    here, mine, other = _mine_and_another_process(backend, store)
    winner = _commit_of(other.log.store, other, "winner", 1, 2)
    loser = _commit_of(other.log.store, other, "loser", 1, 3)

    def race() -> None:
        with other.log._lock:
            other.log._catch_up()
            assert other.log._append([winner]) is not None
        other.log.store.put(intent_path(loser.id), request_bytes(loser))  # another writer that lost, queued

    store.race = race
    got = here.log.submit(mine)
    assert got.status == "committed"
    deciding = here.log.decision(loser.id)
    assert deciding is not None and deciding[1] == got.seq, "the retry decided its own request only"
    assert parallel.drain(30)
    assert committed_ids(backend) == [1, 2, 3]


def test_the_quick_retry_after_a_lost_race_reads_only_the_oldest_intents_and_its_writer_serves_the_rest(
    backend: Backend, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Writers that lose one race all retry once at about the same moment; each used to read every intent waiting
    before its try (hundreds when 64 processes start at once), though all but one lose again. The retry reads at
    most ``QUICK_RETRY_INTENTS`` of them, oldest name first; the one that wins serves the rest next."""
    monkeypatch.setattr(groupcommit, "QUICK_RETRY_INTENTS", 2)
    store = RaceLostOnce(backend.open())
    here, mine, other = _mine_and_another_process(backend, store)
    winner = _commit_of(other.log.store, other, "winner", 1, 2)
    losers = [_commit_of(other.log.store, other, f"loser{i}", 1, 3 + i) for i in range(4)]

    def race() -> None:
        with other.log._lock:
            other.log._catch_up()
            assert other.log._append([winner]) is not None
        for loser in losers:  # other writers that lost, queued
            other.log.store.put(intent_path(loser.id), request_bytes(loser))

    store.race = race
    got = here.log.submit(mine)
    assert got.status == "committed"
    seqs = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seqs = [here.log.decision(loser.id) for loser in losers]
        if all(seqs):
            break
        time.sleep(0.02)
    assert all(seqs), "the writer that won the retry left intents undecided"
    with_mine = sorted(loser.id for loser, d in zip(losers, seqs, strict=True) if d is not None and d[1] == got.seq)
    assert with_mine == sorted(loser.id for loser in losers)[:2], "the retry read more than the oldest intents"
    assert parallel.drain(30)
    assert committed_ids(backend) == [1, 2, 3, 4, 5, 6]


@pytest.mark.usefixtures("serving_long")
def test_a_pipelined_request_handed_over_stays_with_the_serving_thread_until_its_earlier_one_is_decided(
    backend: Backend,
) -> None:
    """A pipelined commit handed to the serving thread while the transaction it follows waits as an intent not yet
    listed is kept for the next rounds, and decided right after that one. Handed back, it was handed over again
    and again and then waited as an intent itself; so did every later commit of its producer, each waiting behind
    the one before: the serving process's own commits stayed on the slow path for the rest of the run."""
    make_topic(backend.open(), partitions=2)
    # something for the first round to decide (its producer initialized before this process's, whose entry is then
    # the newest: a serving thread started for requests handed over serves only after its own process's entry)
    other_store, waiting = _waiting_request(backend)
    store = backend.open()
    here = TransactionCoordinator(store)
    ident = here.init_producer("p")
    segs = [stage_segment(store, "t", 0, pa.Table.from_pylist(rows([n + 1], "p"), schema=SCHEMA),
                          f"{ident.txn_id(n)}~a", seq=n) for n in range(2)]
    first = commit_request(txn=ident.txn_id(0), tid=ident.tid, pid=ident.pid, epoch=ident.epoch, n=0,
                           segments=(segs[0],))
    second = commit_request(txn=ident.txn_id(1), tid=ident.tid, pid=ident.pid, epoch=ident.epoch, n=1,
                            segments=(segs[1],), after=0)
    other_store.put(intent_path(waiting.id), request_bytes(waiting))
    other = waiting.id
    log = here.log
    handed = serving.HandedOver(second)
    with log._serving_lock:
        log._serving = True
        log._handed.append(handed)
    serve = threading.Thread(target=log._serve_then_stop, kwargs={"catch_up": True})
    serve.start()
    try:
        deadline = time.monotonic() + 30
        while log.decision(other) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.decision(other) is not None
        assert not handed.done.wait(0.5), "handed back while the transaction it follows was undecided"
        store.put(intent_path(first.id), request_bytes(first))  # the earlier commit, waiting as an intent
        assert handed.done.wait(30)
        assert handed.error is None and handed.outcome is not None and handed.outcome.status == "committed"
    finally:
        log.wind_down(0)
        serve.join(30)
    assert parallel.drain(30)
    assert committed_ids(backend) == [1, 2, 1000]


def test_a_request_waiting_as_an_intent_reads_no_log_while_its_process_serves_the_queue(backend: Backend) -> None:
    """A request of the serving process that waits as an intent (a retry, or one the serving thread handed back)
    leaves the log to the serving thread, whose rounds keep the view current: each look of its own held the log's
    lock against the next round."""
    make_topic(backend.open(), partitions=2)
    store = ReadsByThread(backend.open())
    here = TransactionCoordinator(store)
    mine = _commit_of(store, here, "mine", 0, 1)
    _intent_waiting(backend)  # waiting: the request queues behind it
    log = here.log
    with log._serving_lock:
        log._serving = True  # as while a thread of this process serves (none does here: the wait ends in a take-over)
    log._waited[mine.id] = log.state.seq  # a retry: not handed over
    got: list[Outcome] = []
    waiter = threading.Thread(target=lambda: got.append(log.submit(mine)), name="waiter")
    waiter.start()
    waiter.join(60)
    with log._serving_lock:
        log._serving = False
    assert got and got[0].status == "committed"
    assert store.intents, "the request never waited as an intent"
    # its first try and the take-over after idle looks read the log; the looks in between did not
    assert store.entry_reads.count("waiter") <= 3, store.entry_reads


def test_a_waiter_takes_over_a_slow_log_only_once_it_stood_still_for_several_of_its_gaps(backend: Backend) -> None:
    """A request waiting as an intent takes the log over only when it has stood still for several times its recent
    gap between entries (at most ``TAKE_OVER_MAX_S``), not after a fixed few looks: on a machine short of CPU every
    round is slow, and waiters that took over after their looks raced the serving writer and one another (64
    processes keeping commits in flight decided 50-90 commits/s, against about 200 blocking)."""
    make_topic(backend.open(), partitions=2)
    here = TransactionCoordinator(backend.open())
    mine = _commit_of(here.log.store, here, "mine", 0, 1)
    _intent_waiting(backend)  # waiting: the request queues behind it; nobody serves, so it ends in a take-over
    log = here.log
    log._entry_gap, log._entry_at = 0.5, time.monotonic()  # entries came every 500 ms lately
    started = time.monotonic()
    got = log.submit(mine)
    assert got.status == "committed"
    assert time.monotonic() - started >= 0.9 * groupcommit.TAKE_OVER_MAX_S


class IntentDeletes(LostReplyStore):
    """The real store, counting the deletes of each intent in ``counts`` (shared by processes' stores), the log
    entries this one tried to create, and the log entries it read."""

    def __init__(self, inner: Store, counts: Counter[str]) -> None:
        super().__init__(inner)
        self.counts = counts
        self.entries = 0
        self.log_reads = 0

    def lose(self, path: str) -> str | None:
        self.entries += path.startswith(TXN_LOG + "/")
        return None

    def get(self, path: str) -> bytes:
        self.log_reads += path.startswith(TXN_LOG + "/")
        return super().get(path)

    def delete(self, path: str) -> None:
        if path.startswith(TXN_INTENTS + "/"):
            self.counts[path] += 1
        super().delete(path)


def test_a_waiting_request_learns_its_outcome_from_the_answer_over_its_intent_without_reading_the_log(
    backend: Backend, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process waiting as an intent used to read and prove every entry of the log until one decided its request
    (at 64 producer processes, 12 of the 24 requests of a commit, and most of their CPU). The writer of the deciding
    entry puts the answer over the intent once the entry is proven and the records exist; the waiter reads its own
    intent by name, reads no entry, and deletes it (once: the writer deletes none)."""
    make_topic(backend.open(), partitions=2)
    counts: Counter[str] = Counter()
    here_store = IntentDeletes(backend.open(), counts)
    here = TransactionCoordinator(here_store)
    mine = _commit_of(here_store, here, "mine", 0, 1)
    there = TransactionCoordinator(IntentDeletes(backend.open(), counts))
    theirs = _commit_of(there.log.store, there, "theirs", 1, 2)
    queued = _intent_waiting(backend)  # waiting: both requests queue behind it
    entries = here_store.entries
    store = backend.open()
    # it looks for its answer, whatever the load
    waiter, got = waiting_on_a_thread(here.log, mine, store, 60.0, monkeypatch)
    read_before = here_store.log_reads
    # it queues too, then takes the standing log over and serves the queue
    assert there.log.submit(theirs).status == "committed"
    waiter.join(60)
    assert got and got[0].status == "committed" and got[0].secured
    assert here_store.entries == entries, "not decided by the other writer"
    assert here_store.log_reads == read_before, "the waiter read log entries instead of its answer"
    assert parallel.drain(30)
    assert counts[intent_path(mine.id)] == 1, counts
    # the answer to the other waiting intent stays for its waiter (which never comes here)
    assert counts[intent_path(queued)] == 0 and store.list(TXN_INTENTS) == [f"{queued}.json"]
    assert is_answer(store.get(intent_path(queued)))
    assert committed_ids(backend) == [1, 2, 1000]


def waiting_on_a_thread(log: TransactionLog, req: Request, store: Store, patience: float,
                        monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Thread, list[Outcome]]:
    """``req`` submitted by ``log``'s process on a thread of its own, which looks for its answer for ``patience``
    seconds and never takes the log over (a slow log); returns once its intent is listed in ``store``."""
    monkeypatch.setattr(groupcommit, "TAKE_OVER_MAX_S", 60.0)
    monkeypatch.setattr(log, "_answer_patience", lambda: patience)
    log._entry_gap, log._entry_at = 100.0, time.monotonic()
    got: list[Outcome] = []
    waiter = threading.Thread(target=lambda: got.append(log.submit(req)), name="waiter")
    waiter.start()
    deadline = time.monotonic() + 30
    while f"{req.id}.json" not in store.list(TXN_INTENTS) and time.monotonic() < deadline:
        time.sleep(0.005)
    return waiter, got


class FailingDeletes(LostReplyStore):
    def delete(self, path: str) -> None:
        raise StoreError(f"delete of {path} failed")


def test_a_decided_intent_left_behind_is_deleted_by_the_next_writer_that_lists_it_long_enough_after(
    backend: Backend, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An intent (or answer) whose waiter died before deleting it used to stay for good: writers skip a decided one
    by its name. A writer that lists it deletes it once it was decided :data:`ANSWER_KEPT_ENTRIES` entries before
    its view (sooner, it may be an answer its waiter has not read yet), and a writer whose delete failed tries again
    when it lists it next."""
    make_topic(backend.open(), partitions=2)
    rid = _intent_waiting(backend)
    store = backend.open()
    deciding = TransactionCoordinator(backend.open())
    deciding.init_producer("x")  # its entry decides the waiting intent, and answers it
    assert parallel.drain(30)
    assert deciding.log.decision(rid) is not None and is_answer(store.get(intent_path(rid)))
    p = Producer(backend.open(), "a")
    p.init_transactions()  # its try lists the answer: too recent to delete
    assert parallel.drain(30)
    assert store.list(TXN_INTENTS) == [f"{rid}.json"]
    monkeypatch.setattr(intentqueue, "ANSWER_KEPT_ENTRIES", 0)
    p2 = Producer(backend.open(), "b")
    p2.init_transactions()  # lists it again, long enough after
    assert parallel.drain(30)
    assert store.list(TXN_INTENTS) == []

    monkeypatch.setattr(intentqueue, "ANSWER_KEPT_ENTRIES", 8)
    second = _intent_waiting(backend, 1)
    deciding.init_producer("y")
    assert parallel.drain(30)
    monkeypatch.setattr(intentqueue, "ANSWER_KEPT_ENTRIES", 0)
    failing = TransactionCoordinator(FailingDeletes(store))
    failing.init_producer("z")  # lists it, and cannot delete it
    assert parallel.drain(30)
    assert f"{second}.json" in store.list(TXN_INTENTS)
    failing.log.store = store
    failing.init_producer("w")  # lists it again
    assert parallel.drain(30)
    assert store.list(TXN_INTENTS) == []
    assert committed_ids(backend) == [1000, 1001]
