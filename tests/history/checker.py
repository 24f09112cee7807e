"""The history format and the anomaly checks.

A history is what a workload observed: every transaction attempt with the values it sent and its outcome
(``ok``: acknowledged; ``failed``: definitely did not happen; ``unknown``: may or may not have happened), every
read with the records it returned, every maintenance pass and injected damage, and a final fault-free snapshot
with the final consumer-group offsets and the store's integrity report. Every value is unique and names its
producer, transaction and index (``tid/gen/txn/idx``; consume-transform-produce outputs append ``|<input value>``);
the attempts of one Spark micro-batch (or of one idempotent batch job) write the same values, as a replayed batch
does, and are one transaction of the history.

What maintenance legitimately does is accounted for with evidence, never assumed: records below a view's log start
(retention) are excused only when their offset is known (from a read or the commit's reply) to be below it;
compaction keeps offsets, so the offset rules apply across it unchanged; a reader's error is expected only when an
injected fault or a recorded maintenance pass explains it (see :func:`explained`).

:func:`check` returns every anomaly found; each rule is a small function so tests can show it fires on a
hand-made bad history.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"
#: Errors a faulty run is expected to raise whatever their message; others need an explanation (:func:`explained`).
EXPECTED_ERRORS = frozenset({"InjectedCrash", "CommitStateUnknownError", "ProducerFencedError",
                             "InvalidProducerEpochError"})
#: What every injected store error says (``history.stores.INJECTED``).
INJECTED = "injected fault"
#: What a reader says when truncation deleted what it was reading (only a reader slower than the grace period).
TRUNCATION_SIGNS = ("is missing", "vanished", "were deleted under this reader", "has a gap")
#: Clock slack (ns) when comparing an operation's duration with a grace period judged on the store's clock.
SLACK_NS = 5_000_000

FENCED_ERRORS = frozenset({"ProducerFencedError", "InvalidProducerEpochError"})
#: What ``CommitStateUnknownError`` says when an expired producer's decision is in entries truncated since.
UNFINDABLE = "were written and truncated"
#: What it says when the decision is in an entry its process created after a pause and could not judge (a suspect:
#: perhaps under a number a truncation freed).
UNTELLABLE = "cannot be told"

TP = tuple[str, int]
Record = tuple[str, int, "int | None", str]  # topic, partition, offset (None: uncommitted), value


@dataclass
class TxnOp:
    """One transaction attempt. ``writes`` maps (topic, partition) to the values sent there, in send order.

    ``commit_start`` is when ``commit_transaction`` (or a sink's ``commit``) was first invoked (None: never).
    ``zombie`` marks an attempt by a producer whose epoch had already been superseded; ``retry_of`` names the
    transaction a zombie retried. ``kind`` is ``producer``, ``ctp``, ``batch-job`` or ``stream-batch``;
    ``followups`` what the caller's error path did and got (``commit again: ok``, ``abort: AlreadyCommittedError:
    ...``); ``assigned`` the offsets the commit's reply gave, per partition (first, end); ``after`` the
    transaction of the same producer whose commit was still in flight when this one was sent (``commit_transaction_
    async``): this one may be visible only if that one is."""

    id: str
    tid: str
    gen: int
    txn_no: int
    start: int
    end: int = 0
    writes: dict[TP, list[str]] = field(default_factory=dict)
    offsets: dict[str, dict[int, int]] | None = None
    outcome: str = UNKNOWN
    error: str | None = None
    commit_start: int | None = None
    zombie: bool = False
    retry_of: str | None = None
    kind: str = "producer"
    followups: list[str] = field(default_factory=list)
    assigned: dict[TP, tuple[int, int]] = field(default_factory=dict)
    after: str | None = None

    def values(self) -> list[str]:
        return [v for vs in self.writes.values() for v in vs]


@dataclass
class ReadOp:
    """One read: a consumer poll (``session`` names the consumer, whose positions began at ``start_positions``),
    a snapshot read, a re-read of an earlier snapshot (``reread_of``) or the final read.

    ``complete`` means the read covers every committed record of its topics up to its cut (snapshot reads, and
    unlimited read_committed polls of a session, cumulatively, from the session's start positions). ``floors`` are
    the log start offsets of a snapshot-type read's cut (retention moves them). ``part_errors`` are partitions the
    final read could not read, with the error (a damaged partition). ``read_only`` readers run with write access
    refused; ``write_attempts`` are the writes they tried anyway."""

    id: str
    kind: str
    start: int
    end: int = 0
    topics: tuple[str, ...] = ()
    isolation: str = "read_committed"
    session: str | None = None
    start_positions: dict[TP, int] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    complete: bool = False
    reread_of: str | None = None
    outcome: str = OK
    error: str | None = None
    floors: dict[TP, int] = field(default_factory=dict)
    part_errors: dict[TP, str] = field(default_factory=dict)
    read_only: bool = False
    write_attempts: list[str] = field(default_factory=list)


@dataclass
class MiscOp:
    """Any other operation: a process start, a sweep, a maintenance pass, an injected damage.

    Maintenance passes record what they did that readers may notice: ``retired_deleted`` (segment files retired by
    compaction or retention that GC deleted, with ``grace_ms``), ``reaped`` (application attempts GC made
    uncommittable), ``moved`` (partitions whose log start retention moved), ``truncation`` (log entries or partition
    records deleted, with ``grace_ms``). ``damaged`` are files an injected damage overwrote; ``race`` marks a pass
    run at a protocol point inside another operation (or from another process while a worker was paused).
    ``seconds`` is how long a ``pause`` (or ``process-pause``) lasted. A ``lying-store`` operation drove one writing
    path against a store ignoring conditional writes: ``accepted`` are the conditional writes that reached it. A
    ``repair`` operation is the operator's repair of damaged log files: ``unrepaired`` are those still damaged
    after it, ``named`` those of them that the repair or ``verify`` named, ``left_covered`` those of them the repair
    left because a readable checkpoint covers them (they stop nobody; truncation deletes them), and
    ``offsets_lost`` whether it named consumer-group offsets that no copy held. A damaged log entry's ``sole`` are
    the values of the commits it held the only copy of (a partition record missing or damaged when it was
    damaged): no repair can bring those back, and they are not lost writes unless acknowledged."""

    id: str
    kind: str
    start: int
    end: int = 0
    outcome: str = OK
    error: str | None = None
    detail: str = ""
    grace_ms: int | None = None
    retired_deleted: list[str] = field(default_factory=list)
    reaped: list[str] = field(default_factory=list)
    moved: list[TP] = field(default_factory=list)
    truncation: bool = False
    damaged: list[str] = field(default_factory=list)
    race: bool = False
    seconds: float | None = None
    accepted: list[str] = field(default_factory=list)
    unrepaired: list[str] = field(default_factory=list)
    named: list[str] = field(default_factory=list)
    left_covered: list[str] = field(default_factory=list)
    offsets_lost: bool = False
    sole: list[str] = field(default_factory=list)


Op = TxnOp | ReadOp | MiscOp


@dataclass
class History:
    """Everything one run observed."""

    seed: int
    params: str
    ops: list[Op] = field(default_factory=list)
    #: injected faults by kind (crash, error, lost-reply, maintenance-race, expiry, corrupt-file, zombie,
    #: skewed-clock, stall, pause, process-pause, clock-skew, lying-store, damaged-checkpoint, damaged-log-entry)
    faults: Counter[str] = field(default_factory=Counter)
    final: ReadOp | None = None
    final_groups: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    #: (group, input topic, output topic) of the consume-transform-produce pipeline, if it ran.
    ctp: tuple[str, str, str] | None = None
    #: what ``inspect.verify`` reported on the final store (after the operator's ``repair_records``): path, message
    verify: list[tuple[str, str]] = field(default_factory=list)

    def txns(self) -> list[TxnOp]:
        return [o for o in self.ops if isinstance(o, TxnOp)]

    def reads(self) -> list[ReadOp]:
        return [o for o in self.ops if isinstance(o, ReadOp)] + ([self.final] if self.final else [])

    def misc(self) -> list[MiscOp]:
        return [o for o in self.ops if isinstance(o, MiscOp)]

    def damaged(self) -> set[str]:
        return {p for o in self.misc() for p in o.damaged}

    def damaged_partitions(self) -> set[TP]:
        return {_partition_of(p) for p in self.damaged() if p.startswith("topics/")}

    def pause_lengths(self) -> list[float]:
        """How long each pause (of a store call, or of a whole process) lasted, in seconds."""
        return [o.seconds for o in self.misc() if o.kind in ("pause", "process-pause") and o.seconds is not None]


@dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str
    seed: int


# -- helpers --------------------------------------------------------------------------------------------------


def _partition_of(path: str) -> TP:
    """(topic, partition) of a file below ``topics/<topic>/<partition>/``."""
    parts = path.split("/")
    return parts[1], int(parts[2])


def _value_index(h: History) -> dict[str, TxnOp]:
    out: dict[str, TxnOp] = {}
    for t in h.txns():
        for v in t.values():
            out[v] = t
    return out


def _committed(records: Iterable[Record]) -> list[tuple[str, int, int, str]]:
    return [(t, p, o, v) for t, p, o, v in records if o is not None]


def _where(h: History) -> dict[str, TP]:
    return {v: tp for op in h.txns() for tp, vs in op.writes.items() for v in vs}


def known_offsets(h: History) -> dict[str, int]:
    """The offset of every value that some read returned or some commit's reply assigned."""
    out: dict[str, int] = {}
    for op in h.txns():
        for tp, (first, end) in op.assigned.items():
            vals = op.writes.get(tp, [])
            if len(vals) == end - first:
                out.update({v: first + i for i, v in enumerate(vals)})
    for r in h.reads():
        out.update({v: o for _t, _p, o, v in _committed(r.records)})
    return out


@dataclass
class View:
    """What a complete read saw: its records, the log start of each partition at its cut (``floors``) and the
    partitions it could not read (``unread``)."""

    read: ReadOp
    records: list[tuple[str, int, int, str]]
    floors: dict[TP, int]
    unread: set[TP]

    def covers(self, tp: TP) -> bool:
        return tp[0] in self.read.topics and tp not in self.unread


def views(h: History) -> list[View]:
    """Complete views: each complete snapshot-type read, and the cumulative records of each consumer session after
    each of its complete polls (from the session's start positions)."""
    out: list[View] = []
    acc: dict[str, list[tuple[str, int, int, str]]] = defaultdict(list)
    floors: dict[str, dict[TP, int]] = {}
    for r in h.reads():
        if r.session is not None:
            floors.setdefault(r.session, dict(r.start_positions))
        if r.outcome != OK:
            continue
        if r.session is None:
            if r.complete:
                out.append(View(r, _committed(r.records), r.floors, set(r.part_errors)))
            continue
        acc[r.session].extend(_committed(r.records))
        if r.complete:
            out.append(View(r, list(acc[r.session]), floors[r.session], set()))
    return out


def _retained(known: dict[str, int], floors: dict[TP, int], tp: TP, v: str) -> bool:
    """Whether ``v`` (in ``tp``) may be missing from a view because retention moved the log start past it: its
    known offset is below the view's start, or (no read saw it, no reply gave its offset) the start moved at all."""
    floor = floors.get(tp, 0)
    if floor <= 0:
        return False
    o = known.get(v)
    return o is None or o < floor


def _sole_copies(h: History) -> set[str]:
    """What a damaged entry held the only copy of (an unacknowledged commit may be lost with it; never torn)."""
    return {v for o in h.misc() if o.kind == "damage" for v in o.sole}


def _key(v: str) -> tuple[str, int, int, int]:
    tid, gen, txn, idx = v.split("|", 1)[0].split("/")
    return tid, int(gen), int(txn), int(idx)


def _overlaps(a: ReadOp | TxnOp | MiscOp, b: ReadOp | TxnOp | MiscOp) -> bool:
    return a.start <= b.end and b.start <= a.end


def explained(h: History, op: TxnOp | ReadOp | MiscOp, error: str, context: str = "") -> bool:
    """Whether an injected fault or a recorded maintenance pass explains ``error`` raised by ``op`` (``context``:
    what the caller was doing, e.g. which attempt it committed):

    * an injected crash, an unknown commit outcome, a fenced producer (sweeps and zombies fence);
    * a ``StoreError`` saying it was injected;
    * a ``CorruptLogError`` naming a file the history damaged; or naming a retired segment GC deleted, raised by
      a reader that ran longer than that GC's grace period; or (log or partition records missing) raised by a
      reader that overlapped a truncation and ran longer than its grace period;
    * an ``OffsetOutOfRangeError`` naming a partition whose log start retention moved;
    * an ``InvalidTxnStateError`` refusing a stream attempt that GC reaped;
    * an ``AlreadyCommittedError`` answering the abort of a transaction that turned out committed;
    * a ``TransactionAbortedError`` of a commit (or a next call) behind a commit in flight that had failed.
    """
    cls, _, msg = error.partition(": ")
    if cls in EXPECTED_ERRORS:
        return True
    misc = h.misc()
    if cls == "StoreError":
        return INJECTED in msg
    if cls == "CorruptLogError":
        if any(p in msg for p in h.damaged()):
            return True
        took = op.end - op.start
        for m in misc:
            if m.grace_ms is None or took + SLACK_NS <= m.grace_ms * 1_000_000 or not _overlaps(m, op):
                continue
            if any(p in msg for p in m.retired_deleted):
                return True
            if m.truncation and any(sign in msg for sign in TRUNCATION_SIGNS):
                return True
        return False
    if cls == "OffsetOutOfRangeError":
        return any(re.search(rf"\b{re.escape(t)}/{p}\b", msg) for m in misc for t, p in m.moved)
    if cls == "InvalidTxnStateError" and "reaped" in msg:
        # GC reaped the attempt (named in the error or in the caller's label): its report says so, or the pass
        # failed before it could report
        return any(txn in context or txn.rsplit(".", 1)[-1] in msg for m in misc for txn in m.reaped) or \
            any(m.error and m.detail.startswith(("gc", "maintain")) and m.start < op.end for m in misc)
    if cls == "AlreadyCommittedError":
        return isinstance(op, TxnOp) and op.outcome == OK
    if cls == "TransactionAbortedError" and isinstance(op, TxnOp):
        # behind a commit of its producer in flight that failed (that one's own error is judged on its own)
        failed = [t for t in h.txns() if t.tid == op.tid and t.gen == op.gen and t.error and t.start < op.start]
        if "which it follows, was not committed" in msg:
            return any(t.id == op.after and t.outcome != OK for t in failed)
        return msg.startswith("a commit in flight failed") and bool(failed)
    return False


# -- rules ----------------------------------------------------------------------------------------------------


def duplicates(h: History) -> list[str]:
    """A value read at two different (topic, partition, offset) positions, or twice in one read."""
    where: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    out = []
    for r in h.reads():
        seen: set[str] = set()
        for t, p, o, v in _committed(r.records):
            if v in seen:
                out.append(f"{v} returned twice by read {r.id}")
            seen.add(v)
            where[v].add((t, p, o))
    out += [f"{v} at {sorted(pos)}" for v, pos in where.items() if len(pos) > 1]
    return out


def offset_conflicts(h: History) -> list[str]:
    """Two reads disagree on the value at one (topic, partition, offset): offsets are never reused or rewritten,
    compaction included."""
    at: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    for r in h.reads():
        for t, p, o, v in _committed(r.records):
            at[(t, p, o)].add(v)
    return [f"{t}/{p}@{o} holds {sorted(vs)}" for (t, p, o), vs in at.items() if len(vs) > 1]


def aborted_reads(h: History) -> list[str]:
    """A committed record (non-null offset) of a failed transaction, or of no transaction at all; an uncommitted
    record that no transaction wrote."""
    idx = _value_index(h)
    out = []
    for r in h.reads():
        for t, p, o, v in r.records:
            op = idx.get(v)
            if op is None:
                out.append(f"read {r.id} returned {v} at {t}/{p}@{o}, which no transaction wrote")
            elif o is not None and op.outcome == FAILED:
                out.append(f"read {r.id} ({r.isolation}) returned {v} of failed transaction {op.id} at {t}/{p}@{o}")
    return out


def undecided_reads(h: History) -> list[str]:
    """A committed record returned by a read that finished before its transaction's commit was even requested."""
    idx = _value_index(h)
    out = []
    for r in h.reads():
        for t, p, o, v in _committed(r.records):
            op = idx.get(v)
            if op is not None and (op.commit_start is None or r.end < op.commit_start) and op.outcome != FAILED:
                out.append(f"read {r.id} returned {v} at {t}/{p}@{o} before transaction {op.id} asked to commit")
    return out


def lost_writes(h: History) -> list[str]:
    """An acknowledged transaction missing from the final read or from any complete view begun after its ack; a
    transaction (any outcome) once visible but missing from the final read. Values below a view's log start are
    not lost when retention moved it past them (see :func:`_retained`); partitions a view could not read (a
    damaged partition) are not judged."""
    out = []
    where = _where(h)
    known = known_offsets(h)
    ever_visible: set[str] = set()
    sole = _sole_copies(h)
    for r in h.reads():
        ever_visible.update(v for _t, _p, _o, v in _committed(r.records))
    final = next((w for w in views(h) if w.read is h.final), None)
    if final is not None:
        present = {v for _t, _p, _o, v in final.records}
        for op in h.txns():
            missing = [v for v in op.values() if final.covers(where[v]) and v not in present
                       and not _retained(known, final.floors, where[v], v)]
            if not missing:
                continue
            if op.outcome == OK:
                out.append(f"acknowledged transaction {op.id} lost {len(missing)} values, e.g. {missing[0]}")
            elif any(v in ever_visible for v in op.values()) and not set(missing) <= sole:
                out.append(f"transaction {op.id} ({op.outcome}) was visible, then missing from the final read")
    for w in views(h):
        if w.read is h.final:
            continue
        present = {v for _t, _p, _o, v in w.records}
        for op in h.txns():
            if op.outcome != OK or op.end >= w.read.start:
                continue
            missing = [v for v in op.values() if w.covers(where[v]) and v not in present
                       and not _retained(known, w.floors, where[v], v)]
            if missing:
                out.append(f"read {w.read.id} began after transaction {op.id} was acknowledged but misses "
                           f"{missing[0]}")
    return out


def gaps(h: History) -> list[str]:
    """Offsets of a partition in a complete view are not exactly start..end-1 (start: the view's log start); a
    consumer session skips or repeats an offset."""
    out = []
    for w in views(h):
        by: dict[TP, list[int]] = defaultdict(list)
        for t, p, o, _v in w.records:
            by[(t, p)].append(o)
        for tp, offs in by.items():
            s = sorted(offs)
            first = w.floors.get(tp, 0)
            if s != list(range(first, first + len(s))):
                out.append(f"read {w.read.id}: offsets of {tp[0]}/{tp[1]} are not dense from {first}: {s[:12]}")
    nxt: dict[str, dict[TP, int]] = {}
    for r in h.reads():
        if r.session is None:
            continue
        pos = nxt.setdefault(r.session, dict(r.start_positions))
        if r.outcome != OK:
            continue
        for t, p, o, v in _committed(r.records):
            want = pos.get((t, p), 0)
            if o != want:
                out.append(f"session {r.session} read {v} at {t}/{p}@{o}, expected offset {want}")
            pos[(t, p)] = o + 1
    return out


def order(h: History) -> list[str]:
    """One transactional id's values in a partition do not appear in send order (generation, txn, index)."""
    out = []
    for w in views(h):
        by: dict[tuple[str, int, str], list[tuple[int, tuple[int, int, int], str]]] = defaultdict(list)
        for t, p, o, v in w.records:
            tid, gen, txn, i = _key(v)
            by[(t, p, tid)].append((o, (gen, txn, i), v))
        for (t, p, tid), items in by.items():
            items.sort()
            for a, b in zip(items, items[1:], strict=False):
                if b[1] < a[1]:
                    out.append(f"read {w.read.id}: {t}/{p} has {a[2]}@{a[0]} before {b[2]}@{b[0]} of producer {tid}")
                    break
    return out


def torn(h: History) -> list[str]:
    """A complete view holds some but not all of a transaction's values in the partitions it covers (values below
    the view's log start excused as in :func:`lost_writes`)."""
    idx = _value_index(h)
    where = _where(h)
    known = known_offsets(h)
    out = []
    for w in views(h):
        present = {v for _t, _p, _o, v in w.records}
        for op in {idx[v].id: idx[v] for v in present if v in idx}.values():
            want = [v for v in op.values() if w.covers(where[v])]
            missing = [v for v in want if v not in present and not _retained(known, w.floors, where[v], v)]
            if missing:
                out.append(f"read {w.read.id} holds {len(want) - len(missing)} of {len(want)} values of {op.id} "
                           f"({op.outcome}), missing {missing[0]}")
    return out


def pipelined_order(h: History) -> list[str]:
    """A complete view holds a transaction committed behind an earlier one of its producer (``after``) but not that
    earlier one: the log commits a pipelined transaction only once the one before it committed. (Values below the
    view's log start, or that a damaged entry held the only copy of, are excused as in :func:`lost_writes`.)"""
    by_id = {op.id: op for op in h.txns()}
    chained = [(op, by_id[op.after]) for op in h.txns() if op.after in by_id]
    where, known, sole = _where(h), known_offsets(h), _sole_copies(h)
    out = []
    for w in views(h):
        present = {v for _t, _p, _o, v in w.records}
        for op, before in chained:
            if not any(v in present for v in op.values()):
                continue
            missing = [v for v in before.values() if w.covers(where[v]) and v not in present and v not in sole
                       and not _retained(known, w.floors, where[v], v)]
            if missing:
                out.append(f"read {w.read.id} holds {op.id}, committed behind {before.id} ({before.outcome}), but "
                           f"not {missing[0]} of it")
    return out


def group_offsets(h: History) -> list[str]:
    """Consume-transform-produce: the final output must hold exactly one value for each input record below the
    group's committed offsets, and nothing else."""
    if h.ctp is None or h.final is None:
        return []
    group, src, dst = h.ctp
    # a repair that named consumer-group offsets no copy held may leave the group's offsets behind its outputs
    named_loss = any(o.offsets_lost for o in h.misc() if o.kind == "repair")
    committed = h.final_groups.get(group, {}).get(src, {})
    final = _committed(h.final.records)
    consumed = {v for t, p, o, v in final if t == src and o < committed.get(p, 0)}
    produced = [v.split("|", 1)[1] for t, _p, _o, v in final if t == dst]
    out = []
    extra = [v for v in produced if v not in consumed]
    if extra and not named_loss:
        out.append(f"group {group}: {len(extra)} outputs of input not consumed by offsets {committed}, e.g. {extra[0]}")
    counts: dict[str, int] = defaultdict(int)
    for v in produced:
        counts[v] += 1
    twice = [v for v, n in counts.items() if n > 1]
    if twice:
        out.append(f"group {group}: input {twice[0]} produced {counts[twice[0]]} outputs")
    missing = sorted(consumed - set(produced))
    if missing:
        out.append(f"group {group}: {len(missing)} inputs below offsets {committed} have no output, e.g. {missing[0]}")
    return out


def fencing(h: History) -> list[str]:
    """A zombie (superseded epoch) got an acknowledged commit of anything not committed before the fence, or failed
    with anything but ProducerFencedError, or died in its commit and yet what it wrote is visible. (A zombie
    retrying the commit of a transaction that was decided before the fence is answered with that decision:
    acknowledged only if every value of it is in the final read. When
    its producer's id has expired and the entries since its request waited are truncated, that decision cannot be
    found: ``CommitStateUnknownError`` saying so is the truth, as long as the retried transaction is all or nothing
    in the final read, its values that retention moved the log start past or that sit in partitions the final read
    could not read counting as either; the retry decided nothing itself. The same holds when the decision is in an
    entry the zombie's process created after a pause and could not judge since: it says it cannot be told. A
    zombie's own new commit, asked for after the fence, may be told the same when its producer expired while its
    process paused past the truncation: the process cannot prove which of the truncated entries decided it, and
    says so; nothing of that transaction may be in the final read, since after the fence it can only be fenced.)"""
    out = []
    by_id = {op.id: op for op in h.txns()}
    final = {rec[3] for rec in h.final.records} if h.final is not None else set()
    floors = h.final.floors if h.final is not None else {}
    unread = set(h.final.part_errors) if h.final is not None else set()
    where, known = _where(h), known_offsets(h)
    for op in h.txns():
        if not op.zombie or op.kind != "producer":
            continue
        what = f"zombie transaction {op.id} of {op.tid} gen {op.gen}" + (f" (retry of {op.retry_of})"
                                                                      if op.retry_of else "")
        retried = by_id.get(op.retry_of) if op.retry_of else None
        whole = retried is not None and all(v in final or where[v] in unread or _retained(known, floors, where[v], v)
                                            for v in retried.values())
        if op.outcome == OK and retried is not None and retried.values() and whole:
            continue
        if op.outcome == OK:
            out.append(f"{what} committed")
        elif op.error and op.error.startswith("InjectedCrash"):
            # the zombie process died in its commit (its serving thread, still carrying the faults of its life,
            # crashed): no answer to judge, and nothing it wrote after the fence may be visible
            if committed := [v for v in op.values() if v in final]:
                out.append(f"{what} died in its commit, yet {committed[:3]} of it are committed")
        elif op.error and op.error.split(":", 1)[0] not in FENCED_ERRORS:
            if op.error.startswith("CommitStateUnknownError") and (UNFINDABLE in op.error or UNTELLABLE in op.error):
                if retried is not None and (whole or not any(v in final for v in retried.values())):
                    continue
                if retried is None and not any(v in final for v in op.values()):
                    continue
            out.append(f"{what} got {op.error} instead of ProducerFencedError")
    return out


def unstable_snapshots(h: History) -> list[str]:
    """A re-read of a pinned snapshot returned something else than the first read of it."""
    first = {r.id: r for r in h.reads() if r.kind == "snapshot" and r.outcome == OK}
    out = []
    for r in h.reads():
        if r.reread_of and r.outcome == OK and r.reread_of in first:
            a, b = sorted(first[r.reread_of].records, key=str), sorted(r.records, key=str)
            if a != b:
                diff = sorted(set(a) ^ set(b), key=str)
                out.append(f"snapshot {r.reread_of} re-read by {r.id} differs: {diff[:2]} ({len(diff)} records)")
    return out


def unexpected_errors(h: History) -> list[str]:
    """An operation raised an error (or its caller's error path got one) that no injected fault or recorded
    maintenance pass explains (see :func:`explained`)."""
    ops: list[TxnOp | ReadOp | MiscOp] = [*h.ops, *([h.final] if h.final else [])]
    out = []
    for o in ops:
        if isinstance(o, TxnOp) and o.zombie and o.kind == "producer":
            continue  # judged by the fencing rule
        if isinstance(o, MiscOp) and o.kind == "lying-store":
            continue  # a refusal is what is wanted: judged by lying_store_accepted
        errors = [(o.detail if isinstance(o, MiscOp) else "", o.error)] if o.error else []
        if isinstance(o, TxnOp):
            errors += [tuple(f.split(" -> ", 1)) for f in o.followups if " -> " in f]  # type: ignore[misc]
        if isinstance(o, ReadOp):
            errors += [("", e) for e in o.part_errors.values()]
        out += [f"{o.id} ({type(o).__name__}): {e}" for label, e in errors
                if e != OK and not explained(h, o, e, label)]
    return out


def reader_writes(h: History) -> list[str]:
    """A reader running with write access refused tried to write (readers need no write permission)."""
    return [f"read-only reader {r.id} ({r.kind}) tried to write: {w}" for r in h.reads() for w in r.write_attempts]


def integrity(h: History) -> list[str]:
    """``verify`` on the final store (after the operator's repair of derived records) reports a problem outside
    the partitions the history damaged: one damaged partition must never harm another, and nothing else may be
    damaged at all. (A damaged log entry or checkpoint left damaged is judged by :func:`unrepaired`: problems
    naming it are left to that rule.)"""
    damaged = h.damaged_partitions()
    log_files = [p for p in h.damaged() if p.startswith("_txn/")]
    out = []
    for path, msg in h.verify:
        parts = path.split("/")
        inside = len(parts) > 3 and parts[0] == "topics" and parts[2].isdigit() and _partition_of(path) in damaged
        if not inside and not any(f == path or f in msg for f in log_files):
            out.append(f"verify: {msg}")
    return out


def lying_store_accepted(h: History) -> list[str]:
    """A writing path opened on a store that ignores conditional writes was not refused: a conditional write of
    its own reached the store, or the path went through, or it failed for another reason than the store's lie
    (which proves no refusal)."""
    out = []
    for o in h.misc():
        if o.kind != "lying-store":
            continue
        if o.accepted:
            out.append(f"{o.id} ({o.detail}): a store ignoring conditional writes was trusted: it created "
                       f"{', '.join(o.accepted[:3])}" + (f" and {len(o.accepted) - 3} more" if len(o.accepted) > 3
                                                          else ""))
        elif o.outcome == OK:
            out.append(f"{o.id} ({o.detail}): a store ignoring conditional writes was not refused")
        elif o.error is not None and "conditional writes" not in o.error:
            out.append(f"{o.id} ({o.detail}): failed without refusing the store as ignoring conditional writes: "
                       f"{o.error}")
    return out


def unrepaired(h: History) -> list[str]:
    """After the operator's repair, a damaged log entry is still damaged (log entries must be repaired: what they
    decided is committed) though no readable checkpoint covering it holds its decisions, or another damaged file is
    still damaged and neither the repair nor ``verify`` names it."""
    out = []
    for o in h.misc():
        if o.kind != "repair":
            continue
        for path in o.unrepaired:
            named = "named by the repair or verify" if path in o.named else "and nothing names it"
            if path.startswith("_txn/log/") and path not in o.left_covered:
                out.append(f"damaged log entry {path} is not repaired ({named}; {o.detail})")
            elif not path.startswith("_txn/log/") and path not in o.named:
                out.append(f"{path} is still damaged after the repair {named} ({o.detail})")
    return out


def final_read(h: History) -> list[str]:
    """The fault-free final read (after any repair of damaged log files) failed: the store cannot be read, and
    nothing committed can be judged."""
    if h.final is None or h.final.outcome == OK:
        return []
    return [f"the final read failed: {h.final.error}"]


def shared_values(h: History) -> list[str]:
    """Two operations of the history claim to have written one value: every value names its writer, so this is a
    fault of the harness's bookkeeping (two threads of a worker numbering its transactions at once, say), and every
    rule that attributes a read value to its transaction would judge the wrong one."""
    by: dict[str, list[str]] = defaultdict(list)
    for t in h.txns():
        for v in set(t.values()):
            by[v].append(t.id)
    return [f"{v} is claimed by {', '.join(ids)}" for v, ids in by.items() if len(ids) > 1]


def quiescence(h: History) -> list[str]:
    """The final read is judged against a store nothing else touches: an operation (a maintenance pass a
    background job fired, say) still running when it started is a fault of the harness, not of the system."""
    if h.final is None:
        return []
    return [f"{o.id} ({o.kind}) ended {(o.end - h.final.start) / 1e6:.1f} ms after the final read started"
            for o in h.ops if o.end and o.end > h.final.start]


RULES: dict[str, Callable[[History], list[str]]] = {
    "duplicate": duplicates,
    "offset-conflict": offset_conflicts,
    "aborted-read": aborted_reads,
    "undecided-read": undecided_reads,
    "lost-write": lost_writes,
    "gap": gaps,
    "order": order,
    "torn-transaction": torn,
    "pipelined-order": pipelined_order,
    "group-offsets": group_offsets,
    "fencing": fencing,
    "unstable-snapshot": unstable_snapshots,
    "unexpected-error": unexpected_errors,
    "reader-write": reader_writes,
    "integrity": integrity,
    "quiescence": quiescence,
    "shared-value": shared_values,
    "lying-store-accepted": lying_store_accepted,
    "unrepaired": unrepaired,
    "final-read": final_read,
}


def check(h: History) -> list[Anomaly]:
    """Every anomaly of ``h``, tagged with the seed that reproduces it."""
    return [Anomaly(kind, d, h.seed) for kind, rule in RULES.items() for d in rule(h)]
