"""The ``txnlog`` command line against the loopback GCS endpoint (fake-gcs-server): inspection, the operator
commands that write, and a URL that holds no store, with the endpoint and credentials given as flags."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from cli_lake import GROUP, TOPIC, Lake, build_lake, run, run_json
from gcs_lake import GCSLake, bucket_objects

pytestmark = pytest.mark.gcs


def _flags(gcs: GCSLake) -> list[str]:
    return ["--store", gcs.url, "--gcs-endpoint", gcs.endpoint, "--gcs-token", "anon"]


@pytest.fixture
def lake(gcs_lake: GCSLake) -> Iterator[Lake]:
    yield build_lake(gcs_lake.url, dict(gcs_lake.options), hung_timeout_ms=1)


def test_gcs_inspection_and_operator_commands(gcs_lake: GCSLake, lake: Lake,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    flags = _flags(gcs_lake)
    [t] = run_json(capsys, *flags, "topics")
    assert t["records"] == 11 and t["damaged"] is None
    assert t["created"] is not None and t["created"] >= "2024"  # the store's time
    txns = run_json(capsys, *flags, "txns")
    assert [d["txn"] for d in txns["open"]] == [lake.hung_txn]
    code, out, _ = run(capsys, *flags, "verify")
    assert code == 0 and "3 segment(s) checked" in out
    code, out, _ = run(capsys, *flags, "resolve", lake.crashy_txn)
    assert code == 0 and "committed at" in out
    # writing commands: probe (ifGenerationMatch=0 on the emulator), then act
    r = run_json(capsys, *flags, "resolve", lake.hung_txn, "--abort", "--execute")
    assert r["state"] == "CompleteAbort"
    assert run_json(capsys, *flags, "reset-offsets", GROUP, "--all-topics", "--to-latest", "--execute")[
        "changes"][0]["new"] == 4
    assert run_json(capsys, *flags, "lag", "--group", GROUP)[0]["lag"] == 0
    time.sleep(1.1)  # the store's clock has a resolution of one second: let "older than 0 s" hold
    assert run_json(capsys, *flags, "gc", "--grace", "0", "--execute")["files"] == 2  # aborted + hung
    code, out, _ = run(capsys, *flags, "dump", TOPIC, "--json")
    assert code == 0 and len(out.splitlines()) == 11


def test_gcs_prefix_without_a_store_is_refused_and_nothing_is_written(gcs_lake: GCSLake,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--store", gcs_lake.url + "-typo"] + _flags(gcs_lake)[2:]
    for argv in (["topics"], ["gc", "--execute"], ["coordinator", "run", "--once"]):
        code, out, err = run(capsys, *flags, *argv)
        assert code == 5 and "no txnlog store at gs://" in err, err
    assert bucket_objects(gcs_lake) == {}
    for url in ("gs://", "gs:///lake"):
        code, _, err = run(capsys, "--store", url, "--gcs-token", "anon", "topics")
        assert code == 2 and f"store URL {url!r} names no bucket" in err, err
