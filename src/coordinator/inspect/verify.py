"""Integrity checks of a store without changing it (``txnlog verify``), and what ``txnlog repair`` would rewrite.

See :func:`verify` for what is checked. Problems name their file; a damaged partition names itself in the path, so
one damaged partition is reported without hiding the others.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import REPAIR_LOG_HINT, CorruptLogError, TxnLogError
from coordinator.inspect.common import ProgressFn
from coordinator.layout import (
    LAST_CHECKPOINT,
    TOPICS,
    TXN_CHECKPOINT,
    TXN_LOG,
    marker_dir,
    marker_path,
    parse_seq,
    partition_checkpoint_dir,
    seq_name,
    topic_dir,
    topic_meta_dir,
)
from coordinator.logrebuild import rebuilt_note
from coordinator.partition import IndexedSegment
from coordinator.partrecords import CommitOp, PartitionRecord, ReplaceOp, records_of
from coordinator.records import LogEntry, check_format, decode_json
from coordinator.segments import decode_segment
from coordinator.state import CoordinatorState
from coordinator.store import Store
from coordinator.topics import DELETED_MARKER, TopicMeta


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


class VerifyReport(list[Problem]):
    """The problems :func:`verify` found (a list: empty when the store is sound), with what it looked at:
    ``segments_checked``, ``pending`` (paths of partition records not written yet whose log entry is newer
    than the newest checkpoint: readers compute them from the log, the daemon and ``txnlog repair`` write them;
    not a problem) and ``rebuilt`` (log entries ``txnlog repair --log`` rebuilt from copies, by path, with what it
    assumed and what no copy held: not a problem, a record of what was lost)."""

    def __init__(self, problems: list[Problem] | None = None) -> None:
        super().__init__(problems or [])
        self.segments_checked = 0
        self.pending: list[str] = []
        self.rebuilt: dict[str, dict[str, list[str]]] = {}

    def to_json(self) -> dict[str, Any]:
        return {"ok": not self, "segments_checked": self.segments_checked, "pending_records": len(self.pending),
                "problems": [p.to_json() for p in self], "rebuilt": self.rebuilt}


def _dense(names: list[str], folder: str, checkpoints: list[int], what: str) -> list[Problem]:
    """Numbered files must follow one another from 0, or from a point at or below a checkpoint whose successors
    are all there: readers start from the newest checkpoint, so what lies before that run is covered. Files below
    it that do not follow on, and a run that starts below the checkpoint, are no problem: an interrupted
    truncation leaves both (it deletes old checkpoints and old files concurrently and skips deletes that fail; the
    next one deletes the rest). Nor is a run that ends below a checkpoint: older versions of the truncation
    deleted the entry the checkpoint ends at too, leaving nothing after it."""
    seqs = sorted(n for n in (parse_seq(x) for x in names) if n is not None)
    if not seqs:
        return []
    f = len(seqs) - 1
    while f > 0 and seqs[f - 1] == seqs[f] - 1:
        f -= 1
    first = seqs[f]
    if first == 0 or any(c >= first - 1 for c in checkpoints):
        return []
    if f == 0:
        message = f"{what} starts at {first} with no checkpoint covering the entries before it"
    else:
        message = f"{what} skips from {seqs[f - 1]} to {first} and no checkpoint covers the entries before {first}"
    return [Problem(f"{folder}/{seq_name(first)}", "gap", message)]


def _chained(entries: dict[int, LogEntry]) -> list[LogEntry]:
    """The entries proven the log's by their links: from the newest (the log's tail is never a ghost: a ghost lies
    below a kept checkpoint, whose entry is retained) down while each names the one below as its predecessor. A
    ghost left below a checkpoint (its writer died before proving it; see docs/design.md, "What timing can and
    cannot do") breaks the chain; no reader takes it, and the next truncation deletes it."""
    chained: list[LogEntry] = []
    for seq in sorted(entries, reverse=True):
        e = entries[seq]
        if chained and (chained[-1].seq != seq + 1 or (chained[-1].prev and chained[-1].prev != e.writer)):
            break
        chained.append(e)
    return chained


def _numbered(store: Store, folder: str) -> list[int]:
    return [n for n in (parse_seq(x) for x in store.list(folder)) if n is not None]


def verify(store: Store, *, progress: ProgressFn | None = None,
           total: Callable[[int], None] | None = None) -> VerifyReport:
    """Check the store's integrity without changing it: the retained transaction log is dense and every entry and
    checkpoint decodes; every topic definition decodes; every partition's records are dense, decode, sit at their
    number, chain their commit offsets, agree with the log entry that defines them (where it is retained) and reach
    the count the log's state gives; every live segment exists, has the recorded size and CRC-32, and decodes.
    ``total`` is told how many segments will be read, ``progress`` is called once per segment.

    A partition record missing because its writer crashed after the commit point is *pending*, not a problem, while
    its defining entry is newer than the newest checkpoint (the checkpoint writer makes sure every record below it
    exists); below it, it is reported ``missing``.

    Returns:
        the problems found, each naming its file (a damaged partition names itself in the path); empty when the
        store is sound. Deleted topics are skipped.
    """
    problems = VerifyReport()
    names = store.list(TXN_LOG)
    ckpts = _numbered(store, TXN_CHECKPOINT)
    problems += _dense(names, TXN_LOG, ckpts, "transaction log")
    readable: list[int] = []
    for path in [f"{TXN_CHECKPOINT}/{seq_name(c)}" for c in ckpts] + [LAST_CHECKPOINT]:
        try:
            d = decode_json(store.get(path), path, "coordinator checkpoint")
            check_format(d, path)
            readable.append(CoordinatorState.from_json(d, path).seq)
        except TxnLogError as exc:
            problems.append(Problem(path, "corrupt", f"{exc}: {REPAIR_LOG_HINT}"))
        except FileNotFoundError:
            continue
    entries: dict[int, LogEntry] = {}
    for n in names:
        seq = parse_seq(n)
        if seq is None:
            continue
        path = f"{TXN_LOG}/{n}"
        cover = min((c for c in readable if c >= seq), default=None)
        fix = REPAIR_LOG_HINT if cover is None else (
            f"the checkpoint at entry {cover} covers it, so no reader needs it and truncation deletes it; "
            "`txnlog repair --log` rebuilds it if the other copies reproduce that checkpoint, else removes it when a "
            "numbered checkpoint lies above it")
        try:
            data = store.get(path)
            e = LogEntry.from_bytes(data, path)
            if e.seq != seq:
                problems.append(Problem(path, "corrupt", f"transaction log entry {path} holds entry {e.seq}: {fix}"))
            else:
                entries[e.seq] = e
                note = rebuilt_note(data, path)
                if note is not None:
                    problems.rebuilt[path] = note
        except TxnLogError as exc:
            problems.append(Problem(path, "corrupt", f"{exc}: {fix}"))
        except FileNotFoundError:
            problems.append(Problem(path, "missing", f"transaction log entry {path} vanished while listed"))
    counts: dict[tuple[str, int], int] = {}
    newest_ck = max(ckpts, default=-1)
    try:
        log = TransactionCoordinator(store).log
        counts = {tp: pm.next_idx for tp, pm in log.state.partitions.items()}
        newest_ck = max(newest_ck, log.checkpoint_seq)
    except TxnLogError as exc:
        problems.append(Problem(TXN_LOG, "corrupt", f"the transaction log cannot be replayed: {exc}"))
    defined: dict[tuple[str, int, int], LogEntry] = {}
    for e in _chained(entries):
        for t, p, idx in e.touched:
            defined[(t, p, idx)] = e
    segments: dict[str, tuple[int, int]] = {}
    for topic in store.list_dirs(TOPICS):
        meta = _verify_topic_meta(store, topic, problems)
        if meta is None:
            continue
        for p in range(meta.partitions):
            _verify_partition(store, topic, p, problems, segments, counts.get((topic, p), 0), defined, newest_ck)
    if total is not None:
        total(len(segments))
    for path, (size, crc) in sorted(segments.items()):
        problems += _verify_segment(store, path, size, crc)
        if progress is not None:
            progress(1)
    problems.segments_checked = len(segments)
    return problems


def _verify_topic_meta(store: Store, topic: str, problems: list[Problem]) -> TopicMeta | None:
    mdir = topic_meta_dir(topic)
    latest: TopicMeta | None = None
    names = store.list(mdir)
    if DELETED_MARKER in names:
        return None
    if not names:
        problems.append(Problem(topic_dir(topic), "missing", f"topic folder {topic_dir(topic)} has no definition"))
    for n in names:
        path = f"{mdir}/{n}"
        try:
            latest = TopicMeta.from_bytes(store.get(path), path)
        except CorruptLogError as exc:
            problems.append(Problem(path, "corrupt", str(exc)))
    return latest


def _verify_partition(store: Store, topic: str, p: int, problems: VerifyReport,
                      segments: dict[str, tuple[int, int]], count: int,
                      defined: dict[tuple[str, int, int], LogEntry], newest_ck: int) -> None:
    """Walk a partition's records, reporting structural problems, and add the segments a reader would read (the
    live set after replaying them) to ``segments``."""
    mdir = marker_dir(topic, p)
    names = [n for n in store.list(mdir) if parse_seq(n) is not None]
    cdir = partition_checkpoint_dir(topic, p)
    ckpts = _numbered(store, cdir)
    if ckpts:
        # Readers start at the newest partition checkpoint; records it covers are history (a late derived write
        # may even re-create one truncation deleted), not what anyone reads.
        names = [n for n in names if (parse_seq(n) or 0) > max(ckpts)]
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
        fix = (f"'txnlog repair --execute' rewrites it from log entry {want.seq}" if want is not None
               else "no retained log entry defines it")
        if idx in listed:
            try:
                rec = PartitionRecord.from_bytes(store.get(path), path)
            except TxnLogError as exc:
                problems.append(Problem(path, "corrupt", f"{where} is damaged: {exc} ({fix})"))
            except FileNotFoundError:
                pass
            if rec is not None and derived is not None and rec != derived:
                problems.append(Problem(path, "corrupt", f"{where} is damaged: record {idx} differs from what "
                                                         f"log entry {want.seq if want else '?'} defines ({fix})"))
        elif idx < count:
            if want is not None and want.seq > newest_ck:
                problems.pending.append(path)
            else:
                how = "no retained log entry defines it"
                if want is not None:
                    how = f"log entry {want.seq} defines it: 'txnlog repair --execute' writes it"
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




# -- repair -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordRepair:
    """A partition record ``txnlog repair`` would write: ``missing`` or ``differs`` (damaged), the log entry that
    defines it, and the bytes that entry defines (written with a plain put: any writer writes the same bytes)."""

    path: str
    kind: str
    seq: int
    data: bytes = field(repr=False, default=b"")

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "seq": self.seq}


