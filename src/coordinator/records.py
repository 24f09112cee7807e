"""Durable records of the transaction log (store format 2): segment references, the items a log entry decides, and
the entry itself (the transaction states they walk are :mod:`coordinator.txnstates`).

Everything is JSON with enums persisted by value. Decoding is strict: bytes that are not a valid record raise
:class:`CorruptLogError` naming where they came from; a record written by another store format raises
:class:`UnsupportedFormatError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from coordinator.errors import CorruptLogError, UnsupportedFormatError

FORMAT_VERSION = 2


def producer_txn_id(pid: int, epoch: int, n: int) -> str:
    """The id of transaction number ``n`` of producer ``pid`` at ``epoch``: unique in the store, names its origin."""
    return f"p.{pid}.{epoch}.{n}"


def app_txn_id(app: str, version: int, token: str) -> str:
    """The id of one attempt (``token``) to commit ``version`` of application ``app``."""
    return f"a.{app}.{version}.{token}"


@dataclass(frozen=True)
class TxnRef:
    """A parsed transaction id: a producer's (pid, epoch, n) or an application's (app, version, token)."""

    kind: str
    pid: int = -1
    epoch: int = -1
    n: int = -1
    app: str = ""
    version: int = -1
    token: str = ""


def parse_txn_id(txn: str) -> TxnRef | None:
    """Parse a transaction id (also the prefix of a staged file name); None if it is not one."""
    try:
        if txn.startswith("p."):
            _, pid, epoch, n = txn.split(".", 3)
            return TxnRef("p", pid=int(pid), epoch=int(epoch), n=int(n))
        if txn.startswith("a."):
            head, version, token = txn[2:].rsplit(".", 2)
            if not head or not token:
                return None
            return TxnRef("a", app=head, version=int(version), token=token)
    except ValueError:
        return None
    return None


@dataclass(frozen=True)
class SegmentRef:
    """A staged segment file: where it is, what it holds and who staged it.

    ``seq`` is the producer's per-partition sequence number (None for writers that do not number their segments,
    such as Spark tasks, whose commit messages already name each segment once). ``ptime`` is the producer time
    (microseconds since the epoch) of every row of a file that stores no producer-time column (None: the file
    holds the column, or has no producer times).
    """

    topic: str
    partition: int
    path: str
    rows: int
    size: int
    crc32: int
    seq: int | None = None
    ptime: int | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"topic": self.topic, "partition": self.partition, "path": self.path, "rows": self.rows,
                             "size": self.size, "crc32": self.crc32}
        if self.seq is not None:
            d["seq"] = self.seq
        if self.ptime is not None:
            d["ptime"] = self.ptime
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SegmentRef:
        return cls(str(d["topic"]), int(d["partition"]), str(d["path"]), int(d["rows"]), int(d["size"]),
                   int(d["crc32"]), None if d.get("seq") is None else int(d["seq"]), _ptime(d))

    def published(self) -> MarkerSegment:
        """The segment as a partition record publishes it."""
        return MarkerSegment(self.path, self.rows, self.size, self.crc32, self.ptime)


def _ptime(d: dict[str, Any]) -> int | None:
    return None if d.get("ptime") is None else int(d["ptime"])


@dataclass(frozen=True)
class MarkerSegment:
    """A segment as a partition record publishes it: path, row count, size, checksum, and the producer time of
    every row when the file stores none (:attr:`SegmentRef.ptime`)."""

    path: str
    rows: int
    size: int
    crc32: int
    ptime: int | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, "rows": self.rows, "size": self.size, "crc32": self.crc32}
        if self.ptime is not None:
            d["ptime"] = self.ptime
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MarkerSegment:
        return cls(path=str(d["path"]), rows=int(d["rows"]), size=int(d["size"]), crc32=int(d["crc32"]),
                   ptime=_ptime(d))


@dataclass(frozen=True)
class PartAssign:
    """The records one commit publishes in one partition, at offsets ``base .. base + rows - 1``."""

    topic: str
    partition: int
    base: int
    segments: tuple[MarkerSegment, ...]

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.segments)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "base": self.base,
                "segments": [s.to_json() for s in self.segments]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartAssign:
        return cls(str(d["topic"]), int(d["partition"]), int(d["base"]),
                   tuple(MarkerSegment.from_json(s) for s in d["segments"]))


Offsets = dict[str, dict[str, dict[str, int]]]
"""group -> topic -> partition (as a string) -> next offset to consume."""


def _offsets(d: Any) -> Offsets:
    return {str(g): {str(t): {str(p): int(o) for p, o in ps.items()} for t, ps in ts.items()} for g, ts in d.items()}


@dataclass(frozen=True)
class Item:
    """One decision of a log entry. Subclasses name their ``op``; ``request`` is the id of the request it answers
    (an intent name), so the requester recognises its answer in an entry."""

    request: str

    op = ""

    def body(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "request": self.request, **self.body()}


@dataclass(frozen=True)
class InitItem(Item):
    """``tid`` gets producer id ``pid`` at ``epoch`` (fencing every older epoch); ``ephemeral`` producers are
    removed by their own commit or abort."""

    tid: str = ""
    pid: int = -1
    epoch: int = -1
    timeout_ms: int = 60_000
    ephemeral: bool = False
    op = "init"

    def body(self) -> dict[str, Any]:
        return {"tid": self.tid, "pid": self.pid, "epoch": self.epoch, "timeout_ms": self.timeout_ms,
                "ephemeral": self.ephemeral}


@dataclass(frozen=True)
class CommitItem(Item):
    """Transaction ``txn`` is committed: its segments get the offsets in ``parts``, its group offsets are recorded,
    and, for an application commit, the app's version moves to ``version``.

    A producer commit names ``tid``/``pid``/``epoch``/``n``; an application commit names ``app``/``version``/
    ``token``; a Spark batch job with ``txnAppId`` names both. ``end_producer`` removes an ephemeral producer.
    ``seqs`` are the producer sequence numbers the commit moves to, per ``topic|partition``.
    """

    txn: str = ""
    tid: str | None = None
    pid: int = -1
    epoch: int = -1
    n: int = -1
    app: str | None = None
    version: int = -1
    token: str | None = None
    parts: tuple[PartAssign, ...] = ()
    offsets: Offsets = field(default_factory=dict)
    seqs: dict[str, int] = field(default_factory=dict)
    end_producer: bool = False
    op = "commit"

    @property
    def records(self) -> int:
        return sum(p.rows for p in self.parts)

    def body(self) -> dict[str, Any]:
        d: dict[str, Any] = {"txn": self.txn, "parts": [p.to_json() for p in self.parts]}
        if self.tid is not None:
            d.update(tid=self.tid, pid=self.pid, epoch=self.epoch, n=self.n)
        if self.app is not None:
            d.update(app=self.app, version=self.version, token=self.token)
        if self.offsets:
            d["offsets"] = self.offsets
        if self.seqs:
            d["seqs"] = self.seqs
        if self.end_producer:
            d["end_producer"] = True
        return d


@dataclass(frozen=True)
class AbortItem(Item):
    """Transaction ``txn`` is aborted (a producer's number ``n``, or an application attempt ``token`` that can then
    never commit). ``fence`` also bumps the producer's epoch (the timeout sweep, an operator)."""

    txn: str = ""
    tid: str | None = None
    pid: int = -1
    epoch: int = -1
    n: int = -1
    app: str | None = None
    version: int = -1
    token: str | None = None
    reason: str = ""
    fence: bool = False
    end_producer: bool = False
    #: the producer transaction carried an app version that was already committed: skipped, not failed
    skipped: bool = False
    #: what the transaction had staged when it was aborted ("topic/partition" -> rows) and the groups whose offsets
    #: it carried, as its requester told (for operators: ``txnlog txns``)
    staged: dict[str, int] = field(default_factory=dict)
    groups: tuple[str, ...] = ()
    op = "abort"

    def body(self) -> dict[str, Any]:
        d: dict[str, Any] = {"txn": self.txn, "reason": self.reason}
        if self.skipped:
            d["skipped"] = True
        if self.staged:
            d["staged"] = self.staged
        if self.groups:
            d["groups"] = list(self.groups)
        if self.tid is not None:
            d.update(tid=self.tid, pid=self.pid, epoch=self.epoch, n=self.n)
        if self.app is not None:
            d.update(app=self.app, version=self.version, token=self.token)
        if self.fence:
            d["fence"] = True
        if self.end_producer:
            d["end_producer"] = True
        return d


