"""Kafka parity of the streaming reader: ``subscribePattern`` picks up topics created while the query runs (at the
next trigger, from their earliest offset), exactly once across restarts, and a checkpoint naming a matching topic
deleted since still loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import test_stream_read  # tests/spark is on sys.path (rootdir-relative test modules)
from read_helpers import SCHEMA, produce, rows
from test_stream_read_kafka_options import Run, wait_for

from coordinator import TransactionCoordinator, create_topic, open_store
from coordinator.topic_admin import delete_topic

pytestmark = pytest.mark.spark

orders, ALL_IDS = test_stream_read.orders, test_stream_read.ALL_IDS


def test_a_pattern_stream_picks_up_a_topic_created_while_it_runs(spark: Any, orders: str, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    live = Run(spark, orders, ck, processing="200 milliseconds", subscribePattern="orders.*",
               startingOffsets="earliest")
    try:
        wait_for(lambda: live.ids == ALL_IDS)
        create_topic(open_store(orders), "orders_new", SCHEMA, partitions=2)
        produce(orders, "orders_new", [rows(200, 3)], partition=0, tid="new")
        produce(orders, "orders_new", [rows(300, 2)], partition=1, tid="new1")
        wait_for(lambda: live.ids == sorted(ALL_IDS + [200, 201, 202, 300, 301]))
        # the new topic is read from its earliest offset: every record once, none skipped
        new = sorted((r[1], r[2]) for b in live.batches.values() for r in b if r[0] >= 200)
        assert new == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
        wait_for(lambda: any("orders_new" in json.loads(p["sources"][0]["endOffset"]) for p in live.progress))
        # stop only once the batch that read the last rows is committed (its progress is reported after the commit):
        # stopped between its rows and its commit, the query would rightly replay it on restart
        last = max(b for b, got in live.batches.items() if got)
        wait_for(lambda: any(p["batchId"] >= last for p in live.progress))
    finally:
        live.stop()
    # a restart from the checkpoint goes on from where the query stopped, in every topic, new ones included
    produce(orders, "orders", [rows(12, 2)], partition=0)
    produce(orders, "orders_new", [rows(203, 2)], partition=0, tid="new")
    create_topic(open_store(orders), "orders_newer", SCHEMA, partitions=1)
    produce(orders, "orders_newer", [rows(400, 2)], partition=0, tid="newer")
    again = Run(spark, orders, ck, subscribePattern="orders.*", startingOffsets="earliest")
    assert again.ids == [12, 13, 203, 204, 400, 401]
    assert min(again.batches) > max(live.batches)


def test_an_available_now_run_leaves_topics_created_after_it_started(spark: Any, orders: str,
                                                                      tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    first = Run(spark, orders, ck, subscribePattern="orders.*")  # default start: latest
    assert first.ids == []
    create_topic(open_store(orders), "orders_b", SCHEMA, partitions=1)
    produce(orders, "orders_b", [rows(500, 3)], partition=0, tid="b")
    # the offsets checkpointed before orders_b existed still load; orders_b starts at its earliest offset
    second = Run(spark, orders, ck, subscribePattern="orders.*")
    assert second.ids == [500, 501, 502]


def test_a_checkpoint_naming_a_deleted_matching_topic_still_loads(spark: Any, orders: str, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    create_topic(open_store(orders), "orders_old", SCHEMA, partitions=1)
    produce(orders, "orders_old", [rows(600, 2)], partition=0, tid="old")
    first = Run(spark, orders, ck, subscribePattern="orders.*", startingOffsets="earliest")
    assert first.ids == sorted(ALL_IDS + [600, 601])
    delete_topic(TransactionCoordinator(open_store(orders)), "orders_old")
    produce(orders, "orders", [rows(12, 1)], partition=0)
    second = Run(spark, orders, ck, subscribePattern="orders.*", startingOffsets="earliest")
    assert second.ids == [12]
    end = json.loads(second.progress[-1]["sources"][0]["endOffset"])
    assert end == {"orders": {"0": 13, "1": 7}}
