"""The Azure store under object-store faults, injected on the real network path by :mod:`s3faults`'s proxy (with
Azure's error codes) in front of Azurite: 503 ServerBusy, 500 InternalError, hung replies, connection resets, and
writes applied whose reply was lost; and the Python producer and consumer on Azure. Every run is seeded; failure
messages carry the seed and the faults injected."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
import pytest

from azure_lake import ACCOUNT, ACCOUNT_KEY, AzureLake, account_sas, container_blobs
from coordinator import Consumer, Producer, create_topic, open_store
from coordinator.backends.azure import AzureStore
from coordinator.errors import CommitStateUnknownError, StoreError, UnsupportedStoreError
from coordinator.probe import probe_conditional_writes
from coordinator.store import StoreOptions
from s3faults import ALL_FAULTS, AZURE_CODES, HANG, INTERNAL, LOST_REPLY, RESET, SLOWDOWN, FaultProxy

RATE = 0.2
#: Seeds of the randomized runs; ``TXNLOG_FAULT_SEED`` replaces them with one seed to replay a failure.
SEEDS = [int(os.environ["TXNLOG_FAULT_SEED"])] if os.environ.get("TXNLOG_FAULT_SEED") else [21, 22]
READ_TIMEOUT = 0.3
SCHEMA = pa.schema([("id", pa.int64()), ("txn", pa.string())])


@dataclass
class Faulty:
    """A store reaching the lake through a fault proxy, and a clean store on the same lake for checking."""

    proxy: FaultProxy
    store: AzureStore
    clean: AzureStore

    def why(self) -> str:
        return self.proxy.describe()


def _store(url: str, endpoint: str, **limits: float) -> AzureStore:
    opts = StoreOptions(azure_account=ACCOUNT, azure_key=ACCOUNT_KEY, azure_endpoint=endpoint)
    settings: dict[str, float] = {
        "max_attempts": 12,
        "time_budget": 30.0,
        "connect_timeout": 1.0,
        "read_timeout": READ_TIMEOUT,
        "backoff_base": 0.01,
        "backoff_max": 0.2,
    }
    settings.update(limits)
    return AzureStore(url, opts, **settings)  # type: ignore[arg-type]


def _proxy(lake: AzureLake, **kwargs: object) -> FaultProxy:
    return FaultProxy(lake.endpoint, codes=AZURE_CODES, **kwargs)  # type: ignore[arg-type]


def _via(proxy: FaultProxy) -> str:
    """The Blob service URL of Azurite's account through ``proxy``."""
    return f"{proxy.endpoint}/{ACCOUNT}"


@pytest.fixture
def faulty(azure_lake: AzureLake, request: pytest.FixtureRequest) -> Iterator[Faulty]:
    """A fault proxy with no faults yet (tests set the rate or force faults) and stores through it and around it."""
    seed = getattr(request, "param", SEEDS[0])
    proxy = _proxy(azure_lake, seed=seed, hang_seconds=READ_TIMEOUT * 3).start()
    store = _store(azure_lake.url, _via(proxy))
    clean = _store(azure_lake.url, azure_lake.endpoint)
    try:
        yield Faulty(proxy, store, clean)
    finally:
        store.close()
        clean.close()
        proxy.stop()


# -- (a) the contract holds under random faults ----------------------------------------------------------------


@pytest.mark.parametrize("faulty", SEEDS, indirect=True, ids=lambda s: f"seed{s}")
def test_azure_store_keeps_its_contract_under_faults(faulty: Faulty) -> None:
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


def test_azure_racing_conditional_writes_under_faults_have_one_winner(azure_lake: AzureLake, faulty: Faulty) -> None:
    faulty.proxy.set_rate(RATE)
    n = 4
    stores = [_store(azure_lake.url, _via(faulty.proxy)) for _ in range(n)]
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


def test_azure_lost_reply_on_conditional_write_is_success(faulty: Faulty) -> None:
    store = faulty.store
    faulty.proxy.force(LOST_REPLY, method="PUT")
    store.counters.reset()
    assert store.put_if_absent("log/0.json", b"mine") is True
    assert faulty.proxy.log.faults[LOST_REPLY] == 1
    # the retry (ours, or the HTTP layer's re-send on a fresh connection) met the blob (409 BlobAlreadyExists) and
    # read it back
    assert store.counters["get"] >= 1
    assert faulty.clean.get("log/0.json") == b"mine"
    # a different writer's bytes on the same path are still a conflict
    assert store.put_if_absent("log/0.json", b"theirs") is False


