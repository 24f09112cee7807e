"""Safety never rests on timing: a process paused for any length, anywhere, never loses or invents a commit.

Log truncation frees the numbers of the entries it deletes. A process whose view is older than a truncation can
create, or read, an object under a freed number (a *ghost*, not the log's entry). Each test pauses one process at
a store call (the pause is simulated: other processes do, "while it is paused", everything a pause longer than
every grace period would let them do, including a truncation judged on a store clock hours ahead) and checks that
what was acknowledged is readable and nothing else is. See docs/design.md, "What timing can and cannot do".
"""

from __future__ import annotations

import builtins
import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from coordinator import (
    CommitStateUnknownError,
    Producer,
    ProducerFencedError,
    Store,
    StoreError,
    TransactionCoordinator,
    create_topic,
    faults,
    open_store,
    parallel,
    read_snapshot,
)
from coordinator import inspect as ti
from coordinator.backends import local as local_backend
from coordinator.layout import TXN_CHECKPOINT, TXN_LOG, parse_seq, txn_log_path
from coordinator.state import CoordinatorState
from core_helpers import LostReplyStore

_T = pa.schema([pa.field("v", pa.string(), nullable=False)])
#: a truncation "an hour later" on the store's clock: every checkpoint is older than any grace period
_HOUR_S = 3600.0


