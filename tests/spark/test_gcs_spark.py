"""Spark on the loopback GCS endpoint (fake-gcs-server): batch writes and reads through ``format("txnlog")`` with the
``gcs.*`` options, and the native paths, which do not reach ``gs://`` stores, falling back saying so."""

from __future__ import annotations

from typing import Any

import pytest

import txnsink
import txnsource
from coordinator import open_store, read_snapshot
from coordinator.errors import InvalidOptionError

pytestmark = [pytest.mark.spark, pytest.mark.gcs]


def test_batch_write_and_read_on_gcs_with_options(spark: Any, gcs_lake: Any) -> None:
    df = spark.range(40).selectExpr("id", "cast(id % 4 as string) as k")
    w = df.write.format("txnlog").mode("append").option("topic", "g").option("numPartitions", "2")
    for k, v in gcs_lake.options.items():
        w = w.option(k, v)
    w.option("partitionKey", "k").save(gcs_lake.url)
    w.option("partitionKey", "k").save(gcs_lake.url)  # a second job: a second transaction
    got = read_snapshot(gcs_lake.url, ["g"], options=gcs_lake.options)["g"]
    assert sorted(got.column("id").to_pylist()) == sorted(list(range(40)) * 2)
    r = spark.read.format("txnlog").option("topic", "g")
    for k, v in gcs_lake.options.items():
        r = r.option(k, v)
    read = r.load(gcs_lake.url)
    assert sorted(r.id for r in read.select("id").collect()) == sorted(list(range(40)) * 2)
    for p in (0, 1):  # dense offsets per partition: each job's rows committed once
        offsets = sorted(r._offset for r in read.where(f"_partition = {p}").select("_offset").collect())
        assert offsets == list(range(len(offsets)))


def test_native_paths_fall_back_on_gcs_and_say_why(spark: Any, gcs_lake: Any) -> None:
    url, options = gcs_lake.url, dict(gcs_lake.options)
    df = spark.range(12).selectExpr("id")
    got = txnsink.write(df, url, "n", numPartitions=1, **options)
    assert got.path == "python" and "do not reach gs:// stores" in (got.reason or "")
    with pytest.raises(InvalidOptionError, match="do not reach gs:// stores"):
        txnsink.write(df, url, "n", writePath="native", **options)
    auto = txnsource.read(spark, url, topic="n", **options)
    assert sorted(r.id for r in auto.select("id").collect()) == list(range(12)) and auto.inputFiles() == []
    with pytest.raises(InvalidOptionError, match="do not reach gs:// stores"):
        txnsource.read(spark, url, topic="n", readPath="native", **options)
    assert open_store(url, options).counters.total() == 0  # opening reads nothing


def test_stream_commit_protocol_on_gcs(gcs_lake: Any, tmp_path: Any) -> None:
    """The streaming sink's commit, as a restarted query replays it: the same micro-batch twice is published once."""
    import json

    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    from txnsink import make_stream_writer
    from txnsink.staging import TaskIds

    (tmp_path / "cp").mkdir()
    (tmp_path / "cp" / "metadata").write_text(json.dumps({"id": "q-gcs"}))
    opts = {"path": gcs_lake.url, "topic": "gs", "checkpointLocation": str(tmp_path / "cp"), **gcs_lake.options}
    w = make_stream_writer(opts, StructType([StructField("id", LongType())]), False)
    for attempt in range(2):
        rows = iter([pa.record_batch({"id": pa.array([7, 8], pa.int64())})])
        m = w.stage(rows, TaskIds(0, attempt, attempt, None, 0))
        w.commit([m], 0)
    got = read_snapshot(gcs_lake.url, ["gs"], options=gcs_lake.options)["gs"]
    assert sorted(got.column("id").to_pylist()) == [7, 8]
