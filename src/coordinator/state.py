"""Coordinator state: what replaying the transaction log yields.

The state is a pure function of the log prefix it has applied, so any process that replays the same entries
(starting from any checkpoint) holds the same state. Applying an entry never validates: the log is the truth, and
validation happened when the entry was built (see :mod:`coordinator.decisions`). Nothing here grows with the number
of commits: it grows with producers, applications, groups and partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, TypeVar

from coordinator.errors import CorruptLogError
from coordinator.records import AbortItem, CommitItem, ExpireItem, InitItem, Item, LogEntry, ReplaceItem, RetainItem
from coordinator.txnstates import TxnState

TopicPartition = tuple[str, int]

#: Fenced epochs a producer's state remembers (see :attr:`ProducerMeta.fenced`).
FENCED_KEPT = 8
#: Writer tokens of the last entries a state (and so a checkpoint) keeps: how far back a checkpoint tells which
#: object was the log's entry (docs/design.md, "What timing can and cannot do").
TOKENS_KEPT = 64


@dataclass(frozen=True)
class ProducerMeta:
    """What the coordinator knows of one transactional id.

    ``last_txn`` is the number of the producer's last decided transaction at this epoch (-1: none yet), with its
    outcome (``committed`` / ``aborted``) and reason. ``init_request`` names the request that set this epoch.
    ``fenced`` remembers, newest first, the last :data:`FENCED_KEPT` epochs that decided something among those this
    producer left behind (by an ``init_transactions`` or a fencing abort) since epoch ``fenced_from``:
    ``(epoch, last decided txn number, its outcome)``, the outcome ``fenced`` for the transaction a fencing abort
    aborted; an epoch from ``fenced_from`` on that is not listed decided nothing. After a fence nothing of the old
    epoch can be decided, so a request of a remembered epoch is answered exactly: decided before the fence, or
    never.
    """

    tid: str
    pid: int
    epoch: int
    state: TxnState
    last_txn: int
    last_outcome: str | None
    last_reason: str | None
    timeout_ms: int
    last_ts: int
    ephemeral: bool = False
    init_request: str = ""
    fenced: tuple[tuple[int, int, str | None], ...] = ()
    fenced_from: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"tid": self.tid, "pid": self.pid, "epoch": self.epoch, "state": self.state.value,
                "last_txn": self.last_txn, "last_outcome": self.last_outcome, "last_reason": self.last_reason,
                "timeout_ms": self.timeout_ms, "last_ts": self.last_ts, "ephemeral": self.ephemeral,
                "init_request": self.init_request, "fenced": [list(f) for f in self.fenced],
                "fenced_from": self.fenced_from}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProducerMeta:
        return cls(str(d["tid"]), int(d["pid"]), int(d["epoch"]), TxnState(d["state"]), int(d["last_txn"]),
                   d.get("last_outcome"), d.get("last_reason"), int(d["timeout_ms"]), int(d["last_ts"]),
                   bool(d.get("ephemeral", False)), str(d.get("init_request", "")),
                   tuple((int(e), int(n), None if o is None else str(o)) for e, n, o in d.get("fenced", ())),
                   int(d.get("fenced_from", d["epoch"])))

    def fenced_epoch(self, epoch: int) -> tuple[int, str | None] | None:
        """``(last decided txn number, its outcome)`` of fenced epoch ``epoch`` (``(-1, None)``: it decided
        nothing), or None when the state does not remember it."""
        if not self.fenced_from <= epoch < self.epoch:
            return None
        return next(((n, o) for e, n, o in self.fenced if e == epoch), (-1, None))

    def leaving(self, last_txn: int, outcome: str | None) -> tuple[tuple[tuple[int, int, str | None], ...], int]:
        """``(fenced, fenced_from)`` after this epoch is fenced with ``last_txn`` its last decided transaction."""
        kept = ((self.epoch, last_txn, outcome), *self.fenced) if last_txn >= 0 else self.fenced
        since = self.fenced_from if len(kept) <= FENCED_KEPT else max(self.fenced_from, kept[FENCED_KEPT][0] + 1)
        return kept[:FENCED_KEPT], since


@dataclass(frozen=True)
class AppMeta:
    """An application's last committed version (Delta's ``SetTransaction``), the attempt that committed it, and the
    attempts of later versions that were aborted or reaped (they can never commit)."""

    app: str
    version: int
    token: str | None
    txn: str | None
    ts: int
    reaped: tuple[tuple[int, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"app": self.app, "version": self.version, "token": self.token, "txn": self.txn, "ts": self.ts,
                "reaped": [list(r) for r in self.reaped]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AppMeta:
        return cls(str(d["app"]), int(d["version"]), d.get("token"), d.get("txn"), int(d["ts"]),
                   tuple((int(v), str(t)) for v, t in d.get("reaped", ())))


@dataclass(frozen=True)
class PartitionMeta:
    """A partition's log start and end offsets, its next record index, its layout version (bumped by compaction and
    retention) and the log entry of its last record."""

    start: int = 0
    end: int = 0
    next_idx: int = 0
    layout: int = 0
    last_seq: int = -1


_R = TypeVar("_R", "PartitionMeta", "ProducerMeta")


def _evolve(rec: _R, **changes: Any) -> _R:
    """``dataclasses.replace`` for the state's records on the path every entry takes (applying each commit of the
    log, in every process following it), without its per-call look at the fields: a copy of ``rec`` with
    ``changes``. The records have no ``__post_init__`` to run.

    Raises:
        TypeError: a change names no field of the record.
    """
    fields = rec.__dict__
    for k in changes:
        if k not in fields:
            raise TypeError(f"{type(rec).__name__} has no field {k!r}")
    new = object.__new__(type(rec))
    new.__dict__.update(fields, **changes)
    return new


def _left(left: tuple[tuple[tuple[int, int, str | None], ...], int]) -> dict[str, Any]:
    return {"fenced": left[0], "fenced_from": left[1]}


class CoordinatorState:
    """The replayed transaction log (see the module docstring)."""

    def __init__(self) -> None:
        self.seq = -1
        self.ts = 0
        self.next_pid = 0
        #: tid -> producer; changed only through _put_producer / _drop_producer, which keep _tid_by_pid in step
        self.producers: dict[str, ProducerMeta] = {}
        self._tid_by_pid: dict[int, str] = {}
        self.apps: dict[str, AppMeta] = {}
        #: group -> topic -> partition (str) -> next offset to consume
        self.groups: dict[str, dict[str, dict[str, int]]] = {}
        self.partitions: dict[TopicPartition, PartitionMeta] = {}
        #: tid -> "topic|partition" -> last committed sequence number of the producer's current epoch
        self.sequences: dict[str, dict[str, int]] = {}
        #: writer tokens of entries ``seq - len + 1 .. seq`` (at most :data:`TOKENS_KEPT`)
        self.tokens: tuple[str, ...] = ()

    def copy(self) -> CoordinatorState:
        """An independent copy (values are immutable, so copying the containers is enough)."""
        st = CoordinatorState()
        st.seq, st.ts, st.next_pid = self.seq, self.ts, self.next_pid
        st.producers = dict(self.producers)
        st._tid_by_pid = dict(self._tid_by_pid)
        st.apps = dict(self.apps)
        st.groups = {g: {t: dict(ps) for t, ps in ts.items()} for g, ts in self.groups.items()}
        st.partitions = dict(self.partitions)
        st.sequences = {t: dict(s) for t, s in self.sequences.items()}
        st.tokens = self.tokens
        return st

    # -- queries ----------------------------------------------------------------------------------------------

    def token_of(self, seq: int) -> str | None:
        """The writer token of log entry ``seq`` if this state remembers it (the last :data:`TOKENS_KEPT`)."""
        i = seq - self.seq + len(self.tokens) - 1
        return self.tokens[i] if 0 <= i < len(self.tokens) and seq <= self.seq else None

    def partition(self, topic: str, partition: int) -> PartitionMeta:
        return self.partitions.get((topic, partition)) or PartitionMeta()

    def last_sequence(self, tid: str, topic: str, partition: int) -> int:
        """The last committed sequence number of ``tid``'s current epoch in a partition, or -1."""
        return self.sequences.get(tid, {}).get(f"{topic}|{partition}", -1)

    def group_offsets(self, group: str) -> dict[str, dict[int, int]]:
        return {t: {int(p): o for p, o in ps.items()} for t, ps in self.groups.get(group, {}).items()}

    def producer_by_pid(self, pid: int) -> ProducerMeta | None:
        """The producer holding ``pid`` (one dictionary lookup: the index is kept with ``producers``)."""
        tid = self._tid_by_pid.get(pid)
        return None if tid is None else self.producers.get(tid)

    def _put_producer(self, meta: ProducerMeta) -> None:
        old = self.producers.get(meta.tid)
        if old is not None and old.pid != meta.pid and self._tid_by_pid.get(old.pid) == meta.tid:
            del self._tid_by_pid[old.pid]
        self.producers[meta.tid] = meta
        self._tid_by_pid[meta.pid] = meta.tid

    def _drop_producer(self, tid: str) -> None:
        meta = self.producers.pop(tid)
        if self._tid_by_pid.get(meta.pid) == tid:
            del self._tid_by_pid[meta.pid]
            # a pid is held by one producer; should a damaged log have given it to two, the other keeps it
            other = next((m.tid for m in self.producers.values() if m.pid == meta.pid), None)
            if other is not None:
                self._tid_by_pid[meta.pid] = other
        self.sequences.pop(tid, None)

    # -- application ------------------------------------------------------------------------------------------

    def apply(self, entry: LogEntry) -> None:
        """Apply a durable entry, which must be the next one.

        Raises:
            CorruptLogError: the entry does not follow the last one applied.
        """
        if entry.seq != self.seq + 1:
            raise CorruptLogError(f"transaction log entry {entry.seq} applied after {self.seq}")
        for item in entry.items:
            self.apply_item(item, entry.ts)
        self.finish(entry)

    def finish(self, entry: LogEntry) -> None:
        """Record what ``entry`` did to partition record indexes, and move to it."""
        for topic, p, idx in entry.touched:
            pm = self.partition(topic, p)
            self.partitions[(topic, p)] = _evolve(pm, next_idx=idx + 1, last_seq=entry.seq)
        self.seq = entry.seq
        self.ts = max(self.ts, entry.ts)
        self.tokens = (*self.tokens[-(TOKENS_KEPT - 1):], entry.writer)

    def apply_item(self, item: Item, ts: int) -> None:
        """Apply one decision made at time ``ts`` (never validates)."""
        if isinstance(item, InitItem):
            old = self.producers.get(item.tid)
            left, since = old.leaving(old.last_txn, old.last_outcome) if old is not None and old.pid == item.pid \
                else ((), item.epoch)
            self._put_producer(ProducerMeta(item.tid, item.pid, item.epoch, TxnState.EMPTY, -1, None, None,
                                            item.timeout_ms, ts, item.ephemeral, item.request, left, since))
            self.next_pid = max(self.next_pid, item.pid + 1)
            self.sequences.pop(item.tid, None)
        elif isinstance(item, CommitItem):
            self._apply_commit(item, ts)
        elif isinstance(item, AbortItem):
            self._apply_abort(item, ts)
        elif isinstance(item, ExpireItem):
            meta = self.producers.get(item.tid)
            if meta is not None and meta.pid == item.pid:
                self._drop_producer(item.tid)
        elif isinstance(item, ReplaceItem):
            pm = self.partition(item.topic, item.partition)
            self.partitions[(item.topic, item.partition)] = replace(pm, layout=pm.layout + 1)
        elif isinstance(item, RetainItem):
            pm = self.partition(item.topic, item.partition)
            self.partitions[(item.topic, item.partition)] = replace(
                pm, start=max(pm.start, min(item.start, pm.end)), layout=pm.layout + 1)

    def _apply_commit(self, item: CommitItem, ts: int) -> None:
        if item.tid is not None:
            meta = self.producers.get(item.tid)
            if meta is not None and meta.pid == item.pid:
                if item.end_producer:
                    self._drop_producer(item.tid)
                else:
                    self._put_producer(_evolve(meta, state=TxnState.COMPLETE_COMMIT, last_txn=item.n,
                                               last_outcome="committed", last_reason=None, last_ts=ts))
                    if item.seqs:
                        self.sequences.setdefault(item.tid, {}).update(item.seqs)
        if item.app is not None:
            old = self.apps.get(item.app)
            reaped = tuple(r for r in (old.reaped if old else ()) if r[0] > item.version)
            self.apps[item.app] = AppMeta(item.app, item.version, item.token, item.txn, ts, reaped)
        for part in item.parts:
            pm = self.partition(part.topic, part.partition)
            self.partitions[(part.topic, part.partition)] = _evolve(pm, end=part.base + part.rows)
        for group, topics in item.offsets.items():
            g = self.groups.setdefault(group, {})
            for topic, parts in topics.items():
                committed = g.setdefault(topic, {})
                for p, o in parts.items():
                    if o < 0:  # a negative offset removes the partition's committed offset (group deletion)
                        committed.pop(p, None)
                    else:
                        committed[p] = o
                if not committed:
                    del g[topic]
            if not g:
                del self.groups[group]

    def _apply_abort(self, item: AbortItem, ts: int) -> None:
        if item.tid is not None:
            meta = self.producers.get(item.tid)
            if meta is not None and meta.pid == item.pid:
                if item.end_producer:
                    self._drop_producer(item.tid)
                elif item.fence:
                    last, how = (item.n, "fenced") if item.n > meta.last_txn else (meta.last_txn, meta.last_outcome)
                    self._put_producer(replace(meta, epoch=meta.epoch + 1, state=TxnState.COMPLETE_ABORT,
                                               last_txn=-1, last_outcome="aborted", last_reason=item.reason,
                                               last_ts=ts, **_left(meta.leaving(last, how))))
                    self.sequences.pop(item.tid, None)
                else:
                    self._put_producer(replace(meta, state=TxnState.COMPLETE_ABORT, last_txn=item.n,
                                               last_outcome="skipped" if item.skipped else "aborted",
                                               last_reason=item.reason, last_ts=ts))
        if item.app is not None and item.token is not None:
            old = self.apps.get(item.app) or AppMeta(item.app, -1, None, None, ts)
            if item.version > old.version and (item.version, item.token) not in old.reaped:
                self.apps[item.app] = replace(old, reaped=(*old.reaped, (item.version, item.token)))

    # -- checkpoints ------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        parts: dict[str, dict[str, list[int]]] = {}
        for (t, p), pm in sorted(self.partitions.items()):
            parts.setdefault(t, {})[str(p)] = [pm.start, pm.end, pm.next_idx, pm.layout, pm.last_seq]
        return {
            "seq": self.seq,
            "ts": self.ts,
            "next_pid": self.next_pid,
            "producers": [m.to_json() for m in self.producers.values()],
            "apps": [a.to_json() for a in self.apps.values()],
            "groups": self.groups,
            "partitions": parts,
            "sequences": self.sequences,
            "tokens": list(self.tokens),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], where: str) -> CoordinatorState:
        """Raises: CorruptLogError naming ``where`` when the checkpoint cannot be decoded."""
        st = cls()
        try:
            st.seq, st.ts, st.next_pid = int(d["seq"]), int(d["ts"]), int(d["next_pid"])
            for m in d["producers"]:
                st._put_producer(ProducerMeta.from_json(m))
            for a in d["apps"]:
                am = AppMeta.from_json(a)
                st.apps[am.app] = am
            st.groups = {str(g): {str(t): {str(p): int(o) for p, o in ps.items()} for t, ps in ts.items()}
                         for g, ts in d["groups"].items()}
            for t, ps in d["partitions"].items():
                for p, v in ps.items():
                    st.partitions[(str(t), int(p))] = PartitionMeta(*(int(x) for x in v))
            st.sequences = {str(t): {str(k): int(v) for k, v in s.items()} for t, s in d["sequences"].items()}
            st.tokens = tuple(str(t) for t in d.get("tokens", ()))[-TOKENS_KEPT:]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptLogError(f"coordinator checkpoint {where} is corrupt: {exc!r}") from exc
        return st
