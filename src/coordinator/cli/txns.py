"""``txnlog`` transaction commands: ``txns`` (like ``kafka-transactions.sh list``/``describe``), ``resolve`` (learn
a transaction's outcome from the durable record; ``--abort`` an open one) and ``expire`` (the timeout and
expiration sweeps by hand). See :mod:`coordinator.cli.topics` for the ``cmd_*`` contract.

With store format 2 no transaction is ever half committed: a transaction is open (its producer may still commit or
abort it), committed or aborted. ``resolve`` therefore only ever reports, or aborts an open transaction.
"""

from __future__ import annotations

import argparse
from typing import Any

from coordinator import inspect as ti
from coordinator.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    CliError,
    Output,
    fmt_age,
    fmt_bytes,
    fmt_time,
    render_table,
)
from coordinator.cli.config import Settings
from coordinator.clock import store_now_ms
from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import InvalidOptionError
from coordinator.store import Store
from coordinator.txnstates import is_ready


def _where(r: dict[str, Any]) -> str:
    parts = r.get("partitions")
    return " ".join(parts) if parts else "-"


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
        p["last"] = "-" if p["last_txn_id"] is None else f"{p['last_txn_id']} {p['last_state']}"
    out.emit(f"transactional ids ({len(d['producers'])}), transaction log at entry {d['log_seq']}")
    out.emit(render_table(d["producers"], ["tid", "pid", "epoch", "state", "open_txn", "last", "idle", "timeout",
                                           "flags"],
                          ["TRANSACTIONAL ID", "PID", "EPOCH", "STATE", "OPEN TXN", "LAST TXN", "IDLE", "TIMEOUT",
                           "FLAGS"], right=["idle", "timeout"]))
    for r in d["open"]:
        r["age"], r["timeout"] = fmt_age(r["age_ms"]), fmt_age(r["timeout_ms"])
        r["where"], r["size"] = _where(r), fmt_bytes(r["bytes"])
        r["started_at"] = fmt_time(r["started"])
        r["flags"] = "timed-out" if r["timed_out"] else ""
    out.emit(f"\nopen transactions ({len(d['open'])})")
    out.emit(render_table(d["open"], ["txn", "tid", "state", "started_at", "age", "timeout", "where", "records", "size",
                                      "flags"],
                          ["TXN", "TRANSACTIONAL ID", "STATE", "STARTED", "AGE", "TIMEOUT", "PARTITIONS", "RECORDS",
                           "SIZE", "FLAGS"], right=["age", "timeout", "size"]))
    if d["fenced"]:
        for r in d["fenced"]:
            r["where"], r["size"] = _where(r), fmt_bytes(r["bytes"])
            r["entry"] = "-" if r["fenced_seq"] is None else r["fenced_seq"]
        out.emit(f"\nfenced producers' transactions ({len(d['fenced'])}): never committed; gc removes what they "
                 "staged")
        out.emit(render_table(d["fenced"], ["txn", "tid", "state", "entry", "where", "records", "size"],
                              ["TXN", "TRANSACTIONAL ID", "STATE", "FENCED AT ENTRY", "PARTITIONS", "RECORDS",
                               "SIZE"], right=["entry", "size"]))
    if d["waiting"]:
        out.emit(f"\nrequests waiting for group commit ({len(d['waiting'])})")
        out.emit(render_table([w | {"age": fmt_age(w["age_ms"])} for w in d["waiting"]], ["request", "age"],
                              right=["age"]))
    for r in d["recent"]:
        r["when"] = fmt_time(r["time"])
        r["where"] = _where(r)
        r["who"] = r["tid"] or (f"{r['app']} v{r['version']}" if r["app"] else "-")
        r["group"] = ",".join(r["groups"]) if r["groups"] else "-"
    out.emit(f"\nrecent decisions ({len(d['recent'])}), newest first")
    out.emit(render_table(d["recent"], ["seq", "when", "txn", "who", "state", "records", "where", "group", "reason"],
                          ["ENTRY", "TIME", "TXN", "PRODUCER / APP", "STATE", "RECORDS", "PARTITIONS", "GROUPS",
                           "REASON"]))
    return EXIT_OK


