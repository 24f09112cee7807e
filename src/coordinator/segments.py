"""Segment files: Parquet (default) or Arrow IPC, named uniquely, written with plain puts, invisible until a
commit marker names them. Each reference carries the file's size and CRC-32 so readers and ``verify`` can tell a
damaged file from a good one.
"""

from __future__ import annotations

import io
import zlib

import pyarrow as pa
import pyarrow.parquet as pq

from coordinator import faults
from coordinator.errors import CorruptLogError, InvalidOptionError
from coordinator.layout import data_path
from coordinator.records import SegmentRef
from coordinator.store import Store

FORMATS = ("parquet", "arrow")


def encode_table(table: pa.Table, fmt: str = "parquet", compression: str = "snappy") -> bytes:
    """Serialise ``table`` as a segment file.

    Raises:
        InvalidOptionError: unknown format.
    """
    sink = io.BytesIO()
    if fmt == "parquet":
        pq.write_table(table, sink, compression=compression, row_group_size=max(1, min(table.num_rows, 1 << 20)))
    elif fmt == "arrow":
        with pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
    else:
        raise InvalidOptionError(f"segment format {fmt!r} is not one of {FORMATS}")
    return sink.getvalue()


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
    """Decode a segment file, checking its size and checksum when they are known.

    Raises:
        CorruptLogError: naming ``path`` when the file is truncated, damaged or undecodable.
    """
    if size is not None and len(data) != size:
        raise CorruptLogError(f"segment {path} is truncated or damaged: {len(data)} bytes, expected {size}")
    if crc32 is not None and zlib.crc32(data) != crc32:
        raise CorruptLogError(f"segment {path} fails its checksum")
    try:
        if path.endswith(".arrow"):
            return pa.ipc.open_file(pa.py_buffer(data)).read_all()
        return pq.read_table(pa.py_buffer(data))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptLogError(f"segment {path} cannot be decoded: {exc}") from exc


def read_segment(store: Store, path: str, *, size: int | None = None, crc32: int | None = None) -> pa.Table:
    """Read and decode a segment.

    Raises:
        CorruptLogError: the file is missing, truncated, damaged or undecodable.
    """
    try:
        data = store.get(path)
    except FileNotFoundError:
        raise CorruptLogError(f"segment {path} named by a commit marker is missing") from None
    return decode_segment(data, path, size=size, crc32=crc32)