class _Paused(LostReplyStore):
    """A real store that runs ``after(kind, path, result)`` once a call has been applied by the store, before its
    answer reaches the caller: a process paused inside a store call."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.after: Callable[[str, str], None] = lambda kind, path: None

    before: Callable[[str, str], None] = staticmethod(lambda kind, path: None)  # type: ignore[assignment]

    def get(self, path: str) -> bytes:
        self.before("get", path)
        try:
            data = super().get(path)
        except FileNotFoundError:
            self.after("get-missing", path)
            raise
        self.after("get", path)
        return data

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        self.before("list", prefix)
        names = super().list(prefix, start_after, limit)
        self.after("list", prefix)
        return names

    def put_if_absent(self, path: str, data: bytes) -> bool:
        created = super().put_if_absent(path, data)
        self.after("put_if_absent", path)
        return created


def _lake(url: str) -> str:
    create_topic(open_store(url), "t", _T, 1)
    return url


def _memory() -> str:
    return _lake(f"memory://timing-{uuid.uuid4().hex}")


def _values(url: str) -> list[str]:
    return sorted(read_snapshot(open_store(url), ["t"])["t"].column("v").to_pylist())


def _entries(url: str) -> list[int]:
    return [q for n in open_store(url).list(TXN_LOG) if (q := parse_seq(n)) is not None]


def _others_move_on_and_truncate(url: str, n: int = 24) -> None:
    """Another process commits ``n`` transactions (checkpointing every 4 entries, numbered every 16) and then
    truncates the log with a store clock an hour ahead: every entry below the newest numbered checkpoint goes."""
    busy = Producer(open_store(url), f"busy-{uuid.uuid4().hex[:6]}",
                    coordinator=TransactionCoordinator(open_store(url), checkpoint_interval=4))
    busy.init_transactions()
    for i in range(n):
        with busy.transaction():
            busy.send("t", [{"v": f"{busy.transactional_id}-{i}"}])
    logs = busy.coordinator.log
    logs.flush()
    logs.refresh()
    logs.write_checkpoint()
    assert logs.truncate(now=time.time() + _HOUR_S) > 0


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    done: list[bool] = []

    def run() -> None:
        if not done:
            done.append(True)
            with faults.injected(None):
                fn()

    return run


def _assert_acknowledged_is_readable(url: str, acknowledged: list[str]) -> None:
    values = _values(url)
    for v in acknowledged:
        assert v in values, f"acknowledged commit {v!r} is not readable: lost"
    assert len(values) == len(set(values)), "a value was published twice"
    assert ti.verify(open_store(url)) == []


def test_a_producer_paused_inside_a_read_of_the_log_never_writes_under_a_freed_number() -> None:
    """G5, issue 26 point 1. A producer reads the log and pauses *inside* the read (here: its by-name refresh asked
    for the next entry, was told it does not exist, and the answer reaches it after the pause). Meanwhile others
    move the log on and a truncation frees the numbers below its checkpoint. Its next commits must not be written
    under freed numbers and acknowledged: before the fix, the freshness of its view was measured from after the
    read, so a later by-name refresh trusted it and 171 of 349 acknowledged commits of a continued run were lost."""
    url = _memory()
    net = _Paused(open_store(url))
    p = Producer(net, "paused", coordinator=TransactionCoordinator(net, checkpoint_interval=0))
    p.init_transactions()
    view = p.coordinator.log.state.seq
    pause = _once(lambda: _others_move_on_and_truncate(url))
    net.after = lambda kind, path: pause() if kind == "get-missing" and path == txn_log_path(view + 1) else None
    p.coordinator.log.refresh()  # the read that pauses
    assert view + 1 not in _entries(url), "the truncation did not free the number the paused read asked for"
    acknowledged = []
    for i in range(5):
        with p.transaction():
            p.send("t", [{"v": f"paused-{i}"}])
        acknowledged.append(f"paused-{i}")
    _assert_acknowledged_is_readable(url, acknowledged)


@pytest.mark.parametrize("where", ["entry-create", "checkpoint-list"])
def test_a_committer_paused_inside_its_entry_write_is_never_acknowledged_for_a_ghost(where: str) -> None:
    """G5. The pause is inside the conditional create (its request applied long after it was sent) or right after
    it, before the writer proves the entry: the object lands under a number a truncation freed meanwhile. It must
    not count as the log's entry; the commit is decided again (or reported unknown), and what is acknowledged is
    readable."""
    url = _memory()
    net = _Paused(open_store(url))
    p = Producer(net, "paused", coordinator=TransactionCoordinator(net, checkpoint_interval=0))
    p.init_transactions()
    p.begin_transaction()
    p.send("t", [{"v": "paused"}])
    p.flush()
    pause = _once(lambda: _others_move_on_and_truncate(url))
    created: list[str] = []

    def before_create(name: str) -> None:
        if name == "txnlog.entry.before" and where == "entry-create":
            pause()  # the request is "in flight" while the others move on: applied after the truncation

    def after(kind: str, path: str) -> None:
        if kind == "put_if_absent" and path.startswith(TXN_LOG + "/"):
            created.append(path)
        if kind == "list" and path == TXN_CHECKPOINT and created and where == "checkpoint-list":
            pause()  # the writer's proof itself is slow: nothing it learns later may be trusted blindly

    net.after = after
    with faults.injected(before_create):
        try:
            p.commit_transaction()
            acknowledged = ["paused"]
        except CommitStateUnknownError:
            acknowledged = []
    assert created
    _assert_acknowledged_is_readable(url, acknowledged)


def test_a_ghost_linked_by_the_local_store_after_a_pause_is_not_accepted(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """G5, issue 26 point 2. Local store: the process pauses between writing the temp file and ``os.link``ing it
    to the entry's name; a truncation frees that name meanwhile, and the link succeeds. The linked entry carries the
    temp file's modification time (before the checkpoint), so the former check, which compared modification times,
    took it for the log's entry and acknowledged a commit no reader sees."""
    url = _lake(f"file://{tmp_path / 'lake'}")
    p = Producer(open_store(url), "paused", coordinator=TransactionCoordinator(open_store(url), checkpoint_interval=0))
    p.init_transactions()
    p.begin_transaction()
    p.send("t", [{"v": "paused"}])
    p.flush()
    pause = _once(lambda: _others_move_on_and_truncate(url))
    real_link = os.link

    def slow_link(src: str, dst: str) -> None:
        if os.sep + "log" + os.sep in dst:
            pause()
        real_link(src, dst)

    monkeypatch.setattr(local_backend.os, "link", slow_link)
    try:
        p.commit_transaction()
        acknowledged = ["paused"]
    except CommitStateUnknownError:
        acknowledged = []
    monkeypatch.undo()
    _assert_acknowledged_is_readable(url, acknowledged)


def _batch_job(url: str, value: str) -> tuple[Any, Any, Callable[[], Any]]:
    """A Spark batch job with ``transactionalId`` "job", driven as Spark drives it: its driver's writer, the message
    of the one task that staged ``value``, and a function that starts the job again (a new epoch of the id)."""
    from pyspark.sql.types import StringType, StructField, StructType

    from txnsink import make_writer
    from txnsink.staging import TaskIds, stage_batches

    schema = StructType([StructField("v", StringType(), False)])
    opts = {"path": url, "topic": "t", "transactionalId": "job"}
    w = make_writer(opts, schema, False)
    rows = iter([pa.RecordBatch.from_pylist([{"v": value}], schema=_T)])
    msg = stage_batches(open_store(url), w.plan, rows, TaskIds(0, 0, 0), w.txn)
    return w, msg, lambda: make_writer(opts, schema, False)


