"""The operator's recovery of damaged transaction log objects: ``txnlog repair --log`` and
:meth:`~coordinator.coordinator.TransactionCoordinator.repair_log` (see ``docs/design.md``, "Damaged log objects").

:func:`plan_log_repair` reads every retained log entry and coordinator checkpoint (read only) and says, for each
damaged one, what :func:`execute_log_repair` would do:

* a damaged **entry above every readable checkpoint** (it stops every reader and writer) is *rebuilt* from the
  copies (:mod:`coordinator.logrebuild`): same number, same writer token, every decision a copy proves, and the
  report names what was assumed and what no copy holds. It replaces the damaged object with a plain put: the number
  is taken, so nobody else can create it;
* a damaged **entry a readable checkpoint covers** (it stops nobody) is rebuilt only when replaying the rebuilt entry
  reproduces that checkpoint's state exactly (then nothing was lost); otherwise, since the checkpoint holds its
  decisions, it is *removed* as truncation would remove it, when a readable numbered checkpoint lies above it and that
  checkpoint's own entry is readable (truncation's invariants: a number is freed only below a numbered checkpoint,
  and the entry a checkpoint ends at stays, so a view passed by lists it and jumps), else left for truncation;
* a damaged **numbered checkpoint** is rewritten with the state at its entry, replayed from an older checkpoint; one
  whose entries were truncated is left (readers skip it; truncation deletes it once a newer one is old enough);
* a damaged **``_last.json``** is rewritten with the state at the last retained entry.

Objects that cannot be repaired are named with the reason (``action`` ``cannot``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from coordinator import parallel
from coordinator.errors import CorruptLogError, TxnLogError, UnsupportedFormatError
from coordinator.layout import LAST_CHECKPOINT, TXN_CHECKPOINT, TXN_INTENTS, TXN_LOG, parse_seq, seq_name
from coordinator.logcheckpoint import ensure_records
from coordinator.logrebuild import annotated, rebuild_entry
from coordinator.probe import probe_conditional_writes
from coordinator.records import FORMAT_VERSION, LogEntry, check_format, decode_json, encode_json
from coordinator.requests import Request, request_from_bytes
from coordinator.state import CoordinatorState
from coordinator.store import Store
from coordinator.topics import get_topic, list_topics


@dataclass(frozen=True)
class LogObjectRepair:
    """One damaged log object and what the repair does with it.

    ``kind`` is ``entry`` or ``checkpoint``; ``seq`` the entry's number (a checkpoint's, or -1 for ``_last.json``);
    ``covered`` whether a readable checkpoint covers it (at or above its entry: then it stops nobody); ``action``
    one of ``rebuild`` (an entry), ``rewrite`` (a checkpoint), ``remove`` (a covered entry, deleted as truncation
    would), ``leave`` (not needed: ``why`` says what readers use instead) and ``cannot`` (``why`` says what is
    missing); ``recovered``, ``assumed`` and ``lost`` as in :class:`~coordinator.logrebuild.Rebuilt`; ``data`` the
    bytes to put.
    """

    path: str
    kind: str
    seq: int
    damage: str
    covered: bool
    action: str
    why: str = ""
    recovered: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    data: bytes = field(default=b"", repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "seq": self.seq, "damage": self.damage,
                "covered": self.covered, "action": self.action, "why": self.why, "recovered": list(self.recovered),
                "assumed": list(self.assumed), "lost": list(self.lost)}


@dataclass
class LogRepairPlan:
    """What :func:`execute_log_repair` does: ``objects`` (every damaged entry and checkpoint), and the entries whose
    partition records must exist before the rewritten checkpoints are put (``records``, the checkpoint invariant).
    ``executed`` once it was done."""

    objects: list[LogObjectRepair] = field(default_factory=list)
    records: list[LogEntry] = field(default_factory=list)
    executed: bool = False

    @property
    def ok(self) -> bool:
        """Whether every damaged object is repaired or not needed."""
        return all(o.action != "cannot" for o in self.objects)

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": not self.executed, "ok": self.ok, "objects": [o.to_json() for o in self.objects]}


@dataclass
class _Log:
    """What the store holds: readable entries, damaged ones (bytes, error), readable checkpoints by seq."""

    entries: dict[int, LogEntry] = field(default_factory=dict)
    damaged: dict[int, tuple[bytes, CorruptLogError]] = field(default_factory=dict)
    checkpoints: dict[int, CoordinatorState] = field(default_factory=dict)
    #: the entries readable numbered checkpoints end at (``checkpoints`` holds ``_last.json``'s state too)
    numbered: set[int] = field(default_factory=set)
    rebuilt: dict[int, LogEntry] = field(default_factory=dict)

    def entry(self, seq: int) -> LogEntry | None:
        return self.rebuilt.get(seq) or self.entries.get(seq)

    def state_at(self, seq: int) -> CoordinatorState | None:
        """The state after entry ``seq``: from the newest readable checkpoint at or below it (or from nothing)
        through entries that are retained, readable (or rebuilt) and chained; None when no such path exists."""
        starts = [c for c in sorted(self.checkpoints, reverse=True) if c <= seq] + [-1]
        for c in starts:
            st = self.checkpoints[c].copy() if c >= 0 else CoordinatorState()
            if self.replay(st, seq):
                return st
        return None

    def replay(self, st: CoordinatorState, upto: int) -> bool:
        """Apply entries ``st.seq + 1 .. upto`` to ``st``; False when one is missing, damaged or not chained."""
        for q in range(st.seq + 1, upto + 1):
            e = self.entry(q)
            tok = st.token_of(st.seq)
            if e is None or (e.prev and tok and e.prev != tok):
                return False
            st.apply(e)
        return True


def _checkpoint_bytes(st: CoordinatorState) -> bytes:
    return encode_json({"v": FORMAT_VERSION, **st.to_json()})


def _read_log(store: Store) -> tuple[_Log, dict[str, tuple[int, CorruptLogError]]]:
    """Every retained entry and checkpoint, decoded; the damaged checkpoints by path (seq, error)."""
    out = _Log()
    seqs = sorted(q for n in store.list(TXN_LOG) if (q := parse_seq(n)) is not None)

    def get(path: str) -> bytes | None:
        try:
            return store.get(path)
        except FileNotFoundError:
            return None

    for q, data in zip(seqs, parallel.pmap(get, [f"{TXN_LOG}/{seq_name(q)}" for q in seqs]), strict=True):
        if data is None:
            continue
        path = f"{TXN_LOG}/{seq_name(q)}"
        try:
            e = LogEntry.from_bytes(data, path)
        except (CorruptLogError, UnsupportedFormatError) as exc:
            out.damaged[q] = (data, CorruptLogError(str(exc)))
            continue
        if e.seq != q:
            out.damaged[q] = (data, CorruptLogError(f"transaction log entry {path} is damaged: it says it is entry "
                                                    f"{e.seq}"))
        else:
            out.entries[q] = e
    bad: dict[str, tuple[int, CorruptLogError]] = {}
    names = [n for n in store.list(TXN_CHECKPOINT) if parse_seq(n) is not None]
    paths = [f"{TXN_CHECKPOINT}/{n}" for n in names] + [LAST_CHECKPOINT]
    for path, data in zip(paths, parallel.pmap(get, paths), strict=True):
        if data is None:
            continue
        q = parse_seq(path.rsplit("/", 1)[-1])
        try:
            d = decode_json(data, path, "coordinator checkpoint")
            check_format(d, path)
            st = CoordinatorState.from_json(d, path)
            if q is not None and st.seq != q:
                raise CorruptLogError(f"coordinator checkpoint {path} is damaged: it holds the state of entry "
                                      f"{st.seq}")
        except (CorruptLogError, UnsupportedFormatError) as exc:
            bad[path] = (-1 if q is None else q, CorruptLogError(str(exc)))
            continue
        out.checkpoints.setdefault(st.seq, st)
        if q is not None:
            out.numbered.add(st.seq)
    return out, bad


def _intents(store: Store) -> dict[str, Request]:
    """The intents still waiting in ``_txn/intents/`` that decode, by request id."""
    names = [n for n in store.list(TXN_INTENTS) if n.endswith(".json")]

    def get(name: str) -> Request | None:
        path = f"{TXN_INTENTS}/{name}"
        try:
            return request_from_bytes(store.get(path), path)
        except (FileNotFoundError, TxnLogError):
            return None

    return {r.id: r for r in parallel.pmap(get, names) if r is not None}


def _partitions(store: Store) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for name in list_topics(store):
        try:
            out += [(name, p) for p in range(get_topic(store, name).partitions)]
        except TxnLogError:
            continue  # a damaged or deleted definition: the state still lists the partitions it knows
    return out


def plan_log_repair(store: Store) -> LogRepairPlan:
    """What repairing the store's damaged log objects would do (see the module docstring); read only.

    Raises:
        StoreError: the store failed.
    """
    lg, bad_checkpoints = _read_log(store)
    plan = LogRepairPlan()
    top = max(lg.checkpoints, default=-1)
    intents = _intents(store) if lg.damaged else {}
    partitions = _partitions(store) if lg.damaged else []
    built: dict[int, LogObjectRepair] = {}
    for seq in sorted(lg.damaged):
        raw, damage = lg.damaged[seq]
        covered = seq <= top
        base = LogObjectRepair(f"{TXN_LOG}/{seq_name(seq)}", "entry", seq, str(damage), covered, action="")
        stay = "leave" if covered else "cannot"
        before = lg.state_at(seq - 1)
        if before is None:
            plan.objects.append(replace(
                base, action=stay,
                why="the state before it cannot be replayed (an entry before it is missing or damaged, and no "
                    "readable checkpoint lies between)" + (": the checkpoint covering it holds its decisions, "
                                                           "truncation deletes it" if covered else "")))
            continue
        later: list[LogEntry] = []
        while (e := lg.entries.get(seq + 1 + len(later))) is not None:
            later.append(e)
        r = rebuild_entry(store, seq, before, later=later, raw=raw, intents=intents, partitions=partitions,
                          known=lg.checkpoints.get(_cover(lg, seq)))
        if r.entry is None:
            plan.objects.append(replace(base, action=stay, why=r.problem, lost=() if covered else (
                "every decision of the entry: readers and writers stay stopped",)))
            continue
        lg.rebuilt[seq] = r.entry
        if covered:
            built[seq] = replace(base, action="rebuild", recovered=r.recovered, data=r.entry.to_bytes(),
                                 why=f"replaying the rebuilt entry reproduces the checkpoint at entry "
                                     f"{_cover(lg, seq)}: nothing is lost")
        else:
            built[seq] = replace(base, action="rebuild", recovered=r.recovered, assumed=r.assumed, lost=r.lost,
                                 data=annotated(r.entry, r.assumed, r.lost),
                                 why="no readable checkpoint covers it: rebuilt from the copies")
    for seq in _unconfirmed(lg, [q for q in built if q <= top]):
        q = _cover(lg, seq)
        built[seq] = replace(built[seq], action="leave", data=b"",
                             why=f"the checkpoint at entry {q} covers it and holds its decisions (readers skip it; "
                                 "truncation deletes it); the copies do not reproduce that checkpoint, so it is not "
                                 "rebuilt")
    plan.objects = sorted([*plan.objects, *built.values()], key=lambda o: o.seq)
    plan.objects = [_removed(lg, o) if o.kind == "entry" and o.action == "leave" else o for o in plan.objects]
    _plan_checkpoints(lg, bad_checkpoints, plan)
    # a rebuilt entry may define a record its copies lacked (a commit completed from its staged files)
    have = {e.seq for e in plan.records}
    plan.records += [lg.rebuilt[o.seq] for o in plan.objects
                     if o.kind == "entry" and o.action == "rebuild" and o.seq not in have]
    return plan


def _removed(lg: _Log, o: LogObjectRepair) -> LogObjectRepair:
    """A covered entry left as it is, removed instead when truncation could remove it: a readable numbered
    checkpoint lies above it and that checkpoint's own entry is readable (see the module docstring)."""
    above = [c for c in lg.numbered if c > o.seq and c in lg.entries]
    if not above:
        return o
    c = min(above)
    return replace(o, action="remove", why=f"{o.why}; removed, as truncation would remove it: the numbered "
                                           f"checkpoint at entry {c} holds its decisions, and readers jump over the "
                                           f"gap to it")


