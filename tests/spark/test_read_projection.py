"""Reading only what a query uses: row-group reads of segments, a user-given schema as a projection, and a
streaming read of a few records from a big segment that decodes at most two row groups."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import test_read as base  # tests/spark is on sys.path (rootdir-relative test modules)
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import ReadMaxRows
from pyspark.sql.types import StructType

from coordinator import CorruptLogError, Producer, ProducerConfig, create_topic, open_store
from coordinator.segments import DECODED, ROW_GROUP_ROWS, decode_rows, encode_table
from txnsource import make_stream_reader, read_schema
from txnsource.batch import make_batch_reader

SCHEMA, produce, rows, reader = base.SCHEMA, base.produce, base.rows, base.reader
orders, with_open_and_aborted = base.orders, base.with_open_and_aborted

BIG = 1_000_000


def _table(n: int, start: int = 0) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "name": pc.cast(ids, pa.string())}, schema=SCHEMA)


# -- segments -----------------------------------------------------------------------------------------------


#: Rows of the test segments: two full row groups and part of a third.
N = 2 * ROW_GROUP_ROWS + 37_856


def test_segments_have_row_groups_of_the_set_size_and_dictionaries_only_for_strings() -> None:
    data = encode_table(_table(N))
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [ROW_GROUP_ROWS, ROW_GROUP_ROWS,
                                                                               37_856]
    encodings = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i).encodings
                 for i in range(2)}
    assert not any("DICTIONARY" in e for e in encodings["id"])
    assert any("DICTIONARY" in e for e in encodings["name"])


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_decode_rows_decodes_only_the_row_groups_and_columns_asked_for(fmt: str) -> None:
    table = _table(N)
    if fmt == "arrow":  # an IPC file of record batches of 100,000 rows
        table = pa.Table.from_batches(table.combine_chunks().to_batches(max_chunksize=100_000))
    data = encode_table(table, fmt)
    path = f"seg.{fmt}"
    DECODED.reset()
    # rows around the first Parquet row-group boundary, inside one record batch of the IPC file
    first = ROW_GROUP_ROWS - 500
    assert first // 100_000 == (first + 999) // 100_000
    got = decode_rows(data, path, first, 1_000, ["id"])
    assert got.column_names == ["id"] and got.column("id").to_pylist() == list(range(first, first + 1_000))
    per_group = ROW_GROUP_ROWS if fmt == "parquet" else 100_000
    assert DECODED.row_groups == (2 if fmt == "parquet" else 1)
    assert DECODED.rows == DECODED.row_groups * per_group and DECODED.column_chunks == DECODED.row_groups
    DECODED.reset()
    whole = decode_rows(data, path)
    assert whole.equals(table) and DECODED.row_groups == (3 if fmt == "parquet" else -(-N // 100_000))
    assert decode_rows(data, path, N - 1, 1, ["name", "missing"]).to_pylist() == [{"name": str(N - 1)}]
    DECODED.reset()
    empty = decode_rows(data, path, 5, 10, [])
    assert (empty.num_columns, empty.num_rows, DECODED.row_groups) == (0, 10, 0)


def test_decode_rows_refuses_rows_the_file_does_not_hold_and_damaged_files() -> None:
    data = encode_table(_table(10))
    with pytest.raises(CorruptLogError, match=r"seg.parquet holds 10 rows, rows \[5, 15\) were asked for"):
        decode_rows(data, "seg.parquet", 5, 10)
    with pytest.raises(CorruptLogError, match="seg.parquet cannot be decoded"):
        decode_rows(data[: len(data) // 2], "seg.parquet")
    with pytest.raises(CorruptLogError, match="fails its checksum"):
        decode_rows(data, "seg.parquet", crc32=1)


# -- a user-given schema is a projection ---------------------------------------------------------------------


def test_a_user_given_schema_reads_only_its_columns(spark: Any, orders: str) -> None:
    df = spark.read.format("txnlog").schema("_offset long, id long, _partition int").option("topic", "orders") \
        .load(orders)
    assert df.columns == ["_offset", "id", "_partition"]
    assert sorted(df.collect()) == sorted([(i, i, 0) for i in range(10)] + [(i, 100 + i, 1) for i in range(5)])
    # in-process, the reader Spark runs: only the projected topic column is decoded
    options = {"path": orders, "topic": "orders"}
    projected = StructType([f for f in read_schema(options).fields if f.name in ("id", "_offset")])
    batch_reader = make_batch_reader(options, projected)
    DECODED.reset()
    batches = [b for part in batch_reader.partitions() for b in batch_reader.read(part)]
    assert sum(b.num_rows for b in batches) == 15
    assert all(b.schema.names == ["id", "_offset"] for b in batches)
    assert DECODED.row_groups == 3 and DECODED.column_chunks == 3
    only_meta = StructType([f for f in read_schema(options).fields if f.name == "_offset"])
    DECODED.reset()
    meta_reader = make_batch_reader(options, only_meta)
    assert sum(b.num_rows for p in meta_reader.partitions() for b in meta_reader.read(p)) == 15
    assert DECODED.row_groups == 0


def test_a_metadata_only_schema_still_counts_staged_records(spark: Any, with_open_and_aborted: str) -> None:
    df = spark.read.format("txnlog").schema("_partition int, _offset long").option("topic", "orders") \
        .option("isolationLevel", "read_uncommitted").load(with_open_and_aborted)
    got = df.groupBy("_partition").agg(F.count("*"), F.count("_offset")).orderBy("_partition").collect()
    # p0: 10 committed + 3 aborted, p1: 5 + 1 committed + 2 open
    assert [tuple(r) for r in got] == [(0, 13, 10), (1, 8, 6)]


def test_a_user_given_schema_naming_an_unknown_column_fails(spark: Any, orders: str) -> None:
    df = spark.read.format("txnlog").schema("id long, nmae string").option("topic", "orders").load(orders)
    with pytest.raises(AnalysisException, match=r"column 'nmae' of the given schema is in none of the topics read "
                                                r"\('orders'\)"):
        df.collect()


# -- a few records from a big segment ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_segment(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Topic ``big``: one committed segment of 1,000,000 records (ids = offsets)."""
    lake = str(tmp_path_factory.mktemp("big") / "lake")
    create_topic(open_store(lake), "big", SCHEMA, partitions=1)
    producer = Producer(lake, "big-writer", config=ProducerConfig(segment_target_bytes=1 << 30))
    producer.init_transactions()
    with producer.transaction():
        producer.send("big", _table(BIG), partition=0)
    return lake


