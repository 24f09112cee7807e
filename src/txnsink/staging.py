"""Executor side of a write: split Arrow batches over a topic's partitions and stage them as segments.

Shared by the batch and the streaming writer. Every segment gets a unique name built from the Spark task's ids
(partition id, attempt number, task attempt id) and a random part, so retried and speculative attempts of a task
never overwrite each other's files; the driver publishes exactly the segments named by the commit messages it
receives, so a failed or duplicate attempt's files are never visible.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import WriterCommitMessage

from coordinator import InvalidOptionError, SegmentRef, Store, TopicMeta, check_name, conform, stage_segment
from coordinator.layout import segment_name
from coordinator.partitioner import check_key, partition_for
from coordinator.segments import now_us, stamp, with_headers

if TYPE_CHECKING:
    from txnsink.plan import WritePlan

__all__ = ["SEGMENT_TARGET_BYTES", "SinkMessage", "TaskIds", "delete_segments", "even_shares", "gather",
           "stage_batches"]

#: A partition's buffered rows are staged as one segment once they reach this many (Arrow) bytes.
SEGMENT_TARGET_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class TaskIds:
    """Who staged a segment: the Spark task's ids and, in a streaming query, the query id and batch id Spark sets
    as local properties of the micro-batch's jobs (``sql.streaming.queryId``, ``streaming.sql.batchId``)."""

    partition: int
    attempt: int
    task_attempt: int
    query_id: str | None = None
    batch_id: int | None = None

    @classmethod
    def current(cls) -> TaskIds:
        """The ids of the running Spark task (random ones outside a task)."""
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc is None:
            return cls(0, 0, uuid.uuid4().int % (1 << 31))
        query = tc.getLocalProperty("sql.streaming.queryId") or None
        batch = tc.getLocalProperty("streaming.sql.batchId")
        return cls(
            tc.partitionId(),
            tc.attemptNumber(),
            tc.taskAttemptId(),
            query,
            int(batch) if batch is not None and batch.isdigit() else None,
        )


@dataclass(frozen=True)
class SinkMessage(WriterCommitMessage):
    """A task's commit message: the segments it staged under transaction ``txn`` (no credentials, no data)."""

    segments: tuple[SegmentRef, ...]
    task: TaskIds
    rows: int
    txn: str = ""


def gather(messages: Iterable[object | None]) -> tuple[list[SinkMessage], list[SegmentRef]]:
    """The non-empty commit messages and every segment they name, in message order.

    Raises:
        TypeError: a message is not a :class:`SinkMessage` (a writer of another version or source).
    """
    msgs: list[SinkMessage] = []
    segs: list[SegmentRef] = []
    for m in messages:
        if m is None:
            continue
        if not isinstance(m, SinkMessage):
            raise TypeError(f"unexpected commit message of type {type(m).__name__}")
        msgs.append(m)
        segs.extend(m.segments)
    return msgs, segs


def delete_segments(store: Store, segments: Iterable[SegmentRef]) -> int:
    """Delete staged segment files, best effort (GC removes whatever is left). Returns how many were deleted."""
    n = 0
    for s in segments:
        try:
            store.delete(s.path)
            n += 1
        except Exception:  # noqa: BLE001 - best effort: a leftover staged file is invisible garbage
            pass
    return n


def _split_keyed(table: pa.Table, meta: TopicMeta, key: Sequence[str]) -> list[tuple[int, pa.Table]]:
    """Rows grouped by the topic's partitioner over the key columns (as the Python producer groups them), keeping
    each partition's rows in input order."""
    parts = partition_for(table, list(key), meta.partitions, meta)
    return _group(table, np.asarray(parts, dtype=np.int64), meta.partitions)


def _group(table: pa.Table, parts: np.ndarray, partitions: int) -> list[tuple[int, pa.Table]]:
    # a stable sort of 8- or 16-bit integers is a radix sort in numpy (several times faster than of int64)
    small = parts.astype(np.uint8 if partitions <= 1 << 8 else np.uint16 if partitions <= 1 << 16 else np.int64)
    order = np.argsort(small, kind="stable")
    counts = np.bincount(parts, minlength=partitions)
    ordered = table.take(pa.array(order))
    out = []
    pos = 0
    for p in range(partitions):
        c = int(counts[p])
        if c:
            out.append((p, ordered.slice(pos, c)))
        pos += c
    return out


