"""Running store requests concurrently: one shared thread pool for every store in the process.

Object-store latency, not CPU, bounds txnlog's protocol, so independent requests (the partition records of one
entry, the tail entries after a checkpoint, a snapshot's partitions) are issued at once. The fault injector of the
calling thread (:mod:`coordinator.faults`) is carried into the worker, so fault-injection tests see every protocol
point wherever it runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from coordinator import faults

T = TypeVar("T")
R = TypeVar("R")

#: Requests in flight at once, process-wide.
MAX_WORKERS = 64

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="txnlog-io")
        return _pool


def pmap(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, run concurrently; results in input order.

    Every call runs to its end before the first exception (by input order) is re-raised, so no request is left
    running behind the caller's back.
    """
    todo = list(items)
    if len(todo) <= 1:
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
    """Start ``fn()`` in the pool; returns a function that waits for its result (re-raising its exception)."""
    injector = faults.current()

    def run() -> R:
        with faults.injected(injector):
            return fn()

    future = _executor().submit(run)
    return future.result
