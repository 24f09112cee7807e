"""Group commit: how :class:`~coordinator.txnlog.TransactionLog` gets a request decided (see ``docs/design.md``).

* **Submitting** a request (:meth:`GroupCommit.submit`) builds the next entry from it and from every waiting
  intent, and creates it; a writer that loses the race publishes its request as an intent, backs off with jitter and
  usually finds it decided by the winner. The entry's creation is the commit point of everything in it.
* **Serving the queue**: a writer that wins an entry while others wait keeps appending entries for the intents
  still waiting, for a while (:meth:`~coordinator.serving.Serving._serve`).

A mixin of :class:`~coordinator.txnlog.TransactionLog`, which holds the state it uses (declared below for type
checking only).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator import faults, parallel
from coordinator.answerwait import AnswerWaits
from coordinator.decisions import INTENT_KINDS, Outcome, decide, outcome_of_item, waits
from coordinator.errors import (
    CommitStateUnknownError,
    ConcurrentCommitError,
    CorruptLogError,
    StoreError,
    TxnLogError,
)
from coordinator.intentqueue import IntentQueue
from coordinator.layout import (
    TXN_INTENTS,
    intent_path,
    txn_log_path,
)
from coordinator.probe import ensure_format, probe_conditional_writes
from coordinator.records import Item, LogEntry, item_partitions
from coordinator.requests import Request, TxnRequest, request_bytes
from coordinator.serving import POLL_S, Serving
from coordinator.state import CoordinatorState
from coordinator.store import Store

log = logging.getLogger("coordinator.txnlog")  # the transaction log logs under one name

#: A submit gives up after this long losing races (ConcurrentCommitError).
SUBMIT_BUDGET_S = 120.0
#: A first attempt right after reading the log (opening it, say) does not read it again.
JUST_READ_S = 0.2
#: A waiting request tries to append itself only after the log stood still for this many looks (longer than one
#: round of the writer serving the queue: list, read intents, write).
IDLE_POLLS = 4
#: ... and only when the log stood still for three times its recent gap between entries, or this long.
TAKE_OVER_MAX_S = 1.0
#: A request handed back undecided (the serving thread stopped first) is handed over again at most this often.
HAND_OVERS = 8
#: How long a pipelined request waits behind a transaction its process gave up deciding (see GroupCommit.abandon).
ABANDONED_WAIT_S = 5.0
#: Requests whose first intent seq this process remembers for their retries (the oldest forgotten first).
_WAITED_KEPT = 10_000
#: The one quick retry of a writer that lost a race reads at most this many of the intents waiting (oldest name
#: first): the writers that lost it retry at about the same moment, and each reading every intent (hundreds when
#: many processes start at once) is most of what they spend; the one that wins serves the rest next.
QUICK_RETRY_INTENTS = 16


def _now_ms(store: Store) -> int:
    """The store's time (:func:`coordinator.clock.store_now_ms`: no request once this process has read the store's
    clock), looked up at call time (benchmarks replace it with a simulated clock)."""
    from coordinator import clock

    return clock.store_now_ms(store)


class GroupCommit(IntentQueue, Serving, AnswerWaits):
    """Submitting requests and serving the queue of intents (see the module docstring); a mixin of
    :class:`~coordinator.txnlog.TransactionLog`."""

    if TYPE_CHECKING:
        store: Store
        group_commit: bool
        state: CoordinatorState
        _lock: threading.RLock
        _opened: bool
        _recent: OrderedDict[int, LogEntry]
        _decisions: OrderedDict[str, tuple[Item, int]]
        _intents: dict[str, Request]
        _refreshed: float
        _unproven: list[LogEntry]
        _suspects: dict[int, LogEntry]
        _waited: OrderedDict[str, int]
        _abandoned: OrderedDict[tuple[int, int, int], float]
        _jumped_at: int
        _probed: bool
        _intents_ahead: tuple[float, Callable[[], list[str]]] | None
        _ahead_lock: threading.Lock
        _read_ahead: Callable[[list[LogEntry]], list[Callable[[], object]]] | None

        # reading the log (TransactionLog)
        def _open(self) -> None: ...
        def _catch_up(self) -> None: ...
        def _list_forward(self, *, checked: bool) -> None: ...
        def _remember(self, entry: LogEntry, *, proven: bool = True) -> None: ...
        _entry_gap: float
        def _outcome(self, req: Request, *, since: int | None = None) -> Outcome | None: ...

        # proving entries the log's (LogProof)
        def _prove(self) -> bool: ...
        def _created_is_the_logs(self, entry: LogEntry) -> bool: ...
        def _settle_suspects(self) -> None: ...

        # derived work (LogCheckpoints)
        def _after_win(self, entry: LogEntry, decided: list[str]) -> None: ...
        def _after_win_later(self, entry: LogEntry, decided: list[str]) -> Callable[[], None]: ...
        def _write_records(self, entry: LogEntry,
                           written: Callable[[tuple[str, int]], None] | None = None) -> None: ...
        def _records_ahead(self, request: str) -> Callable[[list[LogEntry]], list[Callable[[], object]]]: ...
        def _checkpoint_due(self, seq: int) -> bool: ...
        def _checkpoint_quietly(self, seq: int) -> None: ...

    def abandon(self, pid: int, epoch: int, n: int) -> None:
        """Say that this process gave up deciding transaction ``n`` of producer ``pid`` at ``epoch`` (its abort
        failed on the store every time it was tried). A pipelined request of this process waiting behind it
        (:attr:`~coordinator.requests.TxnRequest.after`) waits :data:`ABANDONED_WAIT_S` longer (an intent of the
        abort may still be decided, once the store lets it), then stops with CommitStateUnknownError instead of
        waiting out its budget, and so, at once, do those behind that one. Only a matter of time: the requests
        stay undecided (never committed before ``n`` is) until decided by the log or the producer's resync."""
        with self._lock:
            self._abandoned[(pid, epoch, n)] = time.monotonic()
            while len(self._abandoned) > _WAITED_KEPT:
                self._abandoned.popitem(last=False)

    def _behind_abandoned(self, req: Request) -> bool:
        """Whether ``req`` waits behind a transaction this process gave up deciding at least
        :data:`ABANDONED_WAIT_S` ago (see :meth:`abandon`); if so, ``req`` is given up too."""
        if not isinstance(req, TxnRequest) or req.after < 0:
            return False
        with self._lock:
            since = self._abandoned.get((req.pid, req.epoch, req.after))
            if since is None or time.monotonic() - since < ABANDONED_WAIT_S:
                return False
            self._abandoned[(req.pid, req.epoch, req.n)] = -1e9
            return True

    def list_intents_ahead(self) -> None:
        """Start listing ``_txn/intents/`` now, for a request about to be submitted whose caller first has other
        requests to make (a producer staging its last segment): the first try of the next :meth:`submit` within
        :data:`JUST_READ_S` uses this listing instead of making its own. Only a matter of time: a listing made
        earlier misses only intents written since, which the next entry decides."""
        if not self.group_commit or self._serving or self.answered_lately:
            # (read without the lock: a cost choice) the request will be handed to the serving thread, or go
            # straight to the queue. Another thread of this process deciding a request now (a commit of the same
            # producer still in flight, say) says little: its try is usually over by the time this one submits
            return
        with self._ahead_lock:
            if self._intents_ahead is None:
                self._intents_ahead = (time.monotonic(), parallel.start(lambda: self.store.list(TXN_INTENTS)))

    def _intents_listing(self, fresh: bool) -> Callable[[], list[str]]:
        """The listing of ``_txn/intents/`` for a try (caller holds the lock): the one started ahead, if this is a
        first try and it started within :data:`JUST_READ_S`, else a new one."""
        with self._ahead_lock:
            ahead, self._intents_ahead = self._intents_ahead, None
        if ahead is not None:
            if fresh and time.monotonic() - ahead[0] < JUST_READ_S:
                started = ahead[1]

                def listing() -> list[str]:
                    try:
                        return started()
                    except TxnLogError:  # only a listing made early: this try makes its own
                        return self.store.list(TXN_INTENTS)

                return listing
            self._finish_listing(ahead[1])
        return parallel.start(lambda: self.store.list(TXN_INTENTS))

    def submit(self, req: Request) -> Outcome:
        """Get ``req`` decided.

        First one direct try, unless other intents are already waiting: build the next entry from ``req`` and every
        waiting intent, and create it. If another writer took that entry, or others were queued, ``req`` (a commit,
        abort or init request) is published as an intent and this process waits for a writer to decide it, looking
        at the log every ~``POLL_S`` seconds; only when the log has not moved for :data:`IDLE_POLLS` to twice as
        many looks (drawn per request) does it try to append itself, with the intents it already read (so waiting
        writers do not race the one serving the queue, nor all take over at once). A writer that wins an entry
        keeps serving the queue for a while (:meth:`_serve`). Other requests retry with exponential backoff and
        full jitter.

        Returns:
            the outcome (see :class:`~coordinator.decisions.Outcome`).
        Raises:
            CommitStateUnknownError: the store could not say whether the deciding entry was written, or failed (or
                the log turned out damaged) after ``req`` was published as an intent (another process may still
                decide it), or while a retry of ``req`` was learning what an earlier try decided.
            ConcurrentCommitError: undecided after :data:`SUBMIT_BUDGET_S` seconds.
            StoreError, CorruptLogError: the store failed or the log is damaged (``req`` was not decided).
            UnsupportedStoreError: the store does not honour conditional writes (nothing was written).
        """
        if not self._probed:  # the last guard: every writing path probed before it wrote anything
            probe_conditional_writes(self.store)
            self._probed = True
        intentable = self.group_commit and req.kind in INTENT_KINDS
        counted = False
        handovers = 0
        while intentable and req.id not in self._waited and not counted and handovers < HAND_OVERS:
            # a first try while this process serves the queue, or while another of its threads decides a request
            # itself: the serving thread's next round decides it (one that stops first hands it back, and the next
            # serving thread may take it)
            result, counted = self._handed_over(req)
            if result is not None:
                return result
            handovers += 1
        if not counted:
            self._deciding_myself(1)
        try:
            return self._decide_myself(req, intentable)
        finally:
            self._deciding_myself(-1)

    def _decide_myself(self, req: Request, intentable: bool) -> Outcome:
        """:meth:`submit` after the hand-over: tries, the intent, and the wait (same contract)."""
        # an earlier try of this same request got as far as it may be decided (a retry after an unknown outcome)
        tried = req.id in self._waited
        wrote_intent = False
        intent_seq = -1
        attempt = 0
        queued = False
        start = time.monotonic()
        last_seq, idle = -2, 0
        soon = False  # the one quick retry after queueing behind a lost race
        moved_at = time.monotonic()  # when this wait last saw the log move
        looked = float("inf")  # the last look at the log this wait took into account (its own or another thread's)
        # waiters that saw the log stand still at the same moment do not all take over at once
        patience = IDLE_POLLS + random.randint(0, IDLE_POLLS)
        # a transaction request waiting as an intent first looks for its answer (coordinator.answers), following
        # the log only when none comes in time; one this process sends while the log is busy goes straight there
        answerable = intentable and isinstance(req, TxnRequest)
        answering, intent_at = False, 0.0
        straight = answerable and not tried and self.answered_lately and not self._serving
        while True:
            try:
                if wrote_intent and answering and idle < patience:
                    won, result, answering = None, *self._look_for_answer(req)
                elif wrote_intent and idle < patience:
                    with self._lock:
                        # (threads of one process waiting at once look in turn, not each every time; none while
                        # a thread of the process serves the queue: its rounds keep the view current, and a
                        # look would hold the log's lock against its next round)
                        if self._refreshed <= looked and not self._serving:
                            # the records of the entry deciding req are looked for while it is proven
                            self._read_ahead = self._records_ahead(req.id)
                            try:
                                self._catch_up()
                            finally:
                                self._read_ahead = None
                        looked = self._refreshed
                        won, result = None, self._outcome(req, since=intent_seq)
                elif straight:
                    straight, won, result, queued = False, None, None, True
                else:
                    self._in_try(1)
                    try:
                        limit = QUICK_RETRY_INTENTS if soon else None
                        won, result, queued = self._attempt(req, intentable, queue=intentable and not wrote_intent,
                                                            fresh=attempt == 0 or soon, fetch=not wrote_intent or soon,
                                                            limit=limit)
                    finally:
                        self._in_try(-1)
            except CommitStateUnknownError:
                # Did the ambiguous write land? If the log can be read, it says so; an entry that did not land
                # decided nothing, and trying again is safe (a request is decided at most once).
                readable, result = self._learn(req)
                if not readable:
                    raise
                won = None
            except (StoreError, CorruptLogError) as exc:
                if wrote_intent:  # the intent may still be decided (once the store answers, or the log is repaired)
                    raise CommitStateUnknownError(
                        f"the store failed or the log is damaged while request {req.id} was waiting to be decided; "
                        f"it may still be: {exc}") from exc
                if tried:  # not "not decided": an earlier try may have decided it
                    raise CommitStateUnknownError(
                        f"the store failed or the log is damaged while learning whether an earlier try decided "
                        f"request {req.id}: {exc}") from exc
                raise
            if result is not None:
                self._waited.pop(req.id, None)
                if wrote_intent and won is not None:
                    self._clear_decided([req.id])  # the writer of the entry that decided it deletes the others
                elif wrote_intent:
                    # answered over its intent, or learned from the log: its waiter deletes it (a writer answers
                    # the intents it decides instead of deleting them)
                    self._answered(time.monotonic() - intent_at, from_answer=result.secured)
                    parallel.background(functools.partial(self._delete_quietly, [intent_path(req.id)]))
                if won is not None:
                    if intentable and (won[1] or wrote_intent):
                        # others are waiting: keep the log moving for them at once, on a thread of its own, while
                        # this entry's records are written (the caller is answered once they are)
                        own = self._after_win_later(*won)
                        self._serve_in_background()
                        self._join([own])
                    else:
                        self._after_win(*won)
                return result
            if self._behind_abandoned(req):
                raise CommitStateUnknownError(
                    f"request {req.id} follows a transaction of its producer whose abort failed on the store every "
                    "time it was tried: it stays undecided (never committed before that one is) until the producer "
                    "resyncs (abort_transaction())")
            attempt += 1
            if intentable and not wrote_intent:
                intent_seq = self._waited.setdefault(req.id, self.state.seq)
                while len(self._waited) > _WAITED_KEPT:
                    self._waited.popitem(last=False)
                wrote_intent = True  # from here on the intent may exist, even if the put below fails
                answering, intent_at = answerable, time.monotonic()
                faults.point("intent.before")
                try:
                    self.store.put(intent_path(req.id), request_bytes(req))
                except StoreError as exc:
                    # applied or not, unknown: wait as if it were there; if it is not, the idle take-over below
                    # decides the request anyway
                    log.debug("intent %s may not be written: %s", req.id, exc)
                faults.point("intent.after")
            if time.monotonic() - start > SUBMIT_BUDGET_S:
                msg = f"request {req.id} was not decided within {SUBMIT_BUDGET_S:.0f} s"
                if wrote_intent:
                    raise CommitStateUnknownError(msg + "; its intent may still be decided")
                raise ConcurrentCommitError(msg + "; the store is too contended")
            if wrote_intent and attempt == 1 and not queued:
                # Just queued after a lost race: one more try soon (jittered), unless the log moves again
                # meanwhile (then a writer is making progress and will serve the queue). A request queued behind
                # others already waiting is not retried: a writer is serving them, and racing it only slows the
                # log down.
                try:
                    with self._lock:
                        self._catch_up()  # the entry that won the race
                    lost_at = self.state.seq
                    time.sleep(random.uniform(0, 2.5) * POLL_S)
                    with self._lock:
                        self._catch_up()
                except (StoreError, CorruptLogError) as exc:
                    raise CommitStateUnknownError(
                        f"the store failed or the log is damaged while request {req.id} was waiting to be decided; "
                        f"it may still be: {exc}") from exc
                idle = patience if self.state.seq == lost_at else 0
                # the writers that lost that race queued at the same moment: the one retrying first decides every
                # intent it lists, instead of each deciding its own in an entry of its own (then all serving)
                soon = idle == patience
                last_seq = self.state.seq
            elif wrote_intent and answering:
                waited = time.monotonic() - intent_at
                if waited > self._answer_patience():
                    # no answer in time: follow the log from here (its idle looks start now)
                    answering, idle, moved_at = False, 0, time.monotonic()
                else:
                    self._pause_before_look(waited)
            elif wrote_intent:
                soon = False
                idle = idle + 1 if self.state.seq == last_seq else 0
                if self.state.seq != last_seq:
                    moved_at = time.monotonic()
                elif idle >= patience and time.monotonic() - moved_at < min(TAKE_OVER_MAX_S, 3 * self._entry_gap):
                    idle = patience - 1  # the log is slow, not standing still: look again before taking over
                last_seq = self.state.seq
                time.sleep(random.uniform(0.5, 1.5) * POLL_S)
            else:
                time.sleep(random.uniform(0, min(0.2, 0.002 * 2 ** min(attempt, 10))))

    def _handed_over(self, req: Request) -> tuple[Outcome | None, bool]:
        """Have this process's serving thread decide ``req`` (see :mod:`coordinator.serving`). Returns its outcome,
        or None when no thread serves, or it stopped before deciding ``req`` (the caller then tries itself); and
        whether the caller is already counted as deciding itself (see :meth:`Serving._hand_over`).

        Raises:
            CommitStateUnknownError: the entry that may decide ``req`` was created but could not be proven, and the
                log cannot be read to learn whether it decided it.
            StoreError, CorruptLogError: the same, when the store or log failed otherwise.
        """
        handed = self._hand_over(req)
        if handed is None:
            return None, True
        if not handed.done.wait(SUBMIT_BUDGET_S):
            raise CommitStateUnknownError(f"request {req.id} was handed to this process's serving thread, which did "
                                          f"not answer within {SUBMIT_BUDGET_S:.0f} s; it may still decide it")
        if handed.error is not None:
            if isinstance(handed.error, faults.InjectedCrash):
                raise handed.error
            readable, result = self._learn(req)
            if not readable:
                raise CommitStateUnknownError(
                    f"the entry that may decide request {req.id} could not be proven the log's, and the log cannot "
                    f"be read: {handed.error}") from handed.error
            return result, False
        if handed.outcome is not None:
            self._waited.pop(req.id, None)
        return handed.outcome, False

    def _learn(self, req: Request) -> tuple[bool, Outcome | None]:
        """After an ambiguous write: read the log (a few tries). Returns (whether the log could be read, the
        outcome of ``req`` if it was decided)."""
        for i in range(3):
            try:
                with self._lock:
                    self._catch_up()
                    return True, self._outcome(req)
            except (StoreError, CorruptLogError):
                time.sleep(0.05 * (i + 1))
        return False, None

    def _attempt(
        self, req: Request, intentable: bool, *, queue: bool = False, fresh: bool = False, fetch: bool = True,
        limit: int | None = None,
    ) -> tuple[tuple[LogEntry, list[str]] | None, Outcome | None, bool]:
        """One try: refresh, decide ``req`` and the waiting intents (at most ``limit`` read, oldest name first),
        create the next entry. With ``queue``, do not try when other intents are already waiting (a writer serving
        them will decide ``req`` too). Without ``fetch`` (a waiting request taking over an idle log), only intents
        already read are decided with ``req``: a take-over may lose the race to another waiter, and if it wins it
        serves the rest next.

        Returns:
            ``((entry, intents it decided), outcome, False)`` when this call created the entry;
            ``(None, outcome, False)`` when ``req`` was already decided; ``(None, None, queued)`` when another
            writer took the entry (``queued`` False) or others wait (``queued`` True).
        """
        with self._lock:
            listing = self._intents_listing(fresh) if intentable else None
            try:
                if not self._opened:
                    self._open()
                elif not (fresh and time.monotonic() - max(self._refreshed, self._appended_at) < JUST_READ_S):
                    # (an entry this process created is as good a read as a refresh: the log ended there when it
                    # was created; a view that is stale after all only loses the race, and the next try reads)
                    self._catch_up()
            finally:
                names = listing() if listing is not None else []
            got = self._outcome(req)
            if got is not None:
                return None, got, False
            if queue and self._undecided(names, req.id):
                return None, None, True
            if waits(req, self.state):
                # a pipelined request whose earlier transaction is still undecided: it waits as an intent, decided
                # with or after that one by whoever decides it (never answered "noop"). One taking over an idle
                # log serves the queue meanwhile: what it waits for may be an intent nobody else is left to decide
                if not (queue or fetch):
                    self._serve_in_background()
                return None, None, True
            others = self._waiting(names, req.id, limit) if fetch else self._known_waiting(names, req.id)
            if decide(req, self.state.copy(), max(_now_ms(self.store), self.state.ts)) is None:
                return None, Outcome("noop", reason=f"request {req.id} has nothing left to decide"), False
            # from here on the request may be decided by an entry after the view (a create whose reply is lost, a
            # truncation passing this process by): its retries look for the decision from there
            self._waited.setdefault(req.id, self.state.seq)
            while len(self._waited) > _WAITED_KEPT:
                self._waited.popitem(last=False)
            won = self._append([req, *others])
            if won is None:
                return None, None, False
            entry, decided = won
            decided = [r for r in decided if r != req.id]
            mine = next((i for i in entry.items if i.request == req.id), None)
            if mine is None:
                return (entry, decided), Outcome("unknown", reason=f"request {req.id} was decided out of view"), False
            return (entry, decided), outcome_of_item(mine, entry.seq), False

    def _append(self, reqs: list[Request]) -> tuple[LogEntry, list[str]] | None:
        """Create the next entry deciding ``reqs`` (caller holds the lock, state current), and prove it the log's
        before anything uses it (:meth:`~coordinator.logproof.LogProof._created_is_the_logs`). None if another writer
        took it (its entry is read on the next refresh), or if the created object turned out not to be the log's
        entry (the view then stands at the newest checkpoint).

        Raises:
            CommitStateUnknownError: the entry was created but the store failed while proving it.
            StoreError: the store failed before the entry was created.
        """
        if self._suspects:
            self._settle_suspects()
        if self._unproven and not self._prove():
            return None  # a refresh that failed half way left entries unproven: never build on them
        ts = max(_now_ms(self.store), self.state.ts)
        seq = self.state.seq + 1
        scratch = self.state.copy()
        items: list[Item] = []
        touched: dict[tuple[str, int], int] = {}
        todo = list(reqs)
        while todo:
            # a pipelined request waiting for an earlier one of this batch is decided after it, in the same entry
            waiting = [r for r in todo if waits(r, scratch)]
            later = {id(r) for r in waiting}
            for r in todo:
                if id(r) in later:
                    continue
                item = decide(r, scratch, ts)
                if item is None:
                    continue
                for tp in item_partitions(item):
                    touched.setdefault(tp, scratch.partition(*tp).next_idx)
                scratch.apply_item(item, ts)
                items.append(item)
            todo = waiting if len(waiting) < len(todo) else []
        if not items:
            return None
        entry = LogEntry(seq, ts, uuid.uuid4().hex, tuple(items), tuple((t, p, idx) for (t, p), idx in touched.items()),
                         prev=self.state.token_of(self.state.seq) or "")
        scratch.finish(entry)
        if seq == 0:
            ensure_format(self.store)
        faults.point("txnlog.entry.before")
        begun = time.monotonic()
        if not self.store.put_if_absent(txn_log_path(seq), entry.to_bytes()):
            return None
        faults.point("txnlog.entry.after")
        if not self._created_is_the_logs(entry):
            return None
        self.state = scratch
        self._appended, self._appended_at = entry.seq, begun
        self._remember(entry)
        decided = [i.request for i in items if i.request in self._intents]
        for rid in decided:
            self._intents.pop(rid, None)
        return entry, decided
