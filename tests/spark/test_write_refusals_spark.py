"""Spark's writers refuse a store that ignores conditional writes, and a deleted topic, before Spark writes anything:
a real streaming query behind an S3 endpoint that strips ``If-None-Match`` (its micro-batches used to commit, and
some were lost), and the native write path (``txnsink.write``), whose Parquet files Spark writes before the commit.
The Spark-free part of the story (every other writing path) is ``tests/test_write_refusals.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from coordinator import (
    LocalStore,
    Store,
    TopicMeta,
    TopicNotFoundError,
    TransactionCoordinator,
    UnsupportedStoreError,
    create_topic,
    open_store,
    parallel,
    read_snapshot,
)
from coordinator.layout import FORMAT_PATH, topic_meta_path
from coordinator.partitioner import CURRENT
from coordinator.records import FORMAT_VERSION, encode_json
from coordinator.topic_admin import delete_topic
from s3_lake import S3Lake, bucket_objects
from s3faults import FaultProxy

pytestmark = pytest.mark.spark

REFUSED = "does not honour conditional writes"


@pytest.mark.s3
def test_a_streaming_query_refuses_an_endpoint_ignoring_conditional_writes(spark: Any, s3_lake: S3Lake,
                                                                           tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    create_topic(open_store(s3_lake.url, s3_lake.options), "out", pa.schema([("id", pa.int64())]))
    src = tmp_path / "in"
    src.mkdir()
    for f in range(3):
        (src / f"part-{f}.json").write_text("".join(json.dumps({"id": f * 10 + i}) + "\n" for i in range(10)))
    parallel.drain(30)
    before = bucket_objects(s3_lake)
    with FaultProxy(s3_lake.endpoint, strip_conditional=True) as proxy:
        w = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(src)).writeStream \
            .format("txnlog").option("topic", "out").option("checkpointLocation", str(tmp_path / "cp"))
        for k, v in s3_lake.options_for(proxy.endpoint).items():
            w = w.option(k, v)
        q = w.trigger(availableNow=True).start(s3_lake.url)
        with pytest.raises(StreamingQueryException):
            q.awaitTermination(240)
        error = str(q.exception())
    assert REFUSED in error and s3_lake.url in error and proxy.endpoint in error, error
    assert bucket_objects(s3_lake) == before  # no micro-batch staged or committed anything
    assert read_snapshot(s3_lake.url, ["out"], options=s3_lake.options)["out"].num_rows == 0


class _OverwritingLocalStore(LocalStore):
    """Local disk written with a plain replace, ignoring the create-if-absent condition."""

    def put_if_absent(self, path: str, data: bytes) -> bool:
        self.put(path, data)
        return True


def test_the_native_write_refuses_a_store_ignoring_conditional_writes_before_spark_writes(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import txnsink
    import txnsink.plan

    lake = tmp_path / "lake"
    liar = _OverwritingLocalStore(f"file://{lake}", str(lake))
    # an existing topic (written with plain puts: no probe was ever passed for this store)
    liar.put(FORMAT_PATH, encode_json({"format": FORMAT_VERSION}))
    liar.put(topic_meta_path("t", 0), TopicMeta("t", 2, pa.schema([("id", pa.int64())]),
                                                {"partitioner": CURRENT}).to_bytes())

    def open_liar(url: str, options: Any = None, *, probe: bool = True) -> Store:
        return liar

    monkeypatch.setattr(txnsink.plan, "open_store", open_liar)
    with pytest.raises(UnsupportedStoreError, match=REFUSED):
        txnsink.write(spark.range(20), str(lake), "t", writePath="native")
    assert not (lake / "_native-staging").exists()  # Spark wrote nothing
    assert liar.list("_txn/log") == [] and liar.list_dirs("topics/t") == ["meta"]


def test_a_native_write_to_a_deleted_topic_fails_before_spark_writes(spark: Any, lake: str) -> None:
    import txnsink

    assert txnsink.write(spark.range(5), lake, "gone", writePath="native").path == "native"  # creates the topic
    delete_topic(TransactionCoordinator(open_store(lake)), "gone")
    seq = TransactionCoordinator(open_store(lake)).log.refresh().seq
    with pytest.raises(TopicNotFoundError, match="topic 'gone' was deleted"):
        txnsink.write(spark.range(5, 10), lake, "gone", writePath="native")
    assert TransactionCoordinator(open_store(lake)).log.refresh().seq == seq  # nothing committed
    assert not any((Path(lake) / "_native-staging").glob("*/*"))
    left = [o.path for o in open_store(lake).list_info("topics/gone")]
    assert left and all(p.startswith("topics/gone/meta/") for p in left)  # no segment was moved in


def _jobs(spark: Any, group: str) -> list[int]:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize("rule", [False, True])
def test_an_append_to_a_deleted_topic_fails_before_any_task_naming_it(spark: Any, lake: str, rule: bool) -> None:
    """``df.write.format("txnlog")`` to a deleted topic, through the data source and through the write rule: the
    driver refuses it, naming the topic, before Spark runs a job; nothing is committed or staged."""
    import txnsink

    def append(df: Any) -> None:
        df.write.format("txnlog").mode("append").option("topic", "gone").option("numPartitions", "2").save(lake)

    if rule:
        txnsink.enable_native(spark)
    try:
        spark.sparkContext.setJobGroup("before", "the first append")
        append(spark.range(5))
        assert _jobs(spark, "before")  # this append's jobs are seen in its group
        delete_topic(TransactionCoordinator(open_store(lake)), "gone")
        seq = TransactionCoordinator(open_store(lake)).log.refresh().seq
        spark.sparkContext.setJobGroup("after", "the append to the deleted topic")
        with pytest.raises(Exception, match=r"topic 'gone' was deleted") as err:
            append(spark.range(5, 10))
        assert "another name" in str(err.value)
        assert _jobs(spark, "after") == []  # refused on the driver: no task ran
    finally:
        spark.sparkContext.setJobGroup("", "")
        if rule:
            txnsink.disable_native(spark)
    assert TransactionCoordinator(open_store(lake)).log.refresh().seq == seq  # nothing committed
    left = [o.path for o in open_store(lake).list_info("topics/gone")]
    assert left and all(p.startswith("topics/gone/meta/") for p in left)  # nothing staged
    with pytest.raises(TopicNotFoundError):
        read_snapshot(lake, ["gone"])


def test_rows_routed_to_a_deleted_topic_by_column_fail_naming_it(spark: Any, lake: str) -> None:
    """With a ``topic`` column the topics are known only in the tasks: the task fails naming the topic and the
    job commits nothing, in the other topics either."""
    create_topic(open_store(lake), "kept", pa.schema([("id", pa.int64())]))
    create_topic(open_store(lake), "gone", pa.schema([("id", pa.int64())]))
    delete_topic(TransactionCoordinator(open_store(lake)), "gone")
    df = spark.range(10).selectExpr("id", "CASE WHEN id % 2 = 0 THEN 'kept' ELSE 'gone' END AS topic")
    with pytest.raises(Exception, match=r"topic 'gone' was deleted"):
        df.write.format("txnlog").mode("append").save(lake)
    assert read_snapshot(lake, ["kept"])["kept"].num_rows == 0
    for t in ("kept", "gone"):  # the tasks' staged files deleted
        assert not [o.path for o in open_store(lake).list_info(f"topics/{t}") if "/meta/" not in o.path]


def test_a_running_streaming_query_stops_at_a_deleted_topic_naming_it(spark: Any, lake: str,
                                                                       tmp_path: Path) -> None:
    """A query that wrote the topic before its deletion: its next micro-batch fails naming the topic (each
    micro-batch's writer reads the definition again on the driver; a commit racing the deletion is refused by the
    coordinator's own check, ``tests/test_admin.py``), and nothing more lands."""
    from pyspark.errors import StreamingQueryException

    src = tmp_path / "in"
    src.mkdir()
    (src / "a.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(5)))
    q = spark.readStream.schema("id long").json(str(src)).writeStream.format("txnlog") \
        .option("topic", "gone").option("numPartitions", "2") \
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="200 milliseconds").start(lake)
    try:
        q.processAllAvailable()
        assert read_snapshot(lake, ["gone"])["gone"].num_rows == 5
        delete_topic(TransactionCoordinator(open_store(lake)), "gone")
        seq = TransactionCoordinator(open_store(lake)).log.refresh().seq
        (src / "b.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(5, 10)))
        with pytest.raises(StreamingQueryException, match=r"topic 'gone' was deleted"):
            q.processAllAvailable()
    finally:
        q.stop()
    assert TransactionCoordinator(open_store(lake)).log.refresh().seq == seq
