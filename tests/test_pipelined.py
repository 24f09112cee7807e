"""Pipelined commits (``TxnRequest.after``): a producer's transaction ``n + 1`` sent before ``n`` was decided is
decided once ``n`` is, in the same entry or a later one, and commits only if ``n`` committed. Otherwise a
read-process-write job whose transaction ``n`` aborted would commit ``n + 1`` and lose ``n``'s input for good."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from coordinator import (
    InvalidOptionError,
    OutOfOrderSequenceError,
    Producer,
    ProducerConfig,
    ProducerFencedError,
    SegmentRef,
    Store,
    StoreError,
    TransactionAbortedError,
    TransactionCoordinator,
    TransactionTimedOutError,
    groupcommit,
    read_snapshot,
    stage_segment,
)
from coordinator.errors import CommitStateUnknownError
from coordinator.inflight import InFlight
from coordinator.layout import TXN_INTENTS, TXN_LOG, intent_path
from coordinator.requests import TxnRequest, commit_request, request_bytes, request_from_bytes
from coordinator.txntypes import ProducerIdentity
from core_helpers import SCHEMA, Backend, LostReplyStore, committed_ids, make_topic, rows


def _stage(store: Store, ident: ProducerIdentity, n: int) -> SegmentRef:
    """Transaction ``n``'s one segment: row ``n`` in partition 0, with sequence number ``n``."""
    return stage_segment(store, "t", 0, pa.Table.from_pylist(rows([n], f"txn{n}"), schema=SCHEMA),
                         f"{ident.txn_id(n)}~{n:010d}", seq=n)


