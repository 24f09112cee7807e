"""Writes through Spark against the loopback S3 server: store access travels as ``s3.*`` options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator import open_store, read_snapshot
from core_helpers import every_object

pytestmark = [pytest.mark.spark, pytest.mark.s3]


def test_batch_write_to_s3_with_options(spark: Any, s3_lake: Any) -> None:
    df = spark.range(50).selectExpr("id", "cast(id % 4 as string) as k")
    w = df.write.format("txnlog").mode("append").option("topic", "s3t").option("numPartitions", "2")
    for k, v in s3_lake.options.items():
        w = w.option(k, v)
    w.option("partitionKey", "k").save(s3_lake.url)
    got = read_snapshot(s3_lake.url, ["s3t"], options=s3_lake.options)["s3t"]
    assert sorted(got.column("id").to_pylist()) == list(range(50))
    store = open_store(s3_lake.url, s3_lake.options)
    secret = s3_lake.options["s3.secret"].encode()
    assert all(secret not in data for _, data in every_object(store))


def test_stream_commit_protocol_on_s3(s3_lake: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    from txnsink import make_stream_writer
    from txnsink.staging import TaskIds

    (tmp_path / "cp").mkdir()
    (tmp_path / "cp" / "metadata").write_text(json.dumps({"id": "q-s3"}))
    opts = {"path": s3_lake.url, "topic": "s3s", "checkpointLocation": str(tmp_path / "cp"), **s3_lake.options}
    w = make_stream_writer(opts, StructType([StructField("id", LongType())]), False)
    for attempt in range(2):  # the same batch twice: published once
        rows = iter([pa.record_batch({"id": pa.array([7, 8], pa.int64())})])
        m = w.stage(rows, TaskIds(0, attempt, attempt, None, 0))
        w.commit([m], 0)
    got = read_snapshot(s3_lake.url, ["s3s"], options=s3_lake.options)["s3s"]
    assert sorted(got.column("id").to_pylist()) == [7, 8]
