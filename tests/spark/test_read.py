"""Batch reads through Spark: ``spark.read.format("txnlog")``. Test data is written with the core Python client."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import pkgutil
import threading
from importlib import import_module
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from read_helpers import SCHEMA, produce, rows

from coordinator import Producer, ProducerConfig, add_partitions, create_topic, faults, open_store
from coordinator.faults import InjectedCrash
from coordinator.layout import data_dir

pytestmark = pytest.mark.spark

META = [
    StructField("_topic", StringType(), False),
    StructField("_partition", IntegerType(), False),
    StructField("_offset", LongType(), True),
    StructField("_timestamp", TimestampType(), True),
    StructField("_producerTimestamp", TimestampType(), True),
]
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"




def reader(spark: Any, lake: str, **options: Any) -> Any:
    r = spark.read.format("txnlog")
    for k, v in options.items():
        r = r.option(k, v if isinstance(v, str) else json.dumps(v))
    return r.load(lake)


def ids(df: Any) -> list[int]:
    return sorted(r.id for r in df.select("id").collect())


@pytest.fixture
def orders(lake: str) -> str:
    """Topic ``orders`` with 2 partitions: p0 holds ids 0-9 (offsets 0-9, two transactions), p1 ids 100-104."""
    create_topic(open_store(lake), "orders", SCHEMA, partitions=2)
    produce(lake, "orders", [rows(0, 5), rows(5, 5)], partition=0)
    produce(lake, "orders", [rows(100, 5)], partition=1)
    return lake


@pytest.fixture
def pushdown(spark: Any, request: pytest.FixtureRequest) -> Any:
    old = spark.conf.get(PUSHDOWN_CONF)
    spark.conf.set(PUSHDOWN_CONF, str(getattr(request, "param", True)).lower())
    yield spark
    spark.conf.set(PUSHDOWN_CONF, old)


# -- registration -------------------------------------------------------------------------------------------


def test_format_is_discovered_the_way_spark_looks_for_it(spark: Any, orders: str) -> None:
    # Spark's lookup worker imports every top-level ``pyspark_*`` module and registers its DefaultSource
    found = {}
    for info in pkgutil.iter_modules():
        if info.name.startswith("pyspark_"):
            mod = import_module(info.name)
            if hasattr(mod, "DefaultSource"):
                found[mod.DefaultSource.name()] = info.name
    assert found.get("txnlog") == "pyspark_txnlog"
    # a fresh manager holds only what Spark discovered on its own, never what a test registered
    fresh = spark._jvm.org.apache.spark.sql.execution.datasources.DataSourceManager()
    assert fresh.dataSourceExists("txnlog") and not fresh.dataSourceExists("txnlog-nonexistent")
    assert reader(spark, orders, topic="orders").count() == 15


def test_explicit_registration_works_too(spark: Any, orders: str) -> None:
    from pyspark_txnlog import DefaultSource

    spark.dataSource.register(DefaultSource)
    assert ids(reader(spark, orders, topic="orders")) == list(range(10)) + list(range(100, 105))


# -- schema and rows ----------------------------------------------------------------------------------------


def test_schema_maps_arrow_types_and_nullability_and_rows_round_trip(spark: Any, lake: str) -> None:
    schema = pa.schema([
        pa.field("i", pa.int32(), nullable=False),
        pa.field("l", pa.int64()),
        pa.field("d", pa.float64()),
        pa.field("s", pa.string(), nullable=False),
        pa.field("b", pa.bool_()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("ntz", pa.timestamp("ns")),
        pa.field("day", pa.date32()),
        pa.field("dec", pa.decimal128(10, 2)),
        pa.field("bin", pa.binary()),
    ])
    create_topic(open_store(lake), "typed", schema, partitions=1)
    when = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC)
    data = [{"i": 1, "l": None, "d": 1.5, "s": "x", "b": True, "ts": when, "ntz": dt.datetime(2024, 1, 2, 3, 4),
             "day": dt.date(2024, 1, 2), "dec": decimal.Decimal("12.34"), "bin": b"\x00\x01"},
            {"i": 2, "l": 7, "d": None, "s": "y", "b": None, "ts": None, "ntz": None, "day": None, "dec": None,
             "bin": None}]
    produce(lake, "typed", [data])
    df = reader(spark, lake, topic="typed")
    assert df.schema == StructType([
        StructField("i", IntegerType(), False),
        StructField("l", LongType(), True),
        StructField("d", DoubleType(), True),
        StructField("s", StringType(), False),
        StructField("b", BooleanType(), True),
        StructField("ts", TimestampType(), True),
        StructField("ntz", TimestampNTZType(), True),
        StructField("day", DateType(), True),
        StructField("dec", DecimalType(10, 2), True),
        StructField("bin", BinaryType(), True),
        *META,
    ])
    got = df.drop("_timestamp", "_producerTimestamp").orderBy("i")
    expected = spark.createDataFrame(
        [(1, None, 1.5, "x", True, when, dt.datetime(2024, 1, 2, 3, 4), dt.date(2024, 1, 2),
          decimal.Decimal("12.34"), bytearray(b"\x00\x01"), "typed", 0, 0),
         (2, 7, None, "y", None, None, None, None, None, None, "typed", 0, 1)],
        got.schema,
    )
    assert_df_equality(got, expected)
    assert df.filter("_timestamp is null or _producerTimestamp is null").count() == 0


def test_metadata_columns_hold_topic_partition_offsets_and_commit_time(spark: Any, orders: str) -> None:
    before = dt.datetime.now(dt.UTC).timestamp()
    produce(orders, "orders", [rows(10, 2)], partition=0)
    after = dt.datetime.now(dt.UTC).timestamp()
    df = reader(spark, orders, topic="orders")
    got = df.select("id", "_topic", "_partition", "_offset").orderBy("id")
    expected = spark.createDataFrame(
        [(i, "orders", 0, i) for i in range(12)] + [(100 + i, "orders", 1, i) for i in range(5)],
        got.schema,
    )
    assert_df_equality(got, expected)
    # one transaction, one commit time, taken while it committed
    commit = df.filter("id >= 10 and id < 100").select(F.unix_micros("_timestamp").alias("us")).distinct().collect()
    assert len(commit) == 1
    assert before - 0.001 <= commit[0].us / 1e6 <= after + 0.001
    older = df.filter("id < 10").agg(F.max(F.unix_micros("_timestamp"))).collect()[0][0]
    assert older <= commit[0].us


# -- several topics -----------------------------------------------------------------------------------------


def test_topics_with_different_columns_union_by_name_with_nulls(spark: Any, orders: str) -> None:
    other = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.float64())])
    create_topic(open_store(orders), "payments", other, partitions=1)
    produce(orders, "payments", [[{"id": 7, "amount": 2.5}]], tid="pay")
    df = reader(spark, orders, topic="orders, payments")
    assert [(f.name, f.nullable) for f in df.schema.fields[:3]] == [("id", False), ("name", True),
                                                                     ("amount", True)]
    got = df.filter("id = 7").select("id", "name", "amount", "_topic").orderBy("_topic")
    expected = spark.createDataFrame([(7, "n7", None, "orders"), (7, None, 2.5, "payments")], got.schema)
    assert_df_equality(got, expected)
    assert df.count() == 16


def test_topics_typing_a_column_differently_are_refused(spark: Any, orders: str) -> None:
    create_topic(open_store(orders), "clash", pa.schema([pa.field("id", pa.string())]), partitions=1)
    with pytest.raises(AnalysisException, match=r"column 'id' is int64 in topic 'orders' but string in topic 'clash'"):
        reader(spark, orders, topic="orders,clash")


# -- offsets ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("starting", "ending", "expected"), [
    (None, None, list(range(10)) + list(range(100, 105))),
    ("earliest", "latest", list(range(10)) + list(range(100, 105))),
    ("latest", None, []),
    ("earliest", "earliest", []),
    ({"orders": {"0": 3}}, None, list(range(3, 10)) + list(range(100, 105))),
    (None, {"orders": {"0": 4, "1": 2}}, list(range(4)) + [100, 101]),
    ({"orders": {"0": 2, "1": 1}}, {"orders": {"0": 7, "1": 1}}, list(range(2, 7))),
    ({"orders": {"0": -1, "1": -2}}, {"orders": {"0": -1, "1": -1}}, list(range(100, 105))),
    ({"orders": {"0": 10}}, None, list(range(100, 105))),
])
def test_starting_and_ending_offsets(spark: Any, orders: str, starting: Any, ending: Any,
                                     expected: list[int]) -> None:
    opts: dict[str, Any] = {"topic": "orders"}
    if starting is not None:
        opts["startingOffsets"] = starting
    if ending is not None:
        opts["endingOffsets"] = ending
    assert ids(reader(spark, orders, **opts)) == expected


def test_option_names_are_case_insensitive(spark: Any, orders: str) -> None:
    df = reader(spark, orders, TOPIC="orders", STARTINGOFFSETS='{"orders": {"1": 3}}', isolationlevel="READ_COMMITTED")
    assert ids(df) == list(range(10)) + [103, 104]


@pytest.mark.parametrize(("options", "message"), [
    ({"isolationLevel": "dirty"}, r"'isolationLevel' = 'dirty'"),
    ({"startingOffsets": "beginning"}, r"'startingOffsets' = 'beginning'"),
    ({"endingOffsets": "{not json"}, r"'endingOffsets' = '\{not json'"),
    ({"startingOffsets": '{"orders": {"x": 1}}'}, r"partition 'x' of 'orders' is not a non-negative integer"),
    ({"startingOffsets": '{"orders": {"0": -5}}'}, r"offset -5 of orders/0 must be an integer >= 0"),
    ({"startingOffsets": '{"payments": {"0": 1}}'}, r"names topic 'payments'"),
    ({"maxPartitionBytes": "lots"}, r"'maxPartitionBytes' = 'lots' is not an integer"),
    ({"minPartitions": "0"}, r"'minPartitions' = '0' must be a positive integer"),
    ({"maxRecordsPerTrigger": "-3"}, r"'maxRecordsPerTrigger' = '-3' must be a positive integer"),
    ({"groupId": "../escape"}, r"'groupId' = '../escape'"),
    ({"startingOffset": "earliest"}, r"unknown option 'startingoffset' \(value 'earliest'\)"),
    ({"topic": "a/b"}, r"'topic' = 'a/b'"),
    ({"topic": " , "}, r"'topic' has an empty name"),
    ({"topic": "missing"}, r"topic 'missing' does not exist"),
])
def test_bad_options_fail_at_load_naming_key_and_value(spark: Any, orders: str, options: dict[str, str],
                                                        message: str) -> None:
    with pytest.raises(AnalysisException, match=message):
        reader(spark, orders, **{"topic": "orders", **options})


def test_missing_topic_option_fails(spark: Any, orders: str) -> None:
    with pytest.raises(AnalysisException, match=r"option 'topic' is missing"):
        spark.read.format("txnlog").load(orders)


@pytest.mark.parametrize(("options", "message"), [
    ({"startingOffsets": '{"orders": {"0": 11}}'},
     r"offset 11 of orders/0 is outside the partition's offsets \[0, 10\]"),
    ({"endingOffsets": '{"orders": {"1": 6}}'}, r"'endingOffsets' = '\{\"orders\": \{\"1\": 6\}\}'"),
    ({"startingOffsets": '{"orders": {"5": 0}}'}, r"names partition 5 of topic 'orders', which has 2 partitions"),
    ({"startingOffsets": '{"orders": {"0": 6}}', "endingOffsets": '{"orders": {"0": 4}}'},
     r"starts orders/0 at 6, after option 'endingOffsets'"),
])
def test_offsets_that_do_not_fit_the_topic_fail_when_planned(spark: Any, orders: str, options: dict[str, str],
                                                             message: str) -> None:
    df = reader(spark, orders, **{"topic": "orders", **options})
    with pytest.raises(AnalysisException, match=message):
        df.collect()


# -- isolation ----------------------------------------------------------------------------------------------


@pytest.fixture
def with_open_and_aborted(orders: str) -> str:
    """``orders`` plus an aborted transaction (ids 500-502, p0) and an open one (ids 600-601, p1)."""
    aborted = Producer(orders, "aborter")
    aborted.init_transactions()
    aborted.begin_transaction()
    aborted.send("orders", rows(500, 3), partition=0)
    aborted.flush()
    aborted.abort_transaction()
    hanging = Producer(orders, "hanging")
    hanging.init_transactions()
    hanging.begin_transaction()
    hanging.send("orders", rows(600, 2), partition=1)
    hanging.flush()
    # committed after both: must be visible, never held back by the open transaction
    produce(orders, "orders", [rows(10, 1)], partition=1, tid="late")
    return orders


def test_read_committed_hides_aborted_and_open_transactions(spark: Any, with_open_and_aborted: str) -> None:
    for opts in ({}, {"isolationLevel": "read_committed"}):
        df = reader(spark, with_open_and_aborted, topic="orders", **opts)
        assert ids(df) == list(range(11)) + list(range(100, 105))
        assert df.filter("_offset is null").count() == 0


def test_read_uncommitted_adds_staged_records_with_null_offsets(spark: Any, with_open_and_aborted: str) -> None:
    df = reader(spark, with_open_and_aborted, topic="orders", isolationLevel="read_uncommitted")
    assert ids(df) == list(range(11)) + list(range(100, 105)) + [500, 501, 502, 600, 601]
    staged = df.filter("_offset is null").select("id", "_partition", "_timestamp").orderBy("id")
    expected = spark.createDataFrame([(500, 0, None), (501, 0, None), (502, 0, None), (600, 1, None),
                                      (601, 1, None)], staged.schema)
    assert_df_equality(staged, expected)
    assert df.filter("_offset is not null").count() == 16


def test_read_uncommitted_during_a_compaction_never_returns_its_merged_rows(
    spark: Any, with_open_and_aborted: str
) -> None:
    """A read_uncommitted read planned while a compaction of p0 has written its merged file (ids 0-9) but not yet
    published it returns each committed row once, with its offset: before, the merged file counted as staged and
    ids 0-9 came a second time with null offsets."""
    from coordinator import TransactionCoordinator
    from coordinator.maintenance import compact_partition

    got: list[Any] = []

    def at(name: str) -> None:
        if name == "txnlog.entry.before" and not got:
            with faults.injected(None):
                got.extend(reader(spark, with_open_and_aborted, topic="orders",
                                  isolationLevel="read_uncommitted").select("id", "_offset").collect())

    with faults.injected(at):
        report = compact_partition(TransactionCoordinator(open_store(with_open_and_aborted)), "orders", 0)
    assert report.merged_groups == 1
    assert sorted(r.id for r in got) == list(range(11)) + list(range(100, 105)) + [500, 501, 502, 600, 601]
    assert sorted(r.id for r in got if r._offset is None) == [500, 501, 502, 600, 601]


# -- planning -----------------------------------------------------------------------------------------------


@pytest.fixture
def many_segments(lake: str) -> str:
    """Topic ``big`` (1 partition) with 12 committed segments of 50 rows each: ids 0-599."""
    create_topic(open_store(lake), "big", SCHEMA, partitions=1)
    produce(lake, "big", [rows(i * 50, 50) for i in range(12)])
    return lake


def test_one_partition_with_many_segments_reads_in_parallel(spark: Any, many_segments: str) -> None:
    whole = reader(spark, many_segments, topic="big")
    assert whole.rdd.getNumPartitions() == 1
    seg_bytes = sum(len(open_store(many_segments).get(f"{data_dir('big', 0)}/{n}"))
                    for n in open_store(many_segments).list(data_dir("big", 0))) // 12
    split = reader(spark, many_segments, topic="big", maxPartitionBytes=str(seg_bytes * 3))
    assert 3 <= split.rdd.getNumPartitions() <= 6
    assert_df_equality(split, whole, ignore_row_order=True)
    by_min = reader(spark, many_segments, topic="big", minPartitions="4")
    assert by_min.rdd.getNumPartitions() >= 4
    assert ids(by_min) == list(range(600))
    # every input partition holds a contiguous offset range, in order
    spans = by_min.rdd.mapPartitions(lambda it: [sorted(r._offset for r in it)]).collect()
    assert all(s == list(range(s[0], s[0] + len(s))) for s in spans if s)
    assert sorted(o for s in spans for o in s) == list(range(600))


def test_partial_segment_ranges_read_exactly(spark: Any, many_segments: str) -> None:
    df = reader(spark, many_segments, topic="big", startingOffsets={"big": {"0": 73}},
                endingOffsets={"big": {"0": 377}}, maxPartitionBytes="1")
    assert df.rdd.getNumPartitions() == 7
    assert ids(df) == list(range(73, 377))


# -- snapshot consistency -----------------------------------------------------------------------------------


def _two_topic_lake(lake: str) -> None:
    store = open_store(lake)
    create_topic(store, "left", SCHEMA, partitions=2)
    create_topic(store, "right", SCHEMA, partitions=1)


def test_a_transaction_torn_by_a_crash_is_read_entirely(spark: Any, lake: str) -> None:
    _two_topic_lake(lake)
    producer = Producer(lake, "torn")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("left", rows(0, 3), partition=0)
    producer.send("left", rows(3, 3), partition=1)
    producer.send("right", rows(6, 3), partition=0)
    seen: list[str] = []

    def crash_on_second_marker(point: str) -> None:
        if point == "record.before":
            seen.append(point)
            if len(seen) == 2:
                raise InjectedCrash(point)

    with faults.injected(crash_on_second_marker), pytest.raises(InjectedCrash):
        producer.commit_transaction()
    # the commit point was written and one partition record exists: a reader must show all of it
    df = reader(spark, lake, topic="left,right")
    assert ids(df) == list(range(9))


def test_reads_never_see_part_of_a_transaction(spark: Any, lake: str) -> None:
    _two_topic_lake(lake)
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            producer = Producer(lake, "busy", config=ProducerConfig(segment_target_bytes=1 << 30))
            producer.init_transactions()
            n = 0
            while not stop.is_set() and n < 200:
                with producer.transaction():
                    for topic, p in (("left", 0), ("left", 1), ("right", 0)):
                        producer.send(topic, [{"id": n, "name": f"{topic}{p}"}], partition=p)
                n += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        counts = []
        for _ in range(4):
            got = reader(spark, lake, topic="left,right").groupBy("id").count().collect()
            counts.append(len(got))
            assert all(r["count"] == 3 for r in got), sorted((r["id"], r["count"]) for r in got if r["count"] != 3)
            assert sorted(r["id"] for r in got) == list(range(len(got)))
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert counts[-1] > 0


def test_partitions_added_later_are_read(spark: Any, orders: str) -> None:
    add_partitions(open_store(orders), "orders", 3)
    produce(orders, "orders", [rows(200, 2)], partition=2, tid="p2")
    df = reader(spark, orders, topic="orders", startingOffsets={"orders": {"2": 1}})
    assert ids(df) == list(range(10)) + list(range(100, 105)) + [201]


# -- S3 -----------------------------------------------------------------------------------------------------


@pytest.mark.s3
def test_batch_read_from_s3(spark: Any, s3_lake: Any) -> None:
    url, options = s3_lake.url, dict(s3_lake.options)
    create_topic(open_store(url, options), "orders", SCHEMA, partitions=2)
    produce(url, "orders", [rows(0, 4)], partition=0, options=options)
    produce(url, "orders", [rows(4, 4)], partition=1, options=options, tid="w2")
    df = reader(spark, url, topic="orders", **options)
    assert ids(df) == list(range(8))
    assert ids(df.filter("_partition = 1 and _offset >= 2")) == [6, 7]


@pytest.mark.s3
def test_s3_credentials_never_show_in_errors_or_reprs(spark: Any, s3_lake: Any) -> None:
    from txnsource import make_reader, read_schema

    url, options = s3_lake.url, dict(s3_lake.options)
    create_topic(open_store(url, options), "orders", SCHEMA, partitions=1)
    produce(url, "orders", [rows(0, 3)], options=options)
    secret = options["s3.secret"]
    with pytest.raises(AnalysisException, match="topic 'nope' does not exist") as err:
        reader(spark, url, topic="nope", **options)
    assert secret not in str(err.value)
    with pytest.raises(AnalysisException, match=r"unknown option 's3.keys'") as err:
        reader(spark, url, topic="orders", **{**options, "s3.keys": secret})
    assert secret not in str(err.value)
    spark_options = {"path": url, "topic": "orders", **options}
    batch = make_reader(spark_options, read_schema(spark_options))
    parts = batch.partitions()
    assert len(parts) == 1
    for obj in (batch, batch.options, *parts):
        assert secret not in repr(obj) and options["s3.key"] not in repr(obj)
