"""Derived work of :class:`~coordinator.txnlog.TransactionLog`: partition records after an entry is won, and
checkpoints (see ``docs/design.md``).

After winning, the writer writes the entry's derived partition records, and every ``checkpoint_interval`` entries
a checkpoint, after making sure every partition record of the entries it covers exists. None of it decides
anything: readers compute what is missing from the log.

A mixin of :class:`~coordinator.txnlog.TransactionLog`, which holds the state it uses (declared below for type
checking only).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator import faults, parallel
from coordinator.errors import CommitStateUnknownError, StoreError, TxnLogError
from coordinator.layout import (
    LAST_CHECKPOINT,
    marker_dir,
    marker_path,
    parse_seq,
    seq_name,
    txn_checkpoint_path,
)
from coordinator.partrecords import PartitionRecord, records_at, records_of
from coordinator.records import FORMAT_VERSION, CommitItem, Item, LogEntry, encode_json
from coordinator.state import CoordinatorState
from coordinator.store import Store

if TYPE_CHECKING:
    from coordinator.partition import PartitionLog

log = logging.getLogger("coordinator.txnlog")  # the transaction log logs under one name

#: Whenever a checkpoint crosses a multiple of this many checkpoint intervals, its writer also truncates the log.
TRUNCATE_EVERY = 16
#: attempts at writing an entry's partition records after its commit point
RECORD_ATTEMPTS = 3
#: Whenever a checkpoint crosses a multiple of this many checkpoint intervals, it is also kept under its own number
#: (fallback, truncation point).
NUMBERED_EVERY = 4


def recent_s() -> float:
    """:data:`coordinator.txnlog.RECENT_S`, looked up at call time (tests scale the log's clock down)."""
    from coordinator import txnlog

    return txnlog.RECENT_S


class LogCheckpoints:
    """Partition records, coordinator checkpoints and partition checkpoints (see the module docstring); a mixin of
    :class:`~coordinator.txnlog.TransactionLog`."""

    if TYPE_CHECKING:
        store: Store
        state: CoordinatorState
        checkpoint_seq: int
        _unproven: list[LogEntry]
        checkpoint_interval: int
        partition_checkpoint_interval: int
        background_checkpoints: bool
        open_partition: Callable[[str, int], PartitionLog] | None
        _lock: threading.RLock
        _checkpointing: threading.Lock
        _pending_checkpoint: Callable[[], None] | None
        _loaded_at: float
        _record_seq: dict[tuple[str, int, int], int]
        _written: set[int]
        _written_lock: threading.Lock
        _records_found: set[str]
        _records_lock: threading.Lock

        # reading and truncating the log (TransactionLog)
        def entry(self, seq: int) -> LogEntry: ...
        def _learn_checkpoint(self) -> None: ...
        def _forget_records_below(self, seq: int) -> None: ...
        def _answerable(self, ids: list[str]) -> list[str]: ...
        def _answer_intents(self, seq: int, items: list[Item]) -> None: ...
        def truncate(self, grace_ms: int | None = None, *, now: float | None = None) -> int: ...

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

    def _after_win(self, entry: LogEntry, decided: list[str]) -> None:
        """Derived work after creating ``entry``; never fails the commit (everything here is derived data)."""
        try:
            for attempt in range(RECORD_ATTEMPTS):
                # an acknowledged commit whose records are written is one a damaged entry cannot take away: retry a
                # failed write a few times before leaving it to readers and checkpoint writers
                try:
                    self._write_records(entry)
                    break
                except (TxnLogError, OSError):
                    if attempt + 1 == RECORD_ATTEMPTS:
                        raise
                    time.sleep(0.05 * 4 ** attempt)
            items = {i.request: i for i in entry.items}
            self._answer_intents(entry.seq, [items[rid] for rid in self._answerable(decided) if rid in items])
        except (TxnLogError, OSError) as exc:
            log.warning("after committing entry %d: %s (readers compute the records; its commits are answered once "
                        "they are written)", entry.seq, exc)
        if self._checkpoint_due(entry.seq):
            self._checkpoint_quietly(entry.seq)

    def _after_win_later(self, entry: LogEntry, decided: list[str]) -> Callable[[], None]:
        """:meth:`_after_win` in the background; returns a function waiting for it."""
        return parallel.background(functools.partial(self._after_win, entry, decided))

    def _write_records(self, entry: LogEntry, written: Callable[[tuple[str, int]], None] | None = None) -> None:
        """Write the partition records of ``entry`` (see :func:`write_records`), calling ``written`` with each
        (topic, partition) once its record is there.

        Raises:
            StoreError: the store failed (records written before that are there).
        """

        def found(rec: PartitionRecord) -> None:
            self._record_found(marker_path(rec.topic, rec.partition, rec.idx))
            if written is not None:
                written((rec.topic, rec.partition))

        write_records(self.store, entry, found)
        with self._written_lock:  # not the log's lock, which a writer holds across a whole try
            self._written.add(entry.seq)

    def _records_ahead(self, request: str) -> Callable[[list[LogEntry]], list[Callable[[], object]]]:
        """A read-ahead (see :meth:`~coordinator.txnlog.TransactionLog.refresh`) for a committer waiting for
        ``request`` to be decided: where an entry read (not yet proven) commits it, look whether the partition
        records that entry defines exist, while the proof runs. What is found is a fact about those objects,
        whichever entry named them: :meth:`secure_records` then does not look again."""

        def ahead(entries: list[LogEntry]) -> list[Callable[[], object]]:
            paths = []
            for entry in entries:
                item = next((i for i in entry.items if i.request == request), None)
                if isinstance(item, CommitItem):
                    parts = {(p.topic, p.partition) for p in item.parts if p.rows}
                    paths += [marker_path(r.topic, r.partition, r.idx) for r in records_at(entry, parts)]
            return [functools.partial(self._look_for_record, path) for path in paths]

        return ahead

    def _look_for_record(self, path: str) -> None:
        # runs in the request pool while the refresh that started it holds the log's lock: never take that lock
        if self.store.exists(path):
            self._record_found(path)

    def _record_found(self, path: str) -> None:
        """Note that partition record ``path`` exists (:meth:`secure_records` then does not look for it); a bounded
        memory, forgotten whole when full."""
        with self._records_lock:
            if len(self._records_found) > 10_000:
                self._records_found.clear()
            self._records_found.add(path)

    def secure_records(self, seq: int, item: CommitItem) -> None:
        """Make sure a second copy of commit ``item``, decided at entry ``seq``, is durable before it is
        acknowledged: the partition records entry ``seq`` defines where it published rows exist (written by this
        process, found, or written now). An entry a checkpoint covers needs nothing (the checkpoint holds its
        decisions). Without this, one damaged entry could take an acknowledged commit away (see
        ``docs/design.md``, "Damaged log objects").

        Raises:
            CommitStateUnknownError: the records could not be written after :data:`RECORD_ATTEMPTS` attempts (the
                commit is decided; committing again finishes the records and answers).
        """
        parts = {(p.topic, p.partition) for p in item.parts if p.rows}
        # not under the log's lock, which a writer holds across a whole try: a checkpoint seq read stale only
        # makes this look for records it need not
        with self._written_lock:
            if not parts or seq in self._written or seq <= self.checkpoint_seq:
                return
        last: BaseException | None = None
        for attempt in range(RECORD_ATTEMPTS):
            try:
                entry = self.entry(seq)
                recs = records_at(entry, parts)
                with self._records_lock:
                    unseen = [r for r in recs if marker_path(r.topic, r.partition, r.idx) not in self._records_found]
                there = parallel.pmap(lambda r: self.store.exists(marker_path(r.topic, r.partition, r.idx)), unseen)
                parallel.pmap(functools.partial(self._create_record, seq),
                              [r for r, found in zip(unseen, there, strict=True) if not found])
                return
            except (TxnLogError, OSError) as exc:
                last = exc
                if attempt + 1 < RECORD_ATTEMPTS:
                    time.sleep(0.05 * 4 ** attempt)
        raise CommitStateUnknownError(
            f"the commit was decided at transaction log entry {seq} (readers see it), but its partition records "
            f"could not be written, so it is not acknowledged: until they are, one damaged object could take it "
            f"away. Committing again (commit_transaction(), or the Spark job again with the same txnAppId and "
            f"txnVersion) writes them and answers ({last})"
        ) from last

    def _create_record(self, seq: int, rec: PartitionRecord) -> None:
        """Create partition record ``rec`` of entry ``seq``; one created meanwhile by another writer must hold the
        same bytes (logged as damage of that partition otherwise).

        Raises:
            StoreError: the store failed.
        """
        path = marker_path(rec.topic, rec.partition, rec.idx)
        body = rec.to_bytes()
        if not self.store.put_if_absent(path, body) and self.store.get(path) != body:
            log.error("partition %s/%d is damaged: its record %d holds other bytes than log entry %d defines",
                      rec.topic, rec.partition, rec.idx, seq)

    def _delete_quietly(self, paths: list[str], failed: Callable[[str], None] | None = None) -> None:
        """Delete ``paths`` in parallel; a delete that fails is logged (and passed to ``failed``), never raised."""

        def rm(path: str) -> None:
            try:
                self.store.delete(path)
            except StoreError as exc:
                log.debug("could not delete %s: %s", path, exc)
                if failed is not None:
                    failed(path)

        parallel.pmap(rm, paths)

    # -- checkpoints ------------------------------------------------------------------------------------------

    def write_checkpoint(self) -> None:
        """Checkpoint the state as of the last entry read, after making sure every partition record of the
        entries since the newest checkpoint exists (so entries below it may be deleted later). Idempotent.

        Raises:
            StoreError: the store failed (the checkpoint is then simply not there; readers read more entries).
        """
        with self._lock:
            if self._unproven:
                return  # a refresh failed before proving its entries: only a proven view is checkpointed
            st = self.state.copy()
            known = self.checkpoint_seq
        if st.seq < 0 or st.seq <= known:
            return
        if time.monotonic() - self._loaded_at > recent_s():
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
        data = encode_json({"v": FORMAT_VERSION, **st.to_json()})
        span = self.checkpoint_interval * NUMBERED_EVERY
        if not self.checkpoint_interval or (st.seq + 1) // span > (known + 1) // span:
            # numbered ones: fallback and truncation points, one whenever a multiple of the span was crossed since
            # the last checkpoint (a busy writer checkpoints whatever entry it has reached, not every K-th one)
            self.store.put(txn_checkpoint_path(st.seq), data)
        self.store.put(LAST_CHECKPOINT, data)
        faults.point("txnlog.checkpoint.after")
        with self._lock:
            self.checkpoint_seq = max(self.checkpoint_seq, st.seq)
            self._forget_records_below(st.seq)
            with self._written_lock:
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


def write_records(store: Store, entry: LogEntry, created: Callable[[PartitionRecord], None] | None = None) -> None:
    """Write the partition records ``entry`` defines, concurrently, calling ``created`` with each one this call
    created. Different bytes already at a record's place mean that partition is damaged: logged (``verify``
    reports it), never raised. Records carry no writer token on purpose: a record's bytes are a pure function of
    its log entry, so equal bytes really are the same record, whoever wrote them (see :mod:`coordinator.store`).

    Raises:
        StoreError: the store failed (records written before that are there).
    """
    recs = list(records_of(entry).values())

    def put(rec: PartitionRecord) -> None:
        path = marker_path(rec.topic, rec.partition, rec.idx)
        faults.point("record.before")
        if not store.put_if_absent(path, rec.to_bytes()):
            log.error("partition %s/%d is damaged: %s holds other bytes than log entry %d defines", rec.topic,
                      rec.partition, path, entry.seq)
        elif created is not None:
            created(rec)
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
