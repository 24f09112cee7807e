"""The transactional Python producer.

```python
producer = Producer("file:///data/lake", transactional_id="orders-etl")
producer.init_transactions()
with producer.transaction():
    producer.send("orders", [{"id": 1, "amount": 9.5}], key="id")
    producer.send_offsets_to_transaction({"payments": {0: 42}}, group_id="etl")
```

Every row carries a producer time (Kafka's ``CreateTime``), read back as ``_producerTimestamp``: the time of the
``send`` unless ``send(..., timestamp=...)`` gives one (a datetime or epoch milliseconds for all rows, or the name
of a column of the data holding each row's time; that column is stored only if the topic has it).

``send`` buffers rows per partition and stages a segment whenever a partition's buffer reaches the target size;
nothing staged is visible until the commit point. A send that returned has put its rows in the transaction: a store
error while staging keeps them buffered for the next stage (``commit_transaction()`` raises if it persists), so a
caller never resends rows that are already in. Every staged segment carries the producer's per-partition
sequence number, so a retried stage is a no-op and a gap is refused at commit.

Transactions are numbered per epoch and a number is decided at most once: after a commit whose outcome could not be
learned (``CommitStateUnknownError``) the producer keeps the transaction and refuses new work until the caller
calls ``commit_transaction()`` again (which learns the outcome or retries) or ``abort_transaction()`` (which aborts
it unless it was committed); ``init_transactions()`` starts over with a new epoch.

A transaction's timeout (``transaction_timeout_ms``) counts from its first ``send`` (or offsets), on the store's
clock: the log entry that decides its commit aborts it instead if it was open longer (``TransactionTimedOutError``,
"aborted: open longer than its timeout (N s)"), whether or not a timeout sweep runs.

What to do after an error is its class's ``retriable`` / ``abortable`` / ``fatal`` (see :mod:`coordinator.errors`):
retry the call; ``abort_transaction()`` and begin again; or create a new producer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pyarrow as pa

from coordinator.clientconf import PRODUCER_KEYS, from_config
from coordinator.coordinator import CommitResult, ProducerIdentity, TransactionCoordinator
from coordinator.errors import (
    AlreadyCommittedError,
    ClientClosedError,
    CommitStateUnknownError,
    ConcurrentCommitError,
    InvalidOptionError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    TopicNotFoundError,
    TransactionAbortedError,
    TxnLogError,
)
from coordinator.inflight import InFlight, abort_undecided, resync
from coordinator.layout import check_name
from coordinator.partitioner import legacy_partition
from coordinator.records import SegmentRef
from coordinator.rows import producer_times as producer_times
from coordinator.rows import to_table as to_table
from coordinator.segments import FORMATS
from coordinator.sending import Sending
from coordinator.store import Store, StoreError, StoreOptions
from coordinator.store_factory import open_store
from coordinator.topics import TopicMeta

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ProducerConfig:
    """Producer settings (see ``conf/txnlog.defaults.toml``)."""

    transaction_timeout_ms: int = 60_000
    segment_target_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_format: str = "parquet"
    #: commits of :meth:`Producer.commit_transaction_async` that may be undecided at once (Kafka's
    #: ``max.in.flight.requests.per.connection``)
    max_in_flight: int = 5

    def __post_init__(self) -> None:
        if self.segment_format not in FORMATS:
            raise InvalidOptionError(f"segment_format {self.segment_format!r} is not one of {FORMATS}")
        if self.segment_target_bytes <= 0:
            raise InvalidOptionError(f"segment_target_bytes must be positive, got {self.segment_target_bytes}")
        if self.transaction_timeout_ms <= 0:
            raise InvalidOptionError(f"transaction_timeout_ms must be positive, got {self.transaction_timeout_ms}")
        if self.max_in_flight < 1:
            raise InvalidOptionError(f"max_in_flight must be at least 1, got {self.max_in_flight}")


def hash_partition(table: pa.Table, columns: Sequence[str], partitions: int) -> list[int]:
    """A partition per row by the legacy partitioner (``txnlog-v1``: CRC-32 of the key values' text) modulo the
    partition count; topics name their partitioner, so use :func:`coordinator.partitioner.partition_for`."""
    return legacy_partition(table, columns, partitions)


class Producer(Sending):
    """A transactional producer bound to one transactional id. Not thread-safe; use one per thread, and give the
    producers of one process one :class:`TransactionCoordinator` (``coordinator=``): their commits then share log
    entries (see ``docs/client.md``). A context manager: leaving a ``with`` block closes it."""

    def __init__(
        self,
        store: Store | str | Mapping[str, Any],
        transactional_id: str | None = None,
        *,
        options: Mapping[str, str] | StoreOptions | None = None,
        config: ProducerConfig | None = None,
        coordinator: TransactionCoordinator | None = None,
    ) -> None:
        """Bind a producer to ``transactional_id`` (nothing is read or written until ``init_transactions()``,
        which probes the store's conditional writes first). ``store`` may be a confluent-style config mapping
        (``{"store.url": ..., "transactional.id": ..., "transaction.timeout.ms": ...,
        "max.in.flight.requests.per.connection": ...}``, see
        :mod:`coordinator.clientconf`).

        Raises:
            InvalidNameError: the transactional id is not a valid name.
            InvalidOptionError: the store URL is not supported, no transactional id, or a bad config key.
        """
        if isinstance(store, Mapping):
            store, options, conf = from_config(store, PRODUCER_KEYS, "Producer")
            transactional_id = conf.get("transactional_id", transactional_id)
            settings = {k: v for k, v in conf.items() if k != "transactional_id"}  # ProducerConfig fields
            if settings:
                config = dataclasses.replace(config or ProducerConfig(), **settings)
        if transactional_id is None:
            raise InvalidOptionError("a Producer needs a transactional id ('transactional.id' in a config)")
        check_name("transactional id", transactional_id)
        self.store = store if isinstance(store, Store) else open_store(store, options)
        self.config = config or ProducerConfig()
        #: a coordinator of its own (not shared): closing the producer winds its serving down
        self._own_coordinator = coordinator is None
        self.coordinator = coordinator or TransactionCoordinator(
            self.store, transaction_timeout_ms=self.config.transaction_timeout_ms
        )
        self.transactional_id = transactional_id
        self.identity: ProducerIdentity | None = None
        self._n = 0
        self._txn: str | None = None
        self._opened = False
        self._unresolved = False
        self._buffers: dict[tuple[str, int], list[pa.Table]] = {}
        self._buffered_bytes: dict[tuple[str, int], int] = {}
        self._staged: list[SegmentRef] = []
        self._offsets: dict[str, dict[str, dict[int, int]]] = {}
        self._next_seq: dict[tuple[str, int], int] = {}
        self._seq_at_begin: dict[tuple[str, int], int] = {}
        self._topics: dict[str, TopicMeta] = {}
        self._rr = 0
        self._fenced = False
        self._closed = False
        #: the transaction the coordinator aborted at its commit (an abortable error): abort_transaction() accepts it
        self._aborted_for_caller: str | None = None
        #: the open transaction's start on the store's clock (its first send or offsets; -1: none yet)
        self._started_ms = -1
        self._inflight = InFlight(self.config.max_in_flight, transactional_id)

    # -- lifecycle --------------------------------------------------------------------------------------------

    def init_transactions(self) -> ProducerIdentity:
        """Register the transactional id and bump its epoch, fencing older producers: a transaction an older
        epoch (this object's included) had not committed can never commit. The producer is usable afterwards
        whatever state it was in.

        Raises:
            ClientClosedError: the producer is closed.
            CommitStateUnknownError, StoreError: the store could not say whether the new epoch was recorded
                (retriable).
        """
        if self._closed:
            raise ClientClosedError(f"producer for {self.transactional_id!r} is closed")
        self._inflight.drain()
        self._inflight.failed = None  # the new epoch fences whatever was in flight
        self.identity = self.coordinator.init_producer(
            self.transactional_id, timeout_ms=self.config.transaction_timeout_ms
        )
        self._fenced = False
        self._unresolved = False
        self._aborted_for_caller = None
        self._n = 0
        self._next_seq = {}
        self._reset()
        return self.identity

    def begin_transaction(self) -> str:
        """Start a transaction; returns its id.

        Raises:
            InvalidTxnStateError: not initialised, a transaction is already open, or the last commit's outcome is
                still unknown.
            ProducerFencedError: this producer was fenced (fatal).
            ClientClosedError: the producer is closed (fatal).
        """
        self._check_usable()
        self._check_inflight()
        self._aborted_for_caller = None
        if self._txn is not None:
            raise InvalidTxnStateError(f"transaction {self._txn} is already open")
        assert self.identity is not None
        self._txn = self.identity.txn_id(self._n)
        self._seq_at_begin = dict(self._next_seq)
        return self._txn

    def commit_transaction(self) -> CommitResult:
        """Stage what is buffered, then commit. Called again after ``CommitStateUnknownError``, it learns the
        outcome of the same transaction (or retries it) instead of starting another.

        Raises:
            ProducerFencedError: a newer producer took over, or the timeout sweep aborted the transaction with an
                epoch bump (the message says so); nothing of this transaction is visible (fatal).
            TransactionTimedOutError: the transaction was open longer than its timeout, so the commit aborted it
                (abortable: ``abort_transaction()`` is accepted, then begin again).
            OutOfOrderSequenceError: the staged segments skip a sequence number (the transaction is aborted;
                abortable).
            InvalidTxnStateError: no open transaction.
            CommitStateUnknownError: the outcome could not be learned; call ``commit_transaction()`` again
                (retriable).
            StoreError: staging or the commit failed before anything was decided (retriable: call again).
        """
        if not self._unresolved:
            self._check_open()
            self._inflight.drain()
            self._check_inflight()
            self.coordinator.log.list_intents_ahead()  # the commit's listing, at once with staging the last rows
            self._stage_for_commit()
        else:
            self._check_usable(resolving=True)
        assert self.identity is not None and self._txn is not None
        txn = self._txn
        try:
            result = self.coordinator.commit(self.identity, txn, self._staged, offsets=self._offsets,
                                             started_ms=self._started_ms)
        except CommitStateUnknownError:
            self._unresolved = True
            raise
        except ProducerFencedError:
            self._fenced = True
            self._finish(txn, committed=False)
            raise
        except OutOfOrderSequenceError:
            self._abort_quietly(txn)
            self._aborted_for_caller = txn
            raise
        except InvalidTxnStateError as exc:
            self._finish(txn, committed=False)
            self._n += 1
            if exc.abortable:
                self._aborted_for_caller = txn
            raise
        self._finish(txn, committed=True)
        self._n += 1
        return result

    def commit_transaction_async(self) -> Future[CommitResult]:
        """Stage what is buffered and send the commit without waiting for its decision: the next transaction may
        begin at once. Returns a future of what :meth:`commit_transaction` returns or raises. At most
        ``max_in_flight`` commits are undecided at once (this call waits for room).

        The log decides a producer's commits in order, and commits each only if the one before it committed: when
        one fails, every later one in flight fails too (``TransactionAbortedError``), and nothing after the failure
        becomes visible. The producer then refuses new work (the error says why) until ``abort_transaction()``,
        which waits for the rest in flight, aborts the open transaction and resyncs the producer with the log.
        ``commit_transaction()``, ``abort_transaction()``, ``init_transactions()`` and ``close()`` wait for the
        commits in flight first. A commit whose outcome cannot be learned is asked again a few times before its
        future raises ``CommitStateUnknownError``.

        Raises:
            InvalidTxnStateError: no open transaction, or an earlier commit in flight failed.
            ProducerFencedError: this producer was fenced (fatal).
            StoreError: staging failed (retriable: call again; nothing was sent).
        """
        self._check_open()
        self._check_inflight()
        self.coordinator.log.list_intents_ahead()  # the commit's listing, at once with staging the last rows
        self._stage_for_commit()
        self._inflight.make_room()
        pipelined = self._inflight.undecided()
        if not pipelined:
            # (after the look: a commit in flight that failed is marked failed before it counts as decided)
            self._check_inflight()
        assert self.identity is not None and self._txn is not None
        ident, txn, staged, started, opened = self.identity, self._txn, list(self._staged), self._started_ms, \
            self._opened
        offsets = {g: {t: dict(ps) for t, ps in ts.items()} for g, ts in self._offsets.items()}

        def commit() -> CommitResult:
            try:
                result = self.coordinator.commit(ident, txn, staged, offsets=offsets, started_ms=started,
                                                 pipelined=pipelined)
            except (InvalidTxnStateError, OutOfOrderSequenceError, TopicNotFoundError, StoreError,
                    ConcurrentCommitError) as exc:
                if not isinstance(exc, TransactionAbortedError):
                    abort_undecided(self.coordinator, ident, txn, staged, pipelined=pipelined)
                raise
            if opened:
                self.coordinator.close_transaction(txn)
            return result

        future = self._inflight.submit(commit)
        self._advance_seqs(staged)  # as if committed: a failure makes the producer resync before anything else
        self._unresolved = False
        self._reset()
        self._n += 1
        return future

    def abort_transaction(self) -> None:
        """Abort the open transaction; nothing it staged becomes visible. After ``CommitStateUnknownError`` this
        aborts the transaction unless the log shows it committed.

        After an abortable error the transaction is already aborted: this call then just acknowledges it.

        Raises:
            InvalidTxnStateError: no transaction is open, or the unresolved commit turned out committed.
            ProducerFencedError: a newer producer took over (the transaction can never commit anyway; fatal).
            CommitStateUnknownError: the outcome could not be learned; call ``abort_transaction()`` again
                (retriable).
            ClientClosedError: the producer is closed (fatal).
        """
        if self._closed:
            raise ClientClosedError(f"producer for {self.transactional_id!r} is closed")
        self._inflight.drain()
        if self._inflight.failed is not None:
            self._resync()
            return
        if self._txn is None and self._aborted_for_caller is not None:
            self._aborted_for_caller = None
            return
        if self._txn is None:
            raise InvalidTxnStateError("no transaction is open")
        assert self.identity is not None
        txn = self._txn
        needs_log = bool(self._staged or self._opened or self._unresolved)
        opened, staged, offsets, started = self._opened, self._staged, self._offsets, self._started_ms
        self._finish(txn, committed=False)  # local state first: a failure below leaves no half-open transaction
        if not needs_log:
            return  # nothing left this process: the number is still free
        try:
            self.coordinator.abort(self.identity, txn, staged=staged,
                                   offsets={g: {t: dict(ps) for t, ps in ts.items()} for g, ts in offsets.items()})
        except ProducerFencedError:
            self._fenced = True
            raise
        except InvalidTxnStateError as exc:
            if isinstance(exc, AlreadyCommittedError):
                self._advance_seqs(staged)  # its segments were published: the next ones follow them
            self._n += 1
            raise
        except BaseException:
            # Outcome unknown (CommitStateUnknownError, or interrupted): the transaction stays this producer's,
            # unresolved, so its number is never used again for other rows.
            self._txn, self._opened, self._staged, self._unresolved = txn, opened, staged, True
            self._started_ms = started
            raise
        if opened:
            self.coordinator.close_transaction(txn)
        self._n += 1

    @contextmanager
    def transaction(self) -> Iterator[str]:
        """``with producer.transaction():`` commits on a clean exit and aborts on an exception."""
        txn = self.begin_transaction()
        try:
            yield txn
        except BaseException:
            if self._txn == txn:
                try:
                    self.abort_transaction()
                except TxnLogError:
                    pass
            raise
        self.commit_transaction()

    def close(self) -> None:
        """Abort any open transaction (best effort), drop buffers and end the producer: every later call raises
        :class:`ClientClosedError`. The store is not closed (the caller's, or shared). Idempotent.

        When the producer's own coordinator (not one passed in, shared) is serving the queue of other writers'
        waiting commits, ``close`` lets it decide them first, for at most
        :data:`~coordinator.serving.WIND_DOWN_S` seconds: once this process exits, they would wait for another
        writer to notice the log standing still and take over."""
        if self._closed:
            return
        self._inflight.close()
        if self._txn is not None:
            try:
                self.abort_transaction()
            except TxnLogError:
                pass
        if self._own_coordinator:
            self.coordinator.log.wind_down()
        self._reset()
        self._closed = True

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------------------------

    def _check_inflight(self) -> None:
        """Raises: the error of a failed commit in flight (``ProducerFencedError``, fatal; otherwise
        ``TransactionAbortedError``: ``abort_transaction()`` resyncs the producer)."""
        failed = self._inflight.failed
        if failed is None:
            return
        if isinstance(failed, ProducerFencedError):
            self._fenced = True
            raise ProducerFencedError(str(failed)) from failed
        raise TransactionAbortedError(f"a commit in flight failed ({failed}); abort_transaction() aborts what "
                                      "followed it and resyncs the producer with the log") from failed

    def _resync(self) -> None:
        """abort_transaction() after a failed commit in flight (every other one decided or failed)."""
        assert self.identity is not None
        if isinstance(self._inflight.failed, ProducerFencedError):
            self._check_inflight()
        txn, staged, opened = self._txn, list(self._staged), self._opened
        if txn is not None:
            self._n += 1  # the open transaction's number is aborted with the ones left undecided below
        self._next_seq = resync(self.coordinator, self.identity, self._n,
                                {*self._next_seq, *((s.topic, s.partition) for s in staged)})
        self._inflight.failed = None
        self._aborted_for_caller = None
        if txn is not None and opened:
            self.coordinator.close_transaction(txn)
        self._unresolved = False
        self._reset()

    def _finish(self, txn: str, *, committed: bool) -> None:
        if committed:
            self._advance_seqs(self._staged)
        else:
            self._next_seq = dict(self._seq_at_begin)
        if self._opened and committed:
            self.coordinator.close_transaction(txn)
        self._unresolved = False
        self._reset()

    def _advance_seqs(self, staged: Sequence[SegmentRef]) -> None:
        for seg in staged:
            if seg.seq is not None:
                k = (seg.topic, seg.partition)
                self._next_seq[k] = max(self._next_seq.get(k, 0), seg.seq + 1)

    def _abort_quietly(self, txn: str) -> None:
        assert self.identity is not None
        try:
            self.coordinator.abort(self.identity, txn, reason="refused at commit")
            self._n += 1
        except TxnLogError:
            pass
        self._finish(txn, committed=False)

    def _reset(self) -> None:
        self._txn = None
        self._opened = False
        self._buffers.clear()
        self._buffered_bytes.clear()
        self._staged = []
        self._offsets = {}
        self._started_ms = -1

    def _check_usable(self, *, resolving: bool = False) -> None:
        if self._closed:
            raise ClientClosedError(f"producer for {self.transactional_id!r} is closed")
        if self.identity is None:
            raise InvalidTxnStateError("call init_transactions() first")
        if self._fenced:
            raise ProducerFencedError(
                f"producer for {self.transactional_id!r} epoch {self.identity.epoch} was fenced; create a new one"
            )
        if self._unresolved and not resolving:
            try:
                self.coordinator.check_current(self.identity)  # a zombie is told it is fenced, first
            except ProducerFencedError:
                self._fenced = True
                raise
            except TxnLogError:
                pass  # the state error below says what to do either way
            raise InvalidTxnStateError(
                f"the outcome of committing {self._txn} is unknown: call commit_transaction() again to learn it "
                "(or retry), or abort_transaction()"
            )

    def _check_open(self) -> None:
        self._check_usable()
        if self._txn is None:
            raise InvalidTxnStateError("no transaction is open; call begin_transaction()")
