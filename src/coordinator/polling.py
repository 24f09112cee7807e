"""One look of :meth:`Consumer.poll <coordinator.consumer.Consumer.poll>`: the log's new entries, the records of
every assigned partition that has some, their segments read in one parallel round (or while the log proves the
entries that name them), and the budget shared fairly across partitions. A mixin of
:class:`~coordinator.consumer.Consumer`, which holds the state it uses (declared below for type checking only).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from coordinator import parallel
from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import InvalidOptionError, StoreError
from coordinator.partition import PartitionLog
from coordinator.partrecords import CommitOp, records_of
from coordinator.reader import READ_UNCOMMITTED, read_range, read_uncommitted, uncommitted_paths
from coordinator.records import LogEntry
from coordinator.store import Store

TopicPartition = tuple[str, int]

#: Segment bytes one poll reads ahead, and in one parallel round, at most (the rest are read as they are decoded).
READ_AHEAD_BYTES = 64 * 1024 * 1024


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



class Polling:
    """The reading half of :class:`~coordinator.consumer.Consumer` (see the module docstring)."""

    if TYPE_CHECKING:
        store: Store
        coordinator: TransactionCoordinator
        isolation_level: str
        _positions: dict[TopicPartition, int]
        _schemas: dict[str, pa.Schema]
        _seen_uncommitted: set[str]
        _turn: int

        def _in_range(self, topic: str, p: int, pos: int, start: int, end: int) -> int: ...

    def _read_ahead(self, entries: list[LogEntry], into: dict[str, bytes]) -> list[Callable[[], object]]:
        """Reads of the segments that ``entries`` publish past this consumer's positions, into ``into`` (at most
        :data:`READ_AHEAD_BYTES`): the log runs them while it proves the entries, and the poll uses them only for
        the records the proven log names (see :meth:`TransactionLog.refresh`)."""
        jobs: list[Callable[[], object]] = []
        budget = READ_AHEAD_BYTES - sum(len(b) for b in into.values())
        for entry in entries:
            for tp, rec in records_of(entry).items():
                pos = self._positions.get(tp)
                if pos is None:
                    continue
                for op in rec.ops:
                    if not isinstance(op, CommitOp):
                        continue
                    off = op.base
                    for seg in op.segments:
                        off += seg.rows
                        if seg.rows and off > pos and seg.path not in into and seg.size <= budget:
                            budget -= seg.size
                            jobs.append(functools.partial(self._fetch_into, seg.path, into))
        return jobs

    def _fetch_into(self, path: str, into: dict[str, bytes], *, ahead: bool = True) -> None:
        """Read segment ``path`` into ``into``. A segment missing is left to the read that needs it (which names
        it); so is one the store failed to return when reading ahead.

        Raises:
            StoreError: the store failed (not ``ahead``).
        """
        try:
            into[path] = self.store.get(path)
        except FileNotFoundError:
            pass
        except StoreError:
            if not ahead:
                raise

    def _open_partitions(self, tps: list[TopicPartition]) -> dict[TopicPartition, PartitionLog]:
        """The indexes of ``tps``, opened and read up to the log's state, in parallel.

        Raises:
            CorruptLogError: a partition's records are damaged beyond what the log can recompute.
        """
        def one(tp: TopicPartition) -> PartitionLog:
            plog = self.coordinator.partition(*tp)
            plog.refresh()
            return plog

        return dict(zip(tps, parallel.pmap(one, tps), strict=True))

    def _poll_once(self, limit: int) -> pa.Table:
        """One look: the log's new entries (by name when nothing is new), then the records of every partition with
        some, their segments read in one parallel round (or while the log proved the entries that name them)."""
        topics = sorted({t for t, _ in self._positions})
        if not topics:
            raise InvalidOptionError("no partitions assigned; call subscribe() or assign()")
        fetched: dict[str, bytes] = {}
        st = self.coordinator.log.refresh(read_ahead=lambda entries: self._read_ahead(entries, fetched))
        available: dict[TopicPartition, int] = {}
        for tp in sorted(self._positions):
            topic, p = tp
            pm = st.partition(topic, p)
            end = pm.end
            self._positions[tp] = pos = self._in_range(topic, p, self._positions[tp], pm.start, end)
            available[tp] = end - pos
        shares = fair_shares(available, limit, self._turn)
        reading = [tp for tp in sorted(self._positions) if shares[tp] > 0]
        uncommitted = sorted(self._positions) if self.isolation_level == READ_UNCOMMITTED else []
        plogs = self._open_partitions(sorted(set(reading) | set(uncommitted)))
        wanted: dict[str, int] = {}
        for tp in reading:
            pos = self._positions[tp]
            for sl in plogs[tp].slices(pos, pos + shares[tp]):
                wanted[sl.segment.path] = sl.segment.size
        budget = READ_AHEAD_BYTES - sum(len(b) for b in fetched.values())
        missing = []
        for path, size in wanted.items():
            if path not in fetched and size <= budget:
                budget -= size
                missing.append(path)
        parallel.pmap(lambda path: self._fetch_into(path, fetched, ahead=False), missing)
        tables: list[pa.Table] = []
        moved: dict[TopicPartition, int] = {}
        seen: set[str] = set()
        # Positions move only once every read of this poll succeeded: a poll that fails returns nothing and the
        # next one reads the same records again.
        for tp in sorted(self._positions):
            topic, p = tp
            pos, n = self._positions[tp], shares[tp]
            if n > 0:
                batches = list(read_range(self.store, plogs[tp], pos, pos + n, self._schemas[topic], fetched=fetched))
                if batches:
                    tables.append(pa.Table.from_batches(batches, schema=self._schemas[topic]))
                moved[tp] = pos + n
            if self.isolation_level == READ_UNCOMMITTED:
                plog = plogs[tp]
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
