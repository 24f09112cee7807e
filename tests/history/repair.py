"""Damaged transaction-log files and the operator's repair, for the history workload.

:func:`damage_log_file` overwrites one coordinator checkpoint (``_last.json`` or a numbered one) or one retained log
entry, as a disk or a buggy tool would. :func:`operator_repair` then does what the operator's documentation says:
``txnlog verify``, ``txnlog repair --log --execute`` (damaged log entries and checkpoints rebuilt from the copies),
``txnlog repair --execute``, ``TransactionCoordinator.repair_records(damaged=True)``, and
``txnlog verify`` again; and records, as a ``repair`` operation, which damaged files are still damaged afterwards
(``unrepaired``) and which of those the repair or ``verify`` named (``named``). The checker's rule ``unrepaired``
judges it: a damaged log entry must be repaired; anything else left damaged must be named. (Damaged log entries are
behind a switch, ``run.py --damage-log``: the default run damages checkpoints only.)
"""

from __future__ import annotations

import random
import time

from coordinator import CorruptLogError, TransactionCoordinator, TxnLogError, open_store
from coordinator.layout import LAST_CHECKPOINT, TXN_CHECKPOINT, TXN_LOG, marker_path, parse_seq
from coordinator.partrecords import PartitionRecord, records_of
from coordinator.records import CommitItem, LogEntry, check_format, decode_json
from coordinator.segments import decode_segment
from coordinator.state import CoordinatorState
from coordinator.store import Store
from history.checker import UNKNOWN, MiscOp
from history.lying import run_cli

DAMAGE = b"overwritten by the history workload"
#: What each kind of log damage overwrites.
LOG_KINDS = ("checkpoint", "log-entry")


def now() -> int:
    return time.monotonic_ns()


def damage_log_file(store: Store, kind: str, rng: random.Random, *, last: bool = True,
                    sole: list[str] | None = None) -> str | None:
    """Overwrite one coordinator checkpoint (``kind`` ``checkpoint``: ``_last.json`` unless not ``last``, or a
    numbered one) or one retained log entry (``log-entry``), chosen with ``rng``; returns its path (None: there is
    none yet). ``sole`` gets the values of the commits the entry held the only copy of (:func:`sole_copies`)."""
    if kind == "checkpoint":
        names = [f"{TXN_CHECKPOINT}/{n}" for n in store.list(TXN_CHECKPOINT)
                 if parse_seq(n) is not None or (last and f"{TXN_CHECKPOINT}/{n}" == LAST_CHECKPOINT)]
    else:
        names = [f"{TXN_LOG}/{n}" for n in store.list(TXN_LOG) if parse_seq(n) is not None]
    if not names:
        return None
    path = rng.choice(sorted(names))
    if sole is not None and kind == "log-entry":
        sole += sole_copies(store, path)
    store.put(path, DAMAGE)
    return path


def sole_copies(store: Store, path: str) -> list[str]:
    """The values of the commits log entry ``path`` holds the only copy of: those with a partition whose record
    (the commit's second copy) is missing or damaged, read from their segments before the entry is damaged. The
    repair cannot take them from any other object; the checker does not count them as lost when their callers
    were never answered (the store never acknowledged them)."""
    try:
        entry = LogEntry.from_bytes(store.get(path), path)
    except (FileNotFoundError, CorruptLogError):
        return []
    recs = records_of(entry)
    values: list[str] = []
    for item in entry.items:
        if not isinstance(item, CommitItem):
            continue
        held = True
        for part in item.parts:
            if not part.rows:
                continue
            rec = recs[(part.topic, part.partition)]
            where = marker_path(rec.topic, rec.partition, rec.idx)
            try:
                held = held and PartitionRecord.from_bytes(store.get(where), where) == rec
            except (FileNotFoundError, TxnLogError):
                held = False
        if held:
            continue
        for part in item.parts:
            for seg in part.segments:
                try:
                    values += decode_segment(store.get(seg.path), seg.path).column("v").to_pylist()
                except (FileNotFoundError, TxnLogError, KeyError):
                    pass
    return values


def still_damaged(store: Store, path: str) -> bool:
    """Whether the log entry or checkpoint at ``path`` still does not decode (a file gone is not damaged)."""
    try:
        data = store.get(path)
    except FileNotFoundError:
        return False
    try:
        if path.startswith(TXN_LOG + "/"):
            LogEntry.from_bytes(data, path)
        else:
            d = decode_json(data, path, "coordinator checkpoint")
            check_format(d, path)
            CoordinatorState.from_json(d, path)
    except (CorruptLogError, TxnLogError, ValueError, KeyError, TypeError):
        return True
    return False


def operator_repair(url: str, options: dict[str, str], damaged: list[str]) -> MiscOp:
    """The operator's repair of a store whose ``damaged`` log files are known (see the module docstring)."""
    op = MiscOp("repair", "repair", now(), detail="")
    said: list[str] = []
    steps: list[str] = []
    for args in (["verify"], ["repair", "--log", "--execute"], ["repair", "--execute"]):
        code, text = run_cli(url, options, args)
        said.append(text)
        steps.append(f"txnlog {' '.join(args)}: exit {code}")
    store = open_store(url, options)
    try:
        n = TransactionCoordinator(store).repair_records(damaged=True)
        steps.append(f"repair_records(damaged=True): {n} written")
    except TxnLogError as exc:
        said.append(str(exc))
        steps.append(f"repair_records(damaged=True): {type(exc).__name__}")
    code, text = run_cli(url, options, ["verify"])
    said.append(text)
    steps.append(f"txnlog verify: exit {code}")
    op.unrepaired = [p for p in damaged if still_damaged(store, p)]
    told = "\n".join(said)
    op.named = [p for p in op.unrepaired if p in told or p.rsplit("/", 1)[-1] in told]
    op.left_covered = [p for p in op.unrepaired if f"{p} (entry, covered by a readable checkpoint): left:" in told]
    op.offsets_lost = "lost: consumer-group offsets committed with" in told
    if op.unrepaired:
        op.outcome = UNKNOWN
    op.detail = "; ".join(steps)
    op.end = now()
    return op
