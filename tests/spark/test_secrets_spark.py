"""G9 through Spark: credentials passed as s3.* options never reach the bucket, the streaming checkpoint, query
plans, progress reports or what Spark and the Python workers print."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from s3_lake import TEST_KEY, TEST_SECRET, S3Lake, bucket_objects

SECRETS = (TEST_KEY, TEST_SECRET)


def clean(text: str) -> bool:
    return not any(s in text for s in SECRETS)


@pytest.mark.spark
def test_spark_reads_and_writes_keep_credentials_out_of_everything(
    spark: Any, s3_lake: S3Lake, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    opts = dict(s3_lake.options)
    df = spark.createDataFrame([(i, f"v{i}") for i in range(50)], "id long, v string")
    df.write.format("txnlog").options(**opts).option("topic", "src").option("numPartitions", "2") \
        .mode("append").save(s3_lake.url)
    read = spark.read.format("txnlog").options(**opts).option("topic", "src").load(s3_lake.url)
    assert read.count() == 50
    plans = [read._jdf.queryExecution().toString()]  # analysed, optimised and physical plans
    ckpt = tmp_path / "ckpt"
    q = (spark.readStream.format("txnlog").options(**opts).option("topic", "src")
         .option("startingOffsets", "earliest").load(s3_lake.url)
         .selectExpr("id", "upper(v) AS v")
         .writeStream.format("txnlog").options(**opts).option("topic", "dst")
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start(s3_lake.url))
    q.awaitTermination()
    progress = str(q.recentProgress) + str(q.lastProgress)
    assert spark.read.format("txnlog").options(**opts).option("topic", "dst").load(s3_lake.url).count() == 50
    with pytest.raises(Exception) as err:  # an error path too: a topic that does not exist
        spark.read.format("txnlog").options(**opts).option("topic", "missing").load(s3_lake.url).count()
    out = capfd.readouterr()

    for key, data in bucket_objects(s3_lake).items():
        assert all(s.encode() not in data for s in SECRETS), f"credential in store object {key}"
    for root, _dirs, files in os.walk(ckpt):
        for name in files:
            data = (Path(root) / name).read_bytes()
            assert all(s.encode() not in data for s in SECRETS), f"credential in checkpoint file {name}"
    assert clean(progress), "credential in streaming progress"
    assert clean(str(err.value)), "credential in an error message"
    assert clean(out.out) and clean(out.err), "credential in what Spark or its workers printed"
    for plan in plans:
        assert clean(plan), "credential in a query plan"
