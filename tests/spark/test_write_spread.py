"""Unkeyed Spark writes spread every task's rows evenly over the topic's partitions, on both write paths: the data
source (``format("txnlog")``), the write rule of ``txnsink.enable_native`` and ``txnsink.write``. Before, each task
wrote all its rows into one partition: a one-partition DataFrame put 1,000 of 1,000 rows into one partition of 4,
and two input partitions used 2 of 4."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import txnsink
from coordinator import open_store, read_snapshot
from coordinator.layout import data_dir

pytestmark = pytest.mark.spark

PATHS = ["python", "rule", "native"]
NATIVE = re.compile(r"~spark-\d{5}-\d{3}-[0-9a-f]{16}-\d{5}\.parquet$")


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest, spark: Any) -> Iterator[str]:
    if request.param == "rule":
        txnsink.enable_native(spark)
    try:
        yield str(request.param)
    finally:
        if request.param == "rule":
            txnsink.disable_native(spark)


def append(df: Any, lake: str, topic: str, path: str, **options: str) -> None:
    if path == "native":
        assert txnsink.write(df, lake, topic, writePath="native", **options).path == "native"
        return
    w = df.write.format("txnlog").mode("append").option("topic", topic)
    for k, v in options.items():
        w = w.option(k, v)
    w.save(lake)


def placement(lake: str, topic: str, partitions: int, path: str) -> Counter[int]:
    """Rows per partition; checks which path wrote the files, and that offsets are dense."""
    table = read_snapshot(lake, [topic])[topic]
    store = open_store(lake)
    names = [n for p in range(partitions) for n in store.list(data_dir(topic, p)) if n.endswith(".parquet")]
    assert names and all(bool(NATIVE.search(n)) == (path != "python") for n in names), names
    rows = table.to_pylist()
    for p in range(partitions):
        offs = [r["_offset"] for r in rows if r["_partition"] == p]
        assert sorted(offs) == list(range(len(offs)))
    return Counter(r["_partition"] for r in rows)


def ids_in_order(lake: str, topic: str, partitions: int) -> None:
    """Within each partition (in offset order), every task's ids come in the task's order."""
    rows = read_snapshot(lake, [topic])[topic].to_pylist()
    for p in range(partitions):
        ids = [r["id"] for r in sorted(rows, key=lambda r: r["_offset"]) if r["_partition"] == p]
        by_task: dict[int, list[int]] = {}
        for i in ids:
            by_task.setdefault(i // 10_000, []).append(i)
        assert all(v == sorted(v) for v in by_task.values())


def test_a_one_partition_dataframe_spreads_evenly(spark: Any, lake: str, path: str) -> None:
    append(spark.range(0, 1000, 1, 1), lake, "one", path, numPartitions="4")
    assert sorted(placement(lake, "one", 4, path).values()) == [250, 250, 250, 250]
    ids_in_order(lake, "one", 4)


def test_two_input_partitions_use_every_partition(spark: Any, lake: str, path: str) -> None:
    df = spark.range(0, 1000, 1, 2).selectExpr("id + (spark_partition_id() * 10000) as id")
    append(df, lake, "two", path, numPartitions="4")
    assert sorted(placement(lake, "two", 4, path).values()) == [250, 250, 250, 250]
    ids_in_order(lake, "two", 4)


def test_ten_rows_use_all_four_partitions(spark: Any, lake: str, path: str) -> None:
    append(spark.range(0, 10, 1, 1), lake, "small", path, numPartitions="4")
    assert sorted(placement(lake, "small", 4, path).values()) == [2, 2, 3, 3]


def test_a_coalesced_input_spreads_evenly(spark: Any, lake: str, path: str) -> None:
    df = spark.range(0, 1200, 1, 6).coalesce(1)
    append(df, lake, "merged", path, numPartitions="3")
    assert sorted(placement(lake, "merged", 3, path).values()) == [400, 400, 400]


def test_a_one_partition_topic_takes_every_row(spark: Any, lake: str, path: str) -> None:
    append(spark.range(0, 50, 1, 2), lake, "single", path, numPartitions="1")
    assert placement(lake, "single", 1, path) == Counter({0: 50})
