"""The transaction log: an ordered sequence of small JSON objects, each created with ``put_if_absent``.

Appending is optimistic: a writer validates its entry against the state it has replayed, then creates entry
``seq + 1``. If another writer took that number first, the writer reads the winner, applies it and validates again.
Every ``checkpoint_interval`` entries, the writer of the entry also writes a checkpoint of the replayed state, so
that opening the log costs a listing of checkpoints, one checkpoint read and a listing of the entries after it,
whatever the log's length.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from coordinator import faults
from coordinator.errors import ConcurrentCommitError, CorruptLogError, TxnLogError
from coordinator.layout import TXN_CHECKPOINT, TXN_LOG, parse_seq, txn_checkpoint_path, txn_log_path
from coordinator.records import TxnEntry, decode_json, encode_json
from coordinator.state import CoordinatorState
from coordinator.store import Store

DEFAULT_CHECKPOINT_INTERVAL = 100
#: Conflicts tolerated by one append before it gives up with ConcurrentCommitError.
MAX_APPEND_ATTEMPTS = 200


def now_ms() -> int:
    return int(time.time() * 1000)


EntryBuilder = Callable[[CoordinatorState, int, str], TxnEntry | None]


class TransactionLog:
    """A process's view of the store's transaction log. Thread-safe; cheap to keep open.

    Attributes:
        state: the replayed state as of the last entry read (may lag the store until :meth:`refresh`).
    """

    def __init__(self, store: Store, *, checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL) -> None:
        self.store = store
        self.checkpoint_interval = checkpoint_interval
        self._lock = threading.RLock()
        self.state = self._load()

    def _load(self) -> CoordinatorState:
        state = CoordinatorState()
        names = [n for n in self.store.list(TXN_CHECKPOINT) if parse_seq(n) is not None]
        for name in reversed(names):
            where = f"{TXN_CHECKPOINT}/{name}"
            try:
                state = CoordinatorState.from_json(
                    decode_json(self.store.get(where), where, "coordinator checkpoint"), where
                )
                break
            except CorruptLogError:
                # A damaged checkpoint is never needed: an older one, or the log itself, holds the same state.
                continue
            except FileNotFoundError:
                continue
        self._replay(state)
        return state

    def _replay(self, state: CoordinatorState) -> None:
        start_after = None if state.seq < 0 else txn_log_path(state.seq).rsplit("/", 1)[1]
        for name in self.store.list(TXN_LOG, start_after=start_after):
            n = parse_seq(name)
            if n is None:
                continue
            if n != state.seq + 1:
                raise CorruptLogError(
                    f"transaction log has a gap: {TXN_LOG}/{name} follows entry {state.seq}"
                )
            path = f"{TXN_LOG}/{name}"
            state.apply(TxnEntry.from_bytes(self.store.get(path), path))

    def refresh(self) -> CoordinatorState:
        """Read entries written since the last read and apply them.

        Entries are dense (entry ``n + 1`` is only ever created by a writer that has read entry ``n``), so this
        reads forward by number until the first missing entry: one request when nothing is new, however long the
        log is.
        """
        with self._lock:
            state = self.state
            while True:
                path = txn_log_path(state.seq + 1)
                try:
                    data = self.store.get(path)
                except FileNotFoundError:
                    return state
                state.apply(TxnEntry.from_bytes(data, path))

    def append(self, build: EntryBuilder) -> TxnEntry | None:
        """Append the entry ``build(state, seq, writer_token)`` returns; None means nothing to write.

        ``build`` runs against the freshest known state and must raise if the transition is not allowed; on a lost
        race it runs again against the new state.

        A transition ``build`` or the state machine refuses is judged again after reading any newer entries, so
        the error reflects the store, not a stale view of it.

        Raises:
            ConcurrentCommitError: lost the race more than MAX_APPEND_ATTEMPTS times in a row.
            CommitStateUnknownError: the store could not say whether the entry was written.
            whatever ``build`` raises.
        """
        with self._lock:
            for _ in range(MAX_APPEND_ATTEMPTS):
                writer = uuid.uuid4().hex
                seq = self.state.seq + 1
                try:
                    entry = build(self.state, seq, writer)
                    if entry is not None:
                        self.state.validate(entry)
                except TxnLogError:
                    # Refused against what this process has read: if the log moved on, judge again on the
                    # fresh state (a fenced zombie must learn it is fenced, not that its old state forbids it).
                    if self.refresh().seq >= seq:
                        continue
                    raise
                if entry is None:
                    return None
                path = txn_log_path(seq)
                faults.point(f"txnlog.{entry.state.value}.before")
                created = self.store.put_if_absent(path, entry.to_bytes())
                if created:
                    faults.point(f"txnlog.{entry.state.value}.after")
                    self.state.apply(entry)
                    if self.checkpoint_interval and seq % self.checkpoint_interval == self.checkpoint_interval - 1:
                        self.write_checkpoint()
                    return entry
                self.refresh()
            raise ConcurrentCommitError(
                f"transaction log append lost {MAX_APPEND_ATTEMPTS} races in a row; the store is too contended"
            )

    def write_checkpoint(self) -> None:
        """Write the replayed state as a checkpoint (idempotent: the content is a function of the log prefix)."""
        with self._lock:
            if self.state.seq < 0:
                return
            faults.point("txnlog.checkpoint.before")
            # A plain put: the content is a function of the log prefix, so concurrent writers write the same bytes,
            # and a commit never pays a conditional write for it.
            self.store.put(txn_checkpoint_path(self.state.seq), encode_json(self.state.to_json()))
            faults.point("txnlog.checkpoint.after")
