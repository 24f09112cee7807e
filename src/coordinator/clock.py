"""This process's reading of the store's clock: the times written into the transaction log, and the decisions that
compare a time with them.

The rule (``docs/design.md``, "Clocks"): every time-based decision follows the store's clock
(:meth:`coordinator.store.Store.now`), never a host's. Ages of objects (GC, the timeout sweep, truncation) compare
modification times with one ``Store.now()`` per pass. Entry times cannot afford that: on S3 ``Store.now()`` is a
request, and a commit must cost no more than it did. So a process reads the store's clock once and then counts on
a clock of its own that only moves forward (``CLOCK_BOOTTIME`` where the platform has one, which also counts time
suspended; else ``time.monotonic``): the store's time now is the reading plus the time elapsed since. An entry's
time (``max(store time, previous entry's time)``), a compaction's ``staged_at``, retention and expiry all use this
reading, so they judge one another on one clock. A host whose wall clock is days off moves none of them.

The reading is taken again every :data:`REFRESH_S` (bounding how far the local elapsed clock can drift from the
store's), and at once when the host's wall clock moved by more than :data:`JUMP_S` more or less than the elapsed
clock since the reading: a suspend the elapsed clock did not count, a stepped host clock. The wall clock is only
watched for that, never read as a time. A scheduled re-read that fails keeps the old reading (retried after
:data:`RETRY_S`) until it is :data:`STALE_S` old; a first read, a re-read after a jump, or one past ``STALE_S``
that fails raises.

Error of a reading: the store clock's resolution (S3 sends whole seconds in its ``Date`` header, compensated by
half a second: +-0.5 s), half the round trip of the reading, and the drift of the elapsed clock over at most
``REFRESH_S`` (well under a second). Readings are shared by every store object of one backend type, URL and
endpoint in the process, so a driver opening a store per commit learns the clock once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.errors import StoreError
from coordinator.store import Store

__all__ = ["JUMP_S", "REFRESH_S", "RETRY_S", "STALE_S", "StoreClock", "clock_of", "elapsed_s", "forget", "store_now",
           "store_now_ms"]

log = logging.getLogger(__name__)

#: A reading of the store's clock is taken again after this many seconds.
REFRESH_S = 300.0
#: The host's wall clock moving this many seconds more or less than the elapsed clock means a jump: read again.
JUMP_S = 1.0
#: After a failed scheduled re-read, the next try waits this long (the old reading still serves).
RETRY_S = 10.0
#: A reading this old is not used when a re-read fails.
STALE_S = 3600.0
#: Processes keep the readings of this many stores at most (oldest dropped first).
_KEPT = 1024

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def elapsed_s() -> float:
    """Seconds on a clock that never goes back, counting time suspended where the platform can (``CLOCK_BOOTTIME``;
    ``time.monotonic`` does not on Linux): for measuring how long this process paused."""
    return time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()


def _host_wall() -> float:
    return time.time()


@dataclass(frozen=True)
class _Reading:
    """The store's time ``store_s`` at elapsed time ``at``; ``watch_at`` / ``watch_wall``: the elapsed and wall
    clocks read together just after (to notice jumps)."""

    store_s: float
    at: float
    watch_at: float
    watch_wall: float


class StoreClock:
    """The reading of one store's clock (see the module docstring). Thread-safe.

    Args:
        elapsed: the elapsed clock (seconds, never going back); by default ``CLOCK_BOOTTIME`` or ``time.monotonic``.
        wall: the host's wall clock, watched for jumps only; by default ``time.time``.
    """

    def __init__(self, *, elapsed: Callable[[], float] | None = None, wall: Callable[[], float] | None = None) -> None:
        self._elapsed = elapsed or elapsed_s
        self._wall = wall or _host_wall
        self._lock = threading.Lock()
        self._reading: _Reading | None = None
        self._retry_at = float("-inf")
        #: how many times the store's clock was read (one ``Store.now()`` each)
        self.readings = 0

    def now(self, store: Store) -> float:
        """The store's time now (epoch seconds), from this clock's reading, taking one through ``store`` when
        there is none yet or it is due.

        Raises:
            StoreError: the store's clock could not be read and no reading may serve (none yet, the host clock
                jumped since, or it is older than :data:`STALE_S`).
        """
        with self._lock:
            r = self._reading
            at = self._elapsed()
            if r is None or abs((self._wall() - r.watch_wall) - (at - r.watch_at)) > JUMP_S:
                r = self._read(store)
            elif at - r.at > REFRESH_S and at >= self._retry_at:
                try:
                    r = self._read(store)
                except StoreError as exc:
                    if at - r.at > STALE_S:
                        raise StoreError(f"the clock of store {store.url} was last read {at - r.at:.0f} s ago and "
                                         f"cannot be read now: {exc}") from exc
                    self._retry_at = at + RETRY_S
                    log.warning("reading the clock of store %s failed (%s); using the reading of %.0f s ago",
                                store.url, exc, at - r.at)
            return r.store_s + (self._elapsed() - r.at)

    def _read(self, store: Store) -> _Reading:
        before = self._elapsed()
        store_s = store.now() + store.clock_resolution / 2
        after = self._elapsed()
        self.readings += 1
        r = _Reading(store_s, (before + after) / 2, after, self._wall())
        self._reading = r
        self._retry_at = float("-inf")
        return r

    def _after_fork(self) -> None:
        self._lock = threading.Lock()


_CLOCKS: dict[tuple[str, str, str | None], StoreClock] = {}
_CLOCKS_LOCK = threading.Lock()


def _key(store: Store) -> tuple[str, str, str | None]:
    kind = type(store)
    return f"{kind.__module__}.{kind.__qualname__}", store.url, getattr(store, "endpoint", None)


def clock_of(store: Store) -> StoreClock:
    """This process's clock of ``store`` (one per backend type, URL and endpoint)."""
    key = _key(store)
    with _CLOCKS_LOCK:
        clock = _CLOCKS.get(key)
        if clock is None:
            if len(_CLOCKS) >= _KEPT:
                del _CLOCKS[next(iter(_CLOCKS))]
            clock = _CLOCKS[key] = StoreClock()
        return clock


def store_now(store: Store) -> float:
    """The store's time now in epoch seconds, as this process reads it (no request once read; see the module
    docstring).

    Raises:
        StoreError: see :meth:`StoreClock.now`.
    """
    return clock_of(store).now(store)


def store_now_ms(store: Store) -> int:
    """:func:`store_now` in epoch milliseconds: the time a log entry written now carries.

    Raises:
        StoreError: see :meth:`StoreClock.now`.
    """
    return int(store_now(store) * 1000)


def forget() -> None:
    """Drop every reading (the next use of each store reads its clock again)."""
    with _CLOCKS_LOCK:
        _CLOCKS.clear()


def _after_fork_in_child() -> None:
    global _CLOCKS_LOCK
    _CLOCKS_LOCK = threading.Lock()
    for clock in _CLOCKS.values():
        clock._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
