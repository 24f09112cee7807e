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
from coordinator.records import Marker, MarkerSegment, SegmentRef, TxnEntry, decode_json, encode_json
from coordinator.store import Store

DEFAULT_CHECKPOINT_INTERVAL = 100


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

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.rows


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
        #: transaction id -> (marker idx, commit_seq, base offset, end offset) of every marker read.
        self.txns: dict[str, tuple[int, int, int, int]] = {}
        self.last_commit_seq = -1
        self._load_checkpoint()
        self.refresh()

    # -- loading ----------------------------------------------------------------------------------------------

    def _load_checkpoint(self) -> None:
        cdir = partition_checkpoint_dir(self.topic, self.partition)
        for name in reversed([n for n in self.store.list(cdir) if parse_seq(n) is not None]):
            where = f"{cdir}/{name}"
            try:
                d = decode_json(self.store.get(where), where, "partition checkpoint")
                segs = [IndexedSegment(**s) for s in d["segments"]]
                txns = {t: (int(i), int(c), int(b), int(e)) for t, i, c, b, e in d["txns"]}
                nxt, start, end, last = int(d["next_idx"]), int(d["start_offset"]), int(d["end_offset"]), \
                    int(d["last_commit_seq"])
            except (CorruptLogError, KeyError, TypeError, ValueError, FileNotFoundError):
                continue
            self.segments, self.txns = segs, txns
            self._bases = [s.base_offset for s in segs]
            self.next_idx, self.start_offset, self.end_offset, self.last_commit_seq = nxt, start, end, last
            return

    def refresh(self) -> None:
        """Read markers written since the last read."""
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
                self._apply(Marker.from_bytes(self.store.get(path), path), path)

    def _apply(self, m: Marker, where: str) -> None:
        if m.idx != self.next_idx or m.base_offset != self.end_offset:
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
        self.next_idx = m.idx + 1
        self.end_offset = m.end_offset
        self.last_commit_seq = max(self.last_commit_seq, m.commit_seq)

    # -- writing ----------------------------------------------------------------------------------------------

    def ensure_marker(self, prepare: TxnEntry, segments: Iterable[SegmentRef]) -> None:
        """Publish ``prepare``'s segments of this partition, unless a marker for that transaction exists.

        The caller guarantees that every transaction prepared before ``prepare`` that touches this partition
        already has its marker here (completion runs in log order).

        Raises:
            CorruptLogError: a later transaction's marker is here but this one's is not (order was broken).
        """
        segs = tuple(MarkerSegment(s.path, s.rows, s.size, s.crc32) for s in segments)
        txn = prepare.txn or ""
        with self._lock:
            while True:
                if txn in self.txns:
                    return
                if self.last_commit_seq > prepare.seq:
                    raise CorruptLogError(
                        f"partition {self.topic}/{self.partition} has a marker of a transaction committed after "
                        f"{txn!r} (log entry {prepare.seq}) but none for it"
                    )
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
                path = marker_path(self.topic, self.partition, m.idx)
                faults.point("marker.before")
                created = self.store.put_if_absent(path, m.to_bytes())
                if created:
                    faults.point("marker.after")
                    self._apply(m, path)
                    if self.checkpoint_interval and m.idx % self.checkpoint_interval == self.checkpoint_interval - 1:
                        self.write_checkpoint()
                    return
                self.refresh()

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
                "segments": [s.__dict__ for s in self.segments],
                "txns": [[t, *v] for t, v in self.txns.items()],
            }
            faults.point("partition.checkpoint.before")
            self.store.put_if_absent(partition_checkpoint_path(self.topic, self.partition, self.next_idx - 1),
                                     encode_json(d))
            faults.point("partition.checkpoint.after")

    # -- reading ----------------------------------------------------------------------------------------------

    def end_offset_at(self, commit_seq: int) -> int:
        """The end offset of the prefix of markers committed at or before transaction-log entry ``commit_seq``."""
        with self._lock:
            if self.last_commit_seq <= commit_seq:
                return self.end_offset
            end = self.start_offset
            for s in self.segments:
                if s.commit_seq > commit_seq:
                    return s.base_offset
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
                if s.ts >= ts_ms:
                    return s.base_offset
            return self.end_offset
