"""The Python clients follow confluent-kafka where a concept is shared: ``poll(timeout)`` long-polls (a cheap look
at the log by name, with backoff) and takes its record budget as ``max_records=``; positions outside a partition's
range follow ``auto_offset_reset``; a transaction open past its timeout is aborted by the entry that decides its
commit; errors say whether to retry, abort or restart; config mappings, ``subscribe("t")``, a closable producer,
offsets checked against topics, and seeking by time. On a local store and on the S3 endpoint (moto)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from coordinator import (
    ClientClosedError,
    CommitStateUnknownError,
    ConcurrentCommitError,
    Consumer,
    CorruptLogError,
    InvalidOptionError,
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    Producer,
    ProducerConfig,
    ProducerFencedError,
    StoreError,
    TopicNotFoundError,
    TransactionTimedOutError,
    TxnLogError,
    UnsupportedStoreError,
    get_topic,
    to_table,
)
from coordinator import inspect as ti
from coordinator.clock import store_now_ms
from coordinator.maintenance import apply_retention
from coordinator.segments import stage_segment
from coordinator.store import Store
from core_helpers import Backend, committed_ids, make_topic, rows
from s3_lake import S3Lake


@pytest.fixture(params=["local", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh store on local disk, and one on the moto S3 endpoint."""
    if request.param == "local":
        yield Backend(f"file://{tmp_path / 'lake'}", {})
    else:
        s3: S3Lake = request.getfixturevalue("s3_lake")
        yield Backend(s3.url, dict(s3.options))


def _produce(backend: Backend, ids: list[int], *, tid: str = "w", partition: int = 0) -> None:
    p = Producer(backend.open(), tid)
    p.init_transactions()
    with p.transaction():
        p.send("t", rows(ids, tid), partition=partition)


def _caught_up(backend: Backend, **kw: object) -> Consumer:
    c = Consumer(backend.open(), **kw)  # type: ignore[arg-type]
    c.subscribe("t")
    c.poll(max_records=100_000)
    return c


# -- poll(timeout) ------------------------------------------------------------------------------------------------


def test_poll_waits_up_to_its_timeout_for_a_commit(lake: Backend) -> None:
    make_topic(lake.open(), partitions=2)
    _produce(lake, [1, 2])
    c = _caught_up(lake)
    started = time.monotonic()
    assert c.poll(0.4).num_rows == 0  # nothing new: waits the whole timeout, then returns empty
    assert time.monotonic() - started >= 0.4
    writer = threading.Timer(0.5, _produce, args=(lake, [3, 4, 5]), kwargs={"tid": "later", "partition": 1})
    writer.start()
    try:
        started = time.monotonic()
        got = c.poll(timeout=20.0)
        waited = time.monotonic() - started
    finally:
        writer.join()
    assert sorted(got.column("id").to_pylist()) == [3, 4, 5]
    assert waited < 10, f"poll returned {waited:.1f} s after a commit it should have seen within a backoff"


def test_a_positional_poll_argument_is_a_timeout_in_seconds_not_a_record_count(lake: Backend) -> None:
    make_topic(lake.open(), partitions=1)
    _produce(lake, list(range(5)))
    c = Consumer(lake.open())
    c.subscribe(["t"])
    assert c.poll(1).column("id").to_pylist() == [0, 1, 2, 3, 4]  # confluent: poll(1) waits up to one second
    c.seek("t", 0, 0)
    assert c.poll(1.0, max_records=2).column("id").to_pylist() == [0, 1]
    for bad in (-2, "1", True):
        with pytest.raises(InvalidOptionError, match="max_records="):
            c.poll(bad)  # type: ignore[arg-type]


def test_a_waiting_poll_looks_at_the_log_by_name_without_listing_or_reading_partitions(lake: Backend) -> None:
    make_topic(lake.open(), partitions=3)
    _produce(lake, [1])
    store = lake.open()
    c = Consumer(store)
    c.subscribe("t")
    c.poll()
    store.counters.reset()
    c.poll(2.0)
    counts = store.counters.snapshot()
    # backoff 0.02 s doubling to 1 s: about 7 looks in 2 s, one by-name read each (plus the final empty poll)
    assert counts.get("list", 0) <= 1, counts
    assert store.counters.total() <= 15, counts


