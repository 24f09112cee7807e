"""Pauses of the history workload: a process stops for longer than the log truncation grace period while the others
go on, checkpoint and truncate the log past it.

* :class:`Pauser` performs the pauses that :class:`history.stores.FaultyStore` draws at store calls (before or
  after the backend applied the call, or inside a local conditional create): the calling thread sleeps while
  :func:`pass_by`, from another process, appends log entries, checkpoints, waits out the grace period, checkpoints
  again and truncates the log, so that the numbers the paused process may use next are freed.
* :func:`stop_processes` pauses whole worker processes (``SIGSTOP`` ... ``SIGCONT``) in the multi-process mode, at
  moments drawn from the seed, running :func:`pass_by` meanwhile.

A pause lasts its drawn length (:data:`PAUSE_MIN_S` plus up to :data:`PAUSE_SPREAD_S`) or until the truncation
is done, whichever is longer: always past the scaled grace period and ``RECENT_S`` window
(``workload.scaled_log_clock``). Each pause and each truncation it let pass is recorded in the history.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable

from coordinator import Producer, TransactionCoordinator, open_store
from history.checker import UNKNOWN, MiscOp
from history.stores import FaultPlan

#: The scaled grace period of log truncation (ms): ``workload.SCALED_MIN_LOG_GRACE_MS`` (kept equal by a test).
GRACE_MS = 500
#: A pause lasts at least this long (s): past the scaled grace period and ``RECENT_S`` window ...
PAUSE_MIN_S = GRACE_MS / 1000 + 0.1
#: ... plus up to this much more, drawn from the seed.
PAUSE_SPREAD_S = 0.2


def now() -> int:
    """The history's clock (``workload.now``: CLOCK_MONOTONIC, comparable across threads and processes)."""
    return time.monotonic_ns()


def err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def pass_by(url: str, options: dict[str, str], who: str, *, truncate: bool = True) -> MiscOp:
    """What the other processes do while one is paused, from a fault-free process of its own: two log entries (a
    producer ``pass-<who>`` initialising), a numbered checkpoint, then, once that checkpoint is older than the
    grace period, another entry and checkpoint and (with ``truncate``) a log truncation, which deletes the entries
    below the first checkpoint. Returns the pass as a maintenance operation (a truncation with its grace period),
    failed if any step failed."""
    op = MiscOp(f"{who}.pass-by", "maintenance", now(), race=True,
                detail=f"entries, checkpoints and log truncation while {who} is paused")
    try:
        store = open_store(url, options)
        coord = TransactionCoordinator(store, checkpoint_interval=0)  # every checkpoint numbered
        producer = Producer(store, f"pass-{who.split('.', 1)[0]}", coordinator=coord)
        producer.init_transactions()
        producer.init_transactions()
        coord.log.refresh()
        coord.log.write_checkpoint()
        time.sleep(GRACE_MS / 1000 + 0.02)
        producer.init_transactions()
        coord.log.refresh()
        coord.log.write_checkpoint()
        if truncate:
            op.truncation, op.grace_ms = True, GRACE_MS
            coord.log.truncate(grace_ms=GRACE_MS)
    except Exception as exc:
        op.outcome, op.error = UNKNOWN, err(exc)
    op.end = now()
    return op


def _paused_for(length: float, url: str, options: dict[str, str], who: str, *, truncate: bool) -> list[MiscOp]:
    """Sleep ``length`` seconds while :func:`pass_by` runs in another thread, and until it is done; returns the
    pass."""
    got: list[MiscOp] = []
    passer = threading.Thread(target=lambda: got.append(pass_by(url, options, who, truncate=truncate)),
                              name=f"pass-by-{who}", daemon=True)
    passer.start()
    time.sleep(length)
    passer.join()
    return got


class Pauser:
    """The pauses of one worker (see the module docstring): installed as ``plan.pauser``. One pause at a time per
    worker: a pause drawn while another thread of the worker is paused is skipped."""

    def __init__(self, plan: FaultPlan, url: str, options: dict[str, str], wid: int,
                 record: Callable[[MiscOp], None], op_id: Callable[[], str], *, truncate: bool = True) -> None:
        self.plan, self.url, self.options, self.wid = plan, url, options, wid
        self.record, self.op_id, self.truncate = record, op_id, truncate
        self.lengths: list[float] = []
        self._one = threading.Lock()
        self._count = 0

    def pause(self, where: str) -> None:
        """Sleep here for the drawn length, and at least until a truncation from another process has passed by."""
        if not self._one.acquire(blocking=False):
            return
        try:
            self._count += 1
            op = MiscOp(f"{self.op_id()}.pause{self._count}", "pause", now(), detail=where)
            length = PAUSE_MIN_S + self.plan.draw("pause-length", where) * PAUSE_SPREAD_S
            t0 = time.monotonic()
            got = _paused_for(length, self.url, self.options, op.id, truncate=self.truncate)
            took = time.monotonic() - t0
            op.end, op.seconds = now(), took
            op.detail = f"paused {where} for {took:.2f} s"
            for o in (op, *got):
                self.record(o)
            self.plan.hit("pause")
            self.lengths.append(took)
        finally:
            self._one.release()


def stop_processes(seed: int, url: str, options: dict[str, str], pids: list[int], ready: Callable[[int], bool],
                   alive: Callable[[int], bool], count: int, done: threading.Event, *,
                   truncate: bool = True) -> list[MiscOp]:
    """Stop ``count`` worker processes (chosen and timed from ``seed``) with ``SIGSTOP``, each for a pause length,
    while :func:`pass_by` runs here, then ``SIGCONT``. The drawn worker is waited for until it is ``ready`` (its
    imports done); if it is no longer ``alive`` when its moment comes, the next one still alive is stopped instead.
    Returns the pauses and passes, as operations of the history. Ends early once ``done`` is set."""
    rng = random.Random(seed * 7349 + 11)
    ops: list[MiscOp] = []
    for k in range(count):
        drawn = rng.randrange(len(pids))
        delay = rng.uniform(0.05, 0.6)
        length = PAUSE_MIN_S + rng.random() * PAUSE_SPREAD_S
        while not ready(drawn) and not done.is_set():
            time.sleep(0.01)
        if done.wait(delay):
            break
        wid = next((w for w in (*range(drawn, len(pids)), *range(drawn)) if alive(w)), None)
        if wid is None:
            break
        op = MiscOp(f"stop{k}.w{wid}", "process-pause", now(), detail=f"worker {wid} (pid {pids[wid]})")
        try:
            os.kill(pids[wid], signal.SIGSTOP)
        except ProcessLookupError:
            continue
        t0 = time.monotonic()
        try:
            ops += _paused_for(length, url, options, op.id, truncate=truncate)
        finally:
            try:
                os.kill(pids[wid], signal.SIGCONT)
            except ProcessLookupError:
                pass
        op.seconds = time.monotonic() - t0
        op.detail = f"stopped worker {wid} (pid {pids[wid]}) for {op.seconds:.2f} s"
        op.end = now()
        ops.append(op)
    return ops
