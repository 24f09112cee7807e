"""Rebuilding one damaged transaction log entry from the copies other objects hold of it (``txnlog repair --log``;
see ``docs/design.md``, "Damaged log objects").

The state before the entry is exact (a checkpoint and the readable entries after it). From it and the copies:

* **partition records** of the entry (record ``next_idx`` of each partition in that state, when it names the
  entry): every commit with its segments and offsets, every compaction and retention, and the entry's time;
* **the transaction id** of each commit: its producer (``p.<pid>.<epoch>.<n>``: the transactional id from the state,
  or from whatever else names that pid) or application attempt (``a.<app>.<version>.<token>``); a Python producer's
  sequence numbers from its segment names (``<txn>~<seq>``);
* **intents** still in ``_txn/intents/``: a commit's whole request (group offsets included), re-decided against the
  state and used only when it decides the same offsets the records hold;
* **the entries after it**: the next one's ``prev`` is the entry's writer token (as is a covering checkpoint's
  token window); a commit or abort there made as an epoch the state does not know proves the entry registered that
  epoch (an init, rebuilt);

and what none of them holds is named, never guessed. The partition records the rebuilt entry defines are those it
was rebuilt from (checked).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from coordinator.decisions import decide, decided_by_name
from coordinator.errors import CorruptLogError
from coordinator.layout import open_path
from coordinator.logmissing import layout_only, records_of_entry, unrecorded_commit
from coordinator.logstaged import StagedCopies, sequences
from coordinator.partrecords import CommitOp, PartitionRecord, ReplaceOp, records_of
from coordinator.records import (
    AbortItem,
    CommitItem,
    ExpireItem,
    InitItem,
    Item,
    LogEntry,
    PartAssign,
    ReplaceItem,
    RetainItem,
    decode_json,
    encode_json,
    item_partitions,
    parse_txn_id,
)
from coordinator.requests import InitRequest, Request, TxnRequest
from coordinator.state import CoordinatorState
from coordinator.store import Store

_WRITER = re.compile(rb'"writer"\s*:\s*"([0-9a-f]{32})"')
_TID = re.compile(r'"tid"\s*:\s*"([A-Za-z0-9_][A-Za-z0-9._-]{0,260})"')
_TXN = re.compile(r'"txn"\s*:\s*"([pa]\.[^"]{1,400})"')
#: What no copy holds of any entry, named in every report of a rebuilt entry that nothing confirmed.
NEVER_COPIED = ("decisions no other copy holds cannot be listed: aborts, refusals, expiries, commits that published "
                "no record (consumer-group offsets committed outside a transaction) or whose records were never "
                "written (their writer failed right after the commit point), inits of producers that did nothing "
                "since; their requesters meet the rebuilt state at their next call (a producer whose init or abort "
                "was lost is refused, ProducerFencedError or InvalidTxnStateError, and initialises again; a "
                "producer no copy shows outliving the entry is expired, so no epoch the entry fenced is current "
                "again)")


@dataclass(frozen=True)
class Rebuilt:
    """Entry ``seq`` rebuilt from the copies: the entry (None when it cannot be: ``problem`` says why) and what the
    report names: ``recovered`` (each decision and the copy that holds it), ``assumed`` (values no copy holds,
    filled in) and ``lost`` (decisions or parts of them that no copy holds)."""

    seq: int
    entry: LogEntry | None
    recovered: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    problem: str = ""


@dataclass
class _Notes:
    """What a rebuild found, and the covering checkpoint it may consult."""

    known: CoordinatorState | None = None
    recovered: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


def rebuild_entry(store: Store, seq: int, before: CoordinatorState, *, later: Sequence[LogEntry], raw: bytes | None,
                  intents: Mapping[str, Request], partitions: Sequence[tuple[str, int]],
                  known: CoordinatorState | None = None) -> Rebuilt:
    """Rebuild damaged entry ``seq`` (see the module docstring). ``before`` is the state after entry ``seq - 1``,
    ``later`` the readable entries from ``seq + 1`` on (consecutive), ``raw`` the damaged bytes (None: missing),
    ``intents`` the decodable intents by request id, ``partitions`` every partition of every topic, ``known`` a
    checkpoint covering the entry, if one is readable (it holds the registration of a producer an init of the entry
    registered, when the producer has not moved on since). Read only.

    Raises:
        StoreError: the store failed.
    """
    notes = _Notes(known=known)
    got = records_of_entry(store, seq, before, later, partitions)
    if isinstance(got, str):
        return Rebuilt(seq, None, problem=got)
    found, lacking = got
    times = {r.ts for r in found.values()}
    if len(times) > 1:
        return Rebuilt(seq, None, problem=f"the partition records of entry {seq} disagree on its time: {times}")
    nxt = later[0] if later and later[0].seq == seq + 1 else None
    if times:
        ts = times.pop()
    else:
        ts = nxt.ts if nxt is not None else before.ts
        notes.assumed.append(f"time {ts} ms: no partition record holds it (the "
                             f"{'next entry' if nxt is not None else 'entry before'}'s)")
    order = _order(found)
    if isinstance(order, str):
        return Rebuilt(seq, None, problem=order)
    scratch = before.copy()
    items: list[Item] = []
    offsets_unknown: list[str] = []
    touched_later = {(t, p) for e in later for t, p, _idx in e.touched}
    staged = StagedCopies(store, [tp for tp in sorted(set(partitions) | set(before.partitions))
                                  if tp not in found and tp not in touched_later] + sorted(lacking),
                          seq=seq, later=later)
    if lacking and (txn := unrecorded_commit(before, staged, sorted(lacking), {k[1] for k in order if k[0] == "c"},
                                             notes.assumed)):
        order.append(("c", txn, -1, -1))
    for key in order:
        for item in _decided(store, seq, key, found, scratch, ts, intents, later, notes, offsets_unknown, staged):
            scratch.apply_item(item, ts)
            items.append(item)
    if offsets_unknown:
        notes.lost.append("consumer-group offsets committed with " + ", ".join(offsets_unknown) +
                          " (if they carried any): only their intents held them")
    quiet = layout_only(before, lacking, notes.assumed)
    for item in quiet:
        scratch.apply_item(item, ts)
        items.append(item)
    for item in _inits_proven_later(seq, scratch, later, intents, notes):
        scratch.apply_item(item, ts)
        items.append(item)
    for item in _fence_unproven(seq, scratch, later, known, notes):
        scratch.apply_item(item, ts)
        items.append(item)
    _waiting(seq, items, scratch, later, intents, notes)
    _legible(raw, items, notes)
    writer = (nxt.prev if nxt is not None and nxt.prev else None) or \
        (known.token_of(seq) if known is not None else None) or _writer_in(raw)
    if not writer:
        notes.assumed.append("writer token: no copy holds it (left empty: the entries after it link to it as to "
                             "an entry of unknown token)")
    touched: dict[tuple[str, int], int] = {}
    walk = before.copy()
    for item in items:
        for tp in item_partitions(item):
            touched.setdefault(tp, walk.partition(*tp).next_idx)
        walk.apply_item(item, ts)
    entry = LogEntry(seq, ts, writer, tuple(items), tuple((t, p, i) for (t, p), i in touched.items()),
                     prev=before.token_of(seq - 1) or "")
    try:
        defined = records_of(entry)
        same = {tp: r for tp, r in defined.items() if tp in found} == found and \
            all(tp in staged.unrecorded for tp in defined if tp not in found)
    except CorruptLogError as exc:
        same, why = False, str(exc)
    else:
        why = "they differ"
    held = {(i.topic, i.partition) for i in quiet}
    for tp, (problem, end) in sorted(lacking.items()):
        if tp in held:
            continue
        rec = defined.get(tp) if same else None
        ops = [op for op in rec.ops if isinstance(op, CommitOp)] if rec is not None else []
        if not ops or ops[-1].base + sum(m.rows for m in ops[-1].segments) != end:
            return Rebuilt(seq, None, problem=problem)
    if not same:
        return Rebuilt(seq, None, problem=f"the rebuilt entry {seq} does not define the partition records it was "
                                          f"rebuilt from ({why})")
    notes.lost.append(NEVER_COPIED)
    return Rebuilt(seq, entry, tuple(notes.recovered), tuple(notes.assumed), tuple(notes.lost))


def annotated(entry: LogEntry, assumed: Sequence[str], lost: Sequence[str]) -> bytes:
    """The bytes of a rebuilt entry: the entry, and a ``rebuilt`` note (what was assumed and lost) that decoding
    ignores and ``txnlog verify`` shows."""
    d = json.loads(entry.to_bytes())
    d["rebuilt"] = {"by": "txnlog repair --log", "assumed": list(assumed), "lost": list(lost)}
    return encode_json(d)


def rebuilt_note(data: bytes, where: str) -> dict[str, list[str]] | None:
    """The ``rebuilt`` note of an entry's bytes (None: not rebuilt, or not decodable)."""
    if b'"rebuilt"' not in data:
        return None
    try:
        note = decode_json(data, where, "transaction log entry").get("rebuilt")
    except CorruptLogError:
        return None
    return note if isinstance(note, dict) else None


