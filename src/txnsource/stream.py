"""The streaming reader: ``spark.readStream.format("txnlog")``.

Offsets are ``{topic: {partition: next_offset}}`` (string partition keys). Each ``latestOffset`` call takes a
transaction-consistent snapshot of the topics and, within the admission limits (:mod:`txnsource.admission`:
``maxRecordsPerTrigger`` / ``maxOffsetsPerTrigger``, ``maxBytesPerTrigger``, ``minOffsetsPerTrigger`` with
``maxTriggerDelay``), moves every partition towards the snapshot's end; a row limit is shared among partitions in
proportion to their backlog (Spark's Kafka source does the same), so a micro-batch may then end inside a
transaction. pyspark 4.2 and 4.3 pass one ``ReadLimit`` (no composite): :meth:`TxnLogStreamReader.getDefaultReadLimit`
returns the main one and every option given is applied unless Spark passes ``ReadAllAvailable``. Partitions added to
a topic later (``coordinator.add_partitions``) are read from their start as soon as they hold data (not with
``assign``). With ``subscribePattern`` the topics are listed again at every snapshot, so a topic created while the
query runs is read from its earliest offset from the next micro-batch on (as Spark's Kafka source); a topic deleted
meanwhile drops out of the offsets. The read schema stays the one resolved when the query started: a new topic's
columns outside it are not read, and its columns missing from it read as nulls. With ``topic`` or ``assign`` the
topics are fixed.

Lag: neither pyspark 4.2 nor 4.3 lets a Python stream reader report custom metrics, so the reader implements
``reportLatestOffset``: each progress report's source shows ``latestOffset`` (the topics' committed end at the last
snapshot) next to ``endOffset``; their difference per partition is the records the query is behind.

An offset beyond a partition's log end (the topic was re-created, or the checkpoint belongs to another store) fails
the query naming topic, partition and offsets, or with ``failOnDataLoss=false`` restarts that partition at its log
start; an offset below the log start (retention) fails likewise or skips ahead.

A micro-batch's offsets are absolute and its partitions are planned from them alone, so a replayed batch reads the
same rows. With ``groupId``, every finished micro-batch records its end as the group's committed offsets
(``TransactionCoordinator.commit_group_offsets``), so lag is visible to the CLI and notebooks.

With :func:`txnsource.enable_native`, Spark's Parquet reader reads each micro-batch's ranges
(:func:`stream_ranges`, the same the reader's ``partitions`` reads) instead of :meth:`TxnLogStreamReader.read`
wherever the native path applies (:mod:`txnsource.nativestream`); the offsets are this reader's either way.

The reader object lives in Spark's driver-side Python runner for the whole query (``prepareForTriggerAvailableNow``
state and the coordinator's caches survive between calls); a copy is pickled to the executors for ``read()``,
without the coordinator.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from txnsource.admission import SliceSeqs, SliceSizes, TriggerDelay, allocate, bytes_grant, files_grant
from txnsource.offsets import Positions, from_json, starting_positions, take_snapshot, to_json
from txnsource.options import LATEST, ReadOptions, parse_options, resolve_pattern

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from coordinator.coordinator import Snapshot, TransactionCoordinator
    from coordinator.partition import SegmentSlice
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
        self._delay = None if options.min_records_per_trigger is None else TriggerDelay(
            options.min_records_per_trigger, options.max_trigger_delay_ms)

    def __repr__(self) -> str:
        return f"TxnLogStreamReader(path={self.options.path!r}, topics={self.options.topics!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_store=None, _coord=None, _metas={})
        return state

    # -- driver side ------------------------------------------------------------------------------------------

    def _coordinator(self) -> TransactionCoordinator:
        if self._coord is None:
            from coordinator import open_store
            from coordinator.coordinator import TransactionCoordinator

            self._store = open_store(self.options.path, self.options.store)
            self._coord = TransactionCoordinator(self._store)
        return self._coord

    def _snapshot(self) -> Snapshot:
        """A snapshot of the topics read; with ``subscribePattern``, of the topics matching it now.

        Raises:
            TopicNotFoundError: a topic does not exist (with a pattern: none matches, or a matching topic was
                deleted while the snapshot was taken, twice in a row).
        """
        from coordinator.errors import TopicNotFoundError

        if self.options.pattern is None:
            snap = take_snapshot(self._coordinator(), self.options)
        else:
            try:
                snap = take_snapshot(self._coordinator(), self._relist())
            except TopicNotFoundError:  # a matching topic was deleted between the listing and the snapshot
                snap = take_snapshot(self._coordinator(), self._relist())
        self._latest = {(t, p): e for t, ends in snap.ends.items() for p, e in ends.items()}
        return snap

    def _relist(self) -> ReadOptions:
        """Re-resolve ``subscribePattern`` against the topics existing now (sorted, as the first listing).

        Raises:
            TopicNotFoundError: the pattern matches no topic any more.
        """
        from coordinator.errors import TopicNotFoundError
        from coordinator.topics import list_topics

        self._coordinator()
        assert self._store is not None and self.options.pattern is not None
        pattern = self.options.pattern
        matched = tuple(n for n in list_topics(self._store) if re.fullmatch(pattern, n))
        if not matched:
            raise TopicNotFoundError(f"option 'subscribePattern' = {pattern!r} matches no topic any more")
        self.options = replace(self.options, topics=matched)
        return self.options

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Where a new query starts: ``startingOffsets`` (default ``latest``) resolved at a snapshot taken now.

        Raises:
            TopicNotFoundError: a topic does not exist.
            InvalidOptionError: ``startingOffsets`` names offsets the topics do not have.
        """
        snap = self._snapshot()
        pos = starting_positions(self.options, snap, self._coordinator(), default=LATEST)
        return to_json(pos, self.options.topics)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        """The limit the options ask for: ``ReadMaxRows(maxRecordsPerTrigger)``, else
        ``ReadMaxFiles(maxFilesPerTrigger)``, else ``ReadMaxBytes(maxBytesPerTrigger)``, else
        ``ReadMinRows(minOffsetsPerTrigger)``, else ``ReadAllAvailable``.

        Spark passes one limit (pyspark 4.2 and 4.3 have no composite limit); :meth:`latestOffset` applies every
        option given whenever the engine's limit is not ``ReadAllAvailable``.
        """
        o = self.options
        if o.max_records_per_trigger is not None:
            return ReadMaxRows(o.max_records_per_trigger)
        if o.max_files_per_trigger is not None:
            return ReadMaxFiles(o.max_files_per_trigger)
        if o.max_bytes_per_trigger is not None:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        if o.min_records_per_trigger is not None:
            return ReadMinRows(o.min_records_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Fix the query's end at a snapshot taken now: later commits are left for a later run."""
        snap = self._snapshot()
        self._target = {(t, p): e for t, ends in snap.ends.items() for p, e in ends.items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        """The end of the next micro-batch from ``start``: the snapshot's end (capped by the availableNow target),
        within the admission limits (see :mod:`txnsource.admission`) unless ``limit`` is ``ReadAllAvailable``.
        Returns ``start`` itself when there is nothing new, or when ``minOffsetsPerTrigger`` makes it wait.

        Raises:
            OffsetOutOfRangeError: ``start`` lies above a partition's log end (the topic was re-created) and
                ``failOnDataLoss`` is true.
        """
        begin = from_json(start, self.options)
        # Spark plans a micro-batch only after the previous one finished, so ``start`` has been processed; it
        # commits the previous batch to the source only when it plans the next one, so the final batch of an
        # availableNow run would otherwise never be recorded
        self._record_group(begin)
        snap = self._snapshot()
        topics = self.options.topics  # with a pattern, as listed by this snapshot: new topics start at earliest
        lags: dict[tuple[str, int], int] = {}
        base: Positions = {}
        for topic in topics:
            for p, end in snap.ends[topic].items():
                tp = (topic, p)
                s = self._checked_start(tp, begin.get(tp, snap.starts[topic][p]), snap.starts[topic][p], end)
                e = end if self._target is None else min(end, self._target.get(tp, s))
                base[tp] = s
                lags[tp] = max(0, e - s)
        grant = self._admit(lags, base, limit)
        out = {tp: s + grant[tp] for tp, s in base.items() if tp in begin or grant[tp] > 0}
        for tp, s in begin.items():
            out.setdefault(tp, s)
        return to_json(out, topics)

    def _checked_start(self, tp: tuple[str, int], s: int, log_start: int, log_end: int) -> int:
        """Where partition ``tp`` goes on from offset ``s``: below the log start (retention) or above the log end
        (a re-created topic) it fails, unless ``failOnDataLoss`` is false: then it starts at the log start.

        Raises:
            OffsetOutOfRangeError: ``s`` is above the log end and ``failOnDataLoss`` is true (below the start, the
                error comes from :meth:`partitions`, which sees the newest log).
        """
        if s > log_end:
            if self.options.fail_on_data_loss:
                from coordinator.errors import OffsetOutOfRangeError

                raise OffsetOutOfRangeError(
                    f"the query's offset {s} of {tp[0]}/{tp[1]} is beyond the partition's log end {log_end} (log "
                    f"start {log_start}): the topic was deleted and re-created, or the checkpoint belongs to "
                    "another store. Set option failOnDataLoss=false to restart the partition from its log start, or "
                    "use a new checkpoint location"
                )
            return log_start
        if s < log_start and not self.options.fail_on_data_loss:
            return log_start
        return s

    def _admit(self, lags: dict[tuple[str, int], int], base: Positions, limit: ReadLimit
               ) -> dict[tuple[str, int], int]:
        """Rows each partition may take this micro-batch (see :mod:`txnsource.admission`)."""
        if isinstance(limit, ReadAllAvailable):
            return lags
        o = self.options
        grant = lags
        max_files = limit.max_files if isinstance(limit, ReadMaxFiles) else o.max_files_per_trigger
        if max_files is not None and any(lags.values()):
            grant = files_grant(self._seqs(base, lags, max_files), max_files)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else o.max_records_per_trigger
        if max_rows is not None:
            grant = allocate(grant, max_rows)
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else o.max_bytes_per_trigger
        if max_bytes is not None and any(grant.values()):
            grant = bytes_grant(grant, self._sizes(base, grant), max_bytes)
        if self._delay is not None and self._target is None:  # availableNow never waits, as Kafka's source
            if isinstance(limit, ReadMinRows):
                self._delay.min_rows = limit.min_rows
            if self._delay.wait(sum(lags.values())):
                return dict.fromkeys(lags, 0)
        return grant

    def _seqs(self, base: Positions, lags: dict[tuple[str, int], int], files: int
              ) -> dict[tuple[str, int], SliceSeqs]:
        """(commit seq, rows) of the first ``files`` segment slices of each partition's backlog (none for a
        partition without backlog)."""
        slices = self._slices(base, lags, files)
        return {tp: [(sl.segment.commit_seq, sl.rows) for sl in slices.get(tp, ())] for tp in lags}

    def _slices(self, base: Positions, grant: dict[tuple[str, int], int], limit: int | None = None
                ) -> dict[tuple[str, int], list[SegmentSlice]]:
        """The segment slices holding each partition's granted rows (the first ``limit`` of them), from the
        partition index."""
        from coordinator import parallel

        coord = self._coordinator()
        logs = {tp: coord.partition(*tp) for tp, n in grant.items() if n > 0}
        parallel.pmap(lambda plog: plog.refresh(),
                      [plog for tp, plog in logs.items() if plog.end_offset < base[tp] + grant[tp]])
        out = {}
        for tp, plog in logs.items():
            lo = max(base[tp], plog.start_offset)
            out[tp] = plog.slices(lo, max(lo, base[tp] + grant[tp]), limit)
        return out

    def _sizes(self, base: Positions, grant: dict[tuple[str, int], int]) -> dict[tuple[str, int], SliceSizes]:
        """(rows, bytes) of the segment slices holding each partition's granted rows, from the partition index."""
        return {tp: [(sl.rows, sl.segment.size * sl.rows / sl.segment.rows if sl.segment.rows else 0.0)
                     for sl in slices] for tp, slices in self._slices(base, grant).items()}

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
        from coordinator.topics import get_topic
        from txnsource.planning import plan_partitions
        from txnsource.pushdown import Pushdown
        from txnsource.schema import check_projection

        topics = self.options.topics
        coord = self._coordinator()
        ranges = stream_ranges(coord, self.options, start, end)
        wanted = set(topics).union(t for t, _ in ranges)  # a replayed batch may name a topic not listed yet
        if not wanted <= self._metas.keys():
            assert self._store is not None
            self._metas = {t: self._metas.get(t) or get_topic(self._store, t) for t in sorted(wanted)}
            check_projection(self.schema.names, list(self._metas.values()))
        return plan_partitions(coord, self._metas, ranges, Pushdown(),
                               target_bytes=self.options.max_partition_bytes,
                               min_partitions=self.options.min_partitions,
                               max_rows=self.options.max_records_per_partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Record ``end`` as consumer group ``groupId``'s offsets (no-op without ``groupId``).

        Spark calls this for batch ``N`` when it plans batch ``N + 1``; :meth:`latestOffset` records its ``start``
        (the end of the finished batch) too, so a run's last batch is recorded as well.
        """
        self._record_group(from_json(end, self.options))

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
        from coordinator import open_store
        from txnsource.planning import TxnInputPartition, read_partition
        from txnsource.schema import spark_arrow_schema

        if not isinstance(partition, TxnInputPartition):
            return iter(())
        store = open_store(self.options.path, self.options.store)
        return read_partition(store, partition, spark_arrow_schema(self.schema))


def stream_ranges(coord: TransactionCoordinator, opts: ReadOptions, start: Mapping[str, Any], end: Mapping[str, Any]
                  ) -> dict[tuple[str, int], tuple[int, int]]:
    """``[start, end)`` per partition of the micro-batch from offset ``start`` to offset ``end`` (Spark's JSON
    offsets, parsed), the non-empty ones only: what :meth:`TxnLogStreamReader.partitions` reads, and the native
    micro-batch read (:mod:`txnsource.nativestream`) too. A partition missing from ``start`` (added later, or of a
    topic new to ``subscribePattern``) starts at its log start.

    Raises:
        OffsetOutOfRangeError: ``start`` lies below a partition's log start and ``failOnDataLoss`` is true.
        InvalidOptionError: an offset is malformed or names a topic the query does not read.
    """
    from coordinator import parallel
    from coordinator.errors import OffsetOutOfRangeError

    lo, hi = from_json(start, opts), from_json(end, opts)
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    logs = {tp: coord.partition(*tp) for tp in hi}
    parallel.pmap(lambda plog: plog.refresh(), list(logs.values()))  # one round trip, not one per partition
    for tp, e in hi.items():
        plog = logs[tp]
        s = lo.get(tp, plog.start_offset)
        if s > e and not opts.fail_on_data_loss:
            s = plog.start_offset  # the offsets went back (a re-created topic): latestOffset restarted it
        if s < plog.start_offset:
            if opts.fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    f"the query's offset {s} of {tp[0]}/{tp[1]} is below the log start {plog.start_offset}: "
                    "retention removed those records. Set option failOnDataLoss=false to skip to the log start"
                )
            s = plog.start_offset
        if e > s:
            ranges[tp] = (s, e)
    return ranges


def make_stream_reader(options: Mapping[str, str], schema: StructType) -> TxnLogStreamReader:
    """The stream reader for Spark's ``options`` and ``schema``.

    Raises:
        InvalidOptionError: a bad option, ``endingOffsets``, ``isolationLevel`` = ``read_uncommitted``, or
            ``readPath`` = ``native`` (the stream reader is created when the query starts; with
            :func:`txnsource.enable_native`, ``auto`` reads micro-batches natively where it can).
        TopicNotFoundError: ``subscribePattern`` matches no topic.
    """
    from txnsource.batch import refuse_native

    opts = parse_options(options, streaming=True)
    refuse_native(opts)
    return TxnLogStreamReader(resolve_pattern(opts), schema)
