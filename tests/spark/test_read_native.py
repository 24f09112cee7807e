"""The native read path (``txnsource.read``): Spark's own Parquet reader, the same rows and schema as
``spark.read.format("txnlog")``, and the fallbacks to the Python reader."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import uuid
from typing import Any

import pyarrow as pa
import pytest
import test_read as base  # tests/spark is on sys.path (rootdir-relative test modules)
from chispa import assert_df_equality
from pyspark.errors import AnalysisException, StreamingQueryException

import txnsource
from coordinator import (
    CorruptLogError,
    InvalidOptionError,
    MemoryStore,
    Producer,
    ProducerConfig,
    SchemaMismatchError,
    TransactionCoordinator,
    create_topic,
    open_store,
)
from coordinator.layout import data_dir
from coordinator.maintenance import compact_partition
from txnsource.native import plan_scans, spark_root
from txnsource.options import parse_options
from txnsource.pin import take_pin
from txnsource.scans import COMPUTED

pytestmark = pytest.mark.spark

SCHEMA, produce, rows, reader, ids = base.SCHEMA, base.produce, base.rows, base.reader, base.ids
orders, many_segments, with_open_and_aborted = base.orders, base.many_segments, base.with_open_and_aborted


def native(spark: Any, lake: str, schema: Any = None, **options: Any) -> Any:
    opts = {k: v if isinstance(v, str) else json.dumps(v) for k, v in options.items()}
    return txnsource.read(spark, lake, schema, readPath="native", **opts)


def same_as_python(spark: Any, lake: str, schema: Any = None, **options: Any) -> Any:
    """Read natively and through the data source; assert equal schemas and rows; return the native DataFrame."""
    nat = native(spark, lake, schema, **options)
    assert nat.inputFiles() or nat.isEmpty(), "not read by Spark's Parquet reader"
    py = reader(spark, lake, **options) if schema is None else schema_reader(spark, lake, schema, **options)
    assert nat.schema.fields == py.schema.fields
    assert_df_equality(nat, py, ignore_row_order=True)
    return nat


def schema_reader(spark: Any, lake: str, schema: str, **options: Any) -> Any:
    r = spark.read.format("txnlog").schema(schema)
    for k, v in options.items():
        r = r.option(k, v if isinstance(v, str) else json.dumps(v))
    return r.load(lake)


def read_columns(df: Any) -> list[str]:
    """The topic columns Spark's Parquet scans of ``df`` read (from its physical plan)."""
    plan = str(df._jdf.queryExecution().executedPlan().toString())
    schemas = re.findall(r"ReadSchema: struct<([^>]*)>", plan)
    assert schemas, plan
    # the metadata columns the segment format computes are in its read schema, never in the files
    return sorted({f.split(":")[0] for s in schemas for f in s.split(",")
                   if f and not f.startswith("_tmp_metadata") and f.split(":")[0] not in COMPUTED})


# -- same rows, same schema ----------------------------------------------------------------------------------


def test_committed_rows_of_every_partition_without_aborted_or_open_ones(spark: Any,
                                                                      with_open_and_aborted: str) -> None:
    nat = same_as_python(spark, with_open_and_aborted, topic="orders")
    assert ids(nat) == list(range(11)) + list(range(100, 105))
    assert sorted(r._offset for r in nat.where("_partition = 1").collect()) == list(range(6))


@pytest.mark.parametrize(("starting", "ending"), [
    ({"big": {"0": 73}}, {"big": {"0": 377}}),
    ({"big": {"0": 50}}, {"big": {"0": 100}}),
    ({"big": {"0": 599}}, None),
    ({"big": {"0": 120}}, {"big": {"0": 120}}),
])
def test_offset_ranges_inside_segments(spark: Any, many_segments: str, starting: Any, ending: Any) -> None:
    opts: dict[str, Any] = {"topic": "big", "startingOffsets": starting}
    if ending is not None:
        opts["endingOffsets"] = ending
    nat = same_as_python(spark, many_segments, **opts)
    hi = 600 if ending is None else ending["big"]["0"]
    assert sorted(r._offset for r in nat.collect()) == list(range(starting["big"]["0"], hi))


