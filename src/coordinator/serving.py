"""Serving the queue from a thread of its own, and requests of the serving process that join it without an intent.

A writer that wins an entry while other requests wait keeps appending entries for them (see
:meth:`~coordinator.groupcommit.GroupCommit._serve`). It does so on a thread of its own, so its caller is answered
as soon as its own commit is (its entry proven, its records written) instead of waiting for the serving to end;
and while the thread serves, the process's next requests are handed to it directly (:meth:`Serving._hand_over`):
the next round decides them with the intents it read, with no intent written and read back. A request handed over
is answered with its decision (its entry proven the log's, its records written, or tried), handed back undecided
when serving stops before deciding it (the caller then tries itself, as it would have), or given the error of an
entry whose outcome is unknown (the caller then learns its outcome from the log).

Nothing here decides anything differently: the thread builds entries exactly as the caller would have, under the
same lock, and a request is decided only by an entry the log proves.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coordinator import faults, parallel
from coordinator.decisions import Outcome, Request, outcome_of_item
from coordinator.records import LogEntry

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("coordinator.txnlog")


@dataclass
class HandedOver:
    """A request handed to the serving thread, and its answer once known."""

    req: Request
    done: threading.Event = field(default_factory=threading.Event)
    outcome: Outcome | None = None
    error: BaseException | None = None

    def answer(self, outcome: Outcome | None = None, error: BaseException | None = None) -> None:
        """Answer the request: its outcome, None (handed back undecided), or the error to raise in its caller."""
        self.outcome, self.error = outcome, error
        self.done.set()


class Serving:
    """The serving thread and the requests handed to it; a mixin of :class:`~coordinator.txnlog.TransactionLog`."""

    if TYPE_CHECKING:
        _lock: threading.RLock

        def _serve(self, pending: list[Callable[[], None]]) -> None: ...
        def _outcome(self, req: Request, *, since: int | None = None) -> Outcome | None: ...

    _serving_lock: threading.Lock
    _serving: bool
    _serving_thread: int | None
    _handed: list[HandedOver]

    def _init_serving(self) -> None:
        self._serving_lock = threading.Lock()
        self._serving = False
        self._serving_thread = None
        self._handed = []

    def _serve_in_background(self) -> None:
        """Start serving the queue on a thread of its own, unless one already serves."""
        with self._serving_lock:
            if self._serving:
                return
            self._serving = True
        parallel.thread(self._serve_then_stop, name="txnlog-serve")

    def _serve_then_stop(self) -> None:
        error: BaseException | None = None
        self._serving_thread = threading.get_ident()
        try:
            self._serve([])
        except BaseException as exc:  # a crash of the thread is one of its process: the requests handed over see it
            error = exc
            # the pools refuse work once the interpreter exits ("cannot schedule new futures after shutdown")
            exiting = isinstance(exc, RuntimeError) and "shutdown" in str(exc)
            if not isinstance(exc, faults.InjectedCrash):
                (log.debug if exiting else log.warning)("serving the queue stopped: %s", exc)
        finally:
            with self._serving_lock:
                self._serving, self._serving_thread = False, None
                handed, self._handed = self._handed, []
            for h in handed:
                h.answer(error=error)

    def _hand_over(self, req: Request) -> HandedOver | None:
        """Hand ``req`` to this process's serving thread; None when none serves, or when the caller is that thread
        (it would wait for itself)."""
        with self._serving_lock:
            if not self._serving or self._serving_thread == threading.get_ident():
                return None
            h = HandedOver(req)
            self._handed.append(h)
            return h

    def _take_handed(self) -> list[HandedOver]:
        """The requests handed over since the last round (caller holds the lock); those already decided (a retry)
        are answered at once."""
        with self._serving_lock:
            handed, self._handed = self._handed, []
        todo: list[HandedOver] = []
        rest = list(handed)
        try:
            while rest:
                got = self._outcome(rest[0].req)
                h = rest.pop(0)
                if got is not None:
                    h.answer(got)
                else:
                    todo.append(h)
        except BaseException:
            self._give_back(todo + rest)
            raise
        return todo

    def _give_back(self, handed: list[HandedOver]) -> None:
        """Requests a round did not decide (it lost the race): the next round tries them first."""
        with self._serving_lock:
            self._handed[:0] = handed

    @staticmethod
    def _answer_from(entry: LogEntry, handed: list[HandedOver]) -> None:
        """Answer the requests handed over from ``entry`` (created and proven the log's): decided there, or handed
        back (nothing left to decide: the caller finds out itself)."""
        items = {i.request: i for i in entry.items}
        for h in handed:
            item = items.get(h.req.id)
            h.answer(None if item is None else outcome_of_item(item, entry.seq))
