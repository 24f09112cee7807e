"""The streaming reader: ``spark.readStream.format("txnlog")``.

Offsets are ``{topic: {partition: next_offset}}`` (string partition keys). Each ``latestOffset`` call takes a
transaction-consistent snapshot of the topics and, within the read limit, moves every partition towards the
snapshot's end; with ``maxRecordsPerTrigger`` the rows are shared among partitions in proportion to their backlog
(Spark's Kafka source does the same), so a micro-batch may then end inside a transaction. Partitions added to a
topic later (``coordinator.add_partitions``) are read from their start as soon as they hold data. The topic list
is fixed by the ``topic`` option.

A micro-batch's offsets are absolute and its partitions are planned from them alone, so a replayed batch reads the
same rows. With ``groupId``, every finished micro-batch records its end as the group's committed offsets
(``TransactionCoordinator.commit_group_offsets``), so lag is visible to the CLI and notebooks.

The reader object lives in Spark's driver-side Python runner for the whole query (``prepareForTriggerAvailableNow``
state and the coordinator's caches survive between calls); a copy is pickled to the executors for ``read()``,
without the coordinator.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from txnsource.offsets import Positions, from_json, resolve, to_json
from txnsource.options import LATEST, ReadOptions, parse_options

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from coordinator.coordinator import Snapshot, TransactionCoordinator
    from coordinator.store import Store
    from coordinator.topics import TopicMeta


class TxnLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader of committed records. Picklable (the coordinator is left behind)."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._target: Positions | None = None
        self._latest: Positions | None = None
        self._recorded: Positions | None = None
        self._store: Store | None = None
        self._coord: TransactionCoordinator | None = None
        self._metas: dict[str, TopicMeta] = {}

    def __repr__(self) -> str:
        return f"TxnLogStreamReader(path={self.options.path!r}, topics={self.options.topics!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_store=None, _coord=None, _metas={})
        return state

    # -- driver side ------------------------------------------------------------------------------------------

    def _coordinator(self) -> TransactionCoordinator:
        if self._coord is None:
            from coordinator.coordinator import TransactionCoordinator
            from coordinator.store import open_store

            self._store = open_store(self.options.path, self.options.store)
            self._coord = TransactionCoordinator(self._store)
        return self._coord

    def _snapshot(self) -> Snapshot:
        snap = self._coordinator().snapshot(self.options.topics)
        self._latest = {(t, p): e for t, ends in snap.ends.items() for p, e in ends.items()}
        return snap

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Where a new query starts: ``startingOffsets`` (default ``latest``) resolved at a snapshot taken now.

        Raises:
            TopicNotFoundError: a topic does not exist.
            InvalidOptionError: ``startingOffsets`` names offsets the topics do not have.
        """
        snap = self._snapshot()
        pos = resolve("startingOffsets", self.options.starting, snap, self.options.topics, default=LATEST)
        return to_json(pos, self.options.topics)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        """``ReadMaxRows(maxRecordsPerTrigger)`` when the option is set, else ``ReadAllAvailable``."""
        n = self.options.max_records_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Fix the query's end at a snapshot taken now: later commits are left for a later run."""
        snap = self._snapshot()
        self._target = {(t, p): e for t, ends in snap.ends.items() for p, e in ends.items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        """The end of the next micro-batch from ``start``: the snapshot's end (capped by the availableNow target),
        limited to ``limit.max_rows`` rows for ``ReadMaxRows``. Returns ``start`` itself when there is nothing new.
        """
        topics = self.options.topics
        begin = from_json(start, topics)
        # Spark plans a micro-batch only after the previous one finished, so ``start`` has been processed; it
        # commits the previous batch to the source only when it plans the next one, so the final batch of an
        # availableNow run would otherwise never be recorded
        self._record_group(begin)
        snap = self._snapshot()
        lags: dict[tuple[str, int], int] = {}
        base: Positions = {}
        for topic in topics:
            for p, end in snap.ends[topic].items():
                tp = (topic, p)
                s = begin.get(tp, snap.starts[topic][p])
                if s < snap.starts[topic][p] and not self.options.fail_on_data_loss:
                    s = snap.starts[topic][p]
                e = end if self._target is None else min(end, self._target.get(tp, s))
                base[tp] = s
                lags[tp] = max(0, e - s)
        grant = allocate(lags, limit.max_rows) if isinstance(limit, ReadMaxRows) else lags
        out = {tp: s + grant[tp] for tp, s in base.items() if tp in begin or grant[tp] > 0}
        for tp, s in begin.items():
            out.setdefault(tp, s)
        return to_json(out, topics)

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802 - Spark's name
        """The end of the latest snapshot taken (the topics' committed end), for progress reports."""
        if self._latest is None:
            self._snapshot()
        assert self._latest is not None
        return to_json(self._latest, self.options.topics)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Input partitions for offsets ``[start, end)``, planned like a batch read (empty when equal).

        Raises:
            OffsetOutOfRangeError: ``start`` lies below a partition's log start and ``failOnDataLoss`` is true.
            SchemaMismatchError: a user-given schema names a column none of the topics has.
        """
        from coordinator.errors import OffsetOutOfRangeError
        from coordinator.topics import get_topic
        from txnsource.planning import plan_partitions
        from txnsource.pushdown import Pushdown
        from txnsource.schema import check_projection

        topics = self.options.topics
        lo, hi = from_json(start, topics), from_json(end, topics)
        coord = self._coordinator()
        ranges: dict[tuple[str, int], tuple[int, int]] = {}
        for tp, e in hi.items():
            plog = coord.partition(*tp)
            plog.refresh()
            s = lo.get(tp, plog.start_offset)
            if s < plog.start_offset:
                if self.options.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"offset {s} of {tp[0]}/{tp[1]} is below the log start {plog.start_offset}: retention "
                        "removed those records. Set option failOnDataLoss=false to skip ahead to the log start"
                    )
                s = plog.start_offset
            if e > s:
                ranges[tp] = (s, e)
        if len(self._metas) < len(topics):
            assert self._store is not None
            self._metas = {t: get_topic(self._store, t) for t in topics}
            check_projection(self.schema.names, list(self._metas.values()))
        return plan_partitions(coord, self._metas, ranges, Pushdown(),
                               target_bytes=self.options.max_partition_bytes,
                               min_partitions=self.options.min_partitions)

    def commit(self, end: dict[str, Any]) -> None:
        """Record ``end`` as consumer group ``groupId``'s offsets (no-op without ``groupId``).

        Spark calls this for batch ``N`` when it plans batch ``N + 1``; :meth:`latestOffset` records its ``start``
        (the end of the finished batch) too, so a run's last batch is recorded as well.
        """
        self._record_group(from_json(end, self.options.topics))

    def _record_group(self, pos: Positions) -> None:
        """Commit ``pos`` as group ``groupId``'s offsets, unless it is what this reader recorded last."""
        group = self.options.group_id
        if group is None or pos == self._recorded:
            return
        offsets: dict[str, dict[int, int]] = {}
        for (t, p), o in pos.items():
            offsets.setdefault(t, {})[p] = o
        self._coordinator().commit_group_offsets(group, offsets)
        self._recorded = dict(pos)

    # -- executor side ----------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the partition's records as Arrow batches of exactly the read schema.

        Raises:
            CorruptLogError: a committed segment is missing or damaged.
        """
        from coordinator.store import open_store
        from txnsource.planning import TxnInputPartition, read_partition
        from txnsource.schema import spark_arrow_schema

        if not isinstance(partition, TxnInputPartition):
            return iter(())
        store = open_store(self.options.path, self.options.store, probe=False)
        return read_partition(store, partition, spark_arrow_schema(self.schema))


def allocate(lags: Mapping[tuple[str, int], int], max_rows: int) -> dict[tuple[str, int], int]:
    """Share ``max_rows`` among partitions in proportion to their backlog (``lags``), deterministically; every
    row of the limit is used while backlog remains."""
    total = sum(lags.values())
    if total <= max_rows:
        return dict(lags)
    grant = {tp: lag * max_rows // total for tp, lag in lags.items()}
    left = max_rows - sum(grant.values())
    # largest remainder first, so the shares stay as close to proportional as whole rows allow
    for tp in sorted(lags, key=lambda tp: (-(lags[tp] * max_rows % total), tp)):
        if left <= 0:
            break
        if grant[tp] < lags[tp]:
            grant[tp] += 1
            left -= 1
    return grant


def make_stream_reader(options: Mapping[str, str], schema: StructType) -> TxnLogStreamReader:
    """The stream reader for Spark's ``options`` and ``schema``.

    Raises:
        InvalidOptionError: a bad option, ``endingOffsets``, ``isolationLevel`` = ``read_uncommitted``, or
            ``readPath`` = ``native`` (streams always use the Python reader).
    """
    from txnsource.batch import refuse_native

    opts = parse_options(options, streaming=True)
    refuse_native(opts)
    return TxnLogStreamReader(opts, schema)