# -- the copies -------------------------------------------------------------------------------------------------


_Key = tuple[str, str, int, int]  # ("c", txn, -1, -1) or ("r"/"t", "topic", partition, op index)


def _order(found: Mapping[tuple[str, int], PartitionRecord]) -> list[_Key] | str:
    """The decisions the records hold, in an order every partition's record agrees with (a commit appears once,
    however many partitions it published to)."""
    chains: list[list[_Key]] = []
    for (t, p), rec in sorted(found.items()):
        chain: list[_Key] = []
        for i, op in enumerate(rec.ops):
            if isinstance(op, CommitOp):
                chain.append(("c", op.txn, -1, -1))
            else:
                chain.append(("r" if isinstance(op, ReplaceOp) else "t", t, p, i))
        chains.append(chain)
    after: dict[_Key, set[_Key]] = {}
    first: dict[_Key, int] = {}
    for chain in chains:
        for i, key in enumerate(chain):
            after.setdefault(key, set())
            first.setdefault(key, len(first))
            if i:
                after[chain[i - 1]].add(key)
    waiting = {k: 0 for k in after}
    for nexts in after.values():
        for k in nexts:
            waiting[k] += 1
    out: list[_Key] = []
    ready = sorted((k for k, n in waiting.items() if n == 0), key=first.__getitem__)
    while ready:
        key = ready.pop(0)
        out.append(key)
        for k in after[key]:
            waiting[k] -= 1
            if waiting[k] == 0:
                ready.append(k)
        ready.sort(key=first.__getitem__)
    if len(out) != len(after):
        return "the partition records of the entry disagree on the order of its transactions"
    return out


