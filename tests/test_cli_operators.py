"""The ``txnlog`` command line as operators meet it: one syntax for durations and sizes (input and output), one-line
errors, the documented defaults are the code's, past tense after ``--execute``, what ``resolve`` and ``txns`` say
of a fenced producer's transaction and of a failed ``produce``, ``dump``'s columns and count, and the events
maintenance reports. Runs on local disk; the S3 endpoint cases are in ``test_cli_s3.py``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli_lake import Lake, build_lake, run, run_json
from coordinator.cli.config import CONFIG_KEYS, Settings, load_settings
from coordinator.cli.parser import build_parser
from coordinator.errors import InvalidOptionError
from coordinator.maintenance import DEFAULT_GC_GRACE_MS
from coordinator.topic_admin import check_config
from coordinator.units import fmt_duration, fmt_size, parse_duration_ms, parse_size

ROOT = Path(__file__).resolve().parents[1]
CLI_DOC = ROOT / "docs" / "cli.md"


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return build_lake(str(tmp_path / "lake"))


# -- durations and sizes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, unit, ms", [
    ("1d", "s", 86_400_000), ("5s", "s", 5000), ("15m", "s", 900_000), ("4m05s", "s", 245_000),
    ("2d04h", "s", 187_200_000), ("850ms", "s", 850), ("12.5s", "ms", 12_500), ("1h", "ms", 3_600_000),
    ("1 h 30 min", "ms", 5_400_000), ("86400", "s", 86_400_000), ("604800000", "ms", 604_800_000),
    ("0.5", "s", 500), ("1w", "ms", 604_800_000),
])
def test_durations_read_every_form_printed_and_plain_numbers(text: str, unit: str, ms: int) -> None:
    assert parse_duration_ms(text, what="x", default_unit=unit) == ms


def test_what_is_printed_reads_back() -> None:
    for ms in (0, 7, 850, 1000, 12_500, 245_000, 3_600_000, 11_520_000, 187_200_000):
        shown = fmt_duration(ms)
        back = parse_duration_ms(shown, what="x", zero_ok=True)
        assert abs(back - ms) <= max(1, ms // 100), (ms, shown, back)
    for n in (0, 512, 1024, 36_045, 64 * 1024 * 1024, 3 * 1024**3 // 2):
        shown = fmt_size(n)
        assert abs(parse_size(shown, what="x", zero_ok=True) - n) <= max(1, n // 100), (n, shown)
    assert parse_size("64MiB", what="x") == parse_size("64 MiB", what="x") == 64 * 1024 * 1024
    assert parse_size("10GB", what="x") == 10**10 and parse_size("4096", what="x") == 4096


@pytest.mark.parametrize("text", ["", "x", "5 parsecs", "-1s", "1d-2h", "s", "0", "inf", "5s5"])
def test_bad_durations_name_the_option(text: str) -> None:
    with pytest.raises(InvalidOptionError, match="^--grace must be a positive duration"):
        parse_duration_ms(text, what="--grace", default_unit="s")


def test_topic_config_takes_units_and_plain_numbers() -> None:
    assert check_config({"retention.ms": "1h", "retention.bytes": "64MiB"}) == {
        "retention.ms": "3600000", "retention.bytes": str(64 * 1024 * 1024)}
    assert check_config({"retention.ms": "604800000", "retention.bytes": "1"}) == {
        "retention.ms": "604800000", "retention.bytes": "1"}
    with pytest.raises(InvalidOptionError, match="topic config retention.bytes must be a positive size"):
        check_config({"retention.bytes": "lots"})


def test_cli_options_take_units(lake: Lake, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "--store", lake.url, "gc", "--grace", "1d")
    assert code == 0 and "more than 1d00h ago" in out
    assert run_json(capsys, "--store", lake.url, "gc", "--grace", "12h")["grace_ms"] == 43_200_000
    assert run_json(capsys, "--store", lake.url, "gc", "--grace", "60")["grace_ms"] == 60_000  # plain seconds
    args = build_parser().parse_args(["coordinator", "run", "--interval", "5s"])
    assert args.interval == 5000
    args = build_parser().parse_args(["compact", "--target-bytes", "64MiB"])
    assert args.target_bytes == 64 * 1024 * 1024
    meta = run_json(capsys, "--store", lake.url, "set-config", "orders", "--set", "retention.ms=1h")
    assert meta["config"]["retention.ms"] == "3600000"
    cfg = tmp_path / "c.toml"
    cfg.write_text('[transactions]\ntimeout_ms = "2m"\n[daemon]\nsweep_interval_s = "1m"\n'
                   '[segments]\ntarget_bytes = "8MiB"\n')
    s = load_settings(config=str(cfg), environ={})
    assert (s.transaction_timeout_ms, s.sweep_interval_s, s.segment_target_bytes) == (120_000, 60.0, 8 << 20)
    cfg.write_text('[daemon]\nsweep_interval_s = "soon"\n')
    code, _, err = run(capsys, "--config", str(cfg), "--store", lake.url, "topics")
    assert code == 2 and f"[daemon] sweep_interval_s in {cfg} must be a positive duration" in err


# -- errors -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, fragment", [
    (["gc", "--grace", "soon"], "--grace must be a non-negative duration"),
    (["compact", "--target-bytes", "big"], "--target-bytes must be a positive size"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["describe"], "the following arguments are required: topic"),
    (["dump", "orders", "--limit", "x"], "expected a non-negative integer"),
])
def test_usage_errors_are_one_line(lake: Lake, capsys: pytest.CaptureFixture[str], argv: list[str],
                                   fragment: str) -> None:
    code, out, err = run(capsys, "--store", lake.url, *argv)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("txnlog: error: ") and "usage:" not in err, err
    assert fragment in err


# -- documented defaults ------------------------------------------------------------------------------------------


def _doc_settings_table() -> dict[tuple[str, str], str]:
    """``(section, key) -> documented default`` from the settings table of docs/cli.md."""
    text = CLI_DOC.read_text()
    body = text[text.index("## Settings file"):text.index("## Output")]
    out = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`["):
            continue
        for key in re.findall(r"`\[(\w+)\] (\w+)`", cells[0]):
            out[key] = cells[1]
    return out


def test_documented_defaults_are_the_code() -> None:
    documented = _doc_settings_table()
    assert set(documented) == set(CONFIG_KEYS), "docs/cli.md's settings table and the config keys differ"
    code = Settings()
    for (section, key), text in documented.items():
        value = getattr(code, CONFIG_KEYS[(section, key)])
        first = text.split(" (")[0].strip("`")
        shown = None if first == "none" else type(value)(first) if value is not None else first
        assert shown == value, f"[{section}] {key}: docs/cli.md says {text!r}, the code uses {value!r}"
    doc = CLI_DOC.read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore[union-attr]
    recent = re.search(r"the last `N`, default (\d+)", doc)
    assert recent and int(recent.group(1)) == sub["txns"].get_default("recent")
    grace = re.search(r"\[--grace DURATION\].*?default `([^`]+)`", doc)
    assert grace and parse_duration_ms(grace.group(1), what="doc", default_unit="s") == DEFAULT_GC_GRACE_MS


# -- fenced producers' transactions -------------------------------------------------------------------------------


def make_zombie(url: str, options: dict[str, str] | None = None, *, expire: bool = False) -> str:
    """Topic ``payments`` (3 partitions); producer ``pay`` commits one record, stages one in ``payments/2`` and is
    fenced by a new producer of its transactional id (and, with ``expire``, its id expires). Returns the zombie's
    transaction id."""
    import pyarrow as pa

    from coordinator import Producer, TransactionCoordinator, create_topic, open_store
    from coordinator.errors import ProducerFencedError

    store = open_store(url, options or {})
    create_topic(store, "payments", pa.schema([("id", pa.int64())]), 3)
    zombie = Producer(store, "pay")
    zombie.init_transactions()
    with zombie.transaction():
        zombie.send("payments", [{"id": 0}], partition=1)
    txn = zombie.begin_transaction()
    zombie.send("payments", [{"id": 1}], partition=2)
    zombie.flush()
    Producer(open_store(url, options or {}), "pay").init_transactions()
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    if expire:
        import time

        time.sleep(0.01)
        assert TransactionCoordinator(open_store(url, options or {}),
                                      transactional_id_expiration_ms=1).expire_transactional_ids() == ["pay"]
    return txn


@pytest.mark.parametrize("expire", [False, True], ids=["fenced", "fenced-then-expired"])
def test_resolve_and_txns_tell_a_fenced_zombies_transaction(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            expire: bool) -> None:
    url = str(tmp_path / "lake")
    txn = make_zombie(url, expire=expire)
    code, out, err = run(capsys, "--store", url, "resolve", txn)
    assert code == 0, err
    assert out.startswith(f"{txn} of producer pay: never committed (fenced at entry 2); 1 staged record in "
                          "payments/2; gc removes it")
    r = run_json(capsys, "--store", url, "resolve", txn)
    assert (r["state_before"], r["action"]) == ("CompleteAbort", "none")
    d = run_json(capsys, "--store", url, "txns")
    assert [(f["txn"], f["fenced_seq"], f["partitions"], f["records"]) for f in d["fenced"]] == [
        (txn, 2, ["payments/2"], 1)]
    code, out, _ = run(capsys, "--store", url, "txns")
    line = next(line for line in out.splitlines() if line.startswith(txn + " "))
    assert "CompleteAbort" in line and "payments/2" in line
    # GC removes it, and then nothing staged is left.
    assert run_json(capsys, "--store", url, "gc", "--grace", "0", "--execute")["files"] == 1
    code, out, _ = run(capsys, "--store", url, "resolve", txn)
    assert code == 0 and "never committed (fenced at entry 2); nothing it staged is left" in out
    assert run_json(capsys, "--store", url, "txns")["fenced"] == []


# -- produce errors and txns --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, body, message", [
    ("a.jsonl", '{"id": 1}\n{"id": 2}\n\n{"id": "one"}\n', "line 4, field 'id': \"one\" is not of type int64"),
    ("b.jsonl", '{"id": 1}\n{"idd": 2}\n', "line 2, field 'idd': not a column of the topic"),
    ("c.jsonl", '{"id": 1}\nnot json\n', "line 2: not valid JSON"),
    ("d.jsonl", '{"id": 1, "amount": "abc"}\n', "line 1, field 'amount': \"abc\" is not of type decimal128(10, 2)"),
    ("e.jsonl", '{"id": 1}\n{"note": "x"}\n', "line 2, field 'id': missing"),
    ("a.csv", "id,amount,note\n1,2.5,x\n2,zz,y\n", "line 3, field 'amount': 'zz' is not of type decimal128(10, 2)"),
    ("b.csv", "id,amount,note\nq,1,x\n", "line 2, field 'id': 'q' is not of type int64"),
    ("c.csv", "id,amount,note\n1,2,3\n4,5,6,7\n", "line 3: 4 values for 3 columns"),
])
def test_produce_errors_name_the_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                                body: str, message: str) -> None:
    url = str(tmp_path / "lake")
    assert run(capsys, "--store", url, "create-topic", "t", "--schema",
               "id:int64!, amount:decimal128(10,2), note:string")[0] == 0
    (tmp_path / name).write_text(body)
    code, out, err = run(capsys, "--store", url, "produce", "t", str(tmp_path / name))
    assert code == 1 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"txnlog: error: {tmp_path / name}: {message}"), err


def test_txns_show_full_ids_and_why_a_produce_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "lake")
    assert run(capsys, "--store", url, "create-topic", "t", "--schema", "id:int64!")[0] == 0
    (tmp_path / "good.jsonl").write_text('{"id": 1}\n')
    (tmp_path / "bad.jsonl").write_text('{"id": 1}\n{"id": "two"}\n')
    assert run(capsys, "--store", url, "produce", "t", str(tmp_path / "good.jsonl"), "--transactional-id",
               "loader")[0] == 0
    assert run(capsys, "--store", url, "produce", "t", str(tmp_path / "bad.jsonl"))[0] == 1
    d = run_json(capsys, "--store", url, "txns")
    [loader] = d["producers"]
    assert (loader["last_txn"], loader["last_txn_id"]) == (0, "p.0.0.0")
    failed = d["recent"][0]
    assert failed["state"] == "CompleteAbort"
    assert failed["reason"].startswith(f"txnlog produce failed: {tmp_path / 'bad.jsonl'}: line 2, field 'id'")
    code, out, _ = run(capsys, "--store", url, "txns")
    row = next(line for line in out.splitlines() if line.startswith("loader "))
    assert "p.0.0.0 CompleteCommit" in row
    assert "txnlog produce failed: " in out and "line 2, field 'id'" in out


def test_topics_created_from_python_get_a_creation_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import datetime as dt

    import pyarrow as pa

    from coordinator import create_topic, open_store
    from coordinator.clock import store_now_ms

    store = open_store(str(tmp_path / "lake"))
    before = store_now_ms(store)
    create_topic(store, "py", pa.schema([("id", pa.int64())]), 1)
    after = store_now_ms(store)
    [row] = run_json(capsys, "--store", str(tmp_path / "lake"), "topics")
    created = dt.datetime.fromisoformat(row["created"].replace("Z", "+00:00")).timestamp() * 1000
    assert before - 1 <= created <= after + 1
    code, out, _ = run(capsys, "--store", str(tmp_path / "lake"), "describe", "py")
    assert code == 0 and re.search(r"^created    \d{4}-\d\d-\d\dT", out, re.MULTILINE)


# -- maintenance events -------------------------------------------------------------------------------------------


def test_maintenance_events_name_topic_and_partition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa

    from coordinator import Producer, create_topic, open_store

    url = str(tmp_path / "lake")
    store = open_store(url)
    create_topic(store, "r", pa.schema([("id", pa.int64())]), 2, config={"retention.bytes": "1"})
    create_topic(store, "c", pa.schema([("id", pa.int64())]), 2)
    p = Producer(store, "w")
    p.init_transactions()
    for i in range(3):
        with p.transaction():
            p.send("r", [{"id": i}], partition=1)
            p.send("c", [{"id": i}], partition=0)
    code, out, err = run(capsys, "--store", url, "coordinator", "run", "--once", "--maintenance", "--json")
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    retained = [e for e in events if e["event"] == "retained"]
    compacted = [e for e in events if e["event"] == "compacted"]
    assert [(e["topic"], e["partition"], e["records"]) for e in retained] == [("r", 1, 3)]
    assert [(e["topic"], e["partition"], e["segments_before"], e["segments_after"]) for e in compacted] == [
        ("c", 0, 3, 1)]
    from coordinator.cli.daemon import describe

    assert describe(retained[0]) == "retention removed 3 record(s) from the start of r/1"
    assert describe(compacted[0]).startswith("compacted c/0: 1 group(s) of small segments merged (3 -> 1")
    assert describe({"event": "deleted", "topic": "c", "partition": 0, "files": 3, "bytes": 2048}) == \
        "deleted 3 unreferenced file(s) of c/0, 2.0 KiB"


# -- dump ---------------------------------------------------------------------------------------------------------


def test_dump_columns_never_drift_and_progress_counts_records(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import decimal

    from coordinator import Producer, create_topic, open_store
    from coordinator.cli import records
    from coordinator.cli.schema import parse_schema

    url = str(tmp_path / "lake")
    store = open_store(url)
    create_topic(store, "n", parse_schema("x:double, d:decimal128(12, 2), big:int64, name:string, b:binary"), 2)
    p = Producer(store, "w")
    p.init_transactions()
    with p.transaction():
        p.send("n", [{"x": 1.5, "d": decimal.Decimal("1.25"), "big": 1, "name": "a", "b": b"\0"}], partition=0)
        p.send("n", [{"x": 0.1 + 0.2, "d": decimal.Decimal("-9999999999.99"), "big": -2**63, "name": "long" * 30,
                      "b": b"x" * 30}] * 3, partition=1)
    monkeypatch.setattr(records, "DUMP_CHUNK_ROWS", 1)  # every row its own chunk: widths must not grow
    code, out, err = run(capsys, "--store", url, "dump", "n", "--progress")
    assert code == 0
    header, *lines = out.splitlines()
    assert len(lines) == 4
    names = header.split()
    spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", header)]
    numeric = {"X", "D", "BIG", "_PARTITION", "_OFFSET"}
    for line in lines:
        for name, (start, end) in zip(names[:-1], spans[:-1], strict=True):
            if name in numeric:  # right-aligned: ends under the header's end
                assert line[end - 1] != " " and line[end:end + 2] == "  ", (name, line)
            else:  # left-aligned: starts under the header's start
                assert line[start] != " " and line[start - 2:start] == "  ", (name, line)
    assert "…" in lines[1] and "x" * 30 not in out  # a long string is cut in the table only
    assert "dump n: 4/4 records" in err and "slices" not in err and err.rstrip().endswith("4 record(s)")
    code, out, err = run(capsys, "--store", url, "dump", "n", "--json")
    assert code == 0 and len(out.splitlines()) == 4 and err.strip() == "4 record(s)"
    assert '"long' + "long" * 29 + '"' in out


# -- --execute ----------------------------------------------------------------------------------------------------


def test_execute_reports_in_the_past_tense(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    from cli_lake import GROUP, TOPIC

    for argv, said in [
        (["repair"], "wrote 1 partition record(s)"),
        (["reset-offsets", GROUP, "--all-topics", "--to-latest"],
         f"changed the offsets of group {GROUP}: 2 partition(s) committed"),
        (["delete-group", GROUP], f"deleted the offsets of group {GROUP}: 2 partition(s) committed"),
        (["resolve", lake.hung_txn, "--abort"], f"{lake.hung_txn} of producer hung: aborted now"),
        (["gc", "--grace", "0"], "deleted 2 file(s)"),
        (["delete-topic", TOPIC], f"deleted topic {TOPIC}: 2 partition(s)"),
    ]:
        code, out, err = run(capsys, "--store", lake.url, *argv, "--execute")
        assert code == 0, err
        assert said in out and "would" not in out and "dry run" not in out, (argv, out)


def test_repair_says_which_damage_it_cannot_repair(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    from cli_lake import TOPIC
    from coordinator import TransactionCoordinator

    segment = TransactionCoordinator(lake.open()).partition(TOPIC, 0).segments[0].path
    (Path(lake.url) / segment).write_bytes(b"garbage")
    code, out, _ = run(capsys, "--store", lake.url, "repair")
    assert code == 1 and "would write 1 partition record(s)" in out
    assert f"cannot repair 1 problem(s):\n  {segment} (truncated): segment data has no other copy" in out
    code, out, _ = run(capsys, "--store", lake.url, "repair", "--execute", "--json")
    d = json.loads(out)
    assert code == 1 and len(d["records"]) == 1
    assert [(c["path"], c["kind"]) for c in d["cannot"]] == [(segment, "truncated")]
    # The record is written; the segment is still named as beyond repair.
    code, out, _ = run(capsys, "--store", lake.url, "repair")
    assert code == 1 and "nothing to repair" in out and "cannot repair 1 problem(s)" in out


def test_lag_flags_committed_offsets_outside_the_partition_in_its_table(lake: Lake,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from cli_lake import TOPIC
    from coordinator import TransactionCoordinator

    TransactionCoordinator(lake.open()).commit_group_offsets("far", {TOPIC: {1: 10_000}})
    code, out, err = run(capsys, "--store", lake.url, "lag", "--group", "far")
    assert code == 0, err
    assert "OUT OF RANGE" in out.splitlines()[0]
    [row] = [line for line in out.splitlines() if line.split()[:3] == ["far", TOPIC, "1"]]
    assert re.search(r"beyond end \d+$", row), out