def test_azure_lost_replies_on_every_attempt_resolve_by_reading_back(faulty: Faulty) -> None:
    store = faulty.store
    faulty.proxy.force(LOST_REPLY, method="PUT", count=100)
    started = time.monotonic()
    assert store.put_if_absent("log/1.json", b"mine") is True, faulty.why()
    assert time.monotonic() - started < 20
    assert faulty.proxy.log.faults[LOST_REPLY] >= store.max_attempts
    assert faulty.clean.get("log/1.json") == b"mine"


def test_azure_ambiguous_failure_with_nothing_written_is_unknown_not_conflict(faulty: Faulty) -> None:
    faulty.proxy.force(INTERNAL, method="PUT", count=100)
    with pytest.raises(CommitStateUnknownError) as err:
        faulty.store.put_if_absent("log/2.json", b"mine")
    assert "log/2.json" in str(err.value)
    assert not faulty.clean.exists("log/2.json")


def test_azure_server_busy_is_retried(faulty: Faulty) -> None:
    faulty.proxy.force(SLOWDOWN, count=3)
    faulty.store.counters.reset()
    assert faulty.store.put_if_absent("log/4.json", b"x") is True
    assert faulty.proxy.log.faults[SLOWDOWN] == 3
    assert faulty.store.counters["put_if_absent"] == 4 and faulty.store.counters["get"] == 0  # 503: not applied
    assert faulty.clean.get("log/4.json") == b"x"


def test_azure_hung_replies_are_timed_out_and_retried(faulty: Faulty) -> None:
    faulty.proxy.force(HANG, count=2)
    faulty.proxy.force(RESET, count=2)
    started = time.monotonic()
    assert faulty.store.put_if_absent("log/3.json", b"x") is True
    assert faulty.store.get("log/3.json") == b"x"
    assert time.monotonic() - started < 2 * READ_TIMEOUT + 10
    assert faulty.proxy.log.faults[HANG] == 2


def test_azurite_enforces_the_precondition_and_the_probe_sees_a_proxy_that_strips_it(azure_lake: AzureLake) -> None:
    # with a SAS token, which signs no header, so that the stripped request still authenticates
    sas = StoreOptions(azure_account=ACCOUNT, azure_sas_token=account_sas(), azure_endpoint=azure_lake.endpoint)
    direct = AzureStore(azure_lake.url + "/direct", sas)
    probe_conditional_writes(direct)  # Azurite itself refuses the second create
    direct.close()
    with _proxy(azure_lake) as proxy:
        passing = AzureStore(azure_lake.url + "/proxied", replace(sas, azure_endpoint=_via(proxy)))
        probe_conditional_writes(passing)  # a proxy that forwards the header changes nothing
        passing.close()
    with _proxy(azure_lake, strip_conditional=True) as proxy:
        stripped = AzureStore(azure_lake.url + "/stripped", replace(sas, azure_endpoint=_via(proxy)))
        with pytest.raises(UnsupportedStoreError, match=f"{proxy.endpoint}.*does not honour conditional writes"):
            probe_conditional_writes(stripped)
        stripped.close()
    assert sas.azure_sas_token and sas.azure_sas_token not in repr(stripped)


# -- (c) the core client loses and duplicates nothing ---------------------------------------------------------------


