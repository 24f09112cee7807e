"""How an entry's builder decides the requests to the transaction log (:mod:`coordinator.requests`).

Whoever builds the next log entry decides requests against the state at that entry, in order, through
:func:`decide`: a valid request becomes an item (a commit assigns its offsets there), an invalid one a
:class:`~coordinator.records.RejectItem` naming why, and a request that was already decided nothing at all.
Rejections are final (epochs, transaction numbers and app versions only grow), so a request decided again later
gets the same answer.

Commit, abort and init requests can wait as *intents* (``_txn/intents/<id>.json``) for another process's entry to
decide them (group commit). Commit and abort ids tell from the name alone whether the state has decided them
already (:func:`decided_by_name`), so a leftover one is never read again. An init request names the producer it
expects to replace (``prev``, or none), which its decision replaces for good: a leftover one is read and refused as
``stale`` (once: the writer that refuses it deletes it), never decided twice.

:func:`outcome` tells a requester what became of its request, from the items it saw or from the state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from coordinator.errors import CorruptLogError
from coordinator.records import (
    AbortItem,
    CommitItem,
    ExpireItem,
    InitItem,
    Item,
    MarkerSegment,
    PartAssign,
    RejectItem,
    RetainItem,
    SegmentRef,
    TxnRef,
    app_txn_id,
    parse_txn_id,
    producer_txn_id,
)
from coordinator.requests import (
    ExpireRequest,
    InitRequest,
    LayoutRequest,
    Request,
    TxnRequest,
)
from coordinator.state import CoordinatorState, PartitionMeta, ProducerMeta
from coordinator.txnstates import ABORT_PATH, COMMIT_PATH, TxnState, walk

INTENT_KINDS = ("commit", "abort", "init")
#: A compaction must be published within this long of writing its merged file (see ReplaceItem.staged_at).
MAX_PUBLISH_MS = 3600 * 1000
#: How the reason of an abort for a transaction open longer than its timeout begins (see :func:`timeout_reason`).
TIMEOUT_REASON = "aborted: open longer than its timeout"


def timeout_reason(timeout_ms: int) -> str:
    """The recorded reason of a transaction aborted for being open longer than ``timeout_ms``."""
    return f"{TIMEOUT_REASON} ({timeout_ms / 1000:g} s)"




def undecided_producer(ref: TxnRef, st: CoordinatorState) -> ProducerMeta | None:
    """The producer of transaction ``ref`` (a producer transaction id) if ``st`` has not decided that transaction
    yet (the producer is current at that epoch and the number is not decided); None if it is decided or fenced."""
    meta = st.producer_by_pid(ref.pid)
    if meta is None or meta.epoch != ref.epoch or ref.n <= meta.last_txn:
        return None
    return meta


def waits(req: Request, st: CoordinatorState) -> bool:
    """Whether ``req`` is a pipelined request (:attr:`TxnRequest.after`) of the current epoch whose earlier
    transaction ``st`` has not decided yet: it cannot be decided now, and is left for a later entry (never answered
    as decided)."""
    if not isinstance(req, TxnRequest) or req.tid is None or req.after < 0:
        return False
    meta = st.producers.get(req.tid)
    return meta is not None and meta.pid == req.pid and meta.epoch == req.epoch and meta.last_txn < req.after


def decided_by_name(name: str, st: CoordinatorState) -> bool:
    """Whether the state already decided the request named ``name`` (an intent id), from the name alone; False
    when the name does not say (init requests, unknown names)."""
    if name[:2] not in ("c-", "x-"):
        return False
    ref = parse_txn_id(name[2:])
    if ref is None:
        return False
    if ref.kind == "p":
        meta = st.producer_by_pid(ref.pid)
        if meta is None:
            return ref.pid < st.next_pid
        return meta.epoch > ref.epoch or (meta.epoch == ref.epoch and ref.n <= meta.last_txn)
    am = st.apps.get(ref.app)
    return am is not None and (ref.version <= am.version or (ref.version, ref.token) in am.reaped)


# -- deciding ---------------------------------------------------------------------------------------------------


def _reject(req: Request, txn: str, code: str, reason: str) -> RejectItem:
    return RejectItem(req.id, txn=txn, code=code, reason=reason)


def decide(req: Request, st: CoordinatorState, ts: int) -> Item | None:
    """Decide ``req`` against ``st`` (which the caller then advances with the item). None: already decided, or not
    decidable yet (callers ask :func:`waits` first)."""
    if isinstance(req, TxnRequest):
        return _decide_txn(req, st, ts)
    if isinstance(req, InitRequest):
        return _decide_init(req, st)
    if isinstance(req, ExpireRequest):
        meta = st.producers.get(req.tid)
        if meta is None or meta.pid != req.pid or meta.epoch != req.epoch or meta.last_ts != req.last_ts:
            return None
        return ExpireItem(req.id, tid=req.tid, pid=req.pid, reason=req.reason)
    if isinstance(req, LayoutRequest) and req.item is not None:
        return _decide_layout(req, st, ts)
    raise TypeError(f"cannot decide {type(req).__name__}")


def _decide_init(req: InitRequest, st: CoordinatorState) -> Item | None:
    meta = st.producers.get(req.tid)
    if meta is not None and meta.init_request == req.id:
        return None
    cur = None if meta is None else (meta.pid, meta.epoch)
    if req.prev != cur:
        return _reject(req, "", "stale", f"transactional id {req.tid!r} moved on from "
                                         f"{'no producer' if req.prev is None else req.prev} to {cur}")
    try:
        walk(TxnState.DEAD if meta is None else meta.state, (TxnState.EMPTY,))
    except ValueError as exc:
        return _reject(req, "", "state", f"transactional id {req.tid!r}: {exc}")
    pid = st.next_pid if meta is None else meta.pid
    epoch = 0 if meta is None else meta.epoch + 1
    return InitItem(req.id, tid=req.tid, pid=pid, epoch=epoch, timeout_ms=req.timeout_ms, ephemeral=req.ephemeral)


def _decide_txn(req: TxnRequest, st: CoordinatorState, ts: int) -> Item | None:
    kept = req.segments
    seqs: dict[str, int] = {}
    if req.tid is not None:
        meta = st.producers.get(req.tid)
        if meta is None or meta.pid != req.pid or meta.epoch != req.epoch:
            if req.fence:
                return None  # the producer moved on by itself
            now = "unknown (expired)" if meta is None else f"pid {meta.pid} epoch {meta.epoch}"
            return _reject(req, req.txn, "fenced",
                           f"producer for transactional id {req.tid!r} with pid {req.pid} epoch {req.epoch} is "
                           f"fenced: the current producer is {now}")
        if req.n <= meta.last_txn:
            return None
        if req.after >= 0 and req.after != req.n - 1:
            return _reject(req, req.txn, "state", f"transaction {req.txn} of {req.tid!r} says it follows "
                                                  f"transaction {req.after}, not {req.n - 1}")
        if req.after > meta.last_txn:
            return None  # waits for the transaction it follows
        if req.n != meta.last_txn + 1:
            return _reject(req, req.txn, "state", f"transaction {req.txn} of {req.tid!r} skips transaction "
                                                  f"{meta.last_txn + 1}")
        try:
            walk(meta.state, ABORT_PATH if req.abort else COMMIT_PATH)
        except ValueError as exc:
            return _reject(req, req.txn, "state", f"transactional id {req.tid!r}: {exc}")
        if req.after >= 0 and meta.last_outcome != "committed" and not req.abort:
            return _abort_item(replace(req, reason=f"transaction {req.after} of {req.tid!r}, which it follows, "
                                                   f"was not committed ({meta.last_outcome})"))
        if not req.abort and 0 <= req.started_ms < ts - meta.timeout_ms:
            # decided in this entry, on the store's clock: the commit and the timeout can never both win
            return _abort_item(replace(req, reason=timeout_reason(meta.timeout_ms)))
        if not req.abort:
            checked = _check_sequences(st, req)
            if isinstance(checked, str):
                return _reject(req, req.txn, "sequence", checked)
            kept, seqs = checked
    if req.app is not None:
        am = st.apps.get(req.app)
        if am is not None and req.version <= am.version:
            if req.tid is None:
                return None
            return AbortItem(req.id, txn=req.txn, tid=req.tid, pid=req.pid, epoch=req.epoch, n=req.n,
                             reason=f"version {req.version} of {req.app!r} was already committed",
                             end_producer=req.end_producer, skipped=True)
        if am is not None and (req.version, req.token) in am.reaped and req.tid is None:
            return None if req.abort else _reject(
                req, req.txn, "reaped", f"attempt {req.token} of {req.app!r} version {req.version} was "
                                        "aborted (reaped by GC after the grace period); replay the batch")
    if req.abort:
        return _abort_item(req)
    parts = _assign(st, kept)
    return CommitItem(req.id, txn=req.txn, tid=req.tid, pid=req.pid, epoch=req.epoch, n=req.n, app=req.app,
                      version=req.version, token=req.token, parts=parts, offsets=req.offsets, seqs=seqs,
                      end_producer=req.end_producer)


def _abort_item(req: TxnRequest) -> AbortItem:
    staged: dict[str, int] = {}
    for seg in req.segments:
        key = f"{seg.topic}/{seg.partition}"
        staged[key] = staged.get(key, 0) + seg.rows
    return AbortItem(req.id, txn=req.txn, tid=req.tid, pid=req.pid, epoch=req.epoch, n=req.n, app=req.app,
                     version=req.version, token=req.token, reason=req.reason, fence=req.fence,
                     end_producer=req.end_producer, staged=staged, groups=tuple(sorted(req.offsets)))


def _check_sequences(st: CoordinatorState, req: TxnRequest) -> tuple[tuple[SegmentRef, ...], dict[str, int]] | str:
    """Drop segments whose sequence number is already committed; a gap is Kafka's OutOfOrderSequence."""
    assert req.tid is not None
    kept: list[SegmentRef] = []
    nxt: dict[str, int] = {}
    for s in req.segments:
        if s.seq is None:
            kept.append(s)
            continue
        key = f"{s.topic}|{s.partition}"
        want = nxt.get(key, st.last_sequence(req.tid, s.topic, s.partition) + 1)
        if s.seq < want:
            continue
        if s.seq > want:
            return (f"producer {req.tid!r} skipped sequence numbers in {s.topic}/{s.partition}: expected {want}, "
                    f"got {s.seq}")
        nxt[key] = want + 1
        kept.append(s)
    return tuple(kept), {k: v - 1 for k, v in nxt.items()}


