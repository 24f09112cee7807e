"""Compaction, retention and GC keep offsets, commit times and snapshots unchanged, and run safely beside writers
and readers."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from coordinator import OffsetOutOfRangeError, Producer, TransactionCoordinator, faults, read_snapshot
from coordinator.maintenance import apply_retention, compact_partition, gc_partition, maintain
from coordinator.topics import create_topic
from coordinator.txnlog import now_ms
from core_helpers import SCHEMA, Backend, committed_ids, make_topic, rows


def commit_small(backend: Backend, n: int, tid: str = "w", start: int = 0, partitions: int | None = None) -> None:
    p = Producer(backend.open(), tid)
    p.init_transactions()
    for i in range(start, start + n):
        with p.transaction():
            p.send("t", rows([i], f"c{i}"), partition=None if partitions is None else i % partitions)


def full_read(backend: Backend) -> pa.Table:
    return read_snapshot(backend.open(), ["t"])["t"].sort_by([("_partition", "ascending"), ("_offset", "ascending")])


def test_compaction_keeps_offsets_commit_times_and_snapshots(backend: Backend) -> None:
    make_topic(backend.open(), partitions=2)
    commit_small(backend, 40)
    coord = backend.coordinator()
    snap = coord.snapshot(["t"])
    commit_small(backend, 10, tid="later", start=100)
    before = full_read(backend)
    before_cut = read_snapshot(backend.open(), ["t"], snapshot=snap)["t"]
    report = compact_partition(coord, "t", 0)
    compact_partition(coord, "t", 1)
    assert report.merged_groups == 1 and report.segments_after == 1 < report.segments_before
    after = full_read(backend)
    assert after.equals(before)  # every column, _offset and per-record _timestamp included
    fresh = backend.coordinator()
    assert read_snapshot(backend.open(), ["t"], snapshot=snap, coordinator=fresh)["t"].sort_by(
        [("_partition", "ascending"), ("_offset", "ascending")]
    ).equals(before_cut.sort_by([("_partition", "ascending"), ("_offset", "ascending")]))
    assert len(set(after.column("_timestamp").to_pylist())) > 1


def test_compaction_racing_a_commit_retries_and_loses_nothing(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    commit_small(backend, 20)
    racer = Producer(backend.open(), "racer")
    racer.init_transactions()
    fired = {"n": 0}

    def commit_in_between(name: str) -> None:
        if name == "txnlog.entry.before" and fired["n"] == 0:
            fired["n"] += 1
            with faults.injected(lambda _n: None), racer.transaction():
                racer.send("t", rows([999], "race"))

    coord = backend.coordinator()
    with faults.injected(commit_in_between):
        report = compact_partition(coord, "t", 0)
    assert fired["n"] == 1 and report.merged_groups == 1
    assert committed_ids(backend) == list(range(20)) + [999]


def test_compaction_beside_concurrent_writers_and_readers(backend: Backend) -> None:
    make_topic(backend.open(), partitions=2)
    commit_small(backend, 10)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            commit_small(backend, 30, tid="bg", start=1000)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    coord = backend.coordinator()
    for _ in range(5):
        for p in range(2):
            compact_partition(coord, "t", p, target_bytes=10_000_000)
        committed_ids(backend)  # readers keep working (and check dense offsets)
    t.join()
    assert not errors
    assert committed_ids(backend) == list(range(10)) + list(range(1000, 1030))


def test_retention_by_size_and_time_moves_the_log_start(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=1)
    commit_small(backend, 10)
    coord = backend.coordinator()
    plog = coord.partition("t", 0)
    plog.refresh()
    seg_size = plog.segments[0].size
    apply_retention(coord, "t", 0, retention_bytes=seg_size * 4)
    assert plog.start_offset == 6 and plog.end_offset == 10
    assert committed_ids(backend) == [6, 7, 8, 9]
    with pytest.raises(OffsetOutOfRangeError, match=r"\[0, 3\).*outside \[6, 10\)"):
        backend.coordinator().partition("t", 0).slices(0, 3)
    last_ts = plog.segments[-1].ts
    # every segment younger than the retention (from the oldest one's commit time, however long the commits took)
    apply_retention(coord, "t", 0, retention_ms=1000, now=min(s.ts for s in plog.segments) + 500)
    assert plog.start_offset == 6
    apply_retention(coord, "t", 0, retention_ms=1000, now=last_ts + 5000)
    assert plog.start_offset == 10 and committed_ids(backend) == []
    commit_small(backend, 2, start=50)
    assert committed_ids(backend) == [50, 51]
    assert backend.coordinator().partition("t", 0).start_offset == 10


def test_gc_deletes_only_unreferenced_files_past_the_grace_period(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=1)
    commit_small(backend, 6)
    aborted = Producer(backend.open(), "ab")
    aborted.init_transactions()
    aborted.begin_transaction()
    aborted.send("t", rows([500], "aborted"))
    aborted.flush()
    aborted.abort_transaction()
    ongoing = Producer(backend.open(), "on")
    ongoing.init_transactions()
    ongoing.begin_transaction()
    ongoing.send("t", rows([600], "ongoing"))
    ongoing.flush()
    coord = backend.coordinator()
    compact_partition(coord, "t", 0)
    now = now_ms() + 10  # S3 keeps modification times to the second: compare with the clock, not with them
    # Inside the grace period nothing goes.
    assert gc_partition(coord, "t", 0, grace_ms=60_000, now=int(now)).deleted_files == []
    report = gc_partition(coord, "t", 0, grace_ms=0, now=int(now) + 1)
    deleted = set(report.deleted_files)
    assert len(deleted) == 7  # six replaced segments and the aborted one
    assert not any(p.rsplit("/", 1)[1].startswith("compacted-") for p in deleted)
    assert committed_ids(backend) == list(range(6))
    ongoing.commit_transaction()  # its staged file survived GC
    assert committed_ids(backend) == list(range(6)) + [600]


def _staged_at_commit_and_died(backend: Backend) -> tuple[Producer, str]:
    """Producer ``dies``: one transaction that staged its rows only when committing, its process gone before its
    commit reached the log (no entry, no intent, no open record); returns it and the transaction's staged file."""
    from coordinator.layout import TXN_INTENTS, TXN_OPEN, data_dir

    store = backend.open()
    p = Producer(store, "dies")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows([700, 701], "orphan"), partition=0)
    points: list[str] = []

    def dies(name: str) -> None:
        points.append(name)
        if name == "txnlog.entry.before":
            raise faults.InjectedCrash(name)

    with faults.injected(dies), pytest.raises(faults.InjectedCrash):
        p.commit_transaction()
    assert "open.before" not in points, "a transaction that staged only at commit wrote an open record"
    assert store.list(TXN_OPEN) == [] and store.list(TXN_INTENTS) == []
    assert p.identity is not None
    (staged,) = [n for n in store.list(data_dir("t", 0)) if n.startswith(p.identity.txn_id(0) + "~")]
    return p, f"{data_dir('t', 0)}/{staged}"


