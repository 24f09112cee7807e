"""The ``txnlog`` subcommands that inspect a store or act on its transactions (the daemon lives in
:mod:`coordinator.cli_daemon`). Each ``cmd_*`` takes the parsed arguments, the merged settings and an
:class:`~coordinator.cli_common.Output`, prints a human table or JSON, and returns the exit code; errors are
raised and mapped to exit codes by :func:`coordinator.cli.main`.
"""

from __future__ import annotations

import argparse
from typing import Any

import pyarrow as pa

from coordinator import inspect as ti
from coordinator.cli_common import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PROBLEMS,
    CliError,
    Output,
    fmt_age,
    fmt_bytes,
    fmt_ts,
    render_table,
)
from coordinator.cli_config import Settings
from coordinator.coordinator import ProducerIdentity
from coordinator.errors import InvalidOptionError
from coordinator.records import TxnState, is_ready
from coordinator.topics import create_topic
from coordinator.txnlog import now_ms

#: Column type names accepted by ``create-topic --schema`` (anything else is tried as a pyarrow type alias).
TYPE_NAMES: dict[str, pa.DataType] = {
    "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int": pa.int32(), "int64": pa.int64(),
    "long": pa.int64(), "bigint": pa.int64(), "float32": pa.float32(), "float": pa.float32(),
    "float64": pa.float64(), "double": pa.float64(), "string": pa.string(), "str": pa.string(),
    "binary": pa.binary(), "bytes": pa.binary(), "bool": pa.bool_(), "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"), "date": pa.date32(),
}


def parse_schema(text: str) -> pa.Schema:
    """Parse ``"id:int64,name:string"``; a trailing ``!`` on a type (``id:int64!``) makes the column non-nullable.

    Raises:
        InvalidOptionError: an empty schema, a malformed or duplicate column, or an unknown type.
    """
    fields = []
    for part in (p.strip() for p in text.split(",")):
        name, sep, type_name = (x.strip() for x in part.partition(":"))
        if not sep or not name or not type_name:
            raise InvalidOptionError(f"--schema: {part!r} is not 'name:type' (e.g. \"id:int64,name:string\")")
        nullable = not type_name.endswith("!")
        type_name = type_name.rstrip("!").strip()
        typ = TYPE_NAMES.get(type_name.lower())
        if typ is None:
            try:
                typ = pa.type_for_alias(type_name)
            except (ValueError, KeyError):
                raise InvalidOptionError(
                    f"--schema: unknown type {type_name!r} for column {name!r} (use one of "
                    f"{', '.join(sorted(TYPE_NAMES))})"
                ) from None
        fields.append(pa.field(name, typ, nullable=nullable))
    names = [f.name for f in fields]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidOptionError(f"--schema: duplicate column(s) {dupes}")
    return pa.schema(fields)


# -- topics -------------------------------------------------------------------------------------------------------


