"""The transaction log: an ordered sequence of small JSON objects, each created with ``put_if_absent``, each deciding
a group of requests (see ``docs/design.md``).

* **Opening** reads the newest checkpoint (``_txn/checkpoint/_last.json``) and the entries after it.
* **Refreshing** lists the entries after the last one read (one request when nothing is new); far behind, it jumps
  to the newest checkpoint instead of reading every entry.
* **Submitting** a request (:meth:`TransactionLog.submit`) builds the next entry from it and from every waiting
  intent, and creates it; a writer that loses the race publishes its request as an intent, backs off with jitter and
  usually finds it decided by the winner. The entry's creation is the commit point of everything in it.
* After winning, the writer writes the entry's derived partition records, and every ``checkpoint_interval`` entries
  a checkpoint, after making sure every partition record of the entries it covers exists.

Thread-safe; one instance per process and store is enough.
"""

from __future__ import annotations

import functools
import itertools
import logging
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator import faults, parallel
from coordinator.decisions import (
    INTENT_KINDS,
    Outcome,
    Request,
    decide,
    decided_by_name,
    fenced,
    outcome,
    outcome_of_item,
    request_bytes,
    request_from_bytes,
)
from coordinator.errors import (
    CommitStateUnknownError,
    ConcurrentCommitError,
    CorruptLogError,
    InvalidOptionError,
    StoreError,
    TxnLogError,
    UnsupportedFormatError,
)
from coordinator.layout import (
    FORMAT_PATH,
    LAST_CHECKPOINT,
    TXN_CHECKPOINT,
    TXN_INTENTS,
    TXN_LOG,
    intent_path,
    marker_dir,
    marker_path,
    parse_seq,
    seq_name,
    txn_checkpoint_path,
    txn_log_path,
)
from coordinator.partrecords import PartitionRecord, records_of
from coordinator.probe import learn_verified, probe_conditional_writes, verified_writes
from coordinator.records import FORMAT_VERSION, Item, LogEntry, check_format, decode_json, encode_json, item_partitions
from coordinator.state import CoordinatorState
from coordinator.store import Store

if TYPE_CHECKING:
    from coordinator.partition import PartitionLog

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_INTERVAL = 4
#: Entries and checkpoints below the newest checkpoint older than this are deleted (protects readers mid-open).
DEFAULT_LOG_GRACE_MS = 10 * 60_000
#: Whenever a checkpoint crosses a multiple of this many checkpoint intervals, its writer also truncates the log.
TRUNCATE_EVERY = 16
#: Whenever a checkpoint crosses a multiple of this many checkpoint intervals, it is also kept under its own number
#: (fallback, truncation point).
NUMBERED_EVERY = 4
#: Intents decided in one entry at most (keeps entries small under heavy contention).
MAX_INTENTS_PER_ENTRY = 256
#: A submit gives up after this long losing races (ConcurrentCommitError).
SUBMIT_BUDGET_S = 120.0
#: The shortest grace period log truncation accepts (see TransactionLog.truncate): twice RECENT_S.
MIN_LOG_GRACE_MS = 60_000
#: A first attempt right after reading the log (opening it, say) does not read it again.
JUST_READ_S = 0.2
#: A process this many entries behind jumps to the newest checkpoint instead of reading them all.
JUMP_ENTRIES = 64
#: A process that read the log this recently refreshes by asking for the next entry by name.
RECENT_S = 30.0
#: How often a request waiting as an intent looks at the log.
POLL_S = 0.02
#: A waiting request tries to append itself only after the log stood still for this many looks (longer than one
#: round of the writer serving the queue: list, read intents, write).
IDLE_POLLS = 4
#: After winning an entry, a writer keeps appending entries for intents still waiting for at most this long (its
#: own caller waits meanwhile; every hand-over to another writer costs the log a few idle looks).
SERVE_S = 3.0
#: For this long after a request of this process was decided by a writer serving the queue, the next one joins
#: the queue at once instead of trying to append itself.
BUSY_S = 0.5
#: A writer serving the queue stops after this many looks in a row that find no intent waiting.
SERVE_EMPTY_LOOKS = 4
#: A writer serving the queue stops after losing this many races in a row (another writer serves it).
SERVE_LOSSES = 2
_RECENT_KEPT = 4096
_DECISIONS_KEPT = 20_000


def now_ms() -> int:
    return int(time.time() * 1000)


def ensure_format(store: Store) -> None:
    """Create ``_txn/format.json`` (the store's format) if absent.

    Raises:
        UnsupportedFormatError: the store was created by another format.
    """
    body = encode_json({"format": FORMAT_VERSION})
    if store.put_if_absent(FORMAT_PATH, body):
        return
    d = decode_json(store.get(FORMAT_PATH), FORMAT_PATH, "store format file")
    if d.get("format") != FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"store {store.url} has txnlog store format {d.get('format')!r}; this txnlog reads format "
            f"{FORMAT_VERSION} only"
        )


