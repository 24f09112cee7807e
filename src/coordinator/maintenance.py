"""Maintenance: compaction, retention and garbage collection, each safe while writers commit and readers read,
and each keeping offsets unchanged.

- **Compaction** merges runs of small live segments into one segment of about the target size and publishes a
  REPLACE record in the partition's marker log (a conditional create, so it serialises with commits). Offsets,
  commit times and snapshot cut points are kept through the record's runs.
- **Retention** by time (``retention.ms``) and size (``retention.bytes``) publishes a RETAIN record moving the log
  start offset forward over whole segments.
- **GC** deletes segment files no live index entry names: replaced and expired segments, and staged files of
  aborted, timed-out or orphaned transactions, only once they are older than the grace period (which protects
  readers that planned against an older index and writers still staging). Staged files of ongoing transactions
  and of prepared commits are never deleted.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import InvalidOptionError
from coordinator.layout import data_dir, data_path
from coordinator.partition import IndexedSegment, PartitionLog
from coordinator.records import MarkerSegment, ReplaceRecord, RetainRecord, TxnState
from coordinator.segments import encode_table, read_segment
from coordinator.topics import get_topic, list_topics
from coordinator.txnlog import now_ms

DEFAULT_COMPACT_TARGET_BYTES = 64 * 1024 * 1024
DEFAULT_GC_GRACE_MS = 24 * 3600 * 1000

Progress = Callable[[str], None]


@dataclass
class MaintenanceReport:
    """What a maintenance pass did, per kind."""

    merged_groups: int = 0
    segments_before: int = 0
    segments_after: int = 0
    retained_records: int = 0
    deleted_files: list[str] = field(default_factory=list)
    deleted_bytes: int = 0

    def add(self, other: MaintenanceReport) -> None:
        self.merged_groups += other.merged_groups
        self.segments_before += other.segments_before
        self.segments_after += other.segments_after
        self.retained_records += other.retained_records
        self.deleted_files += other.deleted_files
        self.deleted_bytes += other.deleted_bytes


def _groups(segs: list[IndexedSegment], target: int, start: int) -> list[list[IndexedSegment]]:
    """Runs of consecutive small segments (at least two) whose merged size stays near ``target``."""
    out: list[list[IndexedSegment]] = []
    cur: list[IndexedSegment] = []
    size = 0
    for s in segs:
        if s.base_offset < start or s.size >= target:
            if len(cur) > 1:
                out.append(cur)
            cur, size = [], 0
            continue
        if size + s.size > target and cur:
            if len(cur) > 1:
                out.append(cur)
            cur, size = [], 0
        cur.append(s)
        size += s.size
    if len(cur) > 1:
        out.append(cur)
    return out


def compact_partition(
    coord: TransactionCoordinator,
    topic: str,
    partition: int,
    *,
    target_bytes: int = DEFAULT_COMPACT_TARGET_BYTES,
    fmt: str = "parquet",
    now: int | None = None,
) -> MaintenanceReport:
    """Merge small segments of one partition. Concurrent commits are fine: a lost race re-checks that the group
    is still live and retries at the next record index; a group someone else compacted is skipped.

    Raises:
        InvalidOptionError: non-positive target.
        CorruptLogError: a segment to merge fails its checksum (nothing is replaced).
    """
    if target_bytes <= 0:
        raise InvalidOptionError(f"compaction target size must be positive, got {target_bytes}")
    ts = now_ms() if now is None else now
    plog = coord.partition(topic, partition)
    plog.refresh()
    report = MaintenanceReport(segments_before=len(plog.segments))
    for group in _groups(list(plog.segments), target_bytes, plog.start_offset):
        tables = [read_segment(coord.store, s.path, size=s.size, crc32=s.crc32) for s in group]
        merged = pa.concat_tables(tables)
        data = encode_table(merged, fmt)
        ext = ".parquet" if fmt == "parquet" else ".arrow"
        path = data_path(topic, partition, f"compacted-{uuid.uuid4().hex}{ext}")
        coord.store.put(path, data)
        runs = tuple(r for s in group for r in s.run_list())
        rec_seg = MarkerSegment(path, merged.num_rows, len(data), zlib.crc32(data))
        if _publish_replace(plog, group, rec_seg, runs, ts):
            report.merged_groups += 1
        else:
            coord.store.delete(path)
    report.segments_after = len(plog.segments)
    return report


def _publish_replace(
    plog: PartitionLog, group: list[IndexedSegment], seg: MarkerSegment, runs: tuple[tuple[int, int, int], ...],
    ts: int,
) -> bool:
    paths = tuple(s.path for s in group)
    while True:
        live = {s.path for s in plog.segments}
        if not all(p in live for p in paths):
            return False
        rec = ReplaceRecord(plog.next_idx, group[0].base_offset, group[-1].end_offset, paths, seg, runs, ts)
        if plog.append(rec, "compaction"):
            return True


def apply_retention(
    coord: TransactionCoordinator,
    topic: str,
    partition: int,
    *,
    retention_ms: int | None = None,
    retention_bytes: int | None = None,
    now: int | None = None,
) -> MaintenanceReport:
    """Move the log start offset past whole segments older than ``retention_ms`` (by commit time of their last
    record) or beyond ``retention_bytes`` of newest data. Readers asking below the new start get
    ``OffsetOutOfRangeError`` (or skip ahead when they opted in).
    """
    ts = now_ms() if now is None else now
    plog = coord.partition(topic, partition)
    report = MaintenanceReport()
    while True:
        plog.refresh()
        old_start = plog.start_offset
        segs = list(plog.segments)
        total = sum(s.size for s in segs)
        start = plog.start_offset
        for s in segs:
            last_ts = s.run_list()[-1][1]
            too_old = retention_ms is not None and ts - last_ts > retention_ms
            too_big = retention_bytes is not None and total > retention_bytes
            if not (too_old or too_big):
                break
            start = s.end_offset
            total -= s.size
        if start <= plog.start_offset:
            return report
        if plog.append(RetainRecord(plog.next_idx, start, ts), "retention"):
            report.retained_records += start - old_start
            return report


def gc_partition(
    coord: TransactionCoordinator,
    topic: str,
    partition: int,
    *,
    grace_ms: int = DEFAULT_GC_GRACE_MS,
    now: int | None = None,
    dry_run: bool = False,
) -> MaintenanceReport:
    """Delete segment files of one partition that nothing live names and that are older than ``grace_ms``.

    Never deleted: live segments, segments named by a prepared commit, and staged files of a transaction still
    ongoing (its producer's ``<pid>-<epoch>-`` file prefix).
    """
    if grace_ms < 0:
        raise InvalidOptionError(f"GC grace period must not be negative, got {grace_ms}")
    ts = now_ms() if now is None else now
    plog = coord.partition(topic, partition)
    plog.refresh()
    state = coord.log.refresh()
    keep = {s.path for s in plog.segments}
    keep |= {s.path for e in state.pending.values() for s in e.segments}
    ongoing = tuple(f"{m.pid}-{m.epoch}-" for m in state.producers.values() if m.state is TxnState.ONGOING)
    report = MaintenanceReport()
    for info in coord.store.list_info(data_dir(topic, partition)):
        name = info.path.rsplit("/", 1)[-1]
        if info.path in keep or name.startswith(ongoing):
            continue
        since = plog.retired.get(info.path, int(info.mtime * 1000))
        if ts - since <= grace_ms:
            continue
        if not dry_run:
            coord.store.delete(info.path)
        report.deleted_files.append(info.path)
        report.deleted_bytes += info.size
    return report


def maintain(
    coord: TransactionCoordinator,
    *,
    topics: list[str] | None = None,
    compact: bool = True,
    gc: bool = True,
    target_bytes: int = DEFAULT_COMPACT_TARGET_BYTES,
    grace_ms: int = DEFAULT_GC_GRACE_MS,
    now: int | None = None,
    progress: Progress | None = None,
) -> MaintenanceReport:
    """One maintenance pass over ``topics`` (all by default): retention from each topic's ``retention.ms`` /
    ``retention.bytes`` config, then compaction, then GC; then a checkpoint of each partition and of the
    transaction log, so opening either costs a few requests."""
    report = MaintenanceReport()
    for name in topics if topics is not None else list_topics(coord.store):
        meta = get_topic(coord.store, name)
        r_ms = meta.config.get("retention.ms")
        r_bytes = meta.config.get("retention.bytes")
        for p in range(meta.partitions):
            if progress is not None:
                progress(f"{name}/{p}")
            if r_ms is not None or r_bytes is not None:
                report.add(apply_retention(coord, name, p, now=now,
                                           retention_ms=None if r_ms is None else int(r_ms),
                                           retention_bytes=None if r_bytes is None else int(r_bytes)))
            if compact:
                report.add(compact_partition(coord, name, p, target_bytes=target_bytes, now=now))
            if gc:
                report.add(gc_partition(coord, name, p, grace_ms=grace_ms, now=now))
            coord.partition(name, p).write_checkpoint()
    coord.log.refresh()
    coord.log.write_checkpoint()
    return report
