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
from coordinator.errors import InvalidOptionError
from coordinator.records import is_ready
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
        p["flags"] = ",".join(f for f, on in (("ephemeral", p["ephemeral"]), ("reserved", p["reserved"])) if on)
        p["idle"], p["timeout"] = fmt_age(p["idle_ms"]), fmt_age(p["timeout_ms"])
        p["last"] = "-" if p["last_txn"] < 0 else f"{p['last_txn']} {p['last_outcome']}"
    out.emit(f"transactional ids ({len(d['producers'])}), log entry {d['log_seq']}")
    out.emit(render_table(d["producers"], ["tid", "pid", "epoch", "state", "last", "idle", "timeout", "flags"],
                          ["TRANSACTIONAL ID", "PID", "EPOCH", "STATE", "LAST TXN", "IDLE", "TIMEOUT", "FLAGS"],
                          right=["pid", "epoch", "idle", "timeout"]))
    for r in d["open"]:
        r["age"], r["timeout"] = fmt_age(r["age_ms"]), fmt_age(r["timeout_ms"])
        r["flags"] = "timed-out" if r["timed_out"] else ""
    out.emit(f"\nopen ({len(d['open'])})")
    out.emit(render_table(d["open"], ["txn", "tid", "age", "timeout", "flags"],
                          ["TXN", "TRANSACTIONAL ID", "AGE", "TIMEOUT", "FLAGS"], right=["age", "timeout"]))
    for r in d["recent"]:
        r["age"] = fmt_age(r["age_ms"])
        r["where"] = " ".join(r["partitions"])
        r["who"] = r["tid"] or (f"{r['app']} v{r['version']}" if r["app"] else "-")
        r["group"] = ",".join(r["groups"])
        r["reason"] = r["reason"] or ""
    out.emit(f"\nrecent ({len(d['recent'])})")
    cols = ["txn", "who", "outcome", "records", "where", "group", "age", "reason"]
    out.emit(render_table(d["recent"], cols, ["TXN", "PRODUCER / APP", "OUTCOME", "RECORDS", "PARTITIONS", "GROUP",
                                              "AGE", "REASON"], right=["records", "age"]))
    return EXIT_OK


def _resolve_one(settings: Settings, txn: str, abort: bool) -> dict[str, Any]:
    """Learn (and with ``abort`` settle) ``txn`` from the durable record; returns ``{"txn", "tid", "before",
    "action", "after"}``.

    Raises:
        CliError: not a transaction id (3); an open one without ``abort``, or ``abort`` of a committed one (1).
    """
    store = settings.open(write=abort)
    coord = settings.coordinator(store)
    found = ti.find_transaction(store, txn, coordinator=coord)
    if found is None:
        raise CliError(f"{txn!r} is not a transaction id (p.<pid>.<epoch>.<n> or a.<app>.<version>.<token>)",
                       EXIT_NOT_FOUND)
    status, tid = found["status"], found["tid"] or found["app"]
    if status == "ongoing":
        if not abort:
            raise CliError(f"transaction {txn!r} of {tid!r} is open: its producer may still commit or abort it. "
                           "Use --abort to abort it now (this fences its producer)")
        aborted = coord.abort_open(txn, reason="aborted by txnlog resolve --abort")
        action = "aborted now (its producer is fenced)" if aborted else "none: it was decided meanwhile"
    elif abort and status == "committed":
        raise CliError(f"transaction {txn!r} of {tid!r} is already committed; it cannot be aborted")
    else:
        action = "none"
    after = ti.find_transaction(store, txn, coordinator=coord)
    return {"txn": txn, "tid": tid, "before": status, "action": action,
            "after": None if after is None else after["status"]}


def cmd_resolve(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    if args.all == (args.txn is not None):
        raise InvalidOptionError("resolve takes either a transaction id or --all")
    if args.all:
        store = settings.open()
        txns = [r["txn"] for r in ti.transactions(store, recent=0, scan=0)["open"]
                if args.abort or r["timed_out"]]
    else:
        txns = [args.txn]
    results = [_resolve_one(settings, t, args.abort) for t in txns] if not args.all or args.abort else \
        [{"txn": t, "tid": None, "before": "ongoing", "action": "none (timed out: resolve --all --abort aborts it)",
          "after": "ongoing"} for t in txns]
    if out.json_mode:
        out.emit_json(results if args.all else results[0])
    elif not results:
        out.emit("no open transactions to resolve")
    else:
        for r in results:
            after = r["after"] if r["action"] != "none" else r["before"]
            out.emit(f"{r['txn']} ({r['tid']}): {after}" + ("" if r["action"] == "none" else f" ({r['action']})"))
    return EXIT_OK


def cmd_expire(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open(write=not args.dry_run)
    coord = settings.coordinator(store)
    if args.dry_run:
        t = now_ms()
        d = ti.transactions(store, recent=0, scan=0, coordinator=coord)
        state = coord.log.refresh()
        result: dict[str, Any] = {
            "dry_run": True,
            "timed_out": sorted(r["tid"] for r in d["open"] if r["timed_out"]),
            "expired": sorted(m.tid for m in state.producers.values() if is_ready(m.state)
                              and t - m.last_ts > settings.transactional_id_expiration_ms),
        }
    else:
        aborted = coord.abort_timed_out()
        expired = coord.expire_transactional_ids()
        result = {"dry_run": False, "timed_out": sorted(aborted), "expired": sorted(expired)}
    if out.json_mode:
        out.emit_json(result)
    elif args.dry_run:
        out.emit(f"would abort {len(result['timed_out'])} timed-out transaction(s): "
                 f"{' '.join(result['timed_out']) or '-'}; would expire {len(result['expired'])} transactional "
                 f"id(s): {' '.join(result['expired']) or '-'}")
    else:
        out.emit(f"aborted {len(result['timed_out'])} timed-out transaction(s): "
                 f"{' '.join(result['timed_out']) or '-'}; expired {len(result['expired'])} transactional id(s): "
                 f"{' '.join(result['expired']) or '-'}")
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
