"""The transaction log: an ordered sequence of small JSON objects, each created with ``put_if_absent``, each deciding
a group of requests (see ``docs/design.md``).

* **Opening** reads the newest checkpoint (``_txn/checkpoint/_last.json``) and the entries after it.
* **Refreshing** lists the entries after the last one read (one request when nothing is new); far behind, it jumps
  to the newest checkpoint instead of reading every entry.
* **Submitting** a request (:meth:`TransactionLog.submit`) builds the next entry from it and from every waiting
  intent, and creates it; a writer that loses the race publishes its request as an intent, backs off with jitter and
  usually finds it decided by the winner. The entry's creation is the commit point of everything in it
  (:mod:`coordinator.groupcommit`).
* After winning, the writer writes the entry's derived partition records, and every ``checkpoint_interval`` entries
  a checkpoint, after making sure every partition record of the entries it covers exists
  (:mod:`coordinator.logcheckpoint`).

Thread-safe; one instance per process and store is enough.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator.answerwait import ANSWER_WAIT_S
from coordinator.decisions import Outcome, decided_by_name, fenced, outcome, outcome_of_item
from coordinator.errors import REPAIR_LOG_HINT, CommitStateUnknownError, CorruptLogError, InvalidOptionError, StoreError
from coordinator.groupcommit import GroupCommit
from coordinator.layout import (
    LAST_CHECKPOINT,
    TXN_CHECKPOINT,
    TXN_INTENTS,
    TXN_LOG,
    parse_seq,
    txn_log_path,
)
from coordinator.logcheckpoint import LogCheckpoints
from coordinator.logcheckpoint import ensure_records as ensure_records
from coordinator.logcheckpoint import write_records as write_records
from coordinator.logdamage import LogDamage
from coordinator.logfollow import LogFollow
from coordinator.logproof import LogProof
from coordinator.partrecords import PartitionRecord, record_of
from coordinator.probe import ensure_format as ensure_format
from coordinator.records import Item, LogEntry, check_format, decode_json
from coordinator.requests import Request
from coordinator.state import CoordinatorState
from coordinator.store import Store

if TYPE_CHECKING:
    from coordinator.partition import PartitionLog

#: Given entries read and not yet proven, read-only requests to run while they are proven (see
#: :meth:`TransactionLog.refresh`).
ReadAhead = Callable[[list[LogEntry]], list[Callable[[], object]]]

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_INTERVAL = 4
#: Entries and checkpoints below the newest checkpoint older than this are deleted (protects readers mid-open).
DEFAULT_LOG_GRACE_MS = 10 * 60_000
#: The shortest grace period log truncation accepts (see TransactionLog.truncate): twice RECENT_S.
MIN_LOG_GRACE_MS = 60_000
#: A process this many entries behind jumps to the newest checkpoint instead of reading them all.
JUMP_ENTRIES = 64
#: A process that read the log this recently refreshes by asking for the next entry by name.
RECENT_S = 30.0
_RECENT_KEPT = 4096
_DECISIONS_KEPT = 20_000


def now_ms() -> int:
    return int(time.time() * 1000)


class TransactionLog(GroupCommit, LogFollow, LogCheckpoints, LogProof, LogDamage):
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
        #: the recent mean gap between entries this view took in (seconds), and when it took in the last
        self._entry_gap, self._entry_at = 0.0, time.monotonic()
        self._decisions: OrderedDict[str, tuple[Item, int]] = OrderedDict()
        self._intents: dict[str, Request] = {}
        #: when this process last learned an outcome from an answer, and the recent mean time from an intent's put
        #: to its answer (seconds; see :mod:`coordinator.answers`)
        self._answered_at, self._answer_wait = -1e9, ANSWER_WAIT_S
        #: decided intents this process started deleting (:meth:`~coordinator.intentqueue.IntentQueue._clear_decided`)
        self._cleared: OrderedDict[str, None] = OrderedDict()
        self._cleared_lock = threading.Lock()
        self._refreshed = -1e9
        #: entries applied to the view but not yet proven to be the log's (see :mod:`coordinator.logproof`): their
        #: decisions are taken only once proven
        self._unproven: list[LogEntry] = []
        #: entries this process created that could not be proven the log's (a ghost it could not delete, or the
        #: store failed the proof), by seq: never taken as a decision until judged (see :mod:`coordinator.logproof`)
        self._suspects: dict[int, LogEntry] = {}
        #: the view's seq when each request still undecided first published its intent: a retry of the request
        #: (a caller after ``CommitStateUnknownError``) whose producer expired meanwhile looks for its decision from
        #: there, as the first try did
        self._waited: OrderedDict[str, int] = OrderedDict()
        #: (pid, epoch, n) of transactions this process gave up deciding (see GroupCommit.abandon)
        self._abandoned: OrderedDict[tuple[int, int, int], float] = OrderedDict()
        self._loaded_at = -1e9
        #: entries whose partition records this process wrote (the checkpoint writer need not check them)
        self._written: set[int] = set()
        self._written_lock = threading.Lock()
        #: partition records a waiting committer found while its decision was being proven (see secure_records)
        self._records_found: set[str] = set()
        self._records_lock = threading.Lock()
        self._checkpointing = threading.Lock()
        self._pending_checkpoint: Callable[[], None] | None = None
        self._jumped_at = -1
        #: the writer token of entry ``_jumped_at`` as the checkpoint jumped to records it
        self._jumped_token: str | None = None
        self._probed = False
        #: a listing of ``_txn/intents/`` started for a request about to be submitted, and when (see
        #: :meth:`~coordinator.groupcommit.GroupCommit.list_intents_ahead`)
        self._intents_ahead: tuple[float, Callable[[], list[str]]] | None = None
        #: guards ``_intents_ahead`` alone: a caller starting a listing ahead never waits for the log's lock, which
        #: another thread holds across a whole try (the previous commit of the same producer, say)
        self._ahead_lock = threading.Lock()
        self._init_serving()
        #: damaged checkpoints this process skipped (named when no other checkpoint will do)
        self._damaged_checkpoints: set[str] = set()
        #: the caller's read-ahead for the refresh under way (see :meth:`refresh`)
        self._read_ahead: ReadAhead | None = None
        #: entries the last refresh by name found (how many it asks for next time: see READ_AHEAD_ENTRIES)
        self._found_last = 0

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
        started = time.monotonic()
        ck = self._read_last_checkpoint()
        self._opened = True
        if ck is not None:
            self._reset(ck)
        self._list_forward(checked=True)
        self._refreshed = started

    # -- reading ----------------------------------------------------------------------------------------------

    def last_checkpoint(self) -> CoordinatorState | None:
        """The state of the newest coordinator checkpoint in the store (None: there is none)."""
        return self._read_last_checkpoint()

    def _read_last_checkpoint(self, above: int = -1) -> CoordinatorState | None:
        """The newest checkpoint: ``_last.json``, or the newest numbered one that decodes; None when neither
        is newer than entry ``above``. ``_last.json`` is a plain put that a slow writer may have put back to an
        older state, so a caller that needs one newer than its view (it found the entries after its view
        truncated) looks at the numbered ones too. A damaged checkpoint is skipped for the next one (logged, and
        named in the error of a reader no checkpoint will do for)."""
        try:
            ck = self._decode_checkpoint(self.store.get(LAST_CHECKPOINT), LAST_CHECKPOINT)
            if ck.seq > above:
                return ck
        except FileNotFoundError:
            pass
        except CorruptLogError as exc:
            self._skip_damaged(LAST_CHECKPOINT, exc)
        names = [n for n in self.store.list(TXN_CHECKPOINT) if (q := parse_seq(n)) is not None and q > above]
        for name in reversed(names):
            where = f"{TXN_CHECKPOINT}/{name}"
            try:
                return self._decode_checkpoint(self.store.get(where), where)
            except FileNotFoundError:
                continue
            except CorruptLogError as exc:
                self._skip_damaged(where, exc)
        return None

    def _decode_checkpoint(self, data: bytes, where: str) -> CoordinatorState:
        d = decode_json(data, where, "coordinator checkpoint")
        check_format(d, where)
        st = CoordinatorState.from_json(d, where)
        self._loaded_at = time.monotonic()
        return st

    def _reset(self, st: CoordinatorState) -> None:
        self._state = st
        self.checkpoint_seq = max(self.checkpoint_seq, st.seq)
        self._recent.clear()
        self._unproven.clear()
        self._forget_records_below(st.seq)

    def _get_entry(self, seq: int) -> LogEntry | None:
        """Log entry ``seq`` (None: there is none).

        Raises:
            CorruptLogError: the entry is damaged (naming it and the repair).
        """
        got = self._read_entry(seq)
        if isinstance(got, CorruptLogError):
            raise CorruptLogError(f"{got}: {REPAIR_LOG_HINT}") from got
        return got

    def refresh(self, *, read_ahead: ReadAhead | None = None) -> CoordinatorState:
        """Read what was appended since the last read (one LIST when nothing is new) and apply it.

        ``read_ahead``, given the entries read and not yet proven the log's, returns read-only requests (reads of
        the data those entries name) to run while the proof runs; they may read what a ghost names and must not
        use or return it: the caller uses their results only through what this refresh returns, proven.

        Raises:
            CorruptLogError: an entry cannot be decoded, or the log has a gap no checkpoint covers.
            UnsupportedFormatError: the store was written by another format.
            StoreError: the store failed.
        """
        asked = time.monotonic()
        with self._lock:
            if self._opened and read_ahead is None and not self._unproven and self._refreshed > asked:
                # another thread's refresh started after this call and read what this one would have: threads of
                # one process waiting for the log's lock share one read instead of making one each
                return self._state
            self._read_ahead = read_ahead
            try:
                if not self._opened:
                    self._open()
                else:
                    self._catch_up()
            finally:
                self._read_ahead = None
            return self._state

    def _apply(self, entry: LogEntry) -> None:
        """Apply ``entry`` (the next one, linked to the view) to the view, unproven."""
        self.state.apply(entry)
        self._remember(entry, proven=False)

    def _remember(self, entry: LogEntry, *, proven: bool = True) -> None:
        now = time.monotonic()
        self._entry_gap += 0.1 * (now - self._entry_at - self._entry_gap)
        self._entry_at = now
        self._recent[entry.seq] = entry
        while len(self._recent) > _RECENT_KEPT:
            _, old = self._recent.popitem(last=False)
            for key in old.touched:
                if self._record_seq.get(key) == old.seq:
                    del self._record_seq[key]
        for topic, p, idx in entry.touched:
            self._record_seq[(topic, p, idx)] = entry.seq
        if not proven:
            self._unproven.append(entry)
        elif not self._suspect(entry):
            self._take_decisions(entry)
        while len(self._decisions) > _DECISIONS_KEPT:
            self._decisions.popitem(last=False)

    def _take_decisions(self, entry: LogEntry) -> None:
        """Record the decisions of ``entry`` (one of the log's) by request id."""
        for item in entry.items:
            self._decisions[item.request] = (item, entry.seq)

    def _forget_records_below(self, seq: int) -> None:
        """Stop computing partition records from entries up to ``seq`` (a checkpoint's: by the checkpoint invariant
        their records exist) that are no longer in memory; the ones still in memory cost nothing to keep, and a
        partition index catching up over them (a partition checkpoint, every few records) computes them instead
        of reading each one."""
        self._record_seq = {k: s for k, s in self._record_seq.items() if s > seq or s in self._recent}

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
            self._forget_records_below(seq)

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
        return record_of(self.entry(seq), topic, partition)

    def decision(self, request_id: str) -> tuple[Item, int] | None:
        """The item that decided ``request_id`` and its entry, if this process read it."""
        return self._decisions.get(request_id)  # atomic without the lock (see entry)

    # -- what became of a request -----------------------------------------------------------------------------

    def _outcome(self, req: Request, *, since: int | None = None) -> Outcome | None:
        """What became of ``req``: the deciding item if this process read it (and proved it the log's), else what
        the state says. A producer request of a fenced epoch is answered from the state's memory of that epoch
        (decided before the fence, or never: ``fenced``). Where the state cannot tell (the producer expired, maybe
        initialised again since under a new pid, or the epoch is older than the memory) and this process jumped
        over entries since the request first waited as an intent at entry ``since``, those entries are read to
        find out; what they cannot show is ``unknown``.

        Only a proven view answers: entries a refresh applied but could not prove (it failed half way) are proven
        first, since the state already holds them while their decisions are not taken yet (an expiry among them
        would answer ``fenced`` for a request one of them committed). None when they cannot be proven (the log
        moved on past them: the caller refreshes, or its next entry is refused until it has).

        Raises:
            StoreError: the store failed while proving the view.
        """
        if self._unproven and not self._prove():
            return None
        seen = self._decisions.get(req.id)
        if seen is not None:
            return outcome_of_item(*seen)
        gone = fenced(req, self.state)
        if gone is None:
            return outcome(req, self.state)
        tid = getattr(req, "tid", None)
        # the state remembers nothing of a pid it no longer holds (the id expired, and maybe a new process has
        # initialised it again since, under a new pid)
        meta = self.state.producers.get(tid) if tid is not None else None
        forgotten = tid is not None and (meta is None or meta.pid != getattr(req, "pid", None))
        if not forgotten and gone.status != "unknown":
            return gone  # proven by the state's memory of the epochs it fenced
        if since is None:
            since = self._waited.get(req.id)
        if self._decided_by_suspect(req):
            raise CommitStateUnknownError(
                f"request {req.id} was decided in a log entry this process created but could not prove to be the "
                "log's (a number a log truncation may have freed), and its producer has moved on since: whether "
                "the log holds that decision cannot be told; read the data to find out"
            )
        if since is not None and self._jumped_at > since:
            found = self._find_decision(req.id, since, self._jumped_at, gaps_unknown=True)
            if found is not None:
                return outcome_of_item(*found)
        return gone

    def truncate(self, grace_ms: int | None = None, *, now: float | None = None) -> int:
        """Delete log entries and checkpoints below the newest checkpoint that is older than the grace period,
        and intents already decided. Returns how many objects were deleted.

        The entry that checkpoint ends at stays: a process whose view is older lists it, finds that it does not
        follow on from its view, and jumps to the checkpoint. Were it deleted too, a quiet log could list nothing
        after such a view, and the process would write its next entry under a deleted name, below the checkpoint,
        where no reader looks (an acknowledged commit lost).

        The checkpoint kept must decode (the newest old one that does): everything below it is deleted, so a damaged
        one would leave a reader whose ``_last.json`` is damaged too nothing to open from.

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
        keep = self._truncation_point(sorted((parse_seq(i.path.rsplit("/", 1)[-1]) or 0 for i in old), reverse=True))
        if keep is None:
            return 0
        doomed = [i.path for i in infos if (parse_seq(i.path.rsplit("/", 1)[-1]) or 0) < keep]
        for name in self.store.list(TXN_LOG, limit=None):
            n = parse_seq(name)
            if n is not None and n < keep:  # entry `keep` stays: views older than it list it and jump
                doomed.append(f"{TXN_LOG}/{name}")
        with self._lock:
            st = self.state
            doomed += [f"{TXN_INTENTS}/{n}" for n in self.store.list(TXN_INTENTS)
                       if n.endswith(".json") and decided_by_name(n[:-5], st)]
        self._delete_quietly(doomed)
        return len(doomed)