def test_compacted_segments_keep_each_transactions_commit_time(spark: Any, with_open_and_aborted: str) -> None:
    lake = with_open_and_aborted
    produce(lake, "orders", [rows(20, 2), rows(22, 2)], partition=0, tid="more")
    before = reader(spark, lake, topic="orders").select("_offset", "_timestamp").where("_partition = 0").collect()
    compact_partition(TransactionCoordinator(open_store(lake)), "orders", 0, target_bytes=1 << 30)
    segs = TransactionCoordinator(open_store(lake)).partition("orders", 0).segments
    assert len(segs) == 1 and len(segs[0].runs) == 4
    nat = same_as_python(spark, lake, topic="orders")
    assert sorted(nat.select("_offset", "_timestamp").where("_partition = 0").collect()) == sorted(before)
    same_as_python(spark, lake, topic="orders", startingOffsets={"orders": {"0": 7}},
                   endingOffsets={"orders": {"0": 13}})


def test_several_topics_union_by_name(spark: Any, orders: str) -> None:
    other = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.float64())])
    create_topic(open_store(orders), "payments", other, partitions=1)
    produce(orders, "payments", [[{"id": 7, "amount": 2.5}]], tid="pay")
    nat = same_as_python(spark, orders, topic="orders,payments")
    assert nat.where("_topic = 'payments'").select("id", "name", "amount").collect() == [(7, None, 2.5)]


def test_column_types_and_nullability(spark: Any, lake: str) -> None:
    schema = pa.schema([
        pa.field("i8", pa.int8(), nullable=False), pa.field("i16", pa.int16()), pa.field("i", pa.int32()),
        pa.field("l", pa.int64(), nullable=False), pa.field("f", pa.float32()), pa.field("d", pa.float64()),
        pa.field("b", pa.bool_(), nullable=False), pa.field("s", pa.string(), nullable=False),
        pa.field("ls", pa.large_string()), pa.field("bin", pa.binary(), nullable=False),
        pa.field("day", pa.date32()), pa.field("dec", pa.decimal128(10, 2), nullable=False),
        pa.field("big_dec", pa.decimal128(30, 5)), pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("ts_ms", pa.timestamp("ms", tz="UTC")), pa.field("ntz", pa.timestamp("us")),
        pa.field("odd name", pa.int64()),
    ])
    create_topic(open_store(lake), "typed", schema, partitions=1)
    when = dt.datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=dt.UTC)
    full = {"i8": -3, "i16": 300, "i": 7, "l": 1 << 40, "f": 1.5, "d": 2.25, "b": True, "s": "x", "ls": "long",
            "bin": b"\x00\x01", "day": dt.date(2024, 1, 2), "dec": decimal.Decimal("12.34"),
            "big_dec": decimal.Decimal("123456789012345678901.12345"), "ts": when, "ts_ms": when.replace(microsecond=0),
            "ntz": dt.datetime(2024, 1, 2, 3, 4, 5), "odd name": 9}
    sparse = {**{k: None for k in full}, "i8": 0, "l": 0, "b": False, "s": "", "bin": b"", "dec": decimal.Decimal(0),
              "ts": when}
    produce(lake, "typed", [[full, sparse]])
    nat = same_as_python(spark, lake, topic="typed")
    assert [f.nullable for f in nat.schema.fields][:4] == [False, True, True, False]


