"""Sending rows into a producer's open transaction: buffering per partition, and staging segments (a mixin of
:class:`~coordinator.producer.Producer`).

Every staged segment carries the producer's per-partition sequence number, so a retried stage is a no-op and a gap
is refused at commit; the first segment of a transaction also leaves its open record for the timeout sweep.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from coordinator import clock, parallel
from coordinator.errors import InvalidOptionError, ProducerFencedError, TopicNotFoundError, TxnLogError
from coordinator.layout import check_name
from coordinator.partitioner import partition_for
from coordinator.records import SegmentRef
from coordinator.rows import producer_times, to_table
from coordinator.segments import stage_segment, stamp, with_headers
from coordinator.topics import TopicMeta, conform, get_topic

if TYPE_CHECKING:
    from coordinator.coordinator import ProducerIdentity, TransactionCoordinator
    from coordinator.inflight import InFlight
    from coordinator.producer import ProducerConfig
    from coordinator.store import Store

_log = logging.getLogger("coordinator.producer")


class Sending:
    """``send``, ``send_offsets_to_transaction`` and ``flush`` of :class:`~coordinator.producer.Producer`."""

    if TYPE_CHECKING:
        store: Store
        config: ProducerConfig
        coordinator: TransactionCoordinator
        identity: ProducerIdentity | None
        _n: int
        _txn: str | None
        _opened: bool
        _fenced: bool
        _started_ms: int
        _rr: int
        _buffers: dict[tuple[str, int], list[pa.Table]]
        _buffered_bytes: dict[tuple[str, int], int]
        _staged: list[SegmentRef]
        _offsets: dict[str, dict[str, dict[int, int]]]
        _next_seq: dict[tuple[str, int], int]
        _topics: dict[str, TopicMeta]
        _inflight: InFlight

        def _check_open(self) -> None: ...

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

    def _stage_for_commit(self) -> None:
        """Stage every buffered row for the commit that follows at once: a transaction that staged nothing before
        writes no open record (see :meth:`_stage`)."""
        self._check_open()
        for key in list(self._buffers):
            self._stage(key, at_commit=True)

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

    def _stage(self, key: tuple[str, int], *, at_commit: bool = False) -> None:
        """Stage the buffered rows of one partition as a segment; the buffer is dropped only once the segment is
        staged, so a failed stage loses nothing (a retry stages the same rows under the same name).

        The first segment staged before the commit also writes the transaction's open record, for the timeout
        sweep; ``at_commit`` (the commit request follows at once) writes none: GC reaps what a process dying
        before its request leaves (docs/design.md, "A commit"). The transaction's first segment also checks, beside
        its put, that the producer is not fenced."""
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

        if self._started_ms < 0:
            self._started_ms = clock.store_now_ms(self.store)
        if self._opened or (at_commit and self._staged):
            ref = stage()
        else:
            # Kafka's AddPartitionsToTxn without the log, at once with the first segment: learn of a fence early
            # (and warm the view the commit reads), and leave a record (on the store's clock) for the timeout
            # sweep, unless the commit follows at once.
            ident, n = self.identity, self._n
            # the log is read on this thread (its reads fan out in parallel only from here), the puts in the pool
            staging = parallel.start(stage)
            checks: list[Callable[[], object]] = []
            if not at_commit:
                checks.append(parallel.start(lambda: self.coordinator.open_transaction(ident, n)))
            # (not while a commit of this producer is in flight: the log is busy deciding it, and that commit and
            # the ones after it learn of a fence anyway; nor when the commit follows at once and this process serves
            # the queue: the serving thread decides it from its own view, and a refresh would only hold the log's
            # lock against that thread's next round; nor when it follows at once on a busy log another process
            # serves: the entry deciding it checks the epoch, and the refresh would read every entry since the view)
            if not self._inflight.undecided() and not (at_commit and (self.coordinator.serving_here
                                                                      or self.coordinator.answered_lately)):
                checks.insert(0, lambda: self.coordinator.check_current(ident))
            errors: list[BaseException] = []
            for wait in checks:
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
            self._opened = not at_commit
        self._buffers.pop(key, None)
        self._buffered_bytes.pop(key, None)
        self._next_seq[key] = seq + 1
        self._staged.append(ref)
