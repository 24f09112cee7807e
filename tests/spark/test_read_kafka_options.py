"""Batch reads with the options Spark's Kafka source has: ``subscribePattern``, ``assign``, timestamp starts and
ends, partial offset maps, ``failOnDataLoss``, ``maxRecordsPerPartition``, and the refusal of stream-only options.
Test data is written with the core Python client."""

from __future__ import annotations

import time
from typing import Any

import pytest
import test_read as base  # tests/spark is on sys.path (rootdir-relative test modules)
from pyspark.errors import AnalysisException
from read_helpers import SCHEMA, produce, rows

from coordinator import TransactionCoordinator, create_topic, open_store
from coordinator.maintenance import apply_retention

pytestmark = pytest.mark.spark

reader, ids, orders = base.reader, base.ids, base.orders


def commit_times(lake: str, topic: str, partition: int) -> list[int]:
    """Commit time (ms) of each transaction of a partition, in offset order."""
    plog = TransactionCoordinator(open_store(lake)).partition(topic, partition)
    plog.refresh()
    return [ts for s in plog.segments for _first, ts, _seq in s.run_list()]


# -- what is read --------------------------------------------------------------------------------------------


def test_subscribe_pattern_reads_every_matching_topic(spark: Any, orders: str) -> None:
    store = open_store(orders)
    create_topic(store, "orders_eu", SCHEMA, partitions=1)
    create_topic(store, "payments", SCHEMA, partitions=1)
    produce(orders, "orders_eu", [rows(200, 2)], partition=0)
    produce(orders, "payments", [rows(300, 2)], partition=0)
    df = reader(spark, orders, subscribePattern="orders.*")
    assert ids(df) == list(range(10)) + list(range(100, 105)) + [200, 201]
    assert sorted({r._topic for r in df.select("_topic").collect()}) == ["orders", "orders_eu"]
    # a full match, as Java's Pattern.matches: "order" matches no topic
    with pytest.raises(AnalysisException, match=r"'subscribePattern' = 'order' matches no topic"):
        reader(spark, orders, subscribePattern="order")


def test_assign_reads_only_the_named_partitions(spark: Any, orders: str) -> None:
    assert ids(reader(spark, orders, assign='{"orders": [1]}')) == list(range(100, 105))
    ranged = reader(spark, orders, assign={"orders": [0]}, startingOffsets={"orders": {"0": 3}},
                    endingOffsets={"orders": {"0": 6}})
    assert ids(ranged) == [3, 4, 5]
    with pytest.raises(AnalysisException, match=r"option 'assign' = '\{\"orders\": \[0, 5\]\}' names partition 5 of "
                                                r"topic 'orders', which has 2 partitions"):
        reader(spark, orders, assign={"orders": [0, 5]}).collect()
    with pytest.raises(AnalysisException, match=r"'startingOffsetsByTimestamp' = .* names partition 1 of topic "
                                                r"'orders', which option 'assign' = '\{\"orders\": \[0\]\}' does not "
                                                r"read"):
        reader(spark, orders, assign={"orders": [0]},
               startingOffsetsByTimestamp={"orders": {"0": 0, "1": 0}}).collect()


@pytest.mark.parametrize(("options", "message"), [
    ({"topic": "orders", "assign": '{"orders": [0]}'},
     r"options 'topic' = 'orders', 'assign' = '\{\"orders\": \[0\]\}' conflict: give exactly one"),
    ({"topic": "orders", "subscribePattern": "o.*"}, r"'subscribePattern' = 'o\.\*' conflict"),
    ({}, r"option 'topic' is missing"),
    ({"subscribePattern": "(unclosed"}, r"'subscribePattern' = '\(unclosed' is not a regular expression"),
    ({"assign": '{"orders": "0"}'}, r"'assign' = '\{\"orders\": \"0\"\}': topic 'orders' must map to a non-empty"),
    ({"assign": "[0, 1]"}, r"'assign' = '\[0, 1\]' must be JSON like"),
    ({"assign": '{"orders": [0]}', "startingOffsets": '{"payments": {"0": 1}}'}, r"names topic 'payments'"),
])
def test_exactly_one_of_topic_pattern_and_assign(spark: Any, orders: str, options: dict[str, str],
                                                 message: str) -> None:
    with pytest.raises(AnalysisException, match=message):
        reader(spark, orders, **options)


# -- where reading starts and ends ---------------------------------------------------------------------------