@dataclass(frozen=True)
class ExpireItem(Item):
    """Transactional id ``tid`` (producer ``pid``) is forgotten; its producer is fenced for good."""

    tid: str = ""
    pid: int = -1
    reason: str = ""
    op = "expire"

    def body(self) -> dict[str, Any]:
        return {"tid": self.tid, "pid": self.pid, "reason": self.reason}


@dataclass(frozen=True)
class ReplaceItem(Item):
    """Compaction: the live segments ``replaces`` holding offsets ``[base, end)`` of a partition are replaced by
    ``segment``; ``runs`` keep each merged transaction's (first offset, commit ts, commit seq). Valid only against
    the partition's layout version ``layout``."""

    topic: str = ""
    partition: int = -1
    layout: int = 0
    base: int = 0
    end: int = 0
    replaces: tuple[str, ...] = ()
    segment: MarkerSegment = MarkerSegment("", 0, 0, 0)
    runs: tuple[tuple[int, int, int], ...] = ()
    #: when the compactor wrote ``segment`` (its clock): a replace published too late is refused, so GC may delete
    #: an unpublished merged file once it is older than its grace period
    staged_at: int = 0
    op = "replace"

    def body(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "layout": self.layout, "base": self.base,
                "end": self.end, "replaces": list(self.replaces), "segment": self.segment.to_json(),
                "runs": [list(r) for r in self.runs], "staged_at": self.staged_at}


