"""Snapshots as of an earlier log entry: :func:`snapshot_at`.

A :class:`~coordinator.txntypes.Snapshot` at entry ``seq`` holds every transaction committed at or before that entry
and no other: its ends and starts are those of the coordinator state after entry ``seq``, rebuilt from the newest
readable checkpoint at or below ``seq`` and the retained entries after it (each chained to the one before by its
writer token, as a reader of the log checks them). Decisions of later entries (commits, retention, compaction) play
no part. Where log truncation removed what that rebuild needs, the snapshot cannot be had and the caller is told so:
a guess could return a wrong cut.

Whether the records of the cut are still in the store (retention after ``seq`` may have removed some) is for the
reader to check against the partitions' current log starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from coordinator.errors import CorruptLogError, InvalidOptionError
from coordinator.layout import TXN_CHECKPOINT, TXN_LOG, parse_seq, txn_checkpoint_path, txn_log_path
from coordinator.records import LogEntry, check_format, decode_json
from coordinator.state import CoordinatorState
from coordinator.txntypes import Snapshot

if TYPE_CHECKING:
    from coordinator.coordinator import TransactionCoordinator
    from coordinator.store import Store
    from coordinator.topics import TopicMeta

__all__ = ["snapshot_at", "snapshot_of", "state_at"]


def snapshot_of(st: CoordinatorState, metas: Iterable[TopicMeta],
                partitions: Mapping[str, Iterable[int]] | None = None) -> Snapshot:
    """The cut ``st`` gives of the topics ``metas`` (as :meth:`TransactionCoordinator.snapshot` builds it)."""
    ends: dict[str, dict[int, int]] = {}
    starts: dict[str, dict[int, int]] = {}
    for meta in metas:
        known = {p for (t, p) in st.partitions if t == meta.name}
        every = sorted(set(range(meta.partitions)) | known)
        wanted = every if partitions is None or meta.name not in partitions else sorted(set(partitions[meta.name]))
        for p in wanted:
            pm = st.partition(meta.name, p)
            ends.setdefault(meta.name, {})[p] = pm.end
            starts.setdefault(meta.name, {})[p] = pm.start
    return Snapshot(st.seq, ends, starts)


def _checkpoint(store: Store, seq: int) -> CoordinatorState | None:
    where = txn_checkpoint_path(seq)
    try:
        d = decode_json(store.get(where), where, "coordinator checkpoint")
        check_format(d, where)
        st = CoordinatorState.from_json(d, where)
    except (FileNotFoundError, CorruptLogError):
        return None
    return st if st.seq == seq else None


def _replay(store: Store, st: CoordinatorState, upto: int) -> bool:
    """Apply entries ``st.seq + 1 .. upto`` to ``st``; False when one is missing, damaged or not chained."""
    for q in range(st.seq + 1, upto + 1):
        path = txn_log_path(q)
        try:
            entry = LogEntry.from_bytes(store.get(path), path)
        except (FileNotFoundError, CorruptLogError):
            return False
        tok = st.token_of(st.seq)
        if entry.seq != q or (entry.prev and tok and entry.prev != tok):
            return False
        st.apply(entry)
    return True


def state_at(store: Store, seq: int, *, known: int) -> CoordinatorState:
    """The coordinator state after log entry ``seq``.

    Args:
        known: the last entry the caller's (proven) view of the log holds; ``seq`` must not be above it.

    Raises:
        InvalidOptionError: ``seq`` is negative or above ``known`` (naming both), or log truncation removed the
            entries and checkpoints the rebuild needs (naming the oldest entry still retained).
    """
    if seq < 0 or seq > known:
        raise InvalidOptionError(f"log entry {seq} is outside the transaction log's entries [0, {known}]")
    below = sorted((q for n in store.list(TXN_CHECKPOINT) if (q := parse_seq(n)) is not None and q <= seq),
                   reverse=True)
    for c in [*below, -1]:
        st = CoordinatorState() if c < 0 else _checkpoint(store, c)
        if st is not None and _replay(store, st, seq):
            return st
    retained = [q for n in store.list(TXN_LOG) if (q := parse_seq(n)) is not None]
    oldest = min(retained, default=known)
    raise InvalidOptionError(
        f"the snapshot at log entry {seq} can no longer be rebuilt: log truncation removed the entries and "
        f"checkpoints it needs (the oldest entry retained is {oldest}); read at a later entry")


def snapshot_at(coord: TransactionCoordinator, topics: Iterable[str], seq: int) -> Snapshot:
    """The transaction-consistent cut of ``topics`` as of log entry ``seq`` (see the module docstring).

    Raises:
        TopicNotFoundError: a topic does not exist.
        InvalidOptionError: as :func:`state_at`.
    """
    names = list(topics)
    metas = [coord.topic(n) for n in names]
    now = coord.log.refresh()
    if seq == now.seq:
        return snapshot_of(now, metas)
    return snapshot_of(state_at(coord.store, seq, known=now.seq), metas)
