"""The ``txnlog`` operator commands that change a store, on local disk, checked through what producers, consumers
and readers then see: ``resolve --abort``, ``expire``, ``reset-offsets``, ``delete-group``, ``delete-topic``,
``add-partitions``, ``set-config``, ``produce``, ``compact``, ``gc``, ``repair``, and the sweep daemon as a real
subprocess (SIGKILL, restart, SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli_lake import GROUP, TOPIC, Lake, build_lake, committed_ids, run, run_json
from coordinator import (
    Consumer,
    ProducerFencedError,
    TransactionCoordinator,
    create_topic,
    get_topic,
    open_store,
    read_snapshot,
)
from coordinator import inspect as ti
from coordinator.cli import main
from coordinator.layout import marker_path, txn_log_path

CONSOLE = Path(sys.executable).parent / "txnlog"


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return build_lake(str(tmp_path / "lake"))


def state_of(lake: Lake, txn: str) -> str:
    found = ti.find_transaction(lake.open(), txn)
    assert found is not None
    return str(found["state"])


# -- transactions -------------------------------------------------------------------------------------------------


def test_resolve_reports_decided_transactions_in_plain_words(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "resolve", lake.crashy_txn)
    assert code == 0 and out.startswith(f"{lake.crashy_txn} of producer crashy: committed at ")
    assert f"1 record(s) in {TOPIC}/1; nothing to do" in out
    code, out, _ = run(capsys, "--store", lake.url, "resolve", lake.aborted_txn)
    assert code == 0 and "aborted at" in out and "reason: aborted by producer; nothing to do" in out
    r = run_json(capsys, "--store", lake.url, "resolve", lake.crashy_txn)
    assert r == {"txn": lake.crashy_txn, "tid": "crashy", "app": None, "state_before": "CompleteCommit",
                 "action": "none", "state": "CompleteCommit"}
    code, _, err = run(capsys, "--store", lake.url, "resolve", lake.crashy_txn, "--abort", "--execute")
    assert code == 1 and "cannot be aborted" in err
    code, _, err = run(capsys, "--store", lake.url, "resolve", "p.7.0.0")
    assert code == 3 and "unknown" in err
    code, _, err = run(capsys, "--store", lake.url, "resolve", "not-a-txn")
    assert code == 3 and "not a transaction id" in err


def test_resolve_abort_is_a_dry_run_until_executed_then_fences(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--store", lake.url, "resolve", lake.hung_txn)
    assert code == 1 and "is open" in err and "--abort --execute" in err
    code, out, _ = run(capsys, "--store", lake.url, "resolve", lake.hung_txn, "--abort")
    assert code == 0 and out.startswith(f"would abort {lake.hung_txn} of producer hung") and "--execute" in out
    assert state_of(lake, lake.hung_txn) == "Ongoing"
    r = run_json(capsys, "--store", lake.url, "resolve", lake.hung_txn, "--abort", "--execute")
    assert (r["state_before"], r["action"], r["state"]) == ("Ongoing", "aborted", "CompleteAbort")
    assert state_of(lake, lake.hung_txn) == "CompleteAbort"
    with pytest.raises(ProducerFencedError):
        lake.hung.commit_transaction()
    assert 77 not in committed_ids(lake.open())
    code, out, _ = run(capsys, "--store", lake.url, "resolve", lake.hung_txn, "--abort", "--execute")
    assert code == 0 and "aborted at" in out and "nothing to do" in out


def test_resolve_all(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "resolve", "--all")
    assert code == 0 and f"{lake.hung_txn} of producer hung: open for" in out
    assert run_json(capsys, "--store", lake.url, "resolve", "--all", "--timed-out") == []
    dry = run_json(capsys, "--store", lake.url, "resolve", "--all", "--abort")
    assert [(r["txn"], r["action"]) for r in dry] == [(lake.hung_txn, "would_abort")]
    done = run_json(capsys, "--store", lake.url, "resolve", "--all", "--abort", "--execute")
    assert [(r["txn"], r["action"], r["state"]) for r in done] == [(lake.hung_txn, "aborted", "CompleteAbort")]
    assert run_json(capsys, "--store", lake.url, "resolve", "--all") == []


def test_expire_aborts_timed_out_transactions_and_idle_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = build_lake(str(tmp_path / "lake"), hung_timeout_ms=50)
    time.sleep(0.1)
    dry = run_json(capsys, "--store", lake.url, "expire", "--dry-run")
    assert dry == {"dry_run": True, "aborted": [{"txn": lake.hung_txn, "tid": "hung"}], "expired": []}
    assert state_of(lake, lake.hung_txn) == "Ongoing"
    code, out, _ = run(capsys, "--store", lake.url, "expire")
    assert code == 0 and f"abort {lake.hung_txn} of hung (open past its timeout)" in out
    assert state_of(lake, lake.hung_txn) == "CompleteAbort"
    cfg = tmp_path / "short.toml"
    cfg.write_text("[transactions]\ntransactional_id_expiration_ms = 1\n")
    time.sleep(0.01)
    code, out, _ = run(capsys, "--store", lake.url, "--config", str(cfg), "expire")
    assert code == 0 and [line.split()[3] for line in out.splitlines()] == ["crashy", "etl", "hung"]
    assert TransactionCoordinator(lake.open()).log.refresh().producers == {}


# -- groups -------------------------------------------------------------------------------------------------------


def test_reset_offsets_dry_run_then_execute(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "reset-offsets", GROUP, "--topic", f"{TOPIC}:1", "--to-latest")
    assert code == 0 and "dry run: nothing changed" in out
    assert out.splitlines()[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
    assert out.splitlines()[1].split() == [GROUP, TOPIC, "1", "-", "7"]
    assert TransactionCoordinator(lake.open()).group_offsets(GROUP) == {TOPIC: {0: 2}}
    r = run_json(capsys, "--store", lake.url, "reset-offsets", GROUP, "--topic", TOPIC, "--to-offset", "3",
                 "--execute")
    assert r["dry_run"] is False and [(c["partition"], c["new"]) for c in r["changes"]] == [(0, 3), (1, 3)]
    with Consumer(lake.open(), group_id=GROUP) as c:
        c.subscribe([TOPIC])
        got = c.poll()
    assert sorted(zip(got.column("_partition").to_pylist(), got.column("_offset").to_pylist(), strict=True)) == [
        (0, 3), (1, 3), (1, 4), (1, 5), (1, 6)]
    r = run_json(capsys, "--store", lake.url, "reset-offsets", GROUP, "--all-topics", "--shift-by", "-1", "--execute")
    assert [c["new"] for c in r["changes"]] == [2, 2]


def test_delete_group_dry_run_then_execute(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "delete-group", GROUP)
    assert code == 0 and "(removed)" in out and "--execute" in out
    assert run_json(capsys, "--store", lake.url, "groups") != []
    code, out, _ = run(capsys, "--store", lake.url, "delete-group", GROUP, "--execute")
    assert code == 0 and f"deleted the offsets of group {GROUP}: 1 partition(s) committed" in out
    assert run_json(capsys, "--store", lake.url, "groups") == []
    code, _, err = run(capsys, "--store", lake.url, "delete-group", GROUP)
    assert code == 3 and GROUP in err


# -- topics -------------------------------------------------------------------------------------------------------


def test_delete_topic_add_partitions_and_set_config(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "add-partitions", TOPIC, "--partitions", "4")
    assert code == 0 and out.strip() == f"topic {TOPIC}: 2 -> 4 partition(s)"
    assert get_topic(lake.open(), TOPIC).partitions == 4
    code, _, err = run(capsys, "--store", lake.url, "add-partitions", TOPIC, "--partitions", "3")
    assert code == 2 and "cannot shrink" in err
    code, out, _ = run(capsys, "--store", lake.url, "set-config", TOPIC, "--set", "retention.ms=86400000")
    assert code == 0 and "retention.ms=86400000" in out
    meta = run_json(capsys, "--store", lake.url, "set-config", TOPIC, "--unset", "retention.ms", "--set",
                    "retention.bytes=1048576")
    assert meta["config"] == {"partitioner": "txnlog-v1", "retention.bytes": "1048576"} and meta["partitions"] == 4
    code, out, _ = run(capsys, "--store", lake.url, "delete-topic", TOPIC)
    assert code == 0 and out.startswith(f"would delete topic {TOPIC}: 4 partition(s)") and "--execute" in out
    assert ti.topics(lake.open())[0]["name"] == TOPIC
    r = run_json(capsys, "--store", lake.url, "delete-topic", TOPIC, "--execute")
    assert r["dry_run"] is False and r["files"] > 0
    assert run_json(capsys, "--store", lake.url, "topics") == []
    code, _, err = run(capsys, "--store", lake.url, "create-topic", TOPIC, "--schema", "id:int64")
    assert code == 1 and "not reused" in err
    assert run(capsys, "--store", lake.url, "verify")[0] == 0


# -- produce ------------------------------------------------------------------------------------------------------


def test_produce_files_as_one_transaction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "lake")
    assert main(["--store", url, "create-topic", "pay", "--schema", "id BIGINT NOT NULL, amount DECIMAL(10,2), "
                                                                    "note STRING", "--partitions", "3"]) == 0
    (tmp_path / "a.jsonl").write_text('{"id": 1, "amount": 12.34, "note": "x"}\n{"id": 2, "amount": "0.10"}\n')
    (tmp_path / "b.csv").write_text("id,amount,note\n3,99999999.99,y\n4,,\n")
    pq.write_table(pa.table({"id": pa.array([5, 6], pa.int32()), "amount": pa.array([None, None], pa.float64()),
                             "note": ["p", "q"]}), tmp_path / "c.parquet")
    capsys.readouterr()
    r = run_json(capsys, "--store", url, "produce", "pay", str(tmp_path / "a.jsonl"), str(tmp_path / "b.csv"),
                 str(tmp_path / "c.parquet"), "--key", "id")
    assert r["records"] == 6 and r["tid"] is None and sum(p["end_offset"] - p["first_offset"]
                                                          for p in r["partitions"]) == 6
    table = read_snapshot(open_store(url), ["pay"])["pay"]
    assert sorted(table.column("id").to_pylist()) == [1, 2, 3, 4, 5, 6]
    assert str(table.sort_by("id").column("amount")[2]) == "99999999.99"
    history = ti.history(open_store(url))
    assert [h["operation"] for h in history if h["operation"] == "COMMIT"] == ["COMMIT"]  # one transaction
    assert TransactionCoordinator(open_store(url)).log.refresh().producers == {}  # the one-off producer is gone
    # The same keys land in the same partitions as the Python producer puts them.
    by_id = dict(zip(table.column("id").to_pylist(), table.column("_partition").to_pylist(), strict=True))
    from coordinator import hash_partition

    assert [by_id[i] for i in range(1, 7)] == hash_partition(pa.table({"id": list(range(1, 7))}), ["id"], 3)


def test_produce_refuses_bad_files_and_publishes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "lake")
    assert main(["--store", url, "create-topic", "t", "--schema", "id:int64!"]) == 0
    (tmp_path / "good.jsonl").write_text('{"id": 1}\n')
    (tmp_path / "bad.jsonl").write_text('{"id": "one"}\n')
    code, _, err = run(capsys, "--store", url, "produce", "t", str(tmp_path / "good.jsonl"),
                       str(tmp_path / "bad.jsonl"))
    assert code == 1 and "bad.jsonl" in err
    assert read_snapshot(open_store(url), ["t"])["t"].num_rows == 0
    assert not list((Path(url) / "topics" / "t" / "0").rglob("*.parquet"))  # staged files deleted
    # Standard input, as a named producer.
    r = subprocess.run([str(CONSOLE), "--store", url, "produce", "t", "-", "--format", "jsonl", "--transactional-id",
                        "loader"], input='{"id": 7}\n{"id": 8}\n', capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "produced 2 record(s)" in r.stdout, r.stderr
    assert sorted(read_snapshot(open_store(url), ["t"])["t"].column("id").to_pylist()) == [7, 8]
    assert "loader" in TransactionCoordinator(open_store(url)).log.refresh().producers


# -- maintenance --------------------------------------------------------------------------------------------------


def test_compact_gc_and_repair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = build_lake(str(tmp_path / "lake"))
    from coordinator import Producer

    p = Producer(lake.open(), "more")
    p.init_transactions()
    for i in range(6):
        with p.transaction():
            p.send(TOPIC, [{"id": 100 + i, "name": "m"}], partition=i % 2)
    before = read_snapshot(lake.open(), [TOPIC])[TOPIC].sort_by([("_partition", "ascending"),
                                                                 ("_offset", "ascending")])
    rows = run_json(capsys, "--store", lake.url, "compact", TOPIC)
    assert [(r["partition"], r["segments_before"], r["segments_after"]) for r in rows] == [(0, 4, 1), (1, 5, 1)]
    after = read_snapshot(lake.open(), [TOPIC])[TOPIC].sort_by([("_partition", "ascending"),
                                                                ("_offset", "ascending")])
    assert after.equals(before)
    code, out, _ = run(capsys, "--store", lake.url, "gc")
    assert code == 0 and "would delete 0 file(s), 0 B" in out  # inside the default 24 h grace period
    code, out, _ = run(capsys, "--store", lake.url, "gc", "--grace", "0")
    assert code == 0 and "would delete 10 file(s)" in out and "KiB" in out and "--execute" in out
    assert len([line for line in out.splitlines() if line.startswith("topics/")]) == 10
    r = run_json(capsys, "--store", lake.url, "gc", "--grace", "0", "--execute")
    assert r["files"] == 10 and r["dry_run"] is False and isinstance(r["bytes"], int)
    assert read_snapshot(lake.open(), [TOPIC])[TOPIC].sort_by([("_partition", "ascending"),
                                                               ("_offset", "ascending")]).equals(before)
    # repair: the record crashy's writer never wrote, and a damaged one.
    store = lake.open()
    TransactionCoordinator(store).repair_records()
    damaged = marker_path(TOPIC, 0, 0)
    store.put(damaged, b'{"v": 2}')
    code, out, _ = run(capsys, "--store", lake.url, "repair")
    assert code == 0 and damaged in out and "differs" in out and "would write 1" in out
    assert store.get(damaged) == b'{"v": 2}'
    code, out, _ = run(capsys, "--store", lake.url, "repair", "--execute")
    assert code == 0 and "wrote 1 partition record(s)" in out
    assert run(capsys, "--store", lake.url, "verify")[0] == 0
    assert run_json(capsys, "--store", lake.url, "repair")["records"] == []
    assert main(["--store", lake.url, "gc", "--grace", "-1"]) == 2
    assert main(["--store", lake.url, "compact", "nope"]) == 3


def test_repair_log_is_a_dry_run_until_executed_then_readers_and_producers_go_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = build_lake(str(tmp_path / "lake"))
    from coordinator import Producer

    p = Producer(lake.open(), "more")
    p.init_transactions()
    for i in range(4):
        with p.transaction():
            p.send(TOPIC, [{"id": 200 + i, "name": "m"}], partition=i % 2)
    p.coordinator.log.flush()
    store = lake.open()
    seq = TransactionCoordinator(store).log.refresh().seq
    want = committed_ids(store)
    victim = txn_log_path(seq - 1)  # above every checkpoint: it stops every reader and writer
    damaged = b"#" + store.get(victim)[1:]
    store.put(victim, damaged)
    code, out, _ = run(capsys, "--store", lake.url, "verify")
    assert code == 1 and victim in out and "txnlog repair --log" in out
    code, _, err = run(capsys, "--store", lake.url, "describe", TOPIC)
    assert code == 1 and victim in err and "txnlog repair --log" in err
    # the repair of partition records names the entry instead of failing on it, as damage it cannot repair
    code, out, err = run(capsys, "--store", lake.url, "repair")
    assert code == 1 and victim in err and "--log" in err
    assert f"  {victim} (corrupt): a transaction-log object: 'txnlog repair --log' repairs it" in out
    code, out, _ = run(capsys, "--store", lake.url, "repair", "--log")
    assert code == 0 and out.startswith(f"{victim} (entry, above every readable checkpoint): would rebuild")
    assert "recovered: commit p." in out and "lost: " in out and "run again with --execute" in out
    assert store.get(victim) == damaged
    r = run_json(capsys, "--store", lake.url, "repair", "--log")
    assert r["dry_run"] is True and r["ok"] is True and [o["action"] for o in r["objects"]] == ["rebuild"]
    code, out, _ = run(capsys, "--store", lake.url, "repair", "--log", "--execute")
    assert code == 0 and "rebuilt: no readable checkpoint covers it" in out and "repaired 1 object(s)" in out
    assert committed_ids(lake.open()) == want
    code, out, _ = run(capsys, "--store", lake.url, "verify")
    assert code == 0 and f"{victim} was rebuilt by 'txnlog repair --log'" in out
    assert run_json(capsys, "--store", lake.url, "repair", "--log") == {"dry_run": True, "ok": True, "objects": []}
    data = tmp_path / "more.jsonl"
    data.write_text(json.dumps({"id": 300, "name": "after"}) + "\n")
    assert run(capsys, "--store", lake.url, "produce", TOPIC, str(data), "--partition", "0")[0] == 0
    assert committed_ids(lake.open()) == sorted([*want, 300])


# -- the daemon ---------------------------------------------------------------------------------------------------


def _wait(proc: subprocess.Popen[str], cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        assert proc.poll() is None, f"daemon exited early with {proc.returncode}: {proc.communicate()[1]}"
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_daemon_logs_its_actions_survives_sigkill_and_stops_on_sigterm(tmp_path: Path) -> None:
    lake = build_lake(str(tmp_path / "lake"), hung_timeout_ms=300)
    argv = [str(CONSOLE), "coordinator", "run", "--interval", "0.2"]
    env = {**os.environ, "TXNLOG_STORE": lake.url}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait(proc, lambda: state_of(lake, lake.hung_txn) == "CompleteAbort", "the timed-out abort")
        _wait(proc, lambda: ti.verify(lake.open()).pending == [], "the pending record")
        with pytest.raises(ProducerFencedError):
            lake.hung.commit_transaction()
        time.sleep(0.6)  # idle sweeps: nothing to say
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert proc.returncode == -signal.SIGKILL
        lines = proc.communicate()[0].splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "a sweep every 0.2s" in lines[0] and "every" not in " ".join(lines[1:])
    assert any(f"aborted {lake.hung_txn} of hung (open " in line for line in lines)
    assert any("wrote 1 partition record(s)" in line for line in lines)
    assert len(lines) == 3, lines  # start, the abort, the repair: idle sweeps print nothing
    proc = subprocess.Popen([*argv, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["event"] == "start" and first["store"] == f"file://{lake.url}" and first["once"] is False
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in out.strip().splitlines()]
    assert [e["event"] for e in events] == ["stop"] and events[0]["reason"] == "SIGTERM"
    assert events[0]["sweeps"] >= 2 and events[0]["actions"] == 0 and events[0]["time"].endswith("Z")


def test_daemon_once_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = build_lake(str(tmp_path / "lake"), hung_timeout_ms=1)
    time.sleep(0.01)
    code, out, _ = run(capsys, "--store", lake.url, "coordinator", "run", "--once")
    lines = out.splitlines()
    assert code == 0 and "one sweep" in lines[0] and "every" not in out
    assert f"aborted {lake.hung_txn} of hung" in lines[1] and "stopped after one sweep" in lines[-1]
    code, out, _ = run(capsys, "--store", lake.url, "coordinator", "run", "--once", "--json")
    assert [json.loads(line)["event"] for line in out.splitlines()] == ["start", "stop"]


def test_create_topic_with_retention_config_used_by_the_daemon(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "lake")
    assert main(["--store", url, "create-topic", "r", "--schema", "id:int64", "--topic-config",
                 "retention.bytes=1"]) == 0
    assert {k: v for k, v in get_topic(open_store(url), "r").config.items() if k != "partitioner"} == \
        {"retention.bytes": "1"}
    store = open_store(url)
    create_topic(store, "plain", pa.schema([("id", pa.int64())]), 1)
    from coordinator import Producer

    p = Producer(store, "w")
    p.init_transactions()
    for i in range(3):
        with p.transaction():
            p.send("r", [{"id": i}])
    capsys.readouterr()
    code, out, _ = run(capsys, "--store", url, "coordinator", "run", "--once", "--maintenance")
    assert code == 0 and "retention removed 3 record(s)" in out  # every segment is above 1 byte
    assert TransactionCoordinator(open_store(url)).log.refresh().partition("r", 0).start == 3
    assert TransactionCoordinator(open_store(url)).log.refresh().partition("plain", 0).start == 0