# -- out-of-range positions ---------------------------------------------------------------------------------------


def test_a_seek_past_the_end_follows_auto_offset_reset(lake: Backend) -> None:
    make_topic(lake.open(), partitions=1)
    _produce(lake, [0, 1, 2])
    earliest = Consumer(lake.open())
    earliest.subscribe("t")
    earliest.seek("t", 0, 50)
    assert earliest.lag() == {("t", 0): 3}
    assert earliest.poll().column("id").to_pylist() == [0, 1, 2]  # reset to the log start, as Kafka's earliest
    latest = Consumer(lake.open(), auto_offset_reset="latest")
    latest.subscribe("t")
    latest.seek("t", 0, 50)
    assert latest.poll().num_rows == 0 and latest.position("t", 0) == 3
    _produce(lake, [3], tid="more")
    assert latest.poll().column("id").to_pylist() == [3]  # not stuck past the end for ever
    strict = Consumer(lake.open(), auto_offset_reset="error")
    strict.subscribe("t")
    strict.seek("t", 0, 50)
    with pytest.raises(OffsetOutOfRangeError, match=r"position 50 of t/0 is beyond the end 4"):
        strict.poll()
    with pytest.raises(OffsetOutOfRangeError):
        strict.lag()
    strict.seek("t", 0, 4)
    assert strict.poll().num_rows == 0 and strict.lag() == {("t", 0): 0}
    with pytest.raises(InvalidOptionError, match="auto_offset_reset"):
        Consumer(lake.open(), auto_offset_reset="smallest-ish")


def test_commit_refuses_an_offset_beyond_the_end_and_unknown_partitions(lake: Backend) -> None:
    make_topic(lake.open(), partitions=1)
    _produce(lake, [0, 1])
    c = Consumer(lake.open(), group_id="g")
    c.subscribe("t")
    c.seek("t", 0, 9)
    with pytest.raises(OffsetOutOfRangeError, match="offset 9 of t/0 is beyond the partition's end 2"):
        c.commit()
    with pytest.raises(TopicNotFoundError, match="no partition 3"):
        c.commit({"t": {3: 0}})
    assert lake.coordinator().group_offsets("g") == {}
    c.commit({"t": {0: 2}})
    assert lake.coordinator().group_offsets("g") == {"t": {0: 2}}


def test_lag_flags_committed_offsets_outside_the_partition(lake: Backend) -> None:
    make_topic(lake.open(), partitions=2)
    for i in range(4):
        _produce(lake, [i], tid=f"w{i}")
    coord = lake.coordinator()
    coord.commit_group_offsets("far", {"t": {1: 7}})  # as an older client could: beyond the end (0)
    coord.commit_group_offsets("old", {"t": {0: 1}})
    plog = coord.partition("t", 0)
    plog.refresh()
    apply_retention(coord, "t", 0, retention_bytes=plog.segments[0].size * 2)  # start moves to 2
    far = {r["partition"]: r for r in ti.lag(lake.open(), "far")}
    assert far[1]["out_of_range"] == "beyond end 0" and far[1]["lag"] is None
    assert far[0]["out_of_range"] is None and far[0]["lag"] == 2  # never committed: counts from the start
    (old, _) = ti.lag(lake.open(), "old")
    assert old["committed"] == 1 and old["out_of_range"] == "below start 2" and old["lag"] == 2


# -- transaction timeout at commit --------------------------------------------------------------------------------


