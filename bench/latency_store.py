"""A store that adds S3-like latency per request in front of a real backend (bench helper, not a mock).

The wrapped backend does the real work (memory, local disk or the loopback S3 server); this class only sleeps
before each request, per operation kind, and records every request's start and end so a benchmark can count
requests and the serial round trips an operation needed. Default latencies are first-byte latencies published for
S3 Standard in one region (AWS's performance guidelines give 100-200 ms for small objects at the tail and tens of
milliseconds typical; we take typical values): conditional and plain PUT 30 ms, GET 15 ms, LIST 20 ms, DELETE 15 ms.
"""

from __future__ import annotations

import builtins
import threading
import time
from dataclasses import dataclass, field

from coordinator.store import ObjectInfo, Store

DEFAULT_LATENCY_MS = {"put_if_absent": 30.0, "put": 30.0, "get": 15.0, "list": 20.0, "delete": 15.0, "head": 15.0}


@dataclass
class Trace:
    """Every request: (kind, start, end) in monotonic seconds; with ``detail``, also each request's thread and path
    in ``log`` as (thread name, kind, path, start, end) (the monotonic clock is one per machine, so the logs of
    several processes merge into one timeline)."""

    events: list[tuple[str, float, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    detail: bool = False
    log: list[tuple[str, str, str, float, float]] = field(default_factory=list)

    def clear(self) -> None:
        with self.lock:
            self.events.clear()
            self.log.clear()

    def requests(self) -> int:
        with self.lock:
            return len(self.events)

    def round_trips(self) -> int:
        """The length of the longest chain of requests each starting after the previous one ended: the number of
        serial round trips (requests issued together count once)."""
        with self.lock:
            evs = sorted(self.events, key=lambda e: e[1])
        depth: list[tuple[float, int]] = []  # (end, chain length ending at that request)
        best = 0
        for _kind, start, end in evs:
            before = max((n for e, n in depth if e <= start), default=0)
            depth.append((end, before + 1))
            best = max(best, before + 1)
        return best


class LatencyStore(Store):
    """``inner`` with ``latency_ms[kind]`` milliseconds added to each request of that kind."""

    def __init__(self, inner: Store, latency_ms: dict[str, float] | None = None) -> None:
        super().__init__(inner.url)
        self.inner = inner
        self.latency_ms = dict(DEFAULT_LATENCY_MS, **(latency_ms or {}))
        self.trace = Trace()
        self.counters = inner.counters

    def _wait(self, kind: str) -> float:
        start = time.monotonic()
        time.sleep(self.latency_ms.get(kind, 0.0) / 1000)
        return start

    def _done(self, kind: str, start: float, path: str) -> None:
        end = time.monotonic()
        with self.trace.lock:
            self.trace.events.append((kind, start, end))
            if self.trace.detail:
                self.trace.log.append((threading.current_thread().name, kind, path, start, end))

    def put_if_absent(self, path: str, data: bytes) -> bool:
        t = self._wait("put_if_absent")
        try:
            return self.inner.put_if_absent(path, data)
        finally:
            self._done("put_if_absent", t, path)

    def put(self, path: str, data: bytes) -> None:
        t = self._wait("put")
        try:
            self.inner.put(path, data)
        finally:
            self._done("put", t, path)

    def get(self, path: str) -> bytes:
        t = self._wait("get")
        try:
            return self.inner.get(path)
        finally:
            self._done("get", t, path)

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        t = self._wait("list")
        try:
            return self.inner.list(prefix, start_after, limit)
        finally:
            self._done("list", t, prefix)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        t = self._wait("list")
        try:
            return self.inner.list_dirs(prefix)
        finally:
            self._done("list", t, prefix)

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        t = self._wait("list")
        try:
            return self.inner.list_info(prefix)
        finally:
            self._done("list", t, prefix)

    def delete(self, path: str) -> None:
        t = self._wait("delete")
        try:
            self.inner.delete(path)
        finally:
            self._done("delete", t, path)

    def now(self) -> float:
        return self.inner.now()

    def close(self) -> None:
        self.inner.close()
