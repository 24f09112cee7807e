"""Transactions of fenced producers ("zombies"): staged, never committed, named by no decision in the log.

A producer fenced by a newer ``init_transactions`` of its transactional id, by an operator's or the timeout
sweep's fencing abort, or by the expiration of its id, may have staged files for a transaction it can no longer
commit. No log entry names that transaction: the entry that fenced its epoch decided it implicitly. These helpers
find that entry and tell whether the transaction's files are provably not committed, so the views can say "never
committed (fenced at entry N); GC removes it" instead of "unknown". Nothing here writes to the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from coordinator import parallel
from coordinator.coordinator import TransactionCoordinator
from coordinator.inspect.common import ABORTED, utc
from coordinator.partition import RETIRED_KEEP_MS
from coordinator.records import AbortItem, ExpireItem, InitItem, LogEntry, TxnRef
from coordinator.state import CoordinatorState


def producer_tid(entries: Iterable[LogEntry], pid: int) -> str | None:
    """The transactional id the retained ``entries`` give producer id ``pid`` (from its inits); None if none."""
    for e in entries:
        for item in e.items:
            if isinstance(item, InitItem) and item.pid == pid:
                return item.tid
    return None


def fence_entry(entries: Sequence[LogEntry], ref: TxnRef, tid: str | None) -> LogEntry | None:
    """The oldest of the retained ``entries`` (oldest first) that fenced epoch ``ref.epoch`` of producer
    ``ref.pid``: an init of the producer at a newer epoch, a fencing abort of that epoch, or the expiration of
    its transactional id. None when the retained log does not hold it."""
    for e in entries:
        for item in e.items:
            if isinstance(item, InitItem) and item.pid == ref.pid and item.epoch > ref.epoch:
                return e
            if isinstance(item, AbortItem) and item.fence and item.pid == ref.pid and item.epoch == ref.epoch:
                return e
            if isinstance(item, ExpireItem) and (item.pid == ref.pid or (tid is not None and item.tid == tid)):
                return e
    return None


def epoch_retained(entries: Sequence[LogEntry], ref: TxnRef) -> bool:
    """Whether the retained ``entries`` (oldest first) hold every entry since the init that gave producer
    ``ref.pid`` epoch ``ref.epoch``: then a transaction of that epoch no decision among them names was never
    committed (a damaged entry, left out of ``entries``, breaks the run and so the proof)."""
    start = next((i for i, e in enumerate(entries) for item in e.items if isinstance(item, InitItem)
                  and item.pid == ref.pid and item.epoch == ref.epoch), None)
    if start is None:
        return False
    run = entries[start:]
    return all(b.seq == a.seq + 1 for a, b in zip(run, run[1:], strict=False))


def unreachable(coord: TransactionCoordinator, staged: dict[str, Any], now_ms: int) -> bool:
    """Whether no reader can ever see the staged files ``staged`` (a row of
    :func:`coordinator.inspect.txns.staged_by_txn`): none is a live or retired segment of its partition, and
    every one is younger than the time a retired segment is remembered (``RETIRED_KEEP_MS``), so none can be a
    committed segment that compaction or retention replaced and the partition has since forgotten.
    """
    if not staged["paths"] or staged.get("oldest_ms") is None or now_ms - staged["oldest_ms"] >= RETIRED_KEEP_MS:
        return False

    def named(where: str) -> set[str]:
        topic, p = where.rsplit("/", 1)
        plog = coord.partition(topic, int(p))
        plog.refresh()
        return {s.path for s in plog.segments} | set(plog.retired)

    known = set().union(*parallel.pmap(named, staged["partitions"]))
    return not known.intersection(staged["paths"])


def fenced_rows(coord: TransactionCoordinator, state: CoordinatorState, candidates: Sequence[tuple[str, TxnRef]],
                staged: dict[str, dict[str, Any]], entries: Sequence[LogEntry], now_ms: int) -> list[dict[str, Any]]:
    """Rows for the transactions among ``candidates`` (producer transactions with an open record whose producer
    is no longer current at their epoch) that left staged files (``staged``, by transaction) and provably never
    committed: ``txn``, ``tid``, ``pid``, ``epoch``, ``state`` (``CompleteAbort``), ``fenced_seq`` and
    ``fenced_time`` (the entry that fenced it, None when the retained ``entries`` do not hold it),
    ``partitions``, ``segments``, ``records``, ``bytes``."""
    rows = []
    for txn, ref in candidates:
        s = staged.get(txn)
        if s is None:
            continue
        meta = state.producer_by_pid(ref.pid)
        known = meta.fenced_epoch(ref.epoch) if meta is not None and meta.epoch > ref.epoch else None
        if known is not None:
            last, how = known
            if ref.n < last or (ref.n == last and how == "committed"):
                continue  # committed, or decided long ago: not a zombie's leftover
        elif not unreachable(coord, s, now_ms):
            continue
        tid = meta.tid if meta is not None else producer_tid(entries, ref.pid)
        fence = fence_entry(entries, ref, tid)
        rows.append({"txn": txn, "tid": tid, "pid": ref.pid, "epoch": ref.epoch, "state": ABORTED,
                     "fenced_seq": None if fence is None else fence.seq,
                     "fenced_time": None if fence is None else utc(fence.ts), "partitions": s["partitions"],
                     "segments": s["files"], "records": s["records"], "bytes": s["bytes"]})
    return rows