def test_a_commit_after_the_timeout_is_aborted_without_any_sweep(lake: Backend) -> None:
    make_topic(lake.open(), partitions=1)
    # 3 s: long enough for the next transaction to commit in time on a loaded machine
    p = Producer(lake.open(), "slow", config=ProducerConfig(transaction_timeout_ms=3000))
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows([1, 2], "late"))  # buffered only: the timeout counts from the send, not from staging
    time.sleep(4.5)  # the store's clock (S3: whole seconds) moves past the 3 s timeout
    with pytest.raises(TransactionTimedOutError, match=r"aborted: open longer than its timeout \(3 s\)") as err:
        p.commit_transaction()
    assert err.value.abortable and not err.value.fatal and not err.value.retriable
    assert committed_ids(lake) == []
    p.abort_transaction()  # the abortable error's recovery is accepted
    with p.transaction():  # the producer goes on at the same epoch: not fenced
        p.send("t", rows([3], "next"))
    assert committed_ids(lake) == [3]


def test_the_timeout_at_commit_never_undoes_an_acknowledged_commit(lake: Backend) -> None:
    make_topic(lake.open(), partitions=1)
    coord = lake.coordinator()
    ident = coord.init_producer("ack", timeout_ms=60_000)
    txn = ident.txn_id(0)
    seg = stage_segment(coord.store, "t", 0, _table(coord.store, [7]), f"{txn}~{0:010d}", seq=0)
    now = store_now_ms(coord.store)
    first = coord.commit(ident, txn, [seg], started_ms=now)
    # the same commit retried (its reply lost) long after the timeout: answered committed, never aborted
    again = lake.coordinator().commit(ident, txn, [seg], started_ms=now - 3_600_000)
    assert again.txn == first.txn and coord.txn_status(txn) == "committed"
    assert committed_ids(lake) == [7]
    # a new transaction that is already past its timeout when decided is aborted by that entry
    late = ident.txn_id(1)
    seg2 = stage_segment(coord.store, "t", 0, _table(coord.store, [8]), f"{late}~{1:010d}", seq=1)
    with pytest.raises(TransactionTimedOutError, match=r"\(60 s\)"):
        coord.commit(ident, late, [seg2], started_ms=now - 120_000)
    assert coord.txn_status(late) == "aborted" and committed_ids(lake) == [7]


def test_a_sweep_timeout_tells_the_producer_it_was_the_timeout(lake: Backend) -> None:
    make_topic(lake.open(), partitions=1)
    p = Producer(lake.open(), "swept")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows([1], "swept"))
    p.flush()
    sweeper = lake.coordinator()
    assert sweeper.abort_timed_out(now=store_now_ms(sweeper.store) + 5 * 60_000) == ["swept"]
    with pytest.raises(ProducerFencedError, match=r"aborted: open longer than its timeout \(60 s\)"):
        p.commit_transaction()


def _table(store: Store, ids: list[int]) -> pa.Table:
    return to_table(rows(ids, "x"), get_topic(store, "t"))


# -- error classes ------------------------------------------------------------------------------------------------


def test_errors_say_whether_to_retry_abort_or_restart() -> None:
    def kind(cls: type[TxnLogError]) -> str:
        flags = [n for n in ("retriable", "abortable", "fatal") if getattr(cls, n)]
        assert len(flags) <= 1, (cls, flags)
        return flags[0] if flags else "caller"

    assert {c.__name__: kind(c) for c in (
        CommitStateUnknownError, ConcurrentCommitError, StoreError, TransactionTimedOutError, OutOfOrderSequenceError,
        ProducerFencedError, CorruptLogError, UnsupportedStoreError, ClientClosedError, InvalidOptionError,
        InvalidTxnStateError, TopicNotFoundError, OffsetOutOfRangeError)} == {
        "CommitStateUnknownError": "retriable", "ConcurrentCommitError": "retriable", "StoreError": "retriable",
        "TransactionTimedOutError": "abortable", "OutOfOrderSequenceError": "abortable",
        "ProducerFencedError": "fatal", "CorruptLogError": "fatal", "UnsupportedStoreError": "fatal",
        "ClientClosedError": "fatal", "InvalidOptionError": "caller", "InvalidTxnStateError": "caller",
        "TopicNotFoundError": "caller", "OffsetOutOfRangeError": "caller"}


# -- smaller surface fixes ----------------------------------------------------------------------------------------


