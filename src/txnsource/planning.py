"""Planning reads into Spark input partitions, and reading one input partition.

A read is planned from offset ranges ``[start, end)`` per topic partition, all taken from one
transaction-consistent :class:`coordinator.Snapshot`. Each range becomes segment slices
(:meth:`coordinator.PartitionLog.slices`), and a partition's slices are grouped, in offset order, into
:class:`TxnInputPartition`\\ s of about ``target_bytes`` each, so one big topic partition is read by several tasks.
An input partition carries plain data only (paths, offsets, sizes, checksums, the topic's Arrow schema as bytes):
reading it never consults the logs again, so the same partition always yields the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from coordinator.partition import IndexedSegment
from coordinator.reader import staged_file
from txnsource.pushdown import Intervals, Pushdown, intersect, normalize

if TYPE_CHECKING:
    import pyarrow as pa

    from coordinator.coordinator import TransactionCoordinator
    from coordinator.partition import SegmentSlice
    from coordinator.store import Store
    from coordinator.topics import TopicMeta

#: (path, base_offset, rows, size, crc32, ts, commit_seq, txn, skip, slice_rows, runs, ptime): one segment slice,
#: plainly; ``runs`` are a compacted segment's (first offset, commit ts, commit_seq) per merged transaction,
#: ``ptime`` the producer time of every row of a file without a producer-time column (or None).
SliceSpec = tuple[str, int, int, int, int, int, int, str, int, int, tuple[tuple[int, int, int], ...], int | None]
#: The smallest input partition the ``parallelism`` rule makes (Spark's ``spark.sql.files.openCostInBytes``).
MIN_SPLIT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class TxnInputPartition(InputPartition):
    """One Spark task's share of a read: slices of one topic partition, and/or its staged (uncommitted) files.

    Attributes:
        topic, partition: where the records live.
        schema_ipc: the topic's Arrow schema, IPC-serialised.
        slices: committed segment slices, in offset order.
        staged: paths of staged files read as uncommitted records (``read_uncommitted`` only).
        offsets: when set, only rows whose offset lies in these intervals are kept (pushed ``_offset IN``).
    """

    topic: str
    partition: int
    schema_ipc: bytes
    slices: tuple[SliceSpec, ...] = ()
    staged: tuple[str, ...] = ()
    offsets: Intervals | None = None

    def __repr__(self) -> str:
        return (f"TxnInputPartition({self.topic}/{self.partition}, slices={len(self.slices)}, "
                f"staged={len(self.staged)})")


def _spec(sl: SegmentSlice) -> SliceSpec:
    s = sl.segment
    return (s.path, s.base_offset, s.rows, s.size, s.crc32, s.ts, s.commit_seq, s.txn, sl.skip, sl.rows,
            tuple(tuple(r) for r in s.runs), s.ptime)  # type: ignore[misc]


def _time_allowed(seg: IndexedSegment, push: Pushdown) -> Intervals:
    """The offsets of ``seg`` whose commit time the pushed ``_timestamp`` constraint allows."""
    runs = seg.run_list()
    bounds = [r[0] for r in runs[1:]] + [seg.end_offset]
    return normalize((first, end) for (first, ts, _seq), end in zip(runs, bounds, strict=True)
                     if push.allows_timestamp_ms(ts))


def _est_bytes(spec: SliceSpec) -> float:
    rows, size, n = spec[2], spec[3], spec[9]
    return size * n / rows if rows else 0.0


def plan_partitions(
    coord: TransactionCoordinator,
    metas: Mapping[str, TopicMeta],
    ranges: Mapping[tuple[str, int], tuple[int, int]],
    push: Pushdown,
    *,
    target_bytes: int,
    min_partitions: int | None = None,
    staged: Mapping[tuple[str, int], Sequence[str]] | None = None,
    max_rows: int | None = None,
    parallelism: int | None = None,
) -> list[TxnInputPartition]:
    """Input partitions for the offset ranges (and staged files) given, after pushdown.

    Slices of one topic partition are grouped into input partitions of about ``target_bytes`` each and, with
    ``max_rows`` (``maxRecordsPerPartition``), of at most ``max_rows`` rows each (a segment is then split by row
    range). The target shrinks to spread the read over ``min_partitions`` partitions, and, as Spark's file
    sources do, over ``parallelism`` tasks (not below :data:`MIN_SPLIT_BYTES`). A segment larger than the target
    is cut at row-group boundaries (:data:`coordinator.segments.ROW_GROUP_ROWS`), so one big segment is read by
    several tasks that each decode only their own row groups.

    Raises:
        OffsetOutOfRangeError: a range lies outside its partition's log (a caller bug: ranges come from a
            snapshot).
    """
    plans: dict[tuple[str, int], list[SliceSpec]] = {}
    allowed: dict[tuple[str, int], Intervals] = {}
    for (topic, p), (start, end) in sorted(ranges.items()):
        if not (push.allows_topic(topic) and push.allows_partition(p)) or end <= start:
            continue
        plog = coord.partition(topic, p)
        if plog.end_offset < end:
            plog.refresh()
        wanted = push.offset_ranges(start, end)
        if not wanted:
            continue
        # one covering slice per segment: a segment is read once even when IN picks several offsets from it
        lo, hi = wanted[0][0], wanted[-1][1]
        slices = plog.slices(lo, hi)
        if push.timestamps is not None:
            by_time = normalize(iv for sl in slices for iv in _time_allowed(sl.segment, push))
            wanted = intersect(wanted, by_time)
        specs = [_spec(sl) for sl in slices if _touches(_spec(sl), wanted)]
        if max_rows is not None:
            specs = _split(specs, max_rows)
        if specs:
            plans[(topic, p)] = specs
            allowed[(topic, p)] = wanted
    total = sum(_est_bytes(s) for specs in plans.values() for s in specs)
    target = float(target_bytes)
    if min_partitions:
        target = min(target, max(1.0, math.ceil(total / min_partitions)))
    if parallelism:
        target = min(target, max(float(MIN_SPLIT_BYTES), math.ceil(total / parallelism)))
    plans = {tp: [s for s in _split_big(specs, target) if _touches(s, allowed[tp])] for tp, specs in plans.items()}
    schemas = {t: m.schema.serialize().to_pybytes() for t, m in metas.items()}
    out: list[TxnInputPartition] = []
    for (topic, p), specs in plans.items():
        covered = ((specs[0][1] + specs[0][8], specs[-1][1] + specs[-1][8] + specs[-1][9]),)
        keep = None if allowed[(topic, p)] == covered else allowed[(topic, p)]
        group: list[SliceSpec] = []
        size, rows = 0.0, 0
        for s in specs:
            if group and (size + _est_bytes(s) > target or (max_rows is not None and rows + s[9] > max_rows)):
                out.append(TxnInputPartition(topic, p, schemas[topic], tuple(group), (), keep))
                group, size, rows = [], 0.0, 0
            group.append(s)
            size += _est_bytes(s)
            rows += s[9]
        out.append(TxnInputPartition(topic, p, schemas[topic], tuple(group), (), keep))
    if staged and not push.excludes_uncommitted:
        for (topic, p), paths in sorted(staged.items()):
            if paths and push.allows_topic(topic) and push.allows_partition(p):
                out.append(TxnInputPartition(topic, p, schemas[topic], (), tuple(paths), None))
    return out


def _split_big(specs: Sequence[SliceSpec], target: float) -> list[SliceSpec]:
    """``specs`` with every slice estimated above ``target`` bytes cut into pieces of a whole number of row groups
    (file rows ``k * ROW_GROUP_ROWS``) of about ``target`` bytes each; a slice within one row group stays whole."""
    from coordinator.segments import ROW_GROUP_ROWS

    out: list[SliceSpec] = []
    for spec in specs:
        rows, size, skip, n = spec[2], spec[3], spec[8], spec[9]
        if _est_bytes(spec) <= target or n <= ROW_GROUP_ROWS:
            out.append(spec)
            continue
        groups = max(1, round(target * rows / size / ROW_GROUP_ROWS))
        pos, end = skip, skip + n
        while pos < end:
            cut = min(end, (pos // ROW_GROUP_ROWS + groups) * ROW_GROUP_ROWS)
            out.append((*spec[:8], pos, cut - pos, *spec[10:]))
            pos = cut
    return out


def _split(specs: Sequence[SliceSpec], max_rows: int) -> list[SliceSpec]:
    """``specs`` cut at every ``max_rows``-th row of the partition's range (a segment may be cut several times), so
    groups of at most ``max_rows`` rows fill up across segment boundaries."""
    out: list[SliceSpec] = []
    acc = 0
    for spec in specs:
        skip, n = spec[8], spec[9]
        while n > 0:
            take = min(max_rows - acc % max_rows, n)
            out.append((*spec[:8], skip, take, *spec[10:]))
            skip, n, acc = skip + take, n - take, acc + take
    return out


def _touches(spec: SliceSpec, ivs: Intervals) -> bool:
    first = spec[1] + spec[8]
    last = first + spec[9]
    return any(lo < last and first < hi for lo, hi in ivs)


def list_data(store: Store, topic: str, partitions: int) -> dict[tuple[str, int], list[str]]:
    """Paths of every file in each partition's data folder (listed before the snapshot is taken)."""
    from coordinator.layout import data_dir

    return {(topic, p): [f"{data_dir(topic, p)}/{n}" for n in store.list(data_dir(topic, p))]
            for p in range(partitions)}


