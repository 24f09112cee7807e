"""Read-only inspection of a store: topics, partitions, transactions, consumer groups and lag, integrity checks and
record dumps, as plain dicts/lists (for scripts and the ``txnlog`` command line) or pandas DataFrames (notebooks).

Nothing here writes to the store: prepared-but-incomplete commits are reported as *in doubt*, never rolled forward
(that is ``TransactionCoordinator.complete_pending``'s job, or ``txnlog resolve``), and end offsets are those of
the markers already written.

```python
from coordinator import open_store
from coordinator import inspect as ti
store = open_store("file:///data/lake", probe=False)
ti.frame(ti.topics(store))          # a DataFrame, one row per topic
ti.transactions(store)["in_doubt"]  # prepared commits still waiting for their markers
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
from coordinator.errors import CorruptLogError, InvalidOptionError, TopicNotFoundError, TxnLogError
from coordinator.layout import (
    TOPICS,
    TXN_CHECKPOINT,
    TXN_LOG,
    marker_dir,
    parse_seq,
    partition_checkpoint_dir,
    seq_name,
    topic_dir,
    topic_meta_dir,
)
from coordinator.partition import IndexedSegment, PartitionLog
from coordinator.reader import output_schema, read_slices, uncommitted_paths
from coordinator.records import Marker, ReplaceRecord, TxnEntry, TxnState, decode_json, decode_partition_record
from coordinator.segments import decode_segment
from coordinator.store import Store
from coordinator.topics import TopicMeta, get_topic, list_topics
from coordinator.txnlog import now_ms

if TYPE_CHECKING:
    import pandas as pd

#: Called with the number of units just finished (segments read, entries checked) for progress display.
ProgressFn = Callable[[int], None]
OPEN_STATES = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
IN_DOUBT_STATES = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


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
    epoch, state, open transaction, ``age_ms`` of the open transaction, ``idle_ms`` since its last entry,
    ``timeout_ms``, ``timed_out``, ``in_doubt``), ``open`` (producers with an ongoing transaction), ``in_doubt``
    (prepared but incomplete: PrepareCommit waiting for markers, PrepareAbort waiting for its completion, with
    the partitions and records a prepared commit names) and ``recent`` (the last ``recent`` completed
    transactions found in the last ``scan`` log entries, newest first).
    """
    t = now_ms() if now is None else now
    coord = _coord(store, coordinator)
    state = coord.log.refresh()
    producers = []
    for m in sorted(state.producers.values(), key=lambda m: m.tid):
        age = None if m.txn_start_ts is None or m.state not in OPEN_STATES else t - m.txn_start_ts
        producers.append({
            "tid": m.tid, "pid": m.pid, "epoch": m.epoch, "state": m.state.value,
            "txn": m.txn if m.state in OPEN_STATES else None, "age_ms": age, "idle_ms": t - m.last_ts,
            "timeout_ms": m.timeout_ms, "timed_out": m.state is TxnState.ONGOING and age is not None
            and age > m.timeout_ms, "in_doubt": m.state in IN_DOUBT_STATES,
            "reserved": m.tid.startswith(GROUP_TID_PREFIX),
        })
    in_doubt = []
    for txn, prep in state.pending.items():
        in_doubt.append(_entry_row(prep, t) | {"txn": txn})
    for m in state.producers.values():
        if m.state is TxnState.PREPARE_ABORT:
            in_doubt.append({"txn": m.txn, "tid": m.tid, "pid": m.pid, "epoch": m.epoch, "state": m.state.value,
                             "seq": None, "ts": m.last_ts, "age_ms": t - m.last_ts, "partitions": [],
                             "records": 0, "segments": 0})
    return {
        "log_seq": state.seq,
        "producers": producers,
        "open": [p for p in producers if p["state"] == TxnState.ONGOING.value],
        "in_doubt": in_doubt,
        "recent": recent_transactions(store, limit=recent, scan=scan, last_seq=state.seq, now=t),
    }


