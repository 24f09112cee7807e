"""The history format and the anomaly checks.

A history is what a workload observed: every transaction attempt with the values it sent and its outcome
(``ok``: acknowledged; ``failed``: definitely did not happen; ``unknown``: may or may not have happened), every
read with the records it returned, and a final fault-free snapshot with the final consumer-group offsets. Every
value is unique and names its producer, transaction and index (``tid/gen/txn/idx``; consume-transform-produce
outputs append ``|<input value>``).

:func:`check` returns every anomaly found; each rule is a small function so tests can show it fires on a
hand-made bad history.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"
#: Errors a faulty run is expected to raise; anything else is reported as an anomaly.
EXPECTED_ERRORS = frozenset({"InjectedCrash", "CommitStateUnknownError", "ProducerFencedError",
                             "InvalidProducerEpochError"})

FENCED_ERRORS = frozenset({"ProducerFencedError", "InvalidProducerEpochError"})

TP = tuple[str, int]
Record = tuple[str, int, "int | None", str]  # topic, partition, offset (None: uncommitted), value


@dataclass
class TxnOp:
    """One transaction attempt. ``writes`` maps (topic, partition) to the values sent there, in send order.

    ``commit_start`` is when ``commit_transaction`` was invoked (None: never). ``zombie`` marks an attempt by a
    producer whose epoch had already been superseded; ``retry_of`` names the transaction a zombie retried."""

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

    def values(self) -> list[str]:
        return [v for vs in self.writes.values() for v in vs]


@dataclass
class ReadOp:
    """One read: a consumer poll (``session`` names the consumer, whose positions began at ``start_positions``),
    a snapshot read, a re-read of an earlier snapshot (``reread_of``) or the final read.

    ``complete`` means the read covers every committed record of its topics up to its cut (snapshot reads, and
    unlimited read_committed polls of a session that started at offset 0, cumulatively)."""

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


@dataclass
class MiscOp:
    """Any other operation (a sweep with a skewed clock, a process start): kept for counts and errors."""

    id: str
    kind: str
    start: int
    end: int = 0
    outcome: str = OK
    error: str | None = None
    detail: str = ""


Op = TxnOp | ReadOp | MiscOp


@dataclass
class History:
    """Everything one run observed."""

    seed: int
    params: str
    ops: list[Op] = field(default_factory=list)
    faults: int = 0
    final: ReadOp | None = None
    final_groups: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    #: (group, input topic, output topic) of the consume-transform-produce pipeline, if it ran.
    ctp: tuple[str, str, str] | None = None

    def txns(self) -> list[TxnOp]:
        return [o for o in self.ops if isinstance(o, TxnOp)]

    def reads(self) -> list[ReadOp]:
        return [o for o in self.ops if isinstance(o, ReadOp)] + ([self.final] if self.final else [])


@dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str
    seed: int


# -- helpers --------------------------------------------------------------------------------------------------


def _value_index(h: History) -> dict[str, TxnOp]:
    out: dict[str, TxnOp] = {}
    for t in h.txns():
        for v in t.values():
            out[v] = t
    return out


def _committed(records: Iterable[Record]) -> list[tuple[str, int, int, str]]:
    return [(t, p, o, v) for t, p, o, v in records if o is not None]


def views(h: History) -> list[tuple[ReadOp, list[tuple[str, int, int, str]]]]:
    """Complete views: each complete snapshot-type read, and the cumulative records of each consumer session after
    each of its complete polls."""
    out: list[tuple[ReadOp, list[tuple[str, int, int, str]]]] = []
    acc: dict[str, list[tuple[str, int, int, str]]] = defaultdict(list)
    for r in h.reads():
        if r.outcome != OK:
            continue
        if r.session is None:
            if r.complete:
                out.append((r, _committed(r.records)))
            continue
        acc[r.session].extend(_committed(r.records))
        if r.complete:
            out.append((r, list(acc[r.session])))
    return out


def _key(v: str) -> tuple[str, int, int, int]:
    tid, gen, txn, idx = v.split("|", 1)[0].split("/")
    return tid, int(gen), int(txn), int(idx)


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
    """Two reads disagree on the value at one (topic, partition, offset)."""
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
    transaction (any outcome) once visible but missing from the final read."""
    out = []
    final = {v for _t, _p, _o, v in _committed(h.final.records)} if h.final else set()
    ever_visible: set[str] = set()
    for r in h.reads():
        ever_visible.update(v for _t, _p, _o, v in _committed(r.records))
    topics_of = {t for t, _p, _o, _v in (h.final.records if h.final else [])} | set(h.final.topics if h.final else ())
    for op in h.txns():
        vals = [v for (t, _p), vs in op.writes.items() for v in vs if t in topics_of]
        if not vals:
            continue
        if op.outcome == OK:
            missing = [v for v in vals if v not in final]
            if missing:
                out.append(f"acknowledged transaction {op.id} lost {len(missing)} values, e.g. {missing[0]}")
        elif any(v in ever_visible for v in vals) and any(v not in final for v in vals):
            out.append(f"transaction {op.id} ({op.outcome}) was visible, then missing from the final read")
    for r, recs in views(h):
        present = {v for _t, _p, _o, v in recs}
        for op in h.txns():
            if op.outcome != OK or op.end >= r.start:
                continue
            missing = [v for (t, _p), vs in op.writes.items() for v in vs if t in r.topics and v not in present]
            if missing:
                out.append(f"read {r.id} began after transaction {op.id} was acknowledged but misses {missing[0]}")
    return out


