"""``txnsource.enable_native`` and ``spark.readStream.format("txnlog")``: each micro-batch read by Spark's own Parquet
reader, with the Python stream reader's rows (and metadata columns), exactly once across restarts and replays, the
stream reader wherever the native path does not apply, and stateful operators that stay stateful."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from read_helpers import SCHEMA, produce, rows

import txnsource
from coordinator import Producer, ProducerConfig, TransactionCoordinator, add_partitions, create_topic, open_store
from coordinator.maintenance import apply_retention

pytestmark = pytest.mark.spark

COLUMNS = ("id", "name", "_topic", "_partition", "_offset", "_timestamp", "_producerTimestamp")
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: Any) -> str:
    """Topic ``orders``: p0 ids 0-11 (3 transactions of 4), p1 ids 100-106 (1 transaction); topic ``ipc``: Arrow IPC
    segments (ids 0-3)."""
    root = str(tmp_path_factory.mktemp("nsread") / "lake")
    create_topic(open_store(root), "orders", SCHEMA, partitions=2)
    produce(root, "orders", [rows(0, 4), rows(4, 4), rows(8, 4)], partition=0)
    produce(root, "orders", [rows(100, 7)], partition=1, tid="other")
    create_topic(open_store(root), "ipc", SCHEMA, partitions=1)
    producer = Producer(root, "ipc", config=ProducerConfig(segment_format="arrow"))
    producer.init_transactions()
    with producer.transaction():
        producer.send("ipc", rows(0, 4), partition=0)
    return root


@pytest.fixture
def native(spark: Any) -> Iterator[Any]:
    txnsource.enable_native(spark)
    try:
        yield spark
    finally:
        txnsource.disable_native(spark)


class Run:
    """One availableNow run of ``readStream.format("txnlog")`` into ``foreachBatch``: ``batches`` maps batch id ->
    sorted rows of :data:`COLUMNS`, ``native`` batch id -> whether Spark's Parquet reader read it (from the plan of
    the batch's execution)."""

    def __init__(self, spark: Any, lake: str, checkpoint: Path, **options: str) -> None:
        self.batches: dict[int, list[tuple[Any, ...]]] = {}
        self.native: dict[int, bool] = {}
        reader = spark.readStream.format("txnlog")
        for k, v in {"startingOffsets": "earliest", **options}.items():
            reader = reader.option(k, v)

        def sink(df: Any, batch_id: int) -> None:
            (query,) = spark.streams.active
            plan = str(query._jsq.streamingQuery().lastExecution().executedPlan().toString())
            assert ("FileScan parquet" in plan) != ("MicroBatchScan" in plan), plan
            self.native[batch_id] = "FileScan parquet" in plan
            self.batches[batch_id] = sorted(tuple(r) for r in df.select(*COLUMNS).collect())

        self.query = (reader.load(lake).writeStream.foreachBatch(sink)
                      .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        assert self.query.awaitTermination(120), "the availableNow query did not finish"

    @property
    def ids(self) -> list[int]:
        return sorted(r[0] for b in self.batches.values() for r in b)


def test_micro_batches_read_the_stream_readers_rows_through_spark_parquet(native: Any, lake: str,
                                                                          tmp_path: Path) -> None:
    # 5 rows a batch: batches end inside transactions of p0 and inside the one file of p1
    python = Run(native, lake, tmp_path / "py", topic="orders", maxRecordsPerTrigger="5", readPath="python")
    nat = Run(native, lake, tmp_path / "nat", topic="orders", maxRecordsPerTrigger="5")
    assert not any(python.native.values())
    assert len(nat.batches) == 4 and all(nat.native.values())
    assert nat.batches == python.batches
    assert nat.ids == list(range(12)) + list(range(100, 107))


def test_a_restart_reads_each_row_once_and_a_replayed_batch_the_same_rows(native: Any, tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    create_topic(open_store(lake), "t", SCHEMA, partitions=1)
    produce(lake, "t", [rows(0, 4), rows(4, 4)])
    cp = tmp_path / "cp"
    first = Run(native, lake, cp, topic="t", maxRecordsPerTrigger="3")
    assert first.ids == list(range(8)) and all(first.native.values())
    produce(lake, "t", [rows(8, 4)])
    add_partitions(open_store(lake), "t", 2)  # a partition added later is read from its start
    produce(lake, "t", [rows(100, 2)], partition=1, tid="p1")
    second = Run(native, lake, cp, topic="t", maxRecordsPerTrigger="3")
    assert min(second.batches) == max(first.batches) + 1
    assert sorted(first.ids + second.ids) == list(range(12)) + [100, 101]
    assert all(second.native.values())
    last = max(second.batches)
    for name in (str(last), f".{last}.crc"):  # the last batch ran but its commit was lost: it runs again
        (cp / "commits" / name).unlink(missing_ok=True)
    replay = Run(native, lake, cp, topic="t", maxRecordsPerTrigger="3")
    assert replay.batches == {last: second.batches[last]} and replay.native[last]


def test_a_topic_matching_the_pattern_later_is_read_natively(native: Any, tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    create_topic(open_store(lake), "ev-a", SCHEMA, partitions=1)
    produce(lake, "ev-a", [rows(0, 3)])
    cp = tmp_path / "cp"
    first = Run(native, lake, cp, subscribePattern="ev-.*")
    create_topic(open_store(lake), "ev-b", SCHEMA, partitions=1)
    produce(lake, "ev-b", [rows(50, 2)], tid="b")
    second = Run(native, lake, cp, subscribePattern="ev-.*")
    assert first.ids == [0, 1, 2] and second.ids == [50, 51]
    assert all(first.native.values()) and all(second.native.values())
    assert {r[2] for b in second.batches.values() for r in b} == {"ev-b"}


def test_retention_below_the_query_fails_as_the_stream_reader_does_or_skips_natively(native: Any,
                                                                                     tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    lake, cp = str(tmp_path / "lake"), tmp_path / "cp"
    create_topic(open_store(lake), "t", SCHEMA, partitions=1)
    produce(lake, "t", [rows(i, 1) for i in range(4)])
    assert Run(native, lake, cp, topic="t").ids == [0, 1, 2, 3]
    produce(lake, "t", [rows(i, 1) for i in range(4, 8)])
    coord = TransactionCoordinator(open_store(lake))
    plog = coord.partition("t", 0)
    plog.refresh()
    apply_retention(coord, "t", 0, retention_bytes=plog.segments[0].size * 2)  # keeps offsets 6 and 7
    assert coord.partition("t", 0).start_offset == 6
    with pytest.raises(StreamingQueryException, match="below the log start 6.*failOnDataLoss=false"):
        Run(native, lake, cp, topic="t")
    skipped = Run(native, lake, cp, topic="t", failOnDataLoss="false")
    assert skipped.ids == [6, 7] and all(skipped.native.values())


def test_micro_batches_the_native_path_cannot_read_stay_with_the_stream_reader(native: Any, lake: str,
                                                                                tmp_path: Path) -> None:
    ipc = Run(native, lake, tmp_path / "ipc", topic="ipc")
    assert ipc.ids == [0, 1, 2, 3] and not any(ipc.native.values())
    per_count = Run(native, lake, tmp_path / "mrpp", topic="orders", maxRecordsPerPartition="2")
    assert len(per_count.ids) == 19 and not any(per_count.native.values())
    old = native.conf.get(PUSHDOWN_CONF)
    native.conf.set(PUSHDOWN_CONF, "true")
    try:
        pushed = Run(native, lake, tmp_path / "push", topic="orders")
    finally:
        native.conf.set(PUSHDOWN_CONF, old)
    assert len(pushed.ids) == 19 and not any(pushed.native.values())


def test_a_streaming_aggregation_keeps_its_state_across_native_micro_batches(native: Any, lake: str,
                                                                             tmp_path: Path) -> None:
    counts = (native.readStream.format("txnlog").option("topic", "orders").option("startingOffsets", "earliest")
              .option("maxRecordsPerTrigger", "5").load(lake)
              .withWatermark("_timestamp", "1 hour").groupBy("_partition").count())
    query = (counts.writeStream.format("memory").queryName("native_stream_counts").outputMode("complete")
             .option("checkpointLocation", str(tmp_path / "agg")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120)
        plan = str(query._jsq.streamingQuery().lastExecution().executedPlan().toString())
        assert "FileScan parquet" in plan and "StateStoreSave" in plan
        assert len([p for p in query.recentProgress if p["numInputRows"] > 0]) == 4
        got = {r["_partition"]: r["count"] for r in native.sql("SELECT * FROM native_stream_counts").collect()}
        assert got == {0: 12, 1: 7}
    finally:
        query.stop()
    shutil.rmtree(tmp_path / "agg", ignore_errors=True)