class TransactionLog:
    """A process's view of the store's transaction log (see the module docstring).

    Attributes:
        state: the replayed state as of the last entry read (may lag the store until :meth:`refresh`).
        checkpoint_seq: the newest checkpoint this process knows to exist (-1: none).
    """

    def __init__(
        self,
        store: Store,
        *,
        checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL,
        group_commit: bool = True,
        log_grace_ms: int = DEFAULT_LOG_GRACE_MS,
        partition_checkpoint_interval: int = 32,
        background_checkpoints: bool = True,
    ) -> None:
        self.store = store
        #: checkpoints are derived data: written in the background so a writer serving others never waits on one
        self.background_checkpoints = background_checkpoints
        self.checkpoint_interval = checkpoint_interval
        self.partition_checkpoint_interval = partition_checkpoint_interval
        #: opens a partition's index (the coordinator sets it to its cached one)
        self.open_partition: Callable[[str, int], PartitionLog] | None = None
        self.group_commit = group_commit
        self.log_grace_ms = log_grace_ms
        self.jump = max(2 * checkpoint_interval, JUMP_ENTRIES)
        self._lock = threading.RLock()
        self._state = CoordinatorState()
        self._opened = False
        self.checkpoint_seq = -1
        self._recent: OrderedDict[int, LogEntry] = OrderedDict()
        self._record_seq: dict[tuple[str, int, int], int] = {}
        self._decisions: OrderedDict[str, tuple[Item, int]] = OrderedDict()
        self._intents: dict[str, Request] = {}
        #: Until when the log counts as busy (a request of this process was just decided by a serving writer).
        self._busy_until = 0.0
        self._since_pointer = 0
        self._refreshed = -1e9
        self._loaded_at = -1e9
        #: entries whose partition records this process wrote (the checkpoint writer need not check them)
        self._written: set[int] = set()
        self._checkpointing = threading.Lock()
        self._pending_checkpoint: Callable[[], None] | None = None
        self._jumped_at = -1
        self._probed = False

    @property
    def state(self) -> CoordinatorState:
        """The replayed state as of the last entry read; the log is opened (newest checkpoint and the entries
        after it) on first use."""
        if not self._opened:
            with self._lock:
                if not self._opened:
                    self._open()
        return self._state

    @state.setter
    def state(self, st: CoordinatorState) -> None:
        self._state = st

    def _open(self) -> None:
        ck = self._read_last_checkpoint()
        self._opened = True
        if ck is not None:
            self._reset(ck)
        self._catch_up()

    # -- reading ----------------------------------------------------------------------------------------------

    def last_checkpoint(self) -> CoordinatorState | None:
        """The state of the newest coordinator checkpoint in the store (None: there is none)."""
        return self._read_last_checkpoint()

    def _read_last_checkpoint(self) -> CoordinatorState | None:
        """The newest checkpoint: ``_last.json``, or the newest numbered one that decodes."""
        try:
            return self._decode_checkpoint(self.store.get(LAST_CHECKPOINT), LAST_CHECKPOINT)
        except FileNotFoundError:
            pass
        except CorruptLogError as exc:
            log.warning("%s", exc)
        names = [n for n in self.store.list(TXN_CHECKPOINT) if parse_seq(n) is not None]
        for name in reversed(names):
            where = f"{TXN_CHECKPOINT}/{name}"
            try:
                return self._decode_checkpoint(self.store.get(where), where)
            except (CorruptLogError, FileNotFoundError):
                continue
        return None

    def _decode_checkpoint(self, data: bytes, where: str) -> CoordinatorState:
        d = decode_json(data, where, "coordinator checkpoint")
        check_format(d, where)
        st = CoordinatorState.from_json(d, where)
        learn_verified(self.store, d.get("verified", ()))
        self._loaded_at = time.monotonic()
        return st

    def _reset(self, st: CoordinatorState) -> None:
        self._state = st
        self.checkpoint_seq = max(self.checkpoint_seq, st.seq)
        self._recent.clear()
        self._record_seq = {k: s for k, s in self._record_seq.items() if s > st.seq}

    def _get_entry(self, seq: int) -> LogEntry | None:
        path = txn_log_path(seq)
        try:
            data = self.store.get(path)
        except FileNotFoundError:
            return None
        entry = LogEntry.from_bytes(data, path)
        if entry.seq != seq:
            raise CorruptLogError(f"transaction log entry {path} says it is entry {entry.seq}")
        return entry

    def refresh(self) -> CoordinatorState:
        """Read what was appended since the last read (one LIST when nothing is new) and apply it.

        Raises:
            CorruptLogError: an entry cannot be decoded, or the log has a gap no checkpoint covers.
            UnsupportedFormatError: the store was written by another format.
            StoreError: the store failed.
        """
        with self._lock:
            if not self._opened:
                self._open()
            else:
                self._catch_up()
            return self._state

    def _catch_up(self, enough: Callable[[], bool] | None = None) -> None:
        """Read the entries after this process's view. With ``enough``, stop as soon as it says so after reading
        the next entry by name (a waiting request looking for its decision needs no listing)."""
        if self.state.seq >= 0 and time.monotonic() - self._refreshed < RECENT_S:
            # Read recently: no truncation can have passed this process by (it deletes only entries below a
            # checkpoint older than the grace period), so asking for the next entry by name is enough, and cheaper
            # than a listing when nothing is new (the common case for a process waiting on the log). An entry read
            # by name without a listing is younger than that read, so the time of the read is kept.
            nxt = self._get_entry(self.state.seq + 1)
            if nxt is None:
                self._refreshed = time.monotonic()
                return
            self._apply(nxt)
            if enough is not None and enough():
                return
        self._list_forward()
        self._refreshed = time.monotonic()

    def _list_forward(self) -> None:
        jumped = False
        while True:
            after = seq_name(self.state.seq) if self.state.seq >= 0 else None
            names = [n for n in self.store.list(TXN_LOG, start_after=after, limit=self.jump + 1)
                     if parse_seq(n) is not None]
            if not names:
                return
            seqs = [parse_seq(n) or 0 for n in names]
            # entries that do not follow on are below a checkpoint (left by an interrupted truncation)
            dense = next((i for i, (a, b) in enumerate(itertools.pairwise(seqs), 1) if b != a + 1), len(seqs))
            if seqs[0] != self.state.seq + 1 or dense < len(seqs) or len(seqs) > self.jump:
                if not jumped and self._jump():
                    jumped = True
                    continue
                if seqs[0] != self.state.seq + 1 or dense < min(len(seqs), self.jump):
                    gap = seqs[0] if seqs[0] != self.state.seq + 1 else seqs[dense]
                    raise CorruptLogError(
                        f"transaction log has a gap: entries are missing before {TXN_LOG}/{seq_name(gap)} and no "
                        "checkpoint covers them"
                    )
                seqs = seqs[: self.jump]
            entries = parallel.pmap(self._get_entry, seqs)
            for entry in entries:
                if entry is None:  # deleted by truncation since the listing: a newer checkpoint covers it
                    if jumped or not self._jump():
                        raise CorruptLogError(f"transaction log entry {self.state.seq + 1} vanished")
                    jumped = True
                    break
                self._apply(entry)
            else:
                if len(seqs) < self.jump:
                    return

    def _jump(self) -> bool:
        ck = self._read_last_checkpoint()
        if ck is None or ck.seq <= self.state.seq:
            return False
        self._reset(ck)
        self._jumped_at = ck.seq
        return True

    def _apply(self, entry: LogEntry) -> None:
        self.state.apply(entry)
        self._remember(entry)

    def _remember(self, entry: LogEntry) -> None:
        self._recent[entry.seq] = entry
        while len(self._recent) > _RECENT_KEPT:
            self._recent.popitem(last=False)
        for topic, p, idx in entry.touched:
            self._record_seq[(topic, p, idx)] = entry.seq
        for item in entry.items:
            self._decisions[item.request] = (item, entry.seq)
        while len(self._decisions) > _DECISIONS_KEPT:
            self._decisions.popitem(last=False)
        self._since_pointer += 1
        if self._since_pointer >= 4 * self.jump and len(self._record_seq) > 4 * _RECENT_KEPT:
            self._since_pointer = 0
            self._learn_checkpoint()

    def _learn_checkpoint(self) -> None:
        """Learn the newest checkpoint's seq, so bookkeeping below it can be dropped (records below a checkpoint
        exist by the checkpoint invariant)."""
        try:
            d = decode_json(self.store.get(LAST_CHECKPOINT), LAST_CHECKPOINT, "coordinator checkpoint")
            seq = int(d["seq"])
        except (FileNotFoundError, CorruptLogError, KeyError, ValueError, TypeError, StoreError):
            return
        if seq > self.checkpoint_seq:
            self.checkpoint_seq = seq
            self._record_seq = {k: s for k, s in self._record_seq.items() if s > seq}

    def entry(self, seq: int) -> LogEntry:
        """Log entry ``seq`` (from memory when recent).

        Raises:
            CorruptLogError: the entry is gone (truncated) or damaged.
        """
        # Single dict reads, atomic without the log's lock: pool workers call this while another thread may hold
        # the lock and wait for them.
        got = self._recent.get(seq)
        if got is not None:
            return got
        found = self._get_entry(seq)
        if found is None:
            raise CorruptLogError(f"transaction log entry {txn_log_path(seq)} is needed but missing")
        return found

    def record_source(self, topic: str, partition: int, idx: int) -> PartitionRecord | None:
        """Partition record ``idx`` computed from the log entry that defines it, when this process read that
        entry; None when it did not (the record then predates the checkpoint this process started from, so it
        exists in the store)."""
        seq = self._record_seq.get((topic, partition, idx))  # atomic without the lock (see entry)
        if seq is None:
            return None
        return records_of(self.entry(seq)).get((topic, partition))

    def decision(self, request_id: str) -> tuple[Item, int] | None:
        """The item that decided ``request_id`` and its entry, if this process read it."""
        return self._decisions.get(request_id)  # atomic without the lock (see entry)

    # -- submitting -------------------------------------------------------------------------------------------

    def _outcome(self, req: Request, *, since: int | None = None) -> Outcome | None:
        """What became of ``req``: the deciding item if this process read it, else what the state says. A
        producer request of an epoch that is no longer current, and not decided before the fence, is answered
        ``fenced``. If it waited as an intent from entry ``since`` on and this process jumped over entries since
        (so it may have missed its decision), those entries are read to find out."""
        seen = self._decisions.get(req.id)
        if seen is not None:
            return outcome_of_item(*seen)
        gone = fenced(req, self.state)
        if gone is not None:
            if since is not None and self._jumped_at > since:
                found = self._find_decision(req.id, since, self._jumped_at)
                if found is not None:
                    return outcome_of_item(*found)
            return gone
        return outcome(req, self.state)

    def _find_decision(self, request_id: str, after: int, upto: int) -> tuple[Item, int] | None:
        """Read entries ``(after, upto]`` (retained: younger than the truncation grace period) looking for the item
        that decided ``request_id``."""
        for first in range(after + 1, upto + 1, JUMP_ENTRIES):
            seqs = range(first, min(upto, first + JUMP_ENTRIES - 1) + 1)
            for entry in parallel.pmap(self._get_entry, seqs):
                if entry is None:
                    continue
                for item in entry.items:
                    if item.request == request_id:
                        return item, entry.seq
        return None

    def submit(self, req: Request) -> Outcome:
        """Get ``req`` decided.

        First one direct try, unless other intents are already waiting: build the next entry from ``req`` and every
        waiting intent, and create it. If another writer took that entry, or others were queued, ``req`` (a commit,
        abort or init request) is published as an intent and this process waits for a writer to decide it, looking
        at the log every ~``POLL_S`` seconds; only when the log has not moved for :data:`IDLE_POLLS` to twice as
        many looks (drawn per request) does it try to append itself, with the intents it already read (so waiting
        writers do not race the one serving the queue, nor all take over at once). A writer that wins an entry
        keeps serving the queue for a while (:meth:`_serve`). Other requests retry with exponential backoff and
        full jitter.

        Returns:
            the outcome (see :class:`~coordinator.decisions.Outcome`).
        Raises:
            CommitStateUnknownError: the store could not say whether the deciding entry was written, or failed
                after ``req`` was published as an intent (another process may still decide it).
            ConcurrentCommitError: undecided after :data:`SUBMIT_BUDGET_S` seconds.
            StoreError, CorruptLogError: the store failed or the log is damaged (``req`` was not decided).
        """
        intentable = self.group_commit and req.kind in INTENT_KINDS
        wrote_intent = False
        intent_seq = -1
        attempt = 0
        queued = False
        start = time.monotonic()
        last_seq, idle = -2, 0
        # waiters that saw the log stand still at the same moment do not all take over at once
        patience = IDLE_POLLS + random.randint(0, IDLE_POLLS)
        if intentable and time.monotonic() < self._busy_until and self._queue_at_once(req):
            # a writer is serving the queue: join it at once (a direct try would only race it)
            intent_seq, wrote_intent, attempt, queued = self.state.seq, True, 1, True
        while True:
            try:
                if wrote_intent and idle < patience:
                    with self._lock:
                        self._catch_up(functools.partial(self._decided, req, intent_seq))
                        won, result = None, self._outcome(req, since=intent_seq)
                else:
                    won, result, queued = self._attempt(req, intentable, queue=intentable and not wrote_intent,
                                                        fresh=attempt == 0, fetch=not wrote_intent)
            except CommitStateUnknownError:
                # Did the ambiguous write land? If the log can be read, it says so; an entry that did not land
                # decided nothing, and trying again is safe (a request is decided at most once).
                readable, result = self._learn(req)
                if not readable:
                    raise
                won = None
            except StoreError as exc:
                if wrote_intent:
                    raise CommitStateUnknownError(
                        f"the store failed while request {req.id} was waiting to be decided; it may still be: "
                        f"{exc}") from exc
                raise
            if result is not None:
                if wrote_intent:
                    parallel.background(functools.partial(self._delete_quietly, [intent_path(req.id)]))
                    if won is None:
                        self._busy_until = time.monotonic() + BUSY_S
                if won is not None:
                    if intentable and (won[1] or wrote_intent):
                        # others are waiting: keep the log moving for them at once; this entry's records are
                        # written meanwhile and waited for before returning
                        self._serve([self._after_win_later(*won)])
                    else:
                        self._after_win(*won)
                return result
            attempt += 1
            if intentable and not wrote_intent:
                intent_seq = self.state.seq
                wrote_intent = True  # from here on the intent may exist, even if the put below fails
                faults.point("intent.before")
                try:
                    self.store.put(intent_path(req.id), request_bytes(req))
                except StoreError as exc:
                    # applied or not, unknown: wait as if it were there; if it is not, the idle take-over below
                    # decides the request anyway
                    log.debug("intent %s may not be written: %s", req.id, exc)
                faults.point("intent.after")
            if time.monotonic() - start > SUBMIT_BUDGET_S:
                msg = f"request {req.id} was not decided within {SUBMIT_BUDGET_S:.0f} s"
                if wrote_intent:
                    raise CommitStateUnknownError(msg + "; its intent may still be decided")
                raise ConcurrentCommitError(msg + "; the store is too contended")
            if wrote_intent and attempt == 1 and not queued:
                # Just queued after a lost race: one more try soon (jittered), unless the log moves again
                # meanwhile (then a writer is making progress and will serve the queue). A request queued behind
                # others already waiting is not retried: a writer is serving them, and racing it only slows the
                # log down.
                try:
                    with self._lock:
                        self._catch_up()  # the entry that won the race
                    lost_at = self.state.seq
                    time.sleep(random.uniform(0, 2.5) * POLL_S)
                    with self._lock:
                        self._catch_up()
                except StoreError as exc:
                    raise CommitStateUnknownError(
                        f"the store failed while request {req.id} was waiting to be decided; it may still be: "
                        f"{exc}") from exc
                idle = patience if self.state.seq == lost_at and not self._served(lost_at) else 0
                last_seq = self.state.seq
            elif wrote_intent:
                idle = idle + 1 if self.state.seq == last_seq else 0
                last_seq = self.state.seq
                time.sleep(random.uniform(0.5, 1.5) * POLL_S)
            else:
                time.sleep(random.uniform(0, min(0.2, 0.002 * 2 ** min(attempt, 10))))

    def _decided(self, req: Request, since: int) -> bool:
        return self._outcome(req, since=since) is not None

    def _queue_at_once(self, req: Request) -> bool:
        """Publish ``req`` as an intent without a try of its own, if this process's view says it is still to be
        decided. Returns whether the intent was put (or may have been: a failed put is waited for like any other)."""
        with self._lock:
            if not self._opened or self._outcome(req) is not None:
                return False
            if decide(req, self.state.copy(), max(now_ms(), self.state.ts)) is None:
                return False
        faults.point("intent.before")
        try:
            self.store.put(intent_path(req.id), request_bytes(req))
        except StoreError as exc:
            log.debug("intent %s may not be written: %s", req.id, exc)
        faults.point("intent.after")
        return True

    def _served(self, seq: int) -> bool:
        """Whether entry ``seq`` (read) decided several requests: its writer is serving the queue."""
        entry = self._recent.get(seq)
        return entry is not None and len({i.request for i in entry.items}) > 1

    def _learn(self, req: Request) -> tuple[bool, Outcome | None]:
        """After an ambiguous write: read the log (a few tries). Returns (whether the log could be read, the
        outcome of ``req`` if it was decided)."""
        for i in range(3):
            try:
                with self._lock:
                    self._catch_up()
                    return True, self._outcome(req)
            except (StoreError, CorruptLogError):
                time.sleep(0.05 * (i + 1))
        return False, None

    def _attempt(
        self, req: Request, intentable: bool, *, queue: bool = False, fresh: bool = False, fetch: bool = True
    ) -> tuple[tuple[LogEntry, list[str]] | None, Outcome | None, bool]:
        """One try: refresh, decide ``req`` and the waiting intents, create the next entry. With ``queue``, do not
        try when other intents are already waiting (a writer serving them will decide ``req`` too). Without
        ``fetch`` (a waiting request taking over an idle log), only intents already read are decided with ``req``:
        a take-over may lose the race to another waiter, and if it wins it serves the rest next.

        Returns:
            ``((entry, intents it decided), outcome, False)`` when this call created the entry;
            ``(None, outcome, False)`` when ``req`` was already decided; ``(None, None, queued)`` when another
            writer took the entry (``queued`` False) or others wait (``queued`` True).
        """
        with self._lock:
            listing = parallel.start(lambda: self.store.list(TXN_INTENTS)) if intentable else None
            try:
                if not self._opened:
                    self._open()
                elif not (fresh and time.monotonic() - self._refreshed < JUST_READ_S):
                    self._catch_up()
            finally:
                names = listing() if listing is not None else []
            got = self._outcome(req)
            if got is not None:
                return None, got, False
            if queue and self._undecided(names, req.id):
                return None, None, True
            others = self._waiting(names, req.id) if fetch else self._known_waiting(names, req.id)
            if decide(req, self.state.copy(), max(now_ms(), self.state.ts)) is None:
                return None, Outcome("noop", reason=f"request {req.id} has nothing left to decide"), False
            won = self._append([req, *others])
            if won is None:
                return None, None, False
            entry, decided = won
            decided = [r for r in decided if r != req.id]
            mine = next((i for i in entry.items if i.request == req.id), None)
            if mine is None:
                return (entry, decided), Outcome("unknown", reason=f"request {req.id} was decided out of view"), False
            return (entry, decided), outcome_of_item(mine, entry.seq), False

    def _serve(self, pending: list[Callable[[], None]]) -> None:
        """After winning an entry, keep appending entries for the intents still waiting, while this process keeps
        winning (for up to :data:`SERVE_S`): the writer that already holds the newest state is the fastest one to
        build the next entry, so the log advances at the pace of one conditional write per entry. The listing of
        intents for the next round runs while the entry of this round is being created, and partition records of
        the served entries are written in the background; ``pending`` (derived work already started) and those
        records are waited for before returning."""
        until = time.monotonic() + SERVE_S
        empty = lost = 0
        with self._lock:
            listing = self._prefetch()
        try:
            while time.monotonic() < until:
                try:
                    names, fetched = listing()
                    with self._lock:
                        self._intents.update(fetched)
                        if lost:
                            # the entry that won the race: listed, not asked for by name, so a view that fell far
                            # behind while serving jumps to the newest checkpoint instead of reusing a number
                            self._list_forward()
                            self._refreshed = time.monotonic()
                            if self._served(self.state.seq):
                                return  # another writer serves the queue now: two would only race each other
                        others = self._waiting(names, "")
                        # committers decided by the last entry come back with their next commit soon: a queue
                        # that is empty for a moment is looked at a few more times before serving stops
                        empty = 0 if others else empty + 1
                        if empty > SERVE_EMPTY_LOOKS:
                            return
                        # An intent listed now but decided by the entry created below is filtered out next round
                        # (it is decided in the state by then); one written later is in the next listing.
                        listing = self._prefetch()
                        won = self._append(others) if others else None
                    if not others:
                        time.sleep(POLL_S)
                        continue
                except TxnLogError as exc:
                    log.debug("stopped appending for waiting intents: %s", exc)
                    return
                if won is None:
                    # One lost race is usually a committer's direct first try, which serves nobody: keep serving.
                    # Losing twice in a row means another writer is serving the queue now.
                    lost += 1
                    if lost >= SERVE_LOSSES:
                        return
                    continue
                lost = 0
                entry, decided = won
                pending.append(parallel.background(functools.partial(self._write_records, entry)))
                if decided:
                    parallel.background(functools.partial(self._delete_quietly, [intent_path(r) for r in decided]))
                if self._checkpoint_due(entry.seq):
                    self._join(pending)
                    self._checkpoint_quietly(entry.seq)
        finally:
            self._finish_listing(listing)
            self._join(pending)

    def _prefetch(self) -> Callable[[], tuple[list[str], dict[str, Request]]]:
        """Start listing ``_txn/intents/`` and reading the intents in it that are new to this process (caller
        holds the lock), in the background, so a serving writer has the next round's intents in hand when the entry
        it is creating meanwhile returns. Returns a function waiting for ``(names, intents read)``."""
        known, st = set(self._intents), self.state

        def run() -> tuple[list[str], dict[str, Request]]:
            names = self.store.list(TXN_INTENTS)
            new = [rid for rid in self._undecided(names, "", st) if rid not in known][:MAX_INTENTS_PER_ENTRY]
            return names, {rid: r for rid, r in parallel.pmap(self._fetch_intent, new) if r is not None}

        return parallel.background(run)

    @staticmethod
    def _finish_listing(listing: Callable[[], object]) -> None:
        """Wait for a listing started ahead that is no longer needed (no request is left running behind)."""
        try:
            listing()
        except TxnLogError:
            pass

    def _join(self, pending: list[Callable[[], None]]) -> None:
        while pending:
            try:
                pending.pop(0)()
            except (TxnLogError, OSError) as exc:
                log.warning("writing partition records: %s (derived data only; readers compute it)", exc)

    def _checkpoint_due(self, seq: int) -> bool:
        return bool(self.checkpoint_interval) and seq % self.checkpoint_interval == self.checkpoint_interval - 1

    def _checkpoint_quietly(self, seq: int) -> None:
        """Write a checkpoint, in the background when ``background_checkpoints`` (one at a time: a writer busy with
        one skips the next; the one after covers both)."""
        if not self._checkpointing.acquire(blocking=False):
            return

        def run() -> None:
            try:
                self.write_checkpoint()
            except (TxnLogError, OSError) as exc:
                log.warning("checkpoint after entry %d: %s (readers read more entries)", seq, exc)
            finally:
                self._checkpointing.release()

        if self.background_checkpoints:
            self._pending_checkpoint = parallel.background(run)
        else:
            run()

    def flush(self) -> None:
        """Wait for the checkpoint being written in the background, if any (derived work; for tests and tools that
        count requests or exit right after a commit)."""
        wait = self._pending_checkpoint
        if wait is not None:
            wait()

    def _append(self, reqs: list[Request]) -> tuple[LogEntry, list[str]] | None:
        """Create the next entry deciding ``reqs`` (caller holds the lock, state current). None if another writer
        took it (its entry is read on the next refresh)."""
        ts = max(now_ms(), self.state.ts)
        seq = self.state.seq + 1
        scratch = self.state.copy()
        items: list[Item] = []
        touched: dict[tuple[str, int], int] = {}
        for r in reqs:
            item = decide(r, scratch, ts)
            if item is None:
                continue
            for tp in item_partitions(item):
                touched.setdefault(tp, scratch.partition(*tp).next_idx)
            scratch.apply_item(item, ts)
            items.append(item)
        if not items:
            return None
        entry = LogEntry(seq, ts, uuid.uuid4().hex, tuple(items), tuple((t, p, idx) for (t, p), idx in touched.items()))
        scratch.finish(entry)
        if not self._probed:
            probe_conditional_writes(self.store)
            self._probed = True
        if seq == 0:
            ensure_format(self.store)
        faults.point("txnlog.entry.before")
        if not self.store.put_if_absent(txn_log_path(seq), entry.to_bytes()):
            return None
        faults.point("txnlog.entry.after")
        self.state = scratch
        self._remember(entry)
        decided = [i.request for i in items if i.request in self._intents]
        for rid in decided:
            self._intents.pop(rid, None)
        return entry, decided

    def _undecided(self, names: list[str], own: str, st: CoordinatorState | None = None) -> list[str]:
        """The intent ids among ``names`` (a listing of ``_txn/intents/``) not known to be decided, by name (in
        ``st``, by default the current state)."""
        st = self.state if st is None else st
        ids = []
        for name in names:
            if not name.endswith(".json"):
                continue
            rid = name[:-5]
            if rid == own or rid in self._decisions or decided_by_name(rid, st):
                continue
            ids.append(rid)
        return ids

    def _waiting(self, names: list[str], own: str) -> list[Request]:
        """The undecided intents among ``names`` (fetched once each, in parallel), oldest name first."""
        ids = self._undecided(names, own)[:MAX_INTENTS_PER_ENTRY]
        self._intents = {rid: r for rid, r in self._intents.items() if rid in ids}
        new = [rid for rid in ids if rid not in self._intents]
        for rid, got in parallel.pmap(self._fetch_intent, new):
            if got is not None:
                self._intents[rid] = got
        return [self._intents[rid] for rid in ids if rid in self._intents]

    def _fetch_intent(self, rid: str) -> tuple[str, Request | None]:
        """Read intent ``rid``; None if it is gone (decided and deleted) or unreadable."""
        path = intent_path(rid)
        try:
            return rid, request_from_bytes(self.store.get(path), path)
        except FileNotFoundError:
            return rid, None
        except (CorruptLogError, UnsupportedFormatError) as exc:
            log.warning("ignoring intent: %s", exc)
            return rid, None

    def _known_waiting(self, names: list[str], own: str) -> list[Request]:
        """The undecided intents among ``names`` that this process has already read (no request)."""
        return [self._intents[rid] for rid in self._undecided(names, own)[:MAX_INTENTS_PER_ENTRY]
                if rid in self._intents]

    def _after_win(self, entry: LogEntry, decided: list[str]) -> None:
        """Derived work after creating ``entry``; never fails the commit (everything here is derived data)."""
        try:
            self._write_records(entry)
            if decided:
                parallel.background(functools.partial(self._delete_quietly, [intent_path(r) for r in decided]))
        except (TxnLogError, OSError) as exc:
            log.warning("after committing entry %d: %s (derived data only; readers compute it)", entry.seq, exc)
        if self._checkpoint_due(entry.seq):
            self._checkpoint_quietly(entry.seq)

    def _after_win_later(self, entry: LogEntry, decided: list[str]) -> Callable[[], None]:
        """:meth:`_after_win` in the background; returns a function waiting for it."""
        return parallel.background(functools.partial(self._after_win, entry, decided))

    def _write_records(self, entry: LogEntry) -> None:
        write_records(self.store, entry)
        with self._lock:
            self._written.add(entry.seq)

    def _delete_quietly(self, paths: list[str]) -> None:
        def rm(path: str) -> None:
            try:
                self.store.delete(path)
            except StoreError as exc:
                log.debug("could not delete %s: %s", path, exc)

        parallel.pmap(rm, paths)

    # -- checkpoints ------------------------------------------------------------------------------------------

    def write_checkpoint(self) -> None:
        """Checkpoint the state as of the last entry read, after making sure every partition record of the
        entries since the newest checkpoint exists (so entries below it may be deleted later). Idempotent.

        Raises:
            StoreError: the store failed (the checkpoint is then simply not there; readers read more entries).
        """
        with self._lock:
            st = self.state.copy()
            known = self.checkpoint_seq
        if st.seq < 0 or st.seq <= known:
            return
        if time.monotonic() - self._loaded_at > RECENT_S:
            self._learn_checkpoint()  # another process may have written newer ones since this one looked
        known = max(known, self.checkpoint_seq)
        if st.seq <= known:
            return
        entries = parallel.pmap(self.entry, range(known + 1, st.seq + 1))
        with self._lock:
            unsure = [e for e in entries if e.seq not in self._written]  # records this process wrote are there
        ensure_records(self.store, unsure)
        self._partition_checkpoints(entries)
        faults.point("txnlog.checkpoint.before")
        data = encode_json({"v": FORMAT_VERSION, **st.to_json(), "verified": verified_writes()})
        span = self.checkpoint_interval * NUMBERED_EVERY
        if not self.checkpoint_interval or (st.seq + 1) // span > (known + 1) // span:
            # numbered ones: fallback and truncation points, one whenever a multiple of the span was crossed since
            # the last checkpoint (a busy writer checkpoints whatever entry it has reached, not every K-th one)
            self.store.put(txn_checkpoint_path(st.seq), data)
        self.store.put(LAST_CHECKPOINT, data)
        faults.point("txnlog.checkpoint.after")
        with self._lock:
            self.checkpoint_seq = max(self.checkpoint_seq, st.seq)
            self._record_seq = {k: s for k, s in self._record_seq.items() if s > st.seq}
            self._written = {q for q in self._written if q > st.seq}
        span = self.checkpoint_interval * TRUNCATE_EVERY
        if self.checkpoint_interval and (st.seq + 1) // span > (known + 1) // span:
            self.truncate()

    def _partition_checkpoints(self, entries: list[LogEntry]) -> None:
        """Checkpoint the index of every partition whose records crossed a multiple of the partition checkpoint
        interval in ``entries``, so opening it stays cheap however long its history."""
        m = self.partition_checkpoint_interval
        if not m or self.open_partition is None:
            return
        due = sorted({(t, p) for e in entries for t, p, idx in e.touched if idx % m == m - 1})
        opener = self.open_partition

        def checkpoint(tp: tuple[str, int]) -> None:
            plog = opener(*tp)
            plog.refresh()
            plog.write_checkpoint()

        parallel.pmap(checkpoint, due)

    def truncate(self, grace_ms: int | None = None, *, now: float | None = None) -> int:
        """Delete log entries and checkpoints below the newest checkpoint that is older than the grace period,
        and intents already decided. Returns how many objects were deleted.

        The grace period must exceed :data:`MIN_LOG_GRACE_MS`: a process that read the log within
        :data:`RECENT_S` asks for its next entry by name, and must never find a deleted entry's name free (it
        would write that entry again where no reader looks). ``now`` (store clock, seconds) is for tests; by
        default ages are measured against the newest checkpoint.

        Raises:
            InvalidOptionError: a grace period below :data:`MIN_LOG_GRACE_MS`.
        """
        grace = self.log_grace_ms if grace_ms is None else grace_ms
        if grace < MIN_LOG_GRACE_MS:
            raise InvalidOptionError(
                f"log truncation grace period {grace} ms is below {MIN_LOG_GRACE_MS} ms: a process that read the "
                "log less than that ago could write a deleted entry again"
            )
        infos = [i for i in self.store.list_info(TXN_CHECKPOINT) if parse_seq(i.path.rsplit("/", 1)[-1]) is not None]
        if not infos:
            return 0
        newest = max(i.mtime for i in infos) if now is None else now
        old = [i for i in infos if (newest - i.mtime) * 1000 >= grace]
        if not old:
            return 0
        keep = max(parse_seq(i.path.rsplit("/", 1)[-1]) or 0 for i in old)
        doomed = [i.path for i in infos if (parse_seq(i.path.rsplit("/", 1)[-1]) or 0) < keep]
        for name in self.store.list(TXN_LOG, limit=None):
            n = parse_seq(name)
            if n is not None and n <= keep:
                doomed.append(f"{TXN_LOG}/{name}")
        with self._lock:
            st = self.state
            doomed += [f"{TXN_INTENTS}/{n}" for n in self.store.list(TXN_INTENTS)
                       if n.endswith(".json") and decided_by_name(n[:-5], st)]
        self._delete_quietly(doomed)
        return len(doomed)


