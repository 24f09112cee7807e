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
