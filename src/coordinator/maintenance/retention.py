"""Retention (a ``retain`` decision moving the log start over whole segments) and truncation of partition records
and checkpoints."""

from __future__ import annotations

import uuid

from coordinator import parallel
from coordinator.clock import store_now_ms
from coordinator.coordinator import TransactionCoordinator
from coordinator.layout import (
    marker_dir,
    parse_seq,
    partition_checkpoint_dir,
)
from coordinator.maintenance.common import DEFAULT_GC_GRACE_MS, MaintenanceReport
from coordinator.probe import probe_conditional_writes
from coordinator.records import RetainItem
from coordinator.requests import LayoutRequest


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
    ``OffsetOutOfRangeError`` (or skip ahead when they opted in). Ages are judged on the store's clock, as commit
    times are (:mod:`coordinator.clock`); ``now`` is the store's time in ms (tests).

    Raises:
        StoreError: the store failed (its clock included).
        UnsupportedStoreError: the store does not honour conditional writes (nothing is written).
    """
    probe_conditional_writes(coord.store)
    ts = store_now_ms(coord.store) if now is None else now
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



def truncate_partition(coord: TransactionCoordinator, topic: str, partition: int, *,
                       grace_ms: int = DEFAULT_GC_GRACE_MS, now: float | None = None) -> int:
    """Delete partition records and checkpoints below the newest partition checkpoint older than ``grace_ms``, and
    only records of log entries the newest coordinator checkpoint covers (the checkpoint writer makes sure the
    records of entries after it exist, and would write deleted ones again). Returns how many objects were
    deleted.

    Raises:
        UnsupportedStoreError: the store does not honour conditional writes (nothing is deleted).
    """
    probe_conditional_writes(coord.store)
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

