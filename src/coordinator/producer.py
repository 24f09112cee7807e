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

import datetime as dt
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa

from coordinator import clock, parallel
from coordinator.clientconf import PRODUCER_KEYS, from_config
from coordinator.coordinator import CommitResult, ProducerIdentity, TransactionCoordinator
from coordinator.errors import (
    AlreadyCommittedError,
    ClientClosedError,
    CommitStateUnknownError,
    InvalidOptionError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    TopicNotFoundError,
    TxnLogError,
)
from coordinator.layout import check_name
from coordinator.partitioner import legacy_partition, partition_for
from coordinator.records import SegmentRef
from coordinator.rows import producer_times as producer_times
from coordinator.rows import to_table as to_table
from coordinator.segments import FORMATS, stage_segment, stamp, with_headers
from coordinator.store import Store, StoreOptions
from coordinator.store_factory import open_store
from coordinator.topics import TopicMeta, conform, get_topic

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProducerConfig:
    """Producer settings (see ``conf/txnlog.defaults.toml``)."""

    transaction_timeout_ms: int = 60_000
    segment_target_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_format: str = "parquet"

    def __post_init__(self) -> None:
        if self.segment_format not in FORMATS:
            raise InvalidOptionError(f"segment_format {self.segment_format!r} is not one of {FORMATS}")
        if self.segment_target_bytes <= 0:
            raise InvalidOptionError(f"segment_target_bytes must be positive, got {self.segment_target_bytes}")
        if self.transaction_timeout_ms <= 0:
            raise InvalidOptionError(f"transaction_timeout_ms must be positive, got {self.transaction_timeout_ms}")


def hash_partition(table: pa.Table, columns: Sequence[str], partitions: int) -> list[int]:
    """A partition per row by the legacy partitioner (``txnlog-v1``: CRC-32 of the key values' text) modulo the
    partition count; topics name their partitioner, so use :func:`coordinator.partitioner.partition_for`."""
    return legacy_partition(table, columns, partitions)