def _decided(store: Store, seq: int, key: _Key, found: Mapping[tuple[str, int], PartitionRecord],
             scratch: CoordinatorState, ts: int, intents: Mapping[str, Request], later: Sequence[LogEntry],
             notes: _Notes, offsets_unknown: list[str], staged: StagedCopies) -> list[Item]:
    """The items of one decision the records hold (an init before a commit whose epoch the state does not know),
    a producer commit completed with its staged files in partitions whose record was never written
    (:mod:`coordinator.logstaged`)."""
    kind, name, p, i = key
    if kind != "c":
        op = found[(name, p)].ops[i]
        if isinstance(op, ReplaceOp):
            notes.recovered.append(f"compaction of {name}/{p} offsets [{op.base}, {op.end}): from its partition "
                                   "record")
            pm = scratch.partition(name, p)
            return [ReplaceItem(f"rebuilt-{seq}-{name}-{p}-{i}", topic=name, partition=p, layout=pm.layout,
                                base=op.base, end=op.end, replaces=op.replaces, segment=op.segment, runs=op.runs,
                                staged_at=ts)]
        assert not isinstance(op, CommitOp)
        notes.recovered.append(f"retention of {name}/{p} to offset {op.start}: from its partition record")
        return [RetainItem(f"rebuilt-{seq}-{name}-{p}-{i}", topic=name, partition=p, start=op.start)]
    txn = name
    parts = tuple(PartAssign(t, q, op.base, op.segments) for (t, q), rec in sorted(found.items())
                  for op in rec.ops if isinstance(op, CommitOp) and op.txn == txn)
    ref = parse_txn_id(txn)
    if ref is not None and ref.kind == "p":
        extra = staged.parts_of(txn, scratch)
        for a in extra:
            notes.recovered.append(f"commit {txn} in {a.topic}/{a.partition} [{a.base}, {a.base + a.rows}): from its "
                                   "staged segment files (its partition record there was never written)")
        parts = tuple(sorted((*parts, *extra), key=lambda a: (a.topic, a.partition)))
    elif files := staged.files_of(txn):
        notes.lost.append(f"what commit {txn} published in {', '.join(f'{t}/{q}' for t, q in sorted(files))}, if "
                          "anything: staged files of it lie there, but its partition record was never written and "
                          "a Spark task attempt's files prove nothing")
    where = ", ".join(f"{a.topic}/{a.partition} [{a.base}, {a.base + a.rows})" for a in parts)
    out: list[Item] = []
    meta = None
    if ref is not None and ref.kind == "p":
        meta = scratch.producer_by_pid(ref.pid)
        if meta is None or meta.epoch != ref.epoch:
            tid = meta.tid if meta is not None else _tid_of(ref.pid, intents, later, store, txn)
            init = _init_for(seq, ref.pid, ref.epoch, tid, scratch, intents, notes, proof=f"commit {txn}")
            meta = None
            if init is not None:
                out.append(init)
                scratch = scratch.copy()
                scratch.apply_item(init, ts)
                meta = scratch.producer_by_pid(ref.pid)
    req = intents.get("c-" + txn)
    if isinstance(req, TxnRequest) and not req.abort:
        item = decide(req, scratch.copy(), ts)
        if isinstance(item, CommitItem) and tuple(a for a in item.parts if a.rows) == parts:
            notes.recovered.append(f"commit {txn} ({where}): from its partition records and its intent")
            return [*out, item]
        notes.assumed.append(f"commit {txn}: its intent decides otherwise against the rebuilt state; rebuilt from "
                             "its partition records alone")
    offsets_unknown.append(txn)
    if ref is None:
        notes.assumed.append(f"commit {txn} ({where}): its transaction id names no producer or application")
        return [CommitItem("c-" + txn, txn=txn, parts=parts)]
    if ref.kind == "a":
        notes.recovered.append(f"commit {txn} ({where}): version {ref.version} of application {ref.app!r}, from "
                               "its partition records and transaction id")
        return [CommitItem("c-" + txn, txn=txn, app=ref.app, version=ref.version, token=ref.token, parts=parts)]
    if meta is None:
        notes.recovered.append(f"commit {txn} ({where}): from its partition records")
        notes.lost.append(f"the producer of {txn} (pid {ref.pid} epoch {ref.epoch}): no copy names its "
                          "transactional id; it is refused at its next commit and initialises again")
        return [CommitItem("c-" + txn, txn=txn, pid=ref.pid, epoch=ref.epoch, n=ref.n, parts=parts)]
    if ref.n > meta.last_txn + 1:
        notes.lost.append(f"transactions {meta.last_txn + 1}..{ref.n - 1} of {meta.tid!r} (epoch {ref.epoch}): "
                          f"decided by this entry before {txn}, and no copy says how")
    elif ref.n <= meta.last_txn:
        notes.assumed.append(f"commit {txn}: the state before already decided transaction {meta.last_txn} of "
                             f"{meta.tid!r}; taken as it stands")
    seqs = sequences(txn, parts)
    if any("~spark-" in s.path for a in parts for s in a.segments):
        notes.lost.append(f"the application version (txnAppId) of Spark batch commit {txn}, if it had one: a rerun of "
                          "that version is not recognised as done")
    if meta.ephemeral:
        notes.assumed.append(f"commit {txn} ends its one-off producer {meta.tid!r} (as every one-off producer's "
                             "commit does)")
    notes.recovered.append(f"commit {txn} of {meta.tid!r} ({where}): from its partition records and transaction id"
                           + ("; sequence numbers from its segment names" if seqs else ""))
    out.append(CommitItem("c-" + txn, txn=txn, tid=meta.tid, pid=ref.pid, epoch=ref.epoch, n=ref.n, parts=parts,
                          seqs=seqs, end_producer=meta.ephemeral))
    return out


