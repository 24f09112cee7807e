"""``txnlog coordinator run``: the sweep daemon.

Each sweep, in this order: abort every producer transaction open past its timeout with an epoch bump
(``abort_timed_out``, judged on the store's clock), forget transactional ids idle past the expiration
(``expire_transactional_ids``), and write any partition record a crashed writer left out (``repair_records``;
derived data, never needed for correctness). A line is printed for each sweep that did something (JSON with
``--json``, one object per sweep).

The daemon holds no state of its own: every decision is read from the store, so it can be killed at any moment
(even SIGKILL mid-sweep) and restarted, and several may run at once; nothing requires it to be running for
correctness. SIGTERM and SIGINT end it cleanly after the
current sweep, with exit code 0. A sweep that fails (a store outage) is reported on stderr and retried at the next
interval; ``--once`` runs a single sweep and exits 4 if it failed.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from types import FrameType
from typing import Any

from coordinator.cli_common import EXIT_OK, EXIT_STORE, Output, exit_code_for, fmt_ts, scrub
from coordinator.cli_config import Settings
from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import InvalidOptionError, TxnLogError
from coordinator.txnlog import now_ms


def sweep(
    coord: TransactionCoordinator, *, maintenance: bool = False, target_bytes: int | None = None
) -> dict[str, Any]:
    """One sweep (see the module docstring). Returns what it did: ``aborted`` and ``expired`` (transactional
    ids), ``log_seq`` and ``duration_ms``; with ``maintenance`` also ``merged`` and ``deleted`` (retention,
    compaction and GC of every topic)."""
    t0 = time.monotonic()
    aborted = coord.abort_timed_out()
    expired = coord.expire_transactional_ids()
    coord.repair_records()
    result: dict[str, Any] = {"aborted": sorted(aborted), "expired": sorted(expired)}
    if maintenance:
        from coordinator.maintenance import DEFAULT_COMPACT_TARGET_BYTES, maintain

        report = maintain(coord, target_bytes=target_bytes or DEFAULT_COMPACT_TARGET_BYTES)
        result |= {"merged": report.merged_groups, "deleted": len(report.deleted_files)}
    return result | {"log_seq": coord.log.state.seq, "duration_ms": int((time.monotonic() - t0) * 1000)}


def _line(n: int, result: dict[str, Any]) -> str:
    return (f"{fmt_ts(now_ms())} sweep {n}: aborted "
            f"{len(result['aborted'])} ({' '.join(result['aborted']) or '-'}), expired {len(result['expired'])} "
            f"({' '.join(result['expired']) or '-'}), "
            + (f"merged {result['merged']}, deleted {result['deleted']}, " if "merged" in result else "")
            + f"log entry {result['log_seq']}, {result['duration_ms']} ms")


def cmd_coordinator_run(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    interval = settings.sweep_interval_s if args.interval is None else args.interval
    if not interval > 0:
        raise InvalidOptionError(f"--interval must be a positive number of seconds, got {interval}")
    store = settings.open(write=True)
    coord = settings.coordinator(store)
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    installed = []
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            installed.append((sig, signal.signal(sig, on_signal)))
    if not out.json_mode:
        every = "once" if args.once else f"every {interval:g}s"
        out.emit(f"{fmt_ts(now_ms())} coordinator sweeping {store.url} {every}")
    code = EXIT_OK
    n = 0
    try:
        while not stop.is_set():
            n += 1
            try:
                result = sweep(coord, maintenance=args.maintenance, target_bytes=settings.segment_target_bytes)
            except (TxnLogError, OSError) as exc:
                message = scrub(f"sweep {n} failed: {exc}", settings.secrets())
                out.warn(f"{fmt_ts(now_ms())} {message}")
                if args.once:
                    code = exit_code_for(exc) if isinstance(exc, TxnLogError) else EXIT_STORE
            else:
                busy = bool(result["aborted"] or result["expired"] or result.get("merged") or result.get("deleted"))
                if out.json_mode:
                    out.emit_json_line({"sweep": n, "ts": now_ms()} | result)
                elif busy or args.once:
                    out.emit(_line(n, result))
            if args.once:
                break
            stop.wait(interval)
    finally:
        for sig, old in installed:
            signal.signal(sig, old)
    if received:
        if out.json_mode:
            out.emit_json_line({"stopped": received[0], "sweeps": n})
        else:
            out.emit(f"{fmt_ts(now_ms())} stopped by {received[0]} after {n} sweep(s)")
    return code
