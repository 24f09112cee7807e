"""``txnlog coordinator run``: the sweep daemon.

Each sweep, in this order: abort every producer transaction open past its timeout with an epoch bump
(``abort_timed_out``, judged on the store's clock), forget transactional ids idle past the expiration
(``expire_transactional_ids``), and write any partition record a crashed writer left out (``repair_records``;
derived data, never needed for correctness); with ``--maintenance`` also retention, compaction and GC.

It logs what it did, one line per action (one JSON object per line with ``--json``: ``{"time", "event", ...}``
with events ``start``, ``aborted``, ``expired``, ``repaired``, ``compacted``, ``retained``, ``deleted``,
``sweep_failed`` and ``stop``); a sweep that did nothing prints nothing.

The daemon holds no state of its own: every decision is read from the store, so it can be killed at any moment
(even SIGKILL mid-sweep) and restarted, and several may run at once; nothing requires it to be running for
correctness. SIGTERM and SIGINT end it cleanly after the current sweep, with exit code 0. A sweep that fails (a
store outage) is reported on stderr and retried at the next interval; ``--once`` runs a single sweep and exits 4
if it failed.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from types import FrameType
from typing import Any

from coordinator import inspect as ti
from coordinator.cli.common import EXIT_OK, EXIT_STORE, Output, exit_code_for, fmt_age, fmt_bytes, fmt_time, scrub
from coordinator.cli.config import Settings
from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import InvalidOptionError, TxnLogError
from coordinator.inspect.common import utc
from coordinator.txnlog import now_ms


def sweep(coord: TransactionCoordinator, *, maintenance: bool = False, target_bytes: int | None = None,
          ) -> list[dict[str, Any]]:
    """One sweep (see the module docstring). Returns what it did, one event dict per action (``event`` plus its
    details); empty when there was nothing to do.

    Raises:
        TxnLogError: the store failed or the log is damaged (the sweep stopped there).
    """
    events: list[dict[str, Any]] = []
    timed_out = {r["tid"]: r for r in ti.transactions(coord.store, recent=0, staged=False,
                                                      coordinator=coord)["open"] if r["timed_out"]}
    for tid in sorted(coord.abort_timed_out()):
        r = timed_out.get(tid, {})
        events.append({"event": "aborted", "txn": r.get("txn"), "tid": tid, "age_ms": r.get("age_ms"),
                       "timeout_ms": r.get("timeout_ms"), "reason": "transaction timeout"})
    for tid in sorted(coord.expire_transactional_ids()):
        events.append({"event": "expired", "tid": tid,
                       "reason": f"idle longer than {coord.transactional_id_expiration_ms} ms"})
    written = coord.repair_records()
    if written:
        events.append({"event": "repaired", "records": written})
    if maintenance:
        from coordinator.maintenance import DEFAULT_COMPACT_TARGET_BYTES, maintain

        report = maintain(coord, target_bytes=target_bytes or DEFAULT_COMPACT_TARGET_BYTES)
        native = set(report.deleted_files)
        for where, part in report.partitions.items():
            topic, p = where.rsplit("/", 1)
            at = {"topic": topic, "partition": int(p)}
            if part.retained_records:
                events.append({"event": "retained", **at, "records": part.retained_records})
            if part.merged_groups:
                events.append({"event": "compacted", **at, "merged_groups": part.merged_groups,
                               "segments_before": part.segments_before, "segments_after": part.segments_after})
            if part.deleted_files:
                events.append({"event": "deleted", **at, "files": len(part.deleted_files),
                               "bytes": part.deleted_bytes})
            native -= set(part.deleted_files)
        if native:
            in_parts = sum(part.deleted_bytes for part in report.partitions.values())
            events.append({"event": "deleted", "topic": None, "partition": None, "files": len(native),
                           "bytes": report.deleted_bytes - in_parts, "what": "native-write staging folders"})
    return events


def describe(event: dict[str, Any]) -> str:
    """One event in plain words."""
    kind = event["event"]
    if kind == "aborted":
        age = "" if event.get("age_ms") is None else \
            f" (open {fmt_age(event['age_ms'])}, timeout {fmt_age(event['timeout_ms'])})"
        return f"aborted {event.get('txn') or 'the open transaction'} of {event['tid']}{age}; its producer is fenced"
    if kind == "expired":
        return f"expired transactional id {event['tid']} ({event['reason']})"
    if kind == "repaired":
        return f"wrote {event['records']} partition record(s) a crashed writer left out"
    where = f"{event.get('topic')}/{event.get('partition')}"
    if kind == "retained":
        return f"retention removed {event['records']} record(s) from the start of {where}"
    if kind == "compacted":
        return (f"compacted {where}: {event['merged_groups']} group(s) of small segments merged "
                f"({event['segments_before']} -> {event['segments_after']} segments)")
    if kind == "deleted":
        if event.get("topic") is None:
            return f"deleted {event['files']} file(s) of {event['what']}, {fmt_bytes(event['bytes'])}"
        return f"deleted {event['files']} unreferenced file(s) of {where}, {fmt_bytes(event['bytes'])}"
    if kind == "start":
        every = "one sweep" if event["once"] else f"a sweep every {event['interval_s']:g}s"
        return f"coordinator on {event['store']}: {every}" + ("" if event["once"] else " (SIGTERM or SIGINT stops it)")
    if kind == "stop":
        why = "after one sweep" if event["reason"] == "once" else f"by {event['reason']}"
        return f"stopped {why} ({event['sweeps']} sweep(s), {event['actions']} action(s))"
    return kind


def cmd_coordinator_run(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    interval = settings.sweep_interval_s if args.interval is None else args.interval / 1000
    if not interval > 0:
        raise InvalidOptionError(f"--interval must be a positive number of seconds, got {interval}")
    store = settings.open(write=True)
    coord = settings.coordinator(store)
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    def log(event: dict[str, Any]) -> None:
        stamped = {"time": utc(now_ms()), **event}
        if out.json_mode:
            out.emit_json_line(stamped)
        else:
            out.emit(f"{fmt_time(stamped['time'])} {describe(event)}")

    installed = []
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            installed.append((sig, signal.signal(sig, on_signal)))
    log({"event": "start", "store": store.url, "interval_s": interval, "once": bool(args.once)})
    code = EXIT_OK
    n = actions = 0
    try:
        while not stop.is_set():
            n += 1
            t0 = time.monotonic()
            try:
                events = sweep(coord, maintenance=args.maintenance, target_bytes=settings.segment_target_bytes)
            except (TxnLogError, OSError) as exc:
                message = scrub(f"sweep {n} failed: {exc}", settings.secrets())
                out.warn(f"{fmt_time(utc(now_ms()))} {message}")
                if out.json_mode:
                    log({"event": "sweep_failed", "sweep": n, "error": message})
                if args.once:
                    code = exit_code_for(exc) if isinstance(exc, TxnLogError) else EXIT_STORE
            else:
                for e in events:
                    log(e | {"sweep": n, "duration_ms": int((time.monotonic() - t0) * 1000)})
                actions += len(events)
            if args.once:
                break
            stop.wait(interval)
    finally:
        for sig, old in installed:
            signal.signal(sig, old)
    log({"event": "stop", "reason": received[0] if received else "once", "sweeps": n, "actions": actions})
    return code
