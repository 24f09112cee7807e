"""The Python consumer, and snapshot reads.

```python
consumer = Consumer("file:///data/lake", group_id="etl")
consumer.subscribe(["orders"])
batch = consumer.poll()          # a pyarrow Table: topic columns + _topic, _partition, _offset, _timestamp
```

``read_committed`` (the default) returns only records of committed transactions, in offset order;
``read_uncommitted`` also returns, once each, records staged by open and aborted transactions (null ``_offset``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa

from coordinator.coordinator import Snapshot, TransactionCoordinator
from coordinator.errors import InvalidOptionError, OffsetOutOfRangeError
from coordinator.layout import check_name
from coordinator.reader import (
    READ_UNCOMMITTED,
    check_isolation,
    output_schema,
    read_range,
    read_uncommitted,
    uncommitted_paths,
)
from coordinator.store import Store, StoreOptions, open_store
from coordinator.topics import get_topic

TopicPartition = tuple[str, int]


class Consumer:
    """Reads partitions from positions, like Kafka's consumer (without group rebalancing: ``subscribe`` assigns
    every partition of the topics to this consumer)."""

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

    # -- assignment -------------------------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Assign every partition of ``topics``."""
        tps = []
        for t in topics:
            meta = get_topic(self.store, t)
            tps += [(t, p) for p in range(meta.partitions)]
        self.assign(tps)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these (topic, partition) pairs, from the group's committed offsets when there are."""
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
        """Up to ``max_records`` records from the assigned partitions, at one transaction-consistent snapshot.
        An empty table (with the right schema when one topic is assigned) when there is nothing new."""
        limit = self.max_poll_records if max_records is None else max_records
        topics = sorted({t for t, _ in self._positions})
        if not topics:
            raise InvalidOptionError("no partitions assigned; call subscribe() or assign()")
        snap = self.coordinator.snapshot(topics, partitions=self._by_topic())
        tables: list[pa.Table] = []
        left = limit
        for tp in sorted(self._positions):
            if left <= 0:
                break
            topic, p = tp
            pos = self._positions[tp]
            if pos < snap.starts[topic][p]:
                if self.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"position {pos} of {topic}/{p} is below the log start {snap.starts[topic][p]} (retention "
                        "removed those records); seek, or pass fail_on_data_loss=False to skip ahead"
                    )
                pos = snap.starts[topic][p]
            end = min(snap.ends[topic][p], pos + left)
            if end > pos:
                plog = self.coordinator.partition(topic, p)
                plog.refresh()
                batches = list(read_range(self.store, plog, pos, end, self._schemas[topic]))
                if batches:
                    tables.append(pa.Table.from_batches(batches, schema=self._schemas[topic]))
                left -= end - pos
                self._positions[tp] = end
            if self.isolation_level == READ_UNCOMMITTED and left > 0:
                plog = self.coordinator.partition(topic, p)
                plog.refresh()
                new = [x for x in uncommitted_paths(self.store, plog) if x not in self._seen_uncommitted]
                self._seen_uncommitted.update(new)
                batches = list(read_uncommitted(self.store, plog, self._schemas[topic], new))
                if batches:
                    tables.append(pa.Table.from_batches(batches, schema=self._schemas[topic]))
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
