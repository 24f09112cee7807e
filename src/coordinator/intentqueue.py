"""The queue of intents (``_txn/intents/``) as a writer reads it: which intents are undecided, by name, and their
requests, each read once per process (see :mod:`coordinator.groupcommit`, which decides them); the answers put over
decided ones (:mod:`coordinator.answers`), and the deletion of those left behind.

A mixin of :class:`~coordinator.txnlog.TransactionLog` (through :class:`~coordinator.groupcommit.GroupCommit`),
which holds the state it uses (declared below for type checking only).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator import faults, parallel
from coordinator.answers import answer_bytes, is_answer
from coordinator.decisions import decided_by_name
from coordinator.errors import CorruptLogError, StoreError, UnsupportedFormatError
from coordinator.layout import TXN_INTENTS, intent_path
from coordinator.requests import Request, request_from_bytes

if TYPE_CHECKING:
    from coordinator.records import Item
    from coordinator.state import CoordinatorState
    from coordinator.store import Store

log = logging.getLogger("coordinator.txnlog")  # the transaction log logs under one name

#: Intents decided in one entry at most (keeps entries small under heavy contention).
MAX_INTENTS_PER_ENTRY = 256
#: Decided intents whose deletion (or answer) this process remembers having started (the oldest forgotten first).
_CLEARED_KEPT = 10_000
#: A writer deletes a decided intent it lists only once it was decided at least this many entries before its view:
#: a recent one may be an answer its waiter has not read yet (deleting it early only sends that waiter to the log).
ANSWER_KEPT_ENTRIES = 64
#: Intent ids of transaction requests (commit, abort), the ones answered.
_TXN_INTENTS = ("c-", "x-")


class IntentQueue:
    """Reading the queue of intents; a mixin of :class:`~coordinator.txnlog.TransactionLog`."""

    if TYPE_CHECKING:
        store: Store
        state: CoordinatorState
        _intents: dict[str, Request]
        _decisions: OrderedDict[str, tuple[Item, int]]
        _cleared: OrderedDict[str, None]
        _cleared_lock: threading.Lock

        def _delete_quietly(self, paths: list[str], failed: Callable[[str], None] | None = None) -> None: ...

    def _clear_decided(self, ids: list[str]) -> None:
        """Delete the intents of requests ``ids``, decided, in the background, unless this process already started
        deleting them. Who deletes: the writer of the entry that decided them, or a writer that lists one left
        behind (its writer failed or died first) in a later round; not the requests' waiters, which learn their
        outcome from the log (an intent deleted twice is a request per commit spent for nothing)."""
        with self._cleared_lock:
            new = [rid for rid in ids if rid not in self._cleared]
            for rid in new:
                self._cleared[rid] = None
            while len(self._cleared) > _CLEARED_KEPT:
                self._cleared.popitem(last=False)
        if new:
            parallel.background(functools.partial(self._delete_decided, new))

    def _answerable(self, ids: list[str]) -> list[str]:
        """Of the intents ``ids`` an entry of this process decided, those its answers are for (transaction
        requests); the others are deleted now (their waiters learn their outcomes from the log)."""
        self._clear_decided([rid for rid in ids if rid[:2] not in _TXN_INTENTS])
        return [rid for rid in ids if rid[:2] in _TXN_INTENTS]

    def _answer_intents(self, seq: int, items: list[Item]) -> None:
        """Put the answers of ``items`` of entry ``seq`` over their intents (see :mod:`coordinator.answers`). The
        caller created and proved the entry, and the records each item needs exist. A put that fails leaves the
        intent to its waiter, which then follows the log (and deletes it)."""
        with self._cleared_lock:
            for item in items:
                self._cleared[item.request] = None  # this process deletes none of them: their waiters do
            while len(self._cleared) > _CLEARED_KEPT:
                self._cleared.popitem(last=False)

        def put(item: Item) -> None:
            faults.point("answer.before")
            try:
                self.store.put(intent_path(item.request), answer_bytes(seq, item))
            except StoreError as exc:
                log.debug("answer to %s not written: %s", item.request, exc)
                return
            faults.point("answer.after")

        parallel.pmap(put, items)

    def _delete_decided(self, ids: list[str]) -> None:
        """Delete the intents of ``ids``; one whose delete fails is forgotten, for a later listing to retry."""
        paths = {intent_path(rid): rid for rid in ids}

        def failed(path: str) -> None:
            with self._cleared_lock:
                self._cleared.pop(paths[path], None)

        self._delete_quietly(list(paths), failed)

    def _prefetch(self) -> Callable[[], tuple[list[str], dict[str, Request]]]:
        """Start listing ``_txn/intents/`` and reading the intents in it that are new to this process (caller
        holds the lock), in the background, so a serving writer has the next round's intents in hand when the entry
        it is creating meanwhile returns. Returns a function waiting for ``(names, intents read)``."""
        # a copy: another thread of this process may apply entries to the current state while this runs
        known, st = set(self._intents), self.state.copy()

        def run() -> tuple[list[str], dict[str, Request]]:
            names = self.store.list(TXN_INTENTS)
            new = [rid for rid in self._undecided(names, "", st) if rid not in known][:MAX_INTENTS_PER_ENTRY]
            return names, {rid: r for rid, r in parallel.pmap(self._fetch_intent, new) if r is not None}

        return parallel.background(run)

    def _undecided(self, names: list[str], own: str, st: CoordinatorState | None = None) -> list[str]:
        """The intent ids among ``names`` (a listing of ``_txn/intents/``) not known to be decided, by name (in
        ``st``, by default the current state)."""
        return self._sorted_out(names, own, st)[0]

    def _sorted_out(self, names: list[str], own: str,
                    st: CoordinatorState | None = None) -> tuple[list[str], list[str]]:
        """The intent ids among ``names`` not known to be decided (``own`` left out), and those known to be decided
        long enough ago to be deleted (:data:`ANSWER_KEPT_ENTRIES`)."""
        st = self.state if st is None else st
        undecided, decided = [], []
        for name in names:
            if not name.endswith(".json"):
                continue
            rid = name[:-5]
            known = self._decisions.get(rid)
            if known is not None:
                if known[1] <= st.seq - ANSWER_KEPT_ENTRIES:
                    decided.append(rid)
            elif decided_by_name(rid, st):
                decided.append(rid)
            elif rid != own:
                undecided.append(rid)
        return undecided, decided

    def _waiting(self, names: list[str], own: str, limit: int | None = None) -> list[Request]:
        """The undecided intents among ``names`` (fetched once each, in parallel), oldest name first, at most
        ``limit`` (and :data:`MAX_INTENTS_PER_ENTRY`); the decided ones this process has not deleted yet are deleted
        (left behind by a writer that died or failed to)."""
        undecided, decided = self._sorted_out(names, own)
        self._clear_decided(decided)
        ids = undecided[:MAX_INTENTS_PER_ENTRY if limit is None else min(limit, MAX_INTENTS_PER_ENTRY)]
        self._intents = {rid: r for rid, r in self._intents.items() if rid in ids}
        new = [rid for rid in ids if rid not in self._intents]
        for rid, got in parallel.pmap(self._fetch_intent, new):
            if got is not None:
                self._intents[rid] = got
        return [self._intents[rid] for rid in ids if rid in self._intents]

    def _fetch_intent(self, rid: str) -> tuple[str, Request | None]:
        """Read intent ``rid``; None if it is gone (decided and deleted) or unreadable."""
        path = intent_path(rid)
        try:
            data = self.store.get(path)
            return rid, None if is_answer(data) else request_from_bytes(data, path)
        except FileNotFoundError:
            return rid, None
        except (CorruptLogError, UnsupportedFormatError) as exc:
            log.warning("ignoring intent: %s", exc)
            return rid, None

    def _known_waiting(self, names: list[str], own: str) -> list[Request]:
        """The undecided intents among ``names`` that this process has already read (no request)."""
        return [self._intents[rid] for rid in self._undecided(names, own)[:MAX_INTENTS_PER_ENTRY]
                if rid in self._intents]
