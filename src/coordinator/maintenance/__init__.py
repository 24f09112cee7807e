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
  every commit that could name a listed file is in the view GC decides from. Store-wide GC also deletes native
  writes' staging folders whose files are all older than the grace period, unless a running write's lease is
  younger than ``NATIVE_LEASE_MS``.
- **Truncation** deletes partition records and checkpoints below the newest partition checkpoint older than the
  grace period, and the transaction log's old entries (see ``TransactionLog.truncate``).
"""


from coordinator.maintenance.common import (
    CLOCK_SKEW_MS,
    COMPACTED_PREFIX,
    DEFAULT_COMPACT_TARGET_BYTES,
    DEFAULT_GC_GRACE_MS,
    NATIVE_LEASE_MS,
    MaintenanceReport,
    Progress,
)
from coordinator.maintenance.compaction import compact_partition
from coordinator.maintenance.gc import gc_partition, sweep_native_staging
from coordinator.maintenance.retention import apply_retention, truncate_partition
from coordinator.maintenance.run import maintain

__all__ = [
    "CLOCK_SKEW_MS", "COMPACTED_PREFIX", "DEFAULT_COMPACT_TARGET_BYTES", "DEFAULT_GC_GRACE_MS", "MaintenanceReport",
    "NATIVE_LEASE_MS", "Progress", "apply_retention", "compact_partition", "gc_partition", "maintain",
    "sweep_native_staging", "truncate_partition",
]
