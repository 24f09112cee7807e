"""The native path's keyed write through the jar's ``SegmentParquetFormat``: the JVM partitioner places every row
where the Python producer's ``txnlog-v2`` partitioner does, for every key type it takes (edge values and nulls
included), and keys it cannot hash go to the partitioner UDF (``writePath=native``) or the data source (``auto``,
saying why). Dictionaries and file descriptions: ``test_write_native.py``."""

from __future__ import annotations

import datetime as dt
import math
import os
from typing import Any

import pyarrow as pa
import pytest

import txnsink
from coordinator import create_topic, get_topic, open_store, read_snapshot
from coordinator.layout import data_dir
from coordinator.partitioner import LEGACY, partition_for

pytestmark = pytest.mark.spark

UTC = dt.UTC
SCHEMA = pa.schema([
    ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()), ("flag", pa.bool_()),
    ("f32", pa.float32()), ("f64", pa.float64()), ("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
    ("ntz", pa.timestamp("us")), ("s", pa.string()), ("bin", pa.binary()),
])
#: Edge values per column (cycled over the rows), None among them.
EDGES: dict[str, list[Any]] = {
    "i8": [None, 0, -1, 1, -128, 127],
    "i16": [None, 0, -1, -32768, 32767, 300],
    "i32": [None, 0, -1, -2**31, 2**31 - 1, 123456],
    "i64": [None, 0, -1, -2**63, 2**63 - 1, 1 << 40],
    "flag": [None, True, False],
    "f32": [None, 0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1.5, -3.25e-20],
    "f64": [None, 0.0, -0.0, float("nan"), float("inf"), -1e308, 5e-324, 0.1],
    "day": [None, dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(1, 1, 1), dt.date(9999, 12, 31)],
    "ts": [None, dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
           dt.datetime(2024, 2, 29, 12, 0, 0, 1, tzinfo=UTC)],
    "ntz": [None, dt.datetime(1970, 1, 1), dt.datetime(1900, 1, 1, 0, 0, 0, 7), dt.datetime(2100, 1, 1)],
    "s": [None, "", "a", "ü日本語", "x" * 200, "customer-42", "\x00\x01"],
    "bin": [None, b"", b"\x00", b"\xff\xfe\x00\x01", bytes(range(256)), b"\x80"],
}
ROWS = 300
PARTITIONS = 7