def _assign(st: CoordinatorState, segs: tuple[SegmentRef, ...]) -> tuple[PartAssign, ...]:
    """Offsets for each touched partition, from its end at ``st``; partitions in sorted order, segments in the
    order given."""
    by_part: dict[tuple[str, int], list[MarkerSegment]] = {}
    for s in segs:
        by_part.setdefault((s.topic, s.partition), []).append(s.published())
    return tuple(PartAssign(t, p, st.partition(t, p).end, tuple(ms)) for (t, p), ms in sorted(by_part.items()))


def _decide_layout(req: LayoutRequest, st: CoordinatorState, ts: int) -> Item | None:
    item = req.item
    assert item is not None
    pm: PartitionMeta = st.partition(item.topic, item.partition)
    if isinstance(item, RetainItem):
        if item.start <= pm.start or item.start > pm.end:
            return None
        return replace(item, request=req.id)
    if ts - item.staged_at > MAX_PUBLISH_MS:
        return _reject(req, "", "layout", f"compaction of {item.topic}/{item.partition} was published too late")
    if item.layout != pm.layout:
        return _reject(req, "", "layout", f"{item.topic}/{item.partition} changed since the compaction was planned")
    if item.base < pm.start or item.end > pm.end or item.base >= item.end:
        return _reject(req, "", "layout", f"compaction range [{item.base}, {item.end}) of {item.topic}/"
                                          f"{item.partition} is outside [{pm.start}, {pm.end})")
    return replace(item, request=req.id)


