"""Per-record producer times (Kafka's ``CreateTime``): stamped by ``Producer.send`` (the time of the send, or a
given time), stored in the segments' reserved column and read back as ``_producerTimestamp`` by every Python read
path; segments written before the column existed read as null, and compaction keeps the column."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator import (
    METADATA_NAMES,
    Consumer,
    InvalidOptionError,
    Producer,
    ProducerConfig,
    TransactionCoordinator,
    create_topic,
    read_snapshot,
    stage_segment,
)
from coordinator.maintenance import compact_partition
from coordinator.segments import PRODUCER_TS, now_us
from core_helpers import SCHEMA, Backend, make_topic, rows

UTC = dt.UTC


def utc_us(value: dt.datetime) -> int:
    return (value - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)


def producer_times(table: pa.Table) -> dict[int, int | None]:
    """id -> producer time in microseconds (None for a null)."""
    times = table.column(PRODUCER_TS).cast(pa.int64()).to_pylist()
    return dict(zip(table.column("id").to_pylist(), times, strict=True))


def start(backend: Backend, tid: str = "w", **config: object) -> Producer:
    p = Producer(backend.open(), tid, config=ProducerConfig(**config))  # type: ignore[arg-type]
    p.init_transactions()
    return p


def test_the_metadata_columns_include_the_producer_time() -> None:
    assert METADATA_NAMES == ("_topic", "_partition", "_offset", "_timestamp", "_producerTimestamp")


def test_send_stamps_each_row_with_the_time_of_the_send(backend: Backend) -> None:
    make_topic(backend.open(), partitions=2)
    p = start(backend)
    with p.transaction():
        before_first = now_us()
        p.send("t", rows(range(10), "a"), key="id")
        between = now_us()
        p.send("t", rows(range(10, 20), "b"))
        after_second = now_us()
    table = read_snapshot(backend.open(), ["t"])["t"]
    times = producer_times(table)
    assert table.schema.field(PRODUCER_TS).type == pa.timestamp("us", tz="UTC")
    assert all(before_first <= times[i] <= between for i in range(10))  # type: ignore[operator]
    assert all(between <= times[i] <= after_second for i in range(10, 20))  # type: ignore[operator]
    assert len({times[i] for i in range(10)}) == 1
    commit_us = table.column("_timestamp").cast(pa.int64()).to_pylist()
    # the producer time is the host's clock, the commit time the store's (read to its resolution: whole seconds on
    # S3), so a commit may look up to that resolution older than the send
    slack = 1000 + int(backend.open().clock_resolution * 1_000_000)
    assert all(t is not None and t <= c + slack for t, c in zip(table.column(PRODUCER_TS).cast(pa.int64())
                                                              .to_pylist(), commit_us, strict=True))


def test_a_given_time_a_datetime_or_epoch_ms_or_a_column(tmp_path: object) -> None:
    backend = Backend(f"{tmp_path}/lake", {})
    make_topic(backend.open(), partitions=1)
    p = start(backend)
    when = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    per_row = [dt.datetime(2020, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i) for i in range(3)]
    with p.transaction():
        p.send("t", rows([0, 1], "dt"), timestamp=when)
        p.send("t", rows([2], "ms"), timestamp=1_700_000_000_123)
        data = pa.Table.from_pylist(rows(range(3, 6), "col")).append_column(
            "created", pa.array(per_row[:2] + [None], pa.timestamp("ms", tz="UTC")))
        before = now_us()
        p.send("t", data, timestamp="created")
        p.send("t", pa.table({"id": [6], "txn": ["int"], "at": [1_600_000_000_000]}), timestamp="at")
    table = read_snapshot(backend.open(), ["t"])["t"]
    times = producer_times(table)
    assert times[0] == times[1] == utc_us(when)
    assert times[2] == 1_700_000_000_123_000
    assert [times[3], times[4]] == [utc_us(t) for t in per_row[:2]]
    assert before <= times[5] <= now_us()  # type: ignore[operator] - a null in the column takes the send time
    assert times[6] == 1_600_000_000_000_000
    assert "created" not in table.column_names and "at" not in table.column_names


def test_a_topic_column_may_give_the_times_and_stays_data(tmp_path: object) -> None:
    backend = Backend(f"{tmp_path}/lake", {})
    store = backend.open()
    create_topic(store, "e", pa.schema([("id", pa.int64()), ("at", pa.timestamp("ms", tz="UTC"))]))
    p = start(backend)
    at = dt.datetime(2023, 3, 4, 5, 6, 7, tzinfo=UTC)
    with p.transaction():
        p.send("e", [{"id": 1, "at": at}], timestamp="at")
    table = read_snapshot(store, ["e"])["e"]
    assert table.column("at").to_pylist() == [at] and producer_times(table) == {1: utc_us(at)}


@pytest.mark.parametrize(("data", "timestamp", "match"), [
    (rows([0], "x"), dt.datetime(2024, 1, 1), "no time zone"),
    (rows([0], "x"), "missing", "not a column"),
    ([{"id": 0, "txn": "x", "when": "yesterday"}], "when", "not a timestamp"),
    (rows([0], "x"), 1.5, "must be a datetime"),
])
def test_bad_times_are_refused(tmp_path: object, data: object, timestamp: object, match: str) -> None:
    backend = Backend(f"{tmp_path}/lake", {})
    make_topic(backend.open(), partitions=1)
    p = start(backend)
    with p.transaction():
        with pytest.raises(InvalidOptionError, match=match):
            p.send("t", data, timestamp=timestamp)  # type: ignore[arg-type]
        p.send("t", rows([1], "ok"))
    assert read_snapshot(backend.open(), ["t"])["t"].column("id").to_pylist() == [1]


def commit_old_segment(backend: Backend, ids: range, partition: int = 0) -> None:
    """Commit rows as a segment written before producer times existed (no reserved column)."""
    store = backend.open()
    coord = TransactionCoordinator(store)
    ident = coord.init_producer(f"old-{ids.start}")
    seg = stage_segment(store, "t", partition, pa.Table.from_pylist(rows(ids, "old"), schema=SCHEMA),
                        f"{ident.txn_id(0)}~0", seq=0)
    coord.commit(ident, ident.txn_id(0), [seg])
    assert PRODUCER_TS not in pq.read_schema(pa.BufferReader(store.get(seg.path))).names


def test_old_segments_read_as_null_and_compaction_keeps_the_times(backend: Backend) -> None:
    old_and_new_then_compact(backend, "parquet")


def test_arrow_segments_keep_the_times_too(tmp_path: object) -> None:
    old_and_new_then_compact(Backend(f"{tmp_path}/lake", {}), "arrow")


def old_and_new_then_compact(backend: Backend, fmt: str) -> None:
    make_topic(backend.open(), partitions=1)
    commit_old_segment(backend, range(0, 3))
    p = start(backend, segment_format=fmt)
    for i in range(3, 6):
        with p.transaction():
            p.send("t", rows([i], "new"), timestamp=1_000 * i)
    before = read_snapshot(backend.open(), ["t"])["t"]
    assert producer_times(before) == {0: None, 1: None, 2: None, 3: 3_000_000, 4: 4_000_000, 5: 5_000_000}
    with Consumer(backend.open()) as consumer:
        consumer.assign([("t", 0)])
        polled = consumer.poll()
    assert producer_times(polled) == producer_times(before)
    report = compact_partition(backend.coordinator(), "t", 0, fmt=fmt)
    assert report.segments_after == 1 < report.segments_before
    after = read_snapshot(backend.open(), ["t"])["t"]
    assert after.equals(before)


def test_uncommitted_rows_carry_their_producer_time(tmp_path: object) -> None:
    backend = Backend(f"{tmp_path}/lake", {})
    make_topic(backend.open(), partitions=1)
    p = start(backend)
    p.begin_transaction()
    p.send("t", rows([7], "open"), timestamp=42)
    p.flush()
    with Consumer(backend.open(), isolation_level="read_uncommitted") as consumer:
        consumer.assign([("t", 0)])
        got = consumer.poll()
    assert got.column("_offset").to_pylist() == [None] and producer_times(got) == {7: 42_000}
    p.abort_transaction()
