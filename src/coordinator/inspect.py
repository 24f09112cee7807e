"""Read-only inspection of a store: topics, partitions, transactions, consumer groups and lag, integrity checks and
record dumps, as plain dicts/lists (for scripts and the ``txnlog`` command line) or pandas DataFrames (notebooks).

Nothing here writes to the store: a partition record not yet written is computed from the log entry that defines
it, and end offsets are those of the log's state.

```python
from coordinator import open_store
from coordinator import inspect as ti
store = open_store("file:///data/lake", probe=False)
ti.frame(ti.topics(store))          # a DataFrame, one row per topic
ti.transactions(store)["open"]      # producer transactions that staged data and are not decided
ti.verify(store)                    # [] when every file is sound
```
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from coordinator.coordinator import GROUP_TID_PREFIX, TransactionCoordinator
from coordinator.decisions import decided_by_name
from coordinator.errors import CorruptLogError, InvalidOptionError, TopicNotFoundError, TxnLogError
from coordinator.layout import (
    TOPICS,
    TXN_CHECKPOINT,
    TXN_INTENTS,
    TXN_LOG,
    TXN_OPEN,
    marker_dir,
    parse_seq,
    partition_checkpoint_dir,
    seq_name,
    topic_dir,
    topic_meta_dir,
)
from coordinator.partition import IndexedSegment, PartitionLog
from coordinator.partrecords import CommitOp, PartitionRecord, ReplaceOp, records_of
from coordinator.reader import output_schema, read_slices, uncommitted_paths
from coordinator.records import (
    AbortItem,
    CommitItem,
    LogEntry,
    RejectItem,
    TxnState,
    check_format,
    decode_json,
    parse_txn_id,
)
from coordinator.segments import decode_segment
from coordinator.store import Store
from coordinator.topics import TopicMeta, get_topic, list_topics
from coordinator.txnlog import now_ms

if TYPE_CHECKING:
    import pandas as pd

#: Called with the number of units just finished (segments read, entries checked) for progress display.
ProgressFn = Callable[[int], None]


class GroupNotFoundError(TxnLogError):
    """The named consumer group has no committed offsets in the store."""


def frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """``rows`` (a list of flat dicts, as the functions here return) as a pandas DataFrame."""
    import pandas as pd

    return pd.DataFrame(list(rows))


def _coord(store: Store, coordinator: TransactionCoordinator | None) -> TransactionCoordinator:
    return coordinator if coordinator is not None else TransactionCoordinator(store)


# -- topics -------------------------------------------------------------------------------------------------------


def partition_info(
    coord: TransactionCoordinator, topic: str, partition: int, *, staged: bool = False
) -> dict[str, Any]:
    """One partition: start/end offsets, committed records, published segments and their bytes, last commit time;
    with ``staged``, also the count of staged files no marker names yet (open, aborted or in-doubt data)."""
    plog = coord.partition(topic, partition)
    plog.refresh()
    info: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "start_offset": plog.start_offset,
        "end_offset": plog.end_offset,
        "records": plog.end_offset - plog.start_offset,
        "segments": len(plog.segments),
        "bytes": sum(s.size for s in plog.segments),
        "markers": plog.next_idx,
        "damaged": None,
        "last_commit_ts": max((s.ts for s in plog.segments), default=None),
    }
    if staged:
        info["staged_files"] = len(uncommitted_paths(coord.store, plog))
    return info


def describe_topic(store: Store, name: str, *, coordinator: TransactionCoordinator | None = None) -> dict[str, Any]:
    """A topic's definition and per-partition figures (see :func:`partition_info`), plus totals.

    Raises:
        TopicNotFoundError: no such topic. CorruptLogError: its definition or a marker cannot be decoded.
    """
    meta = get_topic(store, name)
    coord = _coord(store, coordinator)
    parts = [partition_info(coord, name, p, staged=True) for p in range(meta.partitions)]
    return {
        "name": meta.name,
        "partitions": meta.partitions,
        "version": meta.version,
        "created_ms": meta.created_ms,
        "fields": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in meta.schema],
        "config": dict(meta.config),
        "records": sum(p["records"] for p in parts),
        "bytes": sum(p["bytes"] for p in parts),
        "segments": sum(p["segments"] for p in parts),
        "partition_info": parts,
    }


def topics(store: Store, *, coordinator: TransactionCoordinator | None = None) -> list[dict[str, Any]]:
    """One row per topic: name, partitions, records, bytes, segments, and start/end offsets per partition."""
    coord = _coord(store, coordinator)
    out = []
    for name in list_topics(store):
        meta = get_topic(store, name)
        parts = [partition_info(coord, name, p) for p in range(meta.partitions)]
        out.append({
            "name": name,
            "partitions": meta.partitions,
            "records": sum(p["records"] for p in parts),
            "bytes": sum(p["bytes"] for p in parts),
            "segments": sum(p["segments"] for p in parts),
            "start_offsets": {p["partition"]: p["start_offset"] for p in parts},
            "end_offsets": {p["partition"]: p["end_offset"] for p in parts},
        })
    return out


# -- transactions -------------------------------------------------------------------------------------------------


def transactions(
    store: Store, *, recent: int = 20, scan: int = 200, now: int | None = None,
    coordinator: TransactionCoordinator | None = None,
) -> dict[str, Any]:
    """The coordinator's view of transactions.

    Returns a dict with ``log_seq`` (last transaction-log entry), ``producers`` (every transactional id: pid,
    epoch, state, last decided transaction and its outcome, ``idle_ms`` since its last decision, ``timeout_ms``),
    ``open`` (producer transactions that staged data and are not decided: ``age_ms`` on the store's clock,
    ``timed_out``), ``waiting`` (requests published for group commit and not decided yet) and ``recent`` (the
    last ``recent`` decisions found in the last ``scan`` log entries, newest first). ``in_doubt`` lists the open
    transactions again (what ``txnlog resolve --all`` acts on): with format 2 no transaction is ever half
    committed, so "in doubt" means "open, its producer may still commit or abort it".
    """
    coord = _coord(store, coordinator)
    infos = store.list_info(TXN_OPEN)
    t = int(store.now() * 1000) if now is None else now
    state = coord.log.refresh()
    producers = []
    for m in sorted(state.producers.values(), key=lambda m: m.tid):
        producers.append({
            "tid": m.tid, "pid": m.pid, "epoch": m.epoch, "state": m.state.value, "last_txn": m.last_txn,
            "last_outcome": m.last_outcome, "idle_ms": t - m.last_ts, "timeout_ms": m.timeout_ms,
            "reserved": m.tid.startswith(GROUP_TID_PREFIX), "ephemeral": m.ephemeral,
        })
    opened = []
    for info in infos:
        txn = info.path.rsplit("/", 1)[-1].removesuffix(".json")
        ref = parse_txn_id(txn)
        if ref is None or ref.kind != "p":
            continue
        pm = state.producer_by_pid(ref.pid)
        if pm is None or pm.epoch != ref.epoch or ref.n <= pm.last_txn:
            continue  # decided: a leftover open record
        age = t - int(info.mtime * 1000)
        opened.append({"txn": txn, "tid": pm.tid, "pid": ref.pid, "epoch": ref.epoch, "state": "Ongoing",
                       "age_ms": age, "timeout_ms": pm.timeout_ms, "timed_out": age > pm.timeout_ms})
    waiting = []
    for info in store.list_info(TXN_INTENTS):
        rid = info.path.rsplit("/", 1)[-1].removesuffix(".json")
        if not decided_by_name(rid, state):
            waiting.append({"request": rid, "age_ms": t - int(info.mtime * 1000)})
    return {
        "log_seq": state.seq,
        "producers": producers,
        "open": opened,
        "in_doubt": opened,
        "waiting": waiting,
        "recent": recent_transactions(store, limit=recent, scan=scan, last_seq=state.seq, now=t),
    }


def log_tail(store: Store, scan: int, last_seq: int | None = None) -> list[LogEntry]:
    """The last ``scan`` retained entries of the transaction log, oldest first (fewer if fewer are retained).

    Raises:
        CorruptLogError: an entry cannot be decoded.
    """
    if scan <= 0:
        return []
    start_after = None if last_seq is None or last_seq - scan < 0 else seq_name(last_seq - scan)
    names = [n for n in store.list(TXN_LOG, start_after=start_after) if parse_seq(n) is not None][-scan:]
    return [LogEntry.from_bytes(store.get(f"{TXN_LOG}/{n}"), f"{TXN_LOG}/{n}") for n in names]


def decision_rows(entry: LogEntry, now: int) -> list[dict[str, Any]]:
    """One row per transaction decision in ``entry``: what it touched (partitions, records, groups), the outcome
    and the reason."""
    rows = []
    for item in entry.items:
        base = {"seq": entry.seq, "ts": entry.ts, "age_ms": now - entry.ts, "request": item.request}
        if isinstance(item, CommitItem):
            rows.append(base | {
                "txn": item.txn, "tid": item.tid, "app": item.app,
                "version": item.version if item.app is not None else None, "outcome": "committed",
                "state": TxnState.COMPLETE_COMMIT.value,
                "partitions": [f"{p.topic}/{p.partition}" for p in item.parts if p.rows],
                "records": item.records, "segments": sum(len(p.segments) for p in item.parts),
                "groups": sorted(item.offsets), "reason": None})
        elif isinstance(item, AbortItem):
            rows.append(base | {
                "txn": item.txn, "tid": item.tid, "app": item.app,
                "version": item.version if item.app is not None else None,
                "outcome": "skipped" if item.skipped else "aborted", "state": TxnState.COMPLETE_ABORT.value,
                "partitions": [], "records": 0, "segments": 0, "groups": [], "reason": item.reason})
        elif isinstance(item, RejectItem):
            rows.append(base | {
                "txn": item.txn or None, "tid": None, "app": None, "version": None, "outcome": "rejected",
                "state": None, "partitions": [], "records": 0, "segments": 0, "groups": [],
                "reason": f"{item.code}: {item.reason}"})
    return rows


def recent_transactions(store: Store, *, limit: int = 20, scan: int = 1000, last_seq: int | None = None,
                        now: int | None = None) -> list[dict[str, Any]]:
    """Transaction decisions (commits, aborts, rejections) among the last ``scan`` log entries, newest first."""
    if limit <= 0:
        return []
    t = now_ms() if now is None else now
    out: list[dict[str, Any]] = []
    for e in reversed(log_tail(store, scan, last_seq)):
        out += reversed(decision_rows(e, t))
        if len(out) >= limit:
            break
    return out[:limit]


def find_transaction(store: Store, txn: str, *, scan: int = 1000,
                     coordinator: TransactionCoordinator | None = None) -> dict[str, Any] | None:
    """Where transaction ``txn`` stands: ``{"txn", "tid", "pid", "epoch", "status"}`` with status ``ongoing``
    (open: staged data, not decided), ``committed``, ``aborted`` or ``unknown``; None if the id does not parse."""
    coord = _coord(store, coordinator)
    ref = parse_txn_id(txn)
    if ref is None:
        return None
    status = coord.txn_status(txn)
    tid = None
    if ref.kind == "p":
        m = coord.log.state.producer_by_pid(ref.pid)
        tid = None if m is None else m.tid
    if status == "undecided":
        status = "ongoing"
    if status == "unknown":
        for e in reversed(log_tail(store, scan, coord.log.state.seq)):
            for row in decision_rows(e, now_ms()):
                if row["txn"] == txn:
                    status = row["outcome"] if row["outcome"] != "skipped" else "aborted"
                    tid = row["tid"] or tid
                    break
            if status != "unknown":
                break
    return {"txn": txn, "tid": tid, "pid": ref.pid if ref.kind == "p" else None,
            "epoch": ref.epoch if ref.kind == "p" else None, "app": ref.app or None, "status": status}


# -- groups -------------------------------------------------------------------------------------------------------


def lag(store: Store, group: str | None = None, *, coordinator: TransactionCoordinator | None = None,
        ) -> list[dict[str, Any]]:
    """One row per (group, topic, partition) with committed offsets: ``committed`` (next offset to consume),
    ``end_offset`` (committed end), ``lag`` (records between them). Every partition of a topic the group
    committed for is listed (an uncommitted partition counts from its start offset, ``committed`` None).

    Raises:
        GroupNotFoundError: ``group`` is given and has no committed offsets.
    """
    coord = _coord(store, coordinator)
    state = coord.log.refresh()
    names = sorted(state.groups) if group is None else [group]
    if group is not None and group not in state.groups:
        raise GroupNotFoundError(f"consumer group {group!r} has no committed offsets in {store.url}")
    rows = []
    for g in names:
        offsets = state.group_offsets(g)
        for topic in sorted(offsets):
            try:
                n = get_topic(store, topic).partitions
            except TopicNotFoundError:
                n = 0
            for p in sorted(set(range(n)) | set(offsets[topic])):
                committed = offsets[topic].get(p)
                if p < n:
                    info = partition_info(coord, topic, p)
                    end, start = info["end_offset"], info["start_offset"]
                else:
                    end = start = None
                base = committed if committed is not None else start
                rows.append({"group": g, "topic": topic, "partition": p, "committed": committed,
                             "end_offset": end, "lag": None if end is None or base is None else max(0, end - base)})
    return rows


def groups(store: Store, *, coordinator: TransactionCoordinator | None = None) -> list[dict[str, Any]]:
    """One row per consumer group: topics, partitions with committed offsets, total lag."""
    out: dict[str, dict[str, Any]] = {}
    for r in lag(store, coordinator=coordinator):
        g = out.setdefault(r["group"], {"group": r["group"], "topics": [], "partitions": 0, "lag": 0})
        if r["topic"] not in g["topics"]:
            g["topics"].append(r["topic"])
        g["partitions"] += r["committed"] is not None
        g["lag"] += r["lag"] or 0
    return list(out.values())


# -- verify -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One integrity problem: the file (store-relative path), a kind and a message naming what is wrong.

    Kinds: ``missing``, ``truncated`` (size differs), ``checksum``, ``undecodable``, ``corrupt`` (a log entry,
    partition log record or topic definition that does not decode or does not fit its place), ``gap`` (a
    numbered log skips)."""

    path: str
    kind: str
    message: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def _dense(names: list[str], folder: str, checkpoints: list[int], what: str) -> list[Problem]:
    """Numbered files must follow one another; the first may be above 0 only just after a checkpoint."""
    seqs = [n for n in (parse_seq(x) for x in names) if n is not None]
    problems = []
    if seqs and seqs[0] > 0 and seqs[0] - 1 not in checkpoints:
        problems.append(Problem(f"{folder}/{seq_name(seqs[0])}", "gap",
                                f"{what} starts at {seqs[0]} with no checkpoint covering the entries before it"))
    for a, b in zip(seqs, seqs[1:], strict=False):
        if b != a + 1:
            problems.append(Problem(f"{folder}/{seq_name(b)}", "gap", f"{what} skips from {a} to {b}"))
    return problems


