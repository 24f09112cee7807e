"""Streaming reads with the options Spark's Kafka source has: ``subscribePattern``, ``assign``,
``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` / ``maxTriggerDelay``, ``maxBytesPerTrigger``,
``maxFilesPerTrigger`` (as Spark's file source and Delta),
``maxRecordsPerPartition``, timestamp starts, partial offset maps, offsets beyond the log end, and the lag Spark's
progress shows. Checked batch by batch with ``foreachBatch``; test data is written with the core Python client."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import test_stream_read  # tests/spark is on sys.path (rootdir-relative test modules)
from pyspark.errors import AnalysisException, StreamingQueryException
from read_helpers import SCHEMA, produce, rows

from coordinator import TransactionCoordinator, create_topic, open_store
from txnsource.admission import TriggerDelay, bytes_grant, files_grant, rows_within

pytestmark = pytest.mark.spark


class Run:
    """One streaming query; ``batches`` maps batch id -> sorted (id, _partition, _offset) rows. availableNow by
    default (waits for the end); with ``processing`` a processing-time trigger (call :meth:`stop`)."""

    def __init__(self, spark: Any, lake: str, checkpoint: Path, processing: str | None = None,
                 **options: str) -> None:
        self.batches: dict[int, list[tuple[int, int, int]]] = {}
        self.tasks: dict[int, int] = {}
        reader = spark.readStream.format("txnlog")
        for k, v in options.items():
            reader = reader.option(k, v)

        def sink(df: Any, batch_id: int) -> None:
            self.tasks[batch_id] = df.rdd.getNumPartitions()
            self.batches[batch_id] = sorted(tuple(r) for r in df.select("id", "_partition", "_offset").collect())

        writer = reader.load(lake).writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
        if processing is None:
            self.query = writer.trigger(availableNow=True).start()
            assert self.query.awaitTermination(180), "the availableNow query did not finish"
        else:
            self.query = writer.trigger(processingTime=processing).start()

    def stop(self) -> None:
        self.query.stop()

    @property
    def progress(self) -> list[dict[str, Any]]:
        return [p for p in self.query.recentProgress if p["numInputRows"] > 0]

    @property
    def ids(self) -> list[int]:
        return sorted(r[0] for b in self.batches.values() for r in b)

    @property
    def sizes(self) -> list[int]:
        return [len(self.batches[b]) for b in sorted(self.batches) if self.batches[b]]


def wait_for(check: Any, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out waiting for the stream"
        time.sleep(0.2)


orders, ALL_IDS = test_stream_read.orders, test_stream_read.ALL_IDS


def test_pattern_and_assign_streams(spark: Any, orders: str, tmp_path: Path) -> None:
    create_topic(open_store(orders), "orders_eu", SCHEMA, partitions=1)
    produce(orders, "orders_eu", [rows(200, 2)], partition=0, tid="eu")
    run = Run(spark, orders, tmp_path / "pattern", subscribePattern="orders(_eu)?", startingOffsets="earliest")
    assert run.ids == ALL_IDS + [200, 201]
    assigned = Run(spark, orders, tmp_path / "assign", assign='{"orders": [1], "orders_eu": [0]}',
                   startingOffsets="earliest")
    assert assigned.ids == list(range(100, 107)) + [200, 201]
    # a checkpoint of a pattern query refuses a narrower subscription
    with pytest.raises(StreamingQueryException, match=r"checkpoint holds offsets of topic 'orders_eu', which "
                                                      r"option 'topic' = 'orders' does not read"):
        Run(spark, orders, tmp_path / "pattern", topic="orders")


def test_max_offsets_per_trigger_is_a_synonym(spark: Any, orders: str, tmp_path: Path) -> None:
    run = Run(spark, orders, tmp_path / "ck", topic="orders", startingOffsets="earliest", maxOffsetsPerTrigger="5")
    assert run.ids == ALL_IDS
    assert run.sizes == [5, 5, 5, 4]
    with pytest.raises(AnalysisException, match=r"'maxRecordsPerTrigger' = 5 and 'maxOffsetsPerTrigger' = 6 are "
                                                r"synonyms"):
        spark.readStream.format("txnlog").option("topic", "orders").option("maxRecordsPerTrigger", "5") \
            .option("maxOffsetsPerTrigger", "6").load(orders)
    with pytest.raises(AnalysisException, match=r"'minOffsetsPerTrigger' = 9 is above the per-trigger maximum 5"):
        spark.readStream.format("txnlog").option("topic", "orders").option("maxOffsetsPerTrigger", "5") \
            .option("minOffsetsPerTrigger", "9").load(orders)


def test_max_files_per_trigger_reads_whole_files_oldest_commit_first(spark: Any, orders: str,
                                                                    tmp_path: Path) -> None:
    # p0: three one-file commits of 4 rows, then p1: one file of 7 rows, committed last
    two = Run(spark, orders, tmp_path / "two", topic="orders", startingOffsets="earliest", maxFilesPerTrigger="2")
    assert two.ids == ALL_IDS
    assert two.sizes == [8, 11]
    assert [sorted({r[1] for r in two.batches[b]}) for b in sorted(two.batches)] == [[0], [0, 1]]
    # the rest of a file an earlier batch (here: the start offset) read in part counts as one file; with a row
    # limit too, both hold: no batch goes past a file end or over 3 rows
    both = Run(spark, orders, tmp_path / "both", topic="orders", startingOffsets='{"orders": {"0": 6, "1": 0}}',
               maxFilesPerTrigger="1", maxRecordsPerTrigger="3")
    assert both.sizes == [2, 3, 1, 3, 3, 1]
    assert both.ids == ALL_IDS[6:]
    with pytest.raises(AnalysisException, match=r"'maxFilesPerTrigger' .*positive"):
        spark.readStream.format("txnlog").option("topic", "orders").option("maxFilesPerTrigger", "0").load(orders)


def test_files_grant_takes_whole_files_in_commit_order_as_prefixes() -> None:
    a, b = ("t", 0), ("t", 1)
    # one commit (seq 5) wrote a file to each partition: they are taken in turn, then the later commits
    slices = {a: [(5, 10), (7, 3), (9, 4)], b: [(5, 20), (6, 1)]}
    assert files_grant(slices, 1) == {a: 10, b: 0}
    assert files_grant(slices, 2) == {a: 10, b: 20}
    assert files_grant(slices, 3) == {a: 10, b: 21}
    assert files_grant(slices, 4) == {a: 13, b: 21}
    assert files_grant(slices, 99) == {a: 17, b: 21}
    # at least one file, however small the limit; nothing to take, nothing taken
    assert files_grant(slices, 0) == {a: 10, b: 0}
    assert files_grant({a: [], b: []}, 3) == {a: 0, b: 0}
    # a partition's files are a prefix even where an index says a later file is older (a compacted segment)
    assert files_grant({a: [(9, 1), (2, 1)], b: [(5, 1)]}, 2) == {a: 1, b: 1}


def test_progress_shows_the_latest_offset_so_lag_is_visible(spark: Any, orders: str, tmp_path: Path) -> None:
    run = Run(spark, orders, tmp_path / "ck", topic="orders", startingOffsets="earliest", maxRecordsPerTrigger="5")
    first = run.progress[0]["sources"][0]
    latest, end = json.loads(first["latestOffset"]), json.loads(first["endOffset"])
    assert latest == {"orders": {"0": 12, "1": 7}}
    lag = sum(latest["orders"][p] - end["orders"][p] for p in latest["orders"])
    assert lag == 19 - 5


def test_max_bytes_per_trigger_limits_batches_and_always_progresses(spark: Any, lake: str, tmp_path: Path) -> None:
    create_topic(open_store(lake), "orders", SCHEMA, partitions=1)
    produce(lake, "orders", [rows(0, 4), rows(4, 4), rows(8, 4)], partition=0)
    plog = TransactionCoordinator(open_store(lake)).partition("orders", 0)
    plog.refresh()
    seg = max(s.size for s in plog.segments)
    run = Run(spark, lake, tmp_path / "seg", topic="orders", startingOffsets="earliest", maxBytesPerTrigger=str(seg))
    assert run.ids == list(range(12))
    assert run.sizes == [4, 4, 4]
    tiny = Run(spark, lake, tmp_path / "tiny", topic="orders", startingOffsets='{"orders": {"0": 9}}',
               maxBytesPerTrigger="1")
    assert tiny.sizes == [1, 1, 1]
    assert tiny.ids == [9, 10, 11]


def test_min_offsets_per_trigger_waits_for_enough_records(spark: Any, orders: str, tmp_path: Path) -> None:
    run = Run(spark, orders, tmp_path / "ck", processing="200 milliseconds", topic="orders",
              minOffsetsPerTrigger="5", maxTriggerDelay="1h")
    try:
        wait_for(lambda: len(run.query.recentProgress) >= 1)
        produce(orders, "orders", [rows(12, 3)], partition=0, tid="late")
        time.sleep(3)  # about 15 triggers, each seeing 3 < 5 records
        assert run.query.isActive
        assert run.ids == []
        produce(orders, "orders", [rows(107, 3)], partition=1, tid="later")
        wait_for(lambda: bool(run.ids))
        assert run.sizes == [6]
        assert run.ids == [12, 13, 14, 107, 108, 109]
    finally:
        run.stop()


def test_max_records_per_partition_splits_stream_batches(spark: Any, orders: str, tmp_path: Path) -> None:
    run = Run(spark, orders, tmp_path / "ck", topic="orders", startingOffsets="earliest",
              maxRecordsPerPartition="3")
    assert run.ids == ALL_IDS
    assert run.tasks[0] == 7  # p0: 12 records (three segments of 4) -> 4 tasks of 3; p1: 7 -> 3 + 3 + 1


def test_starting_timestamp_and_partial_maps_in_streams(spark: Any, orders: str, tmp_path: Path) -> None:
    plog = TransactionCoordinator(open_store(orders)).partition("orders", 0)
    plog.refresh()
    second = plog.segments[1].ts
    run = Run(spark, orders, tmp_path / "ts", topic="orders", startingOffsetsByTimestamp=json.dumps(
        {"orders": {"0": second}}), startingOffsets="earliest")
    # p0 starts at its second transaction; p1, left out, starts at the stream default (latest), not at the
    # startingOffsets given, which the timestamp option overrides
    assert run.ids == list(range(4, 12))
    partial = Run(spark, orders, tmp_path / "partial", topic="orders", startingOffsets='{"orders": {"0": 10}}')
    assert partial.ids == [10, 11]
    with pytest.raises(StreamingQueryException, match=r"leaves out partitions \[1\] of topic 'orders'"):
        Run(spark, orders, tmp_path / "assign", assign='{"orders": [0, 1]}', startingOffsets='{"orders": {"0": 10}}')


def test_an_offset_beyond_the_log_end_fails_clearly(spark: Any, orders: str, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    Run(spark, orders, ck, topic="orders", startingOffsets="earliest")
    other = str(tmp_path / "recreated")  # the same topic, re-created: its offsets start again at 0
    create_topic(open_store(other), "orders", SCHEMA, partitions=2)
    produce(other, "orders", [rows(50, 2)], partition=0)
    with pytest.raises(StreamingQueryException, match=r"offset 12 of orders/0 is beyond the partition's log end 2 "
                                                      r"\(log start 0\).*failOnDataLoss=false"):
        Run(spark, other, ck, topic="orders")
    skipped = Run(spark, other, ck, topic="orders", failOnDataLoss="false")
    assert skipped.ids == [50, 51]


# -- units --------------------------------------------------------------------------------------------------


def test_trigger_delay_waits_for_min_rows_or_the_delay() -> None:
    now = [0.0]
    delay = TriggerDelay(5, 1000, clock=lambda: now[0])
    assert delay.wait(0) is False  # the first call never waits (as Kafka's source)
    now[0] = 0.5
    assert delay.wait(3) is True
    assert delay.wait(5) is False  # enough records
    now[0] = 1.2
    assert delay.wait(1) is True  # 0.7 s since the last batch
    now[0] = 1.6
    assert delay.wait(1) is False  # 1.1 s: the delay passed


def test_bytes_grant_shares_the_budget_and_keeps_progress() -> None:
    sizes = {("t", 0): [(4, 400.0), (4, 400.0)], ("t", 1): [(2, 1000.0)]}
    assert rows_within(sizes[("t", 0)], 600) == 6
    grant = {("t", 0): 8, ("t", 1): 2}
    assert bytes_grant(grant, sizes, 10_000) == grant
    # 1800 bytes wanted, 900 allowed: each partition gets half its bytes
    assert bytes_grant(grant, sizes, 900) == {("t", 0): 4, ("t", 1): 1}
    assert bytes_grant(grant, sizes, 1) == {("t", 0): 1, ("t", 1): 0}


def test_a_headers_map_column_is_carried_end_to_end(spark: Any, lake: str, tmp_path: Path) -> None:
    # records carry no Kafka-style headers of their own: a map<string,binary> column named "headers" is an ordinary
    # topic column, written by the Spark writer and returned by batch and stream reads
    data = spark.createDataFrame([(1, {"trace": b"t-1", "tenant": b"a"}), (2, None), (3, {})],
                                 "id long, headers map<string,binary>")
    data.write.format("txnlog").option("topic", "events").mode("append").save(lake)
    batch = spark.read.format("txnlog").option("topic", "events").load(lake)
    assert batch.schema["headers"].dataType.simpleString() == "map<string,binary>"
    got = {r.id: r.headers for r in batch.select("id", "headers").collect()}
    assert got == {1: {"trace": b"t-1", "tenant": b"a"}, 2: None, 3: {}}
    seen: list[tuple[int, Any]] = []
    query = (spark.readStream.format("txnlog").option("topic", "events").option("startingOffsets", "earliest")
             .load(lake).writeStream.option("checkpointLocation", str(tmp_path / "ck"))
             .foreachBatch(lambda df, _id: seen.extend((r.id, r.headers) for r in df.collect()))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert sorted(seen, key=lambda r: r[0]) == [(1, {"trace": b"t-1", "tenant": b"a"}), (2, None), (3, {})]


@pytest.mark.parametrize(("raw", "ms"), [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("2h", 7_200_000),
                                         ("250", 250), (None, 900_000)])
def test_max_trigger_delay_durations(raw: str | None, ms: int) -> None:
    from txnsource.options import parse_options

    options = {"path": "/x", "topic": "t", "minOffsetsPerTrigger": "1"}
    if raw is not None:
        options["maxTriggerDelay"] = raw
    assert parse_options(options, streaming=True).max_trigger_delay_ms == ms


def test_a_bad_max_trigger_delay_is_refused() -> None:
    from coordinator.errors import InvalidOptionError
    from txnsource.options import parse_options

    with pytest.raises(InvalidOptionError, match=r"'maxTriggerDelay' = 'soon' is not a duration"):
        parse_options({"path": "/x", "topic": "t", "maxTriggerDelay": "soon"}, streaming=True)