def test_partial_offset_maps_take_the_default_except_with_assign(spark: Any, orders: str) -> None:
    # topic / subscribePattern: a partition left out starts at earliest (batch default) and ends at latest
    assert ids(reader(spark, orders, topic="orders", startingOffsets={"orders": {"0": 7}})) == \
        [7, 8, 9, *range(100, 105)]
    assert ids(reader(spark, orders, topic="orders", endingOffsets={"orders": {"1": 2}})) == \
        [*range(10), 100, 101]
    # assign: a map naming a topic must name every assigned partition
    with pytest.raises(AnalysisException, match=r"option 'startingOffsets' = .* leaves out partitions \[1\] of "
                                                r"topic 'orders'; with option 'assign'"):
        reader(spark, orders, assign={"orders": [0, 1]}, startingOffsets={"orders": {"0": 7}}).collect()
    whole = reader(spark, orders, assign={"orders": [0, 1]}, startingOffsets={"orders": {"0": 7, "1": -2}})
    assert ids(whole) == [7, 8, 9, *range(100, 105)]


def test_timestamps_pick_offsets_by_commit_time_and_win_over_offsets(spark: Any, lake: str) -> None:
    create_topic(open_store(lake), "orders", SCHEMA, partitions=2)
    for i in range(3):
        produce(lake, "orders", [rows(i * 10, 3)], partition=0, tid=f"w{i}")
        time.sleep(0.02)
    produce(lake, "orders", [rows(100, 2)], partition=1, tid="w9")
    t0, t1, t2 = commit_times(lake, "orders", 0)
    (p1,) = commit_times(lake, "orders", 1)
    assert t0 < t1 < t2 < p1
    # startingTimestamp applies to every partition; the timestamp options win over startingOffsets
    df = reader(spark, lake, topic="orders", startingTimestamp=str(t1), startingOffsets="latest")
    assert ids(df) == [10, 11, 12, 20, 21, 22, 100, 101]
    assert round(min(r._timestamp for r in df.collect()).timestamp() * 1000) >= t1
    by_part = reader(spark, lake, topic="orders", startingOffsetsByTimestamp={"orders": {"0": t2}},
                     endingOffsetsByTimestamp={"orders": {"1": p1}}, endingOffsets={"orders": {"0": 3}})
    assert ids(by_part) == [20, 21, 22]  # p1 ends before its only commit; p0's endingOffsets is overridden
    assert ids(reader(spark, lake, topic="orders", endingTimestamp=str(t1))) == [0, 1, 2]
    # a starting timestamp after every commit: an error by default, the latest offset with strategy "latest"
    late = str(p1 + 60_000)
    with pytest.raises(AnalysisException, match=r"'startingTimestamp': no record of orders/0 was committed at or "
                                                r"after \d+ ms .*startingOffsetsByTimestampStrategy=latest"):
        reader(spark, lake, topic="orders", startingTimestamp=late).collect()
    assert ids(reader(spark, lake, topic="orders", startingTimestamp=late,
                      startingOffsetsByTimestampStrategy="latest")) == []
    assert ids(reader(spark, lake, topic="orders", endingTimestamp=late)) == [*range(3), *range(10, 13),
                                                                            *range(20, 23), 100, 101]


@pytest.mark.parametrize(("options", "message"), [
    ({"startingTimestamp": "yesterday"}, r"'startingTimestamp' = 'yesterday' must be epoch milliseconds"),
    ({"endingOffsetsByTimestamp": '{"orders": {"0": -4}}'}, r"timestamp -4 of orders/0 must be epoch"),
    ({"startingOffsetsByTimestampStrategy": "earliest"}, r"'startingOffsetsByTimestampStrategy' = 'earliest'"),
])
def test_bad_timestamp_options_fail_at_load(spark: Any, orders: str, options: dict[str, str], message: str) -> None:
    with pytest.raises(AnalysisException, match=message):
        reader(spark, orders, topic="orders", **options)