def _cover(lg: _Log, seq: int) -> int:
    """The oldest readable checkpoint at or above entry ``seq`` (-1: none)."""
    return min((c for c in lg.checkpoints if c >= seq), default=-1)


def _unconfirmed(lg: _Log, covered: list[int]) -> list[int]:
    """The covered entries rebuilt tentatively whose rebuild does not reproduce the checkpoint covering them
    (replayed with the other rebuilt entries; each one found drops out of ``lg.rebuilt`` and the rest are checked
    again)."""
    out: list[int] = []
    changed = True
    while changed:
        changed = False
        for seq in [q for q in covered if q in lg.rebuilt]:
            q = _cover(lg, seq)
            st = lg.state_at(seq - 1)
            if st is None or not lg.replay(st, q) or st.to_json() != lg.checkpoints[q].to_json():
                del lg.rebuilt[seq]
                out.append(seq)
                changed = True
    return out


def _plan_checkpoints(lg: _Log, bad: dict[str, tuple[int, CorruptLogError]], plan: LogRepairPlan) -> None:
    retained = sorted(set(lg.entries) | set(lg.damaged))
    last_seq = max(retained, default=-1)
    ensure_from = max(lg.checkpoints, default=-1)
    for path in sorted(bad, key=lambda p: (p == LAST_CHECKPOINT, p)):
        q, damage = bad[path]
        target = last_seq if q < 0 else q
        newer = [c for c in lg.checkpoints if c >= target]
        base = LogObjectRepair(path, "checkpoint", q, str(damage), bool(newer), action="")
        st = lg.state_at(target) if target >= 0 else None
        if st is None:
            readable = max(lg.checkpoints, default=None)
            plan.objects.append(replace(
                base, action="leave" if readable is not None else "cannot",
                why="the state at its entry cannot be replayed (its entries were truncated, or one is damaged "
                    "beyond repair)" + (f"; readers skip it for the checkpoint at entry {readable}"
                                        if readable is not None else "")))
            continue
        start = max((c for c in lg.checkpoints if c <= target), default=-1)
        ensure_from = min(ensure_from, start)
        plan.objects.append(replace(
            base, action="rewrite", data=_checkpoint_bytes(st),
            why=f"the state at entry {st.seq}, replayed from "
                + (f"the checkpoint at entry {start}" if start >= 0 else "the first entry")))
    if any(o.action == "rewrite" for o in plan.objects):
        plan.records = [e for q in range(ensure_from + 1, last_seq + 1) if (e := lg.entry(q)) is not None]


def execute_log_repair(store: Store, plan: LogRepairPlan) -> None:
    """Do what ``plan`` says: put the rebuilt entries (plain puts: their numbers are taken), delete the removed
    ones, make sure the
    partition records below the rewritten checkpoints exist, then put the checkpoints (``_last.json`` last).

    Raises:
        StoreError: the store failed (what was put stays: each put is a repair on its own; run it again).
    """
    entries = [o for o in plan.objects if o.kind == "entry" and o.action == "rebuild"]
    parallel.pmap(lambda o: store.put(o.path, o.data), entries)
    for o in plan.objects:
        if o.kind == "entry" and o.action == "remove":
            store.delete(o.path)
    if plan.records:
        probe_conditional_writes(store)
        ensure_records(store, plan.records)
    for o in plan.objects:
        if o.kind == "checkpoint" and o.action == "rewrite":
            store.put(o.path, o.data)
    plan.executed = True


__all__ = ["LogObjectRepair", "LogRepairPlan", "execute_log_repair", "plan_log_repair"]
