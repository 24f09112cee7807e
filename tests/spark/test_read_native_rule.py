"""``txnsource.enable_native``: ``spark.read.format("txnlog")`` batch scans read by Spark's own Parquet reader, with
the data source's rows, schema, snapshot rule (one DataFrame, one snapshot) and errors, and the data source wherever
the native path does not apply."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_read as base  # tests/spark is on sys.path (rootdir-relative test modules)
from chispa import assert_df_equality

import txnsource
from coordinator import InvalidOptionError, Producer, create_topic, open_store
from coordinator.jvm import JAR, source_hash

pytestmark = pytest.mark.spark

produce, rows, reader, ids = base.produce, base.rows, base.reader, base.ids
orders, with_open_and_aborted, many_segments = base.orders, base.with_open_and_aborted, base.many_segments
ROOT = Path(__file__).resolve().parents[2]


def parquet_scans(df: Any) -> int:
    """How many of Spark's own Parquet scans ``df``'s physical plan holds."""
    return str(df._jdf.queryExecution().executedPlan().toString()).count("FileScan parquet")


@pytest.fixture
def native(spark: Any) -> Iterator[Any]:
    txnsource.enable_native(spark)
    try:
        yield spark
    finally:
        txnsource.disable_native(spark)
    assert not txnsource.native_enabled(spark)


def both(spark: Any, read: Any) -> tuple[Any, Any]:
    """``read()`` collected with the rule (asserting Spark's Parquet reader read it) and without."""
    txnsource.enable_native(spark)
    try:
        df = read()
        assert parquet_scans(df) >= 1
        nat = spark.createDataFrame(df.collect(), df.schema)
    finally:
        txnsource.disable_native(spark)
    py = read()
    assert parquet_scans(py) == 0
    assert df.schema == py.schema
    return nat, py


def test_format_reads_the_data_sources_rows_through_spark_parquet(spark: Any, with_open_and_aborted: str) -> None:
    nat, py = both(spark, lambda: reader(spark, with_open_and_aborted, topic="orders"))
    assert_df_equality(nat, py, ignore_row_order=True)
    assert ids(nat) == list(range(11)) + list(range(100, 105))  # no aborted (500-502) or open (600-601) rows


def test_queries_on_top_see_the_same_columns_filters_and_projections(spark: Any, many_segments: str) -> None:
    def query() -> Any:
        df = reader(spark, many_segments, topic="big", startingOffsets={"big": {"0": 120}})
        return df.where("_offset < 400 AND id % 3 = 0").selectExpr("name", "_offset + 1 AS next", "_partition")

    nat, py = both(spark, query)
    assert_df_equality(nat, py, ignore_row_order=True)
    assert sorted(r.next for r in nat.collect()) == [o + 1 for o in range(120, 400) if o % 3 == 0]


def test_a_given_schema_is_the_projection(spark: Any, orders: str) -> None:
    def query() -> Any:
        return spark.read.format("txnlog").schema("name string, _offset long").option("topic", "orders").load(orders)

    nat, py = both(spark, query)
    assert nat.columns == ["name", "_offset"]
    assert_df_equality(nat, py, ignore_row_order=True)


def test_every_action_of_a_dataframe_reads_its_snapshot_as_the_data_source_does(native: Any, orders: str) -> None:
    df = reader(native, orders, topic="orders")
    assert df.count() == 15
    produce(orders, "orders", [rows(200, 4)], partition=1, tid="later")
    assert df.count() == 15
    assert parquet_scans(df) == 1
    assert reader(native, orders, topic="orders").count() == 19


def test_a_snapshot_planned_again_reuses_its_scan_with_new_columns(native: Any, orders: str) -> None:
    """A query over a snapshot already planned takes its file relation again, with new column ids: two scans of
    one snapshot in a self-join stay two relations. Spark lists no file for any of them (its files-discovered
    counter stays put): the scans take the files with their sizes from the commits, a new snapshot's too."""
    discovered = native._jvm.org.apache.spark.metrics.source.HiveCatalogMetrics.METRIC_FILES_DISCOVERED()
    df = reader(native, orders, topic="orders")
    assert df.count() == 15
    before = discovered.getCount()
    assert df.count() == 15
    assert discovered.getCount() == before

    a = reader(native, orders, topic="orders").alias("a")
    b = reader(native, orders, topic="orders").alias("b")
    joined = a.join(b, a["id"] == b["id"] + 1).select(a["id"].alias("x"), b["id"].alias("y"), b["name"])
    assert parquet_scans(joined) == 2
    got = sorted((r.x, r.y, r.name) for r in joined.collect())
    assert got == [(i, i - 1, f"n{i - 1}") for i in list(range(1, 10)) + list(range(101, 105))]
    assert discovered.getCount() == before

    produce(orders, "orders", [rows(300, 2)], partition=1, tid="again")
    assert df.count() == 15
    assert discovered.getCount() == before
    assert reader(native, orders, topic="orders").count() == 17
    assert discovered.getCount() == before


def test_scans_the_native_path_cannot_read_stay_with_the_data_source(native: Any, with_open_and_aborted: str) -> None:
    uncommitted = reader(native, with_open_and_aborted, topic="orders", isolationLevel="read_uncommitted")
    assert parquet_scans(uncommitted) == 0
    assert 500 in ids(uncommitted) and 600 in ids(uncommitted)
    python = reader(native, with_open_and_aborted, topic="orders", readPath="python")
    assert parquet_scans(python) == 0
    assert ids(python) == list(range(11)) + list(range(100, 105))
    with pytest.raises(Exception, match="readPath' = 'native' cannot read this: read_uncommitted"):
        reader(native, with_open_and_aborted, topic="orders", readPath="native",
               isolationLevel="read_uncommitted").collect()


def test_with_python_filter_pushdown_on_the_data_source_keeps_its_filters(native: Any, orders: str) -> None:
    old = native.conf.get(base.PUSHDOWN_CONF)
    native.conf.set(base.PUSHDOWN_CONF, "true")
    try:
        df = reader(native, orders, topic="orders").where("_partition = 1 AND _offset >= 2")
        assert parquet_scans(df) == 0
        assert ids(df) == [102, 103, 104]
    finally:
        native.conf.set(base.PUSHDOWN_CONF, old)


def test_errors_are_the_data_sources(native: Any, orders: str) -> None:
    with pytest.raises(Exception, match="nosuch"):
        reader(native, orders, topic="nosuch").collect()
    with pytest.raises(Exception, match="startingOffsets"):
        reader(native, orders, topic="orders", startingOffsets="sideways").collect()


def test_a_stream_under_the_rule_reads_every_row_into_a_memory_sink(native: Any, orders: str, tmp_path: Path) -> None:
    stream = native.readStream.format("txnlog").option("topic", "orders").option("startingOffsets", "earliest") \
        .load(orders)
    query = stream.writeStream.format("memory").queryName("native_rule_stream").trigger(availableNow=True).start()
    try:
        query.awaitTermination(120)
        got = native.sql("SELECT id FROM native_rule_stream")
        assert sorted(r.id for r in got.collect()) == list(range(10)) + list(range(100, 105))
    finally:
        query.stop()


def test_enabling_twice_installs_one_rule_and_disabling_removes_it(spark: Any) -> None:
    rules = spark._jsparkSession.experimental().extraOptimizations()
    before = rules.size()
    txnsource.enable_native(spark)
    txnsource.enable_native(spark)
    assert txnsource.native_enabled(spark)
    assert spark._jsparkSession.experimental().extraOptimizations().size() == before + 1
    txnsource.disable_native(spark)
    assert not txnsource.native_enabled(spark)
    assert spark._jsparkSession.experimental().extraOptimizations().size() == before


def test_the_jar_is_built_from_the_java_sources() -> None:
    with zipfile.ZipFile(JAR) as jar:
        recorded = jar.read("META-INF/txnlog-source.sha256").decode().strip()
        assert "io/txnlog/spark/NativeReadRule.class" in jar.namelist()
    assert recorded == source_hash(ROOT / "jvm" / "src"), "rebuild the jar: bash scripts/build_jar.sh"


def test_a_session_without_a_driver_jvm_is_refused() -> None:
    class Remote:  # what a Spark Connect session looks like to enable_native: no _jsparkSession
        pass

    with pytest.raises(InvalidOptionError, match="classic SparkSession"):
        txnsource.enable_native(Remote())  # type: ignore[arg-type]
    assert not txnsource.native_enabled(Remote())  # type: ignore[arg-type]


def test_a_producer_commit_after_load_is_left_out_and_a_new_load_reads_it_whole(native: Any, orders: str) -> None:
    df = reader(native, orders, topic="orders").where("_partition = 0")
    p = Producer(orders, "whole")
    p.init_transactions()
    with p.transaction():
        p.send("orders", rows(300, 3), partition=0)
        p.send("orders", rows(400, 2), partition=1)
    assert ids(df) == list(range(10))  # the DataFrame's snapshot was pinned at load()
    assert ids(reader(native, orders, topic="orders")) == list(range(10)) + [100, 101, 102, 103, 104, 300, 301, 302,
                                                                              400, 401]


def test_s3_without_hadoop_aws_stays_with_the_data_source_and_native_says_why(native: Any, s3_lake: Any) -> None:
    url, options = s3_lake.url, dict(s3_lake.options)
    create_topic(open_store(url, options), "orders", base.SCHEMA, partitions=1)
    produce(url, "orders", [rows(0, 4)], options=options)
    auto = reader(native, url, topic="orders", **options)
    assert ids(auto) == [0, 1, 2, 3] and parquet_scans(auto) == 0
    with pytest.raises(Exception, match=r"readPath' = 'native' cannot read this: Spark has no file system") as err:
        reader(native, url, topic="orders", readPath="native", **options).collect()
    assert options["s3.secret"] not in str(err.value)