def test_a_fenced_answer_is_given_only_when_the_log_proves_the_transaction_was_not_committed() -> None:
    """G3/G5, issue 26 point 3. A Spark batch job's commit waits as an intent, pauses; another writer's entry
    commits it; the job is restarted (a new epoch of the same ``transactionalId``); the log is truncated past the
    deciding entry. The resumed commit was answered ``ProducerFencedError`` and the sink deleted the committed
    files: readers then failed for good on the missing files. The state now remembers what each fenced epoch
    decided, so the resumed commit learns it committed."""
    url = _memory()
    w, msg, restart = _batch_job(url, "job-1")
    other = Producer(open_store(url), "other")
    other.init_transactions()
    seen: list[str] = []

    def lose_the_race_then_pause(name: str) -> None:
        if name == "txnlog.entry.before" and not seen:
            seen.append(name)
            with faults.injected(None), other.transaction():  # takes the entry the job was about to create
                other.send("t", [{"v": "first"}])
        elif name == "intent.after" and seen == ["txnlog.entry.before"]:
            seen.append(name)
            with faults.injected(None):
                with other.transaction():  # its writer then serves the queue: it decides the waiting intent
                    other.send("t", [{"v": "second"}])
                assert parallel.drain(30)  # (on its serving thread, after its own caller was answered)
                assert "job-1" in _values(url)
                restart()  # the job restarted: a new epoch fences the paused driver
                _others_move_on_and_truncate(url)

    with faults.injected(lose_the_race_then_pause):
        try:
            w.commit([msg])
        except CommitStateUnknownError:
            pass
        except ProducerFencedError:
            pytest.fail("answered fenced for a transaction the log committed")
    assert seen == ["txnlog.entry.before", "intent.after"]
    w.abort([msg])  # what Spark does after a failed commit: must not delete what the log committed
    assert "job-1" in _values(url)
    _assert_acknowledged_is_readable(url, ["job-1", "first", "second"])


def test_a_batch_sink_commit_answered_fenced_deletes_nothing_and_its_abort_deletes_what_the_log_aborted() -> None:
    """G8, issue 26 point 3. A commit refused because a newer epoch fenced the job deletes nothing itself; Spark's
    ``abort`` then deletes the staged files, since the log says that transaction can never commit."""
    url = _memory()
    w, msg, restart = _batch_job(url, "zombie")
    staged = [i.path for i in open_store(url).list_info("topics/t/0/data")]
    assert staged
    restart()  # a newer job with the same transactionalId
    with pytest.raises(ProducerFencedError):
        w.commit([msg])
    assert [i.path for i in open_store(url).list_info("topics/t/0/data")] == staged, "commit deleted files"
    w.abort([msg])
    assert open_store(url).list_info("topics/t/0/data") == []
    assert _values(url) == []


class _DownAfterCreate(LostReplyStore):
    """A real store that goes down (every read fails) once a log entry was created, until ``down`` is cleared."""

    armed = down = False

    def put_if_absent(self, path: str, data: bytes) -> bool:
        created = super().put_if_absent(path, data)
        if created and self.armed and path.startswith(TXN_LOG + "/"):
            self.armed, self.down = False, True
        return created

    def _check(self, path: str) -> None:
        if self.down:
            raise StoreError(f"injected fault: {path} cannot be read")

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        self._check(prefix)
        return super().list(prefix, start_after, limit)

    def get(self, path: str) -> bytes:
        self._check(path)
        return super().get(path)


def test_a_store_error_after_the_entry_was_created_is_an_unknown_outcome_never_a_plain_store_error() -> None:
    """G7, issue 26 point 4. The entry's conditional create succeeded and the store then fails the writer's check
    of the entry (and every read after it): the caller must get ``CommitStateUnknownError`` (a caller that retries
    after a plain ``StoreError`` as after a failure publishes the transaction twice), and a retry of the commit,
    once the store is back, learns it committed, once."""
    url = _memory()
    net = _DownAfterCreate(open_store(url))
    p = Producer(net, "p", coordinator=TransactionCoordinator(net, checkpoint_interval=0))
    p.init_transactions()
    net.armed = True
    p.begin_transaction()
    p.send("t", [{"v": "once"}])
    with pytest.raises(CommitStateUnknownError):
        p.commit_transaction()
    net.down = False
    p.commit_transaction()  # the caller's retry after an unknown outcome
    assert _values(url) == ["once"]