class RepairPlan(list[RecordRepair]):
    """The records :func:`repair_plan` would write (a list), and ``damaged_entries``: the paths of retained log
    entries that do not decode, whose records it cannot check (``txnlog repair --log`` rebuilds such an entry from
    them)."""

    def __init__(self) -> None:
        super().__init__()
        self.damaged_entries: list[str] = []


def repair_plan(store: Store) -> RepairPlan:
    """The partition records :meth:`TransactionCoordinator.repair_records` with ``damaged=True`` would write: every
    record of every retained log entry that is missing or whose bytes differ from what its entry defines (read
    only). Records of deleted topics are left out; damaged log entries are named in ``damaged_entries``.
    """
    out = RepairPlan()
    deleted: dict[str, bool] = {}
    for name in store.list(TXN_LOG):
        seq = parse_seq(name)
        if seq is None:
            continue
        path = f"{TXN_LOG}/{name}"
        try:
            entry = LogEntry.from_bytes(store.get(path), path)
        except CorruptLogError:
            out.damaged_entries.append(path)
            continue
        except FileNotFoundError:
            continue  # truncated since the listing
        for (t, p), rec in records_of(entry).items():
            if t not in deleted:
                deleted[t] = DELETED_MARKER in store.list(topic_meta_dir(t))
            if deleted[t]:
                continue
            where = marker_path(t, p, rec.idx)
            want = rec.to_bytes()
            try:
                have = store.get(where)
            except FileNotFoundError:
                out.append(RecordRepair(where, "missing", seq, want))
                continue
            if have != want:
                out.append(RecordRepair(where, "differs", seq, want))
    return out


__all__ = ["Problem", "RecordRepair", "RepairPlan", "VerifyReport", "repair_plan", "verify"]
