"""A consumer poll's cost follows its partitions, not the store's commit rate: after any number of new commits (short
of the log's jump to a checkpoint) one poll makes a bounded number of serial round trips to the store. The store
here is a real memory store behind a wrapper that adds a fixed latency to every request and records when each
started and ended, so requests issued together can be told from requests issued one after another.
"""

from __future__ import annotations

import builtins
import threading
import time
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest

from coordinator import Consumer, MemoryStore, Producer, create_topic, open_store
from coordinator.store import ObjectInfo, Store

SCHEMA = pa.schema([("v", pa.int64())])
PARTITIONS = 16
LATENCY_S = 0.05


class TracingStore(Store):
    """``inner``, each request delayed by ``latency_s`` and recorded as (kind, start, end)."""

    def __init__(self, inner: Store, latency_s: float = LATENCY_S) -> None:
        super().__init__(inner.url)
        self.inner = inner
        self.latency_s = latency_s
        self.counters = inner.counters
        self.events: list[tuple[str, float, float]] = []
        self._lock = threading.Lock()

    def _run(self, kind: str, fn, *args):  # type: ignore[no-untyped-def]
        start = time.monotonic()
        time.sleep(self.latency_s)
        try:
            return fn(*args)
        finally:
            with self._lock:
                self.events.append((kind, start, time.monotonic()))

    def round_trips(self) -> int:
        """The longest chain of requests each issued after the one before it ended."""
        with self._lock:
            evs = sorted(self.events, key=lambda e: e[1])
        chains: list[tuple[float, int]] = []
        for _kind, start, end in evs:
            chains.append((end, 1 + max((n for e, n in chains if e <= start), default=0)))
        return max((n for _e, n in chains), default=0)

    def clear(self) -> None:
        with self._lock:
            self.events.clear()

    def put_if_absent(self, path: str, data: bytes) -> bool:
        return bool(self._run("put_if_absent", self.inner.put_if_absent, path, data))

    def put(self, path: str, data: bytes) -> None:
        self._run("put", self.inner.put, path, data)

    def get(self, path: str) -> bytes:
        return bytes(self._run("get", self.inner.get, path))

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        return list(self._run("list", self.inner.list, prefix, start_after, limit))

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        return list(self._run("list", self.inner.list_dirs, prefix))

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        return list(self._run("list", self.inner.list_info, prefix))

    def delete(self, path: str) -> None:
        self._run("delete", self.inner.delete, path)

    def now(self) -> float:
        return self.inner.now()


@pytest.fixture()
def url() -> Iterator[str]:
    u = f"memory://poll-rt-{uuid.uuid4().hex}"
    try:
        yield u
    finally:
        MemoryStore.drop(u)


def _tailing_consumer(url: str) -> tuple[Producer, Consumer, TracingStore]:
    """A producer on the plain store, and a consumer of every partition (through a traced store) that has read
    everything committed so far and then found nothing new."""
    create_topic(open_store(url), "t", SCHEMA, PARTITIONS)
    producer = Producer(open_store(url), "w")
    producer.init_transactions()
    with producer.transaction():
        producer.send("t", [{"v": -1}], partition=0)
    traced = TracingStore(open_store(url))
    consumer = Consumer(traced)
    consumer.subscribe(["t"])
    assert consumer.poll().num_rows == 1
    assert consumer.poll().num_rows == 0
    return producer, consumer, traced


@pytest.mark.parametrize("commits", [1, 10, 40])
def test_poll_after_many_commits_takes_a_bounded_number_of_round_trips(url: str, commits: int) -> None:
    producer, consumer, traced = _tailing_consumer(url)
    for i in range(commits):
        with producer.transaction():
            producer.send("t", [{"v": i}], partition=i % PARTITIONS)
    traced.clear()
    got = consumer.poll()
    assert sorted(got.column("v").to_pylist()) == list(range(commits))
    # by-name look, listing of the log, the new entries in parallel, the proof's listing with the segments read
    # alongside: four whatever the number of commits (it was 4 / 22 / 49 when each partition was read in turn)
    assert traced.round_trips() <= 4, sorted(traced.events, key=lambda e: e[1])


def test_idle_poll_is_one_request(url: str) -> None:
    _producer, consumer, traced = _tailing_consumer(url)
    traced.clear()
    assert consumer.poll().num_rows == 0
    assert [kind for kind, _s, _e in traced.events] == ["get"]
