"""Requests to the transaction log: what a process wants decided, and their intents' bytes.

A request is what a process wants decided: commit or abort a transaction, register a producer, expire one,
compact or retain a partition (:mod:`coordinator.decisions` decides them). Commit, abort and init requests can wait
as *intents* (``_txn/intents/<id>.json``): :func:`request_bytes` writes one, :func:`request_from_bytes` reads it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from coordinator.errors import CorruptLogError
from coordinator.records import FORMAT_VERSION as _V
from coordinator.records import (
    Offsets,
    ReplaceItem,
    RetainItem,
    SegmentRef,
    check_format,
    decode_json,
    encode_json,
)


@dataclass(frozen=True)
class Request:
    """Something to decide; ``id`` is unique per request and names its intent file."""

    id: str

    kind = ""

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class TxnRequest(Request):
    """Commit (``abort=False``) or abort one transaction: a producer's number ``n`` at ``epoch`` (``tid`` set), an
    application attempt ``(app, version, token)`` (``app`` set), or both (a Spark batch job with ``txnAppId``).
    ``started_ms`` (a producer commit; -1: not given) is the transaction's start on the store's clock: the commit is
    decided as an abort when the deciding entry's time is more than the producer's timeout after it.

    ``after`` (a producer's pipelined request; -1: none) is the number of the producer's transaction this one follows
    (``n - 1``), sent before that one was decided. The log leaves the request undecided while ``after`` is
    undecided (:func:`waits`), and aborts it unless ``after`` committed: a pipelined commit never outlives the
    transaction before it (a read-process-write job whose transaction ``n`` aborted would otherwise commit ``n + 1``
    and lose ``n``'s input). Its intent carries a kind of its own (``commit-after``, ``abort-after``) that a reader
    not knowing the rule refuses to decide."""

    txn: str = ""
    abort: bool = False
    tid: str | None = None
    pid: int = -1
    epoch: int = -1
    n: int = -1
    app: str | None = None
    version: int = -1
    token: str | None = None
    segments: tuple[SegmentRef, ...] = ()
    offsets: Offsets = field(default_factory=dict)
    end_producer: bool = False
    fence: bool = False
    reason: str = ""
    started_ms: int = -1
    after: int = -1

    @property
    def kind(self) -> str:  # type: ignore[override]
        return "abort" if self.abort else "commit"

    def to_json(self) -> dict[str, Any]:
        kind = self.kind if self.after < 0 else f"{self.kind}{_AFTER}"
        return {"v": _V, "kind": kind, "id": self.id, "txn": self.txn, "tid": self.tid, "pid": self.pid,
                "epoch": self.epoch, "n": self.n, "app": self.app, "version": self.version, "token": self.token,
                "segments": [s.to_json() for s in self.segments], "offsets": self.offsets,
                "end_producer": self.end_producer, "fence": self.fence, "reason": self.reason,
                "started_ms": self.started_ms, "after": self.after}


#: the suffix of the intent kind of a pipelined request (:attr:`TxnRequest.after`)
_AFTER = "-after"


@dataclass(frozen=True)
class InitRequest(Request):
    """Give ``tid`` a new epoch (a new producer id if it has none), provided its current ``(pid, epoch)`` is still
    ``prev`` (None: it has no producer). Deciding the request moves ``tid`` off ``prev`` for good (pids are never
    reused, epochs only grow), so a request decided once is refused as ``stale`` if it is decided again, by a
    process that did not read the entry that decided it (a leftover intent read by a process that opened the log
    from a later checkpoint). Only a producer removed since (expired, or an ephemeral one ended) takes ``tid``
    back to no producer; such a leftover request then registers an unused producer, fencing nobody."""

    tid: str = ""
    prev: tuple[int, int] | None = None
    timeout_ms: int = 60_000
    ephemeral: bool = False
    kind = "init"

    def to_json(self) -> dict[str, Any]:
        return {"v": _V, "kind": "init", "id": self.id, "tid": self.tid,
                "prev": None if self.prev is None else list(self.prev), "timeout_ms": self.timeout_ms,
                "ephemeral": self.ephemeral}


@dataclass(frozen=True)
class ExpireRequest(Request):
    """Forget ``tid`` if it is still producer ``pid`` at ``epoch`` with last activity ``last_ts``."""

    tid: str = ""
    pid: int = -1
    epoch: int = -1
    last_ts: int = 0
    reason: str = ""
    kind = "expire"


@dataclass(frozen=True)
class LayoutRequest(Request):
    """Compaction (``item`` a ReplaceItem planned against its layout) or retention (a RetainItem)."""

    item: ReplaceItem | RetainItem | None = None
    kind = "layout"


def commit_request(**kw: Any) -> TxnRequest:
    return TxnRequest(id="c-" + kw["txn"], **kw)


def abort_request(**kw: Any) -> TxnRequest:
    return TxnRequest(id="x-" + kw["txn"], abort=True, **kw)


def init_request(tid: str, prev: tuple[int, int] | None, timeout_ms: int, ephemeral: bool) -> InitRequest:
    return InitRequest(id=f"i-{uuid.uuid4().hex}", tid=tid, prev=prev, timeout_ms=timeout_ms, ephemeral=ephemeral)


def request_from_bytes(data: bytes, where: str) -> Request:
    """Decode an intent.

    Raises:
        CorruptLogError: naming ``where``.
    """
    d = decode_json(data, where, "intent")
    check_format(d, where)
    try:
        kind = d["kind"]
        if kind in ("commit", "abort", "commit" + _AFTER, "abort" + _AFTER):
            after = int(d["after"]) if kind.endswith(_AFTER) else -1
            return TxnRequest(
                id=str(d["id"]), txn=str(d["txn"]), abort=kind.startswith("abort"), tid=d.get("tid"), pid=int(d["pid"]),
                epoch=int(d["epoch"]), n=int(d["n"]), app=d.get("app"), version=int(d["version"]),
                token=d.get("token"), segments=tuple(SegmentRef.from_json(s) for s in d["segments"]),
                offsets={g: {t: {p: int(o) for p, o in ps.items()} for t, ps in ts.items()}
                         for g, ts in d["offsets"].items()},
                end_producer=bool(d["end_producer"]), fence=bool(d["fence"]), reason=str(d["reason"]),
                started_ms=int(d.get("started_ms", -1)), after=after)
        if kind == "init":
            prev = d.get("prev")
            return InitRequest(id=str(d["id"]), tid=str(d["tid"]),
                               prev=None if prev is None else (int(prev[0]), int(prev[1])),
                               timeout_ms=int(d["timeout_ms"]), ephemeral=bool(d["ephemeral"]))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CorruptLogError(f"intent {where} is corrupt: {exc!r}") from exc
    raise CorruptLogError(f"intent {where} has unknown kind {d.get('kind')!r}")


def request_bytes(req: Request) -> bytes:
    return encode_json(req.to_json())
