"""Maintenance: compaction, retention, garbage collection and truncation, each safe while writers commit and
readers read, and each keeping offsets unchanged.

- **Compaction** merges runs of small live segments into one segment of about the target size and publishes a
  ``replace`` decision through the transaction log, planned against the partition's layout version: a compaction
  that raced another (or retention) is refused and its merged file deleted. Offsets, commit times and snapshot cut
  points are kept through the record's runs.
- **Retention** by time (``retention.ms``) and size (``retention.bytes``) publishes a ``retain`` decision moving
  the log start offset forward over whole segments.
- **GC** deletes segment files no live index entry names, judged on the store's clock (modification times against
  :meth:`Store.now`): segments retired by compaction or retention once the record that retired them is older than
  the grace period (which protects readers that planned against an older index); staged files whose transaction
  is decided (aborted, fenced, an app version already committed, a committed transaction's leftover attempt) once
  older than the grace period; unpublished compaction outputs once no replace can publish them any more
  (``MAX_PUBLISH_MS`` plus ``CLOCK_SKEW_MS``, whatever the grace period); staged files of an undecided app
  attempt older than the grace period only after
  the attempt is reaped through the log (so it can never commit). Staged files of an undecided producer
  transaction are never deleted: the timeout sweep decides them first. Files are listed before the log is read, so
  every commit that could name a listed file is in the view GC decides from.
- **Truncation** deletes partition records and checkpoints below the newest partition checkpoint older than the
  grace period, and the transaction log's old entries (see ``TransactionLog.truncate``).
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from coordinator import parallel
from coordinator.coordinator import TransactionCoordinator
from coordinator.decisions import MAX_PUBLISH_MS, LayoutRequest
from coordinator.errors import InvalidOptionError, StoreError
from coordinator.layout import (
    data_dir,
    data_path,
    marker_dir,
    parse_seq,
    partition_checkpoint_dir,
    segment_name,
    txn_of_file,
)
from coordinator.partition import IndexedSegment
from coordinator.records import MarkerSegment, ReplaceItem, RetainItem, parse_txn_id
from coordinator.segments import encode_table, read_segment
from coordinator.topics import get_topic, list_topics
from coordinator.txnlog import now_ms

DEFAULT_COMPACT_TARGET_BYTES = 64 * 1024 * 1024
DEFAULT_GC_GRACE_MS = 24 * 3600 * 1000
#: Allowance for the clocks of the writer that stamps a replace and of the store that stamps its merged file.
CLOCK_SKEW_MS = 10 * 60 * 1000
#: File names of compaction outputs start with this (then a random id).
COMPACTED_PREFIX = "r."

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
    reaped: list[str] = field(default_factory=list)

    def add(self, other: MaintenanceReport) -> None:
        self.merged_groups += other.merged_groups
        self.segments_before += other.segments_before
        self.segments_after += other.segments_after
        self.retained_records += other.retained_records
        self.deleted_files += other.deleted_files
        self.deleted_bytes += other.deleted_bytes
        self.reaped += other.reaped


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
    """Merge small segments of one partition. Concurrent commits are fine (they never change the layout of
    existing offsets); a compaction that raced another one or retention is refused and its file deleted.

    Raises:
        InvalidOptionError: non-positive target.
        CorruptLogError: a segment to merge fails its checksum (nothing is replaced).
    """
    if target_bytes <= 0:
        raise InvalidOptionError(f"compaction target size must be positive, got {target_bytes}")
    coord.log.refresh()
    plog = coord.partition(topic, partition)
    plog.refresh()
    report = MaintenanceReport(segments_before=len(plog.segments))
    for group in _groups(list(plog.segments), target_bytes, plog.start_offset):
        layout = coord.log.state.partition(topic, partition).layout
        tables = parallel.pmap(lambda s: read_segment(coord.store, s.path, size=s.size, crc32=s.crc32), group)
        merged = pa.concat_tables(tables, promote_options="default")  # older segments lack producer times
        data = encode_table(merged, fmt)
        ext = ".parquet" if fmt == "parquet" else ".arrow"
        path = data_path(topic, partition, segment_name(f"{COMPACTED_PREFIX}{uuid.uuid4().hex}", "merged") + ext)
        staged_at = now_ms() if now is None else now
        coord.store.put(path, data)
        item = ReplaceItem("", topic=topic, partition=partition, layout=layout, base=group[0].base_offset,
                           end=group[-1].end_offset, replaces=tuple(s.path for s in group),
                           segment=MarkerSegment(path, merged.num_rows, len(data), zlib.crc32(data)),
                           runs=tuple(r for s in group for r in s.run_list()), staged_at=staged_at)
        out = coord.log.submit(LayoutRequest(f"r-{uuid.uuid4().hex}", item=item))
        if out.status == "done":
            report.merged_groups += 1
            plog.refresh()
        else:
            coord.store.delete(path)
            break  # the layout moved: plan again on the next pass
    plog.refresh()
    report.segments_after = len(plog.segments)
    return report


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
    coord.log.refresh()
    plog = coord.partition(topic, partition)
    plog.refresh()
    report = MaintenanceReport()
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
    if start <= old_start:
        return report
    item = RetainItem("", topic=topic, partition=partition, start=start)
    if coord.log.submit(LayoutRequest(f"t-{uuid.uuid4().hex}", item=item)).status == "done":
        report.retained_records += start - old_start
    plog.refresh()
    return report


def gc_partition(
    coord: TransactionCoordinator,
    topic: str,
    partition: int,
    *,
    grace_ms: int = DEFAULT_GC_GRACE_MS,
    now: float | None = None,
    dry_run: bool = False,
) -> MaintenanceReport:
    """Delete segment files of one partition that no commit names or can still name (see the module docstring).
    ``now`` is the store's time in ms (tests); by default it is read from the store.

    Raises:
        InvalidOptionError: a negative grace period.
    """
    if grace_ms < 0:
        raise InvalidOptionError(f"GC grace period must not be negative, got {grace_ms}")
    infos = coord.store.list_info(data_dir(topic, partition))
    t = coord.store.now() * 1000 if now is None else now
    # A copy: the reaps below refresh the log, and every file must be judged against the state the live set
    # (read after it) covers.
    st = coord.log.refresh().copy()
    plog = coord.partition(topic, partition)
    plog.refresh()
    live = {s.path for s in plog.segments}
    record_times = {}
    if any(i.path in plog.retired for i in infos):
        record_times = {parse_seq(i.path.rsplit("/", 1)[-1]): i.mtime * 1000
                        for i in coord.store.list_info(marker_dir(topic, partition))}
    report = MaintenanceReport()
    doomed = []
    for info in infos:
        if info.path in live:
            continue
        age = t - info.mtime * 1000
        if info.path in plog.retired:
            ts, idx = plog.retired[info.path]
            if t - record_times.get(idx, ts) > grace_ms:
                doomed.append(info)
            continue
        if age <= grace_ms:
            continue
        txn = txn_of_file(info.path.rsplit("/", 1)[-1])
        if txn is None:
            continue  # not a file txnlog wrote: left alone
        if txn.startswith(COMPACTED_PREFIX):
            if age > MAX_PUBLISH_MS + CLOCK_SKEW_MS:
                doomed.append(info)  # unpublished merged file: a replace published this late is refused
            continue
        ref = parse_txn_id(txn)
        if ref is None:
            continue
        if ref.kind == "p":
            meta = st.producer_by_pid(ref.pid)
            decided = (ref.pid < st.next_pid) if meta is None else \
                meta.epoch > ref.epoch or (meta.epoch == ref.epoch and ref.n <= meta.last_txn)
            if decided:
                doomed.append(info)
            continue
        am = st.apps.get(ref.app)
        if am is not None and (ref.version <= am.version or (ref.version, ref.token) in am.reaped):
            doomed.append(info)
        elif not dry_run and coord.abort_app(ref.app, ref.version, ref.token, reason="reaped by GC"):
            report.reaped.append(txn)
            doomed.append(info)
        elif dry_run:
            doomed.append(info)
    for info in doomed:
        report.deleted_files.append(info.path)
        report.deleted_bytes += info.size
    if not dry_run:
        parallel.pmap(lambda i: coord.store.delete(i.path), doomed)
    return report


def truncate_partition(coord: TransactionCoordinator, topic: str, partition: int, *,
                       grace_ms: int = DEFAULT_GC_GRACE_MS, now: float | None = None) -> int:
    """Delete partition records and checkpoints below the newest partition checkpoint older than ``grace_ms``, and
    only records of log entries the newest coordinator checkpoint covers (the checkpoint writer makes sure the
    records of entries after it exist, and would write deleted ones again). Returns how many objects were
    deleted."""
    cdir = partition_checkpoint_dir(topic, partition)
    cks = [(n, i) for i in coord.store.list_info(cdir) if (n := parse_seq(i.path.rsplit("/", 1)[-1])) is not None]
    t = coord.store.now() * 1000 if now is None else now
    old = [n for n, i in cks if t - i.mtime * 1000 > grace_ms]
    ck = coord.log.last_checkpoint()
    covered = ck.partition(topic, partition).next_idx - 1 if ck is not None else -1
    old = [n for n in old if n <= covered]
    if not old:
        return 0
    keep = max(old)
    doomed = [i.path for n, i in cks if n < keep]
    mdir = marker_dir(topic, partition)
    doomed += [f"{mdir}/{name}" for name in coord.store.list(mdir) if (parse_seq(name) or 0) <= keep]
    parallel.pmap(coord.store.delete, doomed)
    return len(doomed)


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
    ``retention.bytes`` config, then compaction, then GC and a partition checkpoint of each partition; then a
    checkpoint and truncation of the transaction log, so opening either costs a few requests."""
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
                report.add(gc_partition(coord, name, p, grace_ms=grace_ms))
            plog = coord.partition(name, p)
            plog.refresh()
            plog.write_checkpoint()
    coord.log.refresh()
    coord.log.write_checkpoint()
    if gc:
        for name in topics if topics is not None else list_topics(coord.store):
            for p in range(get_topic(coord.store, name).partitions):
                truncate_partition(coord, name, p, grace_ms=grace_ms)
    if gc:
        try:
            coord.log.truncate()
        except StoreError:
            pass
    return report
