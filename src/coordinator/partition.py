"""One partition's index: which segments hold which offsets, read from the partition's derived records.

Record ``k`` is what log entry ``seq`` did to the partition (see :mod:`coordinator.partrecords`): commits publish
segments at dense offsets in commit order; compaction replaces segments without moving offsets; retention moves
the log start. Opening a partition reads its newest partition checkpoint (written every ``checkpoint_interval``
records by maintenance and by the coordinator's checkpoint writer) and the records after it: a bounded number of
requests whatever the partition's history. A record not yet written (its writer died or is still writing) is
computed from the log entry that defines it, so readers never write and never wait for a writer.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coordinator import faults, parallel
from coordinator.errors import REPAIR_RECORDS_HINT, CorruptLogError, OffsetOutOfRangeError, UnsupportedFormatError
from coordinator.layout import (
    marker_dir,
    marker_path,
    parse_seq,
    partition_checkpoint_dir,
    partition_checkpoint_path,
    seq_name,
)
from coordinator.partrecords import CommitOp, PartitionRecord, ReplaceOp, RetainOp
from coordinator.records import FORMAT_VERSION, check_format, decode_json, encode_json
from coordinator.store import Store

if TYPE_CHECKING:
    from coordinator.txnlog import TransactionLog

DEFAULT_CHECKPOINT_INTERVAL = 32
#: Retired segments are remembered this long after the record that retired them (GC's grace period is shorter).
RETIRED_KEEP_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class IndexedSegment:
    """A published segment and the offsets it holds."""

    path: str
    base_offset: int
    rows: int
    size: int
    crc32: int
    ts: int
    commit_seq: int
    txn: str
    #: for a compacted segment: (first offset, commit ts, commit_seq) of each transaction merged in
    runs: tuple[tuple[int, int, int], ...] = ()
    #: the producer time (microseconds) of every row, when the file stores no producer-time column
    ptime: int | None = None

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.rows

    def run_list(self) -> tuple[tuple[int, int, int], ...]:
        """(first offset, commit ts, commit_seq) of every transaction whose records this segment holds."""
        return self.runs or ((self.base_offset, self.ts, self.commit_seq),)

    def to_json(self) -> dict[str, object]:
        d = dict(self.__dict__)
        d["runs"] = [list(r) for r in self.runs]
        if self.ptime is None:
            del d["ptime"]
        return d

    @classmethod
    def from_json(cls, d: dict[str, object]) -> IndexedSegment:
        runs = tuple((int(a), int(b), int(c)) for a, b, c in d.get("runs", ()))  # type: ignore[attr-defined]
        return cls(**{**d, "runs": runs})  # type: ignore[arg-type]


@dataclass(frozen=True)
class SegmentSlice:
    """The rows of one segment that fall in a requested offset range: ``skip`` rows in, ``rows`` long."""

    segment: IndexedSegment
    skip: int
    rows: int

    @property
    def first_offset(self) -> int:
        return self.segment.base_offset + self.skip


class _Behind(Exception):
    """Internal: records below the ones listed were truncated away; reopen from a partition checkpoint."""


class PartitionLog:
    """A process's view of one partition's index. Thread-safe.

    ``log`` (the process's transaction log) tells how many records the partition has as of the log's state and
    supplies records not yet written; without it only written records are read.
    """

    def __init__(
        self,
        store: Store,
        topic: str,
        partition: int,
        *,
        log: TransactionLog | None = None,
        checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL,
    ) -> None:
        self.store = store
        self.topic = topic
        self.partition = partition
        self.log = log
        self.checkpoint_interval = checkpoint_interval
        self._lock = threading.RLock()
        self._opened = False
        self.next_idx = 0
        self.start_offset = 0
        self.end_offset = 0
        self.segments: list[IndexedSegment] = []
        self._bases: list[int] = []
        #: path -> (ms, record idx) of the record that took the segment out of the live set (for GC)
        self.retired: dict[str, tuple[int, int]] = {}
        self.last_commit_seq = -1
        #: idx of the partition checkpoint this view started from (-1: none)
        self.checkpoint_idx = -1

    # -- loading ----------------------------------------------------------------------------------------------

    def _load_checkpoint(self) -> None:
        cdir = partition_checkpoint_dir(self.topic, self.partition)
        for name in reversed([n for n in self.store.list(cdir) if parse_seq(n) is not None]):
            where = f"{cdir}/{name}"
            try:
                d = decode_json(self.store.get(where), where, "partition checkpoint")
                check_format(d, where)
                segs = [IndexedSegment.from_json(s) for s in d["segments"]]
                retired = {str(k): (int(v[0]), int(v[1])) for k, v in d.get("retired", {}).items()}
                nxt, start, end, last = int(d["next_idx"]), int(d["start_offset"]), int(d["end_offset"]), \
                    int(d["last_commit_seq"])
            except UnsupportedFormatError:
                raise
            except (CorruptLogError, KeyError, TypeError, ValueError, FileNotFoundError):
                continue
            self.segments, self.retired = segs, retired
            self._bases = [s.base_offset for s in segs]
            self.next_idx, self.start_offset, self.end_offset, self.last_commit_seq = nxt, start, end, last
            self.checkpoint_idx = nxt - 1
            return

    def target(self) -> int | None:
        """How many records the partition has as of the transaction log's state (None without a log)."""
        if self.log is None:
            return None
        return self.log.state.partition(self.topic, self.partition).next_idx

    def refresh(self) -> None:
        """Read the records written or defined since the last read: none when the log's state says there are none
        (no request), else one listing and the new records in parallel. A view left behind records that
        truncation deleted reopens from the newest partition checkpoint.

        Raises:
            CorruptLogError: a record is damaged and cannot be computed from the log, or missing below the log's
                count (naming the file).
        """
        with self._lock:
            if not self._opened:
                self._load_checkpoint()
                self._opened = True
            for attempt in range(3):
                try:
                    self._read_records(last=attempt == 2)
                    return
                except _Behind:
                    self._reopen()

    def _reopen(self) -> None:
        self.next_idx = self.start_offset = self.end_offset = 0
        self.segments, self._bases, self.retired, self.last_commit_seq = [], [], {}, -1
        self.checkpoint_idx = -1
        self._load_checkpoint()

    def _read_records(self, *, last: bool) -> None:
        target = self.target()
        if target is not None and self.next_idx >= target:
            return
        if target is not None and self.log is not None:
            # Records of entries this process has read are computed from them: no request at all (a consumer
            # tailing the log, a committer reading what it just wrote).
            known = [self.log.record_source(self.topic, self.partition, i) for i in range(self.next_idx, target)]
            if all(r is not None for r in known):
                for rec in known:
                    assert rec is not None
                    self._apply(rec, marker_path(self.topic, self.partition, rec.idx))
                return
        mdir = marker_dir(self.topic, self.partition)
        after = seq_name(self.next_idx - 1) if self.next_idx else None
        present = {i for i in (parse_seq(n) for n in self.store.list(mdir, start_after=after)) if i is not None}
        end = max([*present, (target or 0) - 1], default=-1) + 1
        fetched = dict(parallel.pmap(self._fetch, [i for i in range(self.next_idx, end) if i in present]))
        idx = self.next_idx
        while idx < end:
            rec = fetched.get(idx)
            if rec is None and self.log is not None:
                rec = self.log.record_source(self.topic, self.partition, idx)
            if rec is None:
                if target is None or idx >= target:
                    return
                if not last:
                    # Truncated under this view (or while this listing ran): a newer partition checkpoint may
                    # cover it; reopen from it before calling the record lost.
                    raise _Behind()
                raise CorruptLogError(
                    f"partition record {marker_path(self.topic, self.partition, idx)} is missing and no "
                    f"retained log entry this process read defines it; {REPAIR_RECORDS_HINT}"
                )
            self._apply(rec, marker_path(self.topic, self.partition, idx))
            idx += 1

    def _fetch(self, idx: int) -> tuple[int, PartitionRecord | None]:
        path = marker_path(self.topic, self.partition, idx)
        try:
            return idx, PartitionRecord.from_bytes(self.store.get(path), path)
        except FileNotFoundError:
            return idx, None
        except CorruptLogError as exc:
            computed = self.log.record_source(self.topic, self.partition, idx) if self.log else None
            if computed is None:
                raise CorruptLogError(f"{exc}; {REPAIR_RECORDS_HINT}") from exc
            return idx, computed

    def _apply(self, rec: PartitionRecord, where: str) -> None:
        if rec.idx != self.next_idx:
            raise CorruptLogError(f"partition record {where} is damaged: it does not follow record "
                                  f"{self.next_idx - 1}; {REPAIR_RECORDS_HINT}")
        for op in rec.ops:
            if isinstance(op, CommitOp):
                self._apply_commit(op, rec, where)
            elif isinstance(op, ReplaceOp):
                self._apply_replace(op, rec, where)
            else:
                self._apply_retain(op, rec)
        self.next_idx = rec.idx + 1
        self.last_commit_seq = max(self.last_commit_seq, rec.seq)

    def _apply_commit(self, op: CommitOp, rec: PartitionRecord, where: str) -> None:
        if op.base != self.end_offset:
            raise CorruptLogError(
                f"partition record {where} is damaged: transaction {op.txn} starts at offset {op.base}, but the "
                f"partition ends at {self.end_offset}; {REPAIR_RECORDS_HINT}"
            )
        off = op.base
        for s in op.segments:
            if s.rows:
                self.segments.append(IndexedSegment(s.path, off, s.rows, s.size, s.crc32, rec.ts, rec.seq, op.txn,
                                                     ptime=s.ptime))
                self._bases.append(off)
            off += s.rows
        self.end_offset = off

    def _apply_replace(self, op: ReplaceOp, rec: PartitionRecord, where: str) -> None:
        i = bisect.bisect_left(self._bases, op.base)
        j = i + len(op.replaces)
        old = self.segments[i:j]
        if tuple(s.path for s in old) != op.replaces or not old or old[-1].end_offset != op.end:
            raise CorruptLogError(f"compaction record {where} is damaged: it does not match the live segments it "
                                  f"replaces; {REPAIR_RECORDS_HINT}")
        seg = op.segment
        merged = IndexedSegment(seg.path, op.base, op.end - op.base, seg.size, seg.crc32, op.runs[0][1],
                                max(r[2] for r in op.runs), "", op.runs)
        self.segments[i:j] = [merged]
        self._bases[i:j] = [op.base]
        for s in old:
            self.retired[s.path] = (rec.ts, rec.idx)
        self._prune_retired(rec.ts)

    def _apply_retain(self, op: RetainOp, rec: PartitionRecord) -> None:
        if op.start <= self.start_offset:
            return
        self.start_offset = min(op.start, self.end_offset)
        keep = [s for s in self.segments if s.end_offset > self.start_offset]
        for s in self.segments[: len(self.segments) - len(keep)]:
            self.retired[s.path] = (rec.ts, rec.idx)
        self.segments = keep
        self._bases = [s.base_offset for s in keep]
        self._prune_retired(rec.ts)

    def _prune_retired(self, ts: int) -> None:
        cutoff = ts - RETIRED_KEEP_MS
        if any(v[0] < cutoff for v in self.retired.values()):
            self.retired = {k: v for k, v in self.retired.items() if v[0] >= cutoff}

    # -- checkpoints ------------------------------------------------------------------------------------------

    def write_checkpoint(self) -> None:
        """Write the index as of the last record read (a plain put; same bytes from any writer)."""
        with self._lock:
            if not self.next_idx:
                return
            d = {
                "v": FORMAT_VERSION,
                "next_idx": self.next_idx,
                "start_offset": self.start_offset,
                "end_offset": self.end_offset,
                "last_commit_seq": self.last_commit_seq,
                "segments": [s.to_json() for s in self.segments],
                "retired": {k: list(v) for k, v in self.retired.items()},
            }
            faults.point("partition.checkpoint.before")
            self.store.put(partition_checkpoint_path(self.topic, self.partition, self.next_idx - 1), encode_json(d))
            faults.point("partition.checkpoint.after")
            self.checkpoint_idx = self.next_idx - 1

    # -- reading ----------------------------------------------------------------------------------------------

    def slices(self, start: int, end: int, limit: int | None = None) -> list[SegmentSlice]:
        """The segment slices holding offsets ``[start, end)`` (only the first ``limit`` of them, when given).

        Raises:
            OffsetOutOfRangeError: the range starts below the log start or ends past the log end.
        """
        with self._lock:
            if start < self.start_offset or end > self.end_offset or start > end:
                raise OffsetOutOfRangeError(
                    f"offsets [{start}, {end}) of {self.topic}/{self.partition} are outside "
                    f"[{self.start_offset}, {self.end_offset})"
                )
            out: list[SegmentSlice] = []
            i = max(0, bisect.bisect_right(self._bases, start) - 1)
            while i < len(self.segments) and self.segments[i].base_offset < end and len(out) != limit:
                s = self.segments[i]
                lo, hi = max(start, s.base_offset), min(end, s.end_offset)
                if hi > lo:
                    out.append(SegmentSlice(s, lo - s.base_offset, hi - lo))
                i += 1
            return out

    def timestamp_offset(self, ts_ms: int) -> int:
        """The first offset committed at or after ``ts_ms`` (the end offset if none)."""
        with self._lock:
            for s in self.segments:
                for first, ts, _seq in s.run_list():
                    if ts >= ts_ms:
                        return max(first, self.start_offset)
            return self.end_offset
