"""G9: credentials never reach the store, a log, an error message, a repr or command output.

Everything here runs with recognisable fake credentials against the loopback S3 endpoint, then searches every
object in the bucket, every captured log record and every captured output for them.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from coordinator import (
    Consumer,
    Producer,
    StoreError,
    StoreOptions,
    TxnLogError,
    create_topic,
    open_store,
)
from coordinator.cli import main
from s3_lake import TEST_KEY, TEST_REGION, TEST_SECRET, S3Lake, bucket_objects

SECRETS = (TEST_KEY, TEST_SECRET)


def assert_clean(text: str, where: str) -> None:
    for s in SECRETS:
        assert s not in text, f"a credential leaked into {where}"


def test_credentials_never_reach_store_logs_errors_or_output(
    s3_lake: S3Lake, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    url, opts = s3_lake.url, s3_lake.options
    store = open_store(url, opts)
    create_topic(store, "orders", pa.schema([("id", pa.int64())]), 2, {"owner": "team"})
    p = Producer(store, "etl")
    p.init_transactions()
    with p.transaction():
        p.send("orders", [{"id": i} for i in range(20)], key="id")
        p.send_offsets_to_transaction({"orders": {0: 1}}, "g")
    p.begin_transaction()
    p.send("orders", [{"id": 99}])
    p.flush()
    p.abort_transaction()
    c = Consumer(store, group_id="g")
    c.subscribe(["orders"])
    assert c.poll().num_rows == 19  # the group committed offset 1 of partition 0

    # Failures whose messages must not carry the credentials.
    messages = []
    for bad_url in (f"s3://no-such-bucket-{s3_lake.bucket}/lake",):
        with pytest.raises(TxnLogError) as err:
            open_store(bad_url, opts).list("_txn/log")
        messages.append(str(err.value) + repr(err.value))
    with pytest.raises(StoreError) as err2:
        open_store(url, {**opts, "s3.endpoint": "http://127.0.0.1:9", "s3.maxAttempts": "2"}).get("x")
    messages.append(str(err2.value))
    messages += [repr(store), repr(StoreOptions.from_options(opts)), str(StoreOptions.from_options(opts))]

    # The command line with credentials as flags, human and JSON output.
    cli = ["--store", url, "--s3-endpoint", s3_lake.endpoint, "--s3-region", TEST_REGION,
           "--s3-key", TEST_KEY, "--s3-secret", TEST_SECRET]
    for cmd in (["topics"], ["describe", "orders"], ["txns"], ["lag"], ["verify"], ["dump", "orders"],
                ["--json", "txns"], ["describe", "missing"]):
        main(cli + cmd)
    config = tmp_path / "fast.toml"
    config.write_text("[store]\nretry_attempts = 2\n")
    main(["--store", url, "--config", str(config), "--s3-endpoint", "http://127.0.0.1:9", "--s3-key", TEST_KEY,
          "--s3-secret", TEST_SECRET, "describe", "orders"])
    out = capsys.readouterr()

    objects = bucket_objects(s3_lake)
    assert any(k.endswith(".parquet") for k in objects) and any("_txn/log/" in k for k in objects)
    for key, data in objects.items():
        assert_clean(key, "an object key")
        assert TEST_KEY.encode() not in data and TEST_SECRET.encode() not in data, f"credential in {key}"
    for m in messages:
        assert_clean(m, "an error message or repr")
    assert_clean(out.out, "command output")
    assert_clean(out.err, "command errors")
    for rec in caplog.records:
        assert_clean(rec.getMessage(), f"log record of {rec.name}")
    assert len(caplog.records) > 0  # the store did log (botocore/s3fs at DEBUG): the check above looked at something
