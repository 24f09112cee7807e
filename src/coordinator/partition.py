"""One partition's commit-marker log, and the offset index it defines.

Marker ``k`` publishes one transaction's segments at offsets ``[base, base + records)``, where ``base`` is marker
``k - 1``'s end: offsets are dense and follow commit order. Markers are written only by the coordinator's
completion step, in transaction-log order, and a marker's bytes are a pure function of its transaction and its
predecessor, so completing the same transaction twice (two processes, or a retry after a crash) never writes it
twice. Every ``checkpoint_interval`` markers an index checkpoint is written, so opening a partition reads the last
checkpoint and the markers after it.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from coordinator import faults
from coordinator.errors import CorruptLogError, OffsetOutOfRangeError
from coordinator.layout import (
    marker_dir,
    marker_path,
    parse_seq,
    partition_checkpoint_dir,
    partition_checkpoint_path,
    seq_name,
)
from coordinator.records import (
    Marker,
    MarkerSegment,
    PartitionRecord,
    ReplaceRecord,
    RetainRecord,
    SegmentRef,
    TxnEntry,
    decode_json,
    decode_partition_record,
    encode_json,
)
from coordinator.store import Store

DEFAULT_CHECKPOINT_INTERVAL = 100
#: Transactions remembered per partition for commit results (older ones are never needed: see ensure_marker).
TXNS_KEPT = 1000


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

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.rows

    def run_list(self) -> tuple[tuple[int, int, int], ...]:
        """(first offset, commit ts, commit_seq) of every transaction whose records this segment holds."""
        return self.runs or ((self.base_offset, self.ts, self.commit_seq),)

    def to_json(self) -> dict[str, object]:
        d = dict(self.__dict__)
        d["runs"] = [list(r) for r in self.runs]
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


class PartitionLog:
    """A process's view of one partition's markers. Thread-safe."""

    def __init__(
        self, store: Store, topic: str, partition: int, *, checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL
    ) -> None:
        self.store = store
        self.topic = topic
        self.partition = partition
        self.checkpoint_interval = checkpoint_interval
        self._lock = threading.RLock()
        self.next_idx = 0
        self.start_offset = 0
        self.end_offset = 0
        self.segments: list[IndexedSegment] = []
        self._bases: list[int] = []
        #: transaction id -> (marker idx, commit_seq, base offset, end offset) of the last TXNS_KEPT markers.
        self.txns: dict[str, tuple[int, int, int, int]] = {}
        #: path -> ms when a REPLACE or RETAIN record took the segment out of the live set (for GC).
        self.retired: dict[str, int] = {}
        self.last_commit_seq = -1
        self._load_checkpoint()
        self._read_listed()

    # -- loading ----------------------------------------------------------------------------------------------

    def _load_checkpoint(self) -> None:
        cdir = partition_checkpoint_dir(self.topic, self.partition)
        for name in reversed([n for n in self.store.list(cdir) if parse_seq(n) is not None]):
            where = f"{cdir}/{name}"
            try:
                d = decode_json(self.store.get(where), where, "partition checkpoint")
                segs = [IndexedSegment.from_json(s) for s in d["segments"]]
                txns = {t: (int(i), int(c), int(b), int(e)) for t, i, c, b, e in d["txns"]}
                retired = {str(k): int(v) for k, v in d.get("retired", {}).items()}
                nxt, start, end, last = int(d["next_idx"]), int(d["start_offset"]), int(d["end_offset"]), \
                    int(d["last_commit_seq"])
            except (CorruptLogError, KeyError, TypeError, ValueError, FileNotFoundError):
                continue
            self.segments, self.txns, self.retired = segs, txns, retired
            self._bases = [s.base_offset for s in segs]
            self.next_idx, self.start_offset, self.end_offset, self.last_commit_seq = nxt, start, end, last
            return

    def refresh(self) -> None:
        """Read records written since the last read: forward by index until the first missing one (records are
        dense), so one request when nothing is new."""
        with self._lock:
            while True:
                path = marker_path(self.topic, self.partition, self.next_idx)
                try:
                    data = self.store.get(path)
                except FileNotFoundError:
                    return
                self._apply(decode_partition_record(data, path), path)

    def _read_listed(self) -> None:
        """Read every record after the loaded checkpoint, finding them with one listing."""
        with self._lock:
            mdir = marker_dir(self.topic, self.partition)
            start_after = seq_name(self.next_idx - 1) if self.next_idx else None
            for name in self.store.list(mdir, start_after=start_after):
                idx = parse_seq(name)
                if idx is None:
                    continue
                if idx != self.next_idx:
                    raise CorruptLogError(f"marker log of {self.topic}/{self.partition} has a gap before {mdir}/{name}")
                path = f"{mdir}/{name}"
                self._apply(decode_partition_record(self.store.get(path), path), path)

    def _apply(self, rec: PartitionRecord, where: str) -> None:
        if rec.idx != self.next_idx:
            raise CorruptLogError(f"partition log record {where} does not follow record {self.next_idx - 1}")
        if isinstance(rec, Marker):
            self._apply_commit(rec, where)
        elif isinstance(rec, ReplaceRecord):
            self._apply_replace(rec, where)
        else:
            self._apply_retain(rec)
        self.next_idx = rec.idx + 1

    def _apply_replace(self, rec: ReplaceRecord, where: str) -> None:
        i = bisect.bisect_left(self._bases, rec.base_offset)
        j = i + len(rec.replaces)
        old = self.segments[i:j]
        if tuple(s.path for s in old) != rec.replaces or not old or old[-1].end_offset != rec.end_offset:
            raise CorruptLogError(f"compaction record {where} does not match the live segments it replaces")
        seg = rec.segment
        merged = IndexedSegment(seg.path, rec.base_offset, rec.end_offset - rec.base_offset, seg.size, seg.crc32,
                                rec.runs[0][1], max(r[2] for r in rec.runs), "", rec.runs)
        self.segments[i:j] = [merged]
        self._bases[i:j] = [rec.base_offset]
        for s in old:
            self.retired[s.path] = rec.ts

    def _apply_retain(self, rec: RetainRecord) -> None:
        if rec.start_offset <= self.start_offset:
            return
        self.start_offset = min(rec.start_offset, self.end_offset)
        keep = [s for s in self.segments if s.end_offset > self.start_offset]
        for s in self.segments[: len(self.segments) - len(keep)]:
            self.retired[s.path] = rec.ts
        self.segments = keep
        self._bases = [s.base_offset for s in keep]

    def _apply_commit(self, m: Marker, where: str) -> None:
        if m.base_offset != self.end_offset:
            raise CorruptLogError(
                f"commit marker {where} does not follow marker {self.next_idx - 1} (offset {self.end_offset})"
            )
        off = m.base_offset
        for s in m.segments:
            seg = IndexedSegment(s.path, off, s.rows, s.size, s.crc32, m.ts, m.commit_seq, m.txn)
            if s.rows:
                self.segments.append(seg)
                self._bases.append(off)
            off += s.rows
        if off != m.end_offset:
            raise CorruptLogError(f"commit marker {where}: segment rows do not add up to {m.records}")
        self.txns[m.txn] = (m.idx, m.commit_seq, m.base_offset, m.end_offset)
        if len(self.txns) > TXNS_KEPT:
            del self.txns[next(iter(self.txns))]
        self.end_offset = m.end_offset
        self.last_commit_seq = max(self.last_commit_seq, m.commit_seq)

    # -- writing ----------------------------------------------------------------------------------------------

    def ensure_marker(self, prepare: TxnEntry, segments: Iterable[SegmentRef]) -> None:
        """Publish ``prepare``'s segments of this partition, unless a marker for that transaction exists.

        The caller guarantees that every transaction prepared before ``prepare`` that touches this partition
        already has its marker here (completion runs in log order). So a marker of a transaction committed at or
        after ``prepare`` means this one's is here too.
        """
        segs = tuple(MarkerSegment(s.path, s.rows, s.size, s.crc32) for s in segments)
        txn = prepare.txn or ""
        with self._lock:
            while True:
                if txn in self.txns or self.last_commit_seq >= prepare.seq:
                    return
                m = Marker(
                    idx=self.next_idx,
                    txn=txn,
                    tid=prepare.tid,
                    pid=prepare.pid,
                    epoch=prepare.epoch,
                    commit_seq=prepare.seq,
                    base_offset=self.end_offset,
                    records=sum(s.rows for s in segs),
                    ts=prepare.ts,
                    segments=segs,
                )
                if self.append(m, "marker"):
                    return

    def append(self, rec: PartitionRecord, kind: str) -> bool:
        """Create ``rec`` at its index if that index is free; apply it and return True, or read what won the
        index and return False.

        Raises:
            CommitStateUnknownError: the store could not say whether the record was written.
        """
        with self._lock:
            path = marker_path(self.topic, self.partition, rec.idx)
            faults.point(f"{kind}.before")
            created = self.store.put_if_absent(path, rec.to_bytes())
            if not created:
                self.refresh()
                return False
            faults.point(f"{kind}.after")
            self._apply(rec, path)
            if self.checkpoint_interval and rec.idx % self.checkpoint_interval == self.checkpoint_interval - 1:
                self.write_checkpoint()
            return True

    def write_checkpoint(self) -> None:
        """Write the index as of the last marker read (idempotent)."""
        with self._lock:
            if not self.next_idx:
                return
            d = {
                "v": 1,
                "next_idx": self.next_idx,
                "start_offset": self.start_offset,
                "end_offset": self.end_offset,
                "last_commit_seq": self.last_commit_seq,
                "segments": [s.to_json() for s in self.segments],
                "txns": [[t, *v] for t, v in self.txns.items()],
                "retired": self.retired,
            }
            faults.point("partition.checkpoint.before")
            # A plain put, as for the transaction log's checkpoints: same bytes from any writer, no conditional write.
            self.store.put(partition_checkpoint_path(self.topic, self.partition, self.next_idx - 1), encode_json(d))
            faults.point("partition.checkpoint.after")

    # -- reading ----------------------------------------------------------------------------------------------

    def end_offset_at(self, commit_seq: int) -> int:
        """The end offset of the prefix of markers committed at or before transaction-log entry ``commit_seq``."""
        with self._lock:
            if self.last_commit_seq <= commit_seq:
                return self.end_offset
            end = self.start_offset
            for s in self.segments:
                for first, _ts, seq in s.run_list():
                    if seq > commit_seq:
                        return max(first, self.start_offset)
                end = s.end_offset
            return end

    def slices(self, start: int, end: int) -> list[SegmentSlice]:
        """The segment slices holding offsets ``[start, end)``.

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
            while i < len(self.segments) and self.segments[i].base_offset < end:
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