# -- resolve ------------------------------------------------------------------------------------------------------


def _staged(records: int | None, partitions: list[str]) -> str:
    n = "files" if records is None else f"{records} staged record{'' if records == 1 else 's'}"
    return f"{n} in {' '.join(partitions)}"


def _story(found: dict[str, Any]) -> str:
    """What the durable record says of a decided transaction, in plain words."""
    if found.get("never_committed"):
        fence = f"fenced at entry {found['fenced_seq']}" if found["fenced_seq"] is not None else \
            "fenced before the retained log"
        left = f"{_staged(found['records'], found['partitions'])}; gc removes it" if found["partitions"] else \
            "nothing it staged is left"
        return f"never committed ({fence}); {left}"
    verb = "committed" if found["state"] == ti.COMMITTED else "aborted"
    when = f" at {fmt_time(found['time'])} (log entry {found['seq']})" if found["time"] is not None else \
        " (before the retained log)"
    what = ""
    if found["records"] is not None and found["partitions"]:
        what = f": {found['records']} record(s) in {' '.join(found['partitions'])}"
    why = f"; reason: {found['reason']}" if found["reason"] else ""
    return f"{verb}{when}{what}{why}"


def _who(found: dict[str, Any]) -> str:
    if found["tid"]:
        return f"producer {found['tid']}"
    if found["app"]:
        return f"application {found['app']} version {found['version']}"
    return "an unknown producer"


def resolve_one(store: Store, coord: TransactionCoordinator, txn: str, *, abort: bool,
                execute: bool) -> dict[str, Any]:
    """Learn ``txn``'s outcome from the durable record and, with ``abort`` and ``execute``, abort it if it is open.
    Returns ``{"txn", "tid", "app", "state_before", "action", "state", "message"}``; ``action`` is ``none``,
    ``would_abort`` (a dry run) or ``aborted``.

    Raises:
        CliError: not a transaction id, or no trace of it (exit 3); open without ``abort``, or ``abort`` of a
            committed one (exit 1).
    """
    found = ti.find_transaction(store, txn, coordinator=coord)
    if found is None:
        raise CliError(f"{txn!r} is not a transaction id (p.<pid>.<epoch>.<n> or a.<app>.<version>.<token>; see "
                       "'txnlog txns')", EXIT_NOT_FOUND)
    state = found["state"]
    base = {"txn": txn, "tid": found["tid"], "app": found["app"], "state_before": state, "action": "none",
            "state": state}
    if state == ti.UNKNOWN:
        raise CliError(f"transaction {txn} is unknown: no open record, staged file or retained log entry names it",
                       EXIT_NOT_FOUND)
    if state == ti.COMMITTED:
        if abort:
            raise CliError(f"transaction {txn} of {_who(found)} is {_story(found)}; a committed transaction cannot "
                           "be aborted")
        return base | {"message": f"{txn} of {_who(found)}: {_story(found)}; nothing to do"}
    if state == ti.ABORTED:
        return base | {"message": f"{txn} of {_who(found)}: {_story(found)}; nothing to do"}
    staged = ""
    if found["partitions"]:
        n = "?" if found["records"] is None else found["records"]
        staged = f", {n} record(s) staged in {' '.join(found['partitions'])}"
    fence = "fence its producer (an epoch bump: its next send or commit fails with ProducerFencedError)" \
        if found["tid"] else "make this attempt never committable (Spark replays the batch)"
    if not abort:
        raise CliError(f"transaction {txn} of {_who(found)} is open{staged}: its producer may still commit or abort "
                       f"it. 'txnlog resolve {txn} --abort --execute' aborts it and would {fence}")
    if not execute:
        return base | {"action": "would_abort",
                       "message": f"would abort {txn} of {_who(found)} (open{staged}) and {fence}; run again with "
                                  "--execute to do it"}
    done = coord.abort_open(txn, reason="aborted by txnlog resolve --abort")
    after = ti.find_transaction(store, txn, coordinator=coord) or found
    if done:
        return base | {"action": "aborted", "state": ti.ABORTED,
                       "message": f"{txn} of {_who(found)}: aborted now"
                                  + ("; its producer is fenced" if found["tid"] else "; the attempt can never commit")}
    return base | {"state": after["state"],
                   "message": f"{txn} of {_who(found)}: decided meanwhile: {_story(after)}; nothing aborted"}


