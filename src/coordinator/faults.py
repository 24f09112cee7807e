"""Crash points inside the protocol, for fault-injection tests.

Production code calls :func:`point` before and after every store write of the protocol. By default nothing
happens. A test installs an injector (:func:`install`) that may raise :class:`InjectedCrash` at chosen points to
simulate a process dying there; the injected exception derives from ``BaseException`` so no retry loop or
``except Exception`` swallows it, exactly as a real crash would not be swallowed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["InjectedCrash", "current", "install", "point", "injected"]


class InjectedCrash(BaseException):
    """A simulated process death at a named protocol point."""


_local = threading.local()
_global: list[Callable[[str], None]] = []


def point(name: str) -> None:
    """Mark a protocol point; an installed injector may raise :class:`InjectedCrash` here."""
    injector = getattr(_local, "injector", None)
    if injector is not None:
        injector(name)
    elif _global:
        _global[0](name)


def install(injector: Callable[[str], None] | None, *, all_threads: bool = False) -> None:
    """Install (or with None remove) the injector for this thread, or for every thread."""
    if all_threads:
        _global.clear()
        if injector is not None:
            _global.append(injector)
    else:
        _local.injector = injector


def current() -> Callable[[str], None] | None:
    """The injector installed for this thread (None: none)."""
    return getattr(_local, "injector", None)


@contextmanager
def injected(injector: Callable[[str], None] | None) -> Iterator[None]:
    """Run a block with ``injector`` installed in this thread."""
    old = getattr(_local, "injector", None)
    _local.injector = injector
    try:
        yield
    finally:
        _local.injector = old
