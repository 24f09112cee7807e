"""The ``txnlog`` command line against the loopback S3 endpoint (moto's server): inspection, what is not a store,
operator commands and the daemon, with credentials given as flags or through the AWS environment chain and never
shown in any output."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from cli_lake import GROUP, TOPIC, Lake, build_lake, run, run_json
from coordinator import Producer, create_topic, open_store, read_snapshot
from coordinator import inspect as ti
from s3_lake import TEST_KEY, TEST_SECRET, S3Lake, bucket_objects


def _flags(s3: S3Lake, *, credentials: bool = True) -> list[str]:
    base = ["--store", s3.url, "--s3-endpoint", s3.endpoint, "--s3-region", "us-east-1"]
    return base + (["--s3-key", TEST_KEY, "--s3-secret", TEST_SECRET] if credentials else [])


@pytest.fixture
def lake(s3_lake: S3Lake) -> Iterator[Lake]:
    yield build_lake(s3_lake.url, dict(s3_lake.options), hung_timeout_ms=1)


def test_s3_inspection(s3_lake: S3Lake, lake: Lake, capsys: pytest.CaptureFixture[str],
                       monkeypatch: pytest.MonkeyPatch) -> None:
    flags = _flags(s3_lake)
    [t] = run_json(capsys, *flags, "topics")
    assert t["records"] == 11 and t["damaged"] is None
    assert t["created"] is not None and t["created"] >= "2024"  # created from Python: the store's time
    desc = run_json(capsys, *flags, "describe", TOPIC)
    assert desc["partitions"] == 2 and [p["staged_files"] for p in desc["partition_info"]] == [2, 0]
    txns = run_json(capsys, *flags, "txns")
    assert [d["txn"] for d in txns["open"]] == [lake.hung_txn]
    assert {r["txn"]: r["partitions"] for r in txns["recent"]}[lake.aborted_txn] == [f"{TOPIC}/0"]
    assert [g["group"] for g in run_json(capsys, *flags, "groups")] == [GROUP]
    assert {(r["partition"], r["committed"]) for r in run_json(capsys, *flags, "lag", "--group", GROUP)} == {
        (0, 2), (1, None)}
    code, out, err = run(capsys, *flags, "verify")
    assert code == 0 and "3 segment(s) checked" in out
    code, out, err2 = run(capsys, *flags, "resolve", lake.crashy_txn)
    assert code == 0 and "committed at" in out
    for text in (out, err, err2):
        assert TEST_SECRET not in text and TEST_KEY not in text
    # Credentials from the standard AWS environment chain instead of flags.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_SECRET)
    code, out, _ = run(capsys, *_flags(s3_lake, credentials=False), "dump", TOPIC, "--json")
    assert code == 0 and len(out.splitlines()) == 11


def test_s3_prefix_without_a_store_is_refused_and_nothing_is_written(s3_lake: S3Lake,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--store", s3_lake.url + "-typo"] + _flags(s3_lake)[2:]
    for argv in (["topics"], ["verify"], ["txns"], ["gc", "--execute"], ["coordinator", "run", "--once"]):
        code, out, err = run(capsys, *flags, *argv)
        assert code == 5 and "no txnlog store at s3://" in err, err
    assert bucket_objects(s3_lake) == {}


def test_s3_operator_commands(s3_lake: S3Lake, lake: Lake, capsys: pytest.CaptureFixture[str],
                              tmp_path: Path) -> None:
    flags = _flags(s3_lake)
    code, out, _ = run(capsys, *flags, "repair")
    assert code == 0 and "would write 1 partition record(s)" in out
    code, out, _ = run(capsys, *flags, "repair", "--execute")
    assert code == 0 and "wrote 1 partition record(s)" in out
    assert run_json(capsys, *flags, "resolve", lake.hung_txn, "--abort")["action"] == "would_abort"
    r = run_json(capsys, *flags, "resolve", lake.hung_txn, "--abort", "--execute")
    assert r["state"] == "CompleteAbort"
    assert run_json(capsys, *flags, "reset-offsets", GROUP, "--all-topics", "--to-latest", "--execute")[
        "changes"][0]["new"] == 4
    assert run_json(capsys, *flags, "lag", "--group", GROUP)[0]["lag"] == 0
    assert run_json(capsys, *flags, "create-topic", "more", "--schema", "id BIGINT, v DOUBLE", "--partitions", "3")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(f'{{"id": {i}, "v": {i / 3!r}}}\n' for i in range(20)))
    produced = run_json(capsys, *flags, "produce", "more", str(src), "--key", "id")
    assert produced["records"] == 20
    rows = [r for r in run(capsys, *flags, "dump", "more", "--json")[1].splitlines()]
    assert len(rows) == 20 and '"v":0.3333333333333333' in "".join(rows)
    assert run(capsys, *flags, "delete-group", GROUP, "--execute")[0] == 0
    assert run_json(capsys, *flags, "groups") == []
    code, out, _ = run(capsys, *flags, "coordinator", "run", "--once")
    assert code == 0 and "stopped after one sweep" in out
    time.sleep(1.1)  # S3 times have a resolution of one second: let "older than 0 s" hold
    assert run_json(capsys, *flags, "gc", "--grace", "0", "--execute")["files"] == 2  # aborted + hung
    code, out, _ = run(capsys, *flags, "verify")
    assert code == 0 and "not written yet" not in out
    assert run_json(capsys, *flags, "delete-topic", "more", "--execute")["files"] > 0
    assert [t["name"] for t in run_json(capsys, *flags, "topics")] == [TOPIC]


def test_s3_compact_and_gc(s3_lake: S3Lake, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(s3_lake.url, s3_lake.options)
    create_topic(store, "m", pa.schema([("id", pa.int64())]), 1)
    p = Producer(store, "m")
    p.init_transactions()
    for i in range(5):
        with p.transaction():
            p.send("m", [{"id": i}], partition=0)
    flags = _flags(s3_lake)
    [row] = run_json(capsys, *flags, "compact", "m")
    assert (row["segments_before"], row["segments_after"]) == (5, 1)
    time.sleep(1.1)  # S3 times have a resolution of one second: let "older than 0 s" hold
    assert run_json(capsys, *flags, "gc", "--grace", "0")["files"] == 5
    assert len(ti.segments(open_store(s3_lake.url, s3_lake.options), "m")) == 1
    assert run_json(capsys, *flags, "gc", "--grace", "0", "--execute")["files"] == 5
    table = read_snapshot(open_store(s3_lake.url, s3_lake.options), ["m"])["m"].sort_by("_offset")
    assert table.column("id").to_pylist() == [0, 1, 2, 3, 4] and table.column("_offset").to_pylist() == [0, 1, 2, 3, 4]


def test_s3_errors_never_show_credentials(s3_lake: S3Lake, capsys: pytest.CaptureFixture[str]) -> None:
    secret = "cli-secret-" + "q" * 30
    code, out, err = run(capsys, "--store", f"s3://no-such-bucket-{os.getpid()}/x", "--s3-endpoint",
                         s3_lake.endpoint, "--s3-key", "AKIACLITESTKEY000000", "--s3-secret", secret,
                         "create-topic", "t", "--schema", "a:int64")
    assert code == 4 and err.startswith("txnlog: error:")
    assert secret not in out + err and "AKIACLITESTKEY000000" not in out + err


def test_s3_resolve_and_txns_tell_a_fenced_zombies_transaction(s3_lake: S3Lake,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from test_cli_operators import make_zombie

    txn = make_zombie(s3_lake.url, dict(s3_lake.options))
    flags = _flags(s3_lake)
    code, out, err = run(capsys, *flags, "resolve", txn)
    assert code == 0 and out.startswith(f"{txn} of producer pay: never committed (fenced at entry 2); 1 staged "
                                        "record in payments/2; gc removes it"), err
    assert [f["txn"] for f in run_json(capsys, *flags, "txns")["fenced"]] == [txn]


def test_s3_missing_credentials_fail_at_once_and_a_url_without_bucket_says_so(
        s3_lake: S3Lake, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    for var in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    t0 = time.monotonic()
    code, out, err = run(capsys, *_flags(s3_lake, credentials=False), "topics")
    assert code == 4 and out == "" and "no usable credentials" in err and "--s3-key" in err, err
    assert "attempts" not in err and time.monotonic() - t0 < 2.0  # not 8 attempts with backoff
    for url in ("s3://", "s3:///lake", "s3a://"):
        code, _, err = run(capsys, "--store", url, "topics")
        assert code == 2 and f"store URL {url!r} names no bucket" in err, err
