"""The ``txnlog`` command line: every command in-process (human and ``--json`` output, exit codes), a few through
the installed console script, the sweep daemon as a real subprocess (SIGKILL, restart, SIGTERM), the config files
in ``conf/``, and a few commands against the loopback S3 endpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator import ProducerFencedError, TransactionCoordinator, open_store
from coordinator.cli import main
from coordinator.cli_config import DEFAULT_RETRY_ATTEMPTS, Settings, load_settings, read_config_file
from coordinator.coordinator import DEFAULT_TRANSACTION_TIMEOUT_MS, DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS
from coordinator.layout import marker_path
from coordinator.records import TxnState
from coordinator.s3store import S3Store
from s3_lake import TEST_KEY, TEST_SECRET, S3Lake
from test_inspect import GROUP, TOPIC, Lake, build_lake, committed_ids

ROOT = Path(__file__).resolve().parents[1]
CONSOLE = Path(sys.executable).parent / "txnlog"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return build_lake(str(tmp_path / "lake"))


def state_of(lake: Lake, tid: str) -> TxnState | None:
    meta = TransactionCoordinator(lake.open()).log.refresh().producers.get(tid)
    return None if meta is None else meta.state


# -- inspection commands ------------------------------------------------------------------------------------------


def test_topics_and_describe(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "topics")
    assert code == 0
    header, row = out.strip().splitlines()
    assert header.split()[:3] == ["NAME", "PARTITIONS", "RECORDS"] and row.split()[:3] == [TOPIC, "2", "10"]
    [t] = run_json(capsys, "topics", "--store", lake.url)
    assert t["records"] == 10 and sum(t["end_offsets"].values()) == 10
    code, out, _ = run(capsys, "describe", TOPIC, "--store", lake.url)
    assert code == 0 and "id: int64, name: string" in out and "STAGED" in out
    d = run_json(capsys, "describe", TOPIC, "--store", lake.url)
    assert [p["staged_files"] for p in d["partition_info"]] == [2, 1]


def test_missing_topic_exits_3(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["describe", "nope"], ["dump", "nope"]):
        code, out, err = run(capsys, "--store", lake.url, *argv)
        assert code == 3 and out == "" and "'nope'" in err


def test_create_topic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "new")
    code, out, _ = run(capsys, "--store", url, "create-topic", "events", "--schema", "id:int64!,name:string",
                       "--partitions", "3")
    assert code == 0 and "3 partition(s)" in out
    meta = run_json(capsys, "--store", url, "describe", "events")
    assert meta["partitions"] == 3
    assert meta["fields"] == [{"name": "id", "type": "int64", "nullable": False},
                              {"name": "name", "type": "string", "nullable": True}]
    code, _, err = run(capsys, "--store", url, "create-topic", "events", "--schema", "id:int64!,name:string")
    assert code == 1 and "already exists" in err
    code, _, _ = run(capsys, "--store", url, "create-topic", "events", "--schema", "id:int64!,name:string",
                     "--partitions", "3", "--if-not-exists")
    assert code == 0


@pytest.mark.parametrize("argv, fragment", [
    (["create-topic", "t", "--schema", "id:uint128"], "unknown type 'uint128'"),
    (["create-topic", "t", "--schema", "id"], "is not 'name:type'"),
    (["create-topic", "t", "--schema", "a:int64,a:string"], "duplicate column"),
    (["create-topic", "t", "--schema", "a:int64", "--partitions", "0"], "positive integer"),
    (["create-topic", "bad/name", "--schema", "a:int64"], "invalid topic name"),
    (["dump", TOPIC, "--from", "-1"], "non-negative"),
    (["dump", TOPIC, "--partition", "9"], "no partition 9"),
    (["coordinator", "run", "--interval", "0"], "positive number of seconds"),
    (["resolve"], "either a transaction id or --all"),
    (["frobnicate"], "invalid choice"),
])
def test_invalid_options_exit_2(lake: Lake, capsys: pytest.CaptureFixture[str], argv: list[str],
                                fragment: str) -> None:
    code, out, err = run(capsys, "--store", lake.url, *argv)
    assert code == 2 and out == ""
    assert fragment in err


def test_no_store_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TXNLOG_STORE", raising=False)
    monkeypatch.delenv("TXNLOG_CONFIG", raising=False)
    code, _, err = run(capsys, "topics")
    assert code == 2 and "no store given" in err


def test_store_from_environment(lake: Lake, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXNLOG_STORE", lake.url)
    [t] = run_json(capsys, "topics")
    assert t["name"] == TOPIC


def test_txns_lists_open_in_doubt_and_recent(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "txns")
    assert code == 0
    assert "in doubt (1)" in out and lake.in_doubt_txn in out and "in-doubt" in out
    hung_line = next(line for line in out.splitlines() if line.startswith("hung "))
    assert "Ongoing" in hung_line and lake.hung_txn in hung_line
    assert "aborted by producer" in out
    d = run_json(capsys, "--store", lake.url, "txns", "--recent", "1")
    assert [x["txn"] for x in d["in_doubt"]] == [lake.in_doubt_txn]
    assert [x["tid"] for x in d["open"]] == ["hung"]
    assert [x["outcome"] for x in d["recent"]] == ["aborted"]


def test_groups_and_lag(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    coord = TransactionCoordinator(lake.open())
    ends = [coord.partition(TOPIC, p).end_offset for p in range(2)]
    rows = run_json(capsys, "--store", lake.url, "lag", "--group", GROUP)
    assert [(r["partition"], r["committed"], r["lag"]) for r in rows] == [
        (0, 2, ends[0] - 2), (1, None, ends[1])]
    code, out, _ = run(capsys, "--store", lake.url, "groups")
    assert code == 0 and out.splitlines()[1].split() == [GROUP, TOPIC, "1", str(ends[0] - 2 + ends[1])]
    code, _, err = run(capsys, "--store", lake.url, "lag", "--group", "nobody")
    assert code == 3 and "nobody" in err


def test_dump(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_json(capsys, "--store", lake.url, "dump", TOPIC)
    assert sorted(r["id"] for r in rows) == lake.committed
    rows = run_json(capsys, "--store", lake.url, "dump", TOPIC, "--partition", "1", "--from", "1", "--to", "3")
    assert [(r["_partition"], r["_offset"]) for r in rows] == [(1, 1), (1, 2)]
    code, out, err = run(capsys, "--store", lake.url, "--progress", "dump", TOPIC, "--limit", "4")
    assert code == 0 and out.strip().endswith("(4 record(s))") and out.splitlines()[0].split()[0] == "ID"
    assert "dump: segments" in err


# -- acting on transactions ---------------------------------------------------------------------------------------


def test_resolve_rolls_forward_an_in_doubt_commit(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_json(capsys, "--store", lake.url, "dump", TOPIC, "--partition", "1") != []
    before = [r["id"] for r in run_json(capsys, "--store", lake.url, "dump", TOPIC)]
    assert 50 not in before
    code, out, _ = run(capsys, "--store", lake.url, "resolve", lake.in_doubt_txn)
    assert code == 0 and "rolled forward" in out and "now committed" in out
    after = [r["id"] for r in run_json(capsys, "--store", lake.url, "dump", TOPIC)]
    assert sorted(after) == sorted(before + [50])
    again = run_json(capsys, "--store", lake.url, "resolve", lake.in_doubt_txn)
    assert again == {"txn": lake.in_doubt_txn, "tid": "crashy", "before": "committed", "action": "none",
                     "after": "committed"}
    code, _, err = run(capsys, "--store", lake.url, "resolve", lake.in_doubt_txn, "--abort")
    assert code == 1 and "already committed" in err


def test_resolve_ongoing_needs_abort_and_fences(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--store", lake.url, "resolve", lake.hung_txn)
    assert code == 1 and "--abort" in err and state_of(lake, "hung") is TxnState.ONGOING
    code, _, err = run(capsys, "--store", lake.url, "resolve", lake.in_doubt_txn, "--abort")
    assert code == 1 and "commit point" in err
    r = run_json(capsys, "--store", lake.url, "resolve", lake.hung_txn, "--abort")
    assert r["before"] == "ongoing" and r["after"] == "aborted"
    with pytest.raises(ProducerFencedError):
        lake.hung.commit_transaction()
    assert 77 not in committed_ids(lake.open())
    code, _, err = run(capsys, "--store", lake.url, "resolve", "1.2.deadbeef")
    assert code == 3 and "unknown" in err


def test_resolve_all(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    results = run_json(capsys, "--store", lake.url, "resolve", "--all")
    assert [(r["txn"], r["after"]) for r in results] == [(lake.in_doubt_txn, "committed")]
    assert run_json(capsys, "--store", lake.url, "resolve", "--all") == []


def test_expire_aborts_timed_out_transactions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = build_lake(str(tmp_path / "lake"), hung_timeout_ms=50)
    time.sleep(0.1)
    dry = run_json(capsys, "--store", lake.url, "expire", "--dry-run")
    assert dry == {"dry_run": True, "in_doubt": 1, "timed_out": ["hung"], "expired": []}
    assert state_of(lake, "hung") is TxnState.ONGOING
    done = run_json(capsys, "--store", lake.url, "expire")
    assert done == {"dry_run": False, "rolled_forward": 1, "timed_out": ["hung"], "expired": []}
    assert state_of(lake, "hung") is TxnState.COMPLETE_ABORT
    cfg = tmp_path / "short.toml"
    cfg.write_text("[transactions]\ntransactional_id_expiration_ms = 1\n")
    time.sleep(0.01)
    code, out, _ = run(capsys, "--store", lake.url, "--config", str(cfg), "expire")
    assert code == 0 and "expired 3: crashy etl hung" in out
    assert state_of(lake, "etl") is None


# -- verify -------------------------------------------------------------------------------------------------------


def test_verify_ok_then_truncated_segment_and_corrupt_marker(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "verify")
    assert code == 0 and out.startswith("ok: no problems (2 segment(s) checked)")
    store = lake.open()
    seg = TransactionCoordinator(store).partition(TOPIC, 0).segments[0].path
    full = Path(lake.url) / seg
    full.write_bytes(full.read_bytes()[:100])
    marker = marker_path(TOPIC, 1, 0)
    (Path(lake.url) / marker).write_text('{"idx": 0, "txn": ')
    code, out, err = run(capsys, "--store", lake.url, "--progress", "verify")
    assert code == 1
    assert seg in out and "truncated" in out and marker in out and "corrupt" in out
    assert "2 problem(s) found" in out and "verify: segments" in err
    code, out, _ = run(capsys, "--store", lake.url, "verify", "--json")
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and {(p["path"], p["kind"]) for p in report["problems"]} == {
        (seg, "truncated"), (marker, "corrupt")}


# -- config -------------------------------------------------------------------------------------------------------


def test_defaults_file_matches_the_code() -> None:
    values = read_config_file(str(ROOT / "conf" / "txnlog.defaults.toml"))
    defaults = Settings()
    assert values, "the defaults file sets nothing"
    for attr, value in values.items():
        assert getattr(defaults, attr) == value, attr
    assert values["transaction_timeout_ms"] == DEFAULT_TRANSACTION_TIMEOUT_MS == 60_000
    assert values["transactional_id_expiration_ms"] == DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS == 7 * 86_400_000
    assert values["segment_target_bytes"] == 64 * 1024 * 1024 and values["segment_format"] == "parquet"
    assert values["checkpoint_interval"] == 100
    import inspect

    s3_defaults = inspect.signature(S3Store.__init__).parameters
    assert values["retry_attempts"] == DEFAULT_RETRY_ATTEMPTS == s3_defaults["max_attempts"].default
    assert values["retry_time_budget_s"] == s3_defaults["time_budget"].default


def test_example_configs_load_without_credentials() -> None:
    local = load_settings(config=str(ROOT / "conf" / "local.example.toml"), environ={})
    assert local.store_url == "file:///var/lib/txnlog/lake" and local.transaction_timeout_ms == 120_000
    s3 = load_settings(config=str(ROOT / "conf" / "s3.example.toml"), environ={})
    assert s3.store_url == "s3://my-bucket/lake" and s3.s3_endpoint and s3.s3_key is None and s3.s3_secret is None
    flagged = load_settings(config=str(ROOT / "conf" / "s3.example.toml"), environ={"TXNLOG_STORE": "memory://e"},
                            flags={"s3_region": "eu-west-1"})
    assert flagged.store_url == "memory://e" and flagged.s3_region == "eu-west-1"


@pytest.mark.parametrize("body, fragment", [
    ('[s3]\nsecret = "abc"\n', "credential"),
    ("[store]\nretry_atempts = 3\n", "unknown setting [store] retry_atempts"),
    ("[transactions]\ntimeout_ms = -5\n", "transaction_timeout_ms must be a positive integer"),
    ("[store\n", "not valid TOML"),
])
def test_bad_config_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str,
                                 fragment: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(body)
    code, _, err = run(capsys, "--config", str(cfg), "--store", str(tmp_path), "topics")
    assert code == 2 and fragment in err
    assert "abc" not in err


# -- the console script -------------------------------------------------------------------------------------------


def script(*argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CONSOLE), *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_console_script(lake: Lake) -> None:
    assert CONSOLE.exists(), f"console script missing at {CONSOLE}"
    r = script("topics", "--json", env={"TXNLOG_STORE": lake.url})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["records"] == 10
    r = script("--store", lake.url, "describe", "missing")
    assert r.returncode == 3 and "missing" in r.stderr
    r = script("--store", lake.url, "dump", TOPIC, "--limit", "x")
    assert r.returncode == 2 and "--limit" in r.stderr
    r = script("--help")
    assert r.returncode == 0 and "exit codes" in r.stdout
    assert "pyspark" not in script_imports()


def script_imports() -> str:
    """The modules a CLI run imports (the CLI must never import pyspark)."""
    code = "import sys, coordinator.cli, coordinator.inspect; print(' '.join(sys.modules))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


# -- the daemon ---------------------------------------------------------------------------------------------------


def _wait(proc: subprocess.Popen[str], cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        assert proc.poll() is None, f"daemon exited early with {proc.returncode}: {proc.communicate()[1]}"
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_daemon_resolves_survives_sigkill_and_stops_on_sigterm(tmp_path: Path) -> None:
    lake = build_lake(str(tmp_path / "lake"), hung_timeout_ms=300)
    argv = [str(CONSOLE), "coordinator", "run", "--interval", "0.2"]
    env = {**os.environ, "TXNLOG_STORE": lake.url}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait(proc, lambda: state_of(lake, "crashy") is TxnState.COMPLETE_COMMIT, "the in-doubt commit")
        _wait(proc, lambda: state_of(lake, "hung") is TxnState.COMPLETE_ABORT, "the timed-out abort")
        assert committed_ids(lake.open()) == sorted(lake.committed + lake.in_doubt_ids)
        with pytest.raises(ProducerFencedError):
            lake.hung.commit_transaction()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert proc.returncode == -signal.SIGKILL
        first_out = proc.communicate()[0]
        assert "sweep 1:" in first_out and "aborted 1 (hung)" in first_out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    proc = subprocess.Popen([*argv, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["sweep"] == 1 and first["rolled_forward"] == 0 and first["aborted"] == []
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["stopped"] == "SIGTERM"


def test_daemon_once_in_process(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "coordinator", "run", "--once")
    assert code == 0 and "sweep 1: rolled forward 1, aborted 0" in out
    assert state_of(lake, "crashy") is TxnState.COMPLETE_COMMIT


# -- S3 -----------------------------------------------------------------------------------------------------------


def _s3_flags(s3: S3Lake) -> list[str]:
    return ["--store", s3.url, "--s3-endpoint", s3.endpoint, "--s3-region", "us-east-1"]


def test_s3_commands(s3_lake: S3Lake, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    lake = build_lake(s3_lake.url, dict(s3_lake.options))
    flags = _s3_flags(s3_lake) + ["--s3-key", TEST_KEY, "--s3-secret", TEST_SECRET]
    [t] = run_json(capsys, *flags, "topics")
    assert t["records"] == 10
    code, out, err = run(capsys, *flags, "resolve", lake.in_doubt_txn)
    assert code == 0 and "now committed" in out
    code, out, err = run(capsys, *flags, "verify")
    assert code == 0 and "3 segment(s) checked" in out
    for text in (out, err):
        assert TEST_SECRET not in text and TEST_KEY not in text
    # Credentials from the standard AWS environment chain instead of flags.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_SECRET)
    rows = run_json(capsys, *_s3_flags(s3_lake), "dump", TOPIC)
    assert sorted(r["id"] for r in rows) == sorted(lake.committed + lake.in_doubt_ids)


def test_s3_errors_never_show_credentials(s3_lake: S3Lake, capsys: pytest.CaptureFixture[str]) -> None:
    secret = "cli-secret-" + "q" * 30
    code, out, err = run(capsys, "--store", f"s3://no-such-bucket-{os.getpid()}/x", "--s3-endpoint",
                         s3_lake.endpoint, "--s3-key", "AKIACLITESTKEY000000", "--s3-secret", secret,
                         "create-topic", "t", "--schema", "a:int64")
    assert code == 4 and err.startswith("txnlog: error:")
    assert secret not in out + err and "AKIACLITESTKEY000000" not in out + err


def test_store_open_is_read_only_for_inspection(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(lake.url)
    before = sorted((o.path, o.size) for o in store.list_info(""))
    for argv in (["topics"], ["txns"], ["lag"], ["groups"], ["verify"], ["dump", TOPIC], ["expire", "--dry-run"]):
        assert run(capsys, "--store", lake.url, *argv)[0] == 0
    assert sorted((o.path, o.size) for o in store.list_info("")) == before


def test_compact_and_gc_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa

    from coordinator import Producer, create_topic, read_snapshot

    url = str(tmp_path / "lake")
    store = open_store(url)
    create_topic(store, "m", pa.schema([("id", pa.int64())]), 2)
    p = Producer(store, "m")
    p.init_transactions()
    for i in range(12):
        with p.transaction():
            p.send("m", [{"id": i}], partition=i % 2)
    before = read_snapshot(open_store(url), ["m"])["m"].sort_by([("_partition", "ascending"), ("_offset", "ascending")])
    assert main(["--store", url, "--json", "compact", "m"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["partition"], r["segments_before"], r["segments_after"]) for r in rows] == [(0, 6, 1), (1, 6, 1)]
    after = read_snapshot(open_store(url), ["m"])["m"].sort_by([("_partition", "ascending"), ("_offset", "ascending")])
    assert after.equals(before)
    assert main(["--store", url, "--json", "gc", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == 0  # inside the default 24 h grace period
    assert main(["--store", url, "gc", "--grace", "0"]) == 0
    assert "deleted 12 file(s)" in capsys.readouterr().out
    assert read_snapshot(open_store(url), ["m"])["m"].num_rows == 12
    assert main(["--store", url, "gc", "--grace", "-1"]) == 2
    assert main(["--store", url, "compact", "nope"]) == 3


def test_s3_compact_and_gc(s3_lake: S3Lake, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa

    from coordinator import Producer, create_topic, read_snapshot

    store = open_store(s3_lake.url, s3_lake.options)
    create_topic(store, "m", pa.schema([("id", pa.int64())]), 1)
    p = Producer(store, "m")
    p.init_transactions()
    for i in range(5):
        with p.transaction():
            p.send("m", [{"id": i}], partition=0)
    flags = _s3_flags(s3_lake) + ["--s3-key", TEST_KEY, "--s3-secret", TEST_SECRET]
    [row] = run_json(capsys, *flags, "compact", "m")
    assert (row["segments_before"], row["segments_after"]) == (5, 1)
    assert run_json(capsys, *flags, "gc", "--grace", "0")["files"] == 5
    table = read_snapshot(open_store(s3_lake.url, s3_lake.options), ["m"])["m"].sort_by("_offset")
    assert table.column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("_offset").to_pylist() == [0, 1, 2, 3, 4]


def test_s3_inspection_and_sweep_commands(s3_lake: S3Lake, capsys: pytest.CaptureFixture[str]) -> None:
    lake = build_lake(s3_lake.url, dict(s3_lake.options), hung_timeout_ms=1)
    flags = _s3_flags(s3_lake) + ["--s3-key", TEST_KEY, "--s3-secret", TEST_SECRET]
    desc = run_json(capsys, *flags, "describe", TOPIC)
    assert desc["partitions"] == 2 and desc["records"] == 10
    txns = run_json(capsys, *flags, "txns")
    assert [d["txn"] for d in txns["in_doubt"]] == [lake.in_doubt_txn]
    assert [p["tid"] for p in txns["open"]] == ["hung"]
    assert [g["group"] for g in run_json(capsys, *flags, "groups")] == [GROUP]
    lag = run_json(capsys, *flags, "lag", "--group", GROUP)
    assert {(r["partition"], r["committed"]) for r in lag} >= {(0, 2)}
    assert run_json(capsys, *flags, "expire", "--dry-run")["timed_out"] == ["hung"]
    assert run_json(capsys, *flags, "create-topic", "more", "--schema", "id:int64", "--partitions", "3")
    code, out, _err = run(capsys, *flags, "coordinator", "run", "--once")
    assert code == 0 and "rolled forward 1" in out and "aborted 1 (hung)" in out
    assert run_json(capsys, *flags, "describe", TOPIC)["records"] == 11  # the in-doubt commit is now visible
    assert run_json(capsys, *flags, "txns")["in_doubt"] == []