def _tid_of(pid: int, intents: Mapping[str, Request], later: Sequence[LogEntry], store: Store,
            txn: str | None) -> str | None:
    """The transactional id of producer ``pid``, from whatever names it: the entries after, intents, the open
    record of ``txn``."""
    for e in later:
        for item in e.items:
            if isinstance(item, InitItem | CommitItem | AbortItem | ExpireItem) and item.pid == pid and item.tid:
                return item.tid
    for r in intents.values():
        if isinstance(r, TxnRequest) and r.pid == pid and r.tid:
            return r.tid
    if txn is not None:
        try:
            tid = json.loads(store.get(open_path(txn))).get("tid")
        except (FileNotFoundError, ValueError, AttributeError):
            return None
        return tid if isinstance(tid, str) and tid else None
    return None


def _init_for(seq: int, pid: int, epoch: int, tid: str | None, scratch: CoordinatorState,
              intents: Mapping[str, Request], notes: _Notes, *, proof: str) -> InitItem | None:
    """The init entry ``seq`` must have held for producer ``pid`` (transactional id ``tid``) to be at ``epoch``
    (``proof`` says what shows it); None when ``tid`` is unknown or the state contradicts it (noted)."""
    if tid is None:
        return None
    meta = scratch.producers.get(tid)
    if meta is not None and meta.pid != pid:
        notes.assumed.append(f"{proof}: transactional id {tid!r} is pid {meta.pid} in the state, not {pid}; taken "
                             "as it stands")
        return None
    if meta is not None and meta.epoch > epoch:
        notes.assumed.append(f"{proof} is made as epoch {epoch} of {tid!r}, older than the state's {meta.epoch}; "
                             "taken as it stands")
        return None
    if meta is None and pid < scratch.next_pid and scratch.producer_by_pid(pid) is None:
        notes.assumed.append(f"{proof} is made by pid {pid}, which had expired; taken as it stands")
        return None
    held = notes.known.producers.get(tid) if notes.known is not None else None
    if held is not None and (held.pid, held.epoch) == (pid, epoch) and held.init_request:
        notes.recovered.append(f"init of {tid!r} (pid {pid} epoch {epoch}): from the checkpoint at entry "
                               f"{notes.known.seq if notes.known else -1}, proven by {proof}")
        return InitItem(held.init_request, tid=tid, pid=pid, epoch=epoch, timeout_ms=held.timeout_ms,
                        ephemeral=held.ephemeral)
    for rid, r in intents.items():
        if isinstance(r, InitRequest) and r.tid == tid:
            got = decide(r, scratch.copy(), scratch.ts)
            if isinstance(got, InitItem) and (got.pid, got.epoch) == (pid, epoch):
                notes.recovered.append(f"init of {tid!r} (pid {pid} epoch {epoch}): from its intent {rid}, proven "
                                       f"by {proof}")
                return got
    timeout = meta.timeout_ms if meta is not None else InitItem("").timeout_ms
    ephemeral = meta.ephemeral if meta is not None else False
    notes.recovered.append(f"init of {tid!r} (pid {pid} epoch {epoch}): no copy holds it; proven by {proof}")
    notes.assumed.append(f"init of {tid!r}: timeout {timeout} ms and ephemeral={ephemeral} "
                         f"({'as its previous epoch' if meta is not None else 'the defaults'})")
    return InitItem(f"i-rebuilt-{seq}-{tid}", tid=tid, pid=pid, epoch=epoch, timeout_ms=timeout, ephemeral=ephemeral)


