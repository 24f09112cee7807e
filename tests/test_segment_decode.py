"""Decoding segment files one row group at a time (:func:`coordinator.segments.iter_rows`): the same rows as a whole
decode, only the row groups holding them, and a damaged file refused before any row is handed out."""

from __future__ import annotations

import zlib

import pyarrow as pa
import pytest

from coordinator.errors import CorruptLogError
from coordinator.segments import DECODED, ROW_GROUP_ROWS, decode_rows, encode_table, iter_rows

ROWS = 3 * ROW_GROUP_ROWS + 100


@pytest.fixture(scope="module")
def table() -> pa.Table:
    ids = pa.array(range(ROWS), pa.int64())
    return pa.table({"id": ids, "name": pa.compute.cast(ids, pa.string())})


@pytest.mark.parametrize(("skip", "rows"), [(0, None), (10, ROW_GROUP_ROWS), (ROW_GROUP_ROWS - 1, 2),
                                            (2 * ROW_GROUP_ROWS, ROW_GROUP_ROWS + 100)])
def test_row_groups_in_turn_are_the_rows_asked_for(table: pa.Table, skip: int, rows: int | None) -> None:
    data = encode_table(table)
    DECODED.reset()
    chunks = list(iter_rows(data, "s.parquet", skip, rows, ["id"], size=len(data), crc32=zlib.crc32(data)))
    end = ROWS if rows is None else skip + rows
    groups = (end - 1) // ROW_GROUP_ROWS - skip // ROW_GROUP_ROWS + 1
    assert len(chunks) == DECODED.row_groups == groups
    assert all(c.num_rows <= ROW_GROUP_ROWS and c.column_names == ["id"] for c in chunks)
    assert pa.concat_tables(chunks).column("id").to_pylist() == list(range(skip, end))
    assert pa.concat_tables(chunks).equals(decode_rows(data, "s.parquet", skip, rows, ["id"]))


def test_arrow_segments_and_no_columns(table: pa.Table) -> None:
    data = encode_table(table, "arrow")
    (whole,) = iter_rows(data, "s.arrow", 5, 7, ["name"])
    assert whole.column("name").to_pylist() == [str(i) for i in range(5, 12)]
    (empty,) = iter_rows(encode_table(table), "s.parquet", 5, 7, ["missing"])
    assert (empty.num_rows, empty.num_columns) == (7, 0)


def test_a_damaged_or_short_file_fails_before_the_first_chunk(table: pa.Table) -> None:
    data = encode_table(table)
    with pytest.raises(CorruptLogError, match="checksum"):
        next(iter_rows(data, "s.parquet", crc32=zlib.crc32(data) ^ 1))
    with pytest.raises(CorruptLogError, match="truncated"):
        next(iter_rows(data[:-1], "s.parquet", size=len(data)))
    with pytest.raises(CorruptLogError, match=r"rows \[0, "):
        next(iter_rows(data, "s.parquet", 0, ROWS + 1))
    with pytest.raises(CorruptLogError, match="cannot be decoded"):
        next(iter_rows(b"garbage", "s.parquet"))