def _reader_after_one_commit(url: str) -> tuple[Store, TransactionCoordinator, Producer]:
    """A reader's store and coordinator (no checkpoints of its own), and a producer that committed one record."""
    reader_store = open_store(url)
    reader = TransactionCoordinator(reader_store, checkpoint_interval=0)
    p = Producer(open_store(url), "p")
    p.init_transactions()
    with p.transaction():
        p.send("t", [{"v": "before"}])
    return reader_store, reader, p


def _reader_has_the_logs_state(url: str, reader_store: Store, reader: TransactionCoordinator) -> CoordinatorState:
    """Refresh the reader and check that its state, and what it reads, are those of a fresh process."""
    seen = reader.log.refresh()
    fresh = TransactionCoordinator(open_store(url)).log.refresh()
    assert seen.seq == fresh.seq, "the reader's view ends elsewhere than the log (on an entry it never proved?)"
    assert seen.to_json() == fresh.to_json(), "the reader applied entries that are not the log's"
    got = sorted(read_snapshot(reader_store, ["t"], coordinator=reader)["t"].column("v").to_pylist())
    assert got == _values(url)
    return seen


def test_a_reader_whose_view_a_truncation_passed_by_never_takes_ghosts_for_the_log() -> None:
    """G1/G5. Ghosts left in the store (writers that died right after creating them, before proving them) fill
    every number a truncation freed after a reader's view, each naming the one before it, so a listing after the
    view is dense up to the first entry the truncation kept. The reader must not apply them: its state is the
    log's. (The former reader took a dense listing for the log: producers whose entries the ghosts replaced vanished
    from its state, and their later commits with them.)"""
    url = _memory()
    reader_store, reader, p = _reader_after_one_commit(url)
    view = reader.log.refresh().seq
    prev = json.loads(open_store(url).get(txn_log_path(view)))["writer"]
    _others_move_on_and_truncate(url)
    kept = min(_entries(url))
    assert kept > view + 1
    store = open_store(url)
    for seq in range(view + 1, kept):
        token = uuid.uuid4().hex
        ghost = {"v": 2, "seq": seq, "ts": int(time.time() * 1000), "writer": token, "prev": prev, "items": [],
                 "touched": []}
        assert store.put_if_absent(txn_log_path(seq), json.dumps(ghost).encode())
        prev = token
    _reader_has_the_logs_state(url, reader_store, reader)
    assert ti.verify(open_store(url)) == []  # ghosts left below a checkpoint are no damage


def test_a_read_by_name_that_ends_on_a_freed_number_after_a_ghost_does_not_take_the_ghost_for_the_log() -> None:
    """G1/G5. A reader that found an entry by name last time reads the next two numbers by name. A truncation
    passed its view by; one ghost (naming the reader's last entry, as a writer paused since that entry would write
    it) sits at the first number and the second is free. The read ends on the free number, so there is nothing
    more to list, but the ghost is still only read, not proven: the reader must prove it (the listing of the
    checkpoints shows one above it), list on, and take the log's state instead."""
    url = _memory()
    reader_store, reader, p = _reader_after_one_commit(url)
    reader.log.refresh()
    with p.transaction():
        p.send("t", [{"v": "found by name"}])
    view = reader.log.refresh().seq  # found by name: the next refresh reads two numbers ahead
    assert reader.log._found_last == 1
    prev = json.loads(open_store(url).get(txn_log_path(view)))["writer"]
    _others_move_on_and_truncate(url)
    assert min(_entries(url)) > view + 2
    ghost = {"v": 2, "seq": view + 1, "ts": int(time.time() * 1000), "writer": uuid.uuid4().hex, "prev": prev,
             "items": [], "touched": []}
    assert open_store(url).put_if_absent(txn_log_path(view + 1), json.dumps(ghost).encode())
    _reader_has_the_logs_state(url, reader_store, reader)