# -- outcomes ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What became of a request.

    ``status``: ``committed``, ``already_committed`` (an app version committed by another attempt, or a Spark
    batch job's version that was already committed), ``aborted``, ``rejected`` (``code`` says why), ``done``
    (init / expire / layout applied), ``noop`` (an expire or layout request the state no longer calls for), or
    ``unknown`` (decided, but the decision is no longer in view).
    ``item`` and ``seq`` are the deciding item and entry when this process saw them. ``secured``: the outcome
    came as an answer (:mod:`coordinator.answers`), written only once the records the item needs existed.
    """

    status: str
    item: Item | None = None
    seq: int = -1
    code: str = ""
    reason: str = ""
    secured: bool = False


def outcome_of_item(item: Item, seq: int) -> Outcome:
    if isinstance(item, CommitItem):
        return Outcome("committed", item, seq)
    if isinstance(item, AbortItem):
        if item.skipped:
            return Outcome("already_committed", item, seq, reason=item.reason)
        return Outcome("aborted", item, seq, reason=item.reason)
    if isinstance(item, RejectItem):
        return Outcome("rejected", item, seq, code=item.code, reason=item.reason)
    return Outcome("done", item, seq)


def fenced(req: Request, st: CoordinatorState) -> Outcome | None:
    """A producer's request made by an epoch that is no longer current is answered from what the state remembers
    of that epoch (:attr:`~coordinator.state.ProducerMeta.fenced`): a transaction number above the epoch's last
    decided one was never decided and never will be (``rejected``/``fenced``: ``ProducerFencedError``, G3); the last
    decided one gets its outcome. An epoch the state no longer remembers is answered ``unknown`` (the request may
    have been decided before the fence, in an entry out of view): "fenced" is said only when the log proves the
    transaction was not committed. Requests that fence on purpose (the timeout sweep, an operator) are not answered
    this way. An ephemeral producer removed by its own commit or abort is not fenced: its outcome is then unknown to
    a process that did not see the deciding entry. Callers look for the deciding item among the entries they read
    first."""
    if not isinstance(req, TxnRequest) or req.tid is None or req.fence:
        return None
    meta = st.producers.get(req.tid)
    if meta is not None and meta.pid == req.pid and meta.epoch == req.epoch:
        return None
    if meta is None and req.end_producer:
        return None
    if meta is not None and meta.pid == req.pid and meta.epoch < req.epoch:
        return None
    if meta is not None and meta.pid == req.pid:
        return _of_fenced_epoch(req, meta)
    now = "unknown (expired)" if meta is None else f"pid {meta.pid} epoch {meta.epoch}"
    return Outcome("rejected", code="fenced",
                   reason=f"producer for transactional id {req.tid!r} with pid {req.pid} epoch {req.epoch} is "
                          f"fenced: the current producer is {now}")


def _of_fenced_epoch(req: TxnRequest, meta: ProducerMeta) -> Outcome:
    """The outcome of ``req``, of an epoch older than ``meta``'s, from what ``meta`` remembers of that epoch."""
    known = meta.fenced_epoch(req.epoch)
    if known is None:
        return Outcome("unknown", reason=f"producer {req.tid!r} moved on from epoch {req.epoch} to {meta.epoch} "
                                         "too long ago for the log to tell whether transaction "
                                         f"{req.txn} was decided before")
    last, how = known
    if req.n == last and how == "fenced" and meta.epoch == req.epoch + 1 and meta.last_txn < 0 \
            and (meta.last_reason or "").startswith(TIMEOUT_REASON):
        # the fence was the timeout sweep's abort of this very transaction, and nothing happened since
        return Outcome("rejected", code="fenced",
                       reason=f"transaction {req.txn} of {req.tid!r} {meta.last_reason} (the timeout sweep), which "
                              f"fenced producer pid {req.pid} epoch {req.epoch}; create a new producer")
    if req.n > last or (req.n == last and how == "fenced"):
        return Outcome("rejected", code="fenced",
                       reason=f"producer for transactional id {req.tid!r} with pid {req.pid} epoch {req.epoch} is "
                              f"fenced: the current producer is pid {meta.pid} epoch {meta.epoch}; transaction "
                              f"{req.txn} was never committed")
    if req.n < last or how is None:
        return Outcome("unknown", reason=f"transaction {req.txn} was decided earlier")
    status = {"committed": "committed", "skipped": "already_committed"}.get(how, "aborted")
    return Outcome(status, reason=f"decided before epoch {req.epoch} was fenced")


def outcome(req: Request, st: CoordinatorState) -> Outcome | None:
    """The outcome of ``req`` as far as the state alone tells (None: not decided yet). Callers first look for the
    deciding item among the entries they read; this is the fallback when those are out of view."""
    if isinstance(req, InitRequest):
        meta = st.producers.get(req.tid)
        return Outcome("done") if meta is not None and meta.init_request == req.id else None
    if not isinstance(req, TxnRequest):
        return None
    if req.tid is not None:
        meta = st.producers.get(req.tid)
        if meta is None or meta.pid != req.pid:
            if req.pid < st.next_pid:
                if req.end_producer:
                    return Outcome("unknown", reason=f"producer {req.tid!r} pid {req.pid} is gone")
                return Outcome("rejected", code="fenced",
                               reason=f"producer for transactional id {req.tid!r} with pid {req.pid} epoch "
                                      f"{req.epoch} is fenced: the current producer is unknown (expired)")
            return None
        if meta.epoch != req.epoch:
            return _of_fenced_epoch(req, meta) if meta.epoch > req.epoch else None
        if req.n > meta.last_txn:
            return None
        if req.n < meta.last_txn or meta.last_outcome is None:
            return Outcome("unknown", reason=f"transaction {req.txn} was decided earlier")
        status = {"committed": "committed", "skipped": "already_committed"}.get(meta.last_outcome, "aborted")
        return Outcome(status, reason=meta.last_reason or "")
    if req.app is not None:
        am = st.apps.get(req.app)
        if am is None:
            return None
        if req.version <= am.version:
            return Outcome("committed" if am.token == req.token and am.version == req.version
                           else "already_committed")
        if (req.version, req.token) in am.reaped:
            return Outcome("aborted") if req.abort else Outcome("rejected", code="reaped", reason="reaped")
    return None


def txn_ids(req: TxnRequest) -> str:
    """The transaction id a request names, checked against its identity fields.

    Raises:
        CorruptLogError: the id does not match (a request built by hand wrongly).
    """
    want = producer_txn_id(req.pid, req.epoch, req.n) if req.tid is not None and req.app is None else None
    if req.app is not None and req.tid is None:
        want = app_txn_id(req.app, req.version, req.token or "")
    if want is not None and want != req.txn:
        raise CorruptLogError(f"request {req.id} names transaction {req.txn}, expected {want}")
    return req.txn