def cmd_resolve(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    if args.all == (args.txn is not None):
        raise InvalidOptionError("resolve takes either a transaction id or --all")
    if args.execute and not args.abort:
        raise InvalidOptionError("--execute goes with --abort (resolve itself only reports)")
    store = settings.open(write=args.abort and args.execute)
    coord = settings.coordinator(store)
    if not args.all:
        result = resolve_one(store, coord, args.txn, abort=args.abort, execute=args.execute)
        if out.json_mode:
            out.emit_json({k: v for k, v in result.items() if k != "message"})
        else:
            out.emit(result["message"])
        return EXIT_OK
    rows = ti.transactions(store, recent=0, coordinator=coord)["open"]
    if args.timed_out:
        rows = [r for r in rows if r["timed_out"]]
    if not args.abort:
        results = [{"txn": r["txn"], "tid": r["tid"], "app": None, "state_before": r["state"], "action": "none",
                    "state": r["state"],
                    "message": f"{r['txn']} of producer {r['tid']}: open for {fmt_age(r['age_ms'])}"
                               + (" (timed out)" if r["timed_out"] else "")} for r in rows]
    else:
        results = [resolve_one(store, coord, r["txn"], abort=True, execute=args.execute) for r in rows]
    if out.json_mode:
        out.emit_json([{k: v for k, v in r.items() if k != "message"} for r in results])
    elif not results:
        out.emit("no open transactions" + (" past their timeout" if args.timed_out else ""))
    else:
        for r in results:
            out.emit(r["message"])
        if not args.abort:
            out.emit("(nothing is in doubt with store format 2; --abort shows what aborting them would do)")
    return EXIT_OK


# -- expire -------------------------------------------------------------------------------------------------------


def cmd_expire(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open(write=not args.dry_run)
    coord = settings.coordinator(store)
    timed_out = [r for r in ti.transactions(store, recent=0, staged=False, coordinator=coord)["open"]
                 if r["timed_out"]]
    if args.dry_run:
        t = store_now_ms(store)
        state = coord.log.refresh()
        aborted = [{"txn": r["txn"], "tid": r["tid"]} for r in timed_out]
        expired = sorted(m.tid for m in state.producers.values() if is_ready(m.state)
                         and t - m.last_ts > settings.transactional_id_expiration_ms)
    else:
        by_tid = {r["tid"]: r["txn"] for r in timed_out}
        aborted = [{"txn": by_tid.get(tid), "tid": tid} for tid in sorted(coord.abort_timed_out())]
        expired = sorted(coord.expire_transactional_ids())
    if out.json_mode:
        out.emit_json({"dry_run": bool(args.dry_run), "aborted": aborted, "expired": expired})
        return EXIT_OK
    would = "would " if args.dry_run else ""
    for a in aborted:
        out.emit(f"{would}abort {a['txn'] or 'the open transaction'} of {a['tid']} (open past its timeout), "
                 f"fencing its producer")
    for tid in expired:
        out.emit(f"{would}expire transactional id {tid} (idle past {fmt_age(settings.transactional_id_expiration_ms)})")
    if not aborted and not expired:
        out.emit("nothing to expire: no transaction is past its timeout and no transactional id is idle past "
                 f"{fmt_age(settings.transactional_id_expiration_ms)}")
    return EXIT_OK
