"""Spark batch and streaming reads and writes through ``format("txnlog")`` on an Azure Blob store (Azurite) with
the ``azure.*`` options: the Python data source path (the native paths would need hadoop-azure: ``auto`` falls back
saying so). A streaming driver SIGKILLed mid-stream and restarted stays exactly once on Azure too:
``test_gcs_spark.py::test_sigkilled_streaming_driver_on_gcs_and_azure_restarted_gives_exactly_once`` (one driver
for both stores)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from read_helpers import SCHEMA, produce, rows
from test_stream_read import Run
from test_stream_write import make_input, run_stream

import txnsink
import txnsource
from azure_lake import AzureLake
from coordinator import InvalidOptionError, create_topic, open_store, read_snapshot

pytestmark = pytest.mark.spark


def test_batch_write_and_read_on_azure_fall_back_to_the_data_source_saying_why(spark: Any,
                                                                              azure_lake: AzureLake) -> None:
    url, options = azure_lake.url, dict(azure_lake.options)
    df = spark.range(20).selectExpr("id", "cast(id * 2 as string) as name")
    got = txnsink.write(df, url, "orders", numPartitions=2, **options)
    assert got.path == "python" and "hadoop-azure" in (got.reason or "")
    with pytest.raises(InvalidOptionError, match="hadoop-azure") as err:
        txnsink.write(df, url, "orders", writePath="native", **options)
    assert options["azure.key"] not in str(err.value)
    assert read_snapshot(url, ["orders"], options=options)["orders"].num_rows == 20  # the refused write wrote nothing
    (df.selectExpr("id + 100 as id", "name").write.format("txnlog").mode("append").option("topic", "orders")
     .options(**options).save(url))
    read = txnsource.read(spark, url, topic="orders", **options)
    assert sorted(r.id for r in read.select("id").collect()) == list(range(20)) + list(range(100, 120))
    assert read.filter("_partition = 1").count() > 0
    with pytest.raises(InvalidOptionError, match="hadoop-azure"):
        txnsource.read(spark, url, topic="orders", readPath="native", **options)
    plain = spark.read.format("txnlog").options(topic="orders", **options).load(url)
    assert plain.count() == 40 and plain.filter("_offset < 0").count() == 0


def test_stream_write_on_azure_restarted_and_replayed_stays_exactly_once(spark: Any, azure_lake: AzureLake,
                                                                         tmp_path: Path) -> None:
    url, options = azure_lake.url, dict(azure_lake.options)
    ids = make_input(tmp_path / "in", 2, 5)
    q = run_stream(spark, tmp_path / "in", url, tmp_path / "cp", transactionalId="etl", **options)
    assert q.exception() is None
    ids += make_input(tmp_path / "in", 2, 5, start=2)
    q = run_stream(spark, tmp_path / "in", url, tmp_path / "cp", transactionalId="etl", **options)
    assert q.exception() is None
    # as if the driver died after the sink committed the last batch but before Spark wrote its commit log entry
    commits = sorted((n for n in os.listdir(tmp_path / "cp" / "commits") if n.isdigit()), key=int)
    os.remove(tmp_path / "cp" / "commits" / commits[-1])
    crc = tmp_path / "cp" / "commits" / f".{commits[-1]}.crc"
    if crc.exists():
        crc.unlink()
    q = run_stream(spark, tmp_path / "in", url, tmp_path / "cp", transactionalId="etl", **options)
    assert q.exception() is None
    assert (tmp_path / "cp" / "commits" / commits[-1]).exists()  # Spark did replay that batch
    got = read_snapshot(url, ["out"], options=options)["out"].column("id").to_pylist()
    assert sorted(got) == ids  # each row once


def test_stream_read_on_azure_restarts_without_duplicates_or_gaps(spark: Any, azure_lake: AzureLake,
                                                                 tmp_path: Path) -> None:
    url, options = azure_lake.url, dict(azure_lake.options)
    create_topic(open_store(url, options), "orders", SCHEMA, partitions=2)
    produce(url, "orders", [rows(0, 4), rows(4, 4)], partition=0, options=options)
    produce(url, "orders", [rows(100, 3)], partition=1, tid="other", options=options)
    opts = {"topic": "orders", "startingOffsets": "earliest", "maxRecordsPerTrigger": "4", **options}
    first = Run(spark, url, tmp_path / "ck", **opts)
    produce(url, "orders", [rows(8, 3)], partition=0, options=options)
    second = Run(spark, url, tmp_path / "ck", **opts)
    assert min(second.batches) == max(first.batches) + 1
    assert sorted(first.ids + second.ids) == list(range(11)) + list(range(100, 103))
