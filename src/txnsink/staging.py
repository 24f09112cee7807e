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

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from coordinator import SegmentRef, Store, TopicMeta, conform, stage_segment
from coordinator.layout import segment_name
from coordinator.partitioner import partition_for

__all__ = ["SEGMENT_TARGET_BYTES", "SinkMessage", "TaskIds", "delete_segments", "gather", "stage_batches"]

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


def _split_even(table: pa.Table, partitions: int, start: int) -> list[tuple[int, pa.Table]]:
    """Contiguous, near-equal slices of ``table`` for partitions ``start, start+1, ...`` (zero-copy)."""
    n = table.num_rows
    base, rem = divmod(n, partitions)
    out = []
    pos = 0
    for j in range(partitions):
        size = base + (1 if j < rem else 0)
        if size:
            out.append(((start + j) % partitions, table.slice(pos, size)))
        pos += size
    return out


def _split_keyed(table: pa.Table, meta: TopicMeta, key: Sequence[str]) -> list[tuple[int, pa.Table]]:
    """Rows grouped by the topic's partitioner over the key columns (as the Python producer groups them), keeping
    each partition's rows in input order."""
    import numpy as np

    partitions = meta.partitions
    parts = partition_for(table, list(key), partitions, meta)
    order = np.argsort(parts, kind="stable")
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


def stage_batches(
    store: Store,
    meta: TopicMeta,
    key: Sequence[str],
    batches: Iterator[pa.RecordBatch],
    ids: TaskIds,
    txn: str,
    *,
    target_bytes: int = SEGMENT_TARGET_BYTES,
) -> SinkMessage:
    """Conform each batch to the topic's schema, split it over the partitions (by the hash of ``key``, or
    evenly) and stage a segment per partition whenever its buffer reaches ``target_bytes``, and at the end. File
    names start with the transaction id ``txn`` (so GC can tell from a name whether a commit may still name it).

    If anything fails, the segments this call staged are deleted (best effort) before the error propagates.

    Raises:
        SchemaMismatchError: a batch does not fit the topic (e.g. a null in a non-nullable column).
        StoreError: the store failed.
    """
    buffers: dict[int, list[pa.Table]] = {}
    sizes: dict[int, int] = {}
    staged: list[SegmentRef] = []
    rows = 0
    rr = ids.partition % meta.partitions
    tag = uuid.uuid4().hex[:16]
    prefix = segment_name(txn, f"spark-{ids.partition:05d}-{ids.attempt}-{ids.task_attempt}-{tag}")

    def flush(p: int) -> None:
        tables = buffers.pop(p, [])
        sizes.pop(p, None)
        if tables:
            name = f"{prefix}-{len(staged):05d}"
            staged.append(stage_segment(store, meta.name, p, pa.concat_tables(tables), name))

    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = conform(pa.Table.from_batches([batch]), meta)
            rows += table.num_rows
            if key:
                pieces = _split_keyed(table, meta, key)
            else:
                pieces = _split_even(table, meta.partitions, rr)
                rr = (rr + table.num_rows % meta.partitions) % meta.partitions
            for p, sub in pieces:
                buffers.setdefault(p, []).append(sub)
                sizes[p] = sizes.get(p, 0) + sub.nbytes
                if sizes[p] >= target_bytes:
                    flush(p)
        for p in sorted(buffers):
            flush(p)
    except BaseException:
        delete_segments(store, staged)
        raise
    return SinkMessage(tuple(staged), ids, rows, txn)
