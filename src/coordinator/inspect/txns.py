"""Read-only views of transactions: transactional ids, open transactions, recent decisions, one transaction's
story, the log's history (like ``DeltaTable.history()``) and a consumer group's lag over time. Row vocabulary:
see :mod:`coordinator.inspect.common`. Nothing here writes to the store.

What a decision touched: a commit names its partitions, records and groups in its log entry. An abort names none
of them (the log records only the decision), so for aborted, refused and open transactions the partitions, files
and records come from the staged files themselves, whose names start with their transaction id
(:func:`staged_by_txn`); once GC has deleted them, those columns are None.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coordinator import parallel
from coordinator.coordinator import GROUP_TID_PREFIX, TransactionCoordinator
from coordinator.decisions import decided_by_name, undecided_producer
from coordinator.errors import CorruptLogError, TopicNotFoundError
from coordinator.inspect import fenced
from coordinator.inspect.common import ABORTED, COMMITTED, ONGOING, UNKNOWN, coord_for, utc
from coordinator.layout import (
    TXN_CHECKPOINT,
    TXN_INTENTS,
    TXN_LOG,
    TXN_OPEN,
    data_dir,
    open_path,
    parse_seq,
    seq_name,
    txn_of_file,
)
from coordinator.records import (
    AbortItem,
    CommitItem,
    ExpireItem,
    InitItem,
    Item,
    LogEntry,
    RejectItem,
    ReplaceItem,
    RetainItem,
    check_format,
    decode_json,
    parse_txn_id,
    producer_txn_id,
)
from coordinator.state import CoordinatorState
from coordinator.store import Store
from coordinator.topics import get_topic, list_topics

_OUTCOME_STATE = {"committed": COMMITTED, "aborted": ABORTED, "skipped": ABORTED}


# -- the log ------------------------------------------------------------------------------------------------------


def log_tail(store: Store, scan: int, last_seq: int | None = None) -> list[LogEntry]:
    """The last ``scan`` retained entries of the transaction log, oldest first (fewer if fewer are retained; a
    damaged entry is left out: ``txnlog verify`` names it)."""
    if scan <= 0:
        return []
    start_after = None if last_seq is None or last_seq - scan < 0 else seq_name(last_seq - scan)
    names = [n for n in store.list(TXN_LOG, start_after=start_after) if parse_seq(n) is not None][-scan:]
    paths = [f"{TXN_LOG}/{n}" for n in names]

    def get(path: str) -> LogEntry | None:
        try:
            return LogEntry.from_bytes(store.get(path), path)
        except (CorruptLogError, FileNotFoundError):
            return None

    return [e for e in parallel.pmap(get, paths) if e is not None]


def _touched(item: CommitItem) -> list[str]:
    return [f"{p.topic}/{p.partition}" for p in item.parts if p.rows]


def decision_rows(entry: LogEntry, now_ms: int) -> list[dict[str, Any]]:
    """One row per transaction decision in ``entry`` (commits, aborts, refused commits; not inits or maintenance):
    ``seq``, ``time``, ``age_ms``, ``txn``, ``tid``, ``app``, ``version``, ``state``, ``partitions`` (``topic/p``
    list), ``records``, ``segments``, ``groups``, ``reason``, ``request``. An abort records what its requester had
    staged (partitions, records) and the groups it carried; for refusals, and aborts by a sweep or an operator,
    those are None (see :func:`staged_by_txn`)."""
    rows: list[dict[str, Any]] = []
    for item in entry.items:
        base: dict[str, Any] = {"seq": entry.seq, "time": utc(entry.ts), "age_ms": now_ms - entry.ts,
                                "request": item.request}
        if isinstance(item, CommitItem):
            rows.append(base | {
                "txn": item.txn, "tid": item.tid, "app": item.app,
                "version": item.version if item.app is not None else None, "state": COMMITTED,
                "partitions": _touched(item), "records": item.records,
                "segments": sum(len(p.segments) for p in item.parts), "groups": sorted(item.offsets),
                "reason": None})
        elif isinstance(item, AbortItem):
            reason = item.reason or None
            if item.skipped:
                reason = f"skipped: {item.reason}"
            told = bool(item.staged or item.groups)  # what the requester said it had staged
            rows.append(base | {
                "txn": item.txn, "tid": item.tid, "app": item.app,
                "version": item.version if item.app is not None else None, "state": ABORTED,
                "partitions": sorted(item.staged) if told else None,
                "records": sum(item.staged.values()) if told else None, "segments": None,
                "groups": list(item.groups) if told else None, "reason": reason})
        elif isinstance(item, RejectItem) and item.txn:
            ref = parse_txn_id(item.txn)
            rows.append(base | {
                "txn": item.txn, "tid": None, "app": ref.app if ref is not None and ref.kind == "a" else None,
                "version": ref.version if ref is not None and ref.kind == "a" else None, "state": ABORTED,
                "partitions": None, "records": None, "segments": None, "groups": None,
                "reason": f"commit refused ({item.code}): {item.reason}"})
    return rows


def staged_by_txn(store: Store, txns: Iterable[str], *, records: bool = True) -> dict[str, dict[str, Any]]:
    """What each of ``txns`` has staged and not had deleted yet: ``partitions`` (``topic/p``), ``files``,
    ``bytes``, ``records`` (read from the files' footers when ``records``; None if a file cannot be read),
    ``paths`` and ``oldest_ms`` (the oldest file's time on the store's clock). Costs one LIST per partition of
    every topic, plus one GET per matching file with ``records``."""
    wanted = set(txns)
    if not wanted:
        return {}
    dirs = []
    for name in list_topics(store):
        try:
            dirs += [(name, p) for p in range(get_topic(store, name).partitions)]
        except (TopicNotFoundError, CorruptLogError):
            continue
    listings = parallel.pmap(lambda tp: (tp, store.list_info(data_dir(*tp))), dirs)
    out: dict[str, dict[str, Any]] = {}
    for (topic, p), infos in listings:
        for info in infos:
            txn = txn_of_file(info.path.rsplit("/", 1)[-1])
            if txn not in wanted:
                continue
            row = out.setdefault(txn, {"partitions": [], "files": 0, "bytes": 0, "records": 0, "paths": [],
                                       "oldest_ms": None})
            if f"{topic}/{p}" not in row["partitions"]:
                row["partitions"].append(f"{topic}/{p}")
            row["files"] += 1
            row["bytes"] += info.size
            row["paths"].append(info.path)
            mtime = int(info.mtime * 1000)
            row["oldest_ms"] = mtime if row["oldest_ms"] is None else min(row["oldest_ms"], mtime)
    if records:
        paths = [p for row in out.values() for p in row["paths"]]
        counts = dict(zip(paths, parallel.pmap(lambda p: _rows_in(store, p), paths), strict=True))
        for row in out.values():
            got = [counts[p] for p in row["paths"]]
            row["records"] = None if None in got else sum(c for c in got if c is not None)
    else:
        for row in out.values():
            row["records"] = None
    return out


def _rows_in(store: Store, path: str) -> int | None:
    """Rows in a staged segment file, from its footer; None when it is gone or unreadable."""
    try:
        data = store.get(path)
        if path.endswith(".arrow"):
            reader = pa.ipc.open_file(pa.py_buffer(data))
            return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
        return int(pq.read_metadata(pa.BufferReader(data)).num_rows)
    except (FileNotFoundError, pa.ArrowInvalid, OSError):
        return None


# -- transactions -------------------------------------------------------------------------------------------------


def transactions(
    store: Store, *, recent: int = 20, scan: int = 200, now: int | None = None,
    coordinator: TransactionCoordinator | None = None, staged: bool = True,
) -> dict[str, Any]:
    """The coordinator's view of transactions, as ``kafka-transactions.sh list`` / ``describe`` show Kafka's.

    Returns a dict with ``log_seq`` (last transaction-log entry), ``producers`` (every transactional id: ``tid``,
    ``pid``, ``epoch``, ``state`` (``Ongoing`` while it has an open transaction), ``open_txn``, ``last_txn``,
    ``last_txn_id`` and ``last_state`` (its last decided transaction's number, full id and state), ``idle_ms`` since
    its last decision, ``timeout_ms``, ``reserved`` (the producers of group-offset commits), ``ephemeral``),
    ``open`` (producer transactions that staged data and are not decided: ``txn``, ``tid``, ``state``, ``started``
    and ``age_ms`` on the store's clock, ``timeout_ms``, ``timed_out``, and what they staged: ``partitions``,
    ``segments``, ``records``, ``bytes``), ``waiting`` (requests published for group commit and not decided yet),
    ``recent`` (the last ``recent`` decisions among the last ``scan`` log entries, newest first; see
    :func:`decision_rows`; aborted ones filled from their staged files when ``staged``) and ``fenced`` (transactions
    of fenced producers that staged files and never committed, which GC removes; only when ``staged``: see
    :func:`coordinator.inspect.fenced.fenced_rows`).

    Raises:
        CorruptLogError: the log cannot be read.
    """
    coord = coord_for(store, coordinator)
    infos = store.list_info(TXN_OPEN)
    t = int(store.now() * 1000) if now is None else now
    state = coord.log.refresh()
    opened: list[dict[str, Any]] = []
    superseded = []  # open records of producers fenced since: maybe a zombie's staged transaction
    for info in infos:
        txn = info.path.rsplit("/", 1)[-1].removesuffix(".json")
        ref = parse_txn_id(txn)
        if ref is None or ref.kind != "p":
            continue
        pm = undecided_producer(ref, state)
        if pm is None:
            m = state.producer_by_pid(ref.pid)
            if m is None or m.epoch > ref.epoch:
                superseded.append((txn, ref))
            continue  # decided: a leftover open record
        age = t - int(info.mtime * 1000)
        opened.append({"txn": txn, "tid": pm.tid, "pid": ref.pid, "epoch": ref.epoch, "state": ONGOING,
                       "started": utc(info.mtime * 1000), "age_ms": age, "timeout_ms": pm.timeout_ms,
                       "timed_out": age > pm.timeout_ms, "partitions": None, "segments": None, "records": None,
                       "bytes": None})
    open_by_tid = {r["tid"]: r["txn"] for r in opened}
    producers = []
    for m in sorted(state.producers.values(), key=lambda m: m.tid):
        producers.append({
            "tid": m.tid, "pid": m.pid, "epoch": m.epoch,
            "state": ONGOING if m.tid in open_by_tid else m.state.value, "open_txn": open_by_tid.get(m.tid),
            "last_txn": None if m.last_txn < 0 else m.last_txn,
            "last_txn_id": None if m.last_txn < 0 else producer_txn_id(m.pid, m.epoch, m.last_txn),
            "last_state": None if m.last_outcome is None else _OUTCOME_STATE.get(m.last_outcome, UNKNOWN),
            "idle_ms": t - m.last_ts, "timeout_ms": m.timeout_ms,
            "reserved": m.tid.startswith(GROUP_TID_PREFIX), "ephemeral": m.ephemeral,
        })
    waiting = []
    for info in store.list_info(TXN_INTENTS):
        rid = info.path.rsplit("/", 1)[-1].removesuffix(".json")
        if not decided_by_name(rid, state):
            waiting.append({"request": rid, "started": utc(info.mtime * 1000), "age_ms": t - int(info.mtime * 1000)})
    recent_rows = recent_transactions(store, limit=recent, scan=scan, last_seq=state.seq, now=t)
    fenced_txns: list[dict[str, Any]] = []
    if staged:
        found = staged_by_txn(store, [r["txn"] for r in opened] + [r["txn"] for r in recent_rows
                                                                     if r["partitions"] is None]
                              + [txn for txn, _ref in superseded])
        if any(txn in found for txn, _ref in superseded):
            fenced_txns = fenced.fenced_rows(coord, state, superseded, found, log_tail(store, scan, state.seq), t)
        for r in opened:
            s = found.get(r["txn"])
            if s is not None:
                r.update(partitions=s["partitions"], segments=s["files"], records=s["records"], bytes=s["bytes"])
        for r in recent_rows:
            s = found.get(r["txn"])
            if r["partitions"] is None and s is not None:
                r.update(partitions=s["partitions"], records=s["records"], segments=s["files"])
    return {"log_seq": state.seq, "producers": producers, "open": opened, "waiting": waiting, "recent": recent_rows,
            "fenced": fenced_txns}


def recent_transactions(store: Store, *, limit: int = 20, scan: int = 1000, last_seq: int | None = None,
                        now: int | None = None) -> list[dict[str, Any]]:
    """Transaction decisions (commits, aborts, refused commits) among the last ``scan`` log entries, newest
    first, at most ``limit`` (see :func:`decision_rows`)."""
    if limit <= 0:
        return []
    t = int(store.now() * 1000) if now is None else now
    out: list[dict[str, Any]] = []
    for e in reversed(log_tail(store, scan, last_seq)):
        out += reversed(decision_rows(e, t))
        if len(out) >= limit:
            break
    return out[:limit]


def find_transaction(store: Store, txn: str, *, scan: int = 1000,
                     coordinator: TransactionCoordinator | None = None) -> dict[str, Any] | None:
    """Where transaction ``txn`` stands, from the durable record: ``txn``, ``tid``, ``pid``, ``epoch``, ``app``,
    ``version``, ``state`` (``Ongoing``: staged data, not decided; ``CompleteCommit``; ``CompleteAbort``;
    ``Unknown``: no trace of it, or decided before the retained log), ``time`` and ``seq`` of the decision when
    the retained log holds it, ``partitions``, ``records``, ``reason``; for a fenced producer's transaction
    (see :mod:`coordinator.inspect.fenced`) ``never_committed`` is true, ``fenced_seq``/``fenced_time`` name the
    log entry that fenced it (None when the retained log no longer holds it) and ``staged_files`` counts what GC
    will remove. None if ``txn`` is not a transaction id."""
    coord = coord_for(store, coordinator)
    ref = parse_txn_id(txn)
    if ref is None:
        return None
    status = coord.txn_status(txn)
    state = coord.log.state
    tid = None
    superseded = False  # the producer is no longer current at the transaction's epoch
    if ref.kind == "p":
        m = state.producer_by_pid(ref.pid)
        tid = None if m is None else m.tid
        superseded = m is None or m.epoch != ref.epoch
    out: dict[str, Any] = {
        "txn": txn, "tid": tid, "pid": ref.pid if ref.kind == "p" else None,
        "epoch": ref.epoch if ref.kind == "p" else None, "app": ref.app or None,
        "version": ref.version if ref.kind == "a" else None, "state": UNKNOWN, "time": None, "seq": None,
        "partitions": None, "records": None, "reason": None, "never_committed": False, "fenced_seq": None,
        "fenced_time": None, "staged_files": 0,
    }
    now = int(store.now() * 1000)
    entries = log_tail(store, scan, state.seq)
    row = None
    for e in reversed(entries):
        row = next((r for r in decision_rows(e, now) if r["txn"] == txn), None)
        if row is not None:
            break
    if row is not None:
        out.update({k: row[k] for k in ("state", "time", "seq", "partitions", "records", "reason")})
        out["tid"] = row["tid"] or tid
    elif status in ("committed", "aborted"):
        out["state"] = COMMITTED if status == "committed" else ABORTED
    if out["state"] != COMMITTED:
        s = staged_by_txn(store, [txn]).get(txn)
        if s is not None:
            out.update(partitions=s["partitions"], records=s["records"], staged_files=s["files"])
        if status == "undecided" and (s is not None or store.exists(open_path(txn))):
            out["state"] = ONGOING
        elif superseded and row is None and status in ("aborted", "unknown"):
            out["tid"] = out["tid"] or fenced.producer_tid(entries, ref.pid)
            fence = fenced.fence_entry(entries, ref, out["tid"])
            if status == "aborted" or fenced.epoch_retained(entries, ref) or \
                    (s is not None and fenced.unreachable(coord, s, now)):
                out.update(state=ABORTED, never_committed=True, fenced_seq=None if fence is None else fence.seq,
                           fenced_time=None if fence is None else utc(fence.ts))
    return out


# -- history ------------------------------------------------------------------------------------------------------


def _item_row(entry: LogEntry, item: Item) -> dict[str, Any]:
    row: dict[str, Any] = {"seq": entry.seq, "time": utc(entry.ts), "operation": item.op.upper(), "txn": None,
                           "tid": None, "app": None, "records": None, "partitions": None, "groups": None,
                           "detail": None}
    if isinstance(item, CommitItem):
        row.update(txn=item.txn, tid=item.tid, app=item.app, records=item.records, partitions=_touched(item),
                   groups=sorted(item.offsets) or None,
                   detail=None if item.app is None else f"version {item.version}")
    elif isinstance(item, AbortItem):
        row.update(txn=item.txn, tid=item.tid, app=item.app, detail=item.reason or None)
    elif isinstance(item, RejectItem):
        row.update(txn=item.txn or None, detail=f"{item.code}: {item.reason}")
    elif isinstance(item, InitItem):
        row.update(tid=item.tid, detail=f"pid {item.pid} epoch {item.epoch}")
    elif isinstance(item, ExpireItem):
        row.update(tid=item.tid, detail=item.reason or None)
    elif isinstance(item, ReplaceItem):
        row.update(operation="COMPACT", records=item.end - item.base, partitions=[f"{item.topic}/{item.partition}"],
                   detail=f"{len(item.replaces)} segments into 1, offsets [{item.base}, {item.end})")
    elif isinstance(item, RetainItem):
        row.update(operation="RETENTION", partitions=[f"{item.topic}/{item.partition}"],
                   detail=f"log start offset moves to {item.start}")
    return row


def history(store: Store, *, limit: int = 100, coordinator: TransactionCoordinator | None = None,
            ) -> list[dict[str, Any]]:
    """The store's history, newest first, like ``DeltaTable.history()``: one row per decision of the last
    ``limit`` retained log entries: ``seq`` (the log entry: the store's version), ``time``, ``operation``
    (``COMMIT``, ``ABORT``, ``REJECT``, ``INIT``, ``EXPIRE``, ``COMPACT``, ``RETENTION``), ``txn``, ``tid``,
    ``app``, ``records``, ``partitions``, ``groups`` and ``detail``.

    Raises:
        CorruptLogError: an entry cannot be decoded.
    """
    coord = coord_for(store, coordinator)
    entries = log_tail(store, limit, coord.log.refresh().seq)
    return [_item_row(e, i) for e in reversed(entries) for i in e.items]


def state_before(store: Store, seq: int) -> tuple[CoordinatorState, int]:
    """A state from which entries can be replayed to rebuild history from entry ``seq`` on: the empty state for
    ``seq == 0``, else the coordinator checkpoint at ``seq - 1`` or, when that one is gone, the oldest checkpoint
    after it. Returns ``(state, first entry to apply)``.

    Raises:
        CorruptLogError: no checkpoint at or after ``seq - 1`` exists or decodes.
    """
    if seq <= 0:
        return CoordinatorState(), 0
    cks = sorted(n for n in (parse_seq(x) for x in store.list(TXN_CHECKPOINT)) if n is not None and n >= seq - 1)
    for c in cks:
        path = f"{TXN_CHECKPOINT}/{seq_name(c)}"
        try:
            d = decode_json(store.get(path), path, "coordinator checkpoint")
            check_format(d, path)
            return CoordinatorState.from_json(d, path), c + 1
        except (CorruptLogError, FileNotFoundError):
            continue
    raise CorruptLogError(f"no coordinator checkpoint covers the log entries before {seq}")


def lag_history(store: Store, group: str | None = None, *, scan: int = 2000,
                coordinator: TransactionCoordinator | None = None) -> list[dict[str, Any]]:
    """Consumer lag over time, rebuilt from the offset commits already in the last ``scan`` retained log entries:
    at each entry that moved a group's committed offsets or the end of a partition it consumes, one row for every
    partition of that group's topics (so summing the rows of one ``seq`` gives the group's total lag then):
    ``time``, ``seq``, ``group``, ``topic``, ``partition``, ``committed``, ``end_offset``, ``lag``. A partition
    the group has not committed for yet counts from its start offset.

    Raises:
        CorruptLogError: the log cannot be replayed.
    """
    coord = coord_for(store, coordinator)
    entries = log_tail(store, scan, coord.log.refresh().seq)
    if not entries:
        return []
    state, first = state_before(store, entries[0].seq)
    final = coord.log.state
    names = sorted(final.groups) if group is None else [group]
    consumed = {(g, t) for g in names for t in final.groups.get(g, {})}
    parts = {(t, p) for (t, p) in final.partitions if any(t == ct for _g, ct in consumed)}
    rows: list[dict[str, Any]] = []
    for e in entries:
        if e.seq < first:
            continue
        state.apply(e)
        moved_ends = {(t, p) for t, p, _i in e.touched} & parts
        moved_groups = {g for i in e.items if isinstance(i, CommitItem) for g in i.offsets if g in names}
        for g, topic in sorted(consumed):
            mine = sorted(x for x in parts if x[0] == topic)
            if g not in moved_groups and not moved_ends.intersection(mine):
                continue
            offsets = state.group_offsets(g).get(topic, {})
            for t, p in mine:
                pm = state.partition(t, p)
                committed = offsets.get(p)
                base = pm.start if committed is None else committed
                rows.append({"time": utc(e.ts), "seq": e.seq, "group": g, "topic": t, "partition": p,
                             "committed": committed, "end_offset": pm.end, "lag": max(0, pm.end - base)})
    return rows
