"""What an operator asks of the transaction coordinator: a transaction's status, aborting a hung one, the sweeps
(timeouts, expiry) and the repairs (partition records, the log). A mixin of
:class:`~coordinator.coordinator.TransactionCoordinator`; the work of the sweeps is in :mod:`coordinator.sweeps`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator import sweeps
from coordinator.logrepair import LogRepairPlan, execute_log_repair, plan_log_repair
from coordinator.records import CommitItem, parse_txn_id

if TYPE_CHECKING:
    from coordinator.coordinator import TransactionCoordinator
    from coordinator.store import Store
    from coordinator.txnlog import TransactionLog


class CoordinatorOperations:
    """The operator's calls of :class:`~coordinator.coordinator.TransactionCoordinator`."""

    if TYPE_CHECKING:
        store: Store
        log: TransactionLog

    def _coordinator(self) -> TransactionCoordinator:
        """This object, as the coordinator it is a mixin of (what :mod:`coordinator.sweeps` works on)."""
        return self  # type: ignore[return-value]

    def abort_open(self, txn: str, *, reason: str = "aborted by operator") -> bool:
        """Abort open transaction ``txn`` (an operator resolving a hung transaction): a producer transaction is
        aborted with an epoch bump, fencing its producer; an application attempt is reaped. Never aborts what was
        committed.

        Returns:
            True if this call aborted it; False if it was decided already (committed or aborted).
        Raises:
            UnsupportedStoreError: the store does not honour conditional writes (nothing is written).
        """
        return sweeps.abort_open(self._coordinator(), txn, reason=reason)

    def txn_status(self, txn: str) -> str:
        """What the log says of transaction ``txn``: ``committed``, ``aborted``, ``undecided`` or ``unknown``
        (decided long ago: the state keeps only each producer's last decision)."""
        st = self.log.refresh()
        ref = parse_txn_id(txn)
        if ref is None:
            return "unknown"
        seen = self.log.decision("c-" + txn) or self.log.decision("x-" + txn)
        if seen is not None:
            item = seen[0]
            return "committed" if isinstance(item, CommitItem) else ("aborted" if item.op == "abort" else "unknown")
        if ref.kind == "p":
            meta = st.producer_by_pid(ref.pid)
            if meta is None:
                return "unknown" if ref.pid < st.next_pid else "undecided"
            if meta.epoch != ref.epoch:
                known = meta.fenced_epoch(ref.epoch) if meta.epoch > ref.epoch else None
                if known is None:
                    return "unknown"  # decided before the epoch moved on: committed then, or never
                last, how = known
                if ref.n > last or (ref.n == last and how != "committed"):
                    return "aborted"  # never committed: nothing of a fenced epoch is decided after the fence
                return "committed" if ref.n == last else "unknown"
            if ref.n > meta.last_txn:
                return "undecided"
            if ref.n == meta.last_txn:
                return "committed" if meta.last_outcome == "committed" else "aborted"
            return "unknown"
        am = st.apps.get(ref.app)
        if am is None or ref.version > am.version:
            reaped = am is not None and (ref.version, ref.token) in am.reaped
            return "aborted" if reaped else "undecided"
        return "committed" if am.token == ref.token and am.version == ref.version else "aborted"

    def repair_records(self, *, damaged: bool = False) -> int:
        """Write every partition record of the log entries since the newest checkpoint that is missing (derived
        data a crashed writer left out); with ``damaged``, also every record of *every retained* entry whose bytes
        differ from what its entry defines (an operator's repair of a damaged partition). Returns how many records
        were written. Never needed for correctness while the defining entries are retained.

        Raises:
            UnsupportedStoreError: the store does not honour conditional writes (nothing is written).
        """
        return sweeps.repair_records(self._coordinator(), damaged=damaged)

    def repair_log(self, *, execute: bool = False) -> LogRepairPlan:
        """What rebuilding the damaged transaction log entries and checkpoints from the copies other objects hold
        would do (partition records, checkpoints, the entries after, intents; see :mod:`coordinator.logrepair`),
        done when ``execute``. A damaged entry above every readable checkpoint stops every reader and writer until
        this runs; the plan names what each rebuilt entry recovered, what it assumed and what no copy holds. Stop
        the store's writers before executing it (a process still holding the damaged entry's decisions in memory
        would go on from them).

        Raises:
            StoreError: the store failed.
        """
        plan = plan_log_repair(self.store)
        if execute:
            execute_log_repair(self.store, plan)
        return plan

    # -- sweeps -----------------------------------------------------------------------------------------------

    def abort_timed_out(self, now: float | None = None) -> list[str]:
        """Abort, with an epoch bump, every producer transaction whose data has been staged for longer than the
        producer's timeout, judged on the store's clock (``now``: the store's time in ms, for tests).

        Returns:
            the transactional ids whose transaction this call aborted (one a commit beat is not listed).
        Raises:
            UnsupportedStoreError: the store does not honour conditional writes (nothing is written).
        """
        return sweeps.abort_timed_out(self._coordinator(), now)

    def expire_transactional_ids(self, now: int | None = None) -> list[str]:
        """Forget transactional ids idle longer than the expiration; a producer of an expired id is fenced and its
        pid is never reused. Idleness is judged on the store's clock, the one commit times follow
        (:mod:`coordinator.clock`; ``now``: the store's time in ms, for tests). Returns the expired ids.

        Raises:
            UnsupportedStoreError: the store does not honour conditional writes (nothing is written).
        """
        return sweeps.expire_transactional_ids(self._coordinator(), now)
