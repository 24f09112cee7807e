"""Reading records: segment slices to Arrow record batches with metadata columns.

Every record read carries ``_topic``, ``_partition``, ``_offset``, ``_timestamp`` (the commit time: Kafka's
``LogAppendTime``) and ``_producerTimestamp`` (the producer's time of the record: Kafka's ``CreateTime``, read from
the segment's :data:`coordinator.segments.PRODUCER_TS` column, or the one time its index gives every row of a file
without that column; null for segments written before it existed). Asked for (:func:`output_schema` with
``headers``), a record also carries ``_headers``, its record headers (null where none were given). A column
schema evolution added (:mod:`coordinator.evolution`) reads as null in segments written before it.
Records of staged segments that no commit marker names (open, aborted or undecided transactions) are returned only
in ``read_uncommitted`` mode, with a null ``_offset`` and ``_timestamp``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from coordinator.errors import InvalidOptionError
from coordinator.evolution import ADDED_IN
from coordinator.layout import data_dir, txn_of_file
from coordinator.partition import PartitionLog, SegmentSlice
from coordinator.records import parse_txn_id
from coordinator.segments import HEADERS, HEADERS_TYPE, PRODUCER_TS, decode_rows, stream_rows
from coordinator.store import Store

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
METADATA_FIELDS: tuple[pa.Field, ...] = (
    pa.field("_topic", pa.string(), nullable=False),
    pa.field("_partition", pa.int32(), nullable=False),
    pa.field("_offset", pa.int64(), nullable=True),
    pa.field("_timestamp", TIMESTAMP_TYPE, nullable=True),
    pa.field(PRODUCER_TS, TIMESTAMP_TYPE, nullable=True),
)
METADATA_NAMES = tuple(f.name for f in METADATA_FIELDS)
#: The record headers column, read only when asked for (Kafka's ``includeHeaders``).
HEADERS_FIELD = pa.field(HEADERS, HEADERS_TYPE, nullable=True)


def check_isolation(level: str) -> str:
    """Raises: InvalidOptionError unless ``level`` is read_committed or read_uncommitted (any case)."""
    norm = str(level).strip().lower()
    if norm not in ISOLATION_LEVELS:
        raise InvalidOptionError(f"isolationLevel {level!r} is not one of {ISOLATION_LEVELS}")
    return norm


def output_schema(topic_schema: pa.Schema, *, headers: bool = False) -> pa.Schema:
    """The topic's columns followed by the metadata columns (and, with ``headers``, :data:`HEADERS_FIELD`)."""
    return pa.schema(list(topic_schema) + list(METADATA_FIELDS) + ([HEADERS_FIELD] if headers else []))


def _slice_timestamps(sl: SegmentSlice) -> pa.Array:
    """Commit time of each row of a slice (a compacted segment holds several transactions' runs)."""
    seg = sl.segment
    lo, hi = sl.first_offset, sl.first_offset + sl.rows
    runs = seg.run_list()
    bounds = [r[0] for r in runs[1:]] + [seg.end_offset]
    counts = [max(0, min(hi, end) - max(lo, start)) for (start, _ts, _s), end in zip(runs, bounds, strict=True)]
    micros = np.repeat(np.array([r[1] * 1000 for r in runs], dtype=np.int64), counts)
    return pa.array(micros, TIMESTAMP_TYPE)


