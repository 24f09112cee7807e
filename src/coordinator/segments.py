"""Segment files: Parquet (default) or Arrow IPC, named uniquely, written with plain puts, invisible until a
commit marker names them. Each reference carries the file's size and CRC-32 so readers and ``verify`` can tell a
damaged file from a good one.

Parquet segments are written in row groups of :data:`ROW_GROUP_ROWS` rows, dictionary-encoded only where a
dictionary usually pays (string and binary columns): a reader of a few rows decodes only the row groups holding them
(:func:`decode_rows`), and Spark's own Parquet reader reads the files at its native speed. :data:`DECODED` counts
what this process decoded (row groups and rows), so tests and benchmarks can see how much a read touched.

Besides the topic's columns, a segment holds each row's producer time (Kafka's ``CreateTime``) in the column
:data:`PRODUCER_TS` (``timestamp[us, tz=UTC]``), which no topic can declare (names starting with ``_`` are reserved);
:func:`stamp` adds it. Segments written before it existed lack it; readers give such rows a null producer time.
Record headers (Kafka's ``headers``: a list of key/value pairs per row) are kept likewise in the reserved column
:data:`HEADERS` (:data:`HEADERS_TYPE`), added by :func:`with_headers` only when a writer gives headers; rows of
segments without it read as null headers.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from coordinator import faults
from coordinator.errors import CorruptLogError, InvalidOptionError
from coordinator.layout import data_path
from coordinator.records import SegmentRef
from coordinator.store import Store

FORMATS = ("parquet", "arrow")
#: The reserved segment column holding each row's producer time, read back as the metadata column of that name.
PRODUCER_TS = "_producerTimestamp"
PRODUCER_TS_TYPE = pa.timestamp("us", tz="UTC")
#: The reserved segment column holding each row's record headers (Kafka's ``headers``), read back when asked for.
HEADERS = "_headers"
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
#: Rows per Parquet row group of a new segment: the unit a partial read decodes. 256K rows: Spark's Parquet reader
#: reads such files as fast as its own (10M rows: 0.75 s into noop against 0.86 s with 128K-row groups, 0.77 s
#: for Spark's files), and a read of a few rows still decodes at most two row groups. Planning cuts segments at
#: multiples of it, which are row-group boundaries of segments written with 128K rows too.
ROW_GROUP_ROWS = 256 * 1024


@dataclass
class DecodeCounts:
    """What this process decoded from segment files: Parquet row groups (or Arrow IPC record batches), the rows
    they hold, and column chunks (row groups times columns). Counted by :func:`decode_rows`; plain statistics,
    never used for decisions."""

    row_groups: int = 0
    rows: int = 0
    column_chunks: int = 0

    def reset(self) -> None:
        self.row_groups = self.rows = self.column_chunks = 0


DECODED = DecodeCounts()


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """Top-level columns worth dictionary encoding: strings, binaries and dictionary-typed columns. Numbers and
    timestamps are mostly distinct values, where a dictionary costs writing and reading time and saves nothing."""
    kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary,
             pa.types.is_dictionary)
    return [f.name for f in schema if any(k(f.type) for k in kinds) or f.name == PRODUCER_TS]


def now_us() -> int:
    """The local clock in microseconds since the epoch (the default producer time)."""
    return time.time_ns() // 1000


def stamp(table: pa.Table, when: int | pa.Array | pa.ChunkedArray) -> pa.Table:
    """``table`` with its producer-time column :data:`PRODUCER_TS` appended: ``when`` microseconds since the epoch
    for every row (a constant column: one dictionary entry per row group once encoded), or a per-row array of
    times whose nulls are ``now_us()``.

    Raises:
        InvalidOptionError: ``table`` already has the column, or ``when`` is an array of another length or of
            values that are not timestamps.
    """
    if table.schema.get_field_index(PRODUCER_TS) >= 0:
        raise InvalidOptionError(f"rows already carry a {PRODUCER_TS!r} column")
    n = table.num_rows
    if isinstance(when, int):
        col: pa.Array | pa.ChunkedArray = pa.repeat(pa.scalar(when, PRODUCER_TS_TYPE), n)
    else:
        if len(when) != n or not pa.types.is_timestamp(when.type):
            raise InvalidOptionError(f"producer times must be {n} timestamps, got {len(when)} of type {when.type}")
        col = when.cast(PRODUCER_TS_TYPE, safe=False)  # nanoseconds truncate to microseconds
        if col.null_count:
            col = col.fill_null(pa.scalar(now_us(), PRODUCER_TS_TYPE))
    return table.append_column(pa.field(PRODUCER_TS, PRODUCER_TS_TYPE), col)


def headers_array(headers: object, n: int) -> pa.Array | pa.ChunkedArray:
    """``n`` rows of record headers as :data:`HEADERS_TYPE`: ``headers`` is one sequence of ``(key, value)`` pairs
    for every row, or an Arrow array of one list of ``{key, value}`` structs per row (a null row has no headers).

    Raises:
        InvalidOptionError: another kind of value, an array of another length, or values that are not key (string)
            / value (binary) pairs.
    """
    if isinstance(headers, (pa.Array, pa.ChunkedArray)):
        if len(headers) != n:
            raise InvalidOptionError(f"headers must be given for {n} rows, got {len(headers)}")
        try:
            return headers if headers.type.equals(HEADERS_TYPE) else headers.cast(HEADERS_TYPE)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InvalidOptionError(f"headers of type {headers.type} are not a list of (key string, value "
                                     f"binary) pairs: {exc}") from exc
    if isinstance(headers, (list, tuple)):
        try:
            one = [{"key": str(k), "value": v.encode() if isinstance(v, str) else v} for k, v in headers]
            return pa.array([one] * n, HEADERS_TYPE)
        except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InvalidOptionError(f"headers {headers!r} are not (key, value) pairs of a string and bytes") \
                from exc
    raise InvalidOptionError(f"headers must be (key, value) pairs or an Arrow array, not {type(headers).__name__}")


def with_headers(table: pa.Table, headers: object) -> pa.Table:
    """``table`` with its record-header column :data:`HEADERS` appended (see :func:`headers_array`).

    Raises:
        InvalidOptionError: ``table`` already has the column, or as :func:`headers_array`.
    """
    if table.schema.get_field_index(HEADERS) >= 0:
        raise InvalidOptionError(f"rows already carry a {HEADERS!r} column")
    return table.append_column(pa.field(HEADERS, HEADERS_TYPE), headers_array(headers, table.num_rows))


def encode_table(table: pa.Table, fmt: str = "parquet", compression: str = "snappy") -> bytes:
    """Serialise ``table`` as a segment file (Parquet: row groups of :data:`ROW_GROUP_ROWS` rows).

    Raises:
        InvalidOptionError: unknown format.
    """
    # an Arrow buffer, not a Python file: the writer then never takes the interpreter lock back for its writes (ten
    # for a small Parquet file), each a wait behind every other busy thread of the process
    sink = pa.BufferOutputStream()
    if fmt == "parquet":
        pq.write_table(table, sink, compression=compression, row_group_size=ROW_GROUP_ROWS,
                       use_dictionary=_dictionary_columns(table.schema))
    elif fmt == "arrow":
        with pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
    else:
        raise InvalidOptionError(f"segment format {fmt!r} is not one of {FORMATS}")
    return sink.getvalue().to_pybytes()


def stage_segment(
    store: Store,
    topic: str,
    partition: int,
    table: pa.Table,
    name: str,
    *,
    seq: int | None = None,
    fmt: str = "parquet",
) -> SegmentRef:
    """Write ``table`` as segment ``name`` of a partition (a plain put: a retry overwrites the same bytes)."""
    ext = ".parquet" if fmt == "parquet" else ".arrow"
    path = data_path(topic, partition, name + ext)
    data = encode_table(table, fmt)
    faults.point("segment.before")
    store.put(path, data)
    faults.point("segment.after")
    return SegmentRef(topic, partition, path, table.num_rows, len(data), zlib.crc32(data), seq)


def decode_segment(data: bytes, path: str, *, size: int | None = None, crc32: int | None = None) -> pa.Table:
    """Decode a whole segment file, checking its size and checksum when they are known.

    Raises:
        CorruptLogError: naming ``path`` when the file is truncated, damaged or undecodable.
    """
    return decode_rows(data, path, size=size, crc32=crc32)


def _pick(counts: Sequence[int], skip: int, end: int) -> tuple[list[int], int]:
    """The indices of the chunks (row groups, record batches) of ``counts`` rows each that hold rows
    ``[skip, end)``, and the file row where the first of them starts."""
    picked: list[int] = []
    first = pos = 0
    for i, n in enumerate(counts):
        if pos < end and pos + n > skip:
            if not picked:
                first = pos
            picked.append(i)
        pos += n
    return picked, first


def _check_whole(data: bytes, path: str, size: int | None, crc32: int | None) -> None:
    """Raises: CorruptLogError when ``data`` (a whole segment file) has not the known size or checksum."""
    if size is not None and len(data) != size:
        raise CorruptLogError(f"segment {path} is truncated or damaged: {len(data)} bytes, expected {size}")
    if crc32 is not None and zlib.crc32(data) != crc32:
        raise CorruptLogError(f"segment {path} fails its checksum")


def decode_rows(
    data: bytes,
    path: str,
    skip: int = 0,
    rows: int | None = None,
    columns: Sequence[str] | None = None,
    *,
    size: int | None = None,
    crc32: int | None = None,
) -> pa.Table:
    """Decode rows ``[skip, skip + rows)`` of a segment file (all rows from ``skip`` when ``rows`` is None), only
    the Parquet row groups (Arrow record batches) that hold them, and only ``columns`` (all when None; names the
    file lacks are left out; with none left, nothing is decoded and the table has the rows but no columns). The size and
    checksum, when known, are checked over the whole file.

    Raises:
        CorruptLogError: naming ``path`` when the file is truncated, damaged or undecodable, or holds fewer rows
            than asked for.
    """
    _check_whole(data, path, size, crc32)
    try:
        if path.endswith(".arrow"):
            ipc = pa.ipc.open_file(pa.py_buffer(data))
            counts = [ipc.get_batch(i).num_rows for i in range(ipc.num_record_batches)]
            file_schema = ipc.schema
        else:
            pf = pq.ParquetFile(pa.BufferReader(data))
            counts = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
            file_schema = pf.schema_arrow
        total = sum(counts)
        end = total if rows is None else skip + rows
        if end > total or skip < 0:
            raise CorruptLogError(f"segment {path} holds {total} rows, rows [{skip}, {end}) were asked for")
        names = file_schema.names if columns is None else [c for c in columns if c in file_schema.names]
        if not names:  # nothing to decode: the caller only needs the rows to be there
            return pa.table({"_": pa.nulls(end - skip)}).select([])
        picked, first = _pick(counts, skip, end)
        if path.endswith(".arrow"):
            batches = [ipc.get_batch(i).select(names) for i in picked]
            table = pa.Table.from_batches(batches, schema=pa.schema([file_schema.field(n) for n in names]))
        else:
            table = pf.read_row_groups(picked, columns=names)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptLogError(f"segment {path} cannot be decoded: {exc}") from exc
    DECODED.row_groups += len(picked)
    DECODED.rows += sum(counts[i] for i in picked)
    DECODED.column_chunks += len(picked) * len(names)
    if first == skip and table.num_rows == end - skip:
        return table
    return table.slice(skip - first, end - skip)


def iter_rows(
    data: bytes,
    path: str,
    skip: int = 0,
    rows: int | None = None,
    columns: Sequence[str] | None = None,
    *,
    size: int | None = None,
    crc32: int | None = None,
) -> Iterator[pa.Table]:
    """:func:`decode_rows`, one Parquet row group (Arrow record batch) at a time: tables whose rows, in order, are rows
    ``[skip, skip + rows)`` of the file. Decoding is single-threaded, for callers that already run one task per core
    (Spark's) and that consume a chunk while the next one is decoded. The file is checked before the first chunk.

    Raises:
        CorruptLogError: as :func:`decode_rows` (the checks are made before the first chunk is yielded).
    """
    _check_whole(data, path, size, crc32)
    if path.endswith(".arrow"):  # IPC batches are not compressed: decoding them whole costs nothing extra
        yield decode_rows(data, path, skip, rows, columns)
        return
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        counts = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
        names = pf.schema_arrow.names if columns is None else [c for c in columns if c in pf.schema_arrow.names]
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptLogError(f"segment {path} cannot be decoded: {exc}") from exc
    total = sum(counts)
    end = total if rows is None else skip + rows
    if end > total or skip < 0:
        raise CorruptLogError(f"segment {path} holds {total} rows, rows [{skip}, {end}) were asked for")
    if not names:
        yield pa.table({"_": pa.nulls(end - skip)}).select([])
        return
    picked, pos = _pick(counts, skip, end)
    for i in picked:
        try:
            table = pf.read_row_group(i, columns=names, use_threads=False)
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptLogError(f"segment {path} cannot be decoded: {exc}") from exc
        DECODED.row_groups += 1
        DECODED.rows += counts[i]
        DECODED.column_chunks += len(names)
        lo, hi = max(skip, pos) - pos, min(end, pos + counts[i]) - pos
        pos += counts[i]
        yield table if (lo, hi) == (0, table.num_rows) else table.slice(lo, hi - lo)


def _get(store: Store, path: str) -> bytes:
    try:
        return store.get(path)
    except FileNotFoundError:
        raise CorruptLogError(f"segment {path} named by a commit marker is missing") from None


def read_segment(store: Store, path: str, *, size: int | None = None, crc32: int | None = None) -> pa.Table:
    """Read and decode a whole segment.

    Raises:
        CorruptLogError: the file is missing, truncated, damaged or undecodable.
    """
    return decode_rows(_get(store, path), path, size=size, crc32=crc32)


def read_rows(
    store: Store,
    path: str,
    skip: int,
    rows: int,
    columns: Sequence[str] | None = None,
    *,
    size: int | None = None,
    crc32: int | None = None,
) -> pa.Table:
    """Read a segment and decode rows ``[skip, skip + rows)`` of ``columns`` (see :func:`decode_rows`).

    Raises:
        CorruptLogError: the file is missing, truncated, damaged, undecodable or too short.
    """
    return decode_rows(_get(store, path), path, skip, rows, columns, size=size, crc32=crc32)


def stream_rows(
    store: Store,
    path: str,
    skip: int,
    rows: int,
    columns: Sequence[str] | None = None,
    *,
    size: int | None = None,
    crc32: int | None = None,
    data: bytes | None = None,
) -> Iterator[pa.Table]:
    """Read a segment and decode rows ``[skip, skip + rows)`` of ``columns`` one row group at a time (see
    :func:`iter_rows`). ``data``: the segment's bytes already read (used only when they match ``size`` and
    ``crc32``; the segment is read again otherwise).

    Raises:
        CorruptLogError: the file is missing, truncated, damaged, undecodable or too short.
    """
    if data is None or size is None or crc32 is None or len(data) != size or zlib.crc32(data) != crc32:
        data = _get(store, path)
    return iter_rows(data, path, skip, rows, columns, size=size, crc32=crc32)