def test_azure_producer_consumer_exactly_once(azure_lake: AzureLake) -> None:
    store = open_store(azure_lake.url, azure_lake.options)
    create_topic(store, "orders", SCHEMA, 2)
    producer = Producer(store, "etl")
    producer.init_transactions()
    with producer.transaction():
        producer.send("orders", [{"id": i, "txn": "t0"} for i in range(10)], key="id")
    producer.begin_transaction()
    producer.send("orders", [{"id": -1, "txn": "aborted"}], partition=0)
    producer.flush()
    producer.abort_transaction()
    with producer.transaction():
        producer.send("orders", [{"id": i, "txn": "t1"} for i in range(10, 15)], key="id")
    consumer = Consumer(open_store(azure_lake.url, azure_lake.options))
    consumer.subscribe(["orders"])
    got = consumer.poll()
    assert consumer.poll().num_rows == 0
    assert sorted(got.column("id").to_pylist()) == list(range(15))  # read_committed: the aborted row is not seen
    assert "aborted" not in got.column("txn").to_pylist()
    assert any(name.startswith("lake/_txn/") for name in container_blobs(azure_lake))
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("faulty", SEEDS[:1], indirect=True, ids=lambda s: f"seed{s}")
def test_azure_producer_consumer_round_trip_under_faults(faulty: Faulty) -> None:
    create_topic(faulty.clean, "orders", SCHEMA, 3)
    faulty.proxy.set_rate(RATE)
    producer = Producer(faulty.store, "etl")
    producer.init_transactions()
    sent: list[int] = []
    for t in range(4):
        with producer.transaction():
            batch = list(range(7 * t, 7 * t + 7))
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
    assert len(ids) == len(set(ids)), ("duplicates", faulty.why())
    assert sorted(ids) == sorted(sent), faulty.why()
    by_part: dict[int, list[int]] = {}
    for p, o in zip(got.column("_partition").to_pylist(), got.column("_offset").to_pylist(), strict=True):
        by_part.setdefault(p, []).append(o)
    for p, offsets in by_part.items():
        assert sorted(offsets) == list(range(len(offsets))), (p, offsets, faulty.why())
    assert sum(faulty.proxy.log.faults.values()) > 0, faulty.why()


# -- (d) when the store keeps failing, operations end with a clear error in bounded time ---------------------------


@pytest.mark.parametrize("kind", [SLOWDOWN, INTERNAL, HANG, RESET, LOST_REPLY])
def test_azure_every_request_failing_ends_in_a_clear_error(azure_lake: AzureLake, kind: str) -> None:
    sas = account_sas()
    with _proxy(azure_lake, rate=1.0, kinds=[kind], hang_seconds=1.0) as proxy:
        opts = StoreOptions(azure_account=ACCOUNT, azure_sas_token=sas, azure_endpoint=_via(proxy))
        store = AzureStore(azure_lake.url, opts, max_attempts=2, time_budget=5.0, connect_timeout=0.5,
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
    signature = sas.split("sig=", 1)[1].split("&", 1)[0]
    for exc in outcomes:
        for text in (str(exc), repr(exc), str(exc.__cause__), str(exc.__context__)):
            assert sas not in text and signature not in text, text
    put_if_absent_error = outcomes[0]
    if kind == SLOWDOWN:
        # 503s are refusals: nothing was applied, so the failure is certain
        assert isinstance(put_if_absent_error, StoreError), put_if_absent_error
        assert not isinstance(put_if_absent_error, CommitStateUnknownError), put_if_absent_error
        assert "ServerBusy" in str(put_if_absent_error)
    else:
        # the write may have been applied and cannot be read back: the caller is told so
        assert isinstance(put_if_absent_error, CommitStateUnknownError), put_if_absent_error


def test_azure_credentials_never_reach_logs_reprs_or_blobs(azure_lake: AzureLake,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    sas = account_sas()
    signature = sas.split("sig=", 1)[1].split("&", 1)[0]
    with caplog.at_level("DEBUG"):
        for opts in (azure_lake.options, azure_lake.sas_options() | {"azure.sasToken": sas}):
            store = open_store(azure_lake.url, opts)
            probe_conditional_writes(store)
            store.put_if_absent("log/0.json", b"x")
            assert store.get("log/0.json") == b"x" and store.list("log") == ["0.json"]
            for text in (repr(store), repr(StoreOptions.from_options(opts)), str(store.__dict__.get("url"))):
                assert ACCOUNT_KEY not in text and sas not in text and signature not in text, text
            store.close()
    assert caplog.records, "DEBUG logging captured nothing"
    for record in caplog.records:
        message = record.getMessage()
        assert ACCOUNT_KEY not in message and signature not in message, message
    for name, data in container_blobs(azure_lake).items():
        assert ACCOUNT_KEY.encode() not in data and signature.encode() not in data, name
