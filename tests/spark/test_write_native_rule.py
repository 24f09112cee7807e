"""``txnsink.enable_native``: ``df.write.format("txnlog")`` batch appends written by Spark's own Parquet writer and
published as one transaction, with the data source's options, semantics and errors, and the data source wherever
the native path does not apply."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import test_write_native as base  # tests/spark is on sys.path (rootdir-relative test modules)

import txnsink
from coordinator import (
    InvalidOptionError,
    Producer,
    TopicNotFoundError,
    TransactionCoordinator,
    create_topic,
    faults,
    get_topic,
    open_store,
)

pytestmark = pytest.mark.spark

frame, topic_rows, data_files, same_everywhere = base.frame, base.topic_rows, base.data_files, base.same_everywhere

#: segment names of the native path (``spark-<split>-<part>-<tag>-<n>``) and of the data source's tasks
#: (``spark-<partition>-<attempt>-<task attempt>-<tag>-<n>``)
NATIVE = re.compile(r"~spark-\d{5}-\d{3}-[0-9a-f]{16}-\d{5}\.parquet$")
PYTHON = re.compile(r"~spark-\d{5}-\d+-\d+-[0-9a-f]{16}-\d{5}\.parquet$")


def writers(lake: str, topic: str, partitions: int) -> set[str]:
    """Which path wrote each data file of ``topic``: ``native``, ``python``."""
    names = data_files(lake, topic, partitions)
    got = {"native" if NATIVE.search(n) else "python" if PYTHON.search(n) else n for n in names}
    assert got <= {"native", "python"}, got
    return got


def append(df: Any, lake: str, topic: str, **options: str) -> None:
    w = df.write.format("txnlog").mode("append").option("topic", topic)
    for k, v in options.items():
        w = w.option(k, v)
    w.save(lake)


@contextlib.contextmanager
def everywhere(injector: Any) -> Iterator[None]:
    """``injector`` in every thread: the rule writes from the thread py4j calls it on."""
    faults.install(injector, all_threads=True)
    try:
        yield
    finally:
        faults.install(None, all_threads=True)


@pytest.fixture
def native(spark: Any) -> Iterator[Any]:
    txnsink.enable_native(spark)
    txnsink.enable_native(spark)  # a second call changes nothing
    try:
        yield spark
    finally:
        txnsink.disable_native(spark)
    assert not txnsink.native_enabled(spark)


def test_an_append_is_written_natively_and_reads_back_identically(native: Any, lake: str, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="txnsink")
    assert txnsink.native_enabled(native)
    df = frame(native, 3000, parts=3)
    append(df, lake, "orders", numPartitions="3")
    assert any("written by the native path" in r.getMessage() for r in caplog.records)
    assert writers(lake, "orders", 3) == {"native"}
    core = same_everywhere(native, lake, "orders", df)
    assert set(core.column("_partition").to_pylist()) == {0, 1, 2}  # task i's files in partition (r + i) % 3
    append(df, lake, "orders")  # a second append: one more transaction, offsets go on
    assert topic_rows(lake, "orders").num_rows == 6000
    assert len(TransactionCoordinator(open_store(lake)).log.refresh().producers) == 0  # ephemeral producers end


def test_write_path_python_and_disable_keep_the_data_source(spark: Any, lake: str) -> None:
    txnsink.enable_native(spark)
    try:
        append(frame(spark, 100), lake, "t", numPartitions="2", writePath="python")
        assert writers(lake, "t", 2) == {"python"}
    finally:
        txnsink.disable_native(spark)
    append(frame(spark, 100), lake, "u", numPartitions="2")
    assert writers(lake, "u", 2) == {"python"}
    assert topic_rows(lake, "t").num_rows == topic_rows(lake, "u").num_rows == 100


def test_keyed_appends_go_native_where_the_jvm_partitioner_places_them(native: Any, lake: str) -> None:
    df = frame(native, 2000, parts=2)
    append(df, lake, "nat", numPartitions="4", partitionKey="customer")
    append(df, lake, "py", numPartitions="4", partitionKey="customer", writePath="python")
    assert writers(lake, "nat", 4) == {"native"}
    assert writers(lake, "py", 4) == {"python"}

    def placement(topic: str) -> dict[int, int]:
        t = topic_rows(lake, topic)
        return dict(zip(t.column("id").to_pylist(), t.column("_partition").to_pylist(), strict=True))

    assert placement("nat") == placement("py")  # the topic's partitioner, wherever the rows were hashed
    assert len(set(placement("nat").values())) == 4
    # a decimal key has no JVM rule: `auto` leaves it to the data source, `native` takes the partitioner UDF
    dec = df.selectExpr("id", "cast(id % 17 AS decimal(9, 1)) AS amount")
    append(dec, lake, "dec", numPartitions="4", partitionKey="amount")
    assert writers(lake, "dec", 4) == {"python"}
    append(dec, lake, "dec", partitionKey="amount", writePath="native")
    assert writers(lake, "dec", 4) == {"native", "python"}
    rows = topic_rows(lake, "dec").to_pylist()
    at: dict[int, set[int]] = {}
    for r in rows:
        at.setdefault(r["id"], set()).add(r["_partition"])
    assert len(rows) == 4000 and all(len(ps) == 1 for ps in at.values())


def test_where_native_cannot_write_auto_falls_back_and_native_fails_naming_why(native: Any, lake: str,
                                                                                caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="txnsink")
    store = open_store(lake)
    # a topic of nanosecond timestamps: Spark's Parquet writer writes microseconds
    ns = pa.timestamp("ns", tz="UTC")
    create_topic(store, "ns", pa.schema([("id", pa.int64()), ("at", ns)]), 1)
    prod = Producer(lake, "seed")
    prod.init_transactions()
    with prod.transaction():
        prod.send("ns", pa.table({"id": pa.array([-1], pa.int64()), "at": pa.array([0], ns)}))
    df = native.range(0, 50, 1, 2).selectExpr("id", "timestamp_seconds(id) AS at")
    append(df, lake, "ns")
    assert topic_rows(lake, "ns").num_rows == 51
    assert any("through the Python data source" in r.getMessage() and "'at'" in r.getMessage()
               for r in caplog.records)
    with pytest.raises(Exception, match="writePath' = 'native' cannot write this: column 'at'"):
        append(df, lake, "ns", writePath="native")
    assert topic_rows(lake, "ns").num_rows == 51
    with pytest.raises(Exception, match="writePath' = 'native' cannot write this: an in-memory store"):
        append(df, "memory://rule-test", "t", writePath="native")
    # a topic column routes rows: the data source writes them
    routed = native.range(0, 20, 1, 2).selectExpr("id", "IF(id % 2 = 0, 'even', 'odd') AS topic")
    routed.write.format("txnlog").mode("append").save(lake)
    assert topic_rows(lake, "even").num_rows == topic_rows(lake, "odd").num_rows == 10


def test_native_option_without_the_rule_is_refused(spark: Any, lake: str) -> None:
    assert not txnsink.native_enabled(spark)
    with pytest.raises(Exception, match="txnsink.enable_native"):
        append(frame(spark, 10), lake, "t", writePath="native")
    with pytest.raises(Exception, match="writePath='sometimes' is not one of auto, native, python"):
        append(frame(spark, 10), lake, "t", writePath="sometimes")
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType([StructField("id", LongType())])
    with pytest.raises(InvalidOptionError, match=r"txnsink\.enable_native\(spark\) is not in force"):
        txnsink.make_stream_writer({"path": lake, "topic": "t", "writePath": "native"}, schema, False)
    with pytest.raises(TopicNotFoundError):  # refused before anything reached the store
        get_topic(open_store(lake), "t")


def test_txn_app_id_and_version_publish_once(native: Any, lake: str) -> None:
    df = frame(native, 100)
    for version in ("3", "3", "2"):
        append(df, lake, "t", txnAppId="job", txnVersion=version)
    assert topic_rows(lake, "t").num_rows == 100
    append(df, lake, "t", txnAppId="job", txnVersion="4")
    assert topic_rows(lake, "t").num_rows == 200
    assert writers(lake, "t", 1) == {"native"}


def test_a_failure_before_the_commit_reaches_save_and_leaves_nothing_visible(native: Any, lake: str) -> None:
    append(frame(native, 10), lake, "t", numPartitions="2")

    def crash(name: str) -> None:
        if name == "native.before_commit":
            raise RuntimeError("driver failed before the commit")

    with everywhere(crash), pytest.raises(Exception, match="driver failed before the commit"):
        append(frame(native, 500), lake, "t")
    assert topic_rows(lake, "t").num_rows == 10
    assert len(data_files(lake, "t", 2)) == 4  # the failed write's files are deleted, the first write's kept
    assert os.listdir(os.path.join(lake, "_native-staging")) == []
    assert len(TransactionCoordinator(open_store(lake)).log.refresh().producers) == 0


def test_a_fenced_transactional_id_publishes_nothing(native: Any, lake: str) -> None:
    append(frame(native, 10), lake, "t", transactionalId="app")

    def newer_writer(name: str) -> None:
        if name == "native.before_commit":
            TransactionCoordinator(open_store(lake)).init_producer("app")  # a newer instance of the same id

    with everywhere(newer_writer), pytest.raises(Exception, match="(?i)fenced"):
        append(frame(native, 500), lake, "t", transactionalId="app")
    assert topic_rows(lake, "t").num_rows == 10


def test_overwrite_is_still_refused(native: Any, lake: str) -> None:
    append(frame(native, 10), lake, "t")
    with pytest.raises(Exception, match="append-only"):
        frame(native, 10).write.format("txnlog").mode("overwrite").option("topic", "t").save(lake)
    assert topic_rows(lake, "t").num_rows == 10


def test_txnlog_to_txnlog_with_both_rules(native: Any, lake: str) -> None:
    import txnsource

    df = frame(native, 1000, parts=2)
    append(df, lake, "src", numPartitions="2")
    txnsource.enable_native(native)
    try:
        src = native.read.format("txnlog").option("topic", "src").load(lake)
        src.select(*df.columns).write.format("txnlog").option("topic", "dst").mode("append").save(lake)
        src.select(*df.columns).write.format("txnlog").option("topic", "src").mode("append").save(lake)
    finally:
        txnsource.disable_native(native)
    assert writers(lake, "dst", 1) == {"native"}
    same_everywhere(native, lake, "dst", df)
    assert topic_rows(lake, "src").num_rows == 2000  # a topic appended to from its own snapshot: read once