class Later:
    """A call run on a thread of its own; :meth:`result` waits for it and returns its value or raises its error."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def result(self) -> Any:
        self.thread.join(60)
        assert not self.thread.is_alive(), "the pipelined request was never decided"
        if self.error is not None:
            raise self.error
        return self.value


def _waiting_as_intent(store: Store, count: int = 1) -> None:
    """Wait until ``count`` intents are published (the pipelined requests wait as intents)."""
    deadline = time.monotonic() + 30
    while len(store.list(TXN_INTENTS)) < count:
        assert time.monotonic() < deadline, "the pipelined request did not wait as an intent"
        time.sleep(0.01)


def test_a_pipelined_request_is_published_under_a_kind_older_readers_refuse() -> None:
    """A reader that does not know the rule would commit ``n + 1`` after ``n`` aborted: the intent must not look
    like a plain commit to it."""
    plain = commit_request(txn="p-1-0-5", tid="a", pid=1, epoch=0, n=5)
    pipelined = commit_request(txn="p-1-0-5", tid="a", pid=1, epoch=0, n=5, after=4)
    assert plain.to_json()["kind"] == "commit"
    assert pipelined.to_json()["kind"] == "commit-after"
    back = request_from_bytes(request_bytes(pipelined), "intent")
    assert isinstance(back, TxnRequest) and back == pipelined and back.after == 4
    assert request_from_bytes(request_bytes(plain), "intent") == plain


@pytest.mark.parametrize("same_process", [True, False], ids=["threads", "processes"])
def test_a_pipelined_commit_sent_first_commits_once_the_one_it_follows_commits(
    backend: Backend, same_process: bool
) -> None:
    make_topic(backend.open(), partitions=1)
    store = backend.open()
    coord = TransactionCoordinator(store)
    ident = coord.init_producer("p")
    s0, s1 = _stage(store, ident, 0), _stage(store, ident, 1)
    other = coord if same_process else TransactionCoordinator(backend.open())
    second = Later(lambda: other.commit(ident, ident.txn_id(1), [s1], pipelined=True))
    _waiting_as_intent(store)
    assert coord.txn_status(ident.txn_id(1)) == "undecided"
    assert committed_ids(backend) == []
    first = coord.commit(ident, ident.txn_id(0), [s0])
    got = second.result()
    assert got.commit_seq >= first.commit_seq >= 0
    assert got.offsets[("t", 0)][0] == first.offsets[("t", 0)][1]  # n + 1 follows n in the partition
    assert committed_ids(backend) == [0, 1]
    assert coord.txn_status(ident.txn_id(1)) == "committed"


def test_a_chain_of_pipelined_commits_after_an_aborted_transaction_is_aborted_whole(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    store = backend.open()
    coord = TransactionCoordinator(store)
    ident = coord.init_producer("p")
    segs = [_stage(store, ident, n) for n in range(3)]
    waiting = TransactionCoordinator(backend.open())
    second = Later(lambda: waiting.commit(ident, ident.txn_id(1), [segs[1]], pipelined=True))
    _waiting_as_intent(store, 1)
    third = Later(lambda: TransactionCoordinator(backend.open()).commit(ident, ident.txn_id(2), [segs[2]],
                                                                         pipelined=True))
    _waiting_as_intent(store, 2)
    coord.abort(ident, ident.txn_id(0), staged=[segs[0]])
    for later, follows in ((second, 0), (third, 1)):
        with pytest.raises(TransactionAbortedError, match=f"transaction {follows} .* was not committed"):
            later.result()
    assert committed_ids(backend) == []
    # the producer goes on after the chain: its next transaction commits
    s3 = stage_segment(store, "t", 0, pa.Table.from_pylist(rows([3], "txn3"), schema=SCHEMA),
                       f"{ident.txn_id(3)}~{0:010d}", seq=0)
    coord.commit(ident, ident.txn_id(3), [s3])
    assert committed_ids(backend) == [3]


def test_a_pipelined_commit_of_a_fenced_producer_is_refused_as_fenced(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    store = backend.open()
    coord = TransactionCoordinator(store)
    ident = coord.init_producer("p")
    s1 = _stage(store, ident, 1)
    second = Later(lambda: TransactionCoordinator(backend.open()).commit(ident, ident.txn_id(1), [s1],
                                                                          pipelined=True))
    _waiting_as_intent(store)
    TransactionCoordinator(backend.open()).init_producer("p")  # a new instance of the producer: epoch + 1
    with pytest.raises(ProducerFencedError):
        second.result()
    assert committed_ids(backend) == []


def test_a_producers_first_transaction_cannot_be_pipelined(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    coord = backend.coordinator()
    ident = coord.init_producer("p")
    with pytest.raises(InvalidOptionError, match="first"):
        coord.commit(ident, ident.txn_id(0), [], pipelined=True)


# -- the producer: commit_transaction_async ----------------------------------------------------------------------


class SlowEntries(LostReplyStore):
    """The real store; while ``slow`` is set, creating a log entry takes ``delay`` seconds longer (a busy log)."""

    def __init__(self, inner: Store, delay: float = 0.3) -> None:
        super().__init__(inner)
        self.delay = delay
        self.slow = False
        self.entries = 0

    def lose(self, path: str) -> str | None:
        if path.startswith(TXN_LOG + "/"):
            self.entries += 1
            if self.slow:
                time.sleep(self.delay)
        return None


def _committed_once(store: Store, config: ProducerConfig | None = None) -> Producer:
    """Producer ``p``, initialised, having committed row 0 to partition 0."""
    p = Producer(store, "p", config=config)
    p.init_transactions()
    with p.transaction():
        p.send("t", rows([0], "first"), partition=0)
    return p


def test_async_commits_are_decided_in_order_and_each_follows_the_one_before(backend: Backend) -> None:
    make_topic(backend.open(), partitions=2)
    store = SlowEntries(backend.open(), delay=0.1)
    p = Producer(store, "p", config=ProducerConfig(max_in_flight=3))
    p.init_transactions()
    store.slow = True
    futures = []
    for i in range(12):
        p.begin_transaction()
        p.send("t", rows([i], f"txn{i}"), partition=i % 2)
        futures.append(p.commit_transaction_async())
    results = [f.result(60) for f in futures]
    store.slow = False
    assert [r.commit_seq for r in results] == sorted(r.commit_seq for r in results)
    assert any(r.commit_seq == results[i - 1].commit_seq for i, r in enumerate(results) if i), \
        "no two commits of the pipeline shared an entry"
    with p.transaction():  # a plain commit after the pipeline
        p.send("t", rows([12], "txn12"), partition=0)
    assert committed_ids(backend) == list(range(13))
    table = read_snapshot(backend.open(), ["t"])["t"].sort_by([("_partition", "ascending"), ("_offset", "ascending")])
    # each partition holds its rows in commit order
    for part in (0, 1):
        ids = [r["id"] for r in table.to_pylist() if r["_partition"] == part]
        assert ids == sorted(ids)
    p.close()


def test_a_failed_async_commit_aborts_every_later_one_in_flight_and_the_producer_resyncs(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    # (the late commit's entry is slow enough that the two after it are sent while it is in flight, even under load)
    store = SlowEntries(backend.open(), delay=1.0)
    p = _committed_once(store, ProducerConfig(transaction_timeout_ms=2_000))
    store.slow = True
    p.begin_transaction()
    p.send("t", rows([1], "late"), partition=0)
    p._started_ms -= 10_000  # this transaction has been open longer than its timeout (as after a long pause)
    late = p.commit_transaction_async()
    follows = []
    for i in (2, 3):
        p.begin_transaction()
        p.send("t", rows([i], "follows"), partition=0)
        follows.append(p.commit_transaction_async())
    with pytest.raises(TransactionTimedOutError):
        late.result(60)
    for f in follows:
        with pytest.raises(TransactionAbortedError, match="was not committed"):
            f.result(60)
    store.slow = False
    with pytest.raises(TransactionAbortedError, match="commit in flight failed"):
        p.begin_transaction()
    p.abort_transaction()  # resyncs the producer with the log
    with p.transaction():
        p.send("t", rows([4], "after"), partition=0)
    assert committed_ids(backend) == [0, 4]
    p.close()


def test_a_fenced_async_commit_fences_the_producer(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    store = SlowEntries(backend.open(), delay=0.4)
    p = _committed_once(store)
    p.begin_transaction()
    p.send("t", rows([1], "zombie"), partition=0)
    Producer(backend.open(), "p").init_transactions()  # a new instance takes over
    with pytest.raises(ProducerFencedError):  # learned while staging, or from the log's answer
        p.commit_transaction_async().result(60)
    with pytest.raises(ProducerFencedError):
        p.begin_transaction()
    assert committed_ids(backend) == [0]


class LoseFirstEntryReply(LostReplyStore):
    """The reply of the first log entry created while ``armed`` is lost (applied, but the writer cannot tell)."""

    armed = False

    def lose(self, path: str) -> str | None:
        if self.armed and path.startswith(TXN_LOG + "/"):
            self.armed = False
            return "unknown"
        return None


def test_an_async_commit_whose_entry_reply_is_lost_learns_it_committed(backend: Backend) -> None:
    """The caller's real error path for a store error at the commit point: the commit in flight asks again (a
    request is decided at most once) instead of failing the pipeline."""
    make_topic(backend.open(), partitions=1)
    store = LoseFirstEntryReply(backend.open())
    p = _committed_once(store)
    store.armed = True
    p.begin_transaction()
    p.send("t", rows([1], "lost reply"), partition=0)
    first = p.commit_transaction_async()
    p.begin_transaction()
    p.send("t", rows([2], "after"), partition=0)
    second = p.commit_transaction_async()
    assert first.result(60).commit_seq >= 0 and second.result(60).commit_seq >= 0
    assert not store.armed
    assert committed_ids(backend) == [0, 1, 2]
    p.close()


def test_a_pipelined_intent_whose_earlier_transaction_never_came_never_commits(backend: Backend) -> None:
    """Its process died after publishing ``n + 1`` and before ``n``: the intent waits while other producers go on,
    and once the producer's next instance bumps the epoch it can never commit."""
    make_topic(backend.open(), partitions=2)
    store = backend.open()
    coord = TransactionCoordinator(store)
    ident = coord.init_producer("gone")
    coord.commit(ident, ident.txn_id(0), [_stage(store, ident, 0)])
    s2 = _stage(store, ident, 2)
    req = commit_request(txn=ident.txn_id(2), tid=ident.tid, pid=ident.pid, epoch=ident.epoch, n=2, segments=(s2,),
                         after=1)
    store.put(intent_path(req.id), request_bytes(req))
    other = Producer(backend.open(), "other")
    other.init_transactions()
    for i in range(3):
        with other.transaction():
            other.send("t", rows([100 + i], "other"), partition=1)
    assert coord.txn_status(ident.txn_id(2)) == "undecided"
    TransactionCoordinator(backend.open()).init_producer("gone")  # the producer's next instance
    with other.transaction():
        other.send("t", rows([103], "other"), partition=1)
    assert coord.txn_status(ident.txn_id(2)) != "committed"
    assert committed_ids(backend) == [0, 100, 101, 102, 103]
    other.close()