def _entry_row(e: TxnEntry, now: int) -> dict[str, Any]:
    return {
        "txn": e.txn, "tid": e.tid, "pid": e.pid, "epoch": e.epoch, "state": e.state.value, "seq": e.seq,
        "ts": e.ts, "age_ms": now - e.ts, "partitions": [f"{t}/{p}" for t, p in e.partitions()],
        "records": sum(s.rows for s in e.segments), "segments": len(e.segments),
    }


def log_tail(store: Store, scan: int, last_seq: int | None = None) -> list[TxnEntry]:
    """The last ``scan`` entries of the transaction log, oldest first (fewer if the log is shorter).

    Raises:
        CorruptLogError: an entry cannot be decoded.
    """
    if scan <= 0:
        return []
    start_after = None if last_seq is None or last_seq - scan < 0 else seq_name(last_seq - scan)
    names = [n for n in store.list(TXN_LOG, start_after=start_after) if parse_seq(n) is not None][-scan:]
    return [TxnEntry.from_bytes(store.get(f"{TXN_LOG}/{n}"), f"{TXN_LOG}/{n}") for n in names]


def recent_transactions(store: Store, *, limit: int = 20, scan: int = 1000, last_seq: int | None = None,
                        now: int | None = None) -> list[dict[str, Any]]:
    """Completed transactions (CompleteCommit / CompleteAbort) among the last ``scan`` log entries, newest first:
    the outcome, when it was decided and, for commits whose PrepareCommit is in the window, what they published."""
    if limit <= 0:
        return []
    t = now_ms() if now is None else now
    entries = log_tail(store, scan, last_seq)
    prepares = {e.txn: e for e in entries if e.state is TxnState.PREPARE_COMMIT}
    out = []
    for e in reversed(entries):
        if e.state not in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) or e.txn is None:
            continue
        prep = prepares.get(e.txn)
        row = _entry_row(prep, t) if prep is not None else _entry_row(e, t)
        row.update(state=e.state.value, seq=e.seq, outcome="committed" if e.state is TxnState.COMPLETE_COMMIT
                   else "aborted", reason=e.reason)
        out.append(row)
        if len(out) >= limit:
            break
    return out


def find_transaction(store: Store, txn: str, *, scan: int = 1000,
                     coordinator: TransactionCoordinator | None = None) -> dict[str, Any] | None:
    """Where transaction ``txn`` stands: ``{"txn", "tid", "state", "status"}`` with status ``in_doubt_commit``,
    ``in_doubt_abort``, ``ongoing``, ``committed`` or ``aborted``; None if neither the coordinator state nor the
    last ``scan`` log entries know it."""
    coord = _coord(store, coordinator)
    state = coord.log.refresh()
    if txn in state.pending:
        p = state.pending[txn]
        return {"txn": txn, "tid": p.tid, "pid": p.pid, "epoch": p.epoch, "state": p.state.value,
                "status": "in_doubt_commit"}
    for m in state.producers.values():
        if m.txn == txn and m.state in (TxnState.ONGOING, TxnState.PREPARE_ABORT):
            status = "ongoing" if m.state is TxnState.ONGOING else "in_doubt_abort"
            return {"txn": txn, "tid": m.tid, "pid": m.pid, "epoch": m.epoch, "state": m.state.value,
                    "status": status}
    for e in reversed(log_tail(store, scan, state.seq)):
        if e.txn == txn and e.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return {"txn": txn, "tid": e.tid, "pid": e.pid, "epoch": e.epoch, "state": e.state.value,
                    "status": "committed" if e.state is TxnState.COMPLETE_COMMIT else "aborted"}
    return None


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
    """Check the store's integrity without changing it: the transaction log is dense and every entry decodes;
    every topic definition decodes; every partition's record log (commit markers, compaction and retention
    records) is dense, decodes, sits at its number and chains its commit offsets; every live segment (named by a
    marker or a compaction record and not since replaced or retired) exists, has the recorded size and CRC-32,
    and decodes. ``total`` is told how many segments will be read, ``progress`` is called once per segment.

    Returns:
        the problems found, each naming its file; empty when the store is sound.
    """
    problems: list[Problem] = []
    names = store.list(TXN_LOG)
    problems += _dense(names, TXN_LOG, _numbered(store, TXN_CHECKPOINT), "transaction log")
    for n in names:
        if parse_seq(n) is None:
            continue
        path = f"{TXN_LOG}/{n}"
        try:
            e = TxnEntry.from_bytes(store.get(path), path)
            if e.seq != parse_seq(n):
                problems.append(Problem(path, "corrupt", f"transaction log entry {path} holds entry {e.seq}"))
        except CorruptLogError as exc:
            problems.append(Problem(path, "corrupt", str(exc)))
        except FileNotFoundError:
            problems.append(Problem(path, "missing", f"transaction log entry {path} vanished while listed"))
    segments: dict[str, tuple[int, int]] = {}
    for topic in store.list_dirs(TOPICS):
        meta = _verify_topic_meta(store, topic, problems)
        if meta is None:
            continue
        for p in range(meta.partitions):
            _verify_markers(store, topic, p, problems, segments)
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


