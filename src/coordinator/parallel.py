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
from typing import TypeVar

from coordinator import faults

T = TypeVar("T")
R = TypeVar("R")

#: Requests in flight at once, process-wide (environment ``TXNLOG_IO_THREADS``).
MAX_WORKERS = int(os.environ.get("TXNLOG_IO_THREADS", "64"))

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_in_worker = threading.local()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="txnlog-io",
                                       initializer=_mark_worker)
        return _pool


def _mark_worker() -> None:
    _in_worker.yes = True


def _nested() -> bool:
    """Whether the caller runs in a pool worker: its fan-out runs inline, so workers never wait on each other."""
    return getattr(_in_worker, "yes", False)


def pmap(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, run concurrently; results in input order.

    Every call runs to its end before the first exception (by input order) is re-raised, so no request is left
    running behind the caller's back.
    """
    todo = list(items)
    if len(todo) <= 1 or _nested():
        return [fn(x) for x in todo]
    injector = faults.current()

    def run(x: T) -> R:
        with faults.injected(injector):
            return fn(x)

    futures = [_executor().submit(run, x) for x in todo]
    results: list[R] = []
    error: BaseException | None = None
    for f in futures:
        try:
            results.append(f.result())
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after every request has finished
            if error is None:
                error = exc
    if error is not None:
        raise error
    return results


def submit(fn: Callable[[], R]) -> Callable[[], R]:
    """Start ``fn()`` in the pool; returns a function that waits for its result (re-raising its exception). From a
    pool worker, ``fn`` runs at once."""
    if _nested():
        try:
            value = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the waiter, as a future would
            err = exc

            def fail() -> R:
                raise err

            return fail
        return lambda: value
    injector = faults.current()

    def run() -> R:
        with faults.injected(injector):
            return fn()

    future = _executor().submit(run)
    return future.result