@pytest.mark.parametrize("java8_api", [False, True])  # filter values as java.sql.Timestamp, or as Instant
def test_a_filter_on_the_commit_time_skips_the_files_committed_outside_it_unopened(spark: Any, many_segments: str,
                                                                                   java8_api: bool) -> None:
    nat = native(spark, many_segments, topic="big")
    rows_at = sorted((r._offset, r._timestamp) for r in nat.select("_offset", "_timestamp").collect())
    times = sorted({t for _o, t in rows_at})
    assert len(times) >= 4  # 12 transactions: some commit times differ
    lo, hi = times[1], times[-2]
    store = open_store(many_segments)
    plog = TransactionCoordinator(store).partition("big", 0)
    plog.refresh()
    for seg in plog.segments:  # after planning: files committed outside [lo, hi] are gone
        if not lo <= dict(rows_at)[seg.base_offset] <= hi:
            store.delete(seg.path)
    spark.conf.set("spark.sql.datetime.java8API.enabled", str(java8_api).lower())
    try:
        got = nat.where(nat._timestamp.between(lo, hi)).select("_offset").collect()
    finally:
        spark.conf.unset("spark.sql.datetime.java8API.enabled")
    assert sorted(r._offset for r in got) == [o for o, t in rows_at if lo <= t <= hi]


@pytest.mark.parametrize("columns", [99, 100, 101])
def test_wide_topics_read_as_batches_or_rows_as_spark_plans_them(spark: Any, lake: str, columns: int) -> None:
    # Spark reads up to 100 columns as batches; the scan reads the row index besides the topic's columns
    schema = pa.schema([pa.field(f"c{i}", pa.int64()) for i in range(columns)])
    create_topic(open_store(lake), "wide", schema, partitions=1)
    produce(lake, "wide", [[{f"c{i}": i * r for i in range(columns)} for r in range(3)]])
    nat = native(spark, lake, topic="wide")
    data = [f"c{i}" for i in range(columns)]
    assert sorted(tuple(r) for r in nat.select(*data).collect()) == [tuple(i * r for i in range(columns))
                                                                      for r in range(3)]
    assert sorted((r._offset, r.c1) for r in nat.select("_offset", *data).collect()) == [(0, 0), (1, 1), (2, 2)]


