"""Durable records: transaction log entries, commit markers, segment references. All JSON, enums by value.

Decoding is strict: a file that is not valid JSON or lacks a field raises :class:`CorruptLogError` naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from coordinator.errors import CorruptLogError

FORMAT_VERSION = 1


class TxnState(StrEnum):
    """Kafka's transaction states, persisted by value."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"


_READY = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})

#: The states a transactional id may be in before each transition (Kafka's ``TransactionState.validPreviousStates``).
#: ``PrepareCommit`` may also follow a ready state: a transaction whose writers staged data without announcing it
#: (Spark tasks) begins implicitly at its commit point. ``PrepareAbort`` from a ready state is the epoch fence that
#: ``init_transactions`` and the timeout sweep write.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: _READY | {TxnState.DEAD},
    TxnState.ONGOING: _READY | {TxnState.ONGOING},
    TxnState.PREPARE_COMMIT: _READY | {TxnState.ONGOING},
    TxnState.PREPARE_ABORT: _READY | {TxnState.ONGOING},
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: _READY,
}


def is_ready(state: TxnState) -> bool:
    """Whether a producer in ``state`` may begin a new transaction."""
    return state in _READY


@dataclass(frozen=True)
class SegmentRef:
    """A staged segment file: where it is, what it holds and who staged it.

    ``seq`` is the producer's per-partition sequence number (None for writers that do not number their segments,
    such as Spark tasks, whose commit messages already name each segment once).
    """

    topic: str
    partition: int
    path: str
    rows: int
    size: int
    crc32: int
    seq: int | None = None
    min_ts: int | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "topic": self.topic,
            "partition": self.partition,
            "path": self.path,
            "rows": self.rows,
            "size": self.size,
            "crc32": self.crc32,
        }
        if self.seq is not None:
            d["seq"] = self.seq
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SegmentRef:
        return cls(
            topic=str(d["topic"]),
            partition=int(d["partition"]),
            path=str(d["path"]),
            rows=int(d["rows"]),
            size=int(d["size"]),
            crc32=int(d["crc32"]),
            seq=None if d.get("seq") is None else int(d["seq"]),
        )


@dataclass(frozen=True)
class TxnEntry:
    """One transaction log entry: a transactional id moves to ``state``.

    ``segments``, ``offsets`` and ``app_key`` are set on ``PrepareCommit`` entries: the commit point names every
    segment the transaction publishes, the consumer-group offsets it commits, and the application idempotency key
    (the streaming sink stores ``query id/batchId`` there).
    """

    seq: int
    tid: str
    pid: int
    epoch: int
    state: TxnState
    ts: int
    writer: str
    txn: str | None = None
    segments: tuple[SegmentRef, ...] = ()
    offsets: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    app_key: str | None = None
    timeout_ms: int | None = None
    reason: str | None = None

    def to_bytes(self) -> bytes:
        d: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "seq": self.seq,
            "tid": self.tid,
            "pid": self.pid,
            "epoch": self.epoch,
            "state": self.state.value,
            "ts": self.ts,
            "writer": self.writer,
        }
        if self.txn is not None:
            d["txn"] = self.txn
        if self.segments:
            d["segments"] = [s.to_json() for s in self.segments]
        if self.offsets:
            d["offsets"] = self.offsets
        if self.app_key is not None:
            d["app_key"] = self.app_key
        if self.timeout_ms is not None:
            d["timeout_ms"] = self.timeout_ms
        if self.reason is not None:
            d["reason"] = self.reason
        return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> TxnEntry:
        """Raises: CorruptLogError naming ``where`` if the bytes are not a valid entry."""
        try:
            d = json.loads(data)
            return cls(
                seq=int(d["seq"]),
                tid=str(d["tid"]),
                pid=int(d["pid"]),
                epoch=int(d["epoch"]),
                state=TxnState(d["state"]),
                ts=int(d["ts"]),
                writer=str(d["writer"]),
                txn=d.get("txn"),
                segments=tuple(SegmentRef.from_json(s) for s in d.get("segments", ())),
                offsets={g: {t: {p: int(o) for p, o in ps.items()} for t, ps in ts.items()}
                         for g, ts in d.get("offsets", {}).items()},
                app_key=d.get("app_key"),
                timeout_ms=None if d.get("timeout_ms") is None else int(d["timeout_ms"]),
                reason=d.get("reason"),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptLogError(f"transaction log entry {where} is corrupt: {exc}") from exc

    def partitions(self) -> list[tuple[str, int]]:
        """The (topic, partition) pairs this entry's segments touch, sorted."""
        return sorted({(s.topic, s.partition) for s in self.segments})


@dataclass(frozen=True)
class MarkerSegment:
    """A segment as a marker publishes it: path, row count, checksum."""

    path: str
    rows: int
    size: int
    crc32: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "rows": self.rows, "size": self.size, "crc32": self.crc32}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MarkerSegment:
        return cls(path=str(d["path"]), rows=int(d["rows"]), size=int(d["size"]), crc32=int(d["crc32"]))


