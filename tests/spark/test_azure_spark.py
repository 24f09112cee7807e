"""Spark batch reads and writes through ``format("txnlog")`` on an Azure Blob store (Azurite) with the ``azure.*``
options: the Python data source path (the native paths would need hadoop-azure: ``auto`` falls back saying so)."""

from __future__ import annotations

from typing import Any

import pytest

import txnsink
import txnsource
from azure_lake import AzureLake
from coordinator import InvalidOptionError, read_snapshot


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
