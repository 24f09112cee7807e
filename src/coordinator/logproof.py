"""Proving that a log entry is the log's, without clocks (see ``docs/design.md``, "What timing can and cannot do").

Log truncation frees the numbers of the entries it deletes, so a process whose view is older than a truncation (it
paused anywhere, for any time) can create, or read, an object under a freed number that is not the log's entry of
that number: a *ghost*. Two facts make a proof possible:

1. Truncation frees only numbers below a numbered checkpoint that exists, and never deletes the highest numbered
   checkpoint, so once a number ``n`` was freed a numbered checkpoint above ``n`` exists for ever: **a listing of
   ``_txn/checkpoint/``, made after an object at ``n`` was created or read, that shows no numbered checkpoint above
   ``n`` proves the object is the log's entry ``n``**.
2. Entries are chained: each carries ``prev``, the writer token of the entry before it, and each checkpoint the
   tokens of the last :data:`~coordinator.state.TOKENS_KEPT` entries it covers. An entry linked to a proven one
   after it is proven too; a checkpoint covering ``n`` says which token entry ``n`` has.

A mixin of :class:`~coordinator.txnlog.TransactionLog`, which holds the state it uses (declared below for type
checking only).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator import parallel
from coordinator.errors import CommitStateUnknownError, CorruptLogError, StoreError
from coordinator.layout import LAST_CHECKPOINT, TXN_CHECKPOINT, parse_seq, seq_name, txn_checkpoint_path, txn_log_path
from coordinator.records import Item, LogEntry
from coordinator.requests import Request
from coordinator.state import TOKENS_KEPT, CoordinatorState
from coordinator.store import Store

log = logging.getLogger("coordinator.txnlog")  # the transaction log logs under one name

#: Entries read per round while looking for a decision among entries jumped over.
_FIND_CHUNK = 64


class LogProof:
    """Proving entries the log's (see the module docstring); a mixin of
    :class:`~coordinator.txnlog.TransactionLog`."""

    if TYPE_CHECKING:
        store: Store
        state: CoordinatorState
        _lock: threading.RLock
        _decisions: OrderedDict[str, tuple[Item, int]]
        _unproven: list[LogEntry]
        _suspects: dict[int, LogEntry]
        _jumped_at: int
        _jumped_token: str | None
        _waited: OrderedDict[str, int]
        _read_ahead: Callable[[list[LogEntry]], list[Callable[[], object]]] | None

        def _read_entry(self, seq: int) -> LogEntry | CorruptLogError | None: ...
        def _take_decisions(self, entry: LogEntry) -> None: ...
        def _decode_checkpoint(self, data: bytes, where: str) -> CoordinatorState: ...
        def _read_last_checkpoint(self, above: int = -1) -> CoordinatorState | None: ...
        def _jump_to(self, ck: CoordinatorState) -> None: ...

    # -- reading ----------------------------------------------------------------------------------------------

    def _links(self, entry: LogEntry) -> bool:
        """Whether ``entry`` (the next one after the view) names the view's last entry as its predecessor (True
        when either token is unknown: an entry or checkpoint written before entries were chained, or an entry
        rebuilt by ``txnlog repair --log`` whose writer token no copy held)."""
        tok = self.state.token_of(self.state.seq)
        return not entry.prev or not tok or entry.prev == tok

    def _checkpoints_above(self, seq: int) -> list[int]:
        """The numbered checkpoints above entry ``seq``, ascending (one LIST).

        Raises:
            StoreError: the store failed.
        """
        return sorted(q for n in self.store.list(TXN_CHECKPOINT, start_after=seq_name(seq))
                      if (q := parse_seq(n)) is not None)

    def _start_proof(self) -> Callable[[], tuple[int, list[int]]]:
        """Start proving the entries applied since the view was last proven: the listing of the checkpoints above the
        view, and the caller's read-ahead (see :meth:`~coordinator.txnlog.TransactionLog.refresh`) alongside it.
        Every entry of the view was read before this call, so the listing is one made after they were read,
        whenever its answer is used. Returns a function that waits for both and gives (the view's seq when started,
        the checkpoints above it); a read ahead that failed is only not read ahead.

        Raises (from the returned function):
            StoreError: the listing failed.
        """
        seq = self.state.seq
        ahead = self._read_ahead(list(self._unproven)) if self._read_ahead is not None else []
        waits = [parallel.start(job) for job in ahead]
        listing = parallel.start(lambda: self._checkpoints_above(seq))

        def result() -> tuple[int, list[int]]:
            try:
                return seq, listing()
            finally:
                for wait in waits:
                    try:
                        wait()
                    except Exception as exc:  # noqa: BLE001 - a read ahead that failed is only not read ahead
                        log.debug("read-ahead failed: %s", exc)

        return result

    @staticmethod
    def _drop_proof(started: Callable[[], tuple[int, list[int]]] | None) -> None:
        """Wait for a proof started and not needed (no request is left running behind the caller)."""
        if started is None:
            return
        try:
            started()
        except StoreError:
            pass

    def _prove(self) -> bool:
        """Prove the entries applied since the view was last proven (caller holds the lock): after they were read,
        no numbered checkpoint lies above the last of them, so it is the log's, and by their links so is every one
        before it. Their decisions are then taken. False when a checkpoint lies above (the log moved on, or the view
        holds a ghost): the caller lists on, and jumps if the next entries do not follow on.

        Raises:
            StoreError: the store failed (the entries stay unproven).
        """
        return self._prove_started(None)

    def _prove_started(self, started: Callable[[], tuple[int, list[int]]] | None) -> bool:
        """:meth:`_prove`, with the proof :meth:`_start_proof` started (used when the view has not moved since).

        Raises:
            StoreError: the store failed (the entries stay unproven).
        """
        if not self._unproven:
            self._drop_proof(started)
            return True
        seq, above = (started or self._start_proof())()
        if seq != self.state.seq:
            seq, above = self._start_proof()()
        if above:
            return False
        for entry in self._unproven:
            mine = self._suspects.pop(entry.seq, None)
            if mine is not None and mine.writer != entry.writer:
                log.info("log entry %d this process created is not the log's (another holds that number)", entry.seq)
            self._take_decisions(entry)
        self._unproven.clear()
        return True

    # -- writing ----------------------------------------------------------------------------------------------

    def _created_is_the_logs(self, entry: LogEntry) -> bool:
        """Whether ``entry``, just created by this process (``put_if_absent`` succeeded), is the log's entry of its
        number and not a ghost (caller holds the lock; nothing of the entry has been used yet). A ghost is deleted;
        an entry that cannot be judged (no checkpoint covers it) stays a suspect whose decisions are never taken.
        Either way the view jumps to the newest checkpoint, where each request finds its fate (decided in the log,
        or still to decide: a real entry's decisions are in every later state).

        Raises:
            CommitStateUnknownError: the store failed while judging (the entry stays a suspect) or while reading the
                checkpoint after it.
        """
        self._suspects[entry.seq] = entry
        try:
            verdict = self._verdict(entry)
        except StoreError as exc:
            raise CommitStateUnknownError(
                f"log entry {entry.seq} was created, but the store failed while checking that it is the log's and "
                f"not a number a log truncation freed: {exc}") from exc
        if verdict:
            del self._suspects[entry.seq]
            return True
        if verdict is False:
            log.warning("log entry %d was created under a number a log truncation had freed (this process's view "
                        "was older than the truncation): the entry is not the log's, its requests are decided again",
                        entry.seq)
            self._drop_ghost(entry)
        else:
            log.warning("log entry %d was created after the log moved past it and no checkpoint tells whether it "
                        "is the log's: its decisions are never taken; its requests learn their fate from the log",
                        entry.seq)
        try:
            ck = self._read_last_checkpoint(above=entry.seq - 1)
        except StoreError as exc:
            raise CommitStateUnknownError(
                f"log entry {entry.seq} was created after the log moved past its number, and the store failed while "
                f"reading the checkpoint that decides its requests: {exc}") from exc
        if ck is not None:
            self._jump_to(ck)
        return False

    def _verdict(self, entry: LogEntry) -> bool | None:
        """True when ``entry`` (created or read by this process before this call) is the log's, False when it is a
        ghost, None when no checkpoint tells. No numbered checkpoint above it: the log's. Otherwise the nearest
        checkpoint whose token window covers its number says which token the log's entry has.

        Raises:
            StoreError: the store failed.
        """
        above = self._checkpoints_above(entry.seq)
        if not above:
            return True
        for q in above:
            if q - entry.seq >= TOKENS_KEPT:
                break
            where = txn_checkpoint_path(q)
            try:
                tok = self._decode_checkpoint(self.store.get(where), where).token_of(entry.seq)
            except (FileNotFoundError, CorruptLogError):
                continue
            if tok:  # "" (a rebuilt entry whose token no copy held) tells nothing
                return tok == entry.writer
        try:
            tok = self._decode_checkpoint(self.store.get(LAST_CHECKPOINT), LAST_CHECKPOINT).token_of(entry.seq)
        except (FileNotFoundError, CorruptLogError):
            tok = None
        return tok == entry.writer if tok else None

    def _drop_ghost(self, entry: LogEntry) -> None:
        """Delete ghost ``entry`` and stop suspecting it; a failed delete leaves it a suspect (logged)."""
        try:
            self.store.delete(txn_log_path(entry.seq))
        except StoreError as exc:
            log.warning("could not delete ghost log entry %d: %s", entry.seq, exc)
            return
        del self._suspects[entry.seq]

    def _settle_suspects(self) -> None:
        """Judge again the suspects of this process: ghosts are deleted, entries proven the log's stop being
        suspects and their decisions are taken, the rest stay. Stops at the first store failure."""
        for entry in list(self._suspects.values()):
            try:
                verdict = self._verdict(entry)
            except StoreError:
                return
            if verdict:
                del self._suspects[entry.seq]
                self._take_decisions(entry)
            elif verdict is False:
                self._drop_ghost(entry)

    def _suspect(self, entry: LogEntry) -> bool:
        """Whether ``entry`` is one this process created and could not prove (its own bytes: the same token)."""
        mine = self._suspects.get(entry.seq)
        return mine is not None and mine.writer == entry.writer

    # -- looking back -----------------------------------------------------------------------------------------

    def _find_decision(self, request_id: str, after: int, upto: int, *, gaps_unknown: bool = False) \
            -> tuple[Item, int] | None:
        """Look for the item that decided ``request_id`` among entries ``(after, upto]``, which this process jumped
        over to the checkpoint at ``upto``. Only entries proven the log's count: walking down from ``upto``, each
        must carry the token the entry above it names as its predecessor (the checkpoint names ``upto``'s), so a
        ghost left below the checkpoint is never taken for a decision. A damaged entry counts as gone.

        Raises:
            CommitStateUnknownError: with ``gaps_unknown``, not found while some of those entries are gone or
                cannot be proven (truncated while this process paused longer than the grace period): one of them may
                have decided it.
        """
        expected = self._jumped_token if upto == self._jumped_at else None
        top = upto
        while top > after:
            seqs = range(max(after + 1, top - _FIND_CHUNK + 1), top + 1)
            got = dict(zip(seqs, parallel.pmap(self._read_entry, seqs), strict=True))
            for seq in reversed(seqs):
                entry = got[seq]
                if isinstance(entry, CorruptLogError):
                    if gaps_unknown:
                        raise CommitStateUnknownError(
                            f"request {request_id} waited while log entry {seq} was written, and that entry is "
                            f"damaged now ({entry}): it may have decided it; read the data to find out")
                    return None
                if entry is None or (expected is not None and entry.writer != expected):
                    if gaps_unknown:
                        raise CommitStateUnknownError(
                            f"request {request_id} waited while log entries up to {seq} were written and truncated "
                            "(this process paused longer than the truncation grace period): one of them may have "
                            "decided it; read the data to find out")
                    return None
                for item in entry.items:
                    if item.request == request_id:
                        return item, entry.seq
                expected = entry.prev or None
            top = seqs[0] - 1
        return None

    # -- the requests a caller asks about ---------------------------------------------------------------------

    def _decided_by_suspect(self, req: Request) -> bool:
        """Whether one of this process's suspects decided ``req``."""
        return any(i.request == req.id for e in self._suspects.values() for i in e.items)