def gaps(h: History) -> list[str]:
    """Offsets of a partition in a complete view are not exactly start..end-1; a consumer session skips or
    repeats an offset."""
    out = []
    for r, recs in views(h):
        by: dict[TP, list[int]] = defaultdict(list)
        for t, p, o, _v in recs:
            by[(t, p)].append(o)
        for (t, p), offs in by.items():
            s = sorted(offs)
            if s != list(range(len(s))):
                out.append(f"read {r.id}: offsets of {t}/{p} are not dense: {s[:12]}")
    nxt: dict[str, dict[TP, int]] = {}
    for r in h.reads():
        if r.session is None or r.outcome != OK:
            continue
        pos = nxt.setdefault(r.session, dict(r.start_positions))
        for t, p, o, v in _committed(r.records):
            want = pos.get((t, p), 0)
            if o != want:
                out.append(f"session {r.session} read {v} at {t}/{p}@{o}, expected offset {want}")
            pos[(t, p)] = o + 1
    return out


def order(h: History) -> list[str]:
    """One transactional id's values in a partition do not appear in send order (generation, txn, index)."""
    out = []
    for r, recs in views(h):
        by: dict[tuple[str, int, str], list[tuple[int, tuple[int, int, int], str]]] = defaultdict(list)
        for t, p, o, v in recs:
            tid, gen, txn, i = _key(v)
            by[(t, p, tid)].append((o, (gen, txn, i), v))
        for (t, p, tid), items in by.items():
            items.sort()
            for a, b in zip(items, items[1:], strict=False):
                if b[1] < a[1]:
                    out.append(f"read {r.id}: {t}/{p} has {a[2]}@{a[0]} before {b[2]}@{b[0]} of producer {tid}")
                    break
    return out


def torn(h: History) -> list[str]:
    """A complete view holds some but not all of a transaction's values in the topics it covers."""
    idx = _value_index(h)
    out = []
    for r, recs in views(h):
        present = {v for _t, _p, _o, v in recs}
        for op in {idx[v].id: idx[v] for v in present if v in idx}.values():
            want = [v for (t, _p), vs in op.writes.items() for v in vs if t in r.topics]
            missing = [v for v in want if v not in present]
            if missing:
                out.append(f"read {r.id} holds {len(want) - len(missing)} of {len(want)} values of {op.id} "
                           f"({op.outcome}), missing {missing[0]}")
    return out


def group_offsets(h: History) -> list[str]:
    """Consume-transform-produce: the final output must hold exactly one value for each input record below the
    group's committed offsets, and nothing else."""
    if h.ctp is None or h.final is None:
        return []
    group, src, dst = h.ctp
    committed = h.final_groups.get(group, {}).get(src, {})
    final = _committed(h.final.records)
    consumed = {v for t, p, o, v in final if t == src and o < committed.get(p, 0)}
    produced = [v.split("|", 1)[1] for t, _p, _o, v in final if t == dst]
    out = []
    extra = [v for v in produced if v not in consumed]
    if extra:
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
    with anything but ProducerFencedError. (A zombie retrying the commit of a transaction that was decided before
    the fence is answered with that decision: acknowledged only if every value of it is in the final read.)"""
    out = []
    by_id = {op.id: op for op in h.txns()}
    final = {rec[3] for rec in h.final.records} if h.final is not None else set()
    for op in h.txns():
        if not op.zombie:
            continue
        what = f"zombie transaction {op.id} of {op.tid} gen {op.gen}" + (f" (retry of {op.retry_of})"
                                                                      if op.retry_of else "")
        retried = by_id.get(op.retry_of) if op.retry_of else None
        if op.outcome == OK and retried is not None and retried.values() \
                and all(v in final for v in retried.values()):
            continue
        if op.outcome == OK:
            out.append(f"{what} committed")
        elif op.error and op.error.split(":", 1)[0] not in FENCED_ERRORS:
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
    """An operation raised an error that no injected fault explains."""
    ops: list[TxnOp | ReadOp | MiscOp] = [*h.ops, *([h.final] if h.final else [])]
    return [f"{o.id} ({type(o).__name__}): {o.error}" for o in ops
            if o.error and o.error.split(":", 1)[0] not in EXPECTED_ERRORS
            and not (isinstance(o, TxnOp) and o.zombie)]


RULES: dict[str, Callable[[History], list[str]]] = {
    "duplicate": duplicates,
    "offset-conflict": offset_conflicts,
    "aborted-read": aborted_reads,
    "undecided-read": undecided_reads,
    "lost-write": lost_writes,
    "gap": gaps,
    "order": order,
    "torn-transaction": torn,
    "group-offsets": group_offsets,
    "fencing": fencing,
    "unstable-snapshot": unstable_snapshots,
    "unexpected-error": unexpected_errors,
}


def check(h: History) -> list[Anomaly]:
    """Every anomaly of ``h``, tagged with the seed that reproduces it."""
    return [Anomaly(kind, d, h.seed) for kind, rule in RULES.items() for d in rule(h)]
