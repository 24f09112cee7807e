"""Garbage collection: delete segment files no live index entry names, and staging folders native writes left,
judged on the store's clock."""

from __future__ import annotations

from coordinator import parallel
from coordinator.coordinator import TransactionCoordinator
from coordinator.decisions import MAX_PUBLISH_MS, timeout_reason, undecided_producer
from coordinator.errors import InvalidOptionError
from coordinator.layout import (
    NATIVE_LEASE,
    NATIVE_STAGING,
    data_dir,
    marker_dir,
    open_path,
    parse_seq,
    txn_of_file,
)
from coordinator.maintenance.common import (
    CLOCK_SKEW_MS,
    COMPACTED_PREFIX,
    DEFAULT_GC_GRACE_MS,
    NATIVE_LEASE_MS,
    MaintenanceReport,
)
from coordinator.probe import probe_conditional_writes
from coordinator.records import parse_txn_id
from coordinator.store import ObjectInfo, Store
from coordinator.sweeps import fence_abort


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
        UnsupportedStoreError: the store does not honour conditional writes, so its log cannot be trusted to say
            what is live (nothing is deleted; a dry run does not probe).
    """
    if grace_ms < 0:
        raise InvalidOptionError(f"GC grace period must not be negative, got {grace_ms}")
    if not dry_run:
        probe_conditional_writes(coord.store)
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
    reaped: dict[str, bool] = {}
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
            open_meta = undecided_producer(ref, st)
            if open_meta is None or age <= open_meta.timeout_ms:
                continue
            if txn not in reaped:
                if coord.store.exists(open_path(txn)):
                    reaped[txn] = False  # the timeout sweep's (a batch job, which writes one, may run for days)
                elif dry_run:
                    reaped[txn] = True
                else:
                    # aborted through the log first, as the sweep does (a late commit is refused): only an abort
                    # that decided it frees its files, a commit that won keeps them
                    _, out = fence_abort(coord, txn, ref, open_meta, timeout_reason(open_meta.timeout_ms))
                    reaped[txn] = out.status == "aborted"
                    if reaped[txn]:
                        report.reaped.append(txn)
            if reaped[txn]:
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


def sweep_native_staging(store: Store, *, grace_ms: int = DEFAULT_GC_GRACE_MS, now: float | None = None,
                         dry_run: bool = False) -> MaintenanceReport:
    """Delete the staging folders of native batch writes (``_native-staging/<write id>``) whose every file is older
    than ``grace_ms`` and whose lease (``_lease.json``, which a running write's driver keeps renewing) is older
    than :data:`NATIVE_LEASE_MS`, whatever the grace period: what a driver that died while Spark wrote left behind.
    Nothing reads them. The lease only spares a running write wasted work: a write whose files are deleted anyway
    (its driver paused past the lease, or a clock off) fails its commit's check and publishes nothing. ``now`` is
    the store's time in ms (tests).

    Raises:
        InvalidOptionError: a negative grace period.
        UnsupportedStoreError: the store does not honour conditional writes (nothing is deleted; a dry run does
            not probe).
    """
    if grace_ms < 0:
        raise InvalidOptionError(f"GC grace period must not be negative, got {grace_ms}")
    if not dry_run:
        probe_conditional_writes(store)
    t = store.now() * 1000 if now is None else now
    report = MaintenanceReport()
    doomed: list[ObjectInfo] = []
    for folder in store.list_dirs(NATIVE_STAGING):
        infos = store.list_info(f"{NATIVE_STAGING}/{folder}")
        lease = f"{NATIVE_STAGING}/{folder}/{NATIVE_LEASE}"
        if any(i.path == lease and t - i.mtime * 1000 <= NATIVE_LEASE_MS for i in infos):
            continue  # a running write
        if infos and all(t - i.mtime * 1000 > grace_ms for i in infos):
            doomed += infos
    for info in doomed:
        report.deleted_files.append(info.path)
        report.deleted_bytes += info.size
    if not dry_run:
        parallel.pmap(lambda i: store.delete(i.path), doomed)
    return report