class _FailsOnce(LostReplyStore):
    """A real store whose GET of ``path`` fails once with a store error."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.path = ""

    def get(self, path: str) -> bytes:
        if path == self.path:
            self.path = ""
            raise StoreError(f"GET {path}: connection reset")
        return super().get(path)


def test_a_read_by_name_whose_second_read_fails_still_sees_the_entry_there() -> None:
    """G5. A reader that found an entry by name last time reads the next two numbers by name. Both entries exist
    (their commits were acknowledged before the read began), but the store fails the second GET: that is no answer
    about the entry, so the refresh must not take it for "no such entry" and end its view at the first one; it lists
    the log and sees both."""
    url = _memory()
    flaky = _FailsOnce(open_store(url))
    _, _, p = _reader_after_one_commit(url)
    reader = TransactionCoordinator(flaky, checkpoint_interval=0)
    reader.log.refresh()
    with p.transaction():
        p.send("t", [{"v": "found by name"}])
    view = reader.log.refresh().seq
    assert reader.log._found_last == 1
    for v in ("first after the view", "second after the view"):
        with p.transaction():
            p.send("t", [{"v": v}])
    flaky.path = txn_log_path(view + 2)
    seen = reader.log.refresh()
    assert not flaky.path, "the second read by name was not made"
    assert seen.seq == view + 2, "the refresh took a failed read for the end of the log"
    _reader_has_the_logs_state(url, flaky, reader)


def test_a_zombie_many_epochs_behind_is_told_fenced_from_the_state_alone() -> None:
    """G3. A zombie whose transactional id was initialised again many times since (more than the state remembers
    epochs that decided something) gets ``ProducerFencedError``: the state remembers from which epoch on every
    fenced epoch that decided something is listed, so an epoch that decided nothing is known to be fenced."""
    url = _memory()
    zombie = Producer(open_store(url), "z")
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send("t", [{"v": "zombie"}])
    zombie.flush()
    for i in range(12):
        again = Producer(open_store(url), "z")
        again.init_transactions()
        if i % 2 == 0:
            with again.transaction():
                again.send("t", [{"v": f"again-{i}"}])
    logs = TransactionCoordinator(open_store(url)).log
    meta = logs.refresh().producers["z"]
    assert meta.epoch == 12 and meta.fenced_from == 0
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    assert "zombie" not in _values(url)


class _LoseOnePausedAfter(_Paused):
    """The next log entry's conditional create is applied but its reply lost; after that, ``after`` runs."""

    armed = True

    def lose(self, path: str) -> str | None:
        if self.armed and path.startswith(TXN_LOG + "/"):
            self.armed = False
            return "unknown"
        return None


def test_a_commit_whose_entry_reply_was_lost_is_never_answered_fenced_after_a_truncation_and_expiry() -> None:
    """G5/G7 (found by the widened histories, seed 10113). A commit's entry is created but its reply lost
    (``CommitStateUnknownError``); learning the outcome, the process pauses before the listing that would prove
    what it read, while others move the log on, truncate past that entry and expire the producer's id. The
    deciding entry is gone and the state forgot the producer: the answer must be the decision or
    ``CommitStateUnknownError``, never ``ProducerFencedError`` for a transaction every reader sees."""
    url = _memory()
    net = _LoseOnePausedAfter(open_store(url))
    p = Producer(net, "lost", coordinator=TransactionCoordinator(net, checkpoint_interval=0))
    p.init_transactions()
    net.armed = True

    def expire_too() -> None:
        _others_move_on_and_truncate(url)
        far = int((time.time() + 8 * 86400) * 1000)
        assert "lost" in TransactionCoordinator(open_store(url)).expire_transactional_ids(now=far)

    pause = _once(expire_too)
    # paused before it lists the checkpoints that would prove what it read: the proof then sees the truncation
    net.before = lambda kind, path: pause() if kind == "list" and path == TXN_CHECKPOINT and not net.armed else None
    p.begin_transaction()
    p.send("t", [{"v": "lost"}])
    try:
        p.commit_transaction()
    except CommitStateUnknownError:
        pass
    except ProducerFencedError:
        pytest.fail("answered fenced for a transaction the log committed")
    assert "lost" in _values(url)


def _a_reader_with_a_recent_view(monkeypatch: pytest.MonkeyPatch,
                                 window: float) -> tuple[str, _Paused, TransactionCoordinator, int]:
    """A store with one producer, and a reader (behind :class:`_Paused`) that has just read the log, with
    ``RECENT_S`` set to ``window``: the store's URL, the reader's store and coordinator, and its view's entry."""
    from coordinator import txnlog

    monkeypatch.setattr(txnlog, "RECENT_S", window)
    url = _memory()
    Producer(open_store(url), "first").init_transactions()
    net = _Paused(open_store(url))
    reader = TransactionCoordinator(net, checkpoint_interval=0)
    return url, net, reader, reader.log.refresh().seq


