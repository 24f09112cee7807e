"""Kafka parity of the sink: an integer ``partition`` column routes rows and is not stored, also on a write that
creates the topic (Spark's Kafka sink never stores it as a value)."""

from __future__ import annotations

from typing import Any

import pytest
from test_write_semantics import ids, save

from coordinator import get_topic, open_store, read_snapshot

pytestmark = pytest.mark.spark


def test_a_partition_column_routes_rows_on_a_write_that_creates_the_topic(spark: Any, lake: str) -> None:
    df = spark.range(12).selectExpr("id", "cast(id % 3 as int) as partition")
    save(df, lake, topic="fresh", numPartitions="3")
    meta = get_topic(open_store(lake), "fresh")
    assert meta.partitions == 3 and meta.schema.names == ["id"]
    table = read_snapshot(lake, ["fresh"])["fresh"]
    assert "partition" not in table.column_names
    placed = sorted(zip(table.column("id").to_pylist(), table.column("_partition").to_pylist(), strict=True))
    assert placed == [(i, i % 3) for i in range(12)]
    # the next write to the existing topic routes the same way
    save(spark.range(12, 15).selectExpr("id", "cast(2 as long) as partition"), lake, topic="fresh")
    table = read_snapshot(lake, ["fresh"])["fresh"]
    assert sorted(i for i, p in zip(table.column("id").to_pylist(), table.column("_partition").to_pylist(),
                                    strict=True) if p == 2) == [2, 5, 8, 11, 12, 13, 14]


def test_a_partition_the_new_topic_lacks_fails_the_write_naming_it(spark: Any, lake: str) -> None:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    df = spark.range(4).selectExpr("id", "cast(if(id = 3, 7, 0) as int) as partition")
    with pytest.raises((PySparkException, Py4JJavaError), match=r"column 'partition' names partition 7 of topic "
                                                                r"'small', which has 2"):
        save(df, lake, topic="small", numPartitions="2")
    assert ids(lake, "small") == []  # created by the write, but nothing published


def test_a_partition_column_of_another_type_is_data(spark: Any, lake: str) -> None:
    save(spark.range(3).selectExpr("id", "cast(id as string) as partition"), lake, topic="strs", numPartitions="2")
    table = read_snapshot(lake, ["strs"])["strs"]
    assert sorted(table.column("partition").to_pylist()) == ["0", "1", "2"]
