"""Retention under a running stream: by default the query fails clearly; with failOnDataLoss=false it skips ahead
to the log start (Spark's Kafka source behaves the same)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from coordinator import Producer, TransactionCoordinator, create_topic, open_store, read_snapshot
from coordinator.maintenance import apply_retention


def produce(lake: str, ids: range) -> None:
    p = Producer(open_store(lake), "src")
    p.init_transactions()
    for i in ids:
        with p.transaction():
            p.send("in", [{"id": i}], partition=0)


def run(spark: Any, lake: str, ckpt: str, **extra: str) -> Any:
    reader = spark.readStream.format("txnlog").option("topic", "in").option("startingOffsets", "earliest")
    for k, v in extra.items():
        reader = reader.option(k, v)
    q = (reader.load(lake).select("id").writeStream.format("txnlog").option("topic", "out")
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start(lake))
    return q


@pytest.mark.spark
def test_retention_below_a_stream_fails_clearly_or_skips_when_asked(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    lake, ckpt = str(tmp_path / "lake"), str(tmp_path / "ckpt")
    create_topic(open_store(lake), "in", pa.schema([("id", pa.int64())]), 1)
    produce(lake, range(0, 10))
    run(spark, lake, ckpt).awaitTermination()
    produce(lake, range(10, 20))
    coord = TransactionCoordinator(open_store(lake))
    plog = coord.partition("in", 0)
    plog.refresh()
    apply_retention(coord, "in", 0, retention_bytes=plog.segments[0].size * 5)  # keeps offsets 15..19
    assert coord.partition("in", 0).start_offset == 15

    failing = run(spark, lake, ckpt)
    with pytest.raises(StreamingQueryException, match="below the log start 15.*failOnDataLoss=false"):
        failing.awaitTermination()
    assert sorted(read_snapshot(lake, ["out"])["out"].column("id").to_pylist()) == list(range(10))

    run(spark, lake, ckpt, failOnDataLoss="false").awaitTermination()
    assert sorted(read_snapshot(lake, ["out"])["out"].column("id").to_pylist()) == list(range(10)) + list(
        range(15, 20))


@pytest.mark.spark
def test_fail_on_data_loss_takes_true_or_false(spark: Any, tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    create_topic(open_store(lake), "in", pa.schema([("id", pa.int64())]), 1)
    with pytest.raises(Exception, match="failOnDataLoss.*'maybe'"):
        spark.readStream.format("txnlog").option("topic", "in").option("failOnDataLoss", "maybe").load(lake)
