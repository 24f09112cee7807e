"""Coordinator state: what replaying the transaction log yields.

The state is a pure function of the log prefix it has applied, so any process that replays the same entries
(starting from any checkpoint) holds the same state. :meth:`CoordinatorState.validate` checks a proposed entry
against the table of valid previous states before it is made durable; :meth:`CoordinatorState.apply` applies a
durable entry.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from coordinator.errors import CorruptLogError, InvalidTxnStateError, ProducerFencedError
from coordinator.records import VALID_PREVIOUS, SegmentRef, TxnEntry, TxnState

#: Application idempotency keys remembered per transactional id (the streaming sink needs only the last few).
APP_KEYS_KEPT = 1000


@dataclass(frozen=True)
class ProducerMeta:
    """What the coordinator knows of one transactional id."""

    tid: str
    pid: int
    epoch: int
    state: TxnState
    txn: str | None
    txn_start_ts: int | None
    last_ts: int
    timeout_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "tid": self.tid,
            "pid": self.pid,
            "epoch": self.epoch,
            "state": self.state.value,
            "txn": self.txn,
            "txn_start_ts": self.txn_start_ts,
            "last_ts": self.last_ts,
            "timeout_ms": self.timeout_ms,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProducerMeta:
        return cls(
            tid=d["tid"],
            pid=int(d["pid"]),
            epoch=int(d["epoch"]),
            state=TxnState(d["state"]),
            txn=d.get("txn"),
            txn_start_ts=d.get("txn_start_ts"),
            last_ts=int(d["last_ts"]),
            timeout_ms=int(d["timeout_ms"]),
        )


class CoordinatorState:
    """The replayed transaction log: producers, prepared-but-incomplete commits, group offsets, idempotency keys
    and per-partition producer sequence numbers."""

    def __init__(self) -> None:
        self.seq = -1
        self.next_pid = 0
        self.producers: dict[str, ProducerMeta] = {}
        #: PrepareCommit entries whose CompleteCommit is not yet in the log, by transaction id, in log order.
        self.pending: OrderedDict[str, TxnEntry] = OrderedDict()
        #: group -> topic -> partition (str) -> next offset to consume
        self.groups: dict[str, dict[str, dict[str, int]]] = {}
        #: tid -> app_key -> transaction id that committed it (insertion ordered, bounded)
        self.app_keys: dict[str, OrderedDict[str, str]] = {}
        #: "tid|topic|partition" -> last committed sequence number, for the producer's current epoch
        self.sequences: dict[str, int] = {}

    # -- validation -------------------------------------------------------------------------------------------

    def check_producer(self, tid: str, pid: int, epoch: int) -> ProducerMeta:
        """The producer's metadata, if (pid, epoch) is its current identity.

        Raises:
            ProducerFencedError: the transactional id has a newer epoch or another producer id (or expired).
        """
        meta = self.producers.get(tid)
        if meta is None or meta.pid != pid or meta.epoch != epoch:
            now = "unknown (expired)" if meta is None else f"pid {meta.pid} epoch {meta.epoch}"
            raise ProducerFencedError(
                f"producer for transactional id {tid!r} with pid {pid} epoch {epoch} is fenced: the current "
                f"producer is {now}"
            )
        return meta

    def validate(self, entry: TxnEntry) -> None:
        """Check that ``entry`` is a legal next transition.

        Raises:
            CorruptLogError: the entry's sequence number is not the next one.
            InvalidTxnStateError: the state machine does not allow the transition.
        """
        if entry.seq != self.seq + 1:
            raise CorruptLogError(f"transaction log entry {entry.seq} does not follow {self.seq}")
        meta = self.producers.get(entry.tid)
        prev = TxnState.DEAD if meta is None else meta.state
        if prev not in VALID_PREVIOUS[entry.state]:
            raise InvalidTxnStateError(
                f"transactional id {entry.tid!r} cannot go from {prev.value} to {entry.state.value}"
            )
        if entry.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and meta is not None \
                and meta.txn != entry.txn:
            raise InvalidTxnStateError(
                f"{entry.state.value} for transaction {entry.txn!r} of {entry.tid!r}, but the open one is {meta.txn!r}"
            )

    # -- application ------------------------------------------------------------------------------------------

    def apply(self, entry: TxnEntry) -> None:
        """Apply a durable entry (entries read from the log are applied even when a concurrent writer's
        validation would now fail: the log is the truth)."""
        if entry.seq != self.seq + 1:
            raise CorruptLogError(f"transaction log entry {entry.seq} applied after {self.seq}")
        self.seq = entry.seq
        self.next_pid = max(self.next_pid, entry.pid + 1)
        old = self.producers.get(entry.tid)
        if entry.state is TxnState.DEAD:
            self.producers.pop(entry.tid, None)
            self.app_keys.pop(entry.tid, None)
            self._reset_sequences(entry.tid)
            return
        if old is not None and (old.epoch != entry.epoch or old.pid != entry.pid):
            self._reset_sequences(entry.tid)
        start = entry.ts if entry.state is TxnState.ONGOING and (old is None or old.state is not TxnState.ONGOING) \
            else (old.txn_start_ts if old is not None and entry.state is not TxnState.EMPTY else None)
        meta = ProducerMeta(
            tid=entry.tid,
            pid=entry.pid,
            epoch=entry.epoch,
            state=entry.state,
            txn=entry.txn,
            txn_start_ts=start if entry.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT) else None,
            last_ts=entry.ts,
            timeout_ms=entry.timeout_ms if entry.timeout_ms is not None
            else (old.timeout_ms if old is not None else 60_000),
        )
        self.producers[entry.tid] = meta
        if entry.state is TxnState.PREPARE_COMMIT:
            self.pending[entry.txn or ""] = entry
            for group, topics in entry.offsets.items():
                g = self.groups.setdefault(group, {})
                for topic, parts in topics.items():
                    g.setdefault(topic, {}).update(parts)
            if entry.app_key is not None:
                keys = self.app_keys.setdefault(entry.tid, OrderedDict())
                keys[entry.app_key] = entry.txn or ""
                while len(keys) > APP_KEYS_KEPT:
                    keys.popitem(last=False)
            for seg in entry.segments:
                if seg.seq is not None:
                    k = _seq_key(entry.tid, seg.topic, seg.partition)
                    self.sequences[k] = max(self.sequences.get(k, -1), seg.seq)
        elif entry.state is TxnState.COMPLETE_COMMIT:
            self.pending.pop(entry.txn or "", None)

    def _reset_sequences(self, tid: str) -> None:
        prefix = tid + "|"
        for k in [k for k in self.sequences if k.startswith(prefix)]:
            del self.sequences[k]

    # -- queries ----------------------------------------------------------------------------------------------

    def last_sequence(self, tid: str, topic: str, partition: int) -> int:
        """The last committed sequence number of ``tid``'s current epoch in a partition, or -1."""
        return self.sequences.get(_seq_key(tid, topic, partition), -1)

    def committed_app_key(self, tid: str, app_key: str) -> str | None:
        """The transaction that committed ``app_key`` for ``tid``, if it is remembered."""
        keys = self.app_keys.get(tid)
        return None if keys is None else keys.get(app_key)

    def group_offsets(self, group: str) -> dict[str, dict[int, int]]:
        return {t: {int(p): o for p, o in ps.items()} for t, ps in self.groups.get(group, {}).items()}

    # -- checkpoints ------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "v": 1,
            "seq": self.seq,
            "next_pid": self.next_pid,
            "producers": [m.to_json() for m in self.producers.values()],
            "pending": [e.to_bytes().decode() for e in self.pending.values()],
            "groups": self.groups,
            "app_keys": {t: list(k.items()) for t, k in self.app_keys.items()},
            "sequences": self.sequences,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], where: str) -> CoordinatorState:
        """Raises: CorruptLogError naming ``where`` when the checkpoint cannot be decoded."""
        st = cls()
        try:
            st.seq = int(d["seq"])
            st.next_pid = int(d["next_pid"])
            for m in d["producers"]:
                meta = ProducerMeta.from_json(m)
                st.producers[meta.tid] = meta
            for raw in d["pending"]:
                e = TxnEntry.from_bytes(raw.encode(), where)
                st.pending[e.txn or ""] = e
            st.groups = {g: {t: {p: int(o) for p, o in ps.items()} for t, ps in ts.items()}
                         for g, ts in d["groups"].items()}
            st.app_keys = {t: OrderedDict((k, v) for k, v in items) for t, items in d["app_keys"].items()}
            st.sequences = {k: int(v) for k, v in d["sequences"].items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptLogError(f"coordinator checkpoint {where} is corrupt: {exc}") from exc
        return st


def _seq_key(tid: str, topic: str, partition: int) -> str:
    return f"{tid}|{topic}|{partition}"


def segments_by_partition(segments: tuple[SegmentRef, ...]) -> dict[tuple[str, int], list[SegmentRef]]:
    """Group segment references by (topic, partition), keeping their order."""
    out: dict[tuple[str, int], list[SegmentRef]] = {}
    for s in segments:
        out.setdefault((s.topic, s.partition), []).append(s)
    return out
