"""The S3 store under object-store faults, injected on the real network path by :mod:`s3faults`'s proxy in front
of moto's server: 503 SlowDown, 500 InternalError, hung replies, connection resets, and writes applied whose reply
was lost. Every run is seeded; failure messages carry the seed and the faults injected."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pytest

from coordinator import Consumer, Producer, create_topic
from coordinator.backends.s3 import S3Store
from coordinator.errors import CommitStateUnknownError, StoreError
from coordinator.store import StoreOptions
from s3_lake import TEST_KEY, TEST_SECRET, S3Lake
from s3faults import ALL_FAULTS, HANG, INTERNAL, LOST_REPLY, RESET, SLOWDOWN, FaultProxy

RATE = 0.2
#: Seeds of the randomized runs; ``TXNLOG_FAULT_SEED`` replaces them with one seed to replay a failure.
SEEDS = [int(os.environ["TXNLOG_FAULT_SEED"])] if os.environ.get("TXNLOG_FAULT_SEED") else [11, 12]
READ_TIMEOUT = 0.3
SCHEMA = pa.schema([("id", pa.int64()), ("txn", pa.string())])


@dataclass
class Faulty:
    """A store reaching the lake through a fault proxy, and a clean store on the same lake for checking."""

    proxy: FaultProxy
    store: S3Store
    clean: S3Store

    def why(self) -> str:
        return self.proxy.describe()


def _store(url: str, endpoint: str, **limits: float) -> S3Store:
    opts = StoreOptions(endpoint=endpoint, key=TEST_KEY, secret=TEST_SECRET, region="us-east-1")
    settings: dict[str, float] = {
        "max_attempts": 12,
        "time_budget": 30.0,
        "connect_timeout": 1.0,
        "read_timeout": READ_TIMEOUT,
        "backoff_base": 0.01,
        "backoff_max": 0.2,
    }
    settings.update(limits)
    return S3Store(url, opts, **settings)  # type: ignore[arg-type]


@pytest.fixture
def faulty(s3_lake: S3Lake, request: pytest.FixtureRequest) -> Iterator[Faulty]:
    """A fault proxy with no faults yet (tests set the rate or force faults) and stores through it and around it."""
    seed = getattr(request, "param", SEEDS[0])
    proxy = FaultProxy(s3_lake.endpoint, seed=seed, hang_seconds=READ_TIMEOUT * 3).start()
    store = _store(s3_lake.url, proxy.endpoint)
    clean = _store(s3_lake.url, s3_lake.endpoint)
    try:
        yield Faulty(proxy, store, clean)
    finally:
        store.close()
        clean.close()
        proxy.stop()


# -- (a) the contract holds under random faults ----------------------------------------------------------------


@pytest.mark.parametrize("faulty", SEEDS, indirect=True, ids=lambda s: f"seed{s}")
def test_store_keeps_its_contract_under_faults(faulty: Faulty) -> None:
    store, clean = faulty.store, faulty.clean
    faulty.proxy.set_rate(RATE)
    names = [f"{i:03d}.json" for i in range(25)]
    for n in names:
        assert store.put_if_absent(f"log/{n}", n.encode()), faulty.why()
    for n in names[::5]:
        assert store.put_if_absent(f"log/{n}", b"someone else") is False, faulty.why()
        assert store.put_if_absent(f"log/{n}", n.encode()) is True, faulty.why()
    for i in range(10):
        store.put(f"data/{i}.bin", bytes([i]) * 1000)
    assert store.list("log") == names, faulty.why()
    assert store.list("log", start_after=names[19]) == names[20:], faulty.why()
    assert store.list_dirs("") == ["data", "log"], faulty.why()
    assert [(o.path, o.size) for o in store.list_info("data")] == [(f"data/{i}.bin", 1000) for i in range(10)]
    for n in names:
        assert store.get(f"log/{n}") == n.encode(), faulty.why()
    for i in range(0, 10, 2):
        store.delete(f"data/{i}.bin")
    with pytest.raises(FileNotFoundError):
        store.get("data/0.bin")
    faulty.proxy.set_rate(0)
    assert clean.list("data") == [f"{i}.bin" for i in range(1, 10, 2)], faulty.why()
    assert clean.list("log") == names
    assert sum(faulty.proxy.log.faults.values()) >= 10, faulty.why()
    assert set(faulty.proxy.log.faults) == set(ALL_FAULTS), faulty.why()


@pytest.mark.parametrize("faulty", SEEDS, indirect=True, ids=lambda s: f"seed{s}")
def test_racing_conditional_writes_under_faults_have_one_winner(s3_lake: S3Lake, faulty: Faulty) -> None:
    faulty.proxy.set_rate(RATE)
    n = 4
    stores = [_store(s3_lake.url, faulty.proxy.endpoint) for _ in range(n)]
    try:
        for round_ in range(4):
            path = f"race/{round_}.json"
            barrier = threading.Barrier(n)
            results: dict[int, bool | BaseException] = {}

            def race(i: int, path: str = path, barrier: threading.Barrier = barrier,
                     results: dict[int, bool | BaseException] = results) -> None:
                barrier.wait()
                try:
                    results[i] = stores[i].put_if_absent(path, f"writer-{i}".encode())
                except BaseException as exc:
                    results[i] = exc

            threads = [threading.Thread(target=race, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            winners = [i for i, r in results.items() if r is True]
            assert len(results) == n and all(isinstance(r, bool) for r in results.values()), (results, faulty.why())
            assert len(winners) == 1, (results, faulty.why())
            assert faulty.clean.get(path) == f"writer-{winners[0]}".encode(), faulty.why()
    finally:
        for st in stores:
            st.close()


# -- (b) a write applied whose reply was lost is ours, not a conflict ---------------------------------------------


def test_lost_reply_on_conditional_write_is_success(faulty: Faulty) -> None:
    store = faulty.store
    faulty.proxy.force(LOST_REPLY, method="PUT")
    store.counters.reset()
    assert store.put_if_absent("log/0.json", b"mine") is True
    assert faulty.proxy.log.faults[LOST_REPLY] == 1
    # the retry met the object and read it back
    assert store.counters["get"] >= 1
    assert faulty.clean.get("log/0.json") == b"mine"
    # a different writer's bytes on the same path are still a conflict
    assert store.put_if_absent("log/0.json", b"theirs") is False


def test_lost_replies_on_every_attempt_resolve_by_reading_back(faulty: Faulty) -> None:
    store = faulty.store
    faulty.proxy.force(LOST_REPLY, method="PUT", count=100)
    started = time.monotonic()
    assert store.put_if_absent("log/1.json", b"mine") is True, faulty.why()
    assert time.monotonic() - started < 20
    assert faulty.proxy.log.faults[LOST_REPLY] >= store.max_attempts
    assert faulty.clean.get("log/1.json") == b"mine"


def test_ambiguous_failure_with_nothing_written_is_unknown_not_conflict(faulty: Faulty) -> None:
    faulty.proxy.force(INTERNAL, method="PUT", count=100)
    with pytest.raises(CommitStateUnknownError) as err:
        faulty.store.put_if_absent("log/2.json", b"mine")
    assert "log/2.json" in str(err.value)
    assert not faulty.clean.exists("log/2.json")


def test_hung_replies_are_timed_out_and_retried(faulty: Faulty) -> None:
    faulty.proxy.force(HANG, count=2)
    faulty.proxy.force(RESET, count=2)
    started = time.monotonic()
    assert faulty.store.put_if_absent("log/3.json", b"x") is True
    assert faulty.store.get("log/3.json") == b"x"
    assert time.monotonic() - started < 2 * READ_TIMEOUT + 10
    assert faulty.proxy.log.faults[HANG] == 2


# -- (c) the core client loses and duplicates nothing ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("faulty", SEEDS[:1], indirect=True, ids=lambda s: f"seed{s}")
def test_producer_consumer_round_trip_under_faults(faulty: Faulty) -> None:
    create_topic(faulty.clean, "orders", SCHEMA, 3)
    create_topic(faulty.clean, "audit", SCHEMA, 2)
    faulty.proxy.set_rate(RATE)
    producer = Producer(faulty.store, "etl")
    producer.init_transactions()
    sent: dict[str, list[int]] = {"orders": [], "audit": []}
    next_id = 0
    for t in range(5):
        with producer.transaction():
            batch = list(range(next_id, next_id + 7))
            next_id += 7
            producer.send("orders", [{"id": i, "txn": f"t{t}"} for i in batch], key="id")
            producer.send("audit", [{"id": batch[0], "txn": f"t{t}"}], partition=t % 2)
        sent["orders"] += batch
        sent["audit"].append(batch[0])
    # an aborted transaction publishes nothing
    producer.begin_transaction()
    producer.send("orders", [{"id": -1, "txn": "aborted"}], partition=0)
    producer.flush()
    producer.abort_transaction()

    consumer = Consumer(faulty.store)
    consumer.subscribe(["orders", "audit"])
    got = consumer.poll()
    more = consumer.poll()
    faulty.proxy.set_rate(0)
    assert more.num_rows == 0, faulty.why()
    assert got.num_rows == len(sent["orders"]) + len(sent["audit"]), faulty.why()
    for topic in ("orders", "audit"):
        rows = got.filter(pa.compute.equal(got.column("_topic"), topic))
        ids = rows.column("id").to_pylist()
        assert len(ids) == len(set(ids)), (topic, "duplicates", faulty.why())
        assert sorted(ids) == sorted(sent[topic]), (topic, faulty.why())
        _check_dense(rows, faulty)
    assert sum(faulty.proxy.log.faults.values()) > 0, faulty.why()


def _check_dense(rows: pa.Table, faulty: Faulty) -> None:
    by_part: dict[int, list[int]] = {}
    for p, o in zip(rows.column("_partition").to_pylist(), rows.column("_offset").to_pylist(), strict=True):
        by_part.setdefault(p, []).append(o)
    for p, offsets in by_part.items():
        assert sorted(offsets) == list(range(len(offsets))), (p, offsets, faulty.why())


# -- (d) when the store keeps failing, operations end with a clear error in bounded time ---------------------------

SECRET_KEY = "AKIAFAULTTESTKEY0001"
SECRET = "fault-test-secret-value-0123456789"


@pytest.mark.parametrize("kind", [SLOWDOWN, INTERNAL, HANG, RESET, LOST_REPLY])
def test_every_request_failing_ends_in_a_clear_error(s3_lake: S3Lake, kind: str) -> None:
    with FaultProxy(s3_lake.endpoint, rate=1.0, kinds=[kind], hang_seconds=1.0) as proxy:
        opts = StoreOptions(endpoint=proxy.endpoint, key=SECRET_KEY, secret=SECRET, region="us-east-1")
        store = S3Store(s3_lake.url, opts, max_attempts=2, time_budget=5.0, connect_timeout=0.5,
                        read_timeout=0.3, backoff_base=0.01, backoff_max=0.1)
        outcomes: list[BaseException] = []
        for name, call in [
            ("put_if_absent", lambda: store.put_if_absent("log/0.json", b"x")),
            ("put", lambda: store.put("data/0.bin", b"x")),
            ("get", lambda: store.get("log/0.json")),
            ("list", lambda: store.list("log")),
            ("delete", lambda: store.delete("log/0.json")),
        ]:
            started = time.monotonic()
            with pytest.raises((StoreError, CommitStateUnknownError)) as err:
                call()
            elapsed = time.monotonic() - started
            assert elapsed < 15, (name, elapsed)
            text = str(err.value)
            assert name in text or "conditional write" in text, text
            if name != "list":
                assert "0." in text, text
            outcomes.append(err.value)
        store.close()
        assert proxy.log.requests >= 2 * 5
    for exc in outcomes:
        for text in (str(exc), repr(exc), str(exc.__cause__), str(exc.__context__)):
            assert SECRET_KEY not in text and SECRET not in text, text
    put_if_absent_error = outcomes[0]
    if kind == SLOWDOWN:
        # 503s are refusals: nothing was applied, so the failure is certain
        assert isinstance(put_if_absent_error, StoreError), put_if_absent_error
        assert "SlowDown" in str(put_if_absent_error)
    else:
        # the write may have been applied and cannot be read back: the caller is told so
        assert isinstance(put_if_absent_error, CommitStateUnknownError), put_if_absent_error
