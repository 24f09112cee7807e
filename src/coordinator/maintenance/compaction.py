"""Compaction: merge runs of small live segments into one, published as a ``replace`` decision through the log."""

from __future__ import annotations

import uuid
import zlib

import pyarrow as pa

from coordinator import faults, parallel
from coordinator.clock import store_now_ms
from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import InvalidOptionError, TopicNotFoundError
from coordinator.layout import (
    data_path,
    segment_name,
)
from coordinator.maintenance.common import COMPACTED_PREFIX, DEFAULT_COMPACT_TARGET_BYTES, MaintenanceReport
from coordinator.partition import IndexedSegment
from coordinator.probe import probe_conditional_writes
from coordinator.records import MarkerSegment, ReplaceItem
from coordinator.requests import LayoutRequest
from coordinator.segments import PRODUCER_TS, encode_table, read_segment, stamp
from coordinator.topics import get_topic


def _groups(segs: list[IndexedSegment], target: int, start: int) -> list[list[IndexedSegment]]:
    """Runs of consecutive small segments (at least two) whose merged size stays near ``target``."""
    out: list[list[IndexedSegment]] = []
    cur: list[IndexedSegment] = []
    size = 0
    for s in segs:
        if s.base_offset < start or s.size >= target:
            if len(cur) > 1:
                out.append(cur)
            cur, size = [], 0
            continue
        if size + s.size > target and cur:
            if len(cur) > 1:
                out.append(cur)
            cur, size = [], 0
        cur.append(s)
        size += s.size
    if len(cur) > 1:
        out.append(cur)
    return out


def _rows(coord: TransactionCoordinator, seg: IndexedSegment) -> pa.Table:
    """The rows of ``seg`` as its merged file stores them: with its producer times as a column when its index holds
    the one time of all its rows (a merged file's rows may have several)."""
    table = read_segment(coord.store, seg.path, size=seg.size, crc32=seg.crc32)
    return table if seg.ptime is None or PRODUCER_TS in table.schema.names else stamp(table, seg.ptime)


def _widened(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the columns schema evolution widened (:mod:`coordinator.evolution`) cast to the topic's type,
    so segments from before and after the change merge into one file."""
    from coordinator.evolution import widens

    for i, f in enumerate(table.schema):
        idx = schema.get_field_index(f.name)
        if idx >= 0 and widens(f.type, schema.field(idx).type):
            want = schema.field(idx).type
            table = table.set_column(i, f.with_type(want), table.column(i).cast(want))
    return table


def compact_partition(
    coord: TransactionCoordinator,
    topic: str,
    partition: int,
    *,
    target_bytes: int = DEFAULT_COMPACT_TARGET_BYTES,
    fmt: str = "parquet",
    now: int | None = None,
) -> MaintenanceReport:
    """Merge small segments of one partition. Concurrent commits are fine (they never change the layout of
    existing offsets); a compaction that raced another one or retention is refused, and its merged file is left to
    GC, which deletes it once no replace can publish it (never on an answer that cannot prove it unpublished). A
    merged file is stamped ``staged_at`` on the store's clock (:mod:`coordinator.clock`), as entry times are, before
    it is written; ``now`` overrides that time (ms, tests).

    Raises:
        InvalidOptionError: non-positive target.
        CorruptLogError: a segment to merge fails its checksum (nothing is replaced).
        UnsupportedStoreError: the store does not honour conditional writes (nothing is written).
    """
    if target_bytes <= 0:
        raise InvalidOptionError(f"compaction target size must be positive, got {target_bytes}")
    probe_conditional_writes(coord.store)
    coord.log.refresh()
    plog = coord.partition(topic, partition)
    plog.refresh()
    report = MaintenanceReport(segments_before=len(plog.segments))
    try:
        schema = get_topic(coord.store, topic).schema
    except TopicNotFoundError:  # deleted meanwhile: its segments are merged as they are
        schema = pa.schema([])
    for group in _groups(list(plog.segments), target_bytes, plog.start_offset):
        layout = coord.log.state.partition(topic, partition).layout
        tables = [_widened(t, schema) for t in parallel.pmap(lambda s: _rows(coord, s), group)]
        merged = pa.concat_tables(tables, promote_options="default")  # older segments lack producer times
        data = encode_table(merged, fmt)
        ext = ".parquet" if fmt == "parquet" else ".arrow"
        path = data_path(topic, partition, segment_name(f"{COMPACTED_PREFIX}{uuid.uuid4().hex}", "merged") + ext)
        staged_at = store_now_ms(coord.store) if now is None else now
        coord.store.put(path, data)
        faults.point("maintenance.compaction.staged")
        item = ReplaceItem("", topic=topic, partition=partition, layout=layout, base=group[0].base_offset,
                           end=group[-1].end_offset, replaces=tuple(s.path for s in group),
                           segment=MarkerSegment(path, merged.num_rows, len(data), zlib.crc32(data)),
                           runs=tuple(r for s in group for r in s.run_list()), staged_at=staged_at)
        out = coord.log.submit(LayoutRequest(f"r-{uuid.uuid4().hex}", item=item))
        if out.status != "done":
            # The merged file stays: an answer other than "done" does not prove the replace was never published
            # (an entry created before a pause may have published it), and GC deletes an unpublished merged file
            # only once no replace can publish it any more (MAX_PUBLISH_MS plus CLOCK_SKEW_MS).
            break  # the layout moved: plan again on the next pass
        report.merged_groups += 1
        plog.refresh()
    plog.refresh()
    report.segments_after = len(plog.segments)
    return report

