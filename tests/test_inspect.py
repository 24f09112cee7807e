"""The read-only inspection helpers (``coordinator.inspect``) on real stores (memory and a local folder), with data
made by the real producer: a committed transaction with group offsets, an aborted one, an in-doubt prepared commit
left by a crash, and a hung ongoing transaction. ``build_lake`` is shared with ``test_cli.py``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from coordinator import (
    MemoryStore,
    Producer,
    ProducerConfig,
    Store,
    TransactionCoordinator,
    create_topic,
    faults,
    open_store,
    read_snapshot,
)
from coordinator import inspect as ti
from coordinator.faults import InjectedCrash
from coordinator.layout import marker_dir, marker_path, txn_log_path
from coordinator.partitioner import LEGACY
from coordinator.records import TxnState

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
TOPIC = "orders"
GROUP = "billing"


@dataclass
class Lake:
    """A store with a known history (see the module docstring)."""

    url: str
    options: dict[str, str]
    committed: list[int]
    aborted: list[int]
    in_doubt_ids: list[int]
    in_doubt_txn: str
    hung: Producer
    hung_txn: str
    group_offsets: dict[int, int]

    def open(self) -> Store:
        return open_store(self.url, self.options)


def _crash_at_marker(name: str) -> None:
    if name == "marker.before":
        raise InjectedCrash(name)


def build_lake(url: str, options: dict[str, str] | None = None, *, hung_timeout_ms: int = 60_000) -> Lake:
    """Fill the store at ``url``: topic ``orders`` (2 partitions); producer ``etl`` commits ids 0-9 with offsets
    for group ``billing`` and aborts id 99; producer ``crashy`` dies at its first marker write after the commit
    point (id 50, in doubt); producer ``hung`` stages id 77 and never finishes."""
    opts = dict(options or {})
    store = open_store(url, opts)
    # the legacy key placement, which the offsets the inspection tests expect were worked out for
    create_topic(store, TOPIC, SCHEMA, 2, {"partitioner": LEGACY})
    etl = Producer(store, "etl")
    etl.init_transactions()
    with etl.transaction():
        etl.send(TOPIC, [{"id": i, "name": f"n{i}"} for i in range(10)], key="id")
        etl.send_offsets_to_transaction({TOPIC: {0: 2}}, group_id=GROUP)
    etl.begin_transaction()
    etl.send(TOPIC, [{"id": 99, "name": "aborted"}], partition=0)
    etl.flush()
    etl.abort_transaction()
    crashy = Producer(store, "crashy")
    crashy.init_transactions()
    txn = crashy.begin_transaction()
    crashy.send(TOPIC, [{"id": 50, "name": "in-doubt"}], partition=1)
    with pytest.raises(InjectedCrash), faults.injected(_crash_at_marker):
        crashy.commit_transaction()
    hung = Producer(open_store(url, opts), "hung", config=ProducerConfig(transaction_timeout_ms=hung_timeout_ms))
    hung.init_transactions()
    hung_txn = hung.begin_transaction()
    hung.send(TOPIC, [{"id": 77, "name": "hung"}], partition=0)
    hung.flush()
    return Lake(url, opts, list(range(10)), [99], [50], txn, hung, hung_txn, {0: 2})


def committed_ids(store: Store) -> list[int]:
    """Committed ids, read by a plain reader (which rolls forward prepared commits)."""
    return sorted(read_snapshot(store, [TOPIC])[TOPIC].column("id").to_pylist())


@pytest.fixture(params=["memory", "local"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lake]:
    if request.param == "memory":
        url = f"memory://inspect-{uuid.uuid4().hex}"
        try:
            yield build_lake(url)
        finally:
            MemoryStore.drop(url)
    else:
        yield build_lake(str(tmp_path / "lake"))


def test_topics_and_describe_count_committed_data_only(lake: Lake) -> None:
    store = lake.open()
    [row] = ti.topics(store)
    assert row["name"] == TOPIC and row["partitions"] == 2
    assert row["records"] == len(lake.committed)  # neither the aborted, the in-doubt nor the hung record
    coord = TransactionCoordinator(store)
    ends = {p: coord.partition(TOPIC, p).end_offset for p in range(2)}
    assert row["end_offsets"] == ends and sum(ends.values()) == 10
    assert row["start_offsets"] == {0: 0, 1: 0}
    d = ti.describe_topic(store, TOPIC)
    assert [f["name"] for f in d["fields"]] == ["id", "name"]
    assert d["bytes"] == sum(s.size for p in range(2) for s in coord.partition(TOPIC, p).segments) > 0
    staged = {p["partition"]: p["staged_files"] for p in d["partition_info"]}
    assert staged == {0: 2, 1: 1}  # aborted + hung in 0, in-doubt in 1
    frame = ti.frame(ti.topics(store))
    assert list(frame["name"]) == [TOPIC]


def test_inspection_writes_nothing(lake: Lake) -> None:
    store = lake.open()
    before = [(o.path, o.size) for o in store.list_info("")]
    ti.topics(store)
    ti.transactions(store)
    ti.lag(store)
    ti.verify(store)
    ti.dump(store, TOPIC)
    assert [(o.path, o.size) for o in store.list_info("")] == before
    assert ti.transactions(store)["in_doubt"][0]["txn"] == lake.in_doubt_txn


def test_transactions_reports_open_in_doubt_and_recent(lake: Lake) -> None:
    store = lake.open()
    d = ti.transactions(store)
    by_tid = {p["tid"]: p for p in d["producers"]}
    assert by_tid["crashy"]["state"] == TxnState.PREPARE_COMMIT.value and by_tid["crashy"]["in_doubt"]
    assert by_tid["hung"]["state"] == TxnState.ONGOING.value and by_tid["hung"]["txn"] == lake.hung_txn
    assert not by_tid["hung"]["timed_out"] and by_tid["hung"]["age_ms"] >= 0
    assert [p["tid"] for p in d["open"]] == ["hung"]
    [doubt] = d["in_doubt"]
    assert doubt["txn"] == lake.in_doubt_txn and doubt["records"] == 1 and doubt["partitions"] == [f"{TOPIC}/1"]
    outcomes = [(r["tid"], r["outcome"]) for r in d["recent"]]
    assert outcomes == [("etl", "aborted"), ("etl", "committed")]  # newest first
    assert d["recent"][1]["records"] == 10
    assert ti.recent_transactions(store, limit=1)[0]["outcome"] == "aborted"
    assert ti.recent_transactions(store, limit=0) == [] and ti.log_tail(store, 0) == []
    assert [e.seq for e in ti.log_tail(store, 2)] == [d["log_seq"] - 1, d["log_seq"]]


def test_find_transaction_follows_the_durable_record(lake: Lake) -> None:
    store = lake.open()
    assert ti.find_transaction(store, lake.in_doubt_txn)["status"] == "in_doubt_commit"  # type: ignore[index]
    assert ti.find_transaction(store, lake.hung_txn)["status"] == "ongoing"  # type: ignore[index]
    assert ti.find_transaction(store, "9.9.nope") is None
    TransactionCoordinator(store).complete_pending()
    assert ti.find_transaction(store, lake.in_doubt_txn)["status"] == "committed"  # type: ignore[index]
    assert committed_ids(store) == sorted(lake.committed + lake.in_doubt_ids)


def test_lag_and_groups(lake: Lake) -> None:
    store = lake.open()
    coord = TransactionCoordinator(store)
    ends = {p: coord.partition(TOPIC, p).end_offset for p in range(2)}
    rows = ti.lag(store, GROUP)
    assert [(r["partition"], r["committed"], r["end_offset"], r["lag"]) for r in rows] == [
        (0, 2, ends[0], ends[0] - 2), (1, None, ends[1], ends[1])]
    [g] = ti.groups(store)
    assert g == {"group": GROUP, "topics": [TOPIC], "partitions": 1, "lag": ends[0] - 2 + ends[1]}
    with pytest.raises(ti.GroupNotFoundError):
        ti.lag(store, "nobody")


def test_dump_ranges_and_limits(lake: Lake) -> None:
    store = lake.open()
    everything = ti.dump(store, TOPIC)
    assert sorted(everything.column("id").to_pylist()) == lake.committed
    assert "_topic" not in everything.column_names and "_offset" in everything.column_names
    p0 = ti.dump(store, TOPIC, partition=0, start=1, end=3)
    assert p0.column("_offset").to_pylist() == [1, 2]
    assert set(p0.column("_partition").to_pylist()) == {0}
    assert ti.dump(store, TOPIC, limit=3).num_rows == 3
    assert ti.dump(store, TOPIC, start=10_000).num_rows == 0
    with pytest.raises(ti.InvalidOptionError):
        ti.dump(store, TOPIC, partition=5)


def test_verify_clean_store_has_no_problems(lake: Lake) -> None:
    seen: list[int] = []
    totals: list[int] = []
    assert ti.verify(lake.open(), progress=seen.append, total=totals.append) == []
    assert totals == [2] and sum(seen) == 2  # one committed segment per partition


def _first_segment(store: Store, partition: int = 0) -> str:
    return TransactionCoordinator(store).partition(TOPIC, partition).segments[0].path


@pytest.mark.parametrize("damage, kind", [
    (lambda b: b[: len(b) // 2], "truncated"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), "checksum"),
    (None, "missing"),
])
def test_verify_names_each_damaged_segment(lake: Lake, damage: object, kind: str) -> None:
    store = lake.open()
    path = _first_segment(store)
    if damage is None:
        store.delete(path)
    else:
        store.put(path, damage(store.get(path)))  # type: ignore[operator]
    problems = ti.verify(store)
    assert [(p.path, p.kind) for p in problems] == [(path, kind)]
    assert path in problems[0].message


def test_verify_finds_corrupt_marker_log_entry_topic_meta_and_gaps(lake: Lake) -> None:
    store = lake.open()
    TransactionCoordinator(store).complete_pending()  # partition 1 now has two markers
    m0 = marker_path(TOPIC, 0, 0)
    store.put(m0, b"{not json")
    store.delete(marker_path(TOPIC, 1, 0))
    store.put(txn_log_path(2), b"[]")
    meta = f"topics/{TOPIC}/meta/00000000.json"
    good_meta = store.get(meta)
    problems = {(p.path, p.kind) for p in ti.verify(store)}
    assert (m0, "corrupt") in problems
    assert (marker_path(TOPIC, 1, 1), "gap") in problems
    assert (txn_log_path(2), "corrupt") in problems
    store.put(meta, good_meta[:10])
    assert (meta, "corrupt") in {(p.path, p.kind) for p in ti.verify(store)}


def test_verify_follows_compaction_retention_and_gc(lake: Lake) -> None:
    from coordinator.maintenance import apply_retention, compact_partition, gc_partition

    store = lake.open()
    etl = Producer(store, "etl")
    etl.init_transactions()
    for i in range(3):
        with etl.transaction():
            etl.send(TOPIC, [{"id": 100 + i, "name": "more"}], partition=0)
    coord = TransactionCoordinator(store)
    before = [s.path for s in coord.partition(TOPIC, 0).segments]
    compact_partition(coord, TOPIC, 0)
    with etl.transaction():
        etl.send(TOPIC, [{"id": 200, "name": "after"}], partition=0)
    newest = TransactionCoordinator(store).partition(TOPIC, 0).segments[-1]
    apply_retention(coord, TOPIC, 0, retention_bytes=newest.size)
    gc_partition(coord, TOPIC, 0, grace_ms=0, now=ti.now_ms() + 1000)
    plog = TransactionCoordinator(store).partition(TOPIC, 0)
    assert [s.path for s in plog.segments] == [newest.path] and plog.start_offset > 0
    kinds = [json.loads(store.get(f"{marker_dir(TOPIC, 0)}/{n}"))["type"] for n in store.list(marker_dir(TOPIC, 0))]
    assert "REPLACE" in kinds and "RETAIN" in kinds
    assert not any(store.exists(p) for p in before if p not in {s.path for s in plog.segments})
    assert ti.verify(store) == []
    live = plog.segments[-1].path
    store.put(live, store.get(live)[:-3])
    assert [(p.path, p.kind) for p in ti.verify(store)] == [(live, "truncated")]
