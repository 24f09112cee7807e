"""G1, G4, G5: a crash before and after every store write of the protocol, then a new process resumes.

Every run reaches exactly one outcome for the crashed transaction (all of it visible, or none), nothing
committed earlier is lost, nothing is duplicated, offsets stay dense. The transaction is committed exactly when
the crash came after its commit point (the transaction log entry that decides it) was durable.
"""

from __future__ import annotations

import time

import pytest

from coordinator import Producer, TransactionCoordinator, faults
from coordinator.faults import InjectedCrash
from core_helpers import Backend, committed_ids, duplicates, make_topic, rows

# (point, which occurrence during the commit of the second transaction, committed after recovery?)
COMMIT_POINTS = [
    ("open.before", 1, False),
    ("open.after", 1, False),
    ("segment.before", 1, False),
    ("segment.after", 2, False),
    ("txnlog.entry.before", 1, False),
    ("txnlog.entry.after", 1, True),
    ("record.before", 1, True),
    ("record.after", 1, True),
    ("record.before", 2, True),
    ("record.after", 3, True),
    ("partition.checkpoint.before", 1, True),
    ("partition.checkpoint.after", 1, True),
    ("txnlog.checkpoint.before", 1, True),
    ("txnlog.checkpoint.after", 1, True),
]


def crash_at(point: str, occurrence: int):  # type: ignore[no-untyped-def]
    seen = {"n": 0}

    def injector(name: str) -> None:
        if name == point:
            seen["n"] += 1
            if seen["n"] == occurrence:
                raise InjectedCrash(f"{point}#{occurrence}")

    return injector, seen


@pytest.mark.parametrize("resumer", ["same-tid", "reader"])
@pytest.mark.parametrize(("point", "occurrence", "committed"), COMMIT_POINTS,
                         ids=[f"{p}#{k}" for p, k, _ in COMMIT_POINTS])
def test_crash_during_commit_resolves_to_one_outcome(
    backend: Backend, point: str, occurrence: int, committed: bool, resumer: str
) -> None:
    store = backend.open()
    make_topic(store)
    # Checkpoint intervals chosen so the crashed commit (log entry 2, record 1 of each partition) writes both a
    # coordinator checkpoint and partition checkpoints.
    coord = TransactionCoordinator(store, checkpoint_interval=3, partition_checkpoint_interval=2)
    p1 = Producer(store, "etl", coordinator=coord)
    p1.init_transactions()
    with p1.transaction():
        p1.send("t", rows(range(0, 30), "first"), key="id")

    injector, seen = crash_at(point, occurrence)
    p1.begin_transaction()
    p1.send("t", rows(range(100, 160), "second"), key="id")
    with faults.injected(injector), pytest.raises(InjectedCrash):
        p1.flush()
        p1.commit_transaction()
        coord.log.flush()  # checkpoints are written in the background: a crash there surfaces here
    assert seen["n"] >= occurrence, f"crash point {point} was never reached"

    # A new process resumes: either the same transactional id re-initialises, or a reader takes a snapshot.
    if resumer == "same-tid":
        p2 = Producer(backend.open(), "etl")
        p2.init_transactions()
        with p2.transaction():
            p2.send("t", rows(range(200, 210), "third"), key="id")
    ids = committed_ids(backend)
    assert not duplicates(ids)
    expected = set(range(0, 30)) | (set(range(100, 160)) if committed else set())
    if resumer == "same-tid":
        expected |= set(range(200, 210))
    assert set(ids) == expected
    # A second fresh process sees the very same thing (the outcome is durable, not a view of one process).
    assert committed_ids(backend) == ids


def test_a_failed_first_segment_leaves_no_request_of_the_producer_running(backend: Backend) -> None:
    """The first segment of a transaction is written while the coordinator is asked, concurrently, whether the
    producer is current and to record the open transaction: when writing the segment fails, both requests have
    ended by the time the error reaches the caller (a crash leaves nothing running behind it)."""
    store = backend.open()
    make_topic(store)
    p = Producer(store, "etl")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows(range(10), "first"), key="id")
    seen: list[str] = []

    def injector(name: str) -> None:
        if name == "open.before":
            time.sleep(0.3)  # the open record takes its time
        seen.append(name)
        if name == "segment.before":
            raise InjectedCrash(name)

    with faults.injected(injector), pytest.raises(InjectedCrash):
        p.flush()
    assert "segment.before" in seen and "open.after" in seen, seen


CONTROL_POINTS = [
    ("txnlog.entry.before", False),
    ("txnlog.entry.after", False),
]


@pytest.mark.parametrize(("point", "_unused"), CONTROL_POINTS, ids=[p for p, _ in CONTROL_POINTS])
def test_crash_during_abort_or_fencing_init(backend: Backend, point: str, _unused: bool) -> None:
    store = backend.open()
    make_topic(store)
    p1 = Producer(store, "etl")
    p1.init_transactions()
    p1.begin_transaction()
    p1.send("t", rows(range(10), "doomed"))
    p1.flush()
    injector, seen = crash_at(point, 1)
    with faults.injected(injector), pytest.raises(InjectedCrash):
        p1.abort_transaction()
    assert seen["n"] == 1
    # The next epoch finishes the abort, fences the old producer, and works normally.
    p2 = Producer(backend.open(), "etl")
    p2.init_transactions()
    with p2.transaction():
        p2.send("t", rows(range(50, 55), "ok"))
    assert committed_ids(backend) == list(range(50, 55))

    # Crash inside a fencing init (which fences an open transaction), then init again.
    p2.begin_transaction()
    p2.send("t", rows(range(60, 65), "doomed2"))
    p2.flush()
    injector, seen = crash_at(point, 1)
    with faults.injected(injector), pytest.raises(InjectedCrash):
        Producer(backend.open(), "etl").init_transactions()
    p4 = Producer(backend.open(), "etl")
    p4.init_transactions()
    with p4.transaction():
        p4.send("t", rows(range(70, 72), "after"))
    assert committed_ids(backend) == list(range(50, 55)) + [70, 71]