def test_fail_on_data_loss_is_honoured_by_batch_reads(spark: Any, orders: str) -> None:
    coord = TransactionCoordinator(open_store(orders))
    plog = coord.partition("orders", 0)
    plog.refresh()
    apply_retention(coord, "orders", 0, retention_bytes=plog.segments[1].size)  # keeps offsets 5..9
    below = {"orders": {"0": 2}}
    with pytest.raises(AnalysisException, match=r"offset 2 of orders/0 is outside the partition's offsets \[5, 10\]"
                                                r": below the log start.*failOnDataLoss=false"):
        reader(spark, orders, topic="orders", startingOffsets=below).collect()
    skipped = reader(spark, orders, topic="orders", startingOffsets=below, failOnDataLoss="false")
    assert ids(skipped) == [5, 6, 7, 8, 9, *range(100, 105)]
    # past the end is never data loss the reader could skip: it fails either way, naming the offsets
    with pytest.raises(AnalysisException, match=r"offset 12 of orders/0 is outside the partition's offsets "
                                                r"\[5, 10\] \(above its end\)"):
        reader(spark, orders, topic="orders", startingOffsets={"orders": {"0": 12}}, failOnDataLoss="false").collect()


@pytest.mark.parametrize(("key", "value"), [
    ("maxRecordsPerTrigger", "5"), ("maxOffsetsPerTrigger", "5"), ("minOffsetsPerTrigger", "5"),
    ("maxTriggerDelay", "1m"), ("maxBytesPerTrigger", "1000"), ("groupId", "g"),
])
def test_batch_reads_refuse_stream_only_options(spark: Any, orders: str, key: str, value: str) -> None:
    with pytest.raises(AnalysisException, match=rf"option '{key}' = '{value}' applies to readStream only"):
        reader(spark, orders, topic="orders", **{key: value}).collect()


def test_max_records_per_partition_splits_big_partitions_into_more_tasks(spark: Any, orders: str) -> None:
    assert reader(spark, orders, topic="orders").rdd.getNumPartitions() == 2
    df = reader(spark, orders, topic="orders", maxRecordsPerPartition="3")
    # p0: two segments of 5 -> 3 + 2 each; p1: one segment of 5 -> 3 + 2
    assert df.rdd.getNumPartitions() == 6
    spans = sorted(df.rdd.mapPartitions(lambda it: [sorted((r._partition, r._offset) for r in it)]).collect())
    assert all(len(s) <= 3 for s in spans)
    assert [o for s in spans for o in s] == sorted([(0, o) for o in range(10)] + [(1, o) for o in range(5)])
    assert ids(df) == list(range(10)) + list(range(100, 105))


def test_txnsource_read_takes_the_new_options_through_the_python_reader(spark: Any, orders: str) -> None:
    import txnsource

    df = txnsource.read(spark, orders, topic="orders", maxRecordsPerPartition=3)
    assert df.rdd.getNumPartitions() == 6
    assert ids(df) == list(range(10)) + list(range(100, 105))
    pattern = txnsource.read(spark, orders, subscribePattern="ord.*", startingOffsets='{"orders": {"0": 8}}')
    assert ids(pattern) == [8, 9, *range(100, 105)]
    with pytest.raises(ValueError, match=r"'readPath' = 'native' cannot read this: maxRecordsPerPartition"):
        txnsource.read(spark, orders, topic="orders", maxRecordsPerPartition=3, readPath="native")


@pytest.mark.s3
def test_pattern_assign_and_timestamps_on_s3(spark: Any, s3_lake: Any) -> None:
    # topic listing (subscribePattern) and the commit-time index (timestamps) go through the S3 backend's listing
    url, options = s3_lake.url, dict(s3_lake.options)
    store = open_store(url, options)
    create_topic(store, "orders", SCHEMA, partitions=2)
    create_topic(store, "orders_eu", SCHEMA, partitions=1)
    create_topic(store, "payments", SCHEMA, partitions=1)
    produce(url, "orders", [rows(0, 3)], partition=0, options=options, tid="a")
    time.sleep(0.02)
    produce(url, "orders", [rows(3, 3)], partition=0, options=options, tid="b")
    produce(url, "orders", [rows(100, 2)], partition=1, options=options, tid="c")
    produce(url, "orders_eu", [rows(200, 2)], partition=0, options=options, tid="d")
    produce(url, "payments", [rows(300, 2)], partition=0, options=options, tid="e")
    plog = TransactionCoordinator(open_store(url, options)).partition("orders", 0)
    plog.refresh()
    second = plog.segments[1].ts
    assert ids(reader(spark, url, subscribePattern="orders.*", **options)) == [*range(6), 100, 101, 200, 201]
    assert ids(reader(spark, url, assign={"orders": [0]}, startingTimestamp=str(second), **options)) == [3, 4, 5]