def _split_given(table: pa.Table, meta: TopicMeta, column: pa.ChunkedArray, name: str) -> list[tuple[int, pa.Table]]:
    """Rows placed by the DataFrame's partition column.

    Raises:
        InvalidOptionError: a null, or a partition the topic does not have.
    """
    if column.null_count:
        raise InvalidOptionError(f"column {name!r} holds nulls; every row it routes needs a partition")
    parts = column.to_numpy().astype(np.int64)
    bad = parts[(parts < 0) | (parts >= meta.partitions)]
    if len(bad):
        raise InvalidOptionError(
            f"column {name!r} names partition {int(bad[0])} of topic {meta.name!r}, which has {meta.partitions}"
        )
    return _group(table, parts, meta.partitions)


class _Topics:
    """Topic definitions a task needs, read (or, for a topic the write creates, created) once per task."""

    def __init__(self, store: Store, plan: WritePlan) -> None:
        self.store = store
        self.plan = plan
        self.metas: dict[str, tuple[TopicMeta, dict[str, str]]] = {}
        if plan.meta is not None:
            self.metas[plan.meta.name] = (plan.meta, plan.renames)

    def get(self, name: str) -> tuple[TopicMeta, dict[str, str]]:
        got = self.metas.get(name)
        if got is None:
            from txnsink.plan import ensure_topic
            from txnsink.types import check_compatible

            check_name("topic", name)
            meta = ensure_topic(self.store, self.plan.options, name, self.plan.data)
            renames = check_compatible(self.plan.data, meta)
            if self.plan.options.partition_key:
                check_key(meta, tuple(renames.get(c, c) for c in self.plan.options.partition_key))
            got = self.metas[name] = (meta, renames)
        return got


def _by_topic(batch: pa.Table, plan: WritePlan) -> list[tuple[str, pa.Table]]:
    """The batch's rows per topic (the option's topic, or the rows' topic column)."""
    if plan.meta is not None:
        return [(plan.meta.name, batch)]
    assert plan.topic_column is not None
    col = batch.column(plan.topic_column)
    if col.null_count:
        raise InvalidOptionError(f"column {plan.topic_column!r} holds nulls; every row needs a topic")
    out = []
    for name in pc.unique(col).to_pylist():
        rows = batch.filter(pc.equal(col, name))
        out.append((str(name), rows))
    return out


def even_shares(counts: Sequence[int], rows: int, first: int) -> list[tuple[int, int]]:
    """How to split ``rows`` rows over partitions already holding ``counts`` rows so the counts come out as even as
    they can (the lowest filled first), as ``(partition, rows)`` pairs in partition order from ``first`` (wrapping),
    every pair with rows. Deterministic: an odd row goes to the partitions nearest ``first``."""
    n = len(counts)
    order = [(first + i) % n for i in range(n)]
    have = np.asarray([counts[p] for p in order], dtype=np.int64)
    lo, hi = int(have.min()), int(have.max()) + rows
    while lo < hi:  # the highest level the rows can fill every partition up to
        mid = (lo + hi + 1) // 2
        if int(np.maximum(mid - have, 0).sum()) <= rows:
            lo = mid
        else:
            hi = mid - 1
    give = np.maximum(lo - have, 0)
    left = rows - int(give.sum())
    for i in range(n):
        if left == 0:
            break
        if have[i] + give[i] == lo:
            give[i] += 1
            left -= 1
    return [(order[i], int(give[i])) for i in range(n) if give[i]]


class _Spread:
    """Where an unkeyed task puts one topic's rows: whole segments in turn, from the task's first partition (as
    Kafka's sticky partitioner moves on per batch), and at the end what is left split so that the partitions'
    shares of the task's rows come out even (:func:`even_shares`)."""

    def __init__(self, partitions: int, first: int) -> None:
        self.next = first
        self.counts = [0] * partitions
        self.tables: list[pa.Table] = []
        self.bytes = 0

    def add(self, table: pa.Table, target_bytes: int) -> tuple[int, pa.Table] | None:
        """Buffer ``table``; a whole segment ``(partition, rows)`` to stage once the buffer reaches the target."""
        self.tables.append(table)
        self.bytes += table.nbytes
        if self.bytes < target_bytes:
            return None
        p = self.next
        whole = pa.concat_tables(self.tables)
        self.tables, self.bytes = [], 0
        self.counts[p] += whole.num_rows
        self.next = (p + 1) % len(self.counts)
        return p, whole

    def rest(self) -> list[tuple[int, pa.Table]]:
        """The buffered rows split into contiguous runs evening out the partitions' shares."""
        if not self.tables:
            return []
        whole = pa.concat_tables(self.tables)
        self.tables, self.bytes = [], 0
        out = []
        pos = 0
        for p, n in even_shares(self.counts, whole.num_rows, self.next):
            out.append((p, whole.slice(pos, n)))
            self.counts[p] += n
            pos += n
        return out