def _inits_proven_later(seq: int, scratch: CoordinatorState, later: Sequence[LogEntry],
                        intents: Mapping[str, Request], notes: _Notes) -> list[Item]:
    """Inits entry ``seq`` must have held: a producer's first decision in the entries after it is made as an
    epoch the rebuilt state does not know (and no init in between registered it)."""
    sim = scratch.copy()
    seen: set[str] = set()
    out: list[Item] = []
    for e in later:
        for item in e.items:
            tid = getattr(item, "tid", None)
            if not isinstance(tid, str) or not tid or tid in seen:
                sim.apply_item(item, e.ts)
                continue
            seen.add(tid)
            meta = sim.producers.get(tid)
            if isinstance(item, CommitItem | AbortItem) and not (isinstance(item, AbortItem) and item.fence) and \
                    (meta is None or (meta.pid, meta.epoch) != (item.pid, item.epoch)):
                what = f"entry {e.seq}, which {'commits' if isinstance(item, CommitItem) else 'aborts'} {item.txn}"
                init = _init_for(seq, item.pid, item.epoch, tid, sim, intents, notes, proof=what)
                if init is not None:
                    out.append(init)
                    sim.apply_item(init, sim.ts)
            elif isinstance(item, InitItem) and meta is not None and meta.pid == item.pid and \
                    meta.epoch + 1 != item.epoch:
                notes.lost.append(f"what entry {seq} did to {tid!r} (epoch {meta.epoch} before, {item.epoch - 1} "
                                  f"after, as entry {e.seq} shows): an init or a fence no copy holds")
            sim.apply_item(item, e.ts)
    return out


