"""The requests of a commit that run beside one another instead of one after the other (docs/design.md, "A commit"):
a pipelined commit (``commit_transaction_async``) lists the waiting intents while its rows are staged, as a blocking
one does, and a first try right after this process created the newest entry builds on that entry instead of reading
the log again. Both are costs, never safety: a listing made early misses only intents written since (the next
entry decides them), and a view that turns out stale only loses the race (the next try reads the log)."""

from __future__ import annotations

import builtins
import threading
import time

import pytest

from coordinator import Store, TransactionCoordinator
from coordinator.layout import TXN_INTENTS, TXN_LOG
from core_helpers import Backend, LostReplyStore, committed_ids, make_topic, rows
from test_pipelined import _committed_once
from test_serving import _commit_of


class Recorded(LostReplyStore):
    """The real store, recording when each request began and ended; the puts of staged rows are slow, so what runs
    beside them is told apart from what follows them."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, float, float]] = []

    def _timed(self, kind: str, path: str, call: object) -> object:
        start = time.monotonic()
        try:
            return call()  # type: ignore[operator]
        finally:
            with self.lock:
                self.events.append((kind, path, start, time.monotonic()))

    def put(self, path: str, data: bytes) -> None:
        def call() -> None:
            if path.startswith("topics/") and "/data/" in path:
                time.sleep(0.3)
            super(Recorded, self).put(path, data)

        self._timed("put", path, call)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        return bool(self._timed("put_if_absent", path, lambda: super(Recorded, self).put_if_absent(path, data)))

    def get(self, path: str) -> bytes:
        return self._timed("get", path, lambda: super(Recorded, self).get(path))  # type: ignore[return-value]

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        return self._timed(  # type: ignore[return-value]
            "list", prefix, lambda: super(Recorded, self).list(prefix, start_after, limit))

    def clear(self) -> None:
        with self.lock:
            self.events.clear()


def test_a_pipelined_commit_lists_the_waiting_intents_while_its_rows_are_staged(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, ``commit_transaction_async`` staged its rows and only then listed ``_txn/intents/``: one serial
    round trip more than a blocking commit before the commit point (about 20 ms of a one-row commit's 60 on an
    S3-like store, and a fifth of one producer's end-to-end latency). (The window in which a listing made ahead
    counts is widened past the slow staging here.)"""
    monkeypatch.setattr("coordinator.groupcommit.JUST_READ_S", 30.0)
    make_topic(backend.open(), partitions=1)
    store = Recorded(backend.open())
    p = _committed_once(store)
    store.clear()
    p.begin_transaction()
    p.send("t", rows([2], "p"), partition=0)
    p.commit_transaction_async().result(timeout=30)
    p.close()
    segment = [e for e in store.events if e[0] == "put" and "/data/" in e[1]]
    assert len(segment) == 1
    staged_from, staged_at = segment[0][2], segment[0][3]
    entry = [e for e in store.events if e[0] == "put_if_absent" and e[1].startswith(TXN_LOG)]
    assert len(entry) == 1, entry
    listings = [e for e in store.events if e[0] == "list" and e[1] == TXN_INTENTS and e[2] < entry[0][2]]
    assert listings, "the commit decided no intent listing"
    assert all(start < staged_at for _k, _p, start, _end in listings), (
        f"intents listed after the rows were staged ({staged_from:.3f}-{staged_at:.3f}): {listings}")
    assert committed_ids(backend) == [0, 2]


def test_a_first_try_right_after_this_process_created_the_newest_entry_does_not_read_the_log_again(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log ended at the entry this process created when it created it: a first try soon after builds on it
    (one request less before the commit point) instead of reading the log first, however long ago the process
    last read the log. (The window is widened so that a slow machine does not decide the outcome.)"""
    monkeypatch.setattr("coordinator.groupcommit.JUST_READ_S", 30.0)
    make_topic(backend.open(), partitions=2)
    store = Recorded(backend.open())
    coord = TransactionCoordinator(store)
    a, b = _commit_of(store, coord, "a", 0, 1), _commit_of(store, coord, "b", 1, 2)
    assert coord.log.submit(a).status == "committed"
    coord.log._refreshed -= 3600  # its last read of the log: long ago
    store.clear()
    assert coord.log.submit(b).status == "committed"
    created = [e for e in store.events if e[0] == "put_if_absent" and e[1].startswith(TXN_LOG)]
    assert len(created) == 1, created
    reads = [e for e in store.events if e[1].startswith(TXN_LOG) and e[0] in ("get", "list") and e[2] < created[0][2]]
    assert not reads, f"the log was read before the try: {reads}"
    assert committed_ids(backend) == [1, 2]

