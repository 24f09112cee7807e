"""The GCS store under object-store faults, injected on the real network path by :mod:`s3faults`'s proxy in front of
fake-gcs-server: 429 and 503 throttling, 500s, hung replies, connection resets, and uploads applied whose reply was
lost. Every run is seeded; failure messages carry the seed and the faults injected."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pytest

from coordinator import Consumer, Producer, create_topic, open_store
from coordinator.backends.gcs import GCSStore
from coordinator.errors import CommitStateUnknownError, InvalidOptionError, StoreError
from coordinator.store import StoreOptions
from gcs_lake import GCSLake, upload
from s3faults import ALL_FAULTS, HANG, INTERNAL, LOST_REPLY, RESET, SLOWDOWN, THROTTLE, FaultProxy

RATE = 0.2
#: Seeds of the randomized runs; ``TXNLOG_FAULT_SEED`` replaces them with one seed to replay a failure.
SEEDS = [int(os.environ["TXNLOG_FAULT_SEED"])] if os.environ.get("TXNLOG_FAULT_SEED") else [21, 22]
READ_TIMEOUT = 0.3
KINDS = (*ALL_FAULTS, THROTTLE)
SCHEMA = pa.schema([("id", pa.int64()), ("txn", pa.string())])


@dataclass
class Faulty:
    """A store reaching the lake through a fault proxy, and a clean store on the same lake for checking."""

    proxy: FaultProxy
    store: GCSStore
    clean: GCSStore

    def why(self) -> str:
        return self.proxy.describe()


def _store(url: str, endpoint: str, **limits: float) -> GCSStore:
    opts = StoreOptions(gcs_endpoint=endpoint, gcs_token="anon")
    settings: dict[str, float] = {"max_attempts": 12, "time_budget": 30.0, "connect_timeout": 1.0,
                                  "read_timeout": READ_TIMEOUT, "backoff_base": 0.01, "backoff_max": 0.2}
    settings.update(limits)
    return GCSStore(url, opts, **settings)  # type: ignore[arg-type]


@pytest.fixture
def faulty(gcs_lake: GCSLake, request: pytest.FixtureRequest) -> Iterator[Faulty]:
    """A fault proxy with no faults yet (tests set the rate or force faults) and stores through it and around it."""
    seed = getattr(request, "param", SEEDS[0])
    proxy = FaultProxy(gcs_lake.endpoint, seed=seed, kinds=KINDS, hang_seconds=READ_TIMEOUT * 3).start()
    store = _store(gcs_lake.url, proxy.endpoint)
    clean = _store(gcs_lake.url, gcs_lake.endpoint)
    try:
        yield Faulty(proxy, store, clean)
    finally:
        store.close()
        clean.close()
        proxy.stop()


# -- the emulator ------------------------------------------------------------------------------------------------


def test_emulator_enforces_the_precondition_on_the_backend_upload_kind(gcs_lake: GCSLake) -> None:
    """fake-gcs-server refuses a second ``ifGenerationMatch=0`` create on a multipart upload, the kind the backend
    sends; on a media upload it lets the create overwrite (a backend sending those would be refused by the probe)."""
    ep, bucket = gcs_lake.endpoint, gcs_lake.bucket
    assert upload(ep, bucket, "m/a", b"one", kind="multipart", if_generation_match="0") == 200
    assert upload(ep, bucket, "m/a", b"two", kind="multipart", if_generation_match="0") == 412
    assert upload(ep, bucket, "x/a", b"one", kind="media", if_generation_match="0") == 200
    assert upload(ep, bucket, "x/a", b"two", kind="media", if_generation_match="0") == 200
    store = _store(gcs_lake.url.rsplit("/", 1)[0], ep)
    try:
        assert store.get("m/a") == b"one"
        store.counters.reset()
        assert store.put_if_absent("m/b", b"one") and not store.put_if_absent("m/b", b"two")
        assert store.get("m/b") == b"one" and store.counters["put_if_absent"] == 2
    finally:
        store.close()


def test_missing_bucket_is_a_store_error_not_a_missing_object(gcs_lake: GCSLake) -> None:
    store = _store(f"gs://no-such-bucket-{uuid.uuid4().hex[:12]}/lake", gcs_lake.endpoint)
    try:
        # (the emulator's 404 on an object does not say whether the bucket is missing; GCS's does)
        with pytest.raises(StoreError, match="no-such-bucket.*does not exist"):
            store.list("_txn/log")
        with pytest.raises(StoreError, match="no-such-bucket.*does not exist"):
            store.list_dirs("")
    finally:
        store.close()


def test_gcs_token_must_name_a_file_and_is_never_shown(gcs_lake: GCSLake) -> None:
    raw = "ya29.raw-access-token-pasted-by-mistake-0123456789"
    with pytest.raises(InvalidOptionError, match="gcs.token") as err:
        open_store(gcs_lake.url, {**gcs_lake.options, "gcs.token": raw})
    assert raw not in str(err.value)
    assert raw not in repr(StoreOptions.from_options({"gcs.token": raw}))
    with pytest.raises(InvalidOptionError, match="not a gs:// or gcs://|names no bucket"):
        GCSStore("gs://")
    store = open_store(gcs_lake.url.replace("gs://", "gcs://"), gcs_lake.options)
    try:
        store.put("a.json", b"x")
        assert open_store(gcs_lake.url, gcs_lake.options).get("a.json") == b"x"
    finally:
        store.close()


# -- (a) the contract holds under random faults --------------------------------------------------------------------


@pytest.mark.parametrize("faulty", SEEDS, indirect=True, ids=lambda s: f"seed{s}")
def test_gcs_store_keeps_its_contract_under_faults(faulty: Faulty) -> None:
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
    assert set(faulty.proxy.log.faults) == set(KINDS), faulty.why()


@pytest.mark.parametrize("faulty", SEEDS[:1], indirect=True, ids=lambda s: f"seed{s}")
def test_racing_conditional_writes_under_faults_have_one_winner(gcs_lake: GCSLake, faulty: Faulty) -> None:
    faulty.proxy.set_rate(RATE)
    n = 4
    stores = [_store(gcs_lake.url, faulty.proxy.endpoint) for _ in range(n)]
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


# -- (b) an upload applied whose reply was lost is ours, not a conflict --------------------------------------------


def test_lost_reply_on_conditional_upload_is_success(faulty: Faulty) -> None:
    store = faulty.store
    faulty.proxy.force(LOST_REPLY, method="POST")
    store.counters.reset()
    assert store.put_if_absent("log/0.json", b"mine") is True
    assert faulty.proxy.log.faults[LOST_REPLY] == 1
    assert store.counters["put_if_absent"] == 2 and store.counters["get"] == 1  # the retry met 412, read back
    assert faulty.clean.get("log/0.json") == b"mine"
    assert store.put_if_absent("log/0.json", b"theirs") is False


def test_lost_replies_on_every_attempt_resolve_by_reading_back(faulty: Faulty) -> None:
    store = faulty.store
    faulty.proxy.force(LOST_REPLY, method="POST", count=100)
    started = time.monotonic()
    assert store.put_if_absent("log/1.json", b"mine") is True, faulty.why()
    assert time.monotonic() - started < 20
    assert faulty.proxy.log.faults[LOST_REPLY] >= store.max_attempts
    assert faulty.clean.get("log/1.json") == b"mine"


def test_ambiguous_failure_with_nothing_written_is_unknown_not_conflict(faulty: Faulty) -> None:
    faulty.proxy.force(INTERNAL, method="POST", count=100)
    with pytest.raises(CommitStateUnknownError) as err:
        faulty.store.put_if_absent("log/2.json", b"mine")
    assert "log/2.json" in str(err.value)
    assert not faulty.clean.exists("log/2.json")


@pytest.mark.parametrize("kind", [THROTTLE, SLOWDOWN], ids=["429", "503"])
def test_throttled_uploads_are_retried_until_they_pass(faulty: Faulty, kind: str) -> None:
    faulty.proxy.force(kind, method="POST", count=3)
    faulty.store.counters.reset()
    assert faulty.store.put_if_absent("log/4.json", b"x") is True
    assert faulty.store.counters["put_if_absent"] == 4 and faulty.proxy.log.faults[kind] == 3
    assert faulty.clean.get("log/4.json") == b"x"


def test_hung_replies_are_timed_out_and_retried(faulty: Faulty) -> None:
    faulty.proxy.force(HANG, count=2)
    faulty.proxy.force(RESET, count=2)
    started = time.monotonic()
    assert faulty.store.put_if_absent("log/3.json", b"x") is True
    assert faulty.store.get("log/3.json") == b"x"
    assert time.monotonic() - started < 2 * READ_TIMEOUT + 10
    assert faulty.proxy.log.faults[HANG] == 2


# -- (c) the core client loses and duplicates nothing --------------------------------------------------------------


@pytest.mark.slow
def test_producer_consumer_round_trip_under_faults(faulty: Faulty) -> None:
    create_topic(faulty.clean, "orders", SCHEMA, 3)
    faulty.proxy.set_rate(RATE)
    producer = Producer(faulty.store, "etl")
    producer.init_transactions()
    sent: list[int] = []
    for t in range(4):
        with producer.transaction():
            batch = list(range(t * 7, t * 7 + 7))
            producer.send("orders", [{"id": i, "txn": f"t{t}"} for i in batch], key="id")
        sent += batch
    producer.begin_transaction()
    producer.send("orders", [{"id": -1, "txn": "aborted"}], partition=0)
    producer.flush()
    producer.abort_transaction()
    consumer = Consumer(faulty.store)
    consumer.subscribe(["orders"])
    got = consumer.poll()
    more = consumer.poll()
    faulty.proxy.set_rate(0)
    assert more.num_rows == 0, faulty.why()
    ids = got.column("id").to_pylist()
    assert sorted(ids) == sent, faulty.why()
    assert sum(faulty.proxy.log.faults.values()) > 0, faulty.why()


# -- (d) when the store keeps failing, operations end with a clear error in bounded time -----------------------------


@pytest.mark.parametrize("kind", [THROTTLE, SLOWDOWN, INTERNAL, HANG, RESET, LOST_REPLY])
def test_every_request_failing_ends_in_a_clear_error(gcs_lake: GCSLake, kind: str) -> None:
    with FaultProxy(gcs_lake.endpoint, rate=1.0, kinds=[kind], hang_seconds=1.0) as proxy:
        store = _store(gcs_lake.url, proxy.endpoint, max_attempts=2, time_budget=5.0, connect_timeout=0.5,
                       read_timeout=0.3, backoff_max=0.1)
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
            assert time.monotonic() - started < 15, name
            text = str(err.value)
            assert name in text or "conditional write" in text, text
            outcomes.append(err.value)
        store.close()
        assert proxy.log.requests >= 2 * 5
    if kind == THROTTLE:
        # 429 is a refusal: nothing was applied, so the failure is certain
        assert isinstance(outcomes[0], StoreError) and not isinstance(outcomes[0], CommitStateUnknownError)
        assert "429" in str(outcomes[0])
    else:
        # the upload may have been applied (GCS does not promise a 503 was not) and cannot be read back
        assert isinstance(outcomes[0], CommitStateUnknownError), outcomes[0]