def test_gc_reaps_a_transaction_that_staged_at_commit_and_never_reached_the_log(backend: Backend) -> None:
    """Nothing but its staged file names such a transaction: GC aborts it through the log with an epoch bump once
    the file is older than the grace period and the producer's timeout, then deletes the file; the producer's late
    commit is refused, never committed naming the deleted file."""
    from coordinator import ProducerFencedError

    make_topic(backend.open(), partitions=1)
    commit_small(backend, 2)
    p, staged = _staged_at_commit_and_died(backend)
    coord = backend.coordinator()
    now = now_ms() + 10
    assert gc_partition(coord, "t", 0, grace_ms=0, now=int(now)).deleted_files == []  # within its timeout
    report = gc_partition(coord, "t", 0, grace_ms=0, now=int(now) + 5 * 60_000)
    assert report.deleted_files == [staged] and len(report.reaped) == 1
    with pytest.raises(ProducerFencedError):
        p.commit_transaction()
    assert committed_ids(backend) == [0, 1]


def test_gc_keeps_the_files_of_a_transaction_whose_commit_wins_the_race_with_its_reaping(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    p, staged = _staged_at_commit_and_died(backend)
    coord = backend.coordinator()
    fired: list[str] = []

    def commit_first(name: str) -> None:
        if name == "txnlog.entry.before" and not fired:
            fired.append(name)
            with faults.injected(None):
                p.commit_transaction()  # the producer was only slow: its commit reaches the log first

    with faults.injected(commit_first):
        report = gc_partition(coord, "t", 0, grace_ms=0, now=int(now_ms()) + 5 * 60_000)
    assert fired and report.deleted_files == [] and report.reaped == []
    assert staged in {f"{staged.rsplit('/', 1)[0]}/{n}" for n in backend.open().list(staged.rsplit("/", 1)[0])}
    assert committed_ids(backend) == [700, 701]


def test_a_refused_compaction_never_deletes_its_merged_file_and_gc_does_once_no_replace_can_publish_it(
        backend: Backend) -> None:
    """Found by the long histories (seed 477: "segment ...~merged.parquet named by a commit marker is missing"): a
    compaction told anything but "done" deleted its merged file, though an answer that is not "done" does not prove
    the replace unpublished (an entry it created before a pause may have published it). It never deletes it now: a
    refused compaction (retention moved the partition between its plan and its publish) leaves the file, unnamed,
    and GC deletes it only after ``MAX_PUBLISH_MS`` plus ``CLOCK_SKEW_MS``, whatever its grace."""
    from coordinator.decisions import MAX_PUBLISH_MS
    from coordinator.layout import data_dir
    from coordinator.maintenance.common import CLOCK_SKEW_MS

    store = backend.open()
    make_topic(store, partitions=1)
    commit_small(backend, 6)
    coord = backend.coordinator()

    def retention_meanwhile(name: str) -> None:
        if name == "maintenance.compaction.staged":
            with faults.injected(None):
                apply_retention(backend.coordinator(), "t", 0, retention_bytes=1)

    with faults.injected(retention_meanwhile):
        report = compact_partition(coord, "t", 0)
    assert report.merged_groups == 0
    merged = [n for n in store.list(data_dir("t", 0)) if "~merged" in n]
    assert len(merged) == 1, "the refused compaction's merged file is kept"
    now = now_ms() + 10
    assert gc_partition(coord, "t", 0, grace_ms=0, now=int(now)).deleted_files  # the retired segments go ...
    assert [n for n in store.list(data_dir("t", 0)) if "~merged" in n] == merged  # ... the merged file stays
    later = int(now) + MAX_PUBLISH_MS + CLOCK_SKEW_MS + 1000
    deleted = gc_partition(coord, "t", 0, grace_ms=0, now=later).deleted_files
    assert any("~merged" in p for p in deleted)
    assert not [n for n in store.list(data_dir("t", 0)) if "~merged" in n]


def test_maintenance_pass_and_checkpoint_make_opening_cheap(backend: Backend) -> None:
    store = backend.open()
    create_topic(store, "t", SCHEMA, 1, {"retention.bytes": str(10**9)})
    commit_small(backend, 150)
    coord = TransactionCoordinator(backend.open(), checkpoint_interval=100)
    maintain(coord, grace_ms=0, now=None)
    fresh = backend.open()
    plog = TransactionCoordinator(fresh).partition("t", 0)
    assert len(plog.segments) == 1 and plog.end_offset == 150
    assert fresh.counters.total() <= 12, fresh.counters.snapshot()
    assert committed_ids(backend) == list(range(150))


def test_consumer_below_the_log_start_fails_clearly_or_skips_when_asked(backend: Backend) -> None:
    from coordinator import Consumer

    make_topic(backend.open(), partitions=1)
    commit_small(backend, 10)
    strict = Consumer(backend.open())
    strict.assign([("t", 0)])
    lenient = Consumer(backend.open(), fail_on_data_loss=False)
    lenient.assign([("t", 0)])
    coord = backend.coordinator()
    plog = coord.partition("t", 0)
    plog.refresh()
    apply_retention(coord, "t", 0, retention_bytes=plog.segments[0].size * 3)
    with pytest.raises(OffsetOutOfRangeError, match="below the log start 7"):
        strict.poll()
    assert lenient.poll().column("id").to_pylist() == [7, 8, 9]



def test_gc_sweeps_native_write_staging_left_by_a_dead_driver(backend: Backend) -> None:
    from coordinator.layout import NATIVE_STAGING
    from coordinator.maintenance import sweep_native_staging

    store = backend.open()
    make_topic(store)
    commit_small(backend, 2)
    dead = [f"{NATIVE_STAGING}/dead/_SUCCESS", f"{NATIVE_STAGING}/dead/part-00000.parquet"]
    for path in dead:
        store.put(path, b"PAR1")
    assert sweep_native_staging(store).deleted_files == []  # younger than the default grace period
    time.sleep(2.5)
    live = [f"{NATIVE_STAGING}/live/part-00000.parquet"]
    store.put(live[0], b"PAR1")
    plan = sweep_native_staging(store, grace_ms=1500, dry_run=True)
    assert sorted(plan.deleted_files) == dead and plan.deleted_bytes == 8
    assert len(store.list_info(NATIVE_STAGING)) == 3  # a dry run deletes nothing
    report = maintain(backend.coordinator(), grace_ms=1500)  # the live folder may have aged past 1.5 s by now
    assert set(dead) <= {p for p in report.deleted_files if p.startswith(NATIVE_STAGING)}
    assert not {i.path for i in store.list_info(NATIVE_STAGING)} & set(dead)
    assert committed_ids(backend) == [0, 1]