def _commit_late(url: str) -> None:
    """Another process commits the value "late" (acknowledged when this returns)."""
    late = Producer(open_store(url), "late")
    late.init_transactions()
    with late.transaction():
        late.send("t", [{"v": "late"}])


def test_a_read_begun_after_an_acknowledged_commit_sees_it_after_its_reader_paused_inside_a_refresh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """G1/G5 as readers see them (found by the long histories, seed 329 of ``run.py --long``). A reader pauses
    inside a refresh, after the store answered its read, while others move the log on and truncate it; then a
    commit is acknowledged, and the reader reads. Its view looked recent when the refresh *ended*, so it asked for
    its next entry by name, found the number freed and read a stale snapshot missing the acknowledged commit.
    Recency now counts from the start of the refresh that made the view, so the paused reader lists the log."""
    url, net, reader, view = _a_reader_with_a_recent_view(monkeypatch, 1.0)

    def pass_by() -> None:
        _others_move_on_and_truncate(url)
        time.sleep(1.2)  # the pause outlasts RECENT_S

    pause = _once(pass_by)
    nxt = txn_log_path(view + 1)
    net.after = lambda kind, path: pause() if kind == "get-missing" and path == nxt else None
    reader.log.refresh()  # paused inside: told there is no next entry, the answer arrives after the pause
    assert view + 1 not in _entries(url)
    _commit_late(url)
    got = read_snapshot(net, ["t"], coordinator=reader)["t"].column("v").to_pylist()
    assert "late" in got, "a read begun after the acknowledgement misses it"


def test_a_read_whose_request_paused_before_the_store_applied_it_sees_what_was_acknowledged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """G1/G5 as readers see them (found by the long histories, seeds 280 and 641 of ``run.py --long``). A reader
    whose view is recent asks for its next entry by name; the request pauses before the store applies it, while a
    commit is acknowledged and others truncate the log past the number asked for. "No such entry" then says nothing
    about the log's end: the reader must list, and see the acknowledged commit."""
    url, net, reader, view = _a_reader_with_a_recent_view(monkeypatch, 1.0)

    def ack_then_truncate() -> None:
        _commit_late(url)
        _others_move_on_and_truncate(url)
        time.sleep(1.2)  # the request is applied after RECENT_S

    pause = _once(ack_then_truncate)
    nxt = txn_log_path(view + 1)
    net.before = lambda kind, path: pause() if kind == "get" and path == nxt else None
    got = read_snapshot(net, ["t"], coordinator=reader)["t"].column("v").to_pylist()
    assert view + 1 not in _entries(url)
    assert "late" in got, "a read misses a commit acknowledged while its request was on its way"


def test_a_by_name_answer_counts_as_recent_from_when_it_was_asked_not_from_when_it_arrived(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader's by-name refresh is applied by the store at once, but its answer ("no next entry") reaches the
    reader only late, still inside the recency window. The answer says where the log ended when it was *asked*:
    the view counts as recent from then. Counted from when the answer arrived, a read begun after the window
    (measured from the question) would still ask by name, find the number freed by a truncation meanwhile and miss
    a commit acknowledged before it began."""
    window = 2.0
    url, net, reader, view = _a_reader_with_a_recent_view(monkeypatch, window)
    asked: list[float] = []

    def late_answer() -> None:
        asked.append(time.monotonic())
        _others_move_on_and_truncate(url)
        _commit_late(url)
        left = asked[0] + 0.7 * window - time.monotonic()
        assert left > 0, "the scene took longer than the window it must fit in"
        time.sleep(left)

    pause = _once(late_answer)
    nxt = txn_log_path(view + 1)
    net.after = lambda kind, path: pause() if kind == "get-missing" and path == nxt else None
    reader.log.refresh()  # told "no next entry", the answer arriving 0.7 windows after the question
    arrived = time.monotonic()
    assert view + 1 not in _entries(url)
    time.sleep(max(0.0, asked[0] + 1.1 * window - time.monotonic()))
    assert time.monotonic() - arrived < 0.6 * window  # still "recent" if counted from the answer's arrival
    got = read_snapshot(net, ["t"], coordinator=reader)["t"].column("v").to_pylist()
    assert "late" in got, "a read begun after the window (counted from the question) misses an acknowledged commit"