def edge_table() -> pa.Table:
    cols = {"id": pa.array(range(ROWS), pa.int64())}
    for i, f in enumerate(SCHEMA):
        values = EDGES[f.name]
        cols[f.name] = pa.array([values[(r * (i + 1) + r // 7) % len(values)] for r in range(ROWS)], f.type)
    return pa.table(cols)


@pytest.fixture(scope="module")
def edge_frame(spark: Any) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    table = edge_table()
    schema = from_arrow_schema(table.schema, prefer_timestamp_ntz=True)
    return spark.createDataFrame(table.to_pylist(), schema).repartition(3)


def rows_of(lake: str, topic: str) -> pa.Table:
    return read_snapshot(lake, [topic])[topic]


def placed_as_the_producer(lake: str, topic: str, key: list[str]) -> pa.Table:
    core = rows_of(lake, topic)
    meta = get_topic(open_store(lake), topic)
    assert core.num_rows == ROWS and sorted(core.column("id").to_pylist()) == list(range(ROWS))
    assert core.column("_partition").to_pylist() == partition_for(core, key, PARTITIONS, meta).tolist(), key
    return core


def test_every_key_type_lands_where_the_producer_puts_it(spark: Any, tmp_path: Any, edge_frame: Any) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    keys = [[f.name] for f in SCHEMA] + [["s", "i64", "f64", "flag"], ["ts", "bin", "i8"]]
    for n, key in enumerate(keys):
        topic = f"k{n}"
        create_topic(store, topic, pa.schema([("id", pa.int64()), *SCHEMA]), PARTITIONS)
        got = txnsink.write(edge_frame, lake, topic, key=key)  # auto: the JVM partitioner applies
        assert got.path == "native" and got.reason is None, (key, got)
        core = placed_as_the_producer(lake, topic, key)
        assert len(set(core.column("_partition").to_pylist())) > 1
    # the values survive the trip (NaN, -0.0, the extreme dates and timestamps)
    back = {r["id"]: r for r in rows_of(lake, "k0").to_pylist()}
    for r in edge_table().to_pylist():
        for name, v in r.items():
            w = back[r["id"]][name]
            assert (isinstance(v, float) and math.isnan(v) and math.isnan(w)) or v == w, (name, v, w)


def test_each_partition_takes_a_tasks_rows_in_the_tasks_order(spark: Any, tmp_path: Any) -> None:
    """A task buffers its rows per partition and hands each partition's writer runs of them (many runs per
    partition here, the last at close): each partition's records keep the order the task produced them in, and
    every row lands where the producer puts it."""
    lake = str(tmp_path / "lake")
    n = 30_000  # about 7 MB of rows in one task: several 256 KiB runs per partition
    df = spark.range(0, n, 1, 1).selectExpr("id", "id % 11 AS k", "repeat('x', 200) AS pad")
    got = txnsink.write(df, lake, "ordered", key="k", numPartitions=3, writePath="native")
    assert got.path == "native" and got.segments == 3
    core = rows_of(lake, "ordered")
    assert core.num_rows == n
    meta = get_topic(open_store(lake), "ordered")
    assert core.column("_partition").to_pylist() == partition_for(core, ["k"], 3, meta).tolist()
    for p in range(3):
        part = [r for r in core.select(["id", "_partition", "_offset"]).to_pylist() if r["_partition"] == p]
        ids = [r["id"] for r in sorted(part, key=lambda r: r["_offset"])]
        assert ids and ids == sorted(ids), p


def written_files_metric(spark: Any) -> int:
    """Spark's "number of written files" of the session's last write command (its SQL metrics)."""
    store = spark._jsparkSession.sharedState().statusStore()
    found = None
    executions = store.executionsList().iterator()
    while executions.hasNext():
        e = executions.next()
        values = store.executionMetrics(e.executionId())
        metrics = e.metrics().iterator()
        while metrics.hasNext():
            m = metrics.next()
            if m.name() == "number of written files" and values.contains(m.accumulatorId()):
                found = int(values.apply(m.accumulatorId()).replace(",", ""))
    assert found is not None, "no write command in the session's SQL executions"
    return found


def test_spark_counts_a_file_for_each_keyed_task(spark: Any, tmp_path: Any) -> None:
    """A keyed task writes its partitions' files, never the one file Spark named; the writer names one it wrote, so
    Spark's task statistics count it (instead of warning, per task, "Expected 1 files, but only saw 0")."""
    lake = str(tmp_path / "lake")
    df = spark.range(0, 20_000, 1, 2).selectExpr("id", "id % 7 AS k")
    got = txnsink.write(df, lake, "counted", key="k", numPartitions=3, writePath="native", keyedTaskBytes=0)
    assert got.path == "native" and got.segments == 6
    assert written_files_metric(spark) == 2


@pytest.mark.parametrize("path", ["jvm", "udf"])
def test_a_keyed_write_merges_small_input_partitions_into_one_task_per_core(spark: Any, tmp_path: Any,
                                                                           path: str) -> None:
    """Each task writes one file per topic partition: 24 small input partitions would write 24 x 4 files; merged
    into one task per core, at most cores x 4. ``keyedTaskBytes`` = 0 keeps the input's partitioning, and a small
    enough value keeps more tasks (never fewer than the cores)."""
    cores = spark.sparkContext.defaultParallelism
    # an int key has a JVM rule; a decimal key takes the partitioner UDF under writePath=native
    key = "k" if path == "jvm" else "d"
    df = spark.range(0, 4800, 1, 24).selectExpr("id", "id % 97 AS k", "cast(id % 89 AS decimal(10, 2)) AS d")
    for task_bytes, most, least in (("", cores * 4, 4), ("0", 24 * 4, 24 * 4 - 8), ("1", 24 * 4, 24 * 4 - 8)):
        topic = f"t{task_bytes or 'default'}"
        options = {"writePath": "native"} | ({"keyedTaskBytes": task_bytes} if task_bytes else {})
        got = txnsink.write(df, str(tmp_path / path), topic, key=key, numPartitions=4, **options)
        assert got.path == "native" and got.segments is not None and least <= got.segments <= most, \
            (task_bytes, got.segments)
        table = rows_of(str(tmp_path / path), topic)
        assert sorted(table.column("id").to_pylist()) == list(range(4800))
    with pytest.raises(Exception, match="keyedTaskBytes"):
        txnsink.write(df, str(tmp_path / path), "bad", key=key, keyedTaskBytes="-1")


def test_keys_without_a_jvm_rule_take_the_udf_or_the_data_source(spark: Any, tmp_path: Any) -> None:
    lake = str(tmp_path / "lake")
    df = spark.range(0, 200, 1, 2).selectExpr("id", "cast(id % 13 AS decimal(10, 2)) AS amount",
                                              "cast(id % 5 AS string) AS grp")
    auto = txnsink.write(df, lake, "dec", key="amount", numPartitions=PARTITIONS)
    assert auto.path == "python" and "no JVM partitioner" in (auto.reason or "")
    native = txnsink.write(df, lake, "dec", key="amount", writePath="native")
    assert native.path == "native"
    core = rows_of(lake, "dec")
    meta = get_topic(open_store(lake), "dec")
    assert core.num_rows == 400
    assert core.column("_partition").to_pylist() == partition_for(core, ["amount"], PARTITIONS, meta).tolist()
    # a topic of the legacy partitioner: the JVM has no txnlog-v1
    create_topic(open_store(lake), "old", pa.schema([("id", pa.int64()), ("amount", pa.decimal128(10, 2)),
                                                     ("grp", pa.string())]), 3, config={"partitioner": LEGACY})
    old = txnsink.write(df, lake, "old", key="grp")
    assert old.path == "python" and "no JVM partitioner" in (old.reason or "")
    forced = txnsink.write(df, lake, "old", key="grp", writePath="native")
    assert forced.path == "native"
    core = rows_of(lake, "old")
    assert core.num_rows == 400
    assert core.column("_partition").to_pylist() == partition_for(core, ["grp"], 3,
                                                                  get_topic(open_store(lake), "old")).tolist()


def test_values_are_hashed_as_the_topics_type(spark: Any, tmp_path: Any) -> None:
    # the conformed frame casts to the topic's types before the JVM hashes: an int column written into a topic
    # whose key column is int64 hashes as int64, as the producer does
    lake = str(tmp_path / "lake")
    create_topic(open_store(lake), "t", pa.schema([("k", pa.int64()), ("v", pa.string())]), PARTITIONS)
    df = spark.range(0, 100, 1, 2).selectExpr("cast(id - 50 AS int) AS k", "cast(id AS string) AS v")
    assert txnsink.write(df, lake, "t", key="k").path == "native"
    core = rows_of(lake, "t")
    meta = get_topic(open_store(lake), "t")
    assert core.column("_partition").to_pylist() == partition_for(core, ["k"], PARTITIONS, meta).tolist()


def test_a_task_failing_mid_write_fails_the_write_with_sparks_error_and_publishes_nothing(spark: Any,
                                                                                          tmp_path: Any) -> None:
    from pyspark.errors import PySparkException

    lake = str(tmp_path / "lake")
    ok = spark.range(0, 100, 1, 2).selectExpr("id", "cast(id % 5 AS string) AS grp")
    assert txnsink.write(ok, lake, "t", key="grp", numPartitions=3).path == "native"
    # a task that has written rows into several partitions' files when it fails
    bad = spark.range(0, 3000, 1, 2).selectExpr(
        "id", "if(id = 2500, raise_error('boom at 2500'), cast(id % 5 AS string)) AS grp")
    with pytest.raises(PySparkException, match="boom at 2500"):
        txnsink.write(bad, lake, "t", key="grp")
    assert sorted(rows_of(lake, "t").column("id").to_pylist()) == list(range(100))
    assert os.listdir(os.path.join(lake, "_native-staging")) == []
    assert sum(len(os.listdir(os.path.join(lake, data_dir("t", p)))) for p in range(3)) <= 6