class FailEntriesNaming(SlowEntries):
    """:class:`SlowEntries` that also refuses (not applied: ``StoreError``) the next ``failures`` log entries that
    would decide the abort request of ``txn``."""

    def __init__(self, inner: Store, delay: float) -> None:
        super().__init__(inner, delay)
        self.txn = ""
        self.failures = 0

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if self.failures and path.startswith(TXN_LOG + "/") and f'"request":"x-{self.txn}"'.encode() in data:
            self.failures -= 1
            raise StoreError(f"injected: the conditional write of {path} failed")
        return super().put_if_absent(path, data)


@pytest.mark.parametrize("failures", [2, 12])
def test_a_commit_behind_one_refused_undecided_is_decided_though_that_ones_abort_first_fails(
        backend: Backend, failures: int) -> None:
    """Commit 2 is refused without a decision (its sequence numbers skip one), and every entry that would decide
    the abort that follows fails on the store, twice, or more times than the abort is tried (12): the abort's
    intent is decided once the store lets it, by the abort's own retries or by commit 3, which waits behind 2 and
    serves the queue when the log stands still. So 3 is decided (aborted) within seconds instead of waiting out its
    budget, and nothing of 2 or 3 becomes visible."""
    make_topic(backend.open(), partitions=1)
    store = FailEntriesNaming(backend.open(), delay=0.5)
    p = _committed_once(store)
    store.slow = True
    futures = {}
    for i in (1, 2, 3):
        p.begin_transaction()
        if i == 2:
            p._next_seq[("t", 0)] += 5  # a gap: the log refuses this commit without deciding it
            assert p.identity is not None
            store.txn, store.failures = p.identity.txn_id(2), failures
        p.send("t", rows([i], f"txn{i}"), partition=0)
        futures[i] = p.commit_transaction_async()
    assert futures[1].result(60).commit_seq >= 0
    with pytest.raises(OutOfOrderSequenceError):
        futures[2].result(60)
    with pytest.raises(TransactionAbortedError, match="which it follows, was not committed"):
        futures[3].result(30)  # (its budget is 120 s)
    assert store.failures == 0, "the abort of the refused commit did not fail as arranged"
    store.slow = False
    p.abort_transaction()  # the caller's error path: resync
    with p.transaction():
        p.send("t", rows([4], "after"), partition=0)
    assert committed_ids(backend) == [0, 1, 4]
    p.close()


