"""The ``txnlog`` command line, inspection side: every read-only command in-process on a local store (human and
``--json`` output, exit codes), what is not a store, output formats (lossless numbers, units, alignment, one JSON
vocabulary, streamed dump, progress off a terminal), schemas, config files, and the installed console script.
Operator commands that change a store are in ``test_cli_ops.py``; the S3 endpoint in ``test_cli_s3.py``."""

from __future__ import annotations

import decimal
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cli_lake import GROUP, TOPIC, Lake, build_lake, run, run_json
from coordinator import Producer, TransactionCoordinator, create_topic, open_store
from coordinator import inspect as ti
from coordinator.backends.s3 import S3Store
from coordinator.cli.config import DEFAULT_RETRY_ATTEMPTS, Settings, load_settings, read_config_file
from coordinator.cli.schema import parse_schema
from coordinator.coordinator import DEFAULT_TRANSACTION_TIMEOUT_MS, DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS
from coordinator.errors import InvalidOptionError

ROOT = Path(__file__).resolve().parents[1]
CONSOLE = Path(sys.executable).parent / "txnlog"
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3}|\.\d{6})?Z$")
READ_ONLY = [["topics"], ["describe", TOPIC], ["txns"], ["groups"], ["lag"], ["verify"], ["dump", TOPIC]]


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return build_lake(str(tmp_path / "lake"))


