"""The transaction coordinator: producer ids and epochs, two-phase commit, abort, roll-forward, sweeps.

The coordinator holds no state outside the store: every process that opens a :class:`TransactionCoordinator` on
the same store replays the same transaction log and reaches the same decisions. A commit is

1. ``PrepareCommit`` appended to the transaction log, naming every segment, the group offsets and the
   application idempotency key, validated against the producer's current epoch: **the commit point**;
2. one COMMIT marker per touched partition, in transaction-log order per partition (assigning offsets);
3. ``CompleteCommit`` appended to the transaction log.

A crash after step 1 is rolled forward by whoever comes next (the same producer, a new epoch's
``init_transactions``, any reader taking a snapshot, the sweep daemon), so an acknowledged commit is never lost
and a prepared one never half-visible to snapshot readers.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from coordinator.errors import (
    AlreadyCommittedError,
    InvalidOptionError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    TopicNotFoundError,
)
from coordinator.layout import check_name
from coordinator.partition import PartitionLog
from coordinator.records import SegmentRef, TxnEntry, TxnState, is_ready
from coordinator.state import CoordinatorState, segments_by_partition
from coordinator.store import Store
from coordinator.topics import get_topic, list_topics
from coordinator.txnlog import TransactionLog, now_ms

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000
#: Transactional ids of the reserved producers that commit group offsets outside transactions. User ids must
#: start with a letter or digit, so they can never collide with these.
GROUP_TID_PREFIX = "__group__."


@dataclass(frozen=True)
class ProducerIdentity:
    """What ``init_transactions`` hands a producer: its transactional id, producer id and epoch."""

    tid: str
    pid: int
    epoch: int


@dataclass(frozen=True)
class CommitResult:
    """The outcome of a commit.

    Attributes:
        txn: the transaction id.
        commit_seq: the transaction-log entry of the commit point (-1 when nothing was committed).
        offsets: (topic, partition) -> (first offset, end offset) the transaction's records received (a
            partition whose marker already left the recent-marker index, after more than a thousand later commits
            there, is omitted).
        already_committed: the application idempotency key was committed before; this call published nothing.
    """

    txn: str
    commit_seq: int
    offsets: Mapping[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    already_committed: bool = False

    @property
    def records(self) -> int:
        return sum(e - b for b, e in self.offsets.values())


@dataclass(frozen=True)
class Snapshot:
    """A transaction-consistent cut: every transaction committed at or before log entry ``seq`` and no other.

    ``ends[topic][partition]`` is the exclusive end offset of the cut in each partition.
    """

    seq: int
    ends: Mapping[str, Mapping[int, int]]
    starts: Mapping[str, Mapping[int, int]]


def new_txn_id(pid: int, epoch: int) -> str:
    """A transaction id unique in the store that names its origin: ``<pid>.<epoch>.<random>``."""
    return f"{pid}.{epoch}.{uuid.uuid4().hex[:16]}"


class TransactionCoordinator:
    """Transactions over one store. Thread-safe; one instance per process and store is enough."""

    def __init__(
        self,
        store: Store,
        *,
        checkpoint_interval: int = 100,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        transactional_id_expiration_ms: int = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
    ) -> None:
        self.store = store
        self.log = TransactionLog(store, checkpoint_interval=checkpoint_interval)
        self.checkpoint_interval = checkpoint_interval
        self.transaction_timeout_ms = transaction_timeout_ms
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self._partitions: dict[tuple[str, int], PartitionLog] = {}
        self._plock = threading.Lock()
        self._complete_lock = threading.RLock()

    # -- partitions -------------------------------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> PartitionLog:
        """The (cached) marker log of one partition; call ``refresh()`` on it to see new commits."""
        key = (topic, partition)
        with self._plock:
            plog = self._partitions.get(key)
            if plog is None:
                plog = PartitionLog(self.store, topic, partition, checkpoint_interval=self.checkpoint_interval)
                self._partitions[key] = plog
            return plog

    # -- producers --------------------------------------------------------------------------------------------

    def init_producer(self, tid: str, *, timeout_ms: int | None = None, now: int | None = None) -> ProducerIdentity:
        """Kafka's ``InitProducerId``: map ``tid`` to a producer id and bump its epoch, fencing every older one.

        Whatever the previous epoch left open is finished first: a prepared commit is rolled forward, an
        ongoing transaction is aborted (with the epoch bump, so its producer is fenced).

        Raises:
            InvalidNameError: bad transactional id.
            InvalidOptionError: bad timeout.
        """
        check_name("transactional id", tid)
        timeout = self.transaction_timeout_ms if timeout_ms is None else timeout_ms
        if not isinstance(timeout, int) or timeout <= 0:
            raise InvalidOptionError(f"transaction timeout must be a positive number of ms, got {timeout!r}")
        return self._init(tid, timeout, now)

    def _init(self, tid: str, timeout: int, now: int | None) -> ProducerIdentity:
        while True:
            state = self.log.refresh()
            meta = state.producers.get(tid)
            if meta is not None and meta.state is TxnState.PREPARE_COMMIT:
                self.complete_pending()
                continue
            if meta is not None and meta.state in (TxnState.ONGOING, TxnState.PREPARE_ABORT):
                self._abort_open(tid, meta.pid, meta.epoch, meta.txn, fence=meta.state is TxnState.ONGOING,
                                 reason="fenced by init_transactions", now=now)
                continue
            ts = now_ms() if now is None else now

            def build(st: CoordinatorState, seq: int, writer: str, ts: int = ts) -> TxnEntry:
                m = st.producers.get(tid)
                if m is not None and not is_ready(m.state):
                    raise _Retry()
                pid = st.next_pid if m is None else m.pid
                epoch = 0 if m is None else m.epoch + 1
                return TxnEntry(seq, tid, pid, epoch, TxnState.EMPTY, ts, writer, timeout_ms=timeout)

            try:
                entry = self.log.append(build)
            except _Retry:
                continue
            assert entry is not None
            return ProducerIdentity(tid, entry.pid, entry.epoch)

    def begin(self, ident: ProducerIdentity, txn: str, *, now: int | None = None) -> None:
        """Record that ``txn`` is ongoing (Kafka's AddPartitionsToTxn), so the timeout sweep can see it.

        Raises:
            ProducerFencedError: a newer epoch exists.
            InvalidTxnStateError: another transaction of this producer is open.
        """
        ts = now_ms() if now is None else now

        def build(st: CoordinatorState, seq: int, writer: str) -> TxnEntry | None:
            meta = st.check_producer(ident.tid, ident.pid, ident.epoch)
            if meta.state is TxnState.ONGOING and meta.txn == txn:
                return None
            if not is_ready(meta.state):
                raise InvalidTxnStateError(
                    f"transactional id {ident.tid!r} is {meta.state.value} ({meta.txn}); cannot begin {txn}"
                )
            return TxnEntry(seq, ident.tid, ident.pid, ident.epoch, TxnState.ONGOING, ts, writer, txn=txn)

        self.log.append(build)

    def commit(
        self,
        ident: ProducerIdentity,
        txn: str,
        segments: Iterable[SegmentRef],
        *,
        offsets: Mapping[str, Mapping[str, Mapping[int, int]]] | None = None,
        app_key: str | None = None,
        now: int | None = None,
    ) -> CommitResult:
        """Commit transaction ``txn``: prepare (the commit point), markers, complete.

        Segments whose sequence number is already committed are dropped (a retried send); a gap raises.

        Raises:
            ProducerFencedError: a newer epoch exists; nothing becomes visible.
            InvalidTxnStateError: the producer has another transaction open.
            OutOfOrderSequenceError: a partition's sequence numbers skip one.
            TopicNotFoundError: a segment names a topic or partition that does not exist.
            CommitStateUnknownError: the store could not say whether the commit point was written.
        """
        segs = tuple(segments)
        offs = {g: {t: {str(p): int(o) for p, o in ps.items()} for t, ps in ts.items()}
                for g, ts in (offsets or {}).items()}
        for g in offs:
            check_name("group", g)
        self._check_partitions(segs)
        ts = now_ms() if now is None else now

        def build(st: CoordinatorState, seq: int, writer: str) -> TxnEntry:
            meta = st.check_producer(ident.tid, ident.pid, ident.epoch)
            if meta.state is TxnState.ONGOING and meta.txn != txn:
                raise InvalidTxnStateError(
                    f"commit of {txn!r} but transactional id {ident.tid!r} has {meta.txn!r} open"
                )
            if app_key is not None and st.committed_app_key(ident.tid, app_key) is not None:
                raise AlreadyCommittedError(app_key)
            kept = _check_sequences(st, ident.tid, segs)
            return TxnEntry(seq, ident.tid, ident.pid, ident.epoch, TxnState.PREPARE_COMMIT, ts, writer, txn=txn,
                            segments=kept, offsets=offs, app_key=app_key)

        try:
            prepare = self.log.append(build)
        except AlreadyCommittedError:
            prior = self.log.state.committed_app_key(ident.tid, app_key or "") or ""
            self.complete_pending()
            return CommitResult(prior, -1, {}, already_committed=True)
        assert prepare is not None
        self.complete_pending(upto=prepare.seq)
        result = {}
        for topic, p in prepare.partitions():
            plog = self.partition(topic, p)
            if txn not in plog.txns:
                plog.refresh()  # another process completed it first: its markers are there, not yet read here
            found = plog.txns.get(txn)
            if found is not None:
                result[(topic, p)] = (found[2], found[3])
        return CommitResult(txn, prepare.seq, result)

    def abort(self, ident: ProducerIdentity, txn: str, *, now: int | None = None) -> None:
        """Abort ``txn``. Its staged segments never become visible (GC removes them later).

        Raises:
            ProducerFencedError: a newer epoch exists (the transaction is already aborted or was committed by
                the roll-forward of a prepared commit).
            InvalidTxnStateError: ``txn`` already reached its commit point.
        """
        st = self.log.refresh()
        meta = st.check_producer(ident.tid, ident.pid, ident.epoch)
        if meta.state is TxnState.PREPARE_COMMIT or (meta.state is TxnState.COMPLETE_COMMIT and meta.txn == txn):
            raise InvalidTxnStateError(f"transaction {txn!r} of {ident.tid!r} is already committed")
        if meta.state in (TxnState.ONGOING, TxnState.PREPARE_ABORT) and meta.txn == txn:
            self._abort_open(ident.tid, ident.pid, ident.epoch, txn, fence=False, reason="aborted by producer",
                             now=now)

    def abort_open(self, tid: str, txn: str, *, reason: str = "aborted by operator", now: int | None = None) -> bool:
        """Abort transaction ``txn`` of ``tid`` if it is still ongoing, fencing its producer with an epoch bump
        (an operator resolving a hung transaction). A transaction past its commit point is never aborted.

        Returns:
            True if this call aborted it; False if it was no longer ongoing (committed, aborted or replaced).
        """
        meta = self.log.refresh().producers.get(tid)
        if meta is None or meta.txn != txn or meta.state is not TxnState.ONGOING:
            return False
        before = self.log.state.seq
        self._abort_open(tid, meta.pid, meta.epoch, txn, fence=True, reason=reason, now=now)
        after = self.log.state.producers.get(tid)
        return after is not None and after.txn == txn and after.state is TxnState.COMPLETE_ABORT and \
            self.log.state.seq > before

    def _abort_open(
        self, tid: str, pid: int, epoch: int, txn: str | None, *, fence: bool, reason: str, now: int | None
    ) -> None:
        """PrepareAbort (with an epoch bump when fencing) then CompleteAbort, each skipped if already there."""
        ts = now_ms() if now is None else now
        new_epoch = epoch + 1 if fence else epoch

        def prep(st: CoordinatorState, seq: int, writer: str) -> TxnEntry | None:
            m = st.producers.get(tid)
            if m is None or m.pid != pid or m.txn != txn or m.state is not TxnState.ONGOING or m.epoch != epoch:
                return None
            return TxnEntry(seq, tid, pid, new_epoch, TxnState.PREPARE_ABORT, ts, writer, txn=txn, reason=reason)

        def done(st: CoordinatorState, seq: int, writer: str) -> TxnEntry | None:
            m = st.producers.get(tid)
            if m is None or m.pid != pid or m.txn != txn or m.state is not TxnState.PREPARE_ABORT:
                return None
            return TxnEntry(seq, tid, pid, m.epoch, TxnState.COMPLETE_ABORT, ts, writer, txn=txn, reason=reason)

        self.log.append(prep)
        self.log.append(done)

    # -- roll-forward -----------------------------------------------------------------------------------------

    def complete_pending(self, upto: int | None = None) -> int:
        """Finish every prepared-but-incomplete commit (all of them, or those at or before log entry ``upto``),
        in log order: markers in each touched partition, then CompleteCommit. Idempotent.

        Returns:
            the number of transactions this call completed.
        """
        done = 0
        with self._complete_lock:
            state = self.log.refresh()
            for txn, prepare in list(state.pending.items()):
                if upto is not None and prepare.seq > upto:
                    break
                for (topic, p), segs in segments_by_partition(prepare.segments).items():
                    plog = self.partition(topic, p)
                    plog.ensure_marker(prepare, segs)
                ts = prepare.ts

                def build(st: CoordinatorState, seq: int, writer: str, prepare: TxnEntry = prepare,
                          txn: str = txn, ts: int = ts) -> TxnEntry | None:
                    if txn not in st.pending:
                        return None
                    return TxnEntry(seq, prepare.tid, prepare.pid, prepare.epoch, TxnState.COMPLETE_COMMIT, ts,
                                    writer, txn=txn)

                if self.log.append(build) is not None:
                    done += 1
        return done

    # -- reading ----------------------------------------------------------------------------------------------

    def snapshot(
        self, topics: Iterable[str] | None = None, *, partitions: Mapping[str, Iterable[int]] | None = None
    ) -> Snapshot:
        """A transaction-consistent cut of ``topics`` (all topics if None) at the current end of the log; with
        ``partitions``, only those partitions of each topic named there are opened (a damaged partition does
        not stop readers of the others).

        Prepared commits are rolled forward first, so the cut never shows a transaction in some of its
        partitions only.

        Raises:
            TopicNotFoundError: a named topic does not exist.
            CorruptLogError: a partition's log cannot be read (naming the file).
        """
        names = list(topics) if topics is not None else list_topics(self.store)
        metas = [get_topic(self.store, t) for t in names]
        self.complete_pending()
        state = self.log.state
        # Completing may have read newer entries, including commit points whose markers another process is
        # still writing: cut just before the oldest one still pending.
        seq = min([state.seq] + [e.seq - 1 for e in state.pending.values()])
        ends: dict[str, dict[int, int]] = {}
        starts: dict[str, dict[int, int]] = {}
        for meta in metas:
            wanted = range(meta.partitions) if partitions is None or meta.name not in partitions \
                else sorted(set(partitions[meta.name]))
            for p in wanted:
                plog = self.partition(meta.name, p)
                plog.refresh()
                ends.setdefault(meta.name, {})[p] = plog.end_offset_at(seq)
                starts.setdefault(meta.name, {})[p] = plog.start_offset
        return Snapshot(seq, ends, starts)

    def commit_group_offsets(self, group: str, offsets: Mapping[str, Mapping[int, int]]) -> None:
        """Record consumer-group progress outside any transaction (Kafka's ``commitSync``): a transaction of the
        group's own reserved producer that publishes no segments, only the offsets.

        Raises:
            InvalidNameError: bad group name.
        """
        check_name("group", group)
        tid = f"{GROUP_TID_PREFIX}{group}"
        st = self.log.refresh()
        meta = st.producers.get(tid)
        if meta is not None and is_ready(meta.state):
            ident = ProducerIdentity(tid, meta.pid, meta.epoch)
        else:
            ident = self._init_reserved(tid)
        try:
            self.commit(ident, new_txn_id(ident.pid, ident.epoch), (), offsets={group: offsets})
        except ProducerFencedError:
            ident = self._init_reserved(tid)
            self.commit(ident, new_txn_id(ident.pid, ident.epoch), (), offsets={group: offsets})

    def _init_reserved(self, tid: str) -> ProducerIdentity:
        return self._init(tid, self.transaction_timeout_ms, None)

    def group_offsets(self, group: str) -> dict[str, dict[int, int]]:
        """The offsets committed for consumer group ``group``: topic -> partition -> next offset."""
        check_name("group", group)
        return self.log.refresh().group_offsets(group)

    # -- sweeps -----------------------------------------------------------------------------------------------

    def abort_timed_out(self, now: int | None = None) -> list[str]:
        """Abort (with an epoch bump) every transaction ongoing longer than its timeout; roll forward prepared
        commits. Returns the transactional ids whose transaction was aborted."""
        t = now_ms() if now is None else now
        self.complete_pending()
        aborted = []
        for meta in list(self.log.refresh().producers.values()):
            if meta.state is TxnState.ONGOING and meta.txn_start_ts is not None \
                    and t - meta.txn_start_ts > meta.timeout_ms:
                self._abort_open(meta.tid, meta.pid, meta.epoch, meta.txn, fence=True,
                                 reason="transaction timeout", now=t)
                aborted.append(meta.tid)
        return aborted

    def expire_transactional_ids(self, now: int | None = None) -> list[str]:
        """Forget transactional ids idle (no open transaction) for longer than the expiration; a producer of an
        expired id is fenced. Returns the expired ids."""
        t = now_ms() if now is None else now
        expired = []
        for meta in list(self.log.refresh().producers.values()):
            if is_ready(meta.state) and t - meta.last_ts > self.transactional_id_expiration_ms:
                def build(st: CoordinatorState, seq: int, writer: str, tid: str = meta.tid,
                          last: int = meta.last_ts) -> TxnEntry | None:
                    m = st.producers.get(tid)
                    if m is None or not is_ready(m.state) or m.last_ts != last:
                        return None
                    return TxnEntry(seq, tid, m.pid, m.epoch, TxnState.DEAD, t, writer, reason="expired")

                if self.log.append(build) is not None:
                    expired.append(meta.tid)
        return expired

    # -- helpers ----------------------------------------------------------------------------------------------

    def _check_partitions(self, segs: tuple[SegmentRef, ...]) -> None:
        counts: dict[str, int] = {}
        for s in segs:
            if s.topic not in counts:
                counts[s.topic] = get_topic(self.store, s.topic).partitions
            if not 0 <= s.partition < counts[s.topic]:
                raise TopicNotFoundError(f"topic {s.topic!r} has no partition {s.partition}")


class _Retry(Exception):
    """Internal: the state moved under an init; start over."""


def _check_sequences(st: CoordinatorState, tid: str, segs: tuple[SegmentRef, ...]) -> tuple[SegmentRef, ...]:
    """Drop segments whose sequence number is already committed; refuse gaps (Kafka's OutOfOrderSequence)."""
    kept: list[SegmentRef] = []
    expected: dict[tuple[str, int], int] = {}
    for s in segs:
        if s.seq is None:
            kept.append(s)
            continue
        key = (s.topic, s.partition)
        nxt = expected.get(key, st.last_sequence(tid, s.topic, s.partition) + 1)
        if s.seq < nxt:
            continue
        if s.seq > nxt:
            raise OutOfOrderSequenceError(
                f"producer {tid!r} skipped sequence numbers in {s.topic}/{s.partition}: expected {nxt}, got {s.seq}"
            )
        expected[key] = nxt + 1
        kept.append(s)
    return tuple(kept)