def test_commits_behind_one_whose_abort_never_reached_the_store_stop_waiting_for_it(
        backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commit 2 is refused without a decision, and the store fails every entry that would decide its abort, for
    as long as the test lasts: nobody can decide 2, so the commits pipelined behind it (3, and 4 behind 3) would
    wait out their budget. They stop waiting once the abort gives up, saying their outcome is unknown; the caller's
    resync then aborts them once the store recovers, and nothing of 2, 3 or 4 becomes visible."""
    monkeypatch.setattr(groupcommit, "SUBMIT_BUDGET_S", 60.0)
    make_topic(backend.open(), partitions=1)
    store = FailEntriesNaming(backend.open(), delay=0.5)
    p = _committed_once(store, ProducerConfig(max_in_flight=4))
    store.slow = True
    futures = {}
    for i in (1, 2, 3, 4):
        p.begin_transaction()
        if i == 2:
            p._next_seq[("t", 0)] += 5  # a gap: the log refuses this commit without deciding it
            assert p.identity is not None
            store.txn, store.failures = p.identity.txn_id(2), 10**9
        p.send("t", rows([i], f"txn{i}"), partition=0)
        futures[i] = p.commit_transaction_async()
    assert futures[1].result(60).commit_seq >= 0
    with pytest.raises(OutOfOrderSequenceError):
        futures[2].result(60)
    for i in (3, 4):
        with pytest.raises(CommitStateUnknownError):
            futures[i].result(30)  # (their budget is 60 s)
    assert store.failures < 10**9, "the abort of the refused commit did not fail as arranged"
    store.slow, store.failures = False, 0
    p.abort_transaction()  # the caller's error path: resync
    with p.transaction():
        p.send("t", rows([5], "after"), partition=0)
    assert committed_ids(backend) == [0, 1, 5]
    p.close()


def test_the_failure_kept_for_the_caller_is_the_earliest_commits_not_the_first_to_arrive() -> None:
    """A commit behind a failed one is aborted by the log and may fail before the failed one's thread is done (it
    first tries to abort its transaction): what the producer reports ("a commit in flight failed (...)") is still
    the cause, the earliest commit's error, not the consequence that arrived first."""
    flight = InFlight(2, "order")
    cause_may_fail = threading.Event()

    def cause() -> None:
        cause_may_fail.wait(30)
        raise StoreError("the cause")

    def consequence() -> None:
        raise TransactionAbortedError("transaction 1 was aborted (transaction 0, which it follows, was not committed)")

    first = flight.submit(cause)
    second = flight.submit(consequence)
    with pytest.raises(TransactionAbortedError):
        second.result(30)
    assert isinstance(flight.failed, TransactionAbortedError)
    cause_may_fail.set()
    with pytest.raises(StoreError):
        first.result(30)
    assert isinstance(flight.failed, StoreError) and "the cause" in str(flight.failed)
    flight.close()
