"""The Python consumer, and snapshot reads.

```python
with Consumer("file:///data/lake", group_id="etl") as consumer:
    consumer.subscribe(["orders"])
    for batch in consumer:       # pyarrow Tables: topic columns + _topic, _partition, _offset, _timestamp,
                                 # _producerTimestamp (and _headers with include_headers=True)
        handle(batch)
        consumer.commit()        # the group's offsets, outside any transaction (Kafka's commitSync)
```

``read_committed`` (the default) returns only records of committed transactions, in offset order;
``read_uncommitted`` also returns, once each, records staged by open and aborted transactions (null ``_offset``).

``poll(timeout)`` is confluent-kafka's: it waits up to ``timeout`` seconds for records (0, the default here, returns at
once; None waits for ever). Each look asks the transaction log by name whether a next entry exists (one GET when
nothing is new), backing off from :data:`POLL_BACKOFF_MIN_S` to :data:`POLL_BACKOFF_MAX_S`, and reads only once the
log's state shows records at an assigned partition. A look that finds new entries takes a bounded number of serial
round trips whatever their number (short of the log's jump to a checkpoint): the log's listing and the new entries
in parallel, then the segments they publish at assigned partitions, read while the log proves the entries (used only
once proven). Partitions are opened when assigned, in parallel. ``poll(max_records=...)`` shares its budget fairly
across the assigned partitions that have records.

A position outside a partition's ``[log start, end]`` (a ``seek`` past the end, a committed offset that retention
passed) is handled as Kafka does: ``auto_offset_reset`` ``earliest`` / ``latest`` moves it to the start / end,
``error`` raises :class:`~coordinator.errors.OffsetOutOfRangeError`; below the start, ``fail_on_data_loss`` (the
default) raises first.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

import pyarrow as pa

from coordinator.clientconf import CONSUMER_KEYS, from_config
from coordinator.coordinator import Snapshot, TransactionCoordinator
from coordinator.errors import (
    ClientClosedError,
    CorruptLogError,
    InvalidOptionError,
    OffsetOutOfRangeError,
    StoreError,
    TopicNotFoundError,
)
from coordinator.layout import check_name
from coordinator.polling import Polling, TopicPartition
from coordinator.polling import fair_shares as fair_shares
from coordinator.reader import (
    check_isolation,
    output_schema,
    read_range,
)
from coordinator.store import Store, StoreOptions
from coordinator.store_factory import open_store
from coordinator.topics import get_topic

#: ``auto_offset_reset`` values; ``none`` (the Java client's name) is taken for ``error``.
AUTO_OFFSET_RESETS = ("earliest", "latest", "error")
#: First and longest sleep between two "anything new?" looks of a waiting ``poll``.
POLL_BACKOFF_MIN_S = 0.02
POLL_BACKOFF_MAX_S = 1.0


class Consumer(Polling):
    """Reads partitions from positions, like Kafka's consumer (without group rebalancing: ``subscribe`` assigns
    every partition of the topics to this consumer). Not thread-safe. Iterating yields :meth:`poll` results until
    one is empty (the consumer caught up with the log); ``close()`` (or leaving a ``with`` block) ends it.

    ``store`` is a store, its URL, or a confluent-style config mapping (``{"store.url": ..., "group.id": ...}``, see
    :mod:`coordinator.clientconf`) whose keys take the place of the keyword arguments.

    Errors say what to do next (``retriable`` / ``abortable`` / ``fatal``, see :mod:`coordinator.errors`): a
    ``StoreError`` from a read is retriable (poll again: positions move only when a poll succeeds),
    ``CorruptLogError`` and ``ClientClosedError`` are fatal, the others are the caller's to fix.
    """

    def __init__(
        self,
        store: Store | str | Mapping[str, Any],
        *,
        group_id: str | None = None,
        isolation_level: str = "read_committed",
        auto_offset_reset: str = "earliest",
        max_poll_records: int = 100_000,
        fail_on_data_loss: bool = True,
        options: Mapping[str, str] | StoreOptions | None = None,
        coordinator: TransactionCoordinator | None = None,
        include_headers: bool = False,
    ) -> None:
        if isinstance(store, Mapping):
            store, options, conf = from_config(store, CONSUMER_KEYS, "Consumer")
            group_id = conf.get("group_id", group_id)
            isolation_level = conf.get("isolation_level", isolation_level)
            auto_offset_reset = conf.get("auto_offset_reset", auto_offset_reset)
            max_poll_records = conf.get("max_poll_records", max_poll_records)
            fail_on_data_loss = conf.get("fail_on_data_loss", fail_on_data_loss)
        reset = "error" if auto_offset_reset == "none" else auto_offset_reset
        if reset not in AUTO_OFFSET_RESETS:
            raise InvalidOptionError(f"auto_offset_reset {auto_offset_reset!r} is not one of {AUTO_OFFSET_RESETS}")
        self.group_id = None if group_id is None else check_name("group", group_id)
        self.isolation_level = check_isolation(isolation_level)
        if not isinstance(max_poll_records, int) or max_poll_records <= 0:
            raise InvalidOptionError(f"max_poll_records must be a positive integer, got {max_poll_records!r}")
        self._own_store = not isinstance(store, Store)
        self.store = store if isinstance(store, Store) else open_store(store, options)
        self.coordinator = coordinator or TransactionCoordinator(self.store)
        self.auto_offset_reset = reset
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = bool(include_headers)  # polled tables carry _headers (Kafka's record headers)
        self.max_poll_records = max_poll_records
        self._positions: dict[TopicPartition, int] = {}
        self._schemas: dict[str, pa.Schema] = {}
        self._seen_uncommitted: set[str] = set()
        self._closed = False
        self._turn = 0

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._positions)} partition(s) assigned"
        return f"Consumer(store={self.store.url!r}, group_id={self.group_id!r}, {self.isolation_level}, {state})"

    # -- lifecycle --------------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("this consumer is closed")

    def commit(self, offsets: Mapping[str, Mapping[int, int]] | None = None) -> None:
        """Commit the group's offsets outside any transaction, like Kafka's ``commitSync``: this consumer's
        positions (the next offset to read of every assigned partition), or ``offsets`` (topic -> partition ->
        next offset). Inside a consume-transform-produce loop use ``Producer.send_offsets_to_transaction``
        instead, so the offsets commit atomically with the output.

        Raises:
            InvalidOptionError: no ``group_id``, or a negative offset.
            TopicNotFoundError: a topic or partition does not exist.
            OffsetOutOfRangeError: an offset is beyond the partition's end (nothing is committed).
            ClientClosedError: the consumer is closed (fatal).
            CommitStateUnknownError: the outcome could not be learned (retriable: commit again).
            StoreError: the store failed (retriable).
        """
        self._check_open()
        if self.group_id is None:
            raise InvalidOptionError("commit() needs a consumer with a group_id")
        chosen = self.positions() if offsets is None else {
            str(t): {int(p): int(o) for p, o in ps.items()} for t, ps in offsets.items()}
        for t, ps in chosen.items():
            for p, o in ps.items():
                if o < 0:
                    raise InvalidOptionError(f"offset of {t}/{p} must not be negative, got {o}")
        st = self.coordinator.log.refresh()
        for t, ps in chosen.items():
            n = self.coordinator.topic(t).partitions
            for p, o in ps.items():
                if not 0 <= p < n:
                    raise TopicNotFoundError(f"topic {t!r} has no partition {p} (it has {n})")
                end = st.partition(t, p).end
                if o > end:
                    raise OffsetOutOfRangeError(f"offset {o} of {t}/{p} is beyond the partition's end {end}; "
                                                "nothing was committed")
        if any(chosen.values()):
            self.coordinator.commit_group_offsets(self.group_id, chosen)

    def close(self) -> None:
        """Stop consuming: forget the assignment and release the store if this consumer opened it. Committed
        offsets are not changed (call :meth:`commit` first to keep the positions). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._positions = {}
        if self._own_store:
            self.store.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __iter__(self) -> Iterator[pa.Table]:
        """Yield :meth:`poll` results until a poll returns no record (the consumer caught up with the log as of
        that poll)."""
        while True:
            batch = self.poll()
            if batch.num_rows == 0:
                return
            yield batch

    # -- assignment -------------------------------------------------------------------------------------------

    def subscribe(self, topics: str | Iterable[str]) -> None:
        """Assign every partition of ``topics`` (a topic name, or several).

        Raises:
            TopicNotFoundError: a topic does not exist. ClientClosedError: the consumer is closed.
        """
        self._check_open()
        if isinstance(topics, str):
            topics = [topics]
        tps = []
        for t in topics:
            meta = get_topic(self.store, t)
            tps += [(t, p) for p in range(meta.partitions)]
        self.assign(tps)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these (topic, partition) pairs, from the group's committed offsets when there are.

        Raises:
            InvalidOptionError: a partition does not exist. ClientClosedError: the consumer is closed.
        """
        self._check_open()
        committed = self.coordinator.group_offsets(self.group_id) if self.group_id else {}
        self._positions = {}
        for topic, p in partitions:
            meta = get_topic(self.store, topic)
            if not 0 <= p < meta.partitions:
                raise InvalidOptionError(f"topic {topic!r} has no partition {p}")
            self._schemas[topic] = output_schema(meta.schema, headers=self.include_headers)
            pos = committed.get(topic, {}).get(p)
            if pos is None:
                pm = self.coordinator.log.refresh().partition(topic, p)
                pos = pm.start if self.auto_offset_reset == "earliest" else pm.end
            self._positions[(topic, p)] = pos
        try:
            # opened now, in parallel, so that a poll reads only what is new; a poll reports what fails here
            self._open_partitions(sorted(self._positions))
        except (CorruptLogError, StoreError):
            pass

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._positions)

    # -- positions --------------------------------------------------------------------------------------------

    def position(self, topic: str, partition: int) -> int:
        return self._positions[(topic, partition)]

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read ``topic``/``partition`` from ``offset`` next. As in Kafka, the offset is checked when it is read: one
        outside ``[log start, end]`` then follows ``auto_offset_reset`` (see the module docstring).

        Raises:
            InvalidOptionError: the partition is not assigned, or a negative offset.
        """
        if (topic, partition) not in self._positions:
            raise InvalidOptionError(f"{topic}/{partition} is not assigned to this consumer")
        if not isinstance(offset, int) or offset < 0:
            raise InvalidOptionError(f"offset must be a non-negative integer, got {offset!r}")
        self._positions[(topic, partition)] = offset

    def seek_to_beginning(self) -> None:
        st = self.coordinator.log.refresh()
        for tp in self._positions:
            self._positions[tp] = st.partition(*tp).start

    def seek_to_end(self) -> None:
        snap = self.coordinator.snapshot(sorted({t for t, _ in self._positions}), partitions=self._by_topic())
        for tp in self._positions:
            self._positions[tp] = snap.ends[tp[0]][tp[1]]

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed next offset for a partition, or None."""
        if self.group_id is None:
            raise InvalidOptionError("this consumer has no group_id")
        return self.coordinator.group_offsets(self.group_id).get(topic, {}).get(partition)

    def end_offsets(self) -> dict[TopicPartition, int]:
        """The read_committed end offset (exclusive) of every assigned partition, at a consistent snapshot."""
        snap = self.coordinator.snapshot(sorted({t for t, _ in self._positions}), partitions=self._by_topic())
        return {tp: snap.ends[tp[0]][tp[1]] for tp in self._positions}

    def lag(self) -> dict[TopicPartition, int]:
        """Records between the position the next poll reads from and the end, per partition: a position outside
        ``[log start, end]`` counts from where ``auto_offset_reset`` moves it (positions are not changed).

        Raises:
            OffsetOutOfRangeError: a position is out of range and ``auto_offset_reset`` is ``error`` (or below the
                start with ``fail_on_data_loss``).
        """
        snap = self.coordinator.snapshot(sorted({t for t, _ in self._positions}), partitions=self._by_topic())
        out = {}
        for (t, p), pos in self._positions.items():
            end = snap.ends[t][p]
            out[(t, p)] = end - self._in_range(t, p, pos, snap.starts[t][p], end)
        return out

    def _in_range(self, topic: str, p: int, pos: int, start: int, end: int) -> int:
        """The position to read ``topic``/``p`` from, for position ``pos`` and the range ``[start, end]``.

        Raises:
            OffsetOutOfRangeError: see :meth:`poll`.
        """
        if start <= pos <= end:
            return pos
        if pos < start and self.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"position {pos} of {topic}/{p} is below the log start {start} (retention removed those records); "
                "seek, or pass fail_on_data_loss=False to skip ahead"
            )
        if self.auto_offset_reset == "error":
            where = f"below the log start {start}" if pos < start else f"beyond the end {end}"
            raise OffsetOutOfRangeError(f"position {pos} of {topic}/{p} is {where} (auto_offset_reset is "
                                        f"'error'); seek to an offset in [{start}, {end}]")
        return start if self.auto_offset_reset == "earliest" else end

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int | dt.datetime]) -> dict[TopicPartition,
                                                                                                 int | None]:
        """Kafka's ``offsetsForTimes``: for each (topic, partition), the first offset whose commit time
        (``_timestamp``) is at or after the given time (epoch milliseconds or an aware datetime); None when no
        record was committed at or after it. Reads only; the partitions need not be assigned.

        Raises:
            TopicNotFoundError: a topic or partition does not exist. InvalidOptionError: a bad time.
        """
        self._check_open()
        self.coordinator.log.refresh()
        out: dict[TopicPartition, int | None] = {}
        for (t, p), when in timestamps.items():
            n = self.coordinator.topic(t).partitions
            if not 0 <= p < n:
                raise TopicNotFoundError(f"topic {t!r} has no partition {p} (it has {n})")
            plog = self.coordinator.partition(t, p)
            plog.refresh()
            o = plog.timestamp_offset(_epoch_ms(when))
            out[(t, p)] = None if o >= plog.end_offset else o
        return out

    def seek_to_timestamp(self, timestamp: int | dt.datetime) -> None:
        """Move every assigned partition to its first offset committed at or after ``timestamp`` (epoch
        milliseconds or an aware datetime), or to its end if none was (``offsets_for_times`` then ``seek``).

        Raises:
            InvalidOptionError: a bad time. ClientClosedError: the consumer is closed.
        """
        found = self.offsets_for_times(dict.fromkeys(self._positions, timestamp))
        for tp, o in found.items():
            self._positions[tp] = self.coordinator.partition(*tp).end_offset if o is None else o

    def _by_topic(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for t, p in self._positions:
            out.setdefault(t, []).append(p)
        return out

    def positions(self) -> dict[str, dict[int, int]]:
        """Positions as ``{topic: {partition: next_offset}}``, the shape ``send_offsets_to_transaction`` takes."""
        out: dict[str, dict[int, int]] = {}
        for (t, p), o in self._positions.items():
            out.setdefault(t, {})[p] = o
        return out

    # -- reading ----------------------------------------------------------------------------------------------

    def poll(self, timeout: float | None = 0.0, *, max_records: int | None = None) -> pa.Table:
        """Up to ``max_records`` (default ``max_poll_records``) records from the assigned partitions, at one
        transaction-consistent snapshot, the budget shared fairly across the partitions that have records (see
        :func:`fair_shares`), partition by partition in offset order, waiting up to ``timeout`` seconds for some
        (confluent-kafka's ``poll(timeout)``: 0 returns at once, None or -1 waits until records come). An empty
        table (with the right schema when one topic is assigned) when there is nothing new by then.

        While waiting, each look is one by-name read of the transaction log's next entry, with backoff (see the
        module docstring); a partition is read only once the log shows records past its position (with
        ``read_uncommitted``, every look reads, since staged records are not in the log). The partitions with
        records are read together: their segments in one parallel round, or while the log proved the entries.

        Raises:
            InvalidOptionError: nothing assigned, a bad ``timeout`` or ``max_records``.
            OffsetOutOfRangeError: a position is outside ``[log start, end]`` and ``auto_offset_reset`` is
                ``error``, or below the start with ``fail_on_data_loss``; seek to a valid offset.
            ClientClosedError: the consumer is closed (fatal).
            StoreError: the store failed (retriable: poll again; positions did not move).
            CorruptLogError: a segment to read is damaged (fatal).
        """
        self._check_open()
        limit = self.max_poll_records if max_records is None else max_records
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise InvalidOptionError(f"max_records must be a positive integer, got {limit!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or (timeout < 0 and timeout != -1)):
            raise InvalidOptionError(f"poll timeout must be a number of seconds >= 0 (or None / -1 to wait for "
                                     f"ever), got {timeout!r}; pass a record budget as max_records=")
        wait = None if timeout is None or timeout == -1 else float(timeout)
        deadline = None if wait is None else time.monotonic() + wait
        backoff = POLL_BACKOFF_MIN_S
        while True:
            table = self._poll_once(limit)
            if table.num_rows:
                return table
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return table
            time.sleep(backoff if left is None else min(backoff, left))
            backoff = min(2 * backoff, POLL_BACKOFF_MAX_S)

def read_snapshot(
    store: Store | str,
    topics: Iterable[str],
    *,
    snapshot: Snapshot | None = None,
    coordinator: TransactionCoordinator | None = None,
    options: Mapping[str, str] | StoreOptions | None = None,
) -> dict[str, pa.Table]:
    """Every committed record of ``topics`` at one transaction-consistent snapshot (taken now unless given):
    each transaction is in the result entirely or not at all, across all partitions and topics."""
    st = store if isinstance(store, Store) else open_store(store, options)
    coord = coordinator or TransactionCoordinator(st)
    names = list(topics)
    snap = snapshot or coord.snapshot(names)
    out: dict[str, pa.Table] = {}
    for t in names:
        schema = output_schema(get_topic(st, t).schema)
        batches = []
        for p, end in sorted(snap.ends[t].items()):
            plog = coord.partition(t, p)
            plog.refresh()
            batches += list(read_range(st, plog, snap.starts[t][p], end, schema))
        out[t] = pa.Table.from_batches(batches, schema=schema)
    return out


def _epoch_ms(when: int | dt.datetime) -> int:
    """Epoch milliseconds of ``when``.

    Raises:
        InvalidOptionError: not an integer or an aware datetime.
    """
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            raise InvalidOptionError(f"time {when!r} has no time zone; give an aware datetime")
        return int(when.timestamp() * 1000)
    if isinstance(when, bool) or not isinstance(when, int):
        raise InvalidOptionError(f"time must be epoch milliseconds or an aware datetime, got {when!r}")
    return when
