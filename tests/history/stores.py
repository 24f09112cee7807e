"""Store wrappers of the history workload: seeded store faults at every call, and read-only readers.

Both wrap a real backend (memory, local disk or S3) and forward every call to it; they only add failures.

* :class:`FaultyStore` fails calls of every kind the way :class:`coordinator.backends.s3.S3Store` fails past its retry
  budget: a read or listing raises ``StoreError``; a plain put or delete raises ``StoreError`` before or *after* it
  was applied (S3 cannot tell which); a conditional create raises ``StoreError`` when it certainly did not apply,
  and otherwise applies (or not) and loses the reply, after which the client reads the object back (which may fail
  in turn: ``CommitStateUnknownError``) or gives up at once with ``CommitStateUnknownError``.
* :class:`ReadOnlyStore` refuses every write with ``StoreError`` and records the attempt: readers need no write
  permission, so any attempt is an anomaly.

Every injected error says :data:`INJECTED` in its message, so the checker can tell an injected failure from one no
fault explains.
"""

from __future__ import annotations

import builtins
import hashlib
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from coordinator import CommitStateUnknownError, Store, StoreError
from coordinator.store import ObjectInfo

INJECTED = "injected fault"
_HEX = re.compile(r"[0-9a-f]{8,}")


class FaultPlan:
    """The seeded fault decisions of one worker, and their counts by kind.

    A decision is a pure function of the worker's seed, the number of the operation in progress, the kind of
    decision and the place (a path or protocol point with random hex ids blanked out) and how many times that place
    was decided in this operation. Requests issued in parallel by the core's thread pool therefore get the same
    decisions whatever order the threads run in, and a single-worker history is reproducible from its seed.
    """

    def __init__(self, seed: int, wid: int, *, crash_rate: float = 0.0, error_rate: float = 0.0,
                 lost_reply_rate: float = 0.0, race_rate: float = 0.0) -> None:
        self.key = f"{seed}.{wid}"
        self.crash_rate, self.error_rate = crash_rate, error_rate
        self.lost_reply_rate, self.race_rate = lost_reply_rate, race_rate
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


class FaultyStore(Store):
    """A real store whose calls fail at the plan's error rate (and whose conditional writes lose replies at its
    lost-reply rate); see the module docstring."""

    def __init__(self, inner: Store, plan: FaultPlan, *, avoid_intent_errors: bool = False) -> None:
        super().__init__(inner.url)
        self.inner, self.plan = inner, plan
        #: an intent put never fails after it was applied (a known defect's trigger, see ``KNOWN_DEFECTS``)
        self.avoid_intent_errors = avoid_intent_errors

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
        u = self._fails("put", path)
        if u is not None and (u < 0.5 or self.avoid_intent_errors and path.startswith("_txn/intents/")):
            raise self._error("put", path)
        self.inner.put(path, data)
        if u is not None:
            raise self._error("put", path, "was applied but its reply was lost")

    def delete(self, path: str) -> None:
        u = self._fails("delete", path)
        if u is not None and u < 0.5:
            raise self._error("delete", path)
        self.inner.delete(path)
        if u is not None:
            raise self._error("delete", path, "was applied but its reply was lost")

    def get(self, path: str) -> bytes:
        if self._fails("get", path) is not None:
            raise self._error("get", path)
        return self.inner.get(path)

    def exists(self, path: str) -> bool:
        if self._fails("exists", path) is not None:
            raise self._error("exists", path)
        return self.inner.exists(path)

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        if self._fails("list", prefix) is not None:
            raise self._error("list", prefix)
        return self.inner.list(prefix, start_after, limit)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        if self._fails("list_dirs", prefix) is not None:
            raise self._error("list_dirs", prefix)
        return self.inner.list_dirs(prefix)

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        if self._fails("list_info", prefix) is not None:
            raise self._error("list_info", prefix)
        return self.inner.list_info(prefix)

    def now(self) -> float:
        if self._fails("now", "") is not None:
            raise self._error("now", "the store clock")
        return self.inner.now()


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