def test_subscribe_takes_a_single_topic_name(lake: Backend) -> None:
    make_topic(lake.open(), "payments", partitions=2)
    c = Consumer(lake.open())
    c.subscribe("payments")  # one topic, not the characters of its name
    assert c.assignment() == [("payments", 0), ("payments", 1)]


def test_clients_take_a_confluent_style_config(lake: Backend) -> None:
    make_topic(lake.open(), partitions=1)
    conf = {"store.url": lake.url, **lake.options}
    with Producer({**conf, "transactional.id": "cfg", "transaction.timeout.ms": "5000",
                   "max.in.flight.requests.per.connection": 2},
                  config=ProducerConfig(segment_format="arrow")) as p:
        assert (p.config.transaction_timeout_ms, p.config.max_in_flight, p.config.segment_format) == \
            (5000, 2, "arrow")
        p.init_transactions()
        with p.transaction():
            p.send("t", rows([1, 2], "cfg"))
    c = Consumer({**conf, "group.id": "cg", "auto.offset.reset": "latest", "max.poll.records": 1})
    c.subscribe("t")
    assert (c.group_id, c.auto_offset_reset, c.position("t", 0)) == ("cg", "latest", 2)
    with pytest.raises(InvalidOptionError, match="store.url"):
        Consumer({"group.id": "cg"})
    with pytest.raises(InvalidOptionError, match="no brokers"):
        Consumer({"bootstrap.servers": "localhost:9092", "group.id": "cg"})
    with pytest.raises(InvalidOptionError, match=r"unknown key\(s\) \['group.idd'\]"):
        Consumer({**conf, "group.idd": "cg"})


def test_a_closed_producer_is_closed_and_a_with_block_closes_it(lake: Backend) -> None:
    make_topic(lake.open(), partitions=1)
    with Producer(lake.open(), "ctx") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("t", rows([1], "open"))
        p.flush()
    # leaving the block aborted the open transaction and ended the producer
    assert committed_ids(lake) == []
    for call in (p.init_transactions, p.begin_transaction, p.abort_transaction):
        with pytest.raises(ClientClosedError, match="closed"):
            call()
    p.close()  # idempotent


def test_send_offsets_to_transaction_refuses_unknown_topics_and_partitions(lake: Backend) -> None:
    make_topic(lake.open(), partitions=2)
    p = Producer(lake.open(), "ctp")
    p.init_transactions()
    p.begin_transaction()
    with pytest.raises(TopicNotFoundError, match="nope"):
        p.send_offsets_to_transaction({"nope": {0: 1}}, group_id="g")
    with pytest.raises(TopicNotFoundError, match="no partition 5"):
        p.send_offsets_to_transaction({"t": {5: 1}}, group_id="g")
    p.send_offsets_to_transaction({"t": {1: 0}}, group_id="g")
    p.commit_transaction()
    assert lake.coordinator().group_offsets("g") == {"t": {1: 0}}


def test_offsets_for_times_and_seek_to_timestamp(lake: Backend) -> None:
    make_topic(lake.open(), partitions=1)
    _produce(lake, [0, 1], tid="a")
    time.sleep(1.2)  # commit times are on the store's clock (S3: whole seconds)
    between = store_now_ms(lake.open())
    time.sleep(1.2)
    _produce(lake, [2], tid="b")
    c = Consumer(lake.open())
    c.subscribe("t")
    assert c.offsets_for_times({("t", 0): between}) == {("t", 0): 2}
    assert c.offsets_for_times({("t", 0): 0}) == {("t", 0): 0}
    future = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    assert c.offsets_for_times({("t", 0): future}) == {("t", 0): None}
    c.seek_to_timestamp(between)
    assert c.poll().column("id").to_pylist() == [2]
    c.seek_to_timestamp(future)
    assert c.position("t", 0) == 3
    with pytest.raises(InvalidOptionError, match="time zone"):
        c.seek_to_timestamp(dt.datetime(2020, 1, 1))  # noqa: DTZ001