def _fence_unproven(seq: int, scratch: CoordinatorState, later: Sequence[LogEntry], known: CoordinatorState | None,
                    notes: _Notes) -> list[Item]:
    """Expire (fence for good) every producer of the rebuilt state whose epoch the entry may have fenced: the entry
    could have held an init or a timeout abort of it that no copy holds, and its zombie must never commit again.
    A producer is kept when a copy proves its epoch outlived the entry: an entry after it decides something as that
    producer (a commit or abort made as its epoch, an init, an expiry), or a checkpoint covering the entry holds it
    at the same producer id and epoch. Only liveness is lost: an expired producer initialises again."""
    named = {item.tid for e in later for item in e.items if isinstance(item, InitItem | ExpireItem | CommitItem)
             or (isinstance(item, AbortItem) and not item.fence)}
    out: list[Item] = []
    for tid, meta in sorted(scratch.producers.items()):
        kept = known.producers.get(tid) if known is not None else None
        if tid in named or (kept is not None and (kept.pid, kept.epoch) == (meta.pid, meta.epoch)):
            continue
        out.append(ExpireItem(f"repair-{seq}-{meta.pid}", tid=tid, pid=meta.pid,
                              reason=f"entry {seq} was rebuilt and may have fenced this epoch"))
    if out:
        notes.assumed.append("fenced for good (expired), as the entry may have fenced them and no copy says: "
                             + ", ".join(repr(i.tid) for i in out if isinstance(i, ExpireItem))
                             + " (each initialises again)")
    return out


def _waiting(seq: int, items: Sequence[Item], scratch: CoordinatorState, later: Sequence[LogEntry],
             intents: Mapping[str, Request], notes: _Notes) -> None:
    """Name the intents still waiting that the entry may have decided: the next writer decides them again."""
    sim = scratch.copy()
    sim.seq = seq
    done = {i.request for i in items} | {i.request for e in later for i in e.items}
    for e in later:
        sim.apply(e)
    open_ids = sorted(rid for rid, r in intents.items() if rid not in done and not decided_by_name(rid, sim)
                      and not (isinstance(r, InitRequest) and (m := sim.producers.get(r.tid)) is not None
                               and m.init_request == rid))
    if open_ids:
        notes.lost.append(f"intents still waiting ({', '.join(open_ids)}): entry {seq} may have decided some of "
                          "them; the next writer decides them against the rebuilt state")


def _legible(raw: bytes | None, items: Sequence[Item], notes: _Notes) -> None:
    """Name the transactional ids and transactions still legible in the damaged bytes that no rebuilt decision
    names: the entry decided something about them that no copy holds (the bytes are not trusted for more)."""
    named = {getattr(i, "tid", None) for i in items} | {getattr(i, "txn", None) for i in items}
    text = (raw or b"").decode("utf-8", "replace")
    tids = sorted({m for m in _TID.findall(text) if m not in named})
    txns = sorted({m for m in _TXN.findall(text) if m not in named})
    if tids or txns:
        what = [f"transactional id(s) {', '.join(repr(t) for t in tids)}"] if tids else []
        what += [f"transaction(s) {', '.join(txns)}"] if txns else []
        notes.lost.append(f"named in the damaged bytes, with no copy of what the entry decided about them: "
                          f"{'; '.join(what)}")


def _writer_in(raw: bytes | None) -> str:
    """The writer token still legible in damaged bytes ("" if none)."""
    m = _WRITER.search(raw or b"")
    return m.group(1).decode() if m else ""
