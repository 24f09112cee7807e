"""Partition records: what one transaction log entry did to one partition, as the partition's own index keeps it.

Record ``idx`` of a partition is derived from the log entry that assigned it (``LogEntry.touched``): its bytes are a
pure function of that entry, so any process may write it (``put_if_absent``: a second writer of the same bytes is a
no-op, different bytes at the same index mean that partition is damaged) and a reader that finds it missing computes
it from the entry instead. Ops, in the entry's item order:

* ``commit``: transaction ``txn`` publishes ``segments`` at offsets ``base ..``;
* ``replace``: compaction replaced the live segments holding ``[base, end)`` by one segment, offsets unchanged;
* ``retain``: retention moved the log start offset to ``start``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from coordinator.errors import CorruptLogError
from coordinator.records import FORMAT_VERSION as _V
from coordinator.records import (
    CommitItem,
    LogEntry,
    MarkerSegment,
    ReplaceItem,
    RetainItem,
    check_format,
    decode_json,
    encode_json,
)


@dataclass(frozen=True)
class CommitOp:
    """Transaction ``txn`` (committed at the record's entry) publishes ``segments`` at offsets ``base ..``."""

    txn: str
    base: int
    segments: tuple[MarkerSegment, ...]

    @property
    def records(self) -> int:
        return sum(s.rows for s in self.segments)

    @property
    def end(self) -> int:
        return self.base + self.records


@dataclass(frozen=True)
class ReplaceOp:
    """Compaction of ``[base, end)``: ``replaces`` (paths) become ``segment``; ``runs`` are (first offset, commit
    ts, commit seq) of every transaction merged in."""

    base: int
    end: int
    replaces: tuple[str, ...]
    segment: MarkerSegment
    runs: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class RetainOp:
    """The log start offset moves to ``start``."""

    start: int


Op = CommitOp | ReplaceOp | RetainOp


@dataclass(frozen=True)
class PartitionRecord:
    """Record ``idx`` of partition ``topic/partition``, derived from log entry ``seq`` (time ``ts``)."""

    topic: str
    partition: int
    idx: int
    seq: int
    ts: int
    ops: tuple[Op, ...]

    def to_bytes(self) -> bytes:
        ops: list[dict[str, Any]] = []
        for op in self.ops:
            if isinstance(op, CommitOp):
                ops.append({"op": "commit", "txn": op.txn, "base": op.base,
                            "segments": [s.to_json() for s in op.segments]})
            elif isinstance(op, ReplaceOp):
                ops.append({"op": "replace", "base": op.base, "end": op.end, "replaces": list(op.replaces),
                            "segment": op.segment.to_json(), "runs": [list(r) for r in op.runs]})
            else:
                ops.append({"op": "retain", "start": op.start})
        return encode_json({"v": _V, "topic": self.topic, "partition": self.partition, "idx": self.idx,
                            "seq": self.seq, "ts": self.ts, "ops": ops})

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> PartitionRecord:
        """Raises: CorruptLogError naming ``where`` if the bytes are not a valid record (UnsupportedFormatError for
        another store format)."""
        d = decode_json(data, where, "partition record")
        check_format(d, where)
        try:
            ops: list[Op] = []
            for o in d["ops"]:
                kind = o["op"]
                if kind == "commit":
                    ops.append(CommitOp(str(o["txn"]), int(o["base"]),
                                        tuple(MarkerSegment.from_json(s) for s in o["segments"])))
                elif kind == "replace":
                    ops.append(ReplaceOp(int(o["base"]), int(o["end"]), tuple(str(p) for p in o["replaces"]),
                                         MarkerSegment.from_json(o["segment"]),
                                         tuple((int(a), int(b), int(c)) for a, b, c in o["runs"])))
                elif kind == "retain":
                    ops.append(RetainOp(int(o["start"])))
                else:
                    raise ValueError(f"unknown op {kind!r}")
            return cls(str(d["topic"]), int(d["partition"]), int(d["idx"]), int(d["seq"]), int(d["ts"]), tuple(ops))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptLogError(f"partition record {where} is corrupt: {exc!r}") from exc


def _ops(entry: LogEntry, only: tuple[str, int] | None = None) -> dict[tuple[str, int], list[Op]]:
    """The ops ``entry`` defines, by (topic, partition), in item order; only those of ``only`` when given."""
    ops: dict[tuple[str, int], list[Op]] = {}

    def wanted(tp: tuple[str, int]) -> bool:
        return only is None or tp == only

    for item in entry.items:
        if isinstance(item, CommitItem):
            for part in item.parts:
                if part.rows and wanted(tp := (part.topic, part.partition)):
                    ops.setdefault(tp, []).append(CommitOp(item.txn, part.base, part.segments))
        elif isinstance(item, ReplaceItem) and wanted(tp := (item.topic, item.partition)):
            ops.setdefault(tp, []).append(ReplaceOp(item.base, item.end, item.replaces, item.segment, item.runs))
        elif isinstance(item, RetainItem) and wanted(tp := (item.topic, item.partition)):
            ops.setdefault(tp, []).append(RetainOp(item.start))
    return ops


def record_of(entry: LogEntry, topic: str, partition: int) -> PartitionRecord | None:
    """The partition record ``entry`` defines for ``topic``/``partition`` (None when it touches none there): what
    :func:`records_of` gives for it, without building the others (a reader follows its own partitions, not every
    partition an entry touches).

    Raises:
        CorruptLogError: the entry lists the partition as touched but has no op there.
    """
    idx = next((i for t, p, i in entry.touched if p == partition and t == topic), None)
    if idx is None:
        return None
    got = _ops(entry, (topic, partition)).get((topic, partition))
    if not got:
        raise CorruptLogError(f"transaction log entry {entry.seq} lists {topic}/{partition} as touched but has no op "
                              "there")
    return PartitionRecord(topic, partition, idx, entry.seq, entry.ts, tuple(got))


def records_at(entry: LogEntry, parts: Iterable[tuple[str, int]]) -> list[PartitionRecord]:
    """The records ``entry`` defines for ``parts`` (those it touches), in (topic, partition) order.

    Raises:
        CorruptLogError: the entry lists one of ``parts`` as touched but has no op there.
    """
    return [r for t, p in sorted(parts) if (r := record_of(entry, t, p)) is not None]


def records_of(entry: LogEntry) -> dict[tuple[str, int], PartitionRecord]:
    """The partition records ``entry`` defines, by (topic, partition)."""
    ops = _ops(entry)
    out: dict[tuple[str, int], PartitionRecord] = {}
    for topic, p, idx in entry.touched:
        got = ops.get((topic, p))
        if not got:
            raise CorruptLogError(f"transaction log entry {entry.seq} lists {topic}/{p} as touched but has no op there")
        out[(topic, p)] = PartitionRecord(topic, p, idx, entry.seq, entry.ts, tuple(got))
    return out
