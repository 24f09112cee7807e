"""Batch writes through Spark: ``df.write.format("txnlog")``. Every outcome is checked with the core client."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from coordinator import TransactionCoordinator, get_topic, open_store, read_snapshot
from coordinator.layout import data_dir, marker_dir
from coordinator.partitioner import CURRENT, partition_for
from core_helpers import every_object

pytestmark = pytest.mark.spark


def topic_rows(lake: str, topic: str, options: dict[str, str] | None = None) -> pa.Table:
    return read_snapshot(lake, [topic], options=options)[topic]


def files_under(lake: str, topic: str, partitions: int, options: dict[str, str] | None = None) -> dict[str, int]:
    store = open_store(lake, options)
    return {
        "markers": sum(len(store.list(marker_dir(topic, p))) for p in range(partitions)),
        "data": sum(len(store.list(data_dir(topic, p))) for p in range(partitions)),
    }


def write(df: Any, lake: str, **options: Any) -> None:
    w = df.write.format("txnlog").mode("append")
    for k, v in options.items():
        w = w.option(k, str(v))
    w.save(lake)


def test_append_creates_topic_and_publishes_every_row_once(spark: Any, lake: str) -> None:
    df = spark.range(200).selectExpr("id", "cast(id % 7 as string) as k", "cast(id as double) * 1.5 as v")
    write(df, lake, topic="orders", numPartitions=3)
    meta = get_topic(open_store(lake), "orders")
    assert meta.partitions == 3
    assert meta.schema.names == ["id", "k", "v"]
    got = spark.createDataFrame(topic_rows(lake, "orders").select(["id", "k", "v"]).to_pylist(), df.schema)
    assert_df_equality(got, df, ignore_row_order=True, ignore_nullable=True)
    # one job = one transaction: exactly one partition record per partition it touched
    first = files_under(lake, "orders", 3)["markers"]
    assert first == 3  # without a key, each of the two tasks spreads its rows over every partition
    assert len(TransactionCoordinator(open_store(lake)).log.refresh().producers) == 0
    write(df, lake, topic="orders")
    assert topic_rows(lake, "orders").num_rows == 400


def test_without_partition_key_every_task_spreads_and_odd_rows_rotate_over_jobs(spark: Any, lake: str) -> None:
    write(spark.range(0, 1000, 1, 2), lake, topic="even", numPartitions=4)
    counts = topic_rows(lake, "even").column("_partition").value_counts().to_pylist()
    assert sorted(c["counts"] for c in counts) == [250, 250, 250, 250]  # two tasks, each over every partition
    for _ in range(20):  # jobs of fewer rows than partitions start at random partitions: over jobs all get rows
        write(spark.range(0, 2, 1, 1), lake, topic="odd", numPartitions=4)
    used = {c["values"] for c in topic_rows(lake, "odd").column("_partition").value_counts().to_pylist()}
    assert used == {0, 1, 2, 3}


def test_partition_key_agrees_with_the_python_producer(spark: Any, lake: str) -> None:
    from coordinator import Producer

    df = spark.range(300).selectExpr("id", "concat('user-', cast(id % 13 as string)) as user")
    write(df, lake, topic="keyed", numPartitions=5, partitionKey="user")
    out = topic_rows(lake, "keyed")
    meta = get_topic(open_store(lake), "keyed")
    assert meta.config["partitioner"] == CURRENT
    expected = partition_for(out, ["user"], 5, meta).tolist()
    assert out.column("_partition").to_pylist() == expected
    by_user: dict[str, set[int]] = {}
    for u, p in zip(out.column("user").to_pylist(), out.column("_partition").to_pylist(), strict=True):
        by_user.setdefault(u, set()).add(p)
    assert all(len(ps) == 1 for ps in by_user.values()) and len(by_user) == 13
    prod = Producer(lake, "py-producer")
    prod.init_transactions()
    with prod.transaction():
        prod.send("keyed", [{"id": 1000 + i, "user": f"user-{i}"} for i in range(13)], key="user")
    again = topic_rows(lake, "keyed").to_pylist()
    placed = {r["user"]: r["_partition"] for r in again if r["id"] >= 1000}
    assert all(placed[u] == next(iter(ps)) for u, ps in by_user.items())


def test_multi_column_key_and_row_order_within_partition(spark: Any, lake: str) -> None:
    df = spark.range(0, 120, 1, 1).selectExpr("id", "id % 3 as a", "cast(id % 2 as string) as b")
    write(df, lake, topic="multi", numPartitions=3, partitionKey="a, b")
    out = topic_rows(lake, "multi")
    meta = get_topic(open_store(lake), "multi")
    assert out.column("_partition").to_pylist() == partition_for(out, ["a", "b"], 3, meta).tolist()
    for p in range(3):
        ids = [r["id"] for r in out.to_pylist() if r["_partition"] == p]
        assert ids == sorted(ids)  # one task's rows keep their order (offsets follow it)



def test_topics_created_before_the_partitioner_entry_keep_their_placement(spark: Any, lake: str) -> None:
    from coordinator import TopicMeta, hash_partition
    from coordinator.layout import topic_meta_path

    schema = pa.schema([("id", pa.int64()), ("user", pa.string())])
    store = open_store(lake)
    assert store.put_if_absent(topic_meta_path("old", 0), TopicMeta("old", 5, schema, {}, 0, 0).to_bytes())
    df = spark.range(0, 300, 1, 2).selectExpr("id", "concat('user-', cast(id % 13 as string)) as user")
    write(df, lake, topic="old", partitionKey="user")
    out = topic_rows(lake, "old")
    assert out.num_rows == 300
    assert out.column("_partition").to_pylist() == hash_partition(out, ["user"], 5)


def test_key_of_a_type_the_partitioner_cannot_hash_fails_on_the_driver(spark: Any, lake: str) -> None:
    df = spark.range(10).selectExpr("id", "array(id, id) as pair")
    with pytest.raises(Exception, match=r"key column 'pair' has type list<element: int64.*cannot hash"):
        write(df, lake, topic="pairs", numPartitions=2, partitionKey="pair")
    assert files_under(lake, "pairs", 2)["data"] == 0


def test_typed_keys_are_placed_as_the_python_producer_places_them(spark: Any, lake: str) -> None:
    """Timestamps, dates, decimals, doubles, booleans and strings (nulls included) hashed in Spark's Python
    workers land where ``partition_for`` puts the same rows in this process."""
    df = spark.range(0, 400, 1, 3).selectExpr(
        "id",
        "if(id % 9 = 0, null, timestamp_seconds(1700000000 + id * 3607)) as ts",
        "date_add(date'2024-01-01', cast(id % 40 as int)) as day",
        "cast(id / 7 as decimal(12, 3)) as amount",
        "if(id % 5 = 0, cast('NaN' as double), id * 0.25) as score",
        "id % 2 = 0 as flag",
        "if(id % 11 = 0, null, concat('user-', cast(id % 23 as string))) as user",
    )
    keys = ["ts", "day", "amount", "score", "flag", "user"]
    write(df, lake, topic="typed", numPartitions=7, partitionKey=", ".join(keys))
    out = topic_rows(lake, "typed")
    assert out.num_rows == 400
    meta = get_topic(open_store(lake), "typed")
    assert out.column("_partition").to_pylist() == partition_for(out, keys, 7, meta).tolist()
    ts_only = "ts_only"
    write(df, lake, topic=ts_only, numPartitions=4, partitionKey="ts")
    out = topic_rows(lake, ts_only)
    meta = get_topic(open_store(lake), ts_only)
    assert out.column("_partition").to_pylist() == partition_for(out, ["ts"], 4, meta).tolist()
    assert len(set(out.column("_partition").to_pylist())) == 4


def test_existing_python_topic_accepts_widened_types(spark: Any, lake: str) -> None:
    from coordinator import create_topic

    schema = pa.schema([pa.field("id", pa.int64()), pa.field("amount", pa.float64())])
    create_topic(open_store(lake), "pay", schema, 2)
    df = spark.range(10).selectExpr("cast(id as int) as id", "cast(id as float) as amount")
    write(df, lake, topic="pay")
    out = topic_rows(lake, "pay")
    assert out.schema.field("id").type == pa.int64() and out.num_rows == 10


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option topic is missing"),
        ({"topic": "../escape"}, "option topic='../escape' is invalid"),
        ({"topic": "t", "numPartitions": "0"}, "option numPartitions='0' must be an integer from 1 to 10000"),
        ({"topic": "t", "numPartitions": "many"}, "option numPartitions='many' must be an integer"),
        ({"topic": "t", "numPartitions": "10001"}, "from 1 to 10000"),
        ({"topic": "t", "partitionKey": "id,,k"}, "option partitionKey='id,,k' must be one or more"),
        ({"topic": "t", "partitionKey": "nope"}, "columns ['nope'] are not data columns of the DataFrame"),
        ({"topic": "t", "transactionalId": "bad id!"}, "option transactionalId='bad id!' is invalid"),
        ({"topic": "t", "partitionKeys": "id"}, "unknown txnlog write option 'partitionkeys'"),
        ({"TOPIC": "t", "S3.REGION": "x", "nUmPaRtItIoNs": "two"}, "option numPartitions='two'"),
    ],
)
def test_bad_options_fail_on_the_driver_and_write_nothing(
    spark: Any, lake: str, options: dict[str, str], message: str
) -> None:
    df = spark.range(5).selectExpr("id", "cast(id as string) as k")
    with pytest.raises(Exception, match="InvalidOptionError") as info:
        write(df, lake, **options)
    assert message in str(info.value)
    assert not os.path.exists(os.path.join(lake, "topics"))


def test_missing_store_path_is_named(spark: Any) -> None:
    with pytest.raises(Exception, match="option path"):
        spark.range(3).write.format("txnlog").mode("append").option("topic", "t").save()


def test_save_modes(spark: Any, lake: str) -> None:
    df = spark.range(5)
    with pytest.raises(Exception, match="save mode 'overwrite' is not supported"):
        df.write.format("txnlog").mode("overwrite").option("topic", "m").save(lake)
    for mode in ("errorifexists", "ignore"):
        with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            df.write.format("txnlog").mode(mode).option("topic", "m").save(lake)
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):  # save()'s default: errorifexists
        df.write.format("txnlog").option("topic", "m").save(lake)
    assert not os.path.exists(os.path.join(lake, "topics"))
    write(df, lake, topic="m")
    assert topic_rows(lake, "m").num_rows == 5


def test_schema_mismatch_fails_before_any_task_and_writes_nothing(spark: Any, lake: str) -> None:
    write(spark.range(4).selectExpr("id", "cast(id as string) as name"), lake, topic="s", numPartitions=2)
    before = files_under(lake, "s", 2)
    bad = [
        (spark.range(4).selectExpr("id"), "missing columns ['name']"),
        (spark.range(4).selectExpr("id", "cast(id as string) as name", "id as extra"), "unexpected columns ['extra']"),
        (spark.range(4).selectExpr("cast(id as string) as id", "cast(id as string) as name"), "mistyped columns"),
    ]
    for df, message in bad:
        with pytest.raises(Exception, match="SchemaMismatchError") as info:
            write(df, lake, topic="s")
        assert message in str(info.value) and "does not match topic 's'" in str(info.value)
    with pytest.raises(Exception, match="numPartitions=3 but topic 's' already exists with 2 partitions"):
        write(spark.range(4).selectExpr("id", "cast(id as string) as name"), lake, topic="s", numPartitions=3)
    with pytest.raises(Exception, match="reserved for metadata columns"):
        write(spark.range(3).selectExpr("id as _offset"), lake, topic="reserved")
    assert files_under(lake, "s", 2) == before
    assert topic_rows(lake, "s").num_rows == 4


def test_a_task_that_fails_for_good_leaves_nothing_visible(spark: Any, lake: str) -> None:
    from pyspark.sql.functions import udf

    write(spark.range(3), lake, topic="atomic", numPartitions=2)
    before = files_under(lake, "atomic", 2)

    @udf("long")
    def explode_on_57(x: int) -> int:
        if x == 57:
            raise ValueError("poisoned row 57")
        return x

    df = spark.range(0, 100, 1, 4).select(explode_on_57("id").alias("id"))
    with pytest.raises(Exception, match="poisoned row 57"):
        write(df, lake, topic="atomic")
    assert topic_rows(lake, "atomic").num_rows == 3
    # no marker written; abort() deletes the staged files it is told about (best effort: a task still running
    # when Spark aborts the job can leave an unreferenced, invisible file for GC)
    assert files_under(lake, "atomic", 2)["markers"] == before["markers"]


def test_nulls_in_a_non_nullable_topic_column_fail_on_the_driver(spark: Any, lake: str) -> None:
    from coordinator import create_topic

    create_topic(open_store(lake), "strict", pa.schema([pa.field("id", pa.int64(), nullable=False)]), 2)
    df = spark.range(0, 50, 1, 2).selectExpr("if(id = 40, null, id) as id")
    with pytest.raises(Exception, match="may hold nulls but the topic declares them NOT NULL"):
        write(df, lake, topic="strict")
    assert topic_rows(lake, "strict").num_rows == 0
    assert files_under(lake, "strict", 2)["markers"] == 0


def test_older_writer_with_same_transactional_id_is_fenced(spark: Any, lake: str, tmp_path: Path) -> None:
    from pyspark.sql.functions import udf

    write(spark.range(2), lake, topic="fence", transactionalId="etl-job")
    before = files_under(lake, "fence", 1)
    started, release = tmp_path / "started", tmp_path / "release"

    @udf("long")
    def gate(x: int) -> int:
        started.touch()
        deadline = time.time() + 120
        while not release.exists() and time.time() < deadline:
            time.sleep(0.05)
        return x

    newer: list[Any] = []

    def newer_writer() -> None:
        deadline = time.time() + 120
        while not started.exists() and time.time() < deadline:
            time.sleep(0.05)
        newer.append(TransactionCoordinator(open_store(lake)).init_producer("etl-job"))
        release.touch()

    t = threading.Thread(target=newer_writer)
    t.start()
    errors: list[BaseException] = []
    try:
        write(spark.range(0, 20, 1, 2).select(gate("id").alias("id")), lake, topic="fence", transactionalId="etl-job")
    except Exception as exc:  # noqa: BLE001 - asserted below
        errors.append(exc)
    t.join(60)
    assert len(errors) == 1
    text = str(errors[0])
    assert "ProducerFencedError" in text and "'etl-job'" in text and f"epoch {newer[0].epoch}" in text
    assert topic_rows(lake, "fence").num_rows == 2
    assert files_under(lake, "fence", 1) == before  # the fenced job's staged files were deleted


def test_writer_repr_and_messages_carry_no_secrets(spark: Any, lake: str) -> None:
    import pickle

    from pyspark.sql.types import LongType, StructField, StructType

    from txnsink import make_writer

    opts = {"path": lake, "topic": "sec", "s3.key": "AKIDSECRETKEY", "s3.secret": "TOPSECRETVALUE"}
    writer = make_writer(opts, StructType([StructField("id", LongType())]), False)
    assert "TOPSECRETVALUE" not in repr(writer) and "AKIDSECRETKEY" not in repr(writer)
    msg = writer.write(iter([pa.record_batch({"id": pa.array([1, 2, 3])})]))
    assert b"TOPSECRETVALUE" not in pickle.dumps(msg) and b"AKIDSECRETKEY" not in pickle.dumps(msg)
    writer.commit([msg, None])
    assert topic_rows(lake, "sec").column("id").to_pylist() == [1, 2, 3]
    for path, data in every_object(open_store(lake)):
        assert b"TOPSECRETVALUE" not in data, path