def _numbered(store: Store, folder: str) -> list[int]:
    return [n for n in (parse_seq(x) for x in store.list(folder)) if n is not None]


def verify(store: Store, *, progress: ProgressFn | None = None,
           total: Callable[[int], None] | None = None) -> list[Problem]:
    """Check the store's integrity without changing it: the retained transaction log is dense and every entry and
    checkpoint decodes; every topic definition decodes; every partition's records are dense, decode, sit at their
    number, chain their commit offsets, agree with the log entry that defines them (where it is retained) and reach
    the count the log's state gives; every live segment exists, has the recorded size and CRC-32, and decodes.
    ``total`` is told how many segments will be read, ``progress`` is called once per segment.

    Returns:
        the problems found, each naming its file (a damaged partition names itself in the path); empty when the
        store is sound.
    """
    problems: list[Problem] = []
    names = store.list(TXN_LOG)
    ckpts = _numbered(store, TXN_CHECKPOINT)
    problems += _dense(names, TXN_LOG, ckpts, "transaction log")
    entries: dict[int, LogEntry] = {}
    for n in names:
        if parse_seq(n) is None:
            continue
        path = f"{TXN_LOG}/{n}"
        try:
            e = LogEntry.from_bytes(store.get(path), path)
            if e.seq != parse_seq(n):
                problems.append(Problem(path, "corrupt", f"transaction log entry {path} holds entry {e.seq}"))
            else:
                entries[e.seq] = e
        except TxnLogError as exc:
            problems.append(Problem(path, "corrupt", str(exc)))
        except FileNotFoundError:
            problems.append(Problem(path, "missing", f"transaction log entry {path} vanished while listed"))
    for c in ckpts:
        path = f"{TXN_CHECKPOINT}/{seq_name(c)}"
        try:
            check_format(decode_json(store.get(path), path, "coordinator checkpoint"), path)
        except TxnLogError as exc:
            problems.append(Problem(path, "corrupt", str(exc)))
        except FileNotFoundError:
            continue
    counts: dict[tuple[str, int], int] = {}
    try:
        state = TransactionCoordinator(store).log.state
        counts = {tp: pm.next_idx for tp, pm in state.partitions.items()}
    except TxnLogError as exc:
        problems.append(Problem(TXN_LOG, "corrupt", f"the transaction log cannot be replayed: {exc}"))
    defined: dict[tuple[str, int, int], LogEntry] = {}
    for e in entries.values():
        for t, p, idx in e.touched:
            defined[(t, p, idx)] = e
    segments: dict[str, tuple[int, int]] = {}
    for topic in store.list_dirs(TOPICS):
        meta = _verify_topic_meta(store, topic, problems)
        if meta is None:
            continue
        for p in range(meta.partitions):
            _verify_partition(store, topic, p, problems, segments, counts.get((topic, p), 0), defined)
    if total is not None:
        total(len(segments))
    for path, (size, crc) in sorted(segments.items()):
        problems += _verify_segment(store, path, size, crc)
        if progress is not None:
            progress(1)
    return problems


