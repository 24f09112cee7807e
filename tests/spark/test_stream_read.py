"""Streaming reads through Spark: ``spark.readStream.format("txnlog")``, checked batch by batch with
``foreachBatch`` (which runs in this process). Test data is written with the core Python client."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from read_helpers import SCHEMA, produce, rows

from coordinator import Producer, TransactionCoordinator, add_partitions, create_topic, open_store
from txnsource.stream import allocate

pytestmark = pytest.mark.spark





class Run:
    """One availableNow run of a streaming query; ``batches`` maps batch id -> rows (id, _topic, _partition,
    _offset), sorted."""

    def __init__(self, spark: Any, lake: str, checkpoint: Path, **options: str) -> None:
        self.batches: dict[int, list[tuple[int, str, int, int]]] = {}
        reader = spark.readStream.format("txnlog")
        for k, v in options.items():
            reader = reader.option(k, v)

        def sink(df: Any, batch_id: int) -> None:
            got = df.select("id", "_topic", "_partition", "_offset").collect()
            self.batches[batch_id] = sorted(tuple(r) for r in got)

        self.query = (reader.load(lake).writeStream.foreachBatch(sink)
                      .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        assert self.query.awaitTermination(180), "the availableNow query did not finish"
        self.progress = [p for p in self.query.recentProgress if p["numInputRows"] > 0]

    @property
    def ids(self) -> list[int]:
        return sorted(r[0] for b in self.batches.values() for r in b)

    @property
    def sizes(self) -> list[int]:
        return [len(self.batches[b]) for b in sorted(self.batches)]


@pytest.fixture
def orders(lake: str) -> str:
    """Topic ``orders``: p0 holds ids 0-11 (3 transactions), p1 ids 100-106 (1 transaction)."""
    create_topic(open_store(lake), "orders", SCHEMA, partitions=2)
    produce(lake, "orders", [rows(0, 4), rows(4, 4), rows(8, 4)], partition=0)
    produce(lake, "orders", [rows(100, 7)], partition=1, tid="other")
    return lake


ALL_IDS = list(range(12)) + list(range(100, 107))


def test_available_now_honours_max_records_per_trigger(spark: Any, orders: str, tmp_path: Path) -> None:
    run = Run(spark, orders, tmp_path / "ck", topic="orders", startingOffsets="earliest", maxRecordsPerTrigger="5")
    assert run.ids == ALL_IDS
    assert run.sizes == [5, 5, 5, 4]
    assert [p["numInputRows"] for p in run.progress] == [5, 5, 5, 4]
    # each batch takes the next offsets of every partition, shared by backlog (12 : 7)
    first = run.batches[min(run.batches)]
    assert sorted((r[2], r[3]) for r in first) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    end = json.loads(run.progress[-1]["sources"][0]["endOffset"])
    assert end == {"orders": {"0": 12, "1": 7}}
    assert json.loads(run.progress[-1]["sources"][0]["latestOffset"]) == end


def test_without_a_limit_one_batch_reads_everything(spark: Any, orders: str, tmp_path: Path) -> None:
    run = Run(spark, orders, tmp_path / "ck", topic="orders", startingOffsets="earliest")
    assert run.sizes == [19]
    assert sorted((r[2], r[3]) for r in run.batches[0]) == [(0, o) for o in range(12)] + [(1, o) for o in range(7)]


def test_default_start_is_latest_and_a_restart_reads_only_what_is_new(spark: Any, orders: str,
                                                                      tmp_path: Path) -> None:
    first = Run(spark, orders, tmp_path / "ck", topic="orders")
    assert first.ids == []
    produce(orders, "orders", [rows(12, 3)], partition=0)
    produce(orders, "orders", [rows(107, 2)], partition=1, tid="other")
    second = Run(spark, orders, tmp_path / "ck", topic="orders")
    assert second.ids == [12, 13, 14, 107, 108]


def test_json_starting_offsets(spark: Any, orders: str, tmp_path: Path) -> None:
    run = Run(spark, orders, tmp_path / "ck", topic="orders", startingOffsets='{"orders": {"0": 10, "1": -1}}')
    assert run.ids == [10, 11]


def test_restart_from_checkpoint_has_no_duplicates_or_gaps(spark: Any, orders: str, tmp_path: Path) -> None:
    opts = {"topic": "orders", "startingOffsets": "earliest", "maxRecordsPerTrigger": "4"}
    first = Run(spark, orders, tmp_path / "ck", **opts)
    produce(orders, "orders", [rows(12, 6)], partition=0)
    produce(orders, "orders", [rows(107, 3)], partition=1, tid="other")
    second = Run(spark, orders, tmp_path / "ck", **opts)
    assert min(second.batches) == max(first.batches) + 1
    assert sorted(first.ids + second.ids) == list(range(18)) + list(range(100, 110))
    offsets = sorted((r[2], r[3]) for run in (first, second) for b in run.batches.values() for r in b)
    assert offsets == [(0, o) for o in range(18)] + [(1, o) for o in range(10)]


def test_a_replayed_batch_reads_the_same_rows(spark: Any, orders: str, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    opts = {"topic": "orders", "startingOffsets": "earliest", "maxRecordsPerTrigger": "7"}
    first = Run(spark, orders, ck, **opts)
    last = max(first.batches)
    # as if the driver died after running the last batch but before recording it as done
    for name in (str(last), f".{last}.crc"):
        if (ck / "commits" / name).exists():
            os.remove(ck / "commits" / name)
    produce(orders, "orders", [rows(12, 5)], partition=0)
    second = Run(spark, orders, ck, **opts)
    assert min(second.batches) == last
    assert second.batches[last] == first.batches[last]
    later = sorted(r[0] for b, rs in second.batches.items() if b > last for r in rs)
    assert later == list(range(12, 17))


def test_partitions_added_later_are_picked_up(spark: Any, orders: str, tmp_path: Path) -> None:
    opts = {"topic": "orders", "startingOffsets": "earliest"}
    first = Run(spark, orders, tmp_path / "ck", **opts)
    assert first.ids == ALL_IDS
    add_partitions(open_store(orders), "orders", 4)
    second = Run(spark, orders, tmp_path / "ck", **opts)
    assert second.ids == []
    produce(orders, "orders", [rows(300, 3)], partition=3, tid="p3")
    third = Run(spark, orders, tmp_path / "ck", **opts)
    assert [(r[0], r[2], r[3]) for b in third.batches.values() for r in b] == [(300, 3, 0), (301, 3, 1), (302, 3, 2)]


def test_group_id_records_progress_so_lag_is_visible(spark: Any, orders: str, tmp_path: Path) -> None:
    coord = TransactionCoordinator(open_store(orders))
    assert coord.group_offsets("dash") == {}
    Run(spark, orders, tmp_path / "ck", topic="orders", startingOffsets="earliest", maxRecordsPerTrigger="10",
        groupId="dash")
    assert coord.group_offsets("dash") == {"orders": {0: 12, 1: 7}}
    produce(orders, "orders", [rows(12, 4)], partition=0)
    snap = coord.snapshot(["orders"])
    lag = {p: snap.ends["orders"][p] - o for p, o in coord.group_offsets("dash")["orders"].items()}
    assert lag == {0: 4, 1: 0}


def test_a_transaction_across_topics_arrives_in_one_batch(spark: Any, lake: str, tmp_path: Path) -> None:
    store = open_store(lake)
    create_topic(store, "left", SCHEMA, partitions=2)
    create_topic(store, "right", SCHEMA, partitions=1)
    producer = Producer(lake, "both")
    producer.init_transactions()
    for n in range(3):
        with producer.transaction():
            producer.send("left", rows(n * 10, 2), partition=0)
            producer.send("left", rows(n * 10 + 2, 2), partition=1)
            producer.send("right", rows(n * 10 + 4, 2), partition=0)
    run = Run(spark, lake, tmp_path / "ck", topic="left,right", startingOffsets="earliest")
    assert run.ids == sorted(n * 10 + i for n in range(3) for i in range(6))
    assert {r[1] for b in run.batches.values() for r in b} == {"left", "right"}


# -- bad options --------------------------------------------------------------------------------------------


def _start(spark: Any, lake: str, ck: Path, **options: str) -> None:
    reader = spark.readStream.format("txnlog")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = reader.load(lake).writeStream.format("noop").option("checkpointLocation", str(ck)) \
        .trigger(availableNow=True).start()
    q.awaitTermination(120)


@pytest.mark.parametrize(("options", "message"), [
    ({"isolationLevel": "read_uncommitted"}, r"'isolationLevel' = 'read_uncommitted' is not supported by streaming"),
    ({"endingOffsets": "latest"}, r"option 'endingOffsets' is not supported by streaming reads \(got 'latest'\)"),
    ({"startingOffsets": '{"orders": {"0": 99}}'}, r"offset 99 of orders/0 is outside"),
])
def test_bad_stream_options_stop_the_query_naming_key_and_value(spark: Any, orders: str, tmp_path: Path,
                                                                  options: dict[str, str], message: str) -> None:
    with pytest.raises(StreamingQueryException, match=message):
        _start(spark, orders, tmp_path / "ck", topic="orders", **options)


def test_bad_stream_option_values_fail_at_load(spark: Any, orders: str) -> None:
    with pytest.raises(AnalysisException, match=r"'maxRecordsPerTrigger' = 'many' is not an integer"):
        spark.readStream.format("txnlog").option("topic", "orders").option("maxRecordsPerTrigger", "many") \
            .load(orders)


def test_a_checkpoint_of_other_topics_is_refused(spark: Any, orders: str, tmp_path: Path) -> None:
    create_topic(open_store(orders), "payments", SCHEMA, partitions=1)
    Run(spark, orders, tmp_path / "ck", topic="orders,payments", startingOffsets="earliest")
    with pytest.raises(StreamingQueryException, match=r"checkpoint holds offsets of topic 'payments'"):
        _start(spark, orders, tmp_path / "ck", topic="orders")


# -- units --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lags", "limit", "expected"), [
    ({("t", 0): 12, ("t", 1): 7}, 5, {("t", 0): 3, ("t", 1): 2}),
    ({("t", 0): 3, ("t", 1): 0}, 5, {("t", 0): 3, ("t", 1): 0}),
    ({("t", 0): 1, ("t", 1): 1, ("t", 2): 1}, 2, {("t", 0): 1, ("t", 1): 1, ("t", 2): 0}),
    ({("t", 0): 100, ("t", 1): 1}, 10, {("t", 0): 10, ("t", 1): 0}),
    ({("t", 0): 1000, ("t", 1): 999, ("t", 2): 1}, 1, {("t", 0): 1, ("t", 1): 0, ("t", 2): 0}),
])
def test_allocate_shares_the_limit_by_backlog(lags: dict[tuple[str, int], int], limit: int,
                                              expected: dict[tuple[str, int], int]) -> None:
    got = allocate(lags, limit)
    assert got == expected
    assert sum(got.values()) == min(limit, sum(lags.values()))


# -- S3 -----------------------------------------------------------------------------------------------------


@pytest.mark.s3
def test_stream_read_from_s3(spark: Any, s3_lake: Any, tmp_path: Path) -> None:
    url, options = s3_lake.url, dict(s3_lake.options)
    create_topic(open_store(url, options), "orders", SCHEMA, partitions=2)
    produce(url, "orders", [rows(0, 3), rows(3, 3)], partition=0, options=options)
    produce(url, "orders", [rows(6, 2)], partition=1, options=options, tid="w2")
    run = Run(spark, url, tmp_path / "ck", topic="orders", startingOffsets="earliest", maxRecordsPerTrigger="3",
              groupId="s3group", **options)
    assert run.ids == list(range(8))
    assert run.sizes == [3, 3, 2]
    coord = TransactionCoordinator(open_store(url, options))
    assert coord.group_offsets("s3group") == {"orders": {0: 6, 1: 2}}
