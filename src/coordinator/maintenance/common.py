"""What every maintenance task shares: its report, the defaults and the time allowances."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_COMPACT_TARGET_BYTES = 64 * 1024 * 1024
DEFAULT_GC_GRACE_MS = 24 * 3600 * 1000
#: Allowance between the store's stamp of a merged file and the readings of the store's clock that stamp its
#: replace's ``staged_at`` and the entry publishing it (:mod:`coordinator.clock`: off by about a second).
CLOCK_SKEW_MS = 10 * 60 * 1000
#: File names of compaction outputs start with this (then a random id).
COMPACTED_PREFIX = "r."
#: GC leaves a native write's staging folder while its lease (renewed by the running write's driver every
#: twentieth of this) is younger than this, on the store's clock, whatever the grace period.
NATIVE_LEASE_MS = 10 * 60 * 1000

Progress = Callable[[str], None]


@dataclass
class MaintenanceReport:
    """What a maintenance pass did, per kind; ``partitions`` holds what it did to each partition (``topic/p`` ->
    that partition's report), filled by :func:`coordinator.maintenance.maintain`."""

    merged_groups: int = 0
    segments_before: int = 0
    segments_after: int = 0
    retained_records: int = 0
    deleted_files: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    reaped: list[str] = field(default_factory=list)
    partitions: dict[str, MaintenanceReport] = field(default_factory=dict)

    def add(self, other: MaintenanceReport) -> None:
        self.merged_groups += other.merged_groups
        self.segments_before += other.segments_before
        self.segments_after += other.segments_after
        self.retained_records += other.retained_records
        self.deleted_files += other.deleted_files
        self.deleted_bytes += other.deleted_bytes
        self.reaped += other.reaped
        for where, part in other.partitions.items():
            self.partitions.setdefault(where, MaintenanceReport()).add(part)

