"""The sweeps and operator actions of :class:`~coordinator.coordinator.TransactionCoordinator`: aborting
transactions that timed out or that an operator resolves, expiring idle transactional ids, and repairing partition
records. Each function is the work of the coordinator method of the same name, which states its contract.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from coordinator.clock import store_now_ms
from coordinator.decisions import timeout_reason, undecided_producer
from coordinator.errors import CorruptLogError, InvalidOptionError
from coordinator.layout import TXN_OPEN
from coordinator.probe import probe_conditional_writes
from coordinator.records import TxnRef, parse_txn_id
from coordinator.requests import ExpireRequest, abort_request
from coordinator.txnstates import is_ready

if TYPE_CHECKING:
    from coordinator.coordinator import TransactionCoordinator
    from coordinator.decisions import Outcome
    from coordinator.state import ProducerMeta

log = logging.getLogger(__name__)


def abort_open(coord: TransactionCoordinator, txn: str, *, reason: str = "aborted by operator") -> bool:
    """The work of :meth:`TransactionCoordinator.abort_open` (its docstring states the contract)."""
    ref = parse_txn_id(txn)
    if ref is None:
        raise InvalidOptionError(f"{txn!r} is not a transaction id")
    probe_conditional_writes(coord.store)
    if ref.kind == "a":
        return coord.abort_app(ref.app, ref.version, ref.token, reason=reason)
    meta = undecided_producer(ref, coord.log.refresh())
    if meta is None:
        return False
    rid, out = fence_abort(coord, txn, ref, meta, reason)
    coord.close_transaction(txn)
    return out.status == "aborted" and out.item is not None and out.item.request == rid


def fence_abort(coord: TransactionCoordinator, txn: str, ref: TxnRef, meta: ProducerMeta,
                reason: str) -> tuple[str, Outcome]:
    """Abort producer transaction ``txn`` (``ref`` parsed; ``meta`` its producer, which has not decided it)
    through the log with an epoch bump, so a late commit of it is refused as fenced: what an operator's abort, the
    timeout sweep and GC's reaping do. Returns the abort request's id and the log's outcome (the transaction may
    have been decided otherwise first: a commit that won is not aborted)."""
    req = abort_request(txn=txn, tid=meta.tid, pid=ref.pid, epoch=ref.epoch, n=ref.n, reason=reason, fence=True)
    return req.id, coord.log.submit(req)


def repair_records(coord: TransactionCoordinator, *, damaged: bool = False) -> int:
    """The work of :meth:`TransactionCoordinator.repair_records` (its docstring states the contract)."""
    from coordinator.layout import TXN_LOG, marker_path
    from coordinator.partrecords import records_of
    from coordinator.txnlog import ensure_records

    probe_conditional_writes(coord.store)
    st = coord.log.refresh()
    if not damaged:
        first = max(0, coord.log.checkpoint_seq + 1)
        entries = [coord.log.entry(s) for s in range(first, st.seq + 1)]
        return ensure_records(coord.store, entries)
    from coordinator.layout import parse_seq

    seqs = [n for n in (parse_seq(x) for x in coord.store.list(TXN_LOG)) if n is not None]
    written = 0
    for seq in seqs:
        try:
            entry = coord.log.entry(seq)
        except CorruptLogError as exc:
            log.warning("%s", exc)  # damaged: its records are its copies (``repair_log`` rebuilds it from them)
            continue
        for (t, p), rec in records_of(entry).items():
            path = marker_path(t, p, rec.idx)
            want = rec.to_bytes()
            try:
                have = coord.store.get(path)
            except FileNotFoundError:
                have = None
            if have != want:
                coord.store.put(path, want)
                written += 1
    return written


def abort_timed_out(coord: TransactionCoordinator, now: float | None = None) -> list[str]:
    """The work of :meth:`TransactionCoordinator.abort_timed_out` (its docstring states the contract)."""
    probe_conditional_writes(coord.store)
    infos = coord.store.list_info(TXN_OPEN)
    t = coord.store.now() * 1000 if now is None else now
    st = coord.log.refresh()
    aborted = []
    for info in infos:
        txn = info.path.rsplit("/", 1)[-1].removesuffix(".json")
        ref = parse_txn_id(txn)
        if ref is None or ref.kind != "p":
            continue
        meta = undecided_producer(ref, st)
        if meta is None:
            coord.close_transaction(txn, wait=True)
            continue
        if t - info.mtime * 1000 <= meta.timeout_ms:
            continue
        rid, out = fence_abort(coord, txn, ref, meta, timeout_reason(meta.timeout_ms))
        if out.status == "aborted" and out.item is not None and out.item.request == rid:
            aborted.append(meta.tid)
        coord.close_transaction(txn, wait=True)
    return aborted


def expire_transactional_ids(coord: TransactionCoordinator, now: int | None = None) -> list[str]:
    """The work of :meth:`TransactionCoordinator.expire_transactional_ids` (its docstring states the contract)."""
    probe_conditional_writes(coord.store)
    t = store_now_ms(coord.store) if now is None else now
    expired = []
    for meta in list(coord.log.refresh().producers.values()):
        if is_ready(meta.state) and t - meta.last_ts > coord.transactional_id_expiration_ms:
            req = ExpireRequest(f"e-{uuid.uuid4().hex}", tid=meta.tid, pid=meta.pid, epoch=meta.epoch,
                                last_ts=meta.last_ts, reason="expired")
            if coord.log.submit(req).status == "done":
                expired.append(meta.tid)
    return expired
