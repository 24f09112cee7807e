"""One host with a wrong clock: every time-based decision follows the store's clock (``coordinator.clock``).

A process's wall clock is made wrong for the project's code (:func:`host_clock_off`), hours or days ahead or behind,
while the store keeps its own clock (the backends are the store: their modules keep the true clock). Each test
names a decision: commit times, compaction's publish window, retention, expiry, the timeout sweep, GC.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cli_lake import build_lake, run_json
from coordinator import Producer, TransactionCoordinator, clock
from coordinator.clock import REFRESH_S, StoreClock, clock_of
from coordinator.errors import StoreError
from coordinator.layout import NATIVE_STAGING, data_dir, marker_dir
from coordinator.maintenance import apply_retention, compact_partition, gc_partition
from coordinator.maintenance.gc import sweep_native_staging
from coordinator.records import ReplaceItem
from coordinator.store import Store
from core_helpers import Backend, LostReplyStore, committed_ids, make_topic, rows

HOUR_S = 3600
DAY_S = 24 * HOUR_S
DAY_MS = DAY_S * 1000
#: How far a reading of the store's clock may be from it (S3 gives whole seconds).
TOLERANCE_MS = 5_000

_REAL_TIME = time


class _SkewedTime(ModuleType):
    """The ``time`` module with a wall clock ``offset`` seconds off (every other clock is the real one)."""

    def __init__(self, offset: float) -> None:
        super().__init__("time")
        self.offset = offset

    def time(self) -> float:
        return _REAL_TIME.time() + self.offset

    def time_ns(self) -> int:
        return _REAL_TIME.time_ns() + int(self.offset * 1e9)

    def __getattr__(self, name: str) -> Any:
        return getattr(_REAL_TIME, name)


@contextmanager
def host_clock_off(seconds: float) -> Iterator[None]:
    """This process's wall clock ``seconds`` off, as the project's code reads it (every module of ``coordinator``,
    ``txnsource`` and ``txnsink`` but the store backends, whose clock is the store's)."""
    skewed = _SkewedTime(seconds)
    patched: list[ModuleType] = []
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in ("coordinator", "txnsource", "txnsink") or name.startswith("coordinator.backends"):
            continue
        if getattr(module, "time", None) is _REAL_TIME:
            module.time = skewed  # type: ignore[attr-defined]
            patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            module.time = _REAL_TIME  # type: ignore[attr-defined]


def commit_small(store: Store, n: int, tid: str = "w", start: int = 0) -> None:
    p = Producer(store, tid)
    p.init_transactions()
    for i in range(start, start + n):
        with p.transaction():
            p.send("t", rows([i], f"c{i}"), partition=0)


def store_ms(store: Store) -> float:
    return store.now() * 1000


def replace_items(coord: TransactionCoordinator) -> list[ReplaceItem]:
    st = coord.log.refresh()
    first = max(0, coord.log.checkpoint_seq + 1)
    return [i for s in range(first, st.seq + 1) for i in coord.log.entry(s).items if isinstance(i, ReplaceItem)]


# -- commit times -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("skew", [2 * DAY_S, -2 * DAY_S, 3 * HOUR_S])
def test_entry_times_follow_the_store_clock_whatever_the_committers_clock(backend: Backend, skew: int) -> None:
    make_topic(backend.open(), partitions=1)
    with host_clock_off(skew):
        commit_small(backend.open(), 3)
    store = backend.open()
    coord = TransactionCoordinator(store)
    st = coord.log.refresh()
    times = [coord.log.entry(s).ts for s in range(st.seq + 1)]
    assert times == sorted(times)  # monotonic in the log
    assert all(abs(t - store_ms(store)) < TOLERANCE_MS for t in times), (times, store_ms(store))
    # A committer with a true clock afterwards is not held back by its predecessor's clock.
    commit_small(backend.open(), 1, tid="true", start=10)
    assert abs(coord.log.refresh().ts - store_ms(store)) < TOLERANCE_MS


def test_the_store_clock_is_read_once_per_process_not_once_per_commit(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    store = backend.open()
    clock.forget()
    commit_small(store, 10)
    reading = clock_of(store)
    assert reading.readings == 1
    commit_small(backend.open(), 5, tid="other", start=20)  # another Store object of the same store
    commit_small(store, 5, tid="w2", start=30)
    assert reading.readings == 1


# -- compaction's publish window ----------------------------------------------------------------------------------


def test_a_committer_clock_days_ahead_does_not_get_compaction_refused(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    with host_clock_off(2 * DAY_S):
        commit_small(backend.open(), 4)
    coord = backend.coordinator()
    report = compact_partition(coord, "t", 0)
    assert report.merged_groups == 1 and report.segments_after == 1
    assert committed_ids(backend) == [0, 1, 2, 3]


@pytest.mark.parametrize("skew", [-2 * HOUR_S, DAY_S])
def test_a_compactor_clock_off_stamps_its_merged_file_on_the_store_clock(backend: Backend, skew: int) -> None:
    make_topic(backend.open(), partitions=1)
    commit_small(backend.open(), 4)
    coord = backend.coordinator()
    with host_clock_off(skew):
        report = compact_partition(coord, "t", 0)
    assert report.merged_groups == 1
    (item,) = replace_items(coord)
    (merged,) = [i for i in backend.open().list_info(data_dir("t", 0)) if i.path == item.segment.path]
    # GC deletes an unpublished merged file by its age on the store's clock: staged_at must be on that clock.
    assert abs(item.staged_at - merged.mtime * 1000) < TOLERANCE_MS
    assert committed_ids(backend) == [0, 1, 2, 3]


# -- retention ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("who", "skew", "retention_days"), [("maintenance", 8 * DAY_S, 7),
                                                              ("committer", -2 * DAY_S, 1)])
def test_retention_deletes_nothing_early_whatever_the_clocks(backend: Backend, who: str, skew: int,
                                                              retention_days: int) -> None:
    make_topic(backend.open(), partitions=1)
    with host_clock_off(skew if who == "committer" else 0):
        commit_small(backend.open(), 3)
    coord = backend.coordinator()
    with host_clock_off(skew if who == "maintenance" else 0):
        report = apply_retention(coord, "t", 0, retention_ms=retention_days * DAY_MS)
    assert report.retained_records == 0
    assert committed_ids(backend) == [0, 1, 2]
    # judged on the store's clock, retention still applies once the data is that old
    later = apply_retention(coord, "t", 0, retention_ms=retention_days * DAY_MS,
                            now=int(store_ms(backend.open())) + (retention_days + 1) * DAY_MS)
    assert later.retained_records == 3


# -- expiry -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("who", "skew"), [("sweeper", 8 * DAY_S), ("producer", -8 * DAY_S)])
def test_expiry_fences_no_active_producer_whatever_the_clocks(backend: Backend, who: str, skew: int) -> None:
    make_topic(backend.open(), partitions=1)
    p = Producer(backend.open(), "active")
    with host_clock_off(skew if who == "producer" else 0):
        p.init_transactions()
        with p.transaction():
            p.send("t", rows([1], "a"), partition=0)
    sweeper = backend.coordinator()
    with host_clock_off(skew if who == "sweeper" else 0):
        assert sweeper.expire_transactional_ids() == []
    with p.transaction():  # not fenced
        p.send("t", rows([2], "b"), partition=0)
    assert committed_ids(backend) == [1, 2]


def test_expire_dry_run_judges_idleness_on_the_store_clock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = build_lake(str(tmp_path / "lake"))
    with host_clock_off(8 * DAY_S):
        d = run_json(capsys, "--store", lake.url, "expire", "--dry-run")
    assert d["dry_run"] is True and d["expired"] == []


# -- the timeout sweep --------------------------------------------------------------------------------------------


def test_timeout_sweep_aborts_no_live_transaction_early_whatever_the_sweepers_clock(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    p = Producer(backend.open(), "live")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows([1], "live"), partition=0)
    p.flush()
    with host_clock_off(DAY_S):
        assert backend.coordinator().abort_timed_out() == []
    p.commit_transaction()
    assert committed_ids(backend) == [1]


# -- GC -----------------------------------------------------------------------------------------------------------


def test_gc_deletes_nothing_young_whatever_the_gc_clock(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    commit_small(backend.open(), 4)
    coord = backend.coordinator()
    compact_partition(coord, "t", 0)  # four retired segments, retired just now
    store = backend.open()
    store.put(f"{NATIVE_STAGING}/w1/part-0.parquet", b"staged by a running native write")
    with host_clock_off(30 * DAY_S):
        assert gc_partition(backend.coordinator(), "t", 0).deleted_files == []
        assert sweep_native_staging(backend.open()).deleted_files == []
    assert len(store.list_info(data_dir("t", 0))) == 5
    assert store.list(f"{NATIVE_STAGING}/w1") == ["part-0.parquet"]


def test_gc_keeps_segments_retired_just_now_by_a_compactor_whose_clock_is_behind(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    with host_clock_off(-2 * DAY_S):
        commit_small(backend.open(), 4)
        coord = backend.coordinator()
        assert compact_partition(coord, "t", 0).merged_groups == 1
    store = backend.open()
    # The replace's partition record was never written (its writer died after the entry): GC falls back on the
    # entry's time for when the segments were retired.
    records = sorted(store.list(marker_dir("t", 0)))
    store.delete(f"{marker_dir('t', 0)}/{records[-1]}")
    report = gc_partition(backend.coordinator(), "t", 0, grace_ms=HOUR_S * 1000)
    assert report.deleted_files == []
    assert len(store.list_info(data_dir("t", 0))) == 5
    assert committed_ids(backend) == [0, 1, 2, 3]


# -- the reading itself -------------------------------------------------------------------------------------------


class _Clocks:
    """An elapsed clock and a host wall clock a test moves by hand."""

    def __init__(self) -> None:
        self.elapsed = 1000.0
        self.wall = 1.7e9

    def tick(self, seconds: float, wall: float | None = None) -> None:
        self.elapsed += seconds
        self.wall += seconds if wall is None else wall


class FailingClock(LostReplyStore):
    """A real store whose clock can be made unreadable (``fail``: ``Store.now`` raises StoreError)."""

    fail = False

    def now(self) -> float:
        if self.fail:
            raise StoreError(f"the clock of {self.url} cannot be read")
        return self.inner.now()


def test_a_reading_is_taken_again_when_due_or_when_the_host_clock_jumps(backend: Backend) -> None:
    store = backend.open()
    hand = _Clocks()
    reading = StoreClock(elapsed=lambda: hand.elapsed, wall=lambda: hand.wall)
    first = reading.now(store)
    assert abs(first - store.now()) < TOLERANCE_MS / 1000 and reading.readings == 1
    hand.tick(10)
    assert reading.now(store) == pytest.approx(first + 10) and reading.readings == 1
    hand.tick(REFRESH_S)
    reading.now(store)
    assert reading.readings == 2
    hand.tick(5, wall=5 + DAY_S)  # the host slept a day that the elapsed clock did not count, or was stepped
    assert abs(reading.now(store) - store.now()) < TOLERANCE_MS / 1000 and reading.readings == 3
    hand.tick(5, wall=5)  # a host clock that is off but steady is never a reason to read again
    reading.now(store)
    assert reading.readings == 3


def test_a_reading_outlives_a_failed_reread_until_it_is_stale(backend: Backend) -> None:
    store = FailingClock(backend.open())
    hand = _Clocks()
    reading = StoreClock(elapsed=lambda: hand.elapsed, wall=lambda: hand.wall)
    first = reading.now(store)
    store.fail = True
    hand.tick(REFRESH_S + 1)
    assert reading.now(store) == pytest.approx(first + REFRESH_S + 1)  # the old reading serves
    hand.tick(clock.STALE_S)
    with pytest.raises(StoreError, match="cannot be read"):
        reading.now(store)
    hand.tick(1, wall=DAY_S)  # after a jump the old reading is not trusted either
    with pytest.raises(StoreError, match="cannot be read"):
        reading.now(store)
    store.fail = False
    assert abs(reading.now(store) - store.now()) < TOLERANCE_MS / 1000
