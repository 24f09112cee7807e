"""The Python consumer, and snapshot reads.

```python
with Consumer("file:///data/lake", group_id="etl") as consumer:
    consumer.subscribe(["orders"])
    for batch in consumer:       # pyarrow Tables: topic columns + _topic, _partition, _offset, _timestamp,
                                 # _producerTimestamp
        handle(batch)
        consumer.commit()        # the group's offsets, outside any transaction (Kafka's commitSync)
```

``read_committed`` (the default) returns only records of committed transactions, in offset order;
``read_uncommitted`` also returns, once each, records staged by open and aborted transactions (null ``_offset``).
``poll(max_records)`` shares its budget fairly across the assigned partitions that have records.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType

import pyarrow as pa

from coordinator.coordinator import Snapshot, TransactionCoordinator
from coordinator.errors import ClientClosedError, InvalidOptionError, OffsetOutOfRangeError
from coordinator.layout import check_name
from coordinator.reader import (
    READ_UNCOMMITTED,
    check_isolation,
    output_schema,
    read_range,
    read_uncommitted,
    uncommitted_paths,
)
from coordinator.store import Store, StoreOptions
from coordinator.store_factory import open_store
from coordinator.topics import get_topic

TopicPartition = tuple[str, int]


def fair_shares(available: Mapping[TopicPartition, int], budget: int, first: int = 0) -> dict[TopicPartition, int]:
    """Split ``budget`` records over partitions with ``available`` records each, max-min fairly: every partition
    gets an equal share, and what a partition cannot use goes to the others. A remainder smaller than the number
    of partitions goes one record each, starting at the ``first``-th partition in sorted order (rotate it between
    calls so no partition is always favoured)."""
    shares = dict.fromkeys(available, 0)
    keys = sorted(k for k, n in available.items() if n > 0)
    if keys:
        k0 = first % len(keys)
        keys = keys[k0:] + keys[:k0]
    left = max(0, budget)
    while keys and left > 0:
        each = max(1, left // len(keys))
        still = []
        for k in keys:
            if left <= 0:
                break
            give = min(each, available[k] - shares[k], left)
            shares[k] += give
            left -= give
            if shares[k] < available[k]:
                still.append(k)
        keys = still
    return shares


class Consumer:
    """Reads partitions from positions, like Kafka's consumer (without group rebalancing: ``subscribe`` assigns
    every partition of the topics to this consumer). Not thread-safe. Iterating yields :meth:`poll` results until
    one is empty (the consumer caught up with the log); ``close()`` (or leaving a ``with`` block) ends it."""

    def __init__(
        self,
        store: Store | str,
        *,
        group_id: str | None = None,
        isolation_level: str = "read_committed",
        auto_offset_reset: str = "earliest",
        max_poll_records: int = 100_000,
        fail_on_data_loss: bool = True,
        options: Mapping[str, str] | StoreOptions | None = None,
        coordinator: TransactionCoordinator | None = None,
    ) -> None:
        self._own_store = not isinstance(store, Store)
        self.store = store if isinstance(store, Store) else open_store(store, options)
        self.coordinator = coordinator or TransactionCoordinator(self.store)
        self.group_id = None if group_id is None else check_name("group", group_id)
        self.isolation_level = check_isolation(isolation_level)
        if auto_offset_reset not in ("earliest", "latest"):
            raise InvalidOptionError(f"auto_offset_reset {auto_offset_reset!r} is not 'earliest' or 'latest'")
        if not isinstance(max_poll_records, int) or max_poll_records <= 0:
            raise InvalidOptionError(f"max_poll_records must be a positive integer, got {max_poll_records!r}")
        self.auto_offset_reset = auto_offset_reset
        self.fail_on_data_loss = fail_on_data_loss
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
            ClientClosedError: the consumer is closed.
            CommitStateUnknownError: the outcome could not be learned.
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

    def subscribe(self, topics: Iterable[str]) -> None:
        """Assign every partition of ``topics``.

        Raises:
            TopicNotFoundError: a topic does not exist. ClientClosedError: the consumer is closed.
        """
        self._check_open()
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
            self._schemas[topic] = output_schema(meta.schema)
            pos = committed.get(topic, {}).get(p)
            if pos is None:
                pm = self.coordinator.log.refresh().partition(topic, p)
                pos = pm.start if self.auto_offset_reset == "earliest" else pm.end
            self._positions[(topic, p)] = pos

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._positions)

    # -- positions --------------------------------------------------------------------------------------------

    def position(self, topic: str, partition: int) -> int:
        return self._positions[(topic, partition)]

    def seek(self, topic: str, partition: int, offset: int) -> None:
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
        """Records between this consumer's position and the end, per partition."""
        ends = self.end_offsets()
        return {tp: max(0, ends[tp] - pos) for tp, pos in self._positions.items()}

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

    def poll(self, max_records: int | None = None) -> pa.Table:
        """Up to ``max_records`` (default ``max_poll_records``) records from the assigned partitions, at one
        transaction-consistent snapshot, the budget shared fairly across the partitions that have records (see
        :func:`fair_shares`), partition by partition in offset order. An empty table (with the right schema when
        one topic is assigned) when there is nothing new.

        Raises:
            InvalidOptionError: nothing assigned, or a bad ``max_records``.
            OffsetOutOfRangeError: a position is below the log start and ``fail_on_data_loss`` is set.
            ClientClosedError: the consumer is closed.
            CorruptLogError: a segment to read is damaged.
        """
        self._check_open()
        limit = self.max_poll_records if max_records is None else max_records
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise InvalidOptionError(f"max_records must be a positive integer, got {limit!r}")
        topics = sorted({t for t, _ in self._positions})
        if not topics:
            raise InvalidOptionError("no partitions assigned; call subscribe() or assign()")
        snap = self.coordinator.snapshot(topics, partitions=self._by_topic())
        available: dict[TopicPartition, int] = {}
        for tp in sorted(self._positions):
            topic, p = tp
            pos = self._positions[tp]
            if pos < snap.starts[topic][p]:
                if self.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"position {pos} of {topic}/{p} is below the log start {snap.starts[topic][p]} (retention "
                        "removed those records); seek, or pass fail_on_data_loss=False to skip ahead"
                    )
                self._positions[tp] = pos = snap.starts[topic][p]
            available[tp] = max(0, snap.ends[topic][p] - pos)
        shares = fair_shares(available, limit, self._turn)
        tables: list[pa.Table] = []
        moved: dict[TopicPartition, int] = {}
        seen: set[str] = set()
        # Positions move only once every read of this poll succeeded: a poll that fails returns nothing and the
        # next one reads the same records again.
        for tp in sorted(self._positions):
            topic, p = tp
            pos, n = self._positions[tp], shares[tp]
            if n > 0:
                plog = self.coordinator.partition(topic, p)
                plog.refresh()
                batches = list(read_range(self.store, plog, pos, pos + n, self._schemas[topic]))
                if batches:
                    tables.append(pa.Table.from_batches(batches, schema=self._schemas[topic]))
                moved[tp] = pos + n
            if self.isolation_level == READ_UNCOMMITTED:
                plog = self.coordinator.partition(topic, p)
                plog.refresh()
                new = [x for x in uncommitted_paths(self.store, plog) if x not in self._seen_uncommitted]
                seen.update(new)
                batches = list(read_uncommitted(self.store, plog, self._schemas[topic], new))
                if batches:
                    tables.append(pa.Table.from_batches(batches, schema=self._schemas[topic]))
        self._positions.update(moved)
        self._seen_uncommitted.update(seen)
        self._turn += 1
        if not tables:
            return self._schemas[topics[0]].empty_table() if len(topics) == 1 else pa.table({})
        return pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]


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