@dataclass(frozen=True)
class RetainItem(Item):
    """Retention: the partition's log start offset moves to ``start``."""

    topic: str = ""
    partition: int = -1
    start: int = 0
    op = "retain"

    def body(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "start": self.start}


@dataclass(frozen=True)
class RejectItem(Item):
    """The request ``request`` (transaction ``txn``) was refused for good; ``code`` classifies why."""

    txn: str = ""
    code: str = ""
    reason: str = ""
    op = "reject"

    def body(self) -> dict[str, Any]:
        return {"txn": self.txn, "code": self.code, "reason": self.reason}


def item_from_json(d: dict[str, Any]) -> Item:
    """Decode one item of an entry (:meth:`Item.to_json`).

    Raises:
        KeyError, TypeError, ValueError: ``d`` is not an item.
    """
    op, req = d["op"], str(d["request"])
    if op == "commit":
        return CommitItem(req, txn=str(d["txn"]), tid=d.get("tid"), pid=int(d.get("pid", -1)),
                          epoch=int(d.get("epoch", -1)), n=int(d.get("n", -1)), app=d.get("app"),
                          version=int(d.get("version", -1)), token=d.get("token"),
                          parts=tuple(PartAssign.from_json(p) for p in d["parts"]),
                          offsets=_offsets(d.get("offsets", {})),
                          seqs={str(k): int(v) for k, v in d.get("seqs", {}).items()},
                          end_producer=bool(d.get("end_producer", False)))
    if op == "abort":
        return AbortItem(req, txn=str(d["txn"]), tid=d.get("tid"), pid=int(d.get("pid", -1)),
                         epoch=int(d.get("epoch", -1)), n=int(d.get("n", -1)), app=d.get("app"),
                         version=int(d.get("version", -1)), token=d.get("token"), reason=str(d.get("reason", "")),
                         fence=bool(d.get("fence", False)), end_producer=bool(d.get("end_producer", False)),
                         skipped=bool(d.get("skipped", False)),
                         staged={str(k): int(v) for k, v in d.get("staged", {}).items()},
                         groups=tuple(str(g) for g in d.get("groups", ())))
    if op == "init":
        return InitItem(req, tid=str(d["tid"]), pid=int(d["pid"]), epoch=int(d["epoch"]),
                        timeout_ms=int(d["timeout_ms"]), ephemeral=bool(d.get("ephemeral", False)))
    if op == "expire":
        return ExpireItem(req, tid=str(d["tid"]), pid=int(d["pid"]), reason=str(d.get("reason", "")))
    if op == "replace":
        return ReplaceItem(req, topic=str(d["topic"]), partition=int(d["partition"]), layout=int(d["layout"]),
                           base=int(d["base"]), end=int(d["end"]), replaces=tuple(str(p) for p in d["replaces"]),
                           segment=MarkerSegment.from_json(d["segment"]),
                           runs=tuple((int(a), int(b), int(c)) for a, b, c in d["runs"]),
                           staged_at=int(d.get("staged_at", 0)))
    if op == "retain":
        return RetainItem(req, topic=str(d["topic"]), partition=int(d["partition"]), start=int(d["start"]))
    if op == "reject":
        return RejectItem(req, txn=str(d.get("txn", "")), code=str(d["code"]), reason=str(d.get("reason", "")))
    raise ValueError(f"unknown item op {op!r}")


