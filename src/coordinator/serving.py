"""Serving the queue from a thread of its own, and requests of the serving process that join it without an intent.

A writer that wins an entry while other requests wait keeps appending entries for them (see
:meth:`~coordinator.groupcommit.GroupCommit._serve`). It does so on a thread of its own, so its caller is answered
as soon as its own commit is (its entry proven, its records written) instead of waiting for the serving to end;
and while the thread serves, the process's next requests are handed to it directly (:meth:`Serving._hand_over`):
the next round decides them with the intents it read, with no intent written and read back. A request handed over
is answered with its decision (its entry proven the log's, its records written, or tried), handed back undecided
when serving stops before deciding it (the caller then tries itself, as it would have), or given the error of an
entry whose outcome is unknown (the caller then learns its outcome from the log).

Threads of one process share entries the same way. A request made while another thread of the process is in a try
of its own (its lock held for a whole try: a read, a conditional write and its proof) starts the serving thread if
none serves, and is handed to it: the requests of a process's threads then go into one entry per round instead of
taking the log's lock in turn, one entry each. A request made while the process's other threads only wait as
intents, or while another process serves the queue (the newest entry decided several requests and was not this
process's), joins that queue instead: a serving thread here would race the writer already serving it, and read
every intent a second time.

Nothing here decides anything differently: the thread builds entries exactly as the caller would have, under the
same lock, and a request is decided only by an entry the log proves.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coordinator import faults, parallel
from coordinator.decisions import Outcome, outcome_of_item, waits
from coordinator.errors import TxnLogError
from coordinator.records import CommitItem, Item, LogEntry
from coordinator.requests import Request

if TYPE_CHECKING:
    from collections.abc import Callable

    from coordinator.state import CoordinatorState

log = logging.getLogger("coordinator.txnlog")

#: How often a request waiting as an intent looks at the log, and a serving writer at an empty queue.
POLL_S = 0.02
#: After winning an entry, a writer keeps appending entries for intents still waiting for at most this long, on a
#: thread of its own: every hand-over to another writer costs the commits waiting meanwhile the idle looks before a
#: waiter takes over (see ``IDLE_POLLS``), so a busy log changes writers seldom.
SERVE_S = 30.0
#: A writer serving the queue stops after this many looks in a row that find no intent waiting.
SERVE_EMPTY_LOOKS = 4
#: A writer serving the queue stops after losing this many races in a row (another writer serves it).
SERVE_LOSSES = 2
#: A process closing its producer lets its serving thread serve the intents still waiting for at most this long
#: (:meth:`Serving.wind_down`): its exit would otherwise leave them to a take-over after idle looks.
WIND_DOWN_S = 2.0
#: ... and waits at most this much longer for the round under way when the time is up (its entry, its records).
LAST_ROUND_S = 5.0


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


class _Answers:
    """The requests a created (and proven) entry decided, answered as the partition records of that entry are
    written: each once none of the partitions its commit published rows in is left. Requests handed over by this
    process are answered at once when there is none (an abort, or a request the entry did not decide, handed
    back), and all of them when the records are done (written, or writing them failed: their callers secure the
    records themselves). Waiting intents get their answers (:mod:`coordinator.answers`) only once their records
    are written: an answer says they are."""

    def __init__(self, entry: LogEntry, handed: list[HandedOver], intents: list[str],
                 put: Callable[[int, list[Item]], None]) -> None:
        self._lock = threading.Lock()
        self._seq, self._put = entry.seq, put
        items = {i.request: i for i in entry.items}
        #: (request, its outcome, the partitions whose records it still waits for)
        self._left: list[tuple[HandedOver, Outcome | None, set[tuple[str, int]]]] = []
        for h in handed:
            item = items.get(h.req.id)
            self._left.append((h, None if item is None else outcome_of_item(item, entry.seq), _parts(item)))
        #: (an intent's deciding item, the partitions whose records it still waits for)
        self._intents = [(items[rid], _parts(items[rid])) for rid in intents if rid in items]
        self._answer(everyone=False)

    def written(self, tp: tuple[str, int]) -> None:
        """The record of ``tp`` is written."""
        with self._lock:
            for _h, _o, parts in self._left:
                parts.discard(tp)
            for _i, parts in self._intents:
                parts.discard(tp)
        self._answer(everyone=False)

    def rest(self) -> None:
        """Answer every request handed over not answered yet (all records written, or writing them failed)."""
        self._answer(everyone=True)

    def _answer(self, *, everyone: bool) -> None:
        with self._lock:
            ready = [x for x in self._left if everyone or not x[2]]
            self._left = [x for x in self._left if not (everyone or not x[2])]
            answered = [item for item, parts in self._intents if not parts]
            self._intents = [x for x in self._intents if x[1]]
        for h, outcome, _parts in ready:
            h.answer(outcome)
        if answered:
            self._put(self._seq, answered)


def _parts(item: Item | None) -> set[tuple[str, int]]:
    """The partitions whose records ``item`` needs before it is answered (those its commit published rows in)."""
    return {(p.topic, p.partition) for p in item.parts if p.rows} if isinstance(item, CommitItem) else set()


class Serving:
    """The serving thread and the requests handed to it; a mixin of :class:`~coordinator.txnlog.TransactionLog`."""

    if TYPE_CHECKING:
        _lock: threading.RLock
        state: CoordinatorState
        _recent: OrderedDict[int, LogEntry]
        _intents: dict[str, Request]
        _waited: OrderedDict[str, int]
        _refreshed: float

        def _outcome(self, req: Request, *, since: int | None = None) -> Outcome | None: ...
        def _catch_up(self) -> None: ...
        def _list_forward(self, *, checked: bool) -> None: ...
        def _prefetch(self) -> Callable[[], tuple[list[str], dict[str, Request]]]: ...
        def _waiting(self, names: list[str], own: str) -> list[Request]: ...
        def _append(self, reqs: list[Request]) -> tuple[LogEntry, list[str]] | None: ...
        def _write_records(self, entry: LogEntry,
                           written: Callable[[tuple[str, int]], None] | None = None) -> None: ...
        def _clear_decided(self, ids: list[str]) -> None: ...
        def _answerable(self, ids: list[str]) -> list[str]: ...
        def _answer_intents(self, seq: int, items: list[Item]) -> None: ...
        def _checkpoint_due(self, seq: int) -> bool: ...
        def _checkpoint_quietly(self, seq: int) -> None: ...

    _serving_lock: threading.Lock
    _serving: bool
    _serving_thread: int | None
    _handed: list[HandedOver]
    _deciders: dict[int, int]
    _trying: int
    #: the newest entry this process created, and when its creation began (monotonic)
    _appended: int
    _appended_at: float

    def _init_serving(self) -> None:
        self._serving_lock = threading.Lock()
        #: notified when serving stops
        self._serving_stopped = threading.Condition(self._serving_lock)
        self._serving = False
        #: since when serving winds down (monotonic), and when it stops at the latest (see wind_down)
        self._wind_down_from = self._wind_down_at = float("inf")
        self._serving_thread = None
        self._handed = []
        #: threads of this process deciding a request themselves (a try, or waiting as an intent): ident -> depth
        self._deciders = {}
        #: of those, how many are in a try (holding the log's lock to read, create an entry and prove it)
        self._trying = 0
        self._appended, self._appended_at = -1, -1e9

    def _deciding_myself(self, delta: int) -> None:
        """Count the calling thread as starting (``+1``) or ending (``-1``) deciding a request itself."""
        with self._serving_lock:
            self._count_decider(delta)

    def _count_decider(self, delta: int) -> None:
        """(caller holds ``_serving_lock``)"""
        me = threading.get_ident()
        depth = self._deciders.get(me, 0) + delta
        if depth > 0:
            self._deciders[me] = depth
        else:
            self._deciders.pop(me, None)

    def _in_try(self, delta: int) -> None:
        """Count the calling thread (a decider) as starting (``+1``) or ending (``-1``) a try."""
        with self._serving_lock:
            self._trying += delta

    @property
    def serving_here(self) -> bool:
        """Whether a thread of this process is serving the queue now: its commits are handed to that thread, whose
        view of the log advances with every round it wins (read without the lock: a hint)."""
        return self._serving

    def wind_down(self, timeout: float | None = None) -> bool:
        """Have this process's serving thread (if one serves) stop once the queue is empty, or ``timeout`` seconds
        from now at the latest, and wait until it has stopped, its entries' records written: a process about to
        exit leaves no intent it could have decided to the other writers' idle take-over. Serving that starts
        later (a commit made after this call) runs as usual. Never raises. ``timeout`` defaults to
        :data:`WIND_DOWN_S`.

        Returns:
            whether no thread serves any more.
        """
        with self._serving_lock:
            if not self._serving:
                return True
            timeout = WIND_DOWN_S if timeout is None else timeout
            now = time.monotonic()
            self._wind_down_from = min(self._wind_down_from, now)
            self._wind_down_at = min(self._wind_down_at, now + timeout)
            return self._serving_stopped.wait_for(lambda: not self._serving, timeout + LAST_ROUND_S)

    def _serve_in_background(self) -> None:
        """Start serving the queue on a thread of its own, unless one already serves."""
        with self._serving_lock:
            if self._serving:
                return
            self._begin_serving()
        parallel.thread(self._serve_then_stop, name="txnlog-serve")

    def _begin_serving(self) -> None:
        """Mark a serving thread as starting, not winding down (caller holds ``_serving_lock``)."""
        self._serving = True
        self._wind_down_from = self._wind_down_at = float("inf")

    def _serve_then_stop(self, *, catch_up: bool = False) -> None:
        error: BaseException | None = None
        self._serving_thread = threading.get_ident()
        try:
            self._serve([], catch_up=catch_up)
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
                self._serving_stopped.notify_all()
            for h in handed:
                h.answer(error=error)

    def _hand_over(self, req: Request) -> HandedOver | None:
        """Hand ``req`` to this process's serving thread, starting one when none serves but another thread of this
        process is in a try of its own (see the module docstring; a thread waiting as an intent for another
        process's serving writer does not count: the caller then joins that writer's queue too, instead of starting
        a second writer that races it). None when none serves and none tries,
        or when the caller is the serving thread or is itself deciding a request (a hook called inside its try: it
        would wait for a thread that waits for its lock): the caller then decides ``req`` itself and is already
        counted as deciding (one step with the check, so threads arriving together do not all decide their own),
        until it calls ``_deciding_myself(-1)``."""
        start = False
        me = threading.get_ident()
        with self._serving_lock:
            if self._serving_thread == me or me in self._deciders or not (self._serving or self._trying) \
                    or (not self._serving and self._served_by_another()):
                # (another process serves the queue: the caller joins it rather than start a writer of this process
                # that would race it)
                self._count_decider(1)
                return None
            if not self._serving:
                self._begin_serving()
                start = True
            h = HandedOver(req)
            self._handed.append(h)
        if start:
            try:
                parallel.thread(functools.partial(self._serve_then_stop, catch_up=True), name="txnlog-serve")
            except Exception as exc:  # noqa: BLE001 - no thread (an interpreter exiting): the caller decides itself
                log.debug("no serving thread: %s", exc)
                with self._serving_lock:
                    self._serving = False
                    self._handed.remove(h)
                    self._count_decider(1)
                return None
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

    def _keep_waiting(self, entry: LogEntry, handed: list[HandedOver]) -> list[HandedOver]:
        """The requests handed over that ``entry`` decided or answers; those it left undecided because each waits
        for an earlier transaction of its producer still undecided (pipelined) stay handed over for the next round
        (caller holds the lock). Handed back instead, each would be handed over again at once, and after
        :data:`~coordinator.groupcommit.HAND_OVERS` tries wait as an intent, as would every later commit of its
        producer waiting behind it."""
        done = {i.request for i in entry.items}
        keep = [h for h in handed if h.req.id not in done and waits(h.req, self.state)]
        if keep:
            self._give_back(keep)
        return [h for h in handed if h not in keep]

    def _written_by_another(self) -> bool:
        """Whether another process created the newest entry read (a hint, read without the lock)."""
        return self.state.seq != self._appended

    def _served_by_another(self) -> bool:
        """Whether another process created the newest entry read and it decided several requests: that process
        serves the queue (a hint, read without the lock). A request handed over otherwise starts a serving thread,
        which reads the log before it serves (``_serve``): the threads of one process arriving while one of them
        tries (a fresh process, whose newest entry read is always another's) are then served together once that
        try won, instead of each trying in turn."""
        return self._written_by_another() and self._served(self.state.seq)

    def _served(self, seq: int) -> bool:
        """Whether entry ``seq`` (read) decided several requests: its writer is serving the queue."""
        entry = self._recent.get(seq)
        return entry is not None and len({i.request for i in entry.items}) > 1

    def _serve(self, pending: list[Callable[[], None]], *, catch_up: bool = False) -> None:
        """After winning an entry, keep appending entries for the intents still waiting, while this process keeps
        winning (for up to :data:`SERVE_S`): the writer that already holds the newest state is the fastest one to
        build the next entry, so the log advances at the pace of one conditional write per entry. The listing of
        intents for the next round runs while the entry of this round is being created, and partition records of
        the served entries are written in the background; ``pending`` (derived work already started) and those
        records are waited for before returning. With ``catch_up`` (serving started for requests handed over, not
        after a win) the log is read first, so the first entry is built on the newest state, and serving does not
        start when another process created the newest entry (read before any intent is)."""
        until = time.monotonic() + SERVE_S
        empty = lost = 0
        with self._lock:
            if catch_up:
                try:
                    self._catch_up()
                except TxnLogError as exc:
                    log.debug("did not start serving: %s", exc)
                    return
                if self._written_by_another():
                    # the try of this process lost: the writer that won serves the queue, or one that lost retries
                    # (_decide_myself); the requests handed over join the queue instead of racing them, and this
                    # thread reads none of the intents
                    return
            listed_from, listing = time.monotonic(), self._prefetch()
        try:
            while time.monotonic() < min(until, self._wind_down_at):
                try:
                    names, fetched = listing()
                    looked_from = listed_from
                    with self._lock:
                        self._intents.update(fetched)
                        if lost:
                            # the entry that won the race: listed, not asked for by name, so a view that fell far
                            # behind while serving jumps to the newest checkpoint at once
                            started = time.monotonic()
                            self._list_forward(checked=True)
                            self._refreshed = started
                            if self._served(self.state.seq):
                                return  # another writer serves the queue now: two would only race each other
                        others = self._waiting(names, "")
                        handed = self._take_handed()
                        try:
                            if (others or handed) and all(waits(r, self.state)
                                                          for r in [*others, *(h.req for h in handed)]):
                                # only pipelined requests whose earlier transactions are decided elsewhere: read
                                # the log for those, keep them for the next round
                                self._give_back(handed)
                                handed, others = [], []
                                self._catch_up()
                            # committers decided by the last entry come back with their next commit soon: a queue
                            # that is empty for a moment is looked at a few more times before serving stops
                            empty = 0 if others or handed else empty + 1
                            # winding down, the queue is served once a listing begun since finds it empty
                            if empty > SERVE_EMPTY_LOOKS or (empty and self._wind_down_from <= looked_from):
                                return
                            # An intent listed now but decided by the entry created below is filtered out next
                            # round (it is decided in the state by then); one written later is in the next listing.
                            listed_from, listing = time.monotonic(), self._prefetch()
                            if handed:
                                self._waited.update((h.req.id, self.state.seq) for h in handed)
                            won = self._append([h.req for h in handed] + others) if others or handed else None
                            if won is not None:
                                handed = self._keep_waiting(won[0], handed)
                        except BaseException as exc:
                            for h in handed:  # they learn from the log whether the entry decided them
                                h.answer(error=exc)
                            raise
                    if not (others or handed):
                        time.sleep(POLL_S)
                        continue
                except TxnLogError as exc:
                    log.debug("stopped appending for waiting intents: %s", exc)
                    return
                if won is None:
                    self._give_back(handed)
                    # One lost race is usually a committer's direct first try, which serves nobody: keep serving.
                    # Losing twice in a row means another writer is serving the queue now.
                    lost += 1
                    if lost >= SERVE_LOSSES:
                        return
                    continue
                lost = 0
                entry, decided = won
                pending.append(parallel.background(
                    functools.partial(self._records_then_answer, entry, handed, tuple(self._answerable(decided)))))
                if self._checkpoint_due(entry.seq):
                    # the checkpoint waits for the records it covers, the next round does not
                    ahead, pending[:] = list(pending), []
                    pending.append(parallel.background(functools.partial(self._checkpoint_after, ahead, entry.seq)))
        finally:
            self._finish_listing(listing)
            self._join(pending)

    def _checkpoint_after(self, pending: list[Callable[[], None]], seq: int) -> None:
        """Write a checkpoint after entry ``seq`` once the partition records being written (``pending``) are."""
        self._join(pending)
        self._checkpoint_quietly(seq)

    def _records_then_answer(self, entry: LogEntry, handed: list[HandedOver], decided: tuple[str, ...] = ()) -> None:
        """Write the records of ``entry`` (a served round's), answering each request handed over that it decided
        as soon as the records of the partitions where it published rows are written, not those of the whole
        entry (a caller whose records are missing after a failure writes them itself: ``secure_records``), and
        each intent it decided that is answered (``decided``: see ``_answerable``) the same way, over its intent
        (``_answer_intents``)."""
        answers = _Answers(entry, handed, list(decided), self._answer_intents)
        try:
            self._write_records(entry, answers.written)
        finally:
            answers.rest()

    @staticmethod
    def _finish_listing(listing: Callable[[], object]) -> None:
        """Wait for a listing started ahead that is no longer needed (no request is left running behind)."""
        try:
            listing()
        except TxnLogError:
            pass

    def _join(self, pending: list[Callable[[], None]]) -> None:
        while pending:
            try:
                pending.pop(0)()
            except (TxnLogError, OSError) as exc:
                log.warning("writing partition records: %s (derived data only; readers compute it)", exc)
