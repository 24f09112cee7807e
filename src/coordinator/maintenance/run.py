"""One maintenance pass over a store: retention, compaction, GC, checkpoints and truncation."""

from __future__ import annotations

from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import StoreError
from coordinator.maintenance.common import (
    DEFAULT_COMPACT_TARGET_BYTES,
    DEFAULT_GC_GRACE_MS,
    MaintenanceReport,
    Progress,
)
from coordinator.maintenance.compaction import compact_partition
from coordinator.maintenance.gc import gc_partition, sweep_native_staging
from coordinator.maintenance.retention import apply_retention, truncate_partition
from coordinator.probe import probe_conditional_writes
from coordinator.topics import get_topic, list_topics


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
    checkpoint and truncation of the transaction log, so opening either costs a few requests; and a sweep of the
    staging folders native writes left behind. The report's ``partitions`` says what was done to each partition.

    Raises:
        UnsupportedStoreError: the store does not honour conditional writes (nothing is written or deleted).
    """
    probe_conditional_writes(coord.store)
    report = MaintenanceReport()
    for name in topics if topics is not None else list_topics(coord.store):
        meta = get_topic(coord.store, name)
        r_ms = meta.config.get("retention.ms")
        r_bytes = meta.config.get("retention.bytes")
        for p in range(meta.partitions):
            if progress is not None:
                progress(f"{name}/{p}")
            part = MaintenanceReport()
            if r_ms is not None or r_bytes is not None:
                part.add(apply_retention(coord, name, p, now=now,
                                         retention_ms=None if r_ms is None else int(r_ms),
                                         retention_bytes=None if r_bytes is None else int(r_bytes)))
            if compact:
                part.add(compact_partition(coord, name, p, target_bytes=target_bytes, now=now))
            if gc:
                part.add(gc_partition(coord, name, p, grace_ms=grace_ms))
            report.add(part)
            report.partitions[f"{name}/{p}"] = part
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
        report.add(sweep_native_staging(coord.store, grace_ms=grace_ms))
        try:
            coord.log.truncate()
        except StoreError:
            pass
    return report