def item_partitions(item: Item) -> list[tuple[str, int]]:
    """The (topic, partition) pairs whose partition log an item adds a record to, in order."""
    if isinstance(item, CommitItem):
        return [(p.topic, p.partition) for p in item.parts if p.rows]
    if isinstance(item, ReplaceItem | RetainItem):
        return [(item.topic, item.partition)]
    return []


@dataclass(frozen=True)
class LogEntry:
    """Transaction log entry ``seq``: the items it decides, in order, and the partition record index each touched
    partition's record gets (``touched``: (topic, partition, record idx), in order of first touch).

    ``ts`` is the entry's time (ms, never below its predecessor's): every commit in it has this commit time.
    ``writer`` is a token unique to the attempt that wrote it, so a writer tells its own bytes from another's.
    ``prev`` is the writer token of entry ``seq - 1`` as this entry's writer knew it ("" when unknown): the chain
    that proves an entry read after a pause is the log's (docs/design.md, "What timing can and cannot do").
    """

    seq: int
    ts: int
    writer: str
    items: tuple[Item, ...]
    touched: tuple[tuple[str, int, int], ...] = ()
    prev: str = ""

    def to_bytes(self) -> bytes:
        d = {"v": FORMAT_VERSION, "seq": self.seq, "ts": self.ts, "writer": self.writer, "prev": self.prev,
             "items": [i.to_json() for i in self.items], "touched": [list(t) for t in self.touched]}
        return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> LogEntry:
        """Raises: CorruptLogError naming ``where`` if the bytes are not a valid entry; UnsupportedFormatError if
        the entry was written by another store format."""
        d = decode_json(data, where, "transaction log entry")
        check_format(d, where)
        try:
            return cls(seq=int(d["seq"]), ts=int(d["ts"]), writer=str(d["writer"]),
                       items=tuple(item_from_json(i) for i in d["items"]),
                       touched=tuple((str(t), int(p), int(i)) for t, p, i in d.get("touched", ())),
                       prev=str(d.get("prev", "")))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptLogError(f"transaction log entry {where} is corrupt: {exc!r}") from exc


def check_format(d: dict[str, Any], where: str) -> None:
    """Raises: UnsupportedFormatError when ``d`` was written by another store format; CorruptLogError when it carries
    no format at all (every txnlog record of every format does: such an object is damaged)."""
    if "v" not in d:
        raise CorruptLogError(f"{where} is damaged: it carries no txnlog store format")
    v = d.get("v")
    if v != FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"{where} was written by txnlog store format {v!r}; this txnlog reads format {FORMAT_VERSION} only "
            "(see docs/design.md): use a new store root, or the txnlog version that wrote it"
        )


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
