"""Planning a batch read into input partitions: a big segment is cut at row-group boundaries into balanced input
partitions, each decoding only its own row groups, one batch per row group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from coordinator import Producer, ProducerConfig, create_topic, open_store
from coordinator.segments import DECODED, ROW_GROUP_ROWS
from txnsource import read_schema
from txnsource.batch import make_batch_reader

pytestmark = pytest.mark.spark

GROUPS = 4
ROWS = GROUPS * ROW_GROUP_ROWS


@pytest.fixture(scope="module")
def big_segment(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Topic ``big`` (1 partition): one committed segment of ``GROUPS`` full row groups, ids 0 to ROWS - 1."""
    lake = str(tmp_path_factory.mktemp("planning")) + "/lake"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.float64())])
    create_topic(open_store(lake), "big", schema, partitions=1)
    producer = Producer(lake, "big-writer", config=ProducerConfig(segment_target_bytes=1 << 40))
    producer.init_transactions()
    ids = pa.array(range(ROWS), pa.int64())
    with producer.transaction():
        producer.send("big", pa.table({"id": ids, "v": pa.compute.multiply(ids, 0.5)}), partition=0)
    assert len(open_store(lake).list("topics/big/0/data")) == 1
    return lake


@pytest.fixture(autouse=True)
def one_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans that do not depend on the machine's core count (the ``parallelism`` rule; one test sets its own)."""
    monkeypatch.setattr("os.cpu_count", lambda: 1)


def _plan(lake: str, **extra: str) -> tuple[Any, list[Any]]:
    options = {"path": lake, "topic": "big", **extra}
    reader = make_batch_reader(options, read_schema(options))
    return reader, list(reader.partitions())


def _rows(part: Any) -> list[tuple[int, int]]:
    """(first file row, rows) of each slice of an input partition."""
    return [(s[8], s[9]) for s in part.slices]


@pytest.mark.parametrize("parts", [2, GROUPS])
def test_min_partitions_cut_one_segment_into_balanced_row_group_ranges(big_segment: str, parts: int) -> None:
    reader, planned = _plan(big_segment, minPartitions=str(parts))
    per = ROWS // parts
    assert [_rows(p) for p in planned] == [[(i * per, per)] for i in range(parts)]
    DECODED.reset()
    batches = list(reader.read(planned[-1]))
    assert DECODED.row_groups == GROUPS // parts
    assert [b.num_rows for b in batches] == [ROW_GROUP_ROWS] * (GROUPS // parts)
    offsets = pa.concat_arrays([b.column("_offset") for b in batches]).to_pylist()
    assert offsets == list(range(ROWS - per, ROWS))
    assert pa.concat_arrays([b.column("id") for b in batches]).to_pylist() == offsets


def test_a_range_starting_inside_a_row_group_cuts_at_the_next_boundaries(big_segment: str) -> None:
    start = ROW_GROUP_ROWS // 2
    reader, planned = _plan(big_segment, minPartitions="2", startingOffsets=f'{{"big": {{"0": {start}}}}}')
    assert [_rows(p) for p in planned] == [[(start, ROW_GROUP_ROWS * 2 - start)], [(ROW_GROUP_ROWS * 2, ROWS // 2)]]
    first = list(reader.read(planned[0]))
    assert [b.num_rows for b in first] == [ROW_GROUP_ROWS - start, ROW_GROUP_ROWS]
    assert first[0].column("_offset")[0].as_py() == first[0].column("id")[0].as_py() == start


def test_the_read_spreads_over_the_cores_but_not_below_the_split_floor(big_segment: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setattr("txnsource.planning.MIN_SPLIT_BYTES", 1)
    _, planned = _plan(big_segment)
    assert [_rows(p) for p in planned] == [[(0, ROWS // 2)], [(ROWS // 2, ROWS // 2)]]
    # a big maxPartitionBytes does not keep the read on one core
    _, planned = _plan(big_segment, maxPartitionBytes=str(1 << 40))
    assert len(planned) == 2
    # a read no bigger than the floor stays in one input partition
    data = Path(big_segment) / "topics/big/0/data"
    size = sum(f.stat().st_size for f in data.iterdir())
    monkeypatch.setattr("txnsource.planning.MIN_SPLIT_BYTES", size)
    _, planned = _plan(big_segment)
    assert [_rows(p) for p in planned] == [[(0, ROWS)]]


def test_spark_reads_a_split_segment_exactly(spark: Any, big_segment: str) -> None:
    df = spark.read.format("txnlog").option("topic", "big").option("minPartitions", "4").load(big_segment)
    assert df.rdd.getNumPartitions() == GROUPS
    got = df.selectExpr("count(*) AS n", "count(DISTINCT _offset) AS offsets", "sum(id) AS ids",
                        "sum(cast(_offset = id AS int)) AS same", "min(_offset) AS lo", "max(_offset) AS hi").first()
    assert got.asDict() == {"n": ROWS, "offsets": ROWS, "ids": ROWS * (ROWS - 1) // 2, "same": ROWS, "lo": 0,
                            "hi": ROWS - 1}


def test_pushed_offsets_keep_only_the_pieces_that_hold_them(big_segment: str) -> None:
    from pyspark.sql.datasource import In

    from txnsource.batch import TxnLogPushdownReader
    from txnsource.options import parse_options

    options = {"path": big_segment, "topic": "big", "minPartitions": str(GROUPS)}
    reader = TxnLogPushdownReader(parse_options(options, streaming=False), read_schema(options))
    wanted = (5, ROWS - 5)
    assert list(reader.pushFilters([In(("_offset",), wanted)])) == []
    planned = list(reader.partitions())
    # the covering range [5, ROWS - 4) is cut into four row groups; the two in between hold no wanted offset
    assert [_rows(p) for p in planned] == [[(5, ROW_GROUP_ROWS - 5)], [(ROWS - ROW_GROUP_ROWS, ROW_GROUP_ROWS - 4)]]
    got = [o for p in planned for b in reader.read(p) for o in b.column("_offset").to_pylist()]
    assert got == list(wanted)
