"""Kafka parity of the sink: an integer ``partition`` column routes rows and is not stored, also on a write that
creates the topic (Spark's Kafka sink never stores it as a value); record headers written from a ``headers`` (or
``_headers``) column and read back with ``includeHeaders``."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from test_write_semantics import ids, save

from coordinator import create_topic, get_topic, open_store, read_snapshot
from coordinator.segments import HEADERS_TYPE

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


HEADERS_DDL = "id long, headers array<struct<key:string,value:binary>>"


def test_headers_are_written_from_a_headers_column_and_read_with_include_headers(spark: Any, lake: str,
                                                                                 tmp_path: Any) -> None:
    df = spark.createDataFrame([(1, [("trace", b"t-1"), ("tenant", b"a")]), (2, None), (3, [])], HEADERS_DDL)
    save(df, lake, topic="events")
    assert get_topic(open_store(lake), "events").schema.names == ["id"]  # headers are not a data column
    plain = spark.read.format("txnlog").option("topic", "events").load(lake)
    assert "_headers" not in plain.columns and "headers" not in plain.columns
    read = spark.read.format("txnlog").option("topic", "events").option("includeHeaders", "true").load(lake)
    assert read.schema["_headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    got = {r.id: None if r._headers is None else [(h.key, bytes(h.value)) for h in r._headers]
           for r in read.select("id", "_headers").collect()}
    want = {1: [("trace", b"t-1"), ("tenant", b"a")], 2: None, 3: []}
    assert got == want
    # a DataFrame read with its headers keeps them when written back (the _headers column)
    save(read.select("id", "_headers"), lake, topic="copy")
    copied = spark.read.format("txnlog").option("topic", "copy").option("includeHeaders", "true").load(lake)
    assert {r.id: None if r._headers is None else [(h.key, bytes(h.value)) for h in r._headers]
            for r in copied.collect()} == want
    # streams carry them too
    seen: dict[int, Any] = {}
    query = (spark.readStream.format("txnlog").option("topic", "events").option("startingOffsets", "earliest")
             .option("includeHeaders", "true").load(lake).writeStream
             .option("checkpointLocation", str(tmp_path / "ck"))
             .foreachBatch(lambda b, _id: seen.update((r.id, r._headers) for r in b.collect()))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert {k: None if v is None else [(h.key, bytes(h.value)) for h in v] for k, v in seen.items()} == want


def test_a_headers_column_the_topic_declares_stays_data(spark: Any, lake: str) -> None:
    from pyspark.errors import AnalysisException

    create_topic(open_store(lake), "declared", pa.schema([("id", pa.int64()), ("headers", HEADERS_TYPE)]))
    save(spark.createDataFrame([(1, [("k", b"v")])], HEADERS_DDL), lake, topic="declared")
    table = read_snapshot(lake, ["declared"])["declared"]
    assert table.column("headers").to_pylist() == [[{"key": "k", "value": b"v"}]]
    with pytest.raises(AnalysisException, match="'includeHeaders' = 'maybe'"):
        spark.read.format("txnlog").option("topic", "declared").option("includeHeaders", "maybe").load(lake)


def test_merge_schema_adds_columns_and_widens_types(spark: Any, lake: str) -> None:
    from pyspark.errors import PySparkException

    save(spark.createDataFrame([(1, "a")], "n int, name string"), lake, topic="evolving")
    wider = spark.createDataFrame([(2**40, "b", 0.5)], "n long, name string, score double")
    with pytest.raises(PySparkException, match=r"unexpected columns \['score'\]"):
        save(wider, lake, topic="evolving")  # without mergeSchema the topic's schema holds
    save(wider, lake, topic="evolving", mergeSchema="true")
    meta = get_topic(open_store(lake), "evolving")
    assert meta.version == 1
    assert [(f.name, str(f.type)) for f in meta.schema] == [("n", "int64"), ("name", "string"), ("score", "double")]
    read = spark.read.format("txnlog").option("topic", "evolving").load(lake)
    assert read.schema["n"].dataType.simpleString() == "bigint"
    assert sorted(tuple(r) for r in read.select("n", "name", "score").collect()) == [(1, "a", None),
                                                                                     (2**40, "b", 0.5)]
    with pytest.raises(PySparkException, match="mergeSchema=true needs the topic option"):
        save(spark.createDataFrame([(1, "evolving")], "n long, topic string"), lake, mergeSchema="true")


def test_the_native_read_path_reads_an_evolved_topic(spark: Any, lake: str) -> None:
    import txnsource

    save(spark.createDataFrame([(1, "a")], "n int, name string"), lake, topic="evolved")
    save(spark.createDataFrame([(2**40, "b", 0.5)], "n long, name string, score double"), lake, topic="evolved",
         mergeSchema="true")
    for path in ("native", "python"):
        df = txnsource.read(spark, lake, topic="evolved", readPath=path)
        assert sorted(tuple(r) for r in df.select("n", "name", "score").collect()) == [(1, "a", None),
                                                                                       (2**40, "b", 0.5)], path
