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
    ProducerFencedError,
    SegmentRef,
    Store,
    TransactionAbortedError,
    TransactionCoordinator,
    stage_segment,
)
from coordinator.decisions import TxnRequest, commit_request, request_bytes, request_from_bytes
from coordinator.layout import TXN_INTENTS
from coordinator.txntypes import ProducerIdentity
from core_helpers import SCHEMA, Backend, committed_ids, make_topic, rows


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
    from coordinator import InvalidOptionError

    make_topic(backend.open(), partitions=1)
    coord = backend.coordinator()
    ident = coord.init_producer("p")
    with pytest.raises(InvalidOptionError, match="first"):
        coord.commit(ident, ident.txn_id(0), [], pipelined=True)