def _verify_markers(store: Store, topic: str, p: int, problems: list[Problem],
                    segments: dict[str, tuple[int, int]]) -> None:
    """Walk a partition's record log (COMMIT markers, compaction REPLACE and retention RETAIN records), reporting
    structural problems, and add the segments a reader would read (the live set after replaying it) to
    ``segments``."""
    mdir = marker_dir(topic, p)
    names = [n for n in store.list(mdir) if parse_seq(n) is not None]
    cdir = partition_checkpoint_dir(topic, p)
    ckpts = _numbered(store, cdir)
    problems += _dense(names, mdir, ckpts, f"marker log of {topic}/{p}")
    live: dict[str, tuple[int, int, int, int]] = {}  # path -> (base, end, size, crc32)
    expected_base: int | None = 0
    first = parse_seq(names[0]) if names else None
    if first:
        expected_base = None
        if first - 1 in ckpts:
            path = f"{cdir}/{seq_name(first - 1)}"
            try:
                d = decode_json(store.get(path), path, "partition checkpoint")
                expected_base = int(d["end_offset"])
                for seg in (IndexedSegment.from_json(x) for x in d["segments"]):
                    live[seg.path] = (seg.base_offset, seg.end_offset, seg.size, seg.crc32)
            except (CorruptLogError, KeyError, TypeError, ValueError, FileNotFoundError) as exc:
                problems.append(Problem(path, "corrupt", f"partition checkpoint {path} is corrupt: {exc}"))
    for n in names:
        path = f"{mdir}/{n}"
        try:
            rec = decode_partition_record(store.get(path), path)
        except CorruptLogError as exc:
            problems.append(Problem(path, "corrupt", str(exc)))
            expected_base = None
            continue
        except FileNotFoundError:
            continue
        if rec.idx != parse_seq(n):
            problems.append(Problem(path, "corrupt", f"partition log record {path} holds record {rec.idx}"))
        if isinstance(rec, Marker):
            if expected_base is not None and rec.base_offset != expected_base:
                problems.append(Problem(path, "corrupt", f"commit marker {path} starts at offset "
                                                         f"{rec.base_offset}, expected {expected_base}"))
            if sum(s.rows for s in rec.segments) != rec.records:
                problems.append(Problem(path, "corrupt", f"commit marker {path}: segment rows do not add up to "
                                                         f"{rec.records}"))
            off = rec.base_offset
            for s in rec.segments:
                if s.rows:
                    live[s.path] = (off, off + s.rows, s.size, s.crc32)
                off += s.rows
            expected_base = rec.end_offset
        elif isinstance(rec, ReplaceRecord):
            for old in rec.replaces:
                live.pop(old, None)
            live[rec.segment.path] = (rec.base_offset, rec.end_offset, rec.segment.size, rec.segment.crc32)
        else:
            live = {k: v for k, v in live.items() if v[1] > rec.start_offset}
    for path, (_b, _e, size, crc) in live.items():
        segments[path] = (size, crc)


def _verify_segment(store: Store, path: str, size: int, crc: int) -> list[Problem]:
    try:
        data = store.get(path)
    except FileNotFoundError:
        return [Problem(path, "missing", f"segment {path} named by a commit marker is missing")]
    if len(data) != size:
        return [Problem(path, "truncated", f"segment {path} is {len(data)} bytes, its marker records {size}")]
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