def write_records(store: Store, entry: LogEntry) -> None:
    """Write the partition records ``entry`` defines, concurrently. Different bytes already at a record's place
    mean that partition is damaged: logged (``verify`` reports it), never raised."""
    recs = list(records_of(entry).values())

    def put(rec: PartitionRecord) -> None:
        path = marker_path(rec.topic, rec.partition, rec.idx)
        faults.point("record.before")
        if not store.put_if_absent(path, rec.to_bytes()):
            log.error("partition %s/%d is damaged: %s holds other bytes than log entry %d defines", rec.topic,
                      rec.partition, path, entry.seq)
        faults.point("record.after")

    parallel.pmap(put, recs)


def ensure_records(store: Store, entries: list[LogEntry]) -> int:
    """Make sure every partition record of ``entries`` exists: one listing per touched partition, then the
    missing records written. Returns how many were written."""
    want: dict[tuple[str, int], dict[int, LogEntry]] = {}
    for e in entries:
        for topic, p, idx in e.touched:
            want.setdefault((topic, p), {})[idx] = e

    def check(item: tuple[tuple[str, int], dict[int, LogEntry]]) -> int:
        (topic, p), by_idx = item
        first = min(by_idx)
        after = seq_name(first - 1) if first > 0 else None
        present = {parse_seq(n) for n in store.list(marker_dir(topic, p), start_after=after)}
        missing = [e for idx, e in sorted(by_idx.items()) if idx not in present]
        for e in missing:
            rec = records_of(e)[(topic, p)]
            if not store.put_if_absent(marker_path(topic, p, rec.idx), rec.to_bytes()):
                log.error("partition %s/%d is damaged: record %d holds other bytes than log entry %d defines",
                          topic, p, rec.idx, e.seq)
        return len(missing)

    return sum(parallel.pmap(check, list(want.items())))