def stage_batches(
    store: Store,
    plan: WritePlan,
    batches: Iterator[pa.RecordBatch],
    ids: TaskIds,
    txn: str,
    *,
    target_bytes: int = SEGMENT_TARGET_BYTES,
) -> SinkMessage:
    """Route each batch's rows to their topics and partitions (see :mod:`txnsink.plan`), conform them to each
    topic's schema, stamp them with their producer time (the plan's timestamp column, else the time the batch
    arrived) and stage a segment per (topic, partition) whenever its buffer reaches ``target_bytes``, and at
    the end. Without a key or partition column, a topic's rows are staged a whole segment at a time to its
    partitions in turn, from partition ``(plan.rotation + ids.partition) % partitions``, and the last rows split
    to even out the partitions' shares of the task's rows (so a task of fewer than ``target_bytes`` spreads its
    rows evenly over every partition, a retried attempt of it exactly as the first). File names start with the
    transaction id ``txn`` (so GC can tell from a name whether a commit may still name it).

    If anything fails, the segments this call staged are deleted (best effort) before the error propagates: no
    commit message names them, so nothing can.

    Raises:
        SchemaMismatchError: rows do not fit their topic (e.g. a null in a non-nullable column).
        InvalidOptionError: a row names no topic, an invalid topic or a partition its topic does not have.
        StoreError: the store failed.
    """
    topics = _Topics(store, plan)
    key = plan.options.partition_key
    buffers: dict[tuple[str, int], list[pa.Table]] = {}
    sizes: dict[tuple[str, int], int] = {}
    staged: list[SegmentRef] = []
    rows = 0
    #: without a key or partition column, each topic's rows in turn (:class:`_Spread`)
    spreads: dict[str, _Spread] = {}
    tag = uuid.uuid4().hex[:16]
    prefix = segment_name(txn, f"spark-{ids.partition:05d}-{ids.attempt}-{ids.task_attempt}-{tag}")

    def stage(tp: tuple[str, int], tables: list[pa.Table]) -> None:
        name = f"{prefix}-{len(staged):05d}"
        # one contiguous chunk per column: Parquet encodes it in fewer, larger steps than Spark's many batches
        staged.append(stage_segment(store, tp[0], tp[1], pa.concat_tables(tables).combine_chunks(), name))

    def flush(tp: tuple[str, int]) -> None:
        tables = buffers.pop(tp, [])
        sizes.pop(tp, None)
        if tables:
            stage(tp, tables)

    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            whole = pa.Table.from_batches([batch])
            arrived = now_us()
            for name, part in _by_topic(whole, plan):
                meta, renames = topics.get(name)
                given = part.column(plan.partition_column) if plan.partition_column is not None else None
                data = part.select(plan.data.names)
                if renames:
                    data = data.rename_columns([renames.get(c, c) for c in data.column_names])
                table = stamp(conform(data, meta),
                              arrived if plan.timestamp_column is None else part.column(plan.timestamp_column))
                if plan.headers_column is not None:
                    table = with_headers(table, part.column(plan.headers_column))
                rows += table.num_rows
                if given is not None:
                    pieces = _split_given(table, meta, given, plan.partition_column or "")
                elif key:
                    pieces = _split_keyed(table, meta, [renames.get(c, c) for c in key])
                else:
                    spread = spreads.get(name)
                    if spread is None:
                        first = (plan.rotation + ids.partition) % meta.partitions
                        spread = spreads[name] = _Spread(meta.partitions, first)
                    full = spread.add(table, target_bytes)
                    if full is not None:
                        stage((name, full[0]), [full[1]])
                    continue
                for p, sub in pieces:
                    tp = (name, p)
                    buffers.setdefault(tp, []).append(sub)
                    sizes[tp] = sizes.get(tp, 0) + sub.nbytes
                    if sizes[tp] >= target_bytes:
                        flush(tp)
        for name, spread in sorted(spreads.items()):
            for p, sub in spread.rest():
                stage((name, p), [sub])
        for tp in sorted(buffers):
            flush(tp)
    except BaseException:
        delete_segments(store, staged)
        raise
    return SinkMessage(tuple(staged), ids, rows, txn)