def cmd_topics(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    rows = ti.topics(store, coordinator=settings.coordinator(store))
    if out.json_mode:
        out.emit_json(rows)
        return EXIT_OK
    for r in rows:
        r["size"] = fmt_bytes(r["bytes"])
        r["offsets"] = " ".join(f"{p}:{r['start_offsets'][p]}-{r['end_offsets'][p]}" for p in r["end_offsets"])
    out.emit(render_table(rows, ["name", "partitions", "records", "segments", "size", "offsets"],
                          right=["partitions", "records", "segments", "size"]))
    return EXIT_OK


def cmd_describe(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    d = ti.describe_topic(store, args.topic, coordinator=settings.coordinator(store))
    if out.json_mode:
        out.emit_json(d)
        return EXIT_OK
    cols = ", ".join(f"{f['name']}: {f['type']}{'' if f['nullable'] else ' not null'}" for f in d["fields"])
    out.emit(f"topic      {d['name']}\nschema     {cols}\npartitions {d['partitions']}\n"
             f"records    {d['records']}\nsegments   {d['segments']}\nsize       {fmt_bytes(d['bytes'])}\n"
             f"created    {fmt_ts(d['created_ms'] or None)}\n")
    rows = [p | {"size": fmt_bytes(p["bytes"]), "last_commit": fmt_ts(p["last_commit_ts"])}
            for p in d["partition_info"]]
    out.emit(render_table(
        rows, ["partition", "start_offset", "end_offset", "records", "segments", "size", "staged_files",
               "last_commit"],
        ["PARTITION", "START", "END", "RECORDS", "SEGMENTS", "SIZE", "STAGED", "LAST COMMIT"],
        right=["partition", "start_offset", "end_offset", "records", "segments", "size", "staged_files"]))
    return EXIT_OK


def cmd_create_topic(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    schema = parse_schema(args.schema)
    store = settings.open(write=True)
    meta = create_topic(store, args.topic, schema, args.partitions, exist_ok=args.if_not_exists,
                        created_ms=now_ms())
    if out.json_mode:
        out.emit_json({"name": meta.name, "partitions": meta.partitions, "version": meta.version,
                       "fields": [{"name": f.name, "type": str(f.type), "nullable": f.nullable}
                                  for f in meta.schema]})
    else:
        out.emit(f"topic {meta.name}: {meta.partitions} partition(s), schema "
                 + ", ".join(f"{f.name}: {f.type}" for f in meta.schema))
    return EXIT_OK


# -- transactions -------------------------------------------------------------------------------------------------


def cmd_txns(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    d = ti.transactions(store, recent=args.recent, coordinator=settings.coordinator(store))
    if not args.all:
        d["producers"] = [p for p in d["producers"] if not p["reserved"]]
    if out.json_mode:
        out.emit_json(d)
        return EXIT_OK
    for p in d["producers"]:
        p["flags"] = ",".join(f for f, on in (("in-doubt", p["in_doubt"]), ("timed-out", p["timed_out"])) if on)
        p["age"], p["idle"], p["timeout"] = fmt_age(p["age_ms"]), fmt_age(p["idle_ms"]), fmt_age(p["timeout_ms"])
    out.emit(f"transactional ids ({len(d['producers'])}), log entry {d['log_seq']}")
    out.emit(render_table(d["producers"], ["tid", "pid", "epoch", "state", "txn", "age", "idle", "timeout", "flags"],
                          ["TRANSACTIONAL ID", "PID", "EPOCH", "STATE", "OPEN TXN", "AGE", "IDLE", "TIMEOUT",
                           "FLAGS"], right=["pid", "epoch", "age", "idle", "timeout"]))
    for title, rows in (("in doubt", d["in_doubt"]), ("recent", d["recent"])):
        for r in rows:
            r["age"] = fmt_age(r["age_ms"])
            r["where"] = " ".join(r["partitions"])
        out.emit(f"\n{title} ({len(rows)})")
        cols = ["txn", "tid", "state", "records", "where", "age"] + (["reason"] if title == "recent" else [])
        out.emit(render_table(rows, cols, [c.upper() if c != "where" else "PARTITIONS" for c in cols],
                              right=["records", "age"]))
    return EXIT_OK


def _resolve_one(settings: Settings, txn: str, abort: bool) -> dict[str, Any]:
    """Finish ``txn`` from the durable record; returns ``{"txn", "tid", "before", "action", "after"}``.

    Raises:
        CliError: unknown transaction (3); an ongoing one without ``abort``, or an abort past the commit point (1).
    """
    store = settings.open(write=True)
    coord = settings.coordinator(store)
    found = ti.find_transaction(store, txn, coordinator=coord)
    if found is None:
        raise CliError(f"transaction {txn!r} is unknown (not open, not in doubt, not among recent entries)",
                       EXIT_NOT_FOUND)
    status, tid = found["status"], found["tid"]
    if status == "in_doubt_commit":
        if abort:
            raise CliError(f"transaction {txn!r} of {tid!r} passed its commit point (PrepareCommit); it can only "
                           "be rolled forward: run resolve without --abort")
        coord.complete_pending(upto=coord.log.refresh().pending[txn].seq)
        action = "rolled forward"
    elif status == "in_doubt_abort":
        coord.abort(ProducerIdentity(tid, found["pid"], found["epoch"]), txn)
        action = "abort completed"
    elif status == "ongoing":
        if not abort:
            raise CliError(f"transaction {txn!r} of {tid!r} is ongoing, not in doubt: its producer may still commit "
                           "or abort it. Use --abort to abort it now (this fences the producer)")
        aborted = coord.abort_open(tid, txn, reason="aborted by txnlog resolve --abort")
        action = "aborted (producer fenced)" if aborted else "none (it finished meanwhile)"
    else:
        if abort and status == "committed":
            raise CliError(f"transaction {txn!r} of {tid!r} is already committed; it cannot be aborted")
        action = "none"
    after = ti.find_transaction(store, txn, coordinator=coord)
    return {"txn": txn, "tid": tid, "before": status, "action": action,
            "after": None if after is None else after["status"]}


def cmd_resolve(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    if args.all == (args.txn is not None):
        raise InvalidOptionError("resolve takes either a transaction id or --all")
    if args.all:
        store = settings.open()
        txns = [r["txn"] for r in ti.transactions(store, recent=0, scan=0)["in_doubt"]]
    else:
        txns = [args.txn]
    results = [_resolve_one(settings, t, args.abort) for t in txns]
    if out.json_mode:
        out.emit_json(results if args.all else results[0])
    elif not results:
        out.emit("no in-doubt transactions")
    else:
        for r in results:
            out.emit(f"{r['txn']} ({r['tid']}): was {r['before']}, {r['action']}, now {r['after']}")
    return EXIT_OK


def cmd_expire(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open(write=not args.dry_run)
    coord = settings.coordinator(store)
    if args.dry_run:
        t = now_ms()
        state = coord.log.refresh()
        result: dict[str, Any] = {
            "dry_run": True,
            "in_doubt": len(state.pending),
            "timed_out": sorted(m.tid for m in state.producers.values() if m.state is TxnState.ONGOING
                                and m.txn_start_ts is not None and t - m.txn_start_ts > m.timeout_ms),
            "expired": sorted(m.tid for m in state.producers.values() if is_ready(m.state)
                              and t - m.last_ts > settings.transactional_id_expiration_ms),
        }
    else:
        rolled = coord.complete_pending()
        aborted = coord.abort_timed_out()
        expired = coord.expire_transactional_ids()
        result = {"dry_run": False, "rolled_forward": rolled, "timed_out": sorted(aborted),
                  "expired": sorted(expired)}
    if out.json_mode:
        out.emit_json(result)
    elif args.dry_run:
        out.emit(f"would roll forward {result['in_doubt']} prepared commit(s); would abort "
                 f"{len(result['timed_out'])} timed-out: {' '.join(result['timed_out']) or '-'}; would expire "
                 f"{len(result['expired'])}: {' '.join(result['expired']) or '-'}")
    else:
        out.emit(f"rolled forward {result['rolled_forward']} prepared commit(s); aborted "
                 f"{len(result['timed_out'])} timed-out: {' '.join(result['timed_out']) or '-'}; expired "
                 f"{len(result['expired'])}: {' '.join(result['expired']) or '-'}")
    return EXIT_OK


# -- groups -------------------------------------------------------------------------------------------------------


def cmd_groups(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    rows = ti.groups(store, coordinator=settings.coordinator(store))
    if out.json_mode:
        out.emit_json(rows)
    else:
        out.emit(render_table([r | {"topics": ",".join(r["topics"])} for r in rows],
                              ["group", "topics", "partitions", "lag"], right=["partitions", "lag"]))
    return EXIT_OK


def cmd_lag(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    rows = ti.lag(store, args.group, coordinator=settings.coordinator(store))
    if out.json_mode:
        out.emit_json(rows)
    else:
        out.emit(render_table(rows, ["group", "topic", "partition", "committed", "end_offset", "lag"],
                              ["GROUP", "TOPIC", "PARTITION", "COMMITTED", "END", "LAG"],
                              right=["partition", "committed", "end_offset", "lag"]))
    return EXIT_OK


# -- integrity and records ----------------------------------------------------------------------------------------


def cmd_verify(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    bar = out.progress("verify: segments")
    problems = ti.verify(store, progress=bar, total=bar.set_total)
    bar.close()
    checked = bar.total or 0
    if out.json_mode:
        out.emit_json({"ok": not problems, "segments_checked": checked,
                       "problems": [p.to_json() for p in problems]})
    elif not problems:
        out.emit(f"ok: no problems ({checked} segment(s) checked)")
    else:
        out.emit(render_table([p.to_json() for p in problems], ["path", "kind", "message"]))
        out.emit(f"\n{len(problems)} problem(s) found ({checked} segment(s) checked)")
    return EXIT_PROBLEMS if problems else EXIT_OK


def cmd_dump(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    bar = out.progress("dump: segments")
    table = ti.dump(store, args.topic, partition=args.partition, start=args.start, end=args.end, limit=args.limit,
                    progress=bar, total=bar.set_total, coordinator=settings.coordinator(store))
    bar.close()
    rows = table.to_pylist()
    if out.json_mode:
        out.emit_json(rows)
    else:
        out.emit(render_table(rows, table.column_names,
                              right=[f.name for f in table.schema if pa.types.is_integer(f.type)
                                     or pa.types.is_floating(f.type)]))
        out.emit(f"({len(rows)} record(s))")
    return EXIT_OK
