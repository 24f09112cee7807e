"""Producer times through Spark: the batch and streaming sinks stamp each row with the writing task's time (or the
DataFrame's ``_producerTimestamp`` column), and the data source (batch and streaming) and the native path read them
back as the metadata column ``_producerTimestamp``, null for segments written before producer times existed."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import test_read_native as nat_tests  # tests/spark is on sys.path (rootdir-relative test modules)
from read_helpers import SCHEMA, produce, rows

from coordinator import (
    TransactionCoordinator,
    create_topic,
    get_topic,
    open_store,
    read_snapshot,
    stage_segment,
)
from coordinator.maintenance import compact_partition
from coordinator.segments import PRODUCER_TS

pytestmark = pytest.mark.spark

same_as_python, reader = nat_tests.same_as_python, nat_tests.reader


def micros(table: pa.Table) -> dict[int, int | None]:
    """id -> producer time in microseconds."""
    times = table.column(PRODUCER_TS).cast(pa.int64()).to_pylist()
    return dict(zip(table.column("id").to_pylist(), times, strict=True))


def now_us() -> int:
    return time.time_ns() // 1000


def write(df: Any, lake: str, **options: Any) -> None:
    w = df.write.format("txnlog").mode("append")
    for k, v in options.items():
        w = w.option(k, str(v))
    w.save(lake)


def test_the_batch_sink_stamps_the_task_time_and_both_read_paths_agree(spark: Any, lake: str) -> None:
    df = spark.range(0, 400, 1, 4).selectExpr("id", "concat('n', id) as name")
    before = now_us()
    write(df, lake, topic="orders", numPartitions=2)
    after = now_us()
    assert get_topic(open_store(lake), "orders").schema.names == ["id", "name"]
    times = micros(read_snapshot(lake, ["orders"])["orders"])
    assert sorted(times) == list(range(400))
    assert all(before <= t <= after for t in times.values())  # type: ignore[operator]
    nat = same_as_python(spark, lake, topic="orders")
    assert nat.where("_producerTimestamp is null").count() == 0
    assert nat.where("_producerTimestamp > _timestamp").count() == 0  # stamped before the commit


def test_a_producer_timestamp_column_is_used_and_not_stored(spark: Any, lake: str) -> None:
    df = spark.range(6).selectExpr(
        "id", "concat('n', id) as name",
        "if(id < 5, timestamp_micros(1700000000000000 + id), null) as _producerTimestamp")
    before = now_us()
    write(df, lake, topic="orders")
    after = now_us()
    assert get_topic(open_store(lake), "orders").schema.names == ["id", "name"]
    times = micros(read_snapshot(lake, ["orders"])["orders"])
    assert [times[i] for i in range(5)] == [1_700_000_000_000_000 + i for i in range(5)]
    assert before <= times[5] <= after  # type: ignore[operator] - a null takes the task's time
    # a DataFrame read from txnlog keeps its producer times when written back (the other metadata columns dropped)
    copy = reader(spark, lake, topic="orders").drop("_topic", "_partition", "_offset", "_timestamp")
    write(copy, lake, topic="copy")
    assert micros(read_snapshot(lake, ["copy"])["copy"]) == times
    bad = spark.range(2).selectExpr("id", "'x' as name", "id as _producerTimestamp")
    with pytest.raises(Exception, match="InvalidOptionError") as err:
        write(bad, lake, topic="orders")
    assert "must be a timestamp" in str(err.value)


def commit_old_segment(lake: str, ids: range, partition: int) -> None:
    """Rows committed as a segment written before producer times existed."""
    store = open_store(lake)
    coord = TransactionCoordinator(store)
    ident = coord.init_producer(f"old-{ids.start}")
    seg = stage_segment(store, "orders", partition, pa.Table.from_pylist(rows(ids.start, len(ids)), schema=SCHEMA),
                        f"{ident.txn_id(0)}~0", seq=0)
    coord.commit(ident, ident.txn_id(0), [seg])


def test_old_segments_read_as_null_on_both_paths_before_and_after_compaction(spark: Any, lake: str) -> None:
    create_topic(open_store(lake), "orders", SCHEMA, partitions=2)
    commit_old_segment(lake, range(0, 5), 0)
    commit_old_segment(lake, range(100, 103), 1)
    produce(lake, "orders", [rows(5, 3), rows(8, 2)], partition=0)
    nat = same_as_python(spark, lake, topic="orders")
    nulls = sorted(r.id for r in nat.where("_producerTimestamp is null").select("id").collect())
    assert nulls == [0, 1, 2, 3, 4, 100, 101, 102]
    before = sorted(nat.select("id", "_producerTimestamp").collect())
    report = compact_partition(TransactionCoordinator(open_store(lake)), "orders", 0)
    assert report.segments_after == 1 < report.segments_before
    again = same_as_python(spark, lake, topic="orders")
    assert sorted(again.select("id", "_producerTimestamp").collect()) == before
    # a filter on the producer time is evaluated by Spark on either path: the same rows as a filter in Python
    cut = sorted(r.id for r in nat.where("_producerTimestamp is not null").collect())[2]
    at = [r._producerTimestamp for r in again.where(f"id = {cut}").collect()][0]
    want = sorted(r.id for r in before if r._producerTimestamp is not None and r._producerTimestamp >= at)
    for df in (reader(spark, lake, topic="orders"), again):
        got = df.where(df._producerTimestamp >= at).select("id").collect()
        assert sorted(r.id for r in got) == want
    assert same_as_python(spark, lake, "id long, _producerTimestamp timestamp", topic="orders").count() == 10 + 3


def test_the_streaming_sink_stamps_and_the_streaming_source_reads(spark: Any, lake: str, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for f in range(2):
        (folder / f"part-{f}.json").write_text("".join(f'{{"id": {f * 10 + i}}}\n' for i in range(10)))
    src = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(folder))
    before = now_us()
    q = (src.selectExpr("id", "concat('n', id) as name").writeStream.format("txnlog").option("topic", "orders")
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start(lake))
    assert q.awaitTermination(180) and q.exception() is None
    after = now_us()
    table = read_snapshot(lake, ["orders"])["orders"]
    times = micros(table)
    assert sorted(times) == list(range(20)) and all(before <= t <= after for t in times.values())  # type: ignore[operator]
    commits = table.column("_timestamp").cast(pa.int64()).to_pylist()
    assert len(set(commits)) == 2  # two micro-batches, two transactions
    got: dict[int, dt.datetime] = {}

    def sink(df: Any, _batch: int) -> None:
        got.update({r.id: r._producerTimestamp for r in df.select("id", "_producerTimestamp").collect()})

    source = spark.readStream.format("txnlog").option("topic", "orders").option("startingOffsets", "earliest")
    read = (source.load(lake).writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "cp-read")).trigger(availableNow=True).start())
    assert read.awaitTermination(180)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert {i: (t.astimezone(dt.UTC) - epoch) // dt.timedelta(microseconds=1) for i, t in got.items()} == times


@pytest.mark.s3
def test_batch_sink_times_on_s3(spark: Any, s3_lake: Any) -> None:
    df = spark.range(20).selectExpr("id", "concat('n', id) as name")
    w = df.write.format("txnlog").mode("append").option("topic", "s3t")
    for k, v in s3_lake.options.items():
        w = w.option(k, v)
    before = now_us()
    w.save(s3_lake.url)
    after = now_us()
    times = micros(read_snapshot(s3_lake.url, ["s3t"], options=s3_lake.options)["s3t"])
    assert sorted(times) == list(range(20)) and all(before <= t <= after for t in times.values())  # type: ignore[operator]
    r = spark.read.format("txnlog").option("topic", "s3t")
    for k, v in s3_lake.options.items():
        r = r.option(k, v)
    assert r.load(s3_lake.url).where("_producerTimestamp is null").count() == 0


def test_a_native_write_keeps_its_one_producer_time_in_the_index_and_every_read_path_gives_it(
        spark: Any, lake: str) -> None:
    """The native write without a ``_producerTimestamp`` column stores no such column: its files' references carry
    the write's time. Every reader gives it (the Python reader, the segment format in batches and in rows, the SQL
    projection of a sliced read), filters on it see it (no file skipped as if it had no producer times), files
    with their own column and old files without any in the same scan keep theirs, and compaction writes it out."""
    import pyarrow.parquet as pq

    from txnsink import write as native_write

    create_topic(open_store(lake), "orders", SCHEMA, partitions=1)
    commit_old_segment(lake, range(0, 3), 0)  # no producer times at all
    produce(lake, "orders", [rows(3, 3)], partition=0)  # a producer-time column
    df = spark.range(100, 140, 1, 2).selectExpr("id", "concat('n', id) as name")
    before = now_us()
    assert native_write(df, lake, "orders", writePath="native").path == "native"
    after = now_us()
    plog = TransactionCoordinator(open_store(lake)).partition("orders", 0)
    plog.refresh()
    given = [s for s in plog.segments if s.ptime is not None]
    assert len(given) == 2 and len({s.ptime for s in given}) == 1
    ptime = given[0].ptime
    assert ptime is not None and before <= ptime <= after
    root = open_store(lake).url.removeprefix("file://")
    for s in given:
        assert PRODUCER_TS not in pq.read_schema(f"{root}/{s.path}").names
    times = micros(read_snapshot(lake, ["orders"])["orders"])
    assert [times[i] for i in range(3)] == [None] * 3 and all(times[i] is not None for i in range(3, 6))
    assert {times[i] for i in range(100, 140)} == {ptime}
    at = dt.datetime.fromtimestamp(ptime / 1e6, dt.UTC)

    def check(df: Any) -> None:
        ids = sorted(r.id for r in df.select("id").collect())
        assert sorted(r.id for r in df.where("_producerTimestamp is null").collect()) == [i for i in ids if i < 3]
        native_ids = [i for i in ids if i >= 100]
        assert sorted(r.id for r in df.where(df._producerTimestamp >= at).collect()) == native_ids
        assert df.where(df._producerTimestamp == at).count() == len(native_ids) > 0

    for options in ({}, {"startingOffsets": json_offsets(1), "endingOffsets": json_offsets(30)}):
        nat = same_as_python(spark, lake, topic="orders", **options)
        check(nat)
        check(reader(spark, lake, topic="orders", **options))
    check(reader(spark, lake, topic="orders", maxRecordsPerPartition="7"))  # slices cut across tasks
    spark.conf.set("spark.sql.parquet.enableVectorizedReader", "false")
    try:
        check(same_as_python(spark, lake, topic="orders"))
    finally:
        spark.conf.unset("spark.sql.parquet.enableVectorizedReader")
    report = compact_partition(TransactionCoordinator(open_store(lake)), "orders", 0)
    assert report.segments_after == 1 < report.segments_before
    plog = TransactionCoordinator(open_store(lake)).partition("orders", 0)
    plog.refresh()
    assert [s.ptime for s in plog.segments] == [None]
    assert micros(read_snapshot(lake, ["orders"])["orders"]) == times
    check(same_as_python(spark, lake, topic="orders"))


def json_offsets(offset: int) -> str:
    return f'{{"orders": {{"0": {offset}}}}}'
