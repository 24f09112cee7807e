"""The transaction coordinator: producer ids and epochs, commits and aborts through the transaction log, snapshots,
group offsets, and the sweeps (timeouts, expiry).

The coordinator holds no state outside the store: every process that opens a :class:`TransactionCoordinator` on
the same store replays the same transaction log and reaches the same decisions. A commit is one log entry (shared
with whatever other commits are waiting: group commit) that assigns the transaction's offsets in every partition
it touches; its creation is the commit point, and nothing is left to roll forward (see ``docs/design.md``).

The records it hands out live in :mod:`coordinator.txntypes`, the operator's calls (status, sweeps, repairs) in
:mod:`coordinator.coordops`, the work of its sweeps in :mod:`coordinator.sweeps`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping

from coordinator import faults, parallel
from coordinator.coordops import CoordinatorOperations
from coordinator.decisions import Outcome
from coordinator.errors import (
    AlreadyCommittedError,
    InvalidOptionError,
    InvalidTxnStateError,
    ProducerFencedError,
    StoreError,
    TopicNotFoundError,
)
from coordinator.layout import check_name, open_path
from coordinator.partition import DEFAULT_CHECKPOINT_INTERVAL as PARTITION_CHECKPOINT_INTERVAL
from coordinator.partition import PartitionLog
from coordinator.records import CommitItem, InitItem, SegmentRef, app_txn_id, parse_txn_id
from coordinator.requests import TxnRequest, abort_request, commit_request, init_request
from coordinator.store import Store
from coordinator.topics import TopicMeta, check_not_deleted, get_topic, list_topics
from coordinator.txnlog import DEFAULT_CHECKPOINT_INTERVAL, TransactionLog
from coordinator.txnstates import is_ready
from coordinator.txntypes import CommitResult, ProducerIdentity, Snapshot, _error, _offsets, _offsets_lenient

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000
#: Transactional ids of the reserved producers that commit group offsets outside transactions. User ids must
#: start with a letter or digit, so they can never collide with these.
GROUP_TID_PREFIX = "__group__."
#: The durable form of a removed committed offset (group deletion).
REMOVED = -1
#: A commit reads the deleted marker of each topic it names unless this coordinator found it absent less than this
#: many seconds ago (by this process's monotonic clock): a warm writer learns of a deletion within this long, and
#: pays a round trip per topic at most this often. Not a safety bound (no guarantee rests on it).
DELETED_RECHECK_S = 5.0


class TransactionCoordinator(CoordinatorOperations):
    """Transactions over one store. Thread-safe; one instance per process and store is enough."""

    def __init__(
        self,
        store: Store,
        *,
        checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL,
        partition_checkpoint_interval: int = PARTITION_CHECKPOINT_INTERVAL,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        transactional_id_expiration_ms: int = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
        group_commit: bool = True,
    ) -> None:
        self.store = store
        self.log = TransactionLog(store, checkpoint_interval=checkpoint_interval, group_commit=group_commit,
                                  partition_checkpoint_interval=partition_checkpoint_interval)
        self.checkpoint_interval = checkpoint_interval
        self.partition_checkpoint_interval = partition_checkpoint_interval
        self.transaction_timeout_ms = transaction_timeout_ms
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self._partitions: dict[tuple[str, int], PartitionLog] = {}
        self._topics: dict[str, TopicMeta] = {}
        #: topic -> monotonic time of the start of the last read that found its deleted marker absent
        self._undeleted: dict[str, float] = {}
        self._plock = threading.Lock()
        self.log.open_partition = self.partition

    # -- topics and partitions --------------------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> PartitionLog:
        """The (cached) index of one partition, read up to the log's state when first opened; call ``refresh()``
        on it (after ``log.refresh()``) to read what was committed since.

        Raises:
            CorruptLogError: the partition's records are damaged beyond what the log can recompute.
        """
        key = (topic, partition)
        with self._plock:
            plog = self._partitions.get(key)
            fresh = plog is None
            if plog is None:
                plog = PartitionLog(self.store, topic, partition, log=self.log,
                                    checkpoint_interval=self.partition_checkpoint_interval)
        if fresh:
            plog.refresh()
            with self._plock:
                plog = self._partitions.setdefault(key, plog)
        return plog

    def know_topic(self, meta: TopicMeta) -> None:
        """Remember a topic definition the caller already read (partition counts only grow)."""
        with self._plock:
            old = self._topics.get(meta.name)
            if old is None or old.version <= meta.version:
                self._topics[meta.name] = meta

    def topic(self, name: str) -> TopicMeta:
        """The topic's definition (cached; read again by :meth:`_check_partitions` when a partition is beyond it).

        Raises:
            TopicNotFoundError: no such topic.
        """
        with self._plock:
            meta = self._topics.get(name)
        if meta is None:
            meta = get_topic(self.store, name)
            self.know_topic(meta)
        return meta

    def _check_partitions(self, segs: Iterable[SegmentRef]) -> None:
        """Every segment's partition exists, and no topic named was deleted since its definition was read: each
        topic's deleted marker is read (in parallel) unless found absent within :data:`DELETED_RECHECK_S`, so a
        writer that read the definition before a deletion is refused here, not left committing where no reader
        looks. Only a commit racing the deletion itself can still land (delete the topic again to remove it).

        Raises:
            TopicNotFoundError: naming the topic or partition.
        """
        segs = list(segs)
        start = time.monotonic()
        with self._plock:
            stale = sorted({s.topic for s in segs if start - self._undeleted.get(s.topic, -1e18) >= DELETED_RECHECK_S})
        parallel.pmap(lambda t: check_not_deleted(self.store, t), stale)
        with self._plock:
            self._undeleted.update((t, start) for t in stale)
        for s in segs:
            if not 0 <= s.partition < self.topic(s.topic).partitions:
                meta = get_topic(self.store, s.topic)
                self.know_topic(meta)
                if not 0 <= s.partition < meta.partitions:
                    raise TopicNotFoundError(f"topic {s.topic!r} has no partition {s.partition}")

    # -- producers --------------------------------------------------------------------------------------------

    def init_producer(
        self, tid: str, *, timeout_ms: int | None = None, ephemeral: bool = False
    ) -> ProducerIdentity:
        """Kafka's ``InitProducerId``: map ``tid`` to a producer id and bump its epoch, fencing every older one (a
        transaction the older epoch had not committed can never commit).

        Raises:
            InvalidNameError: bad transactional id.
            InvalidOptionError: bad timeout.
            CommitStateUnknownError: the store could not say whether the new epoch was recorded.
        """
        check_name("transactional id", tid)
        return self._init(tid, timeout_ms, ephemeral)

    def _init(self, tid: str, timeout_ms: int | None, ephemeral: bool) -> ProducerIdentity:
        timeout = self.transaction_timeout_ms if timeout_ms is None else timeout_ms
        if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
            raise InvalidOptionError(f"transaction timeout must be a positive number of ms, got {timeout!r}")
        for _ in range(100):
            meta = self.log.refresh().producers.get(tid)
            prev = None if meta is None else (meta.pid, meta.epoch)
            req = init_request(tid, prev, timeout, ephemeral)
            out = self.log.submit(req)
            if out.status == "done":
                if isinstance(out.item, InitItem):
                    return ProducerIdentity(tid, out.item.pid, out.item.epoch)
                got = self.log.state.producers.get(tid)
                if got is not None and got.init_request == req.id:
                    return ProducerIdentity(tid, got.pid, got.epoch)
                continue  # expired again before this process looked: start over
            if out.code != "stale":
                raise InvalidTxnStateError(f"init of transactional id {tid!r} refused: {out.reason}")
        raise InvalidTxnStateError(f"init of transactional id {tid!r} kept racing other inits")

    def open_transaction(self, ident: ProducerIdentity, n: int) -> None:
        """Record (a plain put, off the log) that transaction ``n`` of ``ident`` staged data, so the timeout sweep
        can find it; the object's store time is the transaction's start on the store's clock."""
        txn = ident.txn_id(n)
        faults.point("open.before")
        self.store.put(open_path(txn), json.dumps({"tid": ident.tid, "txn": txn}).encode())
        faults.point("open.after")

    def close_transaction(self, txn: str, *, wait: bool = False) -> None:
        """Forget the open record of a decided transaction: best effort, in the background unless ``wait`` (the
        sweep removes leftovers)."""

        def rm() -> None:
            try:
                self.store.delete(open_path(txn))
            except StoreError:
                pass

        if wait:
            rm()
        else:
            parallel.background(rm)

    @property
    def serving_here(self) -> bool:
        """Whether this process serves the commit queue now (a hint; see ``TransactionLog.serving_here``)."""
        return self.log.serving_here

    @property
    def answered_lately(self) -> bool:
        """Whether this process learned a commit's outcome from another writer's answer within the last second or
        so: the log is busy, and another process serves it (a hint; see ``coordinator.answers``)."""
        return self.log.answered_lately

    def check_current(self, ident: ProducerIdentity) -> None:
        """Read the log and check that ``ident`` is still the current epoch.

        Raises:
            ProducerFencedError: a newer epoch exists, or the id expired.
        """
        meta = self.log.refresh().producers.get(ident.tid)
        if meta is None or meta.pid != ident.pid or meta.epoch != ident.epoch:
            now = "unknown (expired)" if meta is None else f"pid {meta.pid} epoch {meta.epoch}"
            raise ProducerFencedError(
                f"producer for transactional id {ident.tid!r} with pid {ident.pid} epoch {ident.epoch} is fenced: "
                f"the current producer is {now}"
            )

    # -- commits and aborts -----------------------------------------------------------------------------------

    def commit(
        self,
        ident: ProducerIdentity,
        txn: str,
        segments: Iterable[SegmentRef],
        *,
        offsets: Mapping[str, Mapping[str, Mapping[int, int]]] | None = None,
        app: tuple[str, int] | None = None,
        end_producer: bool = False,
        started_ms: int = -1,
        pipelined: bool = False,
    ) -> CommitResult:
        """Commit producer transaction ``txn`` (``ident.txn_id(n)``) publishing ``segments`` and the consumer-group
        ``offsets``; with ``app = (app id, version)`` only if that version is above the app's last committed one
        (otherwise nothing is published and ``already_committed`` is set). ``end_producer`` removes an ephemeral
        producer. ``started_ms``: the transaction's start on the store's clock (:func:`coordinator.clock.store_now_ms`
        when it first staged data); the entry that decides the commit aborts it instead if its time is more than
        the producer's timeout later. A transaction decided before (a retry) returns its recorded outcome.
        ``pipelined``: sent before transaction ``n - 1`` was decided; it is decided once that one is, and commits
        only if that one committed (:attr:`~coordinator.requests.TxnRequest.after`).

        Raises:
            ProducerFencedError: a newer epoch exists; nothing becomes visible.
            TransactionTimedOutError: open longer than the producer's timeout at the commit (now aborted).
            InvalidTxnStateError: ``txn`` was aborted, or is not the producer's next transaction.
            OutOfOrderSequenceError: a partition's sequence numbers skip one.
            TransactionAbortedError: ``pipelined``, and transaction ``n - 1`` was not committed (now aborted).
            TopicNotFoundError: a segment names a topic or partition that does not exist.
            CommitStateUnknownError: the outcome could not be learned.
        """
        ref = parse_txn_id(txn)
        if ref is None or ref.kind != "p" or (ref.pid, ref.epoch) != (ident.pid, ident.epoch):
            raise InvalidOptionError(f"transaction id {txn!r} is not one of producer {ident}")
        if pipelined and ref.n < 1:
            raise InvalidOptionError(f"transaction {txn} is its producer's first: it follows none")
        return self._commit(ident, txn, segments, _offsets(offsets), app=app, end_producer=end_producer,
                            started_ms=started_ms, after=ref.n - 1 if pipelined else -1)

    def _commit(
        self,
        ident: ProducerIdentity,
        txn: str,
        segments: Iterable[SegmentRef],
        offs: dict[str, dict[str, dict[str, int]]],
        *,
        app: tuple[str, int] | None = None,
        end_producer: bool = False,
        started_ms: int = -1,
        after: int = -1,
    ) -> CommitResult:
        ref = parse_txn_id(txn)
        assert ref is not None
        segs = tuple(segments)
        self._check_partitions(segs)
        req = commit_request(txn=txn, tid=ident.tid, pid=ident.pid, epoch=ident.epoch, n=ref.n,
                             app=None if app is None else check_name("txnAppId", app[0]),
                             version=-1 if app is None else int(app[1]), token=None if app is None else txn,
                             segments=segs, offsets=offs, end_producer=end_producer, started_ms=started_ms,
                             after=after)
        return self._commit_result(req, self.log.submit(req))

    def commit_app(
        self,
        app: str,
        version: int,
        token: str,
        segments: Iterable[SegmentRef],
        *,
        offsets: Mapping[str, Mapping[str, Mapping[int, int]]] | None = None,
    ) -> CommitResult:
        """Commit ``segments`` as version ``version`` of application ``app`` (Delta's ``SetTransaction``), only if
        ``version`` is above the app's last committed version; otherwise nothing is published and
        ``already_committed`` is set (a replay, or a zombie's late commit). ``token`` names this attempt.

        Raises:
            InvalidTxnStateError: this attempt was reaped (GC found its files abandoned); replay the version.
            TopicNotFoundError: a segment names a topic or partition that does not exist.
            CommitStateUnknownError: the outcome could not be learned.
        """
        check_name("application id", app)
        segs = tuple(segments)
        self._check_partitions(segs)
        txn = app_txn_id(app, version, token)
        req = commit_request(txn=txn, app=app, version=version, token=token, segments=segs,
                             offsets=_offsets(offsets))
        return self._commit_result(req, self.log.submit(req))

    def _commit_result(self, req: TxnRequest, out: Outcome) -> CommitResult:
        if out.status == "committed":
            offsets = {}
            if isinstance(out.item, CommitItem):
                offsets = {(p.topic, p.partition): (p.base, p.base + p.rows) for p in out.item.parts if p.rows}
                if not out.secured:  # an answer comes only once they exist
                    self.log.secure_records(out.seq, out.item)
            return CommitResult(req.txn, out.seq, offsets)
        if out.status == "already_committed":
            self._secure_earlier(req)
            return CommitResult(req.txn, out.seq, {}, already_committed=True)
        raise _error(req, out)

    def _secure_earlier(self, req: TxnRequest) -> None:
        """A replay answered "already committed" acknowledges the attempt that committed the version: make sure
        that commit's partition records exist too (its writer may have died between its commit point and them).

        Raises:
            CommitStateUnknownError: its records could not be written.
        """
        meta = self.log.state.apps.get(req.app) if req.app is not None else None
        if meta is None or meta.txn is None or meta.version != req.version:
            return
        seen = self.log.decision("c-" + meta.txn)
        if seen is not None and isinstance(seen[0], CommitItem):
            self.log.secure_records(seen[1], seen[0])

    def abort(self, ident: ProducerIdentity, txn: str, *, reason: str = "aborted by producer",
              end_producer: bool = False, staged: Iterable[SegmentRef] = (),
              offsets: Mapping[str, Mapping[str, Mapping[int, int]]] | None = None, pipelined: bool = False) -> None:
        """Abort producer transaction ``txn``: it can never commit afterwards. ``staged`` and ``offsets`` (what the
        transaction had staged and the group offsets it carried) are recorded with the decision for operators.
        ``pipelined``: transaction ``n - 1`` may still be undecided; the abort is decided once it is.

        Raises:
            ProducerFencedError: a newer epoch exists (the transaction can never commit anyway).
            AlreadyCommittedError: ``txn`` was already committed (an InvalidTxnStateError).
            CommitStateUnknownError: the outcome could not be learned.
        """
        ref = parse_txn_id(txn)
        if ref is None or ref.kind != "p" or (ref.pid, ref.epoch) != (ident.pid, ident.epoch):
            raise InvalidOptionError(f"transaction id {txn!r} is not one of producer {ident}")
        req = abort_request(txn=txn, tid=ident.tid, pid=ident.pid, epoch=ident.epoch, n=ref.n, reason=reason,
                            end_producer=end_producer, segments=tuple(staged), offsets=_offsets_lenient(offsets),
                            after=ref.n - 1 if pipelined and ref.n > 0 else -1)
        out = self.log.submit(req)
        if out.status == "aborted":
            return
        if out.status in ("committed", "already_committed"):
            raise AlreadyCommittedError(f"transaction {txn} of {ident.tid!r} is already committed")
        raise _error(req, out)

    def abort_app(self, app: str, version: int, token: str, *, reason: str = "aborted",
                  staged: Iterable[SegmentRef] = ()) -> bool:
        """Make attempt ``token`` of version ``version`` of ``app`` never committable (its files may then go).

        Returns:
            True if this attempt is now aborted; False if the version was committed (by this or another attempt).
        Raises:
            CommitStateUnknownError: the outcome could not be learned.
        """
        txn = app_txn_id(app, version, token)
        req = abort_request(txn=txn, app=app, version=version, token=token, reason=reason, segments=tuple(staged))
        out = self.log.submit(req)
        if out.status == "aborted":
            return True
        if out.status in ("committed", "already_committed"):
            return False
        raise _error(req, out)

    # -- reading ----------------------------------------------------------------------------------------------

    def snapshot(
        self, topics: Iterable[str] | None = None, *, partitions: Mapping[str, Iterable[int]] | None = None
    ) -> Snapshot:
        """A transaction-consistent cut of ``topics`` (all topics if None) at the current end of the log: every
        partition's offsets come from the log's state, so no partition is opened (read-only: nothing is written).
        With ``partitions``, only those partitions of each topic named there are included.

        Raises:
            TopicNotFoundError: a named topic does not exist.
        """
        names = list(topics) if topics is not None else list_topics(self.store)
        missing = [n for n in names if n not in self._topics]
        fetching = parallel.start(lambda: parallel.pmap(self.topic, missing))  # the topics and the log, at once
        try:
            st = self.log.refresh()
        finally:
            fetching()
        metas = [self.topic(n) for n in names]
        ends: dict[str, dict[int, int]] = {}
        starts: dict[str, dict[int, int]] = {}
        for meta in metas:
            known = {p for (t, p) in st.partitions if t == meta.name}
            every = sorted(set(range(meta.partitions)) | known)
            wanted = every if partitions is None or meta.name not in partitions \
                else sorted(set(partitions[meta.name]))
            for p in wanted:
                pm = st.partition(meta.name, p)
                ends.setdefault(meta.name, {})[p] = pm.end
                starts.setdefault(meta.name, {})[p] = pm.start
        return Snapshot(st.seq, ends, starts)

    def commit_group_offsets(
        self, group: str, offsets: Mapping[str, Mapping[int, int]], *, remove: Iterable[tuple[str, int]] = ()
    ) -> None:
        """Record consumer-group progress outside any transaction (Kafka's ``commitSync``): a transaction of the
        group's own reserved producer that publishes no segments, only the offsets. ``remove`` forgets the committed
        offsets of those (topic, partition) pairs (a group left with none is deleted).

        Raises:
            InvalidNameError: bad group name.
            InvalidOptionError: a negative offset.
            CommitStateUnknownError: the outcome could not be learned.
        """
        check_name("group", group)
        _offsets({group: offsets})  # refuse negatives before anything is written
        merged: dict[str, dict[int, int]] = {t: dict(ps) for t, ps in offsets.items()}
        for t, p in remove:
            merged.setdefault(t, {})[p] = REMOVED
        offsets = merged
        tid = f"{GROUP_TID_PREFIX}{group}"
        for _ in range(10):
            meta = self.log.refresh().producers.get(tid)
            if meta is None or not is_ready(meta.state):
                ident = self._init(tid, None, False)
                n = 0
            else:
                ident = ProducerIdentity(tid, meta.pid, meta.epoch)
                n = meta.last_txn + 1
            try:
                self._commit(ident, ident.txn_id(n), (), {group: {t: {str(p): int(o) for p, o in ps.items()}
                                                                    for t, ps in offsets.items()}})
                return
            except (ProducerFencedError, InvalidTxnStateError):
                continue  # another process committed this group's offsets meanwhile: take the next number
        raise InvalidTxnStateError(f"offsets of group {group!r} kept racing other commits of the same group")

    def group_offsets(self, group: str) -> dict[str, dict[int, int]]:
        """The offsets committed for consumer group ``group``: topic -> partition -> next offset."""
        check_name("group", group)
        return self.log.refresh().group_offsets(group)
