"""Answers (coordinator.answers): a waiting request learns its outcome from the answer put over its intent.

An answer is derived data: it is written only once the deciding entry is proven and the records its item needs
exist, and one lost, damaged, or naming another request only sends its waiter to the log, never to a wrong outcome.
A process answered lately sends its next commit straight to the queue without reading the log, and is still fenced.
"""

from __future__ import annotations

import threading
import time

import pytest

from coordinator import (
    Producer,
    ProducerFencedError,
    Store,
    StoreError,
    TransactionCoordinator,
    parallel,
)
from coordinator.answers import answer_bytes, is_answer, read_answer
from coordinator.decisions import Outcome
from coordinator.layout import TXN_INTENTS, TXN_LOG, intent_path, marker_dir
from coordinator.records import AbortItem, CommitItem
from coordinator.requests import commit_request, request_bytes
from core_helpers import Backend, LostReplyStore, committed_ids, make_topic, rows
from test_serving import _commit_of, fast_and_slow_decided, waiting_on_a_thread


def test_an_answer_is_taken_only_by_its_own_request_and_only_undamaged() -> None:
    item = AbortItem("x-p.3.0.7", txn="p.3.0.7", tid="a", pid=3, epoch=0, n=7, reason="timed out")
    data = answer_bytes(12, item)
    got = read_answer(data, item.request)
    assert got.outcome == Outcome("aborted", item, 12, reason="timed out", secured=True) and not got.unusable
    assert read_answer(data, "x-p.3.0.8").unusable  # another request's answer at this path
    assert read_answer(data.replace(b'"seq":12', b'"seq":13'), item.request).unusable  # valid JSON, damaged
    assert read_answer(data[:-3], item.request).unusable
    req = commit_request(txn="p.3.0.7", tid="a", pid=3, epoch=0, n=7, segments=())
    assert read_answer(request_bytes(req), req.id) == read_answer(b"{}", req.id)  # a request: not answered yet
    assert not read_answer(request_bytes(req), req.id).unusable and is_answer(data)
    assert not is_answer(request_bytes(req))


def test_an_intent_is_answered_only_once_the_records_of_its_partitions_exist(backend: Backend) -> None:
    """The answer is the waiter's acknowledgement: before the records (the commit's second copy) exist, one damaged
    entry could take the commit away, so an intent whose record is held stays unanswered while one whose record is
    written is answered at once."""
    store, log, fast, slow, entry = fast_and_slow_decided(backend, intents=True)
    writing = threading.Thread(target=log._records_then_answer, args=(entry, [], (fast.id, slow.id)))
    writing.start()
    try:
        deadline = time.monotonic() + 10
        while not is_answer(store.get(intent_path(fast.id))) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert is_answer(store.get(intent_path(fast.id))), "the intent in partition 0 waited for partition 1"
        time.sleep(0.2)
        assert not is_answer(store.get(intent_path(slow.id))), "answered before its record existed"
    finally:
        store.release.set()
        writing.join(30)
    got = read_answer(store.get(intent_path(slow.id)), slow.id).outcome
    assert got is not None and got.status == "committed" and got.seq == entry.seq
    assert isinstance(got.item, CommitItem) and store.list(marker_dir("t", 1))


class MangledAnswers(LostReplyStore):
    """The deciding writer's store: its answers are lost (the put fails), damaged, or another request's."""

    def __init__(self, inner: Store, how: str) -> None:
        super().__init__(inner)
        self.how = how

    def put(self, path: str, data: bytes) -> None:
        if path.startswith(TXN_INTENTS + "/") and is_answer(data):
            if self.how == "lost":
                raise StoreError(f"put of {path} failed")
            if self.how == "damaged":
                data = data.replace(b'"seq":', b'"seq":1')
            else:
                other = read_answer(data, path.rsplit("/", 1)[1][:-5]).outcome
                assert other is not None and other.item is not None
                data = answer_bytes(other.seq, AbortItem("x-p.99.0.0", txn="p.99.0.0", reason="not yours"))
        super().put(path, data)


class LogReads(LostReplyStore):
    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.log_reads = 0

    def get(self, path: str) -> bytes:
        self.log_reads += path.startswith(TXN_LOG + "/")
        return super().get(path)


@pytest.mark.parametrize("how", ["lost", "damaged", "another's"])
def test_a_waiter_whose_answer_is_lost_or_unusable_learns_its_outcome_from_the_log(
    backend: Backend, how: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_topic(backend.open(), partitions=2)
    here_store = LogReads(backend.open())
    here = TransactionCoordinator(here_store)
    mine = _commit_of(here_store, here, "mine", 0, 1)
    there = TransactionCoordinator(MangledAnswers(backend.open(), how))
    theirs = _commit_of(there.log.store, there, "theirs", 1, 2)
    blocker = _commit_of(there.log.store, there, "blocker", 1, 3)
    there.log.store.put(intent_path(blocker.id), request_bytes(blocker))  # waiting: both requests queue behind it
    store = backend.open()
    # an unusable answer sends it to the log at once; a lost one once it stops waiting for one
    waiter, got = waiting_on_a_thread(here.log, mine, store, 1.0 if how == "lost" else 60.0, monkeypatch)
    read_before = here_store.log_reads
    assert there.log.submit(theirs).status == "committed"
    waiter.join(60)
    assert got and got[0].status == "committed" and not got[0].secured
    assert here_store.log_reads > read_before, "it read no entry"
    decided = there.log.decision(mine.id)
    assert decided is not None and got[0].seq == decided[1]
    assert parallel.drain(30)
    assert f"{mine.id}.json" not in store.list(TXN_INTENTS)  # its waiter deletes it either way
    assert store.list(marker_dir("t", 0)), "acknowledged without its partition record"
    assert committed_ids(backend) == [1, 2, 3]


def test_a_producer_answered_lately_sends_its_commit_straight_to_the_queue_and_is_still_fenced(
    backend: Backend,
) -> None:
    """On a busy log served by another process, a producer's commit skips the direct try and the read of the log
    for its epoch (both would read every entry since its view): the entry deciding its request checks the epoch,
    so a fenced producer's commit is still refused and publishes nothing (G3)."""
    make_topic(backend.open(), partitions=2)
    here_store = LogReads(backend.open())
    zombie = Producer(here_store, "a")
    zombie.init_transactions()
    with zombie.transaction():
        zombie.send("t", rows([1], "a"), partition=0)
    TransactionCoordinator(backend.open()).init_producer("a")  # a new instance fences it
    log = zombie.coordinator.log
    log._answered_at = time.monotonic() + 30  # answered lately: the log is busy, another process serves it
    zombie.begin_transaction()
    zombie.send("t", rows([2], "a"), partition=0)
    read_before = here_store.log_reads
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            zombie.commit_transaction()
        except BaseException as exc:  # noqa: BLE001 - judged below
            errors.append(exc)

    waiter = threading.Thread(target=commit, name="zombie")
    waiter.start()
    store = backend.open()
    deadline = time.monotonic() + 30
    while not store.list(TXN_INTENTS) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert here_store.log_reads == read_before, "it read the log before queueing"
    TransactionCoordinator(backend.open()).init_producer("b")  # the next writer decides the waiting intent
    waiter.join(60)
    assert errors and isinstance(errors[0], ProducerFencedError), errors
    assert committed_ids(backend) == [1]
