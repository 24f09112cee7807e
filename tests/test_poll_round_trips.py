"""A consumer poll's cost follows its partitions, not the store's commit rate: after any number of new commits (short
of the log's jump to a checkpoint) one poll makes a bounded number of serial round trips to the store. The store
here is a real memory store behind a wrapper that adds a fixed latency to every request and records when each
started and ended, so requests issued together can be told from requests issued one after another.
"""

from __future__ import annotations

import builtins
import json
import threading
import time
import uuid
import zlib
from collections.abc import Iterator

import pyarrow as pa
import pytest

from coordinator import Consumer, MemoryStore, Producer, TransactionCoordinator, create_topic, open_store
from coordinator.layout import TXN_LOG, parse_seq, txn_log_path
from coordinator.segments import encode_table
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
        self.got: list[str] = []
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
        self.got.append(path)
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
    # by-name look, listing of the log, the new entries in parallel, the proof's listing with the segments read
    # alongside: four whatever the number of commits (it was 4 / 22 / 49 when each partition was read in turn).
    # A request issued after another returned always counts as a later round trip, while requests issued together
    # count as one only if none starts late: a stalled machine can add round trips, never remove them. So the
    # fewest of up to three polls is the poll's structure (one stall of a second was seen on a loaded machine).
    seen: list[int] = []
    for attempt in range(3):
        base = attempt * commits
        for i in range(commits):
            with producer.transaction():
                producer.send("t", [{"v": base + i}], partition=i % PARTITIONS)
        traced.clear()
        got = consumer.poll()
        assert sorted(got.column("v").to_pylist()) == list(range(base, base + commits))
        seen.append(traced.round_trips())
        if seen[-1] <= 4:
            break
    assert min(seen) <= 4, (seen, sorted(traced.events, key=lambda e: e[1]))


def test_idle_poll_is_one_request(url: str) -> None:
    _producer, consumer, traced = _tailing_consumer(url)
    traced.clear()
    assert consumer.poll().num_rows == 0
    assert [kind for kind, _s, _e in traced.events] == ["get"]


def test_a_poll_never_returns_records_a_ghost_names_even_when_it_read_them_ahead(url: str) -> None:
    """G1. A consumer whose view a truncation passed by finds ghosts under the freed numbers (entries writers that
    died created there), each linked to the one before it and publishing a segment at the consumer's partition. The
    poll reads the segment of the ghost it found by name ahead, while the log proves it; the proof fails, the log
    jumps to the checkpoint, and the poll returns exactly the log's records."""
    create_topic(open_store(url), "s", pa.schema([("v", pa.string())]), 1)
    p = Producer(open_store(url), "p")
    p.init_transactions()
    with p.transaction():
        p.send("s", [{"v": "before"}])
    traced = TracingStore(open_store(url), latency_s=0.0)
    consumer = Consumer(traced)
    consumer.subscribe(["s"])
    assert consumer.poll().column("v").to_pylist() == ["before"]
    st = consumer.coordinator.log.state
    view, end, idx = st.seq, st.partition("s", 0).end, st.partition("s", 0).next_idx
    prev = json.loads(open_store(url).get(txn_log_path(view)))["writer"]
    busy = Producer(open_store(url), "busy", coordinator=TransactionCoordinator(open_store(url), checkpoint_interval=4))
    busy.init_transactions()
    for i in range(24):
        with busy.transaction():
            busy.send("s", [{"v": f"busy-{i}"}])
    logs = busy.coordinator.log
    logs.flush()
    logs.refresh()
    logs.write_checkpoint()
    assert logs.truncate(now=time.time() + 3600) > 0
    store = open_store(url)
    kept = min(q for n in store.list(TXN_LOG) if (q := parse_seq(n)) is not None)
    assert kept > view + 1
    for k, seq in enumerate(range(view + 1, kept)):
        data = encode_table(pa.table({"v": ["ghost"]}))
        path = f"topics/s/0/data/ghost.{k}~0000000000.parquet"
        store.put(path, data)
        token = uuid.uuid4().hex
        item = {"epoch": 0, "n": k, "op": "commit", "pid": 999, "request": f"c-ghost.{k}", "seqs": {"s|0": idx + k},
                "tid": "ghost", "txn": f"ghost.{k}",
                "parts": [{"base": end + k, "partition": 0, "topic": "s",
                           "segments": [{"crc32": zlib.crc32(data), "path": path, "rows": 1, "size": len(data)}]}]}
        ghost = {"v": 2, "seq": seq, "ts": int(time.time() * 1000), "writer": token, "prev": prev, "items": [item],
                 "touched": [["s", 0, idx + k]]}
        assert store.put_if_absent(txn_log_path(seq), json.dumps(ghost).encode())
        prev = token
    got: list[str] = []
    while (batch := consumer.poll()).num_rows:
        got += batch.column("v").to_pylist()
    assert any(path.startswith("topics/s/0/data/ghost.") for path in traced.got), "no ghost segment was read ahead"
    assert sorted(got) == sorted(f"busy-{i}" for i in range(24))