def _verify_topic_meta(store: Store, topic: str, problems: list[Problem]) -> TopicMeta | None:
    mdir = topic_meta_dir(topic)
    latest: TopicMeta | None = None
    names = store.list(mdir)
    if not names:
        problems.append(Problem(topic_dir(topic), "missing", f"topic folder {topic_dir(topic)} has no definition"))
    for n in names:
        path = f"{mdir}/{n}"
        try:
            latest = TopicMeta.from_bytes(store.get(path), path)
        except CorruptLogError as exc:
            problems.append(Problem(path, "corrupt", str(exc)))
    return latest


def _verify_partition(store: Store, topic: str, p: int, problems: list[Problem],
                      segments: dict[str, tuple[int, int]], count: int,
                      defined: dict[tuple[str, int, int], LogEntry]) -> None:
    """Walk a partition's records, reporting structural problems, and add the segments a reader would read (the
    live set after replaying them) to ``segments``."""
    mdir = marker_dir(topic, p)
    names = [n for n in store.list(mdir) if parse_seq(n) is not None]
    cdir = partition_checkpoint_dir(topic, p)
    ckpts = _numbered(store, cdir)
    where = f"partition {topic}/{p}"
    live: dict[str, tuple[int, int, int, int]] = {}  # path -> (base, end, size, crc32)
    first = (parse_seq(names[0]) or 0) if names else count
    expected_base: int | None = 0
    if first:
        expected_base = None
        start_ck = max((c for c in ckpts if c < first), default=None)
        if start_ck is not None:
            first = start_ck + 1
            path = f"{cdir}/{seq_name(start_ck)}"
            try:
                d = decode_json(store.get(path), path, "partition checkpoint")
                check_format(d, path)
                expected_base = int(d["end_offset"])
                for seg in (IndexedSegment.from_json(x) for x in d["segments"]):
                    live[seg.path] = (seg.base_offset, seg.end_offset, seg.size, seg.crc32)
            except (TxnLogError, KeyError, TypeError, ValueError, FileNotFoundError) as exc:
                problems.append(Problem(path, "corrupt",
                                        f"partition checkpoint {path} of {where} is corrupt: {exc}"))
        elif first > 0:
            problems.append(Problem(f"{mdir}/{seq_name(first)}", "gap",
                                    f"records of {where} start at {first} with no partition checkpoint before"))
    listed = {i for i in (parse_seq(n) for n in names) if i is not None}
    for idx in range(first, max(count, max(listed, default=-1) + 1)):
        path = f"{mdir}/{seq_name(idx)}"
        want = defined.get((topic, p, idx))
        derived = records_of(want)[(topic, p)] if want is not None else None
        rec: PartitionRecord | None = None
        if idx in listed:
            try:
                rec = PartitionRecord.from_bytes(store.get(path), path)
            except TxnLogError as exc:
                problems.append(Problem(path, "corrupt", f"{where} is damaged: {exc}"))
            except FileNotFoundError:
                pass
            if rec is not None and derived is not None and rec != derived:
                problems.append(Problem(path, "corrupt", f"{where} is damaged: record {idx} differs from what "
                                                         f"log entry {want.seq if want else '?'} defines"))
        elif idx < count:
            how = "no retained log entry defines it"
            if want is not None:
                how = f"log entry {want.seq} defines it: 'txnlog repair' writes it"
            problems.append(Problem(path, "missing", f"record {idx} of {where} is missing ({how})"))
        rec = derived if derived is not None else rec
        if rec is None:
            expected_base = None
            continue
        for op in rec.ops:
            if isinstance(op, CommitOp):
                if expected_base is not None and op.base != expected_base:
                    problems.append(Problem(path, "corrupt", f"{where}: record {idx} starts transaction {op.txn} at "
                                                             f"offset {op.base}, expected {expected_base}"))
                off = op.base
                for sg in op.segments:
                    if sg.rows:
                        live[sg.path] = (off, off + sg.rows, sg.size, sg.crc32)
                    off += sg.rows
                expected_base = off
            elif isinstance(op, ReplaceOp):
                for old in op.replaces:
                    live.pop(old, None)
                live[op.segment.path] = (op.base, op.end, op.segment.size, op.segment.crc32)
            else:
                live = {k: v for k, v in live.items() if v[1] > op.start}
    for path, (_b, _e, size, crc) in live.items():
        segments[path] = (size, crc)