def test_files_of_equal_size_share_a_scan_told_apart_by_name(spark: Any, lake: str) -> None:
    create_topic(open_store(lake), "twins", SCHEMA, partitions=1)
    produce(lake, "twins", [rows(10, 5), rows(20, 5), rows(30, 5)])
    sizes = [s.size for s in TransactionCoordinator(open_store(lake)).partition("twins", 0).segments]
    assert len(set(sizes)) == 1
    opts = parse_options({"path": lake, "topic": "twins"}, streaming=False)
    store = open_store(lake)
    coord = TransactionCoordinator(store)
    (scan,) = plan_scans(store, coord, opts, spark_root(opts), take_pin(store, coord, opts))
    # Spark takes the files with their sizes (nothing to list)
    assert json.loads(scan.files_json()) == [[f"{spark_root(opts)}/{s.path}", s.size] for s in
                                            TransactionCoordinator(open_store(lake)).partition("twins", 0).segments]
    expect = [(i, (i // 10 - 1) * 5 + i % 10) for i in (*range(10, 15), *range(20, 25), *range(30, 35))]
    for lo, hi in ((0, 15), (7, 12)):
        nat = same_as_python(spark, lake, topic="twins", startingOffsets={"twins": {"0": lo}},
                             endingOffsets={"twins": {"0": hi}})
        plan = str(nat._jdf.queryExecution().executedPlan().toString())
        if hi - lo == 15:  # whole files: the segment format tells them apart by name, no projection follows
            assert "Project" not in plan and "file_name" not in plan, plan
        else:  # a partly read file: the row filter and lookups, comparing names
            assert "file_name" in plan, plan
        assert sorted((r.id, r._offset) for r in nat.collect()) == [e for e in expect if lo <= e[1] < hi]


def test_files_spark_names_otherwise_and_of_equal_size_go_to_separate_scans() -> None:
    from txnsource.native import NativeFile, _apart

    def f(name: str, size: int = 100) -> NativeFile:
        return NativeFile(0, f"file:/lake/topics/t/0/data/{name}", size, 0, 0, 1, 1, ((0, 0),))

    assert _apart(f("a~1.parquet"), f("a~2.parquet"))
    assert _apart(f("a~1.parquet", 100), f("a~1.parquet", 101))
    assert not _apart(f("a~1.parquet"), f("a~1.parquet"))
    assert not _apart(f("a 1.parquet"), f("a~2.parquet"))  # Spark percent-encodes the space


def test_offsets_are_the_same_without_the_vectorised_parquet_reader(spark: Any, many_segments: str) -> None:
    """The row index comes from the column Spark's Parquet reader fills; its record reader fills it too."""
    ranged = {"startingOffsets": {"big": {"0": 73}}, "endingOffsets": {"big": {"0": 377}}}
    spark.conf.set("spark.sql.parquet.enableVectorizedReader", "false")
    try:
        for opts in ({}, ranged):
            same_as_python(spark, many_segments, topic="big", **opts)
    finally:
        spark.conf.unset("spark.sql.parquet.enableVectorizedReader")


def test_a_row_index_spark_did_not_fill_fails_the_query_instead_of_reading_wrong_offsets(spark: Any) -> None:
    from pyspark.errors import PySparkException

    from txnsource.scans import ROW, ROW_COLUMN

    assert spark.sql(f"SELECT {ROW} AS r FROM VALUES (7L) AS v({ROW_COLUMN})").first().r == 7
    with pytest.raises(PySparkException, match=f"Spark did not fill {ROW_COLUMN}; read with readPath=python"):
        spark.sql(f"SELECT {ROW} AS r FROM VALUES (CAST(NULL AS BIGINT)) AS v({ROW_COLUMN})").collect()


def test_an_empty_read_has_the_read_schema(spark: Any, orders: str) -> None:
    nat = same_as_python(spark, orders, topic="orders", startingOffsets="latest")
    assert nat.count() == 0


def test_partition_filters_and_projections(spark: Any, orders: str) -> None:
    nat = native(spark, orders, topic="orders")
    assert ids(nat.where("_partition = 1")) == list(range(100, 105))
    assert ids(nat.where("_offset >= 8 or _partition = 1")) == [8, 9, *range(100, 105)]
    assert read_columns(nat.select("id")) == ["id"]
    assert read_columns(nat.select("_offset", "_timestamp")) == []
    assert read_columns(nat.where("name = 'n3'").select("_partition")) == ["name"]


def test_filters_on_partition_offset_and_topic_skip_the_files_they_exclude_unopened(spark: Any,
                                                                                      many_segments: str) -> None:
    nat = native(spark, many_segments, topic="big")  # 12 files of 50 rows: offsets 0-49, 50-99, ...
    store = open_store(many_segments)
    plog = TransactionCoordinator(store).partition("big", 0)
    plog.refresh()
    for seg in plog.segments:  # after planning: a file the read opens fails it
        if not 100 <= seg.base_offset < 200:
            store.delete(seg.path)
    assert ids(nat.where("_offset >= 100 AND _offset < 200")) == list(range(100, 200))
    assert ids(nat.where("_offset BETWEEN 120 AND 130 AND _partition = 0")) == list(range(120, 131))
    assert ids(nat.where("_offset IN (150, 170, 1000) AND _topic = 'big'")) == [150, 170]
    assert ids(nat.where("NOT (_offset < 100 OR _offset >= 200)")) == list(range(100, 200))
    assert nat.where("_partition = 1 OR _topic = 'other' OR _offset IS NULL").count() == 0
    with pytest.raises(Exception, match=r"(?i)not exist|not found"):
        nat.where("_offset >= 150 AND _offset < 250").count()  # a file it needs is gone


@pytest.mark.parametrize("schema", [
    "name string, id long",
    "id long not null, _offset long, _partition int",
    "_timestamp timestamp, name string",
    "_topic string",
])
def test_a_given_schema_is_a_projection(spark: Any, many_segments: str, schema: str) -> None:
    ranged = {"startingOffsets": {"big": {"0": 73}}, "endingOffsets": {"big": {"0": 377}}}
    for opts in ({}, ranged):
        nat = same_as_python(spark, many_segments, schema, topic="big", **opts)
        assert nat.columns == [c.split()[0] for c in schema.split(", ")]
        plan = str(nat._jdf.queryExecution().executedPlan().toString())
        if not opts and "_" not in schema.replace("_topic", ""):
            assert "_metadata" not in plan and "row_index" not in plan, plan


def test_a_given_schema_spark_cannot_read_as_is_falls_back(spark: Any, orders: str) -> None:
    for schema, why in (("id int", "reads column 'id' as int, the topic has bigint"),
                        ("name string not null", "declares column 'name' not nullable")):
        with pytest.raises(InvalidOptionError, match=why):
            native(spark, orders, schema, topic="orders")
        assert txnsource.read(spark, orders, schema, topic="orders").inputFiles() == []
    assert sorted(txnsource.read(spark, orders, "id int", topic="orders").collect())[:2] == [(0,), (1,)]
    with pytest.raises(SchemaMismatchError, match="column 'nope' of the given schema is in none of the topics"):
        native(spark, orders, "nope long", topic="orders")


def test_the_snapshot_is_pinned_when_read_is_called(spark: Any, orders: str) -> None:
    nat = native(spark, orders, topic="orders")
    produce(orders, "orders", [rows(10, 3)], partition=0, tid="later")
    assert nat.count() == 15
    assert native(spark, orders, topic="orders").count() == 18


# -- fallbacks and errors ------------------------------------------------------------------------------------


def test_auto_falls_back_to_the_python_reader_where_native_does_not_apply(spark: Any,
                                                                          with_open_and_aborted: str) -> None:
    lake = with_open_and_aborted
    auto = txnsource.read(spark, lake, topic="orders", isolationLevel="read_uncommitted")
    assert auto.inputFiles() == [] and ids(auto) == sorted(list(range(11)) + list(range(100, 105))
                                                           + [500, 501, 502, 600, 601])
    with pytest.raises(InvalidOptionError, match="'readPath' = 'native' cannot read this: read_uncommitted"):
        native(spark, lake, topic="orders", isolationLevel="read_uncommitted")
    assert txnsource.read(spark, lake, topic="orders").inputFiles() != []
    python = txnsource.read(spark, lake, topic="orders", readPath="python")
    assert python.inputFiles() == [] and python.count() == 16


def test_in_memory_store_arrow_segments_and_nanosecond_timestamps_use_the_python_reader(spark: Any,
                                                                                      lake: str) -> None:
    url = f"memory://native-{uuid.uuid4().hex}"
    try:
        create_topic(open_store(url), "orders", SCHEMA, partitions=1)
        produce(url, "orders", [rows(0, 3)])
        with pytest.raises(InvalidOptionError, match="in-memory store is out of Spark's reach"):
            native(spark, url, topic="orders")
    finally:
        MemoryStore.drop(url)
    create_topic(open_store(lake), "ipc", SCHEMA, partitions=1)
    producer = Producer(lake, "ipc", config=ProducerConfig(segment_format="arrow"))
    producer.init_transactions()
    with producer.transaction():
        producer.send("ipc", rows(0, 4), partition=0)
    with pytest.raises(InvalidOptionError, match="ipc/0 holds Arrow IPC segments"):
        native(spark, lake, topic="ipc")
    assert ids(txnsource.read(spark, lake, topic="ipc")) == [0, 1, 2, 3]
    create_topic(open_store(lake), "nanos", pa.schema([pa.field("t", pa.timestamp("ns"))]), partitions=1)
    produce(lake, "nanos", [[{"t": dt.datetime(2024, 1, 1)}]], tid="nanos")
    with pytest.raises(InvalidOptionError, match=r"column 't' of topic 'nanos' is timestamp\[ns\]"):
        native(spark, lake, topic="nanos")
    assert txnsource.read(spark, lake, topic="nanos").count() == 1


@pytest.mark.s3
def test_s3_without_hadoop_aws_falls_back_and_native_says_why(spark: Any, s3_lake: Any) -> None:
    url, options = s3_lake.url, dict(s3_lake.options)
    create_topic(open_store(url, options), "orders", SCHEMA, partitions=1)
    produce(url, "orders", [rows(0, 4)], options=options)
    auto = txnsource.read(spark, url, topic="orders", **options)
    assert ids(auto) == [0, 1, 2, 3] and auto.inputFiles() == []
    with pytest.raises(InvalidOptionError, match=r"no file system for s3a:// \(for s3a, put hadoop-aws") as err:
        native(spark, url, topic="orders", **options)
    assert options["s3.secret"] not in str(err.value)


def test_damaged_or_missing_segments_fail_naming_the_file(spark: Any, many_segments: str) -> None:
    store = open_store(many_segments)
    names = store.list(data_dir("big", 0))
    store.put(f"{data_dir('big', 0)}/{names[3]}", b"garbage")
    with pytest.raises(CorruptLogError, match=f"segment {data_dir('big', 0)}/{names[3]} is truncated or damaged"):
        native(spark, many_segments, topic="big")
    assert native(spark, many_segments, topic="big", startingOffsets={"big": {"0": 200}}).count() == 400
    plog = TransactionCoordinator(store).partition("big", 0)
    plog.refresh()
    victim = next(s.path for s in plog.segments if s.base_offset >= 200)  # one a read from offset 200 needs
    store.delete(victim)
    with pytest.raises(CorruptLogError, match=f"{victim} named by a commit marker is missing"):
        native(spark, many_segments, topic="big", startingOffsets={"big": {"0": 200}})


@pytest.mark.parametrize("damage", ["delete", "garble"])
def test_a_segment_lost_after_planning_fails_the_read_even_where_the_session_ignores_lost_files(
        spark: Any, many_segments: str, damage: str) -> None:
    nat = native(spark, many_segments, topic="big")
    store = open_store(many_segments)
    name = f"{data_dir('big', 0)}/{store.list(data_dir('big', 0))[2]}"
    if damage == "delete":
        store.delete(name)
    else:
        data = store.get(name)
        store.put(name, b"\0" * len(data))
    for conf in ("spark.sql.files.ignoreMissingFiles", "spark.sql.files.ignoreCorruptFiles"):
        spark.conf.set(conf, "true")
    try:
        with pytest.raises(Exception, match=r"(?i)not exist|not found|not a parquet file|corrupt|magic"):
            nat.count()
    finally:
        for conf in ("spark.sql.files.ignoreMissingFiles", "spark.sql.files.ignoreCorruptFiles"):
            spark.conf.unset(conf)


def test_read_path_option(spark: Any, orders: str) -> None:
    for ok in ("auto", "python", "PYTHON"):
        assert reader(spark, orders, topic="orders", readPath=ok).count() == 15
    with pytest.raises(AnalysisException, match=r"'readPath' = 'native' needs txnsource.enable_native\(spark\) in the "
                       r"driver .* or txnsource.read\(spark, path"):
        reader(spark, orders, topic="orders", readPath="native").collect()
    with pytest.raises(AnalysisException, match=r"'readPath' = 'fast' is not one of auto, python, native"):
        reader(spark, orders, topic="orders", readPath="fast").collect()
    with pytest.raises(InvalidOptionError, match=r"'readPath' = 'fast'"):
        txnsource.read(spark, orders, topic="orders", readPath="fast")
    with pytest.raises(StreamingQueryException, match=r"'readPath' = 'native' needs .*readStream always uses the "
                       r"Python reader"):
        spark.readStream.format("txnlog").option("topic", "orders").option("readPath", "native").load(orders) \
            .writeStream.format("noop").start().awaitTermination(60)
