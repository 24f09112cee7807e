"""The sink's semantics coming from Spark's Kafka sink and from Delta: idempotent batch writes (``txnAppId`` /
``txnVersion``), several topics in one transaction (a ``topic`` column), an explicit ``partition`` column, few
files, nullability, nanosecond timestamps and case-insensitive column names."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from coordinator import (
    SchemaMismatchError,
    TransactionCoordinator,
    create_topic,
    open_store,
    read_snapshot,
)
from coordinator.layout import data_dir

pytestmark = pytest.mark.spark


def save(df: Any, lake: str, **options: str) -> None:
    w = df.write.format("txnlog").mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    w.save(lake)


def ids(lake: str, topic: str) -> list[int]:
    return sorted(read_snapshot(lake, [topic])[topic].column("id").to_pylist())


def files(lake: str, topic: str, partitions: int) -> int:
    store = open_store(lake)
    return sum(len(store.list(data_dir(topic, p))) for p in range(partitions))


def test_retried_txn_version_publishes_once(spark: Any, lake: str) -> None:
    df = spark.range(5).selectExpr("id", "'a' as tag")
    save(df, lake, topic="t", txnAppId="nightly", txnVersion="7")
    save(df, lake, topic="t", txnAppId="nightly", txnVersion="7")  # the retry after an unknown outcome
    save(df, lake, topic="t", txnAppId="nightly", txnVersion="6")  # an older version: skipped too
    assert ids(lake, "t") == [0, 1, 2, 3, 4]
    save(spark.range(5, 8).selectExpr("id", "'b' as tag"), lake, topic="t", txnAppId="nightly", txnVersion="8")
    assert ids(lake, "t") == list(range(8))
    save(df, lake, topic="t", txnAppId="other", txnVersion="7")  # another app id: its own versions
    assert len(ids(lake, "t")) == 13
    app = TransactionCoordinator(open_store(lake)).log.refresh().apps["nightly"]
    assert app.version == 8
    # ephemeral producers of finished jobs do not stay in the state
    assert not TransactionCoordinator(open_store(lake)).log.refresh().producers


def test_foreach_batch_with_the_batch_id_as_version_is_exactly_once(spark: Any, lake: str, tmp_path: Any) -> None:
    import json

    src = tmp_path / "in"
    src.mkdir()
    for f in range(3):
        (src / f"{f}.json").write_text("\n".join(json.dumps({"id": f * 10 + i}) for i in range(10)) + "\n")

    def write(batch: Any, batch_id: int) -> None:
        save(batch, lake, topic="fe", txnAppId="fe-job", txnVersion=str(batch_id))
        if batch_id == 1:  # as if the query died after the write, before Spark recorded the batch: replayed
            save(batch, lake, topic="fe", txnAppId="fe-job", txnVersion=str(batch_id))

    q = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(src)).writeStream
         .foreachBatch(write).option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    q.awaitTermination(240)
    assert ids(lake, "fe") == list(range(30))


def test_a_topic_column_writes_several_topics_in_one_transaction(spark: Any, lake: str) -> None:
    df = spark.range(20).selectExpr("id", "if(id % 2 = 0, 'even', 'odd') as topic", "cast(id % 3 as int) as partition")
    save(df, lake, numPartitions="3")
    assert ids(lake, "even") == list(range(0, 20, 2)) and ids(lake, "odd") == list(range(1, 20, 2))
    snap = read_snapshot(lake, ["even", "odd"])
    for t in ("even", "odd"):
        table = snap[t]
        assert "topic" not in table.column_names and "partition" not in table.column_names
        assert all(i % 3 == p for i, p in zip(table.column("id").to_pylist(), table.column("_partition").to_pylist(),
                                              strict=True))
    # one transaction: both topics' records carry one commit, and the coordinator decided one transaction
    times = {ts for t in ("even", "odd") for ts in snap[t].column("_timestamp").to_pylist()}
    assert len(times) == 1
    # the topic option wins over the column, as in Spark's Kafka sink
    save(spark.range(3).selectExpr("id", "'odd' as topic"), lake, topic="even")
    assert ids(lake, "even") == sorted(list(range(0, 20, 2)) + [0, 1, 2])


def test_bad_routing_values_fail_the_write_and_publish_nothing(spark: Any, lake: str) -> None:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    create_topic(open_store(lake), "r", pa.schema([("id", pa.int64())]), 2)
    with pytest.raises((PySparkException, Py4JJavaError), match="partition 5"):
        save(spark.range(3).selectExpr("id", "cast(5 as int) as partition"), lake, topic="r")
    with pytest.raises(Exception, match="option topic is missing"):
        save(spark.range(3), lake)
    assert ids(lake, "r") == []


def test_without_a_key_each_task_spreads_over_every_partition(spark: Any, lake: str) -> None:
    save(spark.range(0, 1000, 1, 2), lake, topic="wide", numPartitions="200")
    assert files(lake, "wide", 200) == 400  # two tasks, each a file per partition (as a keyed write)
    assert ids(lake, "wide") == list(range(1000))
    per = Counter(read_snapshot(lake, ["wide"])["wide"].column("_partition").to_pylist())
    assert len(per) == 200 and max(per.values()) - min(per.values()) <= 2  # each task's shares differ by one row


def test_topics_created_from_spark_are_nullable_and_not_null_topics_are_checked_on_the_driver(
    spark: Any, lake: str
) -> None:
    save(spark.range(3), lake, topic="nn")  # spark.range's id is NOT NULL in the DataFrame
    save(spark.createDataFrame([(None,)], "id long"), lake, topic="nn")  # the topic takes a null later
    assert read_snapshot(lake, ["nn"])["nn"].column("id").null_count == 1
    create_topic(open_store(lake), "strict", pa.schema([pa.field("id", pa.int64(), nullable=False)]), 1)
    with pytest.raises(Exception, match="may hold nulls but the topic declares them NOT NULL"):
        save(spark.createDataFrame([(1,)], "id long"), lake, topic="strict")
    save(spark.range(2), lake, topic="strict")  # a column Spark knows holds no nulls is fine
    assert ids(lake, "strict") == [0, 1]


def test_nanosecond_topics_and_case_insensitive_names(spark: Any, lake: str) -> None:
    create_topic(open_store(lake), "ns", pa.schema([("id", pa.int64()), ("at", pa.timestamp("ns", tz="UTC"))]), 1)
    when = dt.datetime(2026, 11, 21, 12, 30, 15, 123456, tzinfo=dt.UTC)
    save(spark.createDataFrame([(1, when)], "ID long, At timestamp"), lake, topic="ns")
    got = read_snapshot(lake, ["ns"])["ns"]
    assert got.column("id").to_pylist() == [1]
    assert got.column("at").to_pylist()[0] == when
    with pytest.raises(Exception, match="both match column"):
        save(spark.createDataFrame([(1, 2, when)], "id long, ID long, at timestamp"), lake, topic="ns")


def test_schema_errors_name_the_problem_before_any_task(lake: str) -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from txnsink import make_writer

    create_topic(open_store(lake), "s", pa.schema([("id", pa.int64())]), 1)
    bad = StructType([StructField("id", StringType())])
    with pytest.raises(SchemaMismatchError, match="mistyped columns"):
        make_writer({"path": lake, "topic": "s"}, bad, False)
    ok = StructType([StructField("ID", LongType())])
    assert make_writer({"path": lake, "topic": "s"}, ok, False).plan.renames == {"ID": "id"}