def staged_paths(coord: TransactionCoordinator, topic: str, partition: int, listed: Sequence[str],
                 seq: int) -> list[str]:
    """Of the files ``listed`` in a partition's data folder, those no transaction committed at or before log
    entry ``seq`` published: staged files of open, aborted or undecided transactions (and of commits after the
    snapshot). Segments replaced by compaction or expired by retention are not staged data, nor is any file that is
    not a transaction's (a compaction's merged output, published or not: :func:`coordinator.reader.staged_file`)."""
    plog = coord.partition(topic, partition)
    published = {s.path for s in plog.segments if s.runs or s.commit_seq <= seq} | set(plog.retired)
    return [path for path in listed if path not in published and staged_file(path)]


def read_partition(store: Store, part: TxnInputPartition, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The records of one input partition as batches of exactly ``target`` (the Arrow form of Spark's schema).

    Only the columns ``target`` names are decoded (a user-given schema is a projection), and only the row groups
    holding the slices' rows.

    Raises:
        CorruptLogError: a committed segment is missing, truncated or fails its checksum.
        SchemaMismatchError: the data cannot be shaped to ``target``.
    """
    import pyarrow as pa

    from coordinator.partition import SegmentSlice
    from coordinator.reader import output_schema, read_slices, read_staged
    from coordinator.segments import HEADERS
    from txnsource.pushdown import offset_mask
    from txnsource.schema import conform_batch

    schema = output_schema(pa.ipc.read_schema(pa.py_buffer(part.schema_ipc)), headers=HEADERS in target.names)
    wanted = set(target.names) | ({"_offset"} if part.offsets is not None else set())
    columns = [n for n in schema.names if n in wanted]
    slices = [SegmentSlice(IndexedSegment(*s[:8], runs=s[10], ptime=s[11]), s[8], s[9]) for s in part.slices]
    for batch in read_slices(store, part.topic, part.partition, slices, schema, columns=columns):
        if part.offsets is not None:
            batch = batch.filter(pa.array(offset_mask(batch.column("_offset").to_numpy(), part.offsets)))
        if batch.num_rows:
            yield conform_batch(batch, target)
    if part.staged:
        projected = pa.schema([schema.field(n) for n in columns])
        for batch in read_staged(store, part.topic, part.partition, part.staged, projected):
            yield conform_batch(batch, target)