def files_of(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*") if p.is_file())


# -- inspection ---------------------------------------------------------------------------------------------------


def test_topics_and_describe(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "topics")
    assert code == 0
    header, row = out.strip().splitlines()
    assert header.split() == ["NAME", "PARTITIONS", "RECORDS", "SEGMENTS", "SIZE", "CREATED", "STATUS"]
    assert row.split()[:4] == [TOPIC, "2", "11", "3"] and "KiB" in row and row.split()[-1] == "ok"
    # Numbers are right-aligned under their headers.
    assert row.index("11") + 2 == header.index("RECORDS") + len("RECORDS")
    [t] = run_json(capsys, "topics", "--store", lake.url)
    assert t["records"] == 11 and ISO_UTC.match(t["created"]) and isinstance(t["bytes"], int) and t["damaged"] is None
    code, out, _ = run(capsys, "describe", TOPIC, "--store", lake.url)
    assert code == 0 and "id: int64, name: string" in out and "STAGED" in out
    d = run_json(capsys, "describe", TOPIC, "--store", lake.url)
    assert [p["staged_files"] for p in d["partition_info"]] == [2, 0]
    assert all(ISO_UTC.match(p["last_commit"]) for p in d["partition_info"])


def test_txns_show_what_every_transaction_touched(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "txns")
    assert code == 0
    open_line = next(line for line in out.splitlines() if line.startswith(lake.hung_txn))
    assert "hung" in open_line and "Ongoing" in open_line and f"{TOPIC}/0" in open_line
    recent = out[out.index("recent decisions"):]
    aborted_line = next(line for line in recent.splitlines() if f" {lake.aborted_txn} " in line)
    assert "CompleteAbort" in aborted_line and f"{TOPIC}/0" in aborted_line and "aborted by producer" in aborted_line
    d = run_json(capsys, "--store", lake.url, "txns", "--recent", "2")
    assert [x["txn"] for x in d["open"]] == [lake.hung_txn] and d["open"][0]["records"] == 1
    assert [(x["txn"], x["state"], x["records"]) for x in d["recent"]] == [
        (lake.crashy_txn, "CompleteCommit", 1), (lake.aborted_txn, "CompleteAbort", 1)]
    # The reserved producers of group commits outside transactions are shown with --all only.
    TransactionCoordinator(lake.open()).commit_group_offsets(GROUP, {TOPIC: {1: 1}})
    plain = [p["tid"] for p in run_json(capsys, "--store", lake.url, "txns")["producers"]]
    every = [p["tid"] for p in run_json(capsys, "--store", lake.url, "txns", "--all")["producers"]]
    assert plain == ["crashy", "etl", "hung"] and every == ["__group__.billing", *plain]


def test_groups_and_lag(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    state = TransactionCoordinator(lake.open()).log.refresh()
    ends = [state.partition(TOPIC, p).end for p in range(2)]
    rows = run_json(capsys, "--store", lake.url, "lag", "--group", GROUP)
    assert [(r["partition"], r["committed"], r["lag"]) for r in rows] == [(0, 2, ends[0] - 2), (1, None, ends[1])]
    code, out, _ = run(capsys, "--store", lake.url, "groups")
    assert code == 0 and out.splitlines()[1].split() == [GROUP, TOPIC, "1", str(ends[0] - 2 + ends[1])]
    code, _, err = run(capsys, "--store", lake.url, "lag", "--group", "nobody")
    assert code == 3 and "nobody" in err


def test_verify_reports_problems_with_their_files(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "verify")
    assert code == 0 and out.startswith("ok: no problems (3 segment(s) checked)")
    assert "1 partition record(s) not written yet" in out
    store = lake.open()
    seg = TransactionCoordinator(store).partition(TOPIC, 0).segments[0].path
    full = Path(lake.url) / seg
    full.write_bytes(full.read_bytes()[:100])
    code, out, err = run(capsys, "--store", lake.url, "--progress", "verify")
    assert code == 1 and seg in out and "truncated" in out and "1 problem(s) found" in out
    # Progress off a terminal: whole lines, no carriage returns.
    assert "verify: 3/3 segments\n" in err and "\r" not in err
    report = run_json_code(capsys, 1, "--store", lake.url, "verify")
    assert report["ok"] is False and [(p["path"], p["kind"]) for p in report["problems"]] == [(seg, "truncated")]
    assert report["pending_records"] == 1


def test_progress_on_a_terminal_is_a_bar(lake: Lake) -> None:
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a native crash shows every thread's stack in the failure
    proc = subprocess.Popen([str(CONSOLE), "--store", lake.url, "verify"], stdout=subprocess.PIPE, stderr=slave,
                            env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    drawn = b"".join(chunks).decode(errors="replace")
    assert proc.wait(60) == 0, drawn
    assert "\r" in drawn and "100%" in drawn and "3/3" in drawn  # redrawn in place on a terminal


def run_json_code(capsys: pytest.CaptureFixture[str], want: int, *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == want, err
    return json.loads(out)


def test_missing_topic_exits_3(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["describe", "nope"], ["dump", "nope"], ["delete-topic", "nope"]):
        code, out, err = run(capsys, "--store", lake.url, *argv)
        assert code == 3 and out == "" and "'nope'" in err


# -- what is not a store ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", READ_ONLY[:1] + READ_ONLY[2:] + [["expire"], ["gc", "--execute"], ["repair"],
                                                                   ["coordinator", "run", "--once"]],
                         ids=lambda a: a[0])
def test_a_path_without_a_store_is_refused_and_nothing_is_created(tmp_path: Path, argv: list[str],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    typo = tmp_path / "typo-lake"
    code, out, err = run(capsys, "--store", str(typo), *argv)
    assert code == 5 and out == "" and f"no txnlog store at file://{typo}" in err
    assert not typo.exists()


@pytest.mark.parametrize("form", ["file:{p}", "file://{p}", "{p}"])
def test_store_url_forms(lake: Lake, form: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    [t] = run_json(capsys, "--store", form.format(p=lake.url), "topics")
    assert t["records"] == 11
    assert not (Path.cwd() / "file:").exists()


def test_only_create_topic_creates_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "new")
    assert run(capsys, "--store", url, "topics")[0] == 5
    code, out, _ = run(capsys, "--store", f"file:{url}", "create-topic", "events", "--schema",
                       "id BIGINT NOT NULL, amount DECIMAL(10,2)", "--partitions", "3")
    assert code == 0 and "3 partition(s)" in out and "amount: decimal128(10, 2)" in out
    meta = run_json(capsys, "--store", url, "describe", "events")
    assert meta["partitions"] == 3 and ISO_UTC.match(meta["created"])
    assert meta["fields"] == [{"name": "id", "type": "int64", "nullable": False},
                              {"name": "amount", "type": "decimal128(10, 2)", "nullable": True}]
    code, _, err = run(capsys, "--store", url, "create-topic", "events", "--schema", "id:int64!")
    assert code == 1 and "already exists" in err
    code, _, _ = run(capsys, "--store", url, "create-topic", "events", "--schema",
                     "id:int64!,amount:decimal128(10, 2)", "--if-not-exists")
    assert code == 0


def test_read_only_commands_and_dry_runs_write_nothing(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(lake.url)
    before = files_of(root)
    dry = [["expire", "--dry-run"], ["gc", "--grace", "0"], ["repair"], ["resolve", lake.hung_txn, "--abort"],
           ["resolve", "--all", "--abort"], ["reset-offsets", GROUP, "--all-topics", "--to-earliest"],
           ["delete-group", GROUP], ["delete-topic", TOPIC], ["resolve", lake.crashy_txn]]
    for argv in READ_ONLY + dry:
        code, _out, err = run(capsys, "--store", lake.url, *argv)
        assert code == 0, (argv, err)
    assert files_of(root) == before


# -- output -------------------------------------------------------------------------------------------------------


def _walk(value: Any, key: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in _walk(v, k)]
    if isinstance(value, list):
        return [kv for v in value for kv in _walk(v, key)]
    return [(key, value)]


def test_one_json_vocabulary_across_commands(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    docs = [run_json(capsys, "--store", lake.url, *argv) for argv in READ_ONLY[:-1]]
    docs.append(run_json(capsys, "--store", lake.url, "resolve", lake.crashy_txn))
    docs.append(run_json(capsys, "--store", lake.url, "resolve", lake.hung_txn, "--abort"))
    leaves = [kv for d in docs for kv in _walk(d)]
    states = {v for k, v in leaves if k in ("state", "state_before", "last_state") and v is not None}
    assert states <= set(ti.STATES) and {"Ongoing", "CompleteCommit", "CompleteAbort"} <= states
    for key, value in leaves:
        assert key != "created_ms" and not (key.endswith("_ms") and not isinstance(value, int)), key
        if key in ("time", "created", "started", "last_commit", "first_commit") and value is not None:
            assert ISO_UTC.match(value), (key, value)


def test_dump_is_lossless_and_streamed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "lake")
    store = open_store(url)
    schema = parse_schema("x:double, d:decimal128(12, 2), big:int64, at:timestamp[us, tz=UTC], b:binary")
    create_topic(store, "n", schema, 1)
    p = Producer(store, "w")
    p.init_transactions()
    rows = [{"x": 1234567.89, "d": decimal.Decimal("1234567890.12"), "big": 2**63 - 1,
             "at": pa.scalar(1_700_000_000_123_456, pa.timestamp("us", tz="UTC")).as_py(), "b": b"\x00\xff"},
            {"x": 0.1 + 0.2, "d": None, "big": -1, "at": None, "b": None}]
    for r in rows:
        with p.transaction():
            p.send("n", [r])
    code, out, err = run(capsys, "--store", url, "dump", "n")
    assert code == 0 and err.strip() == "2 record(s)"
    assert "1234567.89" in out and "1234567890.12" in out and str(2**63 - 1) in out and "0.30000000000000004" in out
    assert "2023-11-14T22:13:20.123456Z" in out
    code, out, _ = run(capsys, "--store", url, "dump", "n", "--json")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["x"] == 1234567.89 and first["d"] == "1234567890.12" and first["big"] == 2**63 - 1
    assert first["at"] == "2023-11-14T22:13:20.123456Z" and first["_offset"] == 0 and second["x"] == 0.1 + 0.2
    # Streamed: records of a readable segment are out before a damaged one stops the dump.
    plog = TransactionCoordinator(open_store(url)).partition("n", 0)
    damaged = plog.segments[1].path
    (Path(url) / damaged).write_bytes(b"garbage")
    code, out, err = run(capsys, "--store", url, "dump", "n", "--json")
    assert code == 1 and len(out.splitlines()) == 1 and json.loads(out)["_offset"] == 0 and damaged in err


def test_a_damaged_partition_is_marked_and_the_rest_is_shown(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    store = lake.open()
    create_topic(store, "other", pa.schema([("id", pa.int64())]), 1)
    TransactionCoordinator(store).log.write_checkpoint()
    record = f"topics/{TOPIC}/0/log/00000000000000000000.json"
    store.put(record, b"{not json")
    code, out, err = run(capsys, "--store", lake.url, "topics")
    assert code == 1 and "DAMAGED" in out and "other" in out and record in err
    code, out, err = run(capsys, "--store", lake.url, "describe", TOPIC)
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()[:1].isdigit()}
    assert code == 1 and lines["0"].endswith("DAMAGED") and lines["1"].endswith("ok") and record in err
    d = run_json_code(capsys, 1, "--store", lake.url, "describe", TOPIC)
    assert record in d["damaged"] and d["partition_info"][1]["segments"] == 2


# -- options and schemas ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, fragment", [
    (["create-topic", "t", "--schema", "id:uint128"], "unknown type 'uint128'"),
    (["create-topic", "t", "--schema", "id"], "expected a type"),
    (["create-topic", "t", "--schema", "a:int64,a:string"], "duplicate column"),
    (["create-topic", "t", "--schema", "a DECIMAL(40,50)"], "precision"),
    (["create-topic", "t", "--schema", "a:int64", "--partitions", "0"], "positive integer"),
    (["create-topic", "bad/name", "--schema", "a:int64"], "invalid topic name"),
    (["create-topic", "t", "--schema", "a:int64", "--topic-config", "retention.ms=-1"], "positive duration"),
    (["dump", TOPIC, "--from", "-1"], "non-negative"),
    (["dump", TOPIC, "--partition", "9"], "no partition 9"),
    (["coordinator", "run", "--interval", "0"], "--interval must be a positive duration"),
    (["resolve"], "either a transaction id or --all"),
    (["resolve", "p.1.0.0", "--execute"], "--execute goes with --abort"),
    (["reset-offsets", GROUP, "--all-topics"], "exactly one of"),
    (["reset-offsets", GROUP, "--to-earliest"], "--topic"),
    (["reset-offsets", GROUP, "--topic", "orders:x", "--to-earliest"], "partitions must be integers"),
    (["reset-offsets", GROUP, "--all-topics", "--to-datetime", "yesterday"], "ISO-8601"),
    (["set-config", TOPIC, "--set", "cleanup.policy=compact"], "unknown topic config"),
    (["set-config", TOPIC], "--set KEY=VALUE or --unset KEY"),
    (["produce", TOPIC, "missing.jsonl"], "does not exist"),
    (["frobnicate"], "invalid choice"),
])
def test_invalid_options_exit_2(lake: Lake, capsys: pytest.CaptureFixture[str], argv: list[str],
                                fragment: str) -> None:
    code, out, err = run(capsys, "--store", lake.url, *argv)
    assert code == 2 and out == "", err
    assert fragment in err


def test_schemas_take_every_arrow_type_and_spark_ddl() -> None:
    types = [pa.int8(), pa.uint64(), pa.float16(), pa.float32(), pa.float64(), pa.bool_(), pa.string(),
             pa.large_string(), pa.binary(), pa.large_binary(), pa.binary(16), pa.decimal128(10, 2),
             pa.decimal256(50, 3), pa.date32(), pa.date64(), pa.timestamp("ms"), pa.timestamp("us", tz="UTC"),
             pa.timestamp("ns", tz="Europe/Paris"), pa.time32("ms"), pa.time64("ns"), pa.duration("us"),
             pa.list_(pa.int64()), pa.list_(pa.field("item", pa.string(), nullable=False)), pa.large_list(pa.int32()),
             pa.map_(pa.string(), pa.int64()), pa.struct([("a", pa.int64()), pa.field("b", pa.string(), False)]),
             pa.list_(pa.struct([("x", pa.decimal128(5, 1))]))]
    for t in types:
        assert parse_schema(f"c:{t}").field("c").type.equals(t), t  # str(type) parses back
    ddl = parse_schema("id BIGINT NOT NULL, amount DECIMAL(10,2), at TIMESTAMP, tags ARRAY<STRING>, "
                       "m MAP<STRING, INT>, s STRUCT<a: INT, b STRING NOT NULL> COMMENT 'x', `odd name` VARCHAR(9)")
    assert ddl == pa.schema([
        pa.field("id", pa.int64(), nullable=False), ("amount", pa.decimal128(10, 2)),
        ("at", pa.timestamp("us", tz="UTC")), ("tags", pa.list_(pa.string())), ("m", pa.map_(pa.string(), pa.int32())),
        ("s", pa.struct([("a", pa.int32()), pa.field("b", pa.string(), nullable=False)])), ("odd name", pa.string())])
    assert parse_schema("id:int64!,name:string") == pa.schema([pa.field("id", pa.int64(), False),
                                                                ("name", pa.string())])
    with pytest.raises(InvalidOptionError, match="position"):
        parse_schema("a int,")


def test_no_store_given_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TXNLOG_STORE", raising=False)
    monkeypatch.delenv("TXNLOG_CONFIG", raising=False)
    code, _, err = run(capsys, "topics")
    assert code == 2 and "no store given" in err


def test_store_from_environment(lake: Lake, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXNLOG_STORE", lake.url)
    [t] = run_json(capsys, "topics")
    assert t["name"] == TOPIC


# -- config -------------------------------------------------------------------------------------------------------


def test_defaults_file_matches_the_code() -> None:
    values, origins = read_config_file(str(ROOT / "conf" / "txnlog.defaults.toml"))
    defaults = Settings()
    assert values, "the defaults file sets nothing"
    for attr, value in values.items():
        assert getattr(defaults, attr) == value, attr
    assert values["transaction_timeout_ms"] == DEFAULT_TRANSACTION_TIMEOUT_MS == 60_000
    assert values["transactional_id_expiration_ms"] == DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS == 7 * 86_400_000
    assert values["segment_target_bytes"] == 64 * 1024 * 1024 and values["segment_format"] == "parquet"
    assert values["log_checkpoint_interval"] == 4 and values["partition_checkpoint_interval"] == 32
    assert origins["transaction_timeout_ms"].startswith("[transactions] timeout_ms in ")
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
    ("[checkpoint]\ninterval = 100\n", "unknown setting [checkpoint] interval"),
    ("[transactions]\ntimeout_ms = -5\n", "[transactions] timeout_ms in "),
    ('[segments]\nformat = "csv"\n', "[segments] format in "),
    ("[daemon]\nsweep_interval_s = 0\n", "[daemon] sweep_interval_s in "),
    ("[store\n", "not valid TOML"),
])
def test_bad_config_files_name_the_key_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str,
                                                  fragment: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(body)
    code, _, err = run(capsys, "--config", str(cfg), "--store", str(tmp_path), "topics")
    assert code == 2 and fragment in err, err
    assert "abc" not in err and "transaction_timeout_ms" not in err and "segment_format" not in err


# -- the console script -------------------------------------------------------------------------------------------


def script(*argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CONSOLE), *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_console_script(lake: Lake) -> None:
    assert CONSOLE.exists(), f"console script missing at {CONSOLE}"
    r = script("topics", "--json", env={"TXNLOG_STORE": lake.url})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["records"] == 11
    r = script("--store", lake.url, "describe", "missing")
    assert r.returncode == 3 and "missing" in r.stderr
    r = script("--store", lake.url, "dump", TOPIC, "--limit", "x")
    assert r.returncode == 2 and "--limit" in r.stderr
    r = script("--help")
    assert r.returncode == 0 and "exit codes" in r.stdout and "reset-offsets" in r.stdout
    r = subprocess.run([sys.executable, "-m", "coordinator.cli", "--store", lake.url, "groups"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and GROUP in r.stdout
    code = "import sys, coordinator.cli, coordinator.inspect, coordinator.explore; print(' '.join(sys.modules))"
    mods = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pyspark" not in mods and "tqdm" not in mods  # tqdm is imported only to draw a bar on a terminal
