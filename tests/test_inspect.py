"""The read-only inspection helpers (``coordinator.inspect``) on real stores (memory and a local folder), with data
made by the real producer (see ``cli_lake.py``): a commit with group offsets, an abort, a commit whose partition
record a crash left unwritten, and a hung open transaction."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_lake import GROUP, TOPIC, Lake, build_lake
from coordinator import (
    MemoryStore,
    NoStoreError,
    Producer,
    Store,
    TransactionCoordinator,
    UnsupportedFormatError,
    open_store,
)
from coordinator import inspect as ti
from coordinator.layout import FORMAT_PATH, marker_path, txn_log_path
from coordinator.maintenance import apply_retention, compact_partition, gc_partition


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


def snapshot_of(store: Store) -> list[tuple[str, int]]:
    return [(o.path, o.size) for o in store.list_info("")]


def test_topics_and_describe_count_committed_data_only(lake: Lake) -> None:
    store = lake.open()
    [row] = ti.topics(store)
    assert row["name"] == TOPIC and row["partitions"] == 2 and row["damaged"] is None
    assert row["records"] == len(lake.committed)  # neither the aborted nor the hung record
    assert row["created"] is not None and row["created"].year >= 2024  # created through the API: the store's time
    coord = TransactionCoordinator(store)
    assert row["bytes"] == sum(s.size for p in range(2) for s in coord.partition(TOPIC, p).segments) > 0
    d = ti.describe_topic(store, TOPIC)
    assert [f["name"] for f in d["fields"]] == ["id", "name"] and d["damaged"] is None
    by_p = {p["partition"]: p for p in d["partition_info"]}
    assert {p: r["staged_files"] for p, r in by_p.items()} == {0: 2, 1: 0}  # the aborted and the hung file
    assert sum(r["records"] for r in by_p.values()) == 11 and by_p[1]["last_commit"].tzinfo is not None
    assert [(r["topic"], r["partition"]) for r in ti.partitions(store)] == [(TOPIC, 0), (TOPIC, 1)]
    segs = ti.segments(store, TOPIC)
    assert sum(s["records"] for s in segs) == 11 and all(not s["compacted"] for s in segs)


def test_inspection_writes_nothing(lake: Lake) -> None:
    store = lake.open()
    before = snapshot_of(store)
    ti.require_store(store)
    ti.topics(store)
    ti.describe_topic(store, TOPIC)
    ti.partitions(store)
    ti.segments(store)
    ti.transactions(store)
    ti.history(store)
    ti.lag(store)
    ti.lag_history(store)
    ti.find_transaction(store, lake.hung_txn)
    ti.find_transaction(store, lake.aborted_txn)
    report = ti.verify(store)
    ti.repair_plan(store)
    ti.dump(store, TOPIC)
    assert snapshot_of(store) == before
    assert report == [] and len(report.pending) == 1  # crashy's record: computed by readers, written by nobody


def test_require_store_refuses_what_is_not_a_store(tmp_path: Path) -> None:
    empty = open_store(str(tmp_path / "typo"), probe=False)
    with pytest.raises(NoStoreError, match="no txnlog store at"):
        ti.require_store(empty)
    assert not (tmp_path / "typo").exists()
    other = open_store(str(tmp_path / "old"), probe=False)
    other.put(FORMAT_PATH, b'{"format": 1}')
    with pytest.raises(UnsupportedFormatError, match="format 1"):
        ti.require_store(other)


def test_transactions_report_producers_open_and_recent_decisions(lake: Lake) -> None:
    store = lake.open()
    d = ti.transactions(store)
    by_tid = {p["tid"]: p for p in d["producers"]}
    assert by_tid["hung"]["state"] == ti.ONGOING and by_tid["hung"]["open_txn"] == lake.hung_txn
    assert by_tid["etl"]["state"] == ti.ABORTED and by_tid["etl"]["last_state"] == ti.ABORTED
    assert by_tid["crashy"]["state"] == ti.COMMITTED and by_tid["crashy"]["open_txn"] is None
    [hung] = d["open"]
    assert (hung["txn"], hung["tid"], hung["state"], hung["timed_out"]) == (lake.hung_txn, "hung", ti.ONGOING, False)
    assert hung["partitions"] == [f"{TOPIC}/0"] and hung["records"] == 1 and hung["bytes"] > 0
    assert hung["age_ms"] >= 0 and hung["started"].tzinfo is not None
    recent = [(r["txn"], r["tid"], r["state"]) for r in d["recent"]]
    assert recent == [(lake.crashy_txn, "crashy", ti.COMMITTED), (lake.aborted_txn, "etl", ti.ABORTED),
                      ("p.0.0.0", "etl", ti.COMMITTED)]  # newest first
    crashy, aborted, first = d["recent"]
    assert first["records"] == 10 and first["groups"] == [GROUP] and first["reason"] is None
    assert first["partitions"] == [f"{TOPIC}/0", f"{TOPIC}/1"]
    # What an aborted transaction touched is recorded with the decision (the producer says what it staged).
    assert aborted["partitions"] == [f"{TOPIC}/0"] and aborted["records"] == 1
    assert aborted["reason"] == "aborted by producer"
    assert crashy["partitions"] == [f"{TOPIC}/1"] and crashy["records"] == 1
    assert ti.recent_transactions(store, limit=1)[0]["txn"] == lake.crashy_txn
    assert ti.recent_transactions(store, limit=0) == [] and ti.log_tail(store, 0) == []
    assert [e.seq for e in ti.log_tail(store, 2)] == [d["log_seq"] - 1, d["log_seq"]]
    # Once GC has deleted the aborted transaction's files, what it touched is still known from the log.
    coord = TransactionCoordinator(store)
    gc_partition(coord, TOPIC, 0, grace_ms=0, now=(store.now() + 3600) * 1000)
    again = {r["txn"]: r for r in ti.transactions(store)["recent"]}
    assert again[lake.aborted_txn]["partitions"] == [f"{TOPIC}/0"] and again[lake.aborted_txn]["records"] == 1


def test_find_transaction_follows_the_durable_record(lake: Lake) -> None:
    store = lake.open()
    committed = ti.find_transaction(store, lake.crashy_txn)
    assert committed is not None and committed["state"] == ti.COMMITTED and committed["tid"] == "crashy"
    assert committed["records"] == 1 and committed["seq"] is not None and committed["time"] is not None
    aborted = ti.find_transaction(store, lake.aborted_txn)
    assert aborted is not None and aborted["state"] == ti.ABORTED and aborted["reason"] == "aborted by producer"
    assert aborted["partitions"] == [f"{TOPIC}/0"]
    hung = ti.find_transaction(store, lake.hung_txn)
    assert hung is not None and hung["state"] == ti.ONGOING and hung["records"] == 1
    assert ti.find_transaction(store, "p.2.0.5")["state"] == ti.UNKNOWN  # type: ignore[index] # never used
    assert ti.find_transaction(store, "9.9.nope") is None


def test_history_lists_every_decision_newest_first(lake: Lake) -> None:
    rows = ti.history(lake.open())
    assert [r["operation"] for r in rows] == ["INIT", "COMMIT", "INIT", "ABORT", "COMMIT", "INIT"]
    assert [r["seq"] for r in rows] == [5, 4, 3, 2, 1, 0]
    assert rows[4]["groups"] == [GROUP] and rows[4]["records"] == 10 and rows[3]["detail"] == "aborted by producer"
    assert ti.history(lake.open(), limit=1)[0]["seq"] == 5


def test_lag_groups_and_lag_over_time(lake: Lake) -> None:
    store = lake.open()
    state = TransactionCoordinator(store).log.refresh()
    ends = {p: state.partition(TOPIC, p).end for p in range(2)}
    rows = ti.lag(store, GROUP)
    assert [(r["partition"], r["committed"], r["end_offset"], r["lag"]) for r in rows] == [
        (0, 2, ends[0], ends[0] - 2), (1, None, ends[1], ends[1])]
    [g] = ti.groups(store)
    assert g == {"group": GROUP, "topics": [TOPIC], "partitions": 1, "lag": ends[0] - 2 + ends[1]}
    with pytest.raises(ti.GroupNotFoundError):
        ti.lag(store, "nobody")
    # Lag over time: after the first commit, then after crashy's commit grew partition 1, then after the group
    # caught up.
    TransactionCoordinator(store).commit_group_offsets(GROUP, {TOPIC: {0: ends[0], 1: ends[1]}})
    history = ti.lag_history(store, GROUP)
    totals: dict[int, int] = {}
    for r in history:
        totals[r["seq"]] = totals.get(r["seq"], 0) + r["lag"]
    seqs = sorted(totals)
    assert [totals[s] for s in seqs] == [ends[0] - 2 + ends[1] - 1, ends[0] - 2 + ends[1], 0]
    assert all(r["time"] is not None for r in history)


def test_dump_ranges_and_limits(lake: Lake) -> None:
    store = lake.open()
    everything = ti.dump(store, TOPIC)
    assert sorted(everything.column("id").to_pylist()) == lake.committed
    assert "_topic" not in everything.column_names and "_offset" in everything.column_names
    p0 = ti.dump(store, TOPIC, partition=0, start=1, end=3)
    assert p0.column("_offset").to_pylist() == [1, 2] and set(p0.column("_partition").to_pylist()) == {0}
    assert ti.dump(store, TOPIC, limit=3).num_rows == 3
    assert ti.dump(store, TOPIC, start=10_000).num_rows == 0
    totals: list[int] = []
    done: list[int] = []
    batches = list(ti.iter_dump(store, TOPIC, total=totals.append, progress=done.append))
    assert totals == [11] and sum(done) == sum(b.num_rows for b in batches) == 11  # counted in records
    with pytest.raises(ti.InvalidOptionError):
        ti.dump(store, TOPIC, partition=5)


def test_verify_clean_store_reports_pending_records_then_none_after_repair(lake: Lake) -> None:
    store = lake.open()
    seen: list[int] = []
    totals: list[int] = []
    report = ti.verify(store, progress=seen.append, total=totals.append)
    assert report == [] and totals == [3] and sum(seen) == 3 and report.segments_checked == 3
    pending = marker_path(TOPIC, 1, 1)
    assert report.pending == [pending]
    [plan] = ti.repair_plan(store)
    assert (plan.path, plan.kind) == (pending, "missing")
    TransactionCoordinator(store).repair_records(damaged=True)
    assert ti.verify(store).pending == [] and ti.repair_plan(store) == []


def test_a_missing_record_below_a_checkpoint_is_a_problem(lake: Lake) -> None:
    store = lake.open()
    TransactionCoordinator(store).log.write_checkpoint()  # writes the pending record, then checkpoints
    path = marker_path(TOPIC, 1, 1)
    store.delete(path)
    problems = ti.verify(store)
    assert [(p.path, p.kind) for p in problems] == [(path, "missing")] and "txnlog repair" in problems[0].message


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


def test_verify_finds_corrupt_records_log_entries_topic_meta_and_gaps(lake: Lake) -> None:
    store = lake.open()
    m0 = marker_path(TOPIC, 0, 0)
    good = store.get(m0)
    store.put(m0, b"{not json")
    store.put(txn_log_path(2), b"[]")
    meta = f"topics/{TOPIC}/meta/00000000.json"
    good_meta = store.get(meta)
    problems = {(p.path, p.kind) for p in ti.verify(store)}
    assert (m0, "corrupt") in problems and (txn_log_path(2), "corrupt") in problems
    store.put(m0, good)
    store.put(meta, good_meta[:10])
    assert (meta, "corrupt") in {(p.path, p.kind) for p in ti.verify(store)}
    store.put(meta, good_meta)
    store.delete(txn_log_path(3))
    assert (txn_log_path(4), "gap") in {(p.path, p.kind) for p in ti.verify(store)}


def test_a_damaged_partition_is_marked_and_the_others_still_show(lake: Lake) -> None:
    store = lake.open()
    coord = TransactionCoordinator(store)
    coord.log.write_checkpoint()  # below a checkpoint nobody recomputes records from the log
    store.put(marker_path(TOPIC, 0, 0), b"{not json")
    [row] = ti.topics(open_store(lake.url, lake.options))
    assert row["damaged"] and "partition 0" in row["damaged"] and marker_path(TOPIC, 0, 0) in row["damaged"]
    assert row["records"] == 11 and row["segments"] is None  # offsets from the log; the index is unreadable
    d = ti.describe_topic(open_store(lake.url, lake.options), TOPIC)
    p0, p1 = d["partition_info"]
    assert p0["damaged"] and p0["segments"] is None
    assert p1["damaged"] is None and p1["segments"] == 2 and p1["staged_files"] == 0


def test_repair_plan_names_damaged_records(lake: Lake) -> None:
    store = lake.open()
    TransactionCoordinator(store).repair_records()
    path = marker_path(TOPIC, 0, 0)
    store.put(path, b'{"v": 2, "ops": []}')
    [plan] = ti.repair_plan(store)
    assert (plan.path, plan.kind) == (path, "differs") and plan.data != store.get(path)
    assert json.loads(plan.data)["topic"] == TOPIC


def test_verify_follows_compaction_retention_and_gc(lake: Lake) -> None:
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
    gc_partition(coord, TOPIC, 0, grace_ms=0, now=(store.now() + 1000) * 1000)
    plog = TransactionCoordinator(store).partition(TOPIC, 0)
    assert [s.path for s in plog.segments] == [newest.path] and plog.start_offset > 0
    assert not any(store.exists(p) for p in before if p not in {s.path for s in plog.segments})
    assert ti.verify(store) == []
    assert any(r["operation"] == "COMPACT" for r in ti.history(store))
    assert any(r["operation"] == "RETENTION" for r in ti.history(store))
    live = plog.segments[-1].path
    store.put(live, store.get(live)[:-3])
    assert [(p.path, p.kind) for p in ti.verify(store)] == [(live, "truncated")]
