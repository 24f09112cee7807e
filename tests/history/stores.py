"""Store wrappers of the history workload: seeded store faults and pauses at every call, read-only readers, and a
store that ignores conditional writes.

Each wraps a real backend (memory, local disk or S3) and forwards every call to it; they only add failures, pauses
or the one lie.

* :class:`FaultyStore` fails calls of every kind the way :class:`coordinator.backends.s3.S3Store` fails past its retry
  budget: a read or listing raises ``StoreError``; a plain put or delete raises ``StoreError`` before or *after* it
  was applied (S3 cannot tell which); a conditional create raises ``StoreError`` when it certainly did not apply,
  and otherwise applies (or not) and loses the reply, after which the client reads the object back (which may fail
  in turn: ``CommitStateUnknownError``) or gives up at once with ``CommitStateUnknownError``. Any call may also
  *pause* (a GC pause, a frozen VM, a descheduled thread) before or after the backend applied it, and a conditional
  create on local disk between writing its temp file and linking it (:class:`PausingLocalStore`), for longer than
  the log truncation grace period: the plan's ``pauser`` sleeps while another process truncates the log.
* :class:`ReadOnlyStore` refuses every write with ``StoreError`` and records the attempt: readers need no write
  permission, so any attempt is an anomaly.
* :class:`LyingStore` ignores the condition of conditional creates (a proxy or gateway that drops ``If-None-Match``)
  and records every conditional write that reached it: every writer must refuse it before writing.

Every injected error says :data:`INJECTED` in its message, so the checker can tell an injected failure from one no
fault explains.
"""

from __future__ import annotations

import builtins
import hashlib
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from coordinator import CommitStateUnknownError, Store, StoreError
from coordinator.backends.local import LocalStore
from coordinator.probe import PROBE_DIR
from coordinator.store import ObjectInfo

INJECTED = "injected fault"
_HEX = re.compile(r"[0-9a-f]{8,}")
#: Store calls that only read.
READS = frozenset({"get", "exists", "list", "list_dirs", "list_info", "now"})
#: What the transaction log's readers read: a pause in one of these reads is the trigger of an open defect
#: (``paused-log-reader``), avoidable on its own.
LOG_PATHS = ("_txn/log", "_txn/checkpoint")
#: Places outside ``_txn/`` (segments, partition records, topics) pause at this fraction of the plan's pause rate:
#: they are most of the calls, and a pause matters most where the protocol's state is read or decided.
DATA_PAUSE_SHARE = 0.25


