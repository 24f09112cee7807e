"""Running store requests concurrently: one shared thread pool for every store in the process.

Object-store latency, not CPU, bounds txnlog's protocol, so independent requests (the partition records of one
entry, the tail entries after a checkpoint, a snapshot's partitions) are issued at once. The fault injector of the
calling thread (:mod:`coordinator.faults`) is carried into the worker, so fault-injection tests see every protocol
point wherever it runs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

from coordinator import faults

T = TypeVar("T")
R = TypeVar("R")

#: Requests in flight at once, process-wide (environment ``TXNLOG_IO_THREADS``); threads start only as needed, so a
#: process with few requests in flight keeps few. Object stores serve hundreds of requests in flight per client.
MAX_WORKERS = int(os.environ.get("TXNLOG_IO_THREADS", "256"))
#: Background jobs (derived work: partition records, checkpoints) running at once.
MAX_BACKGROUND = 16

_pools: dict[str, ThreadPoolExecutor] = {}
_pool_lock = threading.Lock()
_role = threading.local()
#: Jobs of :func:`background` and :func:`start` submitted and not finished yet (see :func:`drain`).
_in_flight = 0
_idle = threading.Condition()


def _executor(kind: str) -> ThreadPoolExecutor:
    with _pool_lock:
        pool = _pools.get(kind)
        if pool is None:
            size = MAX_WORKERS if kind == "io" else MAX_BACKGROUND
            pool = _pools[kind] = ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"txnlog-{kind}",
                                                     initializer=_mark, initargs=(kind,))
        return pool


def _mark(kind: str) -> None:
    _role.kind = kind


def _inside(kind: str) -> bool:
    """Whether the caller is a worker of pool ``kind``: its own fan-out to that pool runs inline, so workers
    never wait on each other. (Background jobs fan their requests out to the request pool.)"""
    return getattr(_role, "kind", None) == kind


def pmap(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, run concurrently; results in input order.

    Every call runs to its end before the first exception (by input order) is re-raised, so no request is left
    running behind the caller's back.
    """
    todo = list(items)
    if len(todo) <= 1 or _inside("io"):
        return [fn(x) for x in todo]
    injector = faults.current()

    def run(x: T) -> R:
        with faults.injected(injector):
            return fn(x)

    futures = [(_executor("io").submit(run, x), x) for x in todo]
    results: list[R] = []
    error: BaseException | None = None
    for f, x in futures:
        try:
            # A call no worker has started yet runs here: a caller never waits on work queued behind workers
            # that may be waiting for a lock this caller holds.
            results.append(run(x) if f.cancel() else f.result())
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after every request has finished
            if error is None:
                error = exc
    if error is not None:
        raise error
    return results


def start(fn: Callable[[], R]) -> Callable[[], R]:
    """Start request work ``fn()`` now, in the request pool, for a caller that waits for it shortly; returns a
    function that waits for its result (re-raising its exception). From a request worker, ``fn`` runs at once."""
    return _submit("io", fn)


def background(fn: Callable[[], R]) -> Callable[[], R]:
    """Run derived work ``fn()`` (partition records, checkpoints, clean-up) in the background pool; returns a
    function that waits for its result. From a background worker, ``fn`` runs at once."""
    return _submit("bg", fn)


def thread(fn: Callable[[], object], *, name: str) -> None:
    """Run long-lived work ``fn()`` (serving the queue) on a daemon thread of its own, with this thread's fault
    injector; :func:`drain` waits for it as for a background job."""
    injector = faults.current()

    def run() -> None:
        try:
            with faults.injected(injector):
                fn()
        finally:
            _count(-1)

    _count(1)
    try:
        threading.Thread(target=run, name=name, daemon=True).start()
    except BaseException:
        _count(-1)
        raise


def drain(timeout: float | None = None) -> bool:
    """Wait until no job started by :func:`background` or :func:`start` (from any thread) is running or queued,
    for at most ``timeout`` seconds (None: no limit): a tool about to exit, or a test about to judge the store,
    waits for the work in flight. Returns whether the pools went idle."""
    with _idle:
        return _idle.wait_for(lambda: _in_flight == 0, timeout)


def _count(delta: int) -> None:
    global _in_flight
    with _idle:
        _in_flight += delta
        if not _in_flight:
            _idle.notify_all()


def _submit(kind: str, fn: Callable[[], R]) -> Callable[[], R]:
    if _inside(kind):
        try:
            value = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the waiter, as a future would
            err = exc

            def fail() -> R:
                raise err

            return fail
        return lambda: value
    injector = faults.current()

    def run() -> R:  # runs once: in the pool, or in the waiter when the pool had not started it
        try:
            with faults.injected(injector):
                return fn()
        finally:
            _count(-1)

    _count(1)
    future = _executor(kind).submit(run)
    lock = threading.Lock()
    outcome: list[tuple[bool, Any]] = []  # (ok, value or exception), once known

    def wait() -> R:
        with lock:  # a waiter may be called again (a caller cleaning up): the job still runs once
            if not outcome:
                try:
                    # not started yet: run it here (see pmap)
                    outcome.append((True, run() if future.cancel() else future.result()))
                except BaseException as exc:  # noqa: BLE001 - re-raised below, to every call
                    outcome.append((False, exc))
        ok, value = outcome[0]
        if not ok:
            raise value
        return cast(R, value)

    return wait
