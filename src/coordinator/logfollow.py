"""Following the transaction log: reading what was appended after a process's view, by name when the view is
recent and by listing otherwise, jumping to the newest checkpoint over entries truncated or damaged (see
``docs/design.md``, "Reading" and "What timing can and cannot do").

Entries read are applied to the view only provisionally: each must link to the one before it, and they are proven
the log's (:mod:`coordinator.logproof`) before any decision is taken from them.

A mixin of :class:`~coordinator.txnlog.TransactionLog`, which holds the state it uses (declared below for type
checking only).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator import parallel
from coordinator.errors import CorruptLogError, StoreError
from coordinator.layout import LAST_CHECKPOINT, TXN_LOG, parse_seq, seq_name
from coordinator.logcheckpoint import recent_s
from coordinator.records import LogEntry
from coordinator.state import CoordinatorState
from coordinator.store import Store

#: A refresh asks for at most this many next entries by name at once: one more than its previous refresh found, so a
#: process following a busy log reads the entries appended between two looks in one round, and an idle one asks
#: for one.
READ_AHEAD_ENTRIES = 8
#: Listings a refresh makes while the log keeps moving past its proof before it starts from the newest checkpoint.
_PROOF_ROUNDS = 8


class LogFollow:
    """Reading what is new in the log (see the module docstring); a mixin of
    :class:`~coordinator.txnlog.TransactionLog`."""

    if TYPE_CHECKING:
        store: Store
        state: CoordinatorState
        jump: int
        _refreshed: float
        _found_last: int
        _unproven: list[LogEntry]
        _jumped_at: int
        _jumped_token: str | None

        def _read_entry(self, seq: int) -> LogEntry | CorruptLogError | None: ...
        def _links(self, entry: LogEntry) -> bool: ...
        def _apply(self, entry: LogEntry) -> None: ...
        def _prove(self) -> bool: ...
        def _start_proof(self) -> Callable[[], tuple[int, list[int]]]: ...
        @staticmethod
        def _drop_proof(started: Callable[[], tuple[int, list[int]]] | None) -> None: ...
        def _prove_started(self, started: Callable[[], tuple[int, list[int]]] | None) -> bool: ...
        def _jump_over(self, seq: int, damage: CorruptLogError) -> None: ...
        def _skip_damaged(self, where: str, exc: CorruptLogError) -> None: ...
        def _damaged_note(self, *, hint: bool) -> str: ...
        def _decode_checkpoint(self, data: bytes, where: str) -> CoordinatorState: ...
        def _read_last_checkpoint(self, above: int = -1) -> CoordinatorState | None: ...
        def _reset(self, st: CoordinatorState) -> None: ...

    def _catch_up(self) -> None:
        """Read what is new and prove it (see :mod:`coordinator.logproof`).

        How recent the view is counts from the start of the refresh that made it (a refresh that paused inside a
        read took its view before the pause), so a process that paused anywhere lists the log next instead of
        asking by name: only a view read within ``RECENT_S`` takes "no next entry" for "nothing new". That is a
        matter of seeing every commit acknowledged before a read began, never of safety."""
        started = time.monotonic()
        if self.state.seq >= 0 and started - self._refreshed < recent_s():
            # Read recently: asking for the next entry by name is cheaper than a listing when nothing is new (the
            # common case for a process waiting on the log). Only a cost choice: an entry found is used only once
            # proven, and a view a truncation passed by finds out when it next lists or writes.
            seqs = range(self.state.seq + 1, self.state.seq + 2 + min(self._found_last, READ_AHEAD_ENTRIES - 1))
            got = parallel.pmap(self._read_entry_ahead, seqs)
            nxt = got[0]
            # (entries a refresh that failed half way applied are proven first: never a view returned unproven)
            if nxt is None and not self._unproven and time.monotonic() - self._refreshed < recent_s():
                self._refreshed = started  # answered within the window: no number after the view was freed
                self._found_last = 0
                return
            if nxt is None:
                # the read took too long (a pause before the store applied it): "no such entry" may be about a
                # number a truncation freed meanwhile
                self._list_forward(checked=False)
            elif isinstance(nxt, LogEntry) and self._links(nxt):
                # the entries read ahead are applied while each links to the one before (the listing below finds
                # whatever they left out, as it would after one entry)
                found = 0
                for entry in got:
                    if not isinstance(entry, LogEntry) or not self._links(entry):
                        break
                    self._apply(entry)
                    found += 1
                self._found_last = found
                if not (found < len(got) and got[found] is None and self._prove()):
                    # (a read by name that ended on a number with no entry has nothing to list: once proven, the
                    # entries read are the view, and a later one is the next look's)
                    self._list_forward(checked=True)
            else:
                self._list_forward(checked=False)
        else:
            self._list_forward(checked=False)
        self._refreshed = started

    def _read_entry_ahead(self, seq: int) -> LogEntry | CorruptLogError | StoreError | None:
        """:meth:`_read_entry` for a refresh by name: an entry after the next one that the store fails to give is
        only not read ahead (returned as the error, never as None: the listing that follows finds it, whereas None
        says there is no such entry).

        Raises:
            StoreError: the store failed to give the next entry.
        """
        try:
            return self._read_entry(seq)
        except StoreError as exc:
            if seq == self.state.seq + 1:
                raise
            return exc

    def _list_forward(self, *, checked: bool) -> None:
        """Apply the entries listed after the view, jumping to the newest checkpoint over entries truncated.

        A truncation keeps the entry its checkpoint ends at, so a view it passed by lists that entry, sees that it
        does not follow on, and jumps. Unless ``checked`` (the view was read recently, or from the newest
        checkpoint just now), the end of the listing also looks at ``_last.json`` once: in a log truncated by an
        older version of this code, which deleted that entry too, a view it passed by may list nothing after itself,
        or only entries left below the checkpoint by an interrupted truncation. A damaged entry is jumped over to
        a checkpoint that covers it (:meth:`_jump_over`).

        Raises:
            CorruptLogError: a damaged entry no readable checkpoint covers, or a gap none covers (naming them).
        """
        jumped = False
        rounds = 0
        while True:
            rounds += 1
            if rounds > _PROOF_ROUNDS and self._unproven:
                # the log keeps moving past every proof: start from the newest checkpoint instead
                if not self._jump():
                    raise CorruptLogError(f"transaction log entries after {self.state.seq - len(self._unproven)} "
                                          "cannot be proven to be the log's")
                jumped, rounds = True, 0
            after = seq_name(self.state.seq) if self.state.seq >= 0 else None
            # Entries to prove: their proof starts with this listing (it is made after they were read), so that
            # when nothing more is listed they are proven at once; when more is, it was only one request too many.
            early = self._start_proof() if self._unproven else None
            try:
                seqs = [q for n in self.store.list(TXN_LOG, start_after=after, limit=self.jump + 1)
                        if (q := parse_seq(n)) is not None]
            except BaseException:
                self._drop_proof(early)
                raise
            if not seqs:
                if not (checked or jumped) and self._jump_to_last():
                    self._drop_proof(early)
                    jumped = True
                    continue
                if self._prove_started(early):
                    return
                continue
            self._drop_proof(early)
            # entries that do not follow on are below a checkpoint (left by an interrupted truncation)
            dense = next((i for i, (a, b) in enumerate(itertools.pairwise(seqs), 1) if b != a + 1), len(seqs))
            broken = seqs[0] != self.state.seq + 1 or dense < len(seqs)
            if broken or len(seqs) > self.jump:
                # a gap may remain after a jump: to a `_last.json` a slow writer put back between the view and
                # the truncation; every jump moves the view forward, so jumping again ends
                if (broken or not jumped) and self._jump():
                    jumped = True
                    continue
                if seqs[0] != self.state.seq + 1 or dense < min(len(seqs), self.jump):
                    gap = seqs[0] if seqs[0] != self.state.seq + 1 else seqs[dense]
                    raise CorruptLogError(
                        f"transaction log has a gap: entries are missing before {TXN_LOG}/{seq_name(gap)} and no "
                        f"checkpoint covers them{self._damaged_note(hint=True)}"
                    )
                seqs = seqs[: self.jump]
            entries = parallel.pmap(self._read_entry, seqs)
            for seq, entry in zip(seqs, entries, strict=True):
                if isinstance(entry, CorruptLogError):
                    self._jump_over(seq, entry)
                    jumped = True
                    break
                if entry is None or not self._links(entry):
                    # deleted by truncation since the listing, or not linked to the view (a ghost: an entry
                    # created under a number a truncation freed): a newer checkpoint covers it
                    if not self._jump():
                        what = "vanished" if entry is None else "does not follow on from the entry before it"
                        raise CorruptLogError(f"transaction log entry {self.state.seq + 1} {what}")
                    jumped = True
                    break
                self._apply(entry)
            else:
                if len(seqs) < self.jump:
                    if not (checked or jumped) and self._jump_to_last():
                        jumped = True
                        continue
                    if self._prove():
                        return

    def _jump_to_last(self) -> bool:
        """Jump to ``_last.json`` if it is newer than the view (one GET)."""
        try:
            ck = self._decode_checkpoint(self.store.get(LAST_CHECKPOINT), LAST_CHECKPOINT)
        except FileNotFoundError:
            return False
        except CorruptLogError as exc:
            self._skip_damaged(LAST_CHECKPOINT, exc)
            return False
        if ck.seq <= self.state.seq:
            return False
        self._jump_to(ck)
        return True

    def _jump(self) -> bool:
        """Jump to the newest checkpoint above the view, if there is one (the entries of an unproven view are
        dropped with it)."""
        ck = self._read_last_checkpoint(above=self.state.seq - len(self._unproven))
        if ck is None or ck.seq <= self.state.seq - len(self._unproven):
            return False
        self._jump_to(ck)
        return True

    def _jump_to(self, ck: CoordinatorState) -> None:
        self._reset(ck)
        self._jumped_at = ck.seq
        self._jumped_token = ck.token_of(ck.seq) or None  # "": a rebuilt entry whose token no copy held