def test_streaming_1000_records_of_a_1m_record_segment_decodes_at_most_two_row_groups(big_segment: str) -> None:
    segs = open_store(big_segment).list("topics/big/0/data")
    assert len(segs) == 1
    stream = make_stream_reader({"path": big_segment, "topic": "big", "startingOffsets": '{"big": {"0": 654000}}',
                                 "maxRecordsPerTrigger": "1000"}, read_schema({"path": big_segment, "topic": "big"}))
    start = stream.initialOffset()
    end = stream.latestOffset(start, ReadMaxRows(1000))
    assert end == {"big": {"0": 655_000}}
    DECODED.reset()
    batches = [b for part in stream.partitions(start, end) for b in stream.read(part)]
    assert [o for b in batches for o in b.column("_offset").to_pylist()] == list(range(654_000, 655_000))
    assert [i for b in batches for i in b.column("id").to_pylist()] == list(range(654_000, 655_000))
    assert 1 <= DECODED.row_groups <= 2
    assert DECODED.rows <= 2 * ROW_GROUP_ROWS


@pytest.mark.spark
def test_spark_stream_reads_the_same_records_of_the_big_segment(spark: Any, big_segment: str,
                                                                tmp_path: Any) -> None:
    q = (spark.readStream.format("txnlog").option("topic", "big")
         .option("startingOffsets", json.dumps({"big": {"0": BIG - 1_500}})).option("maxRecordsPerTrigger", "1000")
         .load(big_segment).writeStream.format("memory").queryName("big_tail")
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    q.awaitTermination()
    got = spark.sql("select id, _offset from big_tail").collect()
    assert sorted(r.id for r in got) == list(range(BIG - 1_500, BIG))
    assert all(r.id == r._offset for r in got)
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [1000, 500]