def _verify_segment(store: Store, path: str, size: int, crc: int) -> list[Problem]:
    try:
        data = store.get(path)
    except FileNotFoundError:
        return [Problem(path, "missing", f"segment {path} named by a commit is missing")]
    if len(data) != size:
        return [Problem(path, "truncated", f"segment {path} is {len(data)} bytes, its commit records {size}")]
    if zlib.crc32(data) != crc:
        return [Problem(path, "checksum", f"segment {path} fails its CRC-32 check")]
    try:
        decode_segment(data, path)
    except CorruptLogError as exc:
        return [Problem(path, "undecodable", str(exc))]
    return []


# -- dump ---------------------------------------------------------------------------------------------------------


def dump(
    store: Store, topic: str, *, partition: int | None = None, start: int | None = None, end: int | None = None,
    limit: int | None = None, progress: ProgressFn | None = None, total: Callable[[int], None] | None = None,
    coordinator: TransactionCoordinator | None = None,
) -> pa.Table:
    """Committed records of ``topic`` (one partition, or all in partition order) at offsets ``[start, end)``
    (clamped to each partition's range), at most ``limit`` rows, with ``_partition``, ``_offset`` and
    ``_timestamp`` columns. ``total``/``progress`` count segment slices read.

    Raises:
        TopicNotFoundError: no such topic. InvalidOptionError: bad partition, offsets or limit.
        CorruptLogError: a segment is missing or damaged.
    """
    meta = get_topic(store, topic)
    if partition is not None and not 0 <= partition < meta.partitions:
        raise InvalidOptionError(f"topic {topic!r} has no partition {partition} (it has {meta.partitions})")
    for name, v in (("--from", start), ("--to", end), ("--limit", limit)):
        if v is not None and v < 0:
            raise InvalidOptionError(f"{name} must not be negative, got {v}")
    coord = _coord(store, coordinator)
    schema = output_schema(meta.schema)
    columns = [n for n in schema.names if n != "_topic"]
    plan = []
    left = limit
    for p in ([partition] if partition is not None else range(meta.partitions)):
        plog: PartitionLog = coord.partition(topic, p)
        plog.refresh()
        lo = max(plog.start_offset, start or 0)
        hi = min(plog.end_offset, plog.end_offset if end is None else end)
        if left is not None:
            hi = min(hi, lo + left)
        if hi <= lo:
            continue
        plan.append((plog, plog.slices(lo, hi)))
        if left is not None:
            left -= hi - lo
    if total is not None:
        total(sum(len(s) for _, s in plan))
    batches: list[pa.RecordBatch] = []
    for plog, slices in plan:
        for sl in slices:
            batches += list(read_slices(store, topic, plog.partition, [sl], schema, columns=columns))
            if progress is not None:
                progress(1)
    out_schema = pa.schema([schema.field(c) for c in columns])
    return pa.Table.from_batches(batches, schema=out_schema)