def _assemble(
    table: pa.Table, n: int, schema: pa.Schema, path: str, topic: str, partition: int, first_offset: int | None,
    ts: pa.Array | None, ptime: int | None = None,
) -> pa.Table:
    """The ``n`` rows of ``table`` (decoded data columns) shaped to ``schema``: its data columns cast to the schema's
    types, its metadata columns computed (a null ``_offset`` / ``_timestamp`` when ``first_offset`` / ``ts`` is
    None; ``_producerTimestamp`` ``ptime`` for every row when given, else the segment's column, null when the
    segment has none)."""
    from coordinator.errors import CorruptLogError

    arrays: list[pa.Array | pa.ChunkedArray] = []
    for f in schema:
        if f.name == "_topic":
            arrays.append(pa.repeat(pa.scalar(topic, pa.string()), n))
        elif f.name == "_partition":
            arrays.append(pa.repeat(pa.scalar(partition, pa.int32()), n))
        elif f.name == "_offset":
            arrays.append(pa.nulls(n, pa.int64()) if first_offset is None
                          else pa.array(np.arange(first_offset, first_offset + n, dtype=np.int64)))
        elif f.name == "_timestamp":
            arrays.append(pa.nulls(n, TIMESTAMP_TYPE) if ts is None else ts)
        elif f.name == PRODUCER_TS:
            idx = table.schema.get_field_index(PRODUCER_TS)
            col = pa.repeat(pa.scalar(ptime, TIMESTAMP_TYPE), n) if ptime is not None \
                else pa.nulls(n, TIMESTAMP_TYPE) if idx < 0 else table.column(idx)
            arrays.append(col if col.type.equals(TIMESTAMP_TYPE) else col.cast(TIMESTAMP_TYPE))
        elif f.name == HEADERS:
            idx = table.schema.get_field_index(HEADERS)
            col = pa.nulls(n, HEADERS_TYPE) if idx < 0 else table.column(idx)
            arrays.append(col if col.type.equals(f.type) else col.cast(f.type))
        else:
            idx = table.schema.get_field_index(f.name)
            if idx < 0 and f.metadata and ADDED_IN in f.metadata:  # written before schema evolution added it
                arrays.append(pa.nulls(n, f.type))
                continue
            if idx < 0:
                raise CorruptLogError(f"segment {path} has no column {f.name!r}, which its topic declares")
            col = table.column(idx)
            arrays.append(col if col.type.equals(f.type) else col.cast(f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _stored_names(schema: pa.Schema) -> list[str]:
    """The segment columns to decode for ``schema``: its data columns, and the producer times when projected."""
    return [f.name for f in schema if f.name not in METADATA_NAMES or f.name == PRODUCER_TS]


def read_slices(
    store: Store,
    topic: str,
    partition: int,
    slices: Sequence[SegmentSlice],
    schema: pa.Schema,
    *,
    columns: Sequence[str] | None = None,
    verify: bool = True,
    fetched: Mapping[str, bytes] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``slices`` as batches of ``schema`` (a topic's :func:`output_schema`, or a projection
    of it to ``columns``); ``fetched`` holds segments already read, by path (used when their size and checksum
    match the slice's segment). Only the projected data columns, and only the row groups holding each slice's rows,
    are decoded, one row group per batch (or fewer rows), so a consumer works on one batch while the next is
    decoded; metadata columns are computed only when projected.

    Raises:
        CorruptLogError: a segment is missing, truncated, fails its checksum, or lacks a column or rows.
    """
    out_schema = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    data_names = _stored_names(out_schema)
    for sl in slices:
        seg = sl.segment
        ts = _slice_timestamps(sl) if "_timestamp" in out_schema.names else None
        done = 0
        for table in stream_rows(store, seg.path, sl.skip, sl.rows, data_names, size=seg.size if verify else None,
                                 crc32=seg.crc32 if verify else None,
                                 data=None if fetched is None else fetched.get(seg.path)):
            n = table.num_rows
            yield from _assemble(table, n, out_schema, seg.path, topic, partition, sl.first_offset + done,
                                 None if ts is None else ts.slice(done, n), seg.ptime).to_batches()
            done += n


def read_range(
    store: Store, plog: PartitionLog, start: int, end: int, schema: pa.Schema, **kw: object
) -> Iterator[pa.RecordBatch]:
    """Yield the committed records at offsets ``[start, end)`` of one partition."""
    yield from read_slices(store, plog.topic, plog.partition, plog.slices(start, end), schema, **kw)  # type: ignore[arg-type]


def staged_file(path: str) -> bool:
    """Whether the file at ``path`` can hold records a transaction staged: its name starts with a transaction id
    (a producer's or an application attempt's). A compaction's merged output (``r.<id>~merged``, published or not:
    its rows are committed ones under their offsets) and any file txnlog did not stage never can."""
    txn = txn_of_file(path.rsplit("/", 1)[-1])
    return txn is not None and parse_txn_id(txn) is not None


def uncommitted_paths(store: Store, plog: PartitionLog) -> list[str]:
    """Staged segment files of a partition that no commit marker names (open, aborted or undecided); segments
    replaced by compaction or expired by retention, and files that are not a transaction's (a compaction's merged
    output: see :func:`staged_file`), are not staged data and are left out."""
    published = {s.path for s in plog.segments} | set(plog.retired)
    ddir = data_dir(plog.topic, plog.partition)
    return [path for n in store.list(ddir) if (path := f"{ddir}/{n}") not in published and staged_file(path)]


def read_uncommitted(
    store: Store, plog: PartitionLog, schema: pa.Schema, paths: Sequence[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """Yield the records of a partition's staged, unpublished segments (all of them, or ``paths``)."""
    staged = uncommitted_paths(store, plog) if paths is None else paths
    yield from read_staged(store, plog.topic, plog.partition, staged, schema)


def read_staged(
    store: Store, topic: str, partition: int, paths: Sequence[str], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Yield the records of staged segment files as batches of ``schema`` with a null ``_offset`` and
    ``_timestamp``. A file gone (GC) or unreadable (a crashed writer's) is skipped: uncommitted data carries no
    promise."""
    from coordinator.errors import CorruptLogError

    data_names = _stored_names(schema)
    for path in paths:
        try:
            table = decode_rows(store.get(path), path, columns=data_names)
            shaped = _assemble(table, table.num_rows, schema, path, topic, partition, None, None)
        except (CorruptLogError, FileNotFoundError):
            continue
        yield from shaped.to_batches()