class FaultPlan:
    """The seeded fault decisions of one worker, and their counts by kind.

    A decision is a pure function of the worker's seed, the number of the operation in progress, the kind of
    decision and the place (a path or protocol point with random hex ids blanked out) and how many times that place
    was decided in this operation. Requests issued in parallel by the core's thread pool therefore get the same
    decisions whatever order the threads run in, and a single-worker history is reproducible from its seed.
    """

    def __init__(self, seed: int, wid: int, *, crash_rate: float = 0.0, error_rate: float = 0.0,
                 lost_reply_rate: float = 0.0, race_rate: float = 0.0, pause_rate: float = 0.0,
                 avoid: frozenset[str] = frozenset()) -> None:
        self.key = f"{seed}.{wid}"
        self.crash_rate, self.error_rate = crash_rate, error_rate
        self.lost_reply_rate, self.race_rate = lost_reply_rate, race_rate
        #: chance that a store call under ``_txn/`` pauses (elsewhere: :data:`DATA_PAUSE_SHARE` of it)
        self.pause_rate = pause_rate
        #: triggers not to exercise (``paused-log-reader``, ``linked-ghost``, ``paused-after-create``,
        #: ``orphaned-ghost``, ``stalled-committer``; see ``workload.OPEN_DEFECTS`` and ``KNOWN_DEFECTS``)
        self.avoid = avoid
        #: performs a pause at the place it is given (set by the worker; None: no pauses)
        self.pauser: Callable[[str], None] | None = None
        self.counts: Counter[str] = Counter()
        self._suspended = 0
        self._op = 0
        self._seen: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether faults are drawn now: not while any thread of the worker is inside :meth:`suspended`."""
        return self._suspended == 0

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """No faults until every thread that entered has left (a count, not a saved flag: a fault-free window
        that a background thread opens while another thread's window closes stays fault-free)."""
        with self._lock:
            self._suspended += 1
        try:
            yield
        finally:
            with self._lock:
                self._suspended -= 1

    def begin_op(self, n: int) -> None:
        """Decisions from now on belong to operation ``n``."""
        with self._lock:
            self._op = n
            self._seen.clear()

    def draw(self, kind: str, where: str) -> float:
        """A number in [0, 1) for the next decision of ``kind`` at ``where``."""
        place = _HEX.sub("#", where)
        with self._lock:
            k = self._seen[(kind, place)]
            self._seen[(kind, place)] = k + 1
            op = self._op
        digest = hashlib.blake2b(f"{self.key}|{op}|{kind}|{place}|{k}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def hit(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1


class PausingLocalStore(LocalStore):
    """The local backend, unchanged except that a conditional create can pause between writing its temp file and
    linking it to its name (:meth:`pausing_inside`): the created object then carries the temp file's time, from
    before the pause."""

    def __init__(self, url: str, root: str) -> None:
        super().__init__(url, root)
        self._inside = threading.local()

    @classmethod
    def of(cls, store: Store) -> Store:
        """``store`` as a pausing local store when it is a local one (same root), else itself."""
        if not isinstance(store, LocalStore) or isinstance(store, PausingLocalStore):
            return store
        return cls(store.url, store.root)

    @contextmanager
    def pausing_inside(self, pause: Callable[[], None]) -> Iterator[None]:
        """Within the block, this thread's next temp file is followed by ``pause()`` before it is linked."""
        self._inside.pause = pause
        try:
            yield
        finally:
            self._inside.pause = None

    def _write_temp(self, full: str, data: bytes) -> str:
        tmp = super()._write_temp(full, data)
        pause: Callable[[], None] | None = getattr(self._inside, "pause", None)
        if pause is not None:
            self._inside.pause = None
            pause()
        return tmp


class FaultyStore(Store):
    """A real store whose calls fail at the plan's error rate (and whose conditional writes lose replies at its
    lost-reply rate), and pause at its pause rate; see the module docstring."""

    def __init__(self, inner: Store, plan: FaultPlan, *, avoid_intent_errors: bool = False,
                 txn_write_latency_s: float = 0.0) -> None:
        super().__init__(inner.url)
        self.inner, self.plan = inner, plan
        #: an intent put never fails after it was applied (a known defect's trigger, see ``KNOWN_DEFECTS``)
        self.avoid_intent_errors = avoid_intent_errors
        #: each write under ``_txn/`` takes at least this long (an object store's latency: commits stay in flight
        #: long enough for the next ones to be sent behind them)
        self.txn_write_latency_s = txn_write_latency_s

    def _latency(self, path: str) -> None:
        if self.txn_write_latency_s and path.startswith("_txn/"):
            time.sleep(self.txn_write_latency_s)

    def _pause_at(self, kind: str, path: str) -> str | None:
        """When this call pauses: ``before`` or ``after`` the backend applies it, ``inside`` a local conditional
        create (between its temp file and its link); None when it does not."""
        plan = self.plan
        if not plan.enabled or not plan.pause_rate or plan.pauser is None:
            return None
        log_read = kind in READS and path.startswith(LOG_PATHS)
        if log_read and "paused-log-reader" in plan.avoid:
            return None
        entry = kind == "put_if_absent" and path.startswith("_txn/log/")
        if entry and {"stalled-committer", "orphaned-ghost"} & plan.avoid:
            return None  # a pause before a log entry's creation is the trigger of those defects
        rate = plan.pause_rate if path.startswith("_txn") else plan.pause_rate * DATA_PAUSE_SHARE
        if plan.draw("pause", f"{kind} {path}") >= rate:
            return None
        places = ["before", "after"] if not (entry and "paused-after-create" in plan.avoid) else ["before"]
        if kind == "put_if_absent" and isinstance(self.inner, PausingLocalStore) and "linked-ghost" not in plan.avoid:
            places.append("inside")
        return places[int(plan.draw("pause-when", f"{kind} {path}") * len(places))]

    def _paused(self, kind: str, path: str, call: Callable[[], object]) -> object:
        """``call()``, paused before, after or inside as drawn."""
        when = self._pause_at(kind, path)
        pauser = self.plan.pauser
        if when is None or pauser is None:
            return call()
        where = f"{when} {kind} {path}"
        if when == "before":
            pauser(where)
            return call()
        if when == "inside":
            assert isinstance(self.inner, PausingLocalStore)
            with self.inner.pausing_inside(lambda: pauser(where)):
                return call()
        got = call()
        pauser(where)
        return got

    def _fails(self, kind: str, path: str) -> float | None:
        """The draw when this call fails (in [0, error_rate)), else None."""
        if not self.plan.enabled or not self.plan.error_rate:
            return None
        u = self.plan.draw(kind, path)
        if u >= self.plan.error_rate:
            return None
        self.plan.hit("error")
        return u / self.plan.error_rate

    def _error(self, kind: str, path: str, how: str = "failed") -> StoreError:
        return StoreError(f"{INJECTED}: {kind} of {path!r} {how}")

    def put_if_absent(self, path: str, data: bytes) -> bool:
        self._latency(path)
        return bool(self._paused("put_if_absent", path, lambda: self._put_if_absent(path, data)))

    def _put_if_absent(self, path: str, data: bytes) -> bool:
        u = self._fails("put_if_absent", path)
        if u is not None and u < 0.4:
            raise self._error("put_if_absent", path, "refused (not applied)")
        if u is not None:
            if u < 0.8:
                self.inner.put_if_absent(path, data)
            return self._read_back_equal(path, data, cause=self._error("put_if_absent", path, "lost its reply"))
        created = self.inner.put_if_absent(path, data)
        if self.plan.enabled and self.plan.lost_reply_rate and \
                self.plan.draw("lost-reply", path) < self.plan.lost_reply_rate:
            self.plan.hit("lost-reply")
            if self.plan.draw("lost-reply-how", path) < 0.5:
                raise CommitStateUnknownError(f"{INJECTED}: reply of the conditional write of {path} was lost")
            return self._read_back_equal(path, data)
        return created

    def put(self, path: str, data: bytes) -> None:
        self._latency(path)
        self._paused("put", path, lambda: self._put(path, data))

    def _put(self, path: str, data: bytes) -> None:
        u = self._fails("put", path)
        if u is not None and (u < 0.5 or self.avoid_intent_errors and path.startswith("_txn/intents/")):
            raise self._error("put", path)
        self.inner.put(path, data)
        if u is not None:
            raise self._error("put", path, "was applied but its reply was lost")

    def delete(self, path: str) -> None:
        self._paused("delete", path, lambda: self._delete(path))

    def _delete(self, path: str) -> None:
        u = self._fails("delete", path)
        if u is not None and u < 0.5:
            raise self._error("delete", path)
        self.inner.delete(path)
        if u is not None:
            raise self._error("delete", path, "was applied but its reply was lost")

    def _read(self, kind: str, path: str, call: Callable[[], object]) -> object:
        def attempt() -> object:
            if self._fails(kind, path) is not None:
                raise self._error(kind, path if kind != "now" else "the store clock")
            return call()

        return self._paused(kind, path, attempt)

    def get(self, path: str) -> bytes:
        got = self._read("get", path, lambda: self.inner.get(path))
        assert isinstance(got, bytes)
        return got

    def exists(self, path: str) -> bool:
        return bool(self._read("exists", path, lambda: self.inner.exists(path)))

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        got = self._read("list", prefix, lambda: self.inner.list(prefix, start_after, limit))
        assert isinstance(got, builtins.list)
        return got

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        got = self._read("list_dirs", prefix, lambda: self.inner.list_dirs(prefix))
        assert isinstance(got, builtins.list)
        return got

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        got = self._read("list_info", prefix, lambda: self.inner.list_info(prefix))
        assert isinstance(got, builtins.list)
        return got

    def now(self) -> float:
        got = self._read("now", "", self.inner.now)
        assert isinstance(got, float | int)
        return float(got)


class ReadOnlyStore(Store):
    """A real store behind read-only credentials: every write is refused with ``StoreError`` and reported to
    ``on_write`` (which the history records as an anomaly)."""

    def __init__(self, inner: Store, on_write: Callable[[str], None]) -> None:
        super().__init__(inner.url)
        self.inner, self.on_write = inner, on_write

    def _refuse(self, kind: str, path: str) -> StoreError:
        self.on_write(f"{kind} {path}")
        return StoreError(f"read-only store refuses {kind} of {path!r} (AccessDenied)")

    def put_if_absent(self, path: str, data: bytes) -> bool:
        raise self._refuse("put_if_absent", path)

    def put(self, path: str, data: bytes) -> None:
        raise self._refuse("put", path)

    def delete(self, path: str) -> None:
        raise self._refuse("delete", path)

    def get(self, path: str) -> bytes:
        return self.inner.get(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        return self.inner.list(prefix, start_after, limit)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        return self.inner.list_dirs(prefix)

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        return self.inner.list_info(prefix)

    def now(self) -> float:
        return self.inner.now()


#: The endpoint a :class:`LyingStore` reports: a gateway in front of the same storage, whose verdict on conditional
#: writes is its own (a verdict is kept per store URL and endpoint).
LYING_ENDPOINT = "http://conditional-writes-ignored.invalid"


class LyingStore(Store):
    """A real store reached through a gateway that ignores conditional writes: ``put_if_absent`` overwrites whatever
    is there and reports success. Every conditional write outside the probe's folder is recorded in
    :attr:`accepted` (a writer that did one has trusted the store), every write in :attr:`writes`."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner.url)
        self.inner = inner
        self.endpoint = LYING_ENDPOINT
        self.accepted: builtins.list[str] = []
        self.writes: builtins.list[str] = []
        self._lock = threading.Lock()

    def put_if_absent(self, path: str, data: bytes) -> bool:
        with self._lock:
            self.writes.append(f"put_if_absent {path}")
            if not path.startswith(PROBE_DIR + "/"):
                self.accepted.append(path)
        self.inner.put(path, data)
        return True

    def put(self, path: str, data: bytes) -> None:
        with self._lock:
            self.writes.append(f"put {path}")
        self.inner.put(path, data)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def get(self, path: str) -> bytes:
        return self.inner.get(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        return self.inner.list(prefix, start_after, limit)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        return self.inner.list_dirs(prefix)

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        return self.inner.list_info(prefix)

    def now(self) -> float:
        return self.inner.now()
