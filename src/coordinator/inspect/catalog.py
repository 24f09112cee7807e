"""Read-only views of topics, partitions, segments, consumer groups and lag, and record dumps (see
:mod:`coordinator.inspect`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import GroupNotFoundError, InvalidOptionError, TopicNotFoundError, TxnLogError
from coordinator.inspect.common import ProgressFn, coord_for, utc
from coordinator.partition import PartitionLog
from coordinator.reader import output_schema, read_slices, uncommitted_paths
from coordinator.state import CoordinatorState
from coordinator.store import Store
from coordinator.topics import get_topic, list_topics

__all__ = ["describe_topic", "dump", "groups", "iter_dump", "lag", "partition_info", "partitions", "segments",
           "topics"]


# -- topics and partitions ----------------------------------------------------------------------------------------


def partition_info(
    coord: TransactionCoordinator, state: CoordinatorState, topic: str, partition: int, *, staged: bool = False
) -> dict[str, Any]:
    """One partition: ``start_offset``/``end_offset``/``records`` (from the log's state), and from its index
    ``segments``, ``bytes`` and ``last_commit`` (with ``staged``, also ``staged_files``: segment files no commit
    names: open, aborted or refused transactions, garbage until GC). When the index cannot be read, ``damaged``
    holds the error (naming the file) and those figures are None."""
    pm = state.partition(topic, partition)
    info: dict[str, Any] = {
        "topic": topic, "partition": partition, "start_offset": pm.start, "end_offset": pm.end,
        "records": pm.end - pm.start, "segments": None, "bytes": None, "last_commit": None, "damaged": None,
    }
    if staged:
        info["staged_files"] = None
    try:
        plog = coord.partition(topic, partition)
        plog.refresh()
        info["segments"] = len(plog.segments)
        info["bytes"] = sum(s.size for s in plog.segments)
        info["last_commit"] = utc(max((r[1] for s in plog.segments for r in s.run_list()), default=None))
        if staged:
            info["staged_files"] = len(uncommitted_paths(coord.store, plog))
    except TxnLogError as exc:
        info["damaged"] = str(exc)
    return info


def _damage(parts: list[dict[str, Any]]) -> str | None:
    bad = [f"partition {p['partition']}: {p['damaged']}" for p in parts if p["damaged"]]
    return "; ".join(bad) if bad else None


def _total(parts: list[dict[str, Any]], key: str) -> int | None:
    values = [p[key] for p in parts]
    return None if any(v is None for v in values) else sum(values)


def describe_topic(store: Store, name: str, *, coordinator: TransactionCoordinator | None = None) -> dict[str, Any]:
    """A topic's definition (``fields``, ``config``, ``created``, ``version``) and per-partition figures
    (``partition_info``, see :func:`partition_info`), plus totals (None where a partition is damaged) and
    ``damaged`` (the damaged partitions' errors, or None).

    Raises:
        TopicNotFoundError: no such topic. CorruptLogError: its definition cannot be decoded.
    """
    meta = get_topic(store, name)
    coord = coord_for(store, coordinator)
    state = coord.log.refresh()
    parts = [partition_info(coord, state, name, p, staged=True) for p in range(meta.partitions)]
    return {
        "name": meta.name,
        "partitions": meta.partitions,
        "version": meta.version,
        "created": utc(meta.created_ms),
        "fields": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in meta.schema],
        "config": dict(meta.config),
        "records": sum(p["records"] for p in parts),
        "segments": _total(parts, "segments"),
        "bytes": _total(parts, "bytes"),
        "damaged": _damage(parts),
        "partition_info": parts,
    }


def topics(store: Store, *, coordinator: TransactionCoordinator | None = None) -> list[dict[str, Any]]:
    """One row per topic: ``name``, ``partitions``, ``records``, ``segments``, ``bytes``, ``created``,
    ``damaged`` (None, or what could not be read: a damaged definition or partitions; the row's figures that
    depend on it are None, and the other topics are listed as usual)."""
    coord = coord_for(store, coordinator)
    state = coord.log.refresh()
    out: list[dict[str, Any]] = []
    for name in list_topics(store):
        try:
            meta = get_topic(store, name)
        except TxnLogError as exc:
            out.append({"name": name, "partitions": None, "records": None, "segments": None, "bytes": None,
                        "created": None, "damaged": str(exc)})
            continue
        parts = [partition_info(coord, state, name, p) for p in range(meta.partitions)]
        out.append({
            "name": name, "partitions": meta.partitions, "records": sum(p["records"] for p in parts),
            "segments": _total(parts, "segments"), "bytes": _total(parts, "bytes"), "created": utc(meta.created_ms),
            "damaged": _damage(parts),
        })
    return out


def partitions(store: Store, topic: str | None = None, *, coordinator: TransactionCoordinator | None = None,
               ) -> list[dict[str, Any]]:
    """Every partition of ``topic`` (or of every topic), store-wide: see :func:`partition_info` (staged files
    included). A topic whose definition is damaged is skipped.

    Raises:
        TopicNotFoundError: ``topic`` is given and does not exist.
    """
    coord = coord_for(store, coordinator)
    state = coord.log.refresh()
    names = [topic] if topic is not None else list_topics(store)
    rows = []
    for name in names:
        try:
            meta = get_topic(store, name)
        except TopicNotFoundError:
            raise
        except TxnLogError:
            continue
        rows += [partition_info(coord, state, name, p, staged=True) for p in range(meta.partitions)]
    return rows


def segments(store: Store, topic: str | None = None, *, coordinator: TransactionCoordinator | None = None,
             ) -> list[dict[str, Any]]:
    """One row per live segment (what readers read; compaction candidates are the small ones): ``topic``,
    ``partition``, ``path``, ``base_offset``, ``end_offset``, ``records``, ``bytes``, ``transactions`` (commits
    it holds), ``first_commit``, ``last_commit``, ``compacted``. Damaged partitions are skipped.

    Raises:
        TopicNotFoundError: ``topic`` is given and does not exist.
    """
    coord = coord_for(store, coordinator)
    coord.log.refresh()
    names = [topic] if topic is not None else list_topics(store)
    rows = []
    for name in names:
        try:
            n = get_topic(store, name).partitions
        except TopicNotFoundError:
            raise
        except TxnLogError:
            continue
        for p in range(n):
            try:
                plog = coord.partition(name, p)
                plog.refresh()
            except TxnLogError:
                continue
            for s in plog.segments:
                runs = s.run_list()
                rows.append({"topic": name, "partition": p, "path": s.path, "base_offset": s.base_offset,
                             "end_offset": s.end_offset, "records": s.rows, "bytes": s.size,
                             "transactions": len(runs), "first_commit": utc(runs[0][1]),
                             "last_commit": utc(runs[-1][1]), "compacted": bool(s.runs)})
    return rows


# -- groups -------------------------------------------------------------------------------------------------------


def lag(store: Store, group: str | None = None, *, coordinator: TransactionCoordinator | None = None,
        ) -> list[dict[str, Any]]:
    """One row per (group, topic, partition) with committed offsets: ``committed`` (next offset to consume),
    ``end_offset``, ``lag`` (records between them). Every partition of a topic the group committed for is listed
    (an uncommitted partition counts from its start offset, ``committed`` None). ``out_of_range`` flags a committed
    offset outside the partition's ``[start, end]`` (``"below start S"`` after retention: ``lag`` counts from the
    start; ``"beyond end E"``: ``lag`` is None); a consumer of the group resets it by its ``auto_offset_reset``.
    Offsets come from the log's state: no partition is opened.

    Raises:
        GroupNotFoundError: ``group`` is given and has no committed offsets.
    """
    coord = coord_for(store, coordinator)
    state = coord.log.refresh()
    if group is not None and not state.group_offsets(group):
        raise GroupNotFoundError(f"consumer group {group!r} has no committed offsets in {store.url}")
    names = sorted(g for g in state.groups if state.group_offsets(g)) if group is None else [group]
    rows = []
    for g in names:
        offsets = state.group_offsets(g)
        for topic in sorted(offsets):
            try:
                n = get_topic(store, topic).partitions
            except TopicNotFoundError:
                n = 0
            for p in sorted(set(range(n)) | set(offsets[topic])):
                committed = offsets[topic].get(p)
                flag = None
                if p < n:
                    pm = state.partition(topic, p)
                    end: int | None = pm.end
                    base: int | None = committed if committed is not None else pm.start
                    if committed is not None and committed < pm.start:
                        flag, base = f"below start {pm.start}", pm.start
                    elif committed is not None and committed > pm.end:
                        flag, base = f"beyond end {pm.end}", None
                else:
                    end = base = None
                rows.append({"group": g, "topic": topic, "partition": p, "committed": committed,
                             "end_offset": end, "lag": None if end is None or base is None else max(0, end - base),
                             "out_of_range": flag})
    return rows


def groups(store: Store, *, coordinator: TransactionCoordinator | None = None) -> list[dict[str, Any]]:
    """One row per consumer group: ``topics``, ``partitions`` with committed offsets, total ``lag``."""
    out: dict[str, dict[str, Any]] = {}
    for r in lag(store, coordinator=coordinator):
        g = out.setdefault(r["group"], {"group": r["group"], "topics": [], "partitions": 0, "lag": 0})
        if r["topic"] not in g["topics"]:
            g["topics"].append(r["topic"])
        g["partitions"] += r["committed"] is not None
        g["lag"] += r["lag"] or 0
    return list(out.values())


# -- dump ---------------------------------------------------------------------------------------------------------


def iter_dump(
    store: Store, topic: str, *, partition: int | None = None, start: int | None = None, end: int | None = None,
    limit: int | None = None, progress: ProgressFn | None = None, total: Callable[[int], None] | None = None,
    coordinator: TransactionCoordinator | None = None,
) -> Iterator[pa.RecordBatch]:
    """Committed records of ``topic`` (one partition, or all in partition order) at offsets ``[start, end)``
    (clamped to each partition's range), at most ``limit`` rows, with ``_partition``, ``_offset`` and
    ``_timestamp`` columns, one segment slice at a time (memory stays bounded by one segment). ``total`` is told
    how many records will be read, ``progress`` is called with the records of each batch read.

    Raises:
        TopicNotFoundError: no such topic. InvalidOptionError: bad partition, offsets or limit.
        CorruptLogError: a segment is missing or damaged.
    """
    meta = get_topic(store, topic)
    if partition is not None and not 0 <= partition < meta.partitions:
        raise InvalidOptionError(f"topic {topic!r} has no partition {partition} (it has {meta.partitions})")
    for name, v in (("--from", start), ("--to", end), ("--limit", limit)):
        if v is not None and v < 0:
            raise InvalidOptionError(f"{name} must not be negative, got {v}")
    coord = coord_for(store, coordinator)
    coord.log.refresh()
    schema = output_schema(meta.schema)
    columns = [n for n in schema.names if n != "_topic"]
    plan = []
    left = limit
    for p in ([partition] if partition is not None else range(meta.partitions)):
        plog: PartitionLog = coord.partition(topic, p)
        plog.refresh()
        lo = max(plog.start_offset, start or 0)
        hi = min(plog.end_offset, plog.end_offset if end is None else end)
        if left is not None:
            hi = min(hi, lo + left)
        if hi <= lo:
            continue
        plan.append((plog, plog.slices(lo, hi), hi - lo))
        if left is not None:
            left -= hi - lo
    if total is not None:
        total(sum(n for _, _, n in plan))
    for plog, slices, _n in plan:
        for sl in slices:
            for batch in read_slices(store, topic, plog.partition, [sl], schema, columns=columns):
                yield batch
                if progress is not None:
                    progress(batch.num_rows)


def dump(store: Store, topic: str, **kw: Any) -> pa.Table:
    """:func:`iter_dump` gathered into one table (same arguments and errors)."""
    meta = get_topic(store, topic)
    schema = output_schema(meta.schema)
    out_schema = pa.schema([schema.field(c) for c in schema.names if c != "_topic"])
    return pa.Table.from_batches(list(iter_dump(store, topic, **kw)), schema=out_schema)