class Producer:
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
        (``{"store.url": ..., "transactional.id": ..., "transaction.timeout.ms": ...}``, see
        :mod:`coordinator.clientconf`).

        Raises:
            InvalidNameError: the transactional id is not a valid name.
            InvalidOptionError: the store URL is not supported, no transactional id, or a bad config key.
        """
        if isinstance(store, Mapping):
            store, options, conf = from_config(store, PRODUCER_KEYS, "Producer")
            transactional_id = conf.get("transactional_id", transactional_id)
            if "transaction_timeout_ms" in conf:
                base = config or ProducerConfig()
                config = ProducerConfig(conf["transaction_timeout_ms"], base.segment_target_bytes,
                                        base.segment_format)
        if transactional_id is None:
            raise InvalidOptionError("a Producer needs a transactional id ('transactional.id' in a config)")
        check_name("transactional id", transactional_id)
        self.store = store if isinstance(store, Store) else open_store(store, options)
        self.config = config or ProducerConfig()
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
        self._aborted_for_caller = None
        if self._txn is not None:
            raise InvalidTxnStateError(f"transaction {self._txn} is already open")
        assert self.identity is not None
        self._txn = self.identity.txn_id(self._n)
        self._seq_at_begin = dict(self._next_seq)
        return self._txn

    def send(
        self,
        topic: str,
        data: Any,
        *,
        partition: int | None = None,
        key: str | Sequence[str] | None = None,
        timestamp: dt.datetime | int | str | None = None,
        headers: Sequence[tuple[str, bytes | str]] | str | None = None,
    ) -> None:
        """Buffer ``data`` for ``topic``: into ``partition``, or by the hash of the ``key`` column(s), or spread
        round-robin over the partitions. Each row's producer time (``_producerTimestamp``) is the time of this call,
        or ``timestamp``: a timezone-aware datetime or epoch milliseconds for every row, or the name of a column of
        ``data`` (timestamps, or integers as epoch milliseconds; nulls take the time of this call) that gives each
        row's time and is stored only if it is a column of the topic. ``headers`` gives the rows record headers
        (Kafka's): ``(key, value)`` pairs for every row, or the name of a column of ``data`` holding each row's list
        of ``{"key": str, "value": bytes}`` (stored only if it is a column of the topic); consumers read them with
        ``include_headers``.

        Raises:
            InvalidTxnStateError: no open transaction (or the last commit is unresolved).
            TopicNotFoundError, SchemaMismatchError, InvalidOptionError: bad topic, data or partition (nothing of
                this call is in the transaction; the transaction goes on).
            ProducerFencedError: learnt while staging (fatal).
        """
        self._check_open()
        meta = self._topic(topic)
        if isinstance(data, list) and not data:
            return
        raw = to_table(data, meta)
        given: object = headers
        if isinstance(headers, str):
            idx = raw.schema.get_field_index(headers)
            if idx < 0:
                raise InvalidOptionError(f"headers column {headers!r} is not a column of the data")
            given = raw.column(idx)
            if headers not in meta.schema.names:
                raw = raw.remove_column(idx)
        rows, when = producer_times(raw, timestamp, meta.schema.names)
        table = conform(rows, meta)
        if table.num_rows == 0:
            return
        table = stamp(table, when)
        if given is not None:
            table = with_headers(table, given)
        if self._started_ms < 0:
            self._started_ms = clock.store_now_ms(self.store)  # the transaction's timeout counts from here
        if partition is not None:
            if not isinstance(partition, int) or not 0 <= partition < meta.partitions:
                raise InvalidOptionError(f"topic {topic!r} has no partition {partition!r}")
            self._buffer(topic, partition, table)
            return
        if key is None:
            # Contiguous, zero-copy slices, one per partition, starting where the last send stopped.
            n, k = table.num_rows, meta.partitions
            step = -(-n // k)
            for i in range(k):
                sub = table.slice(i * step, step)
                if sub.num_rows:
                    self._buffer(topic, (self._rr + i) % k, sub)
            self._rr = (self._rr + 1) % k
            return
        cols = [key] if isinstance(key, str) else list(key)
        for c in cols:
            if c not in table.column_names:
                raise InvalidOptionError(f"key column {c!r} is not a column of topic {topic!r}")
        parts = partition_for(table, cols, meta.partitions, meta)
        order = np.argsort(parts, kind="stable")
        bounds = np.searchsorted(parts[order], np.arange(meta.partitions + 1))
        sorted_table = table.take(pa.array(order))
        for p in range(meta.partitions):
            lo, hi = int(bounds[p]), int(bounds[p + 1])
            if hi > lo:
                self._buffer(topic, p, sorted_table.slice(lo, hi - lo))

    def send_offsets_to_transaction(self, offsets: Mapping[str, Mapping[int, int]], group_id: str) -> None:
        """Commit consumer-group ``group_id``'s offsets (topic -> partition -> next offset) with this transaction.

        Raises:
            InvalidTxnStateError: no open transaction.
            TopicNotFoundError: a topic or partition does not exist (nothing is added).
            InvalidOptionError: a negative offset.
        """
        self._check_open()
        check_name("group", group_id)
        for topic, parts in offsets.items():
            n = self._topic(topic).partitions
            for p, o in parts.items():
                if int(o) < 0:
                    raise InvalidOptionError(f"offset {o} of {topic}/{p} for group {group_id!r} is negative")
                if not 0 <= int(p) < n:
                    n = self._topic(topic, fresh=True).partitions  # partitions may have been added since
                    if not 0 <= int(p) < n:
                        raise TopicNotFoundError(f"topic {topic!r} has no partition {p} (it has {n}); offsets "
                                                 f"of group {group_id!r} not added")
        if self._started_ms < 0:
            self._started_ms = clock.store_now_ms(self.store)
        g = self._offsets.setdefault(group_id, {})
        for topic, parts in offsets.items():
            g.setdefault(topic, {}).update({int(p): int(o) for p, o in parts.items()})

    def flush(self) -> None:
        """Stage every buffered row now."""
        self._check_open()
        for key in list(self._buffers):
            self._stage(key)

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
            self.coordinator.log.list_intents_ahead()  # the commit's listing, at once with staging the last rows
            self.flush()
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
        :class:`ClientClosedError`. The store is not closed (the caller's, or shared). Idempotent."""
        if self._closed:
            return
        if self._txn is not None:
            try:
                self.abort_transaction()
            except TxnLogError:
                pass
        self._reset()
        self._closed = True

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------------------------

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

    def _topic(self, name: str, *, fresh: bool = False) -> TopicMeta:
        meta = None if fresh else self._topics.get(name)
        if meta is None:
            meta = self._topics[name] = get_topic(self.store, name)
            self.coordinator.know_topic(meta)
        return meta

    def _buffer(self, topic: str, partition: int, table: pa.Table) -> None:
        key = (topic, partition)
        self._buffers.setdefault(key, []).append(table)
        self._buffered_bytes[key] = self._buffered_bytes.get(key, 0) + table.nbytes
        if self._buffered_bytes[key] >= self.config.segment_target_bytes:
            try:
                self._stage(key)
            except ProducerFencedError:
                raise
            except TxnLogError as exc:
                # The rows are in the transaction (a send that raised would invite a resend, and a duplicate):
                # they stay buffered, and the next send or commit_transaction() stages them again.
                _log.warning("staging %s/%d deferred: %s", topic, partition, exc)

    def _stage(self, key: tuple[str, int]) -> None:
        """Stage the buffered rows of one partition as a segment; the buffer is dropped only once the segment is
        staged, so a failed stage loses nothing (a retry stages the same rows under the same name)."""
        tables = self._buffers.get(key, [])
        if not tables:
            return
        assert self.identity is not None and self._txn is not None
        topic, partition = key
        seq = self._next_seq.get(key, 0)
        name = f"{self._txn}~{seq:010d}"
        table = pa.concat_tables(tables, promote_options="default")  # sends with and without headers

        def stage() -> SegmentRef:
            return stage_segment(self.store, topic, partition, table, name, seq=seq, fmt=self.config.segment_format)

        if self._opened:
            ref = stage()
        else:
            # Kafka's AddPartitionsToTxn without the log, at once with the first segment: learn of a fence early,
            # and leave a record (on the store's clock) for the timeout sweep.
            if self._started_ms < 0:
                self._started_ms = clock.store_now_ms(self.store)
            ident, n = self.identity, self._n
            # the log is read on this thread (its reads fan out in parallel only from here), the puts in the pool
            staging = parallel.start(stage)
            opening = parallel.start(lambda: self.coordinator.open_transaction(ident, n))
            errors: list[BaseException] = []
            for wait in (lambda: self.coordinator.check_current(ident), opening):
                # every request ends before this call does, even when one failed
                try:
                    wait()
                except BaseException as exc:  # noqa: BLE001 - raised below, after a failed staging's error
                    errors.append(exc)
            ref = staging()
            if errors:
                if isinstance(errors[0], ProducerFencedError):
                    self._fenced = True
                raise errors[0]
            self._opened = True
        self._buffers.pop(key, None)
        self._buffered_bytes.pop(key, None)
        self._next_seq[key] = seq + 1
        self._staged.append(ref)
