"""Damaged objects of the transaction log, as its readers and writers meet them (see ``docs/design.md``, "Damaged
log objects").

* A log entry that does not decode (or holds another number) is *damaged*. At or below a readable checkpoint it
  stops nobody: the checkpoint holds its decisions, and a process whose view is older jumps over it to that
  checkpoint. Above every readable checkpoint (the log's tail) nothing may be guessed: readers and writers stop with
  an error naming the entry and the repair (``txnlog repair --log``, :mod:`coordinator.logrepair`).
* A damaged checkpoint (``_last.json`` or a numbered one) is skipped for the next readable one, and named in the
  error of a reader no checkpoint will do for. Log truncation never keeps a damaged checkpoint as the point it
  truncates below.

A mixin of :class:`~coordinator.txnlog.TransactionLog`, which holds the state it uses (declared below for type
checking only).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from coordinator.errors import REPAIR_LOG_HINT, CorruptLogError, UnsupportedFormatError
from coordinator.layout import txn_checkpoint_path, txn_log_path
from coordinator.records import LogEntry
from coordinator.state import CoordinatorState
from coordinator.store import Store

log = logging.getLogger("coordinator.txnlog")  # the transaction log logs under one name


class LogDamage:
    """Reading entries that may be damaged, jumping over the covered ones, skipping damaged checkpoints (see the
    module docstring); a mixin of :class:`~coordinator.txnlog.TransactionLog`."""

    if TYPE_CHECKING:
        store: Store
        _damaged_checkpoints: set[str]

        def _decode_checkpoint(self, data: bytes, where: str) -> CoordinatorState: ...
        def _read_last_checkpoint(self, above: int = -1) -> CoordinatorState | None: ...
        def _jump_to(self, ck: CoordinatorState) -> None: ...

    def _skip_damaged(self, where: str, exc: CorruptLogError) -> None:
        """Note that damaged checkpoint ``where`` was skipped (logged, named in later errors)."""
        self._damaged_checkpoints.add(where)
        log.warning("%s; skipped for another checkpoint (%s)", exc, REPAIR_LOG_HINT)

    def _damaged_note(self, *, hint: bool) -> str:
        """What to add to an error no checkpoint could prevent: the damaged checkpoints skipped, if any (with
        ``hint``, and what to run)."""
        if not self._damaged_checkpoints:
            return ""
        then = f"; {REPAIR_LOG_HINT}" if hint else ""
        return f" (damaged checkpoints were skipped: {', '.join(sorted(self._damaged_checkpoints))}{then})"

    def _read_entry(self, seq: int) -> LogEntry | CorruptLogError | None:
        """Log entry ``seq``: None when there is none, the error (naming the object) when it is damaged: it does
        not decode, or holds another number.

        Raises:
            UnsupportedFormatError: the entry was written by another store format.
            StoreError: the store failed.
        """
        path = txn_log_path(seq)
        try:
            data = self.store.get(path)
        except FileNotFoundError:
            return None
        try:
            entry = LogEntry.from_bytes(data, path)
        except CorruptLogError as exc:
            return exc
        if entry.seq != seq:
            return CorruptLogError(f"transaction log entry {path} is damaged: it says it is entry {entry.seq}")
        return entry

    def _jump_over(self, seq: int, damage: CorruptLogError) -> None:
        """Jump over damaged entry ``seq`` to the newest readable checkpoint at or above it: that checkpoint holds
        the entry's decisions, so nobody needs the entry. Above every readable checkpoint there is no such jump:
        the log is the truth, and guessing what the entry decided could lose a commit or undo a fence.

        Raises:
            CorruptLogError: no readable checkpoint covers the entry (naming it and the repair).
        """
        ck = self._read_last_checkpoint(above=seq - 1)
        if ck is None:
            raise CorruptLogError(
                f"{damage}; no readable checkpoint covers it{self._damaged_note(hint=False)}, so no reader or "
                f"writer of the transaction log can go past it: {REPAIR_LOG_HINT}") from damage
        log.warning("%s; jumped over it to the checkpoint at entry %d, which holds its decisions (%s)", damage,
                    ck.seq, REPAIR_LOG_HINT)
        self._jump_to(ck)

    def _truncation_point(self, seqs: list[int]) -> int | None:
        """The first of the numbered checkpoints ``seqs`` (newest first) that decodes (one GET each); None if none
        does (a damaged one is skipped, logged).

        Raises:
            StoreError: the store failed.
        """
        for q in seqs:
            where = txn_checkpoint_path(q)
            try:
                if self._decode_checkpoint(self.store.get(where), where).seq == q:
                    return q
                log.warning("not truncating the log below %s: it holds the state of another entry (%s)", where,
                            REPAIR_LOG_HINT)
            except FileNotFoundError:
                continue
            except (CorruptLogError, UnsupportedFormatError) as exc:
                log.warning("not truncating the log below %s: %s (%s)", where, exc, REPAIR_LOG_HINT)
        return None