@dataclass(frozen=True)
class Marker:
    """A COMMIT marker in one partition: transaction ``txn`` (committed at log entry ``commit_seq``) publishes
    ``segments`` at offsets ``base_offset`` .. ``base_offset + records - 1``.

    Markers are written in commit order and their bytes are a pure function of the transaction and the marker
    before them, so two processes completing the same transaction write identical bytes.
    """

    idx: int
    txn: str
    tid: str
    pid: int
    epoch: int
    commit_seq: int
    base_offset: int
    records: int
    ts: int
    segments: tuple[MarkerSegment, ...]

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.records

    def to_bytes(self) -> bytes:
        d = {
            "v": FORMAT_VERSION,
            "type": "COMMIT",
            "idx": self.idx,
            "txn": self.txn,
            "tid": self.tid,
            "pid": self.pid,
            "epoch": self.epoch,
            "commit_seq": self.commit_seq,
            "base_offset": self.base_offset,
            "records": self.records,
            "ts": self.ts,
            "segments": [s.to_json() for s in self.segments],
        }
        return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = json.loads(self.to_bytes())
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Marker:
        return cls(
            idx=int(d["idx"]),
            txn=str(d["txn"]),
            tid=str(d["tid"]),
            pid=int(d["pid"]),
            epoch=int(d["epoch"]),
            commit_seq=int(d["commit_seq"]),
            base_offset=int(d["base_offset"]),
            records=int(d["records"]),
            ts=int(d["ts"]),
            segments=tuple(MarkerSegment.from_json(s) for s in d["segments"]),
        )

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Marker:
        """Raises: CorruptLogError naming ``where`` if the bytes are not a valid marker."""
        try:
            return cls.from_json(json.loads(data))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptLogError(f"commit marker {where} is corrupt: {exc}") from exc


def decode_json(data: bytes, where: str, what: str) -> dict[str, Any]:
    """Parse a JSON object.

    Raises:
        CorruptLogError: naming ``what`` and ``where`` when the bytes are not a JSON object.
    """
    try:
        d = json.loads(data)
    except ValueError as exc:
        raise CorruptLogError(f"{what} {where} is corrupt: {exc}") from exc
    if not isinstance(d, dict):
        raise CorruptLogError(f"{what} {where} is corrupt: not a JSON object")
    return d


def encode_json(d: dict[str, Any]) -> bytes:
    return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class ReplaceRecord:
    """A compaction record in a partition's marker log: the live segments holding offsets
    ``[base_offset, end_offset)`` are replaced by one merged segment, offsets unchanged.

    ``runs`` gives, for each transaction merged in, ``(first offset, commit ts, commit_seq)`` so readers keep each
    record's commit time and snapshots can still cut between transactions.
    """

    idx: int
    base_offset: int
    end_offset: int
    replaces: tuple[str, ...]
    segment: MarkerSegment
    runs: tuple[tuple[int, int, int], ...]
    ts: int

    def to_bytes(self) -> bytes:
        return encode_json(
            {
                "v": FORMAT_VERSION,
                "type": "REPLACE",
                "idx": self.idx,
                "base_offset": self.base_offset,
                "end_offset": self.end_offset,
                "replaces": list(self.replaces),
                "segment": self.segment.to_json(),
                "runs": [list(r) for r in self.runs],
                "ts": self.ts,
            }
        )


@dataclass(frozen=True)
class RetainRecord:
    """A retention record in a partition's marker log: the log start offset moves to ``start_offset``; records
    below it are no longer readable and their segments become garbage after the grace period."""

    idx: int
    start_offset: int
    ts: int

    def to_bytes(self) -> bytes:
        return encode_json(
            {"v": FORMAT_VERSION, "type": "RETAIN", "idx": self.idx, "start_offset": self.start_offset, "ts": self.ts}
        )


PartitionRecord = Marker | ReplaceRecord | RetainRecord


def decode_partition_record(data: bytes, where: str) -> PartitionRecord:
    """Decode any record of a partition's marker log.

    Raises:
        CorruptLogError: naming ``where`` when the bytes are not a valid record.
    """
    d = decode_json(data, where, "partition log record")
    kind = d.get("type", "COMMIT")
    try:
        if kind == "COMMIT":
            return Marker.from_json(d)
        if kind == "REPLACE":
            return ReplaceRecord(
                idx=int(d["idx"]),
                base_offset=int(d["base_offset"]),
                end_offset=int(d["end_offset"]),
                replaces=tuple(str(p) for p in d["replaces"]),
                segment=MarkerSegment.from_json(d["segment"]),
                runs=tuple((int(a), int(b), int(c)) for a, b, c in d["runs"]),
                ts=int(d["ts"]),
            )
        if kind == "RETAIN":
            return RetainRecord(idx=int(d["idx"]), start_offset=int(d["start_offset"]), ts=int(d["ts"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptLogError(f"partition log record {where} is corrupt: {exc}") from exc
    raise CorruptLogError(f"partition log record {where} has unknown type {kind!r}")
