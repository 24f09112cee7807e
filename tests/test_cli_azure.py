"""The ``txnlog`` command line against the loopback Azure Blob endpoint (Azurite): inspection and operator commands
with the account given as flags or through adlfs's environment chain (``AZURE_STORAGE_CONNECTION_STRING``), Spark
users' ``abfss://container@account.dfs.core.windows.net`` URLs, and credentials never shown in any output."""

from __future__ import annotations

import pytest

from azure_lake import ACCOUNT, ACCOUNT_KEY, AzureLake, connection_string, container_blobs
from cli_lake import GROUP, TOPIC, Lake, build_lake, run, run_json


def _flags(az: AzureLake, *, credentials: bool = True) -> list[str]:
    base = ["--store", az.url]
    if credentials:
        base += ["--azure-account", ACCOUNT, "--azure-endpoint", az.endpoint, "--azure-key", ACCOUNT_KEY]
    return base


@pytest.fixture
def lake(azure_lake: AzureLake) -> Lake:
    return build_lake(azure_lake.url, dict(azure_lake.options), hung_timeout_ms=1)


def test_azure_inspection_and_operator_commands(azure_lake: AzureLake, lake: Lake,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    flags = _flags(azure_lake)
    [t] = run_json(capsys, *flags, "topics")
    assert t["records"] == 11 and t["damaged"] is None
    assert t["created"] is not None and t["created"] >= "2024"  # the store's clock
    txns = run_json(capsys, *flags, "txns")
    assert [d["txn"] for d in txns["open"]] == [lake.hung_txn]
    code, out, err = run(capsys, *flags, "verify")
    assert code == 0 and "3 segment(s) checked" in out, err
    r = run_json(capsys, *flags, "resolve", lake.hung_txn, "--abort", "--execute")
    assert r["state"] == "CompleteAbort"
    assert run_json(capsys, *flags, "reset-offsets", GROUP, "--all-topics", "--to-latest", "--execute")[
        "changes"][0]["new"] == 4
    assert run_json(capsys, *flags, "lag", "--group", GROUP)[0]["lag"] == 0
    code, out, err2 = run(capsys, *flags, "coordinator", "run", "--once")
    assert code == 0 and "stopped after one sweep" in out
    for text in (out, err, err2):
        assert ACCOUNT_KEY not in text
    # The account and key from adlfs's environment chain instead of flags, and the URL as Spark users write it.
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection_string(azure_lake.endpoint))
    code, out, err = run(capsys, *_flags(azure_lake, credentials=False), "dump", TOPIC, "--json")
    assert code == 0 and len(out.splitlines()) == 11, err
    abfss = f"abfss://{azure_lake.container}@{ACCOUNT}.dfs.core.windows.net/lake"
    code, out, err = run(capsys, "--store", abfss, "--azure-endpoint", azure_lake.endpoint, "--azure-key",
                         ACCOUNT_KEY, "describe", TOPIC, "--json")
    assert code == 0 and '"partitions": 2' in out, err


def test_azure_prefix_without_a_store_is_refused_and_nothing_is_written(azure_lake: AzureLake,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--store", azure_lake.url + "-typo"] + _flags(azure_lake)[2:]
    for argv in (["topics"], ["gc", "--execute"]):
        code, out, err = run(capsys, *flags, *argv)
        assert code == 5 and "no txnlog store at az://" in err, err
    assert container_blobs(azure_lake) == {}


def test_azure_errors_never_show_credentials(azure_lake: AzureLake, capsys: pytest.CaptureFixture[str]) -> None:
    wrong_key = "d3Jvbmcta2V5LW9mLWEtdGVzdC0w" * 3  # valid base64, refused by Azurite
    code, out, err = run(capsys, "--store", azure_lake.url, "--azure-account", ACCOUNT, "--azure-endpoint",
                         azure_lake.endpoint, "--azure-key", wrong_key, "create-topic", "t", "--schema", "a:int64")
    assert code == 4 and err.startswith("txnlog: error:") and "HTTP 403" in err and "check the credentials" in err, err
    assert wrong_key not in out + err
    code, out, err = run(capsys, "--store", "az://", "topics")
    assert code == 2 and "names no valid container" in err, err
