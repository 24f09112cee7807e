"""Per-process clock skew for the history workload: every simulated process (a worker; its pool threads included)
reads the host's wall clock shifted by its own offset, hours or days in either direction.

The skew is injected where the core reads the *host* clock: :func:`host_clocks` replaces the ``time`` module seen by
every loaded module of ``coordinator``, ``txnsink`` and ``txnsource`` with :class:`HostTime`, whose ``time()`` and
``time_ns()`` add the offset of the process that calls (``txnlog.now_ms``, producer times, compaction's
``staged_at``, retention's and expiry's "now" all go through it). The store's own clock is not skewed: the backends
(``coordinator.backends``) and ``coordinator.store`` keep the real module, so object times and ``Store.now()`` stay
the store's. Monotonic clocks are not skewed either (a pause is a fault of its own).

Which process calls is known from the fault injector the thread runs under (:func:`coordinator.faults.current`,
carried into the core's pool threads): a worker's injector is its bound method, and the worker's
``clock_skew_ms`` is the offset. Fault-free observers and the final read run with no injector: no skew.
"""

from __future__ import annotations

import contextlib
import sys
import time as _time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from coordinator import faults

HOUR_MS = 3600 * 1000
DAY_MS = 24 * HOUR_MS
#: Packages whose host-clock reads are skewed; modules below these prefixes read the store's clock and are not.
SKEWED = ("coordinator", "txnsink", "txnsource")
STORE_SIDE = ("coordinator.backends", "coordinator.store")


def skew_ms() -> int:
    """The clock offset of the simulated process running this thread (0 outside any worker)."""
    owner = getattr(faults.current(), "__self__", None)
    return int(getattr(owner, "clock_skew_ms", 0))


class HostTime(ModuleType):
    """The ``time`` module as a skewed process sees it: wall-clock reads shifted by :func:`skew_ms`, everything
    else the real module's."""

    def __init__(self) -> None:
        super().__init__("time")

    def __getattr__(self, name: str) -> Any:
        return getattr(_time, name)

    @staticmethod
    def time() -> float:
        return _time.time() + skew_ms() / 1000

    @staticmethod
    def time_ns() -> int:
        return _time.time_ns() + skew_ms() * 1_000_000


HOST_TIME = HostTime()


def _skewable(name: str) -> bool:
    return name.split(".", 1)[0] in SKEWED and not name.startswith(STORE_SIDE)


@contextlib.contextmanager
def host_clocks() -> Iterator[None]:
    """Within the block, the loaded core modules read the wall clock through :data:`HOST_TIME` (restored after).
    Modules loaded later are patched by a nested call (each worker makes one)."""
    patched: list[ModuleType] = []
    for name, mod in list(sys.modules.items()):
        if mod is not None and _skewable(name) and getattr(mod, "time", None) is _time:
            mod.time = HOST_TIME  # type: ignore[attr-defined]
            patched.append(mod)
    try:
        yield
    finally:
        for mod in patched:
            mod.time = _time  # type: ignore[attr-defined]


def draw_skew(rng_value: float, magnitude: float, ahead: bool) -> int:
    """A skew from three draws in [0, 1): none (a third of the time), hours (1-23) or days (1-10), ahead or behind."""
    if rng_value < 1 / 3:
        return 0
    sign = 1 if ahead else -1
    if rng_value < 2 / 3:
        return sign * int(HOUR_MS * (1 + 22 * magnitude))
    return sign * int(DAY_MS * (1 + 9 * magnitude))


def describe(skew: int) -> str:
    """``+3.0 h``, ``-2.5 d``."""
    if abs(skew) >= DAY_MS:
        return f"{skew / DAY_MS:+.1f} d"
    return f"{skew / HOUR_MS:+.1f} h"
