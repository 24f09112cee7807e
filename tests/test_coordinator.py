"""Core guarantees on every backend: G1 atomic visibility, G3 fencing, G4 order and offsets, G6 no blocking,
G7 honest failure, G8 bad input; plus timeouts, expiration, sequence numbers, idempotency keys, group offsets,
checkpoints, and the entry builder deciding each request against what the requests before it in the same entry
did."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from coordinator import (
    CommitStateUnknownError,
    Consumer,
    InvalidNameError,
    InvalidOptionError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    Producer,
    ProducerFencedError,
    ProducerIdentity,
    SchemaMismatchError,
    Store,
    TopicNotFoundError,
    TransactionCoordinator,
    create_topic,
    parallel,
    read_snapshot,
    stage_segment,
    txnlog,
)
from coordinator.layout import intent_path
from coordinator.records import CommitItem, InitItem, RejectItem, app_txn_id
from coordinator.requests import Request, abort_request, commit_request, init_request, request_bytes
from coordinator.txnstates import TxnState
from core_helpers import SCHEMA, Backend, LostReplyStore, committed_ids, make_topic, rows


def test_commit_publishes_atomically_with_dense_offsets_in_commit_order(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=4)
    a, b = Producer(store, "a"), Producer(backend.open(), "b")
    a.init_transactions()
    b.init_transactions()
    a.begin_transaction()
    b.begin_transaction()
    a.send("t", rows(range(0, 40), "a"), key="id")
    b.send("t", rows(range(100, 140), "b"), key="id")
    a.flush()
    b.flush()
    rb = b.commit_transaction()  # b commits first although a began first: b's offsets come first
    ra = a.commit_transaction()
    assert rb.commit_seq < ra.commit_seq
    table = read_snapshot(backend.open(), ["t"])["t"]
    for p in range(4):
        part = table.filter(pa.compute.equal(table.column("_partition"), p)).sort_by("_offset")
        labels = part.column("txn").to_pylist()
        assert part.column("_offset").to_pylist() == list(range(part.num_rows))
        assert labels == sorted(labels, key=lambda x: x != "b"), f"partition {p} not in commit order: {labels}"
    assert committed_ids(backend) == list(range(0, 40)) + list(range(100, 140))


def test_send_order_of_one_producer_is_kept(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=1)
    p = Producer(store, "ordered")
    p.init_transactions()
    for chunk in range(5):
        with p.transaction():
            for i in range(chunk * 10, chunk * 10 + 10):
                p.send("t", rows([i], "x"), partition=0)
    table = read_snapshot(backend.open(), ["t"])["t"].sort_by("_offset")
    assert table.column("id").to_pylist() == list(range(50))


def test_zombie_epoch_is_fenced_for_send_commit_and_abort(backend: Backend) -> None:
    store = backend.open()
    make_topic(store)
    old = Producer(store, "etl")
    old.init_transactions()
    old.begin_transaction()
    old.send("t", rows(range(10), "zombie"))
    old.flush()
    new = Producer(backend.open(), "etl")
    ident = new.init_transactions()
    # One bump fences the old epoch: its open transaction can never commit.
    assert old.identity is not None and ident.epoch == old.identity.epoch + 1
    with pytest.raises(ProducerFencedError, match="fenced"):
        old.commit_transaction()
    with pytest.raises(ProducerFencedError):
        old.begin_transaction()
    # A zombie that never announced its transaction is fenced at its commit point too.
    old2 = Producer(backend.open(), "etl2")
    old2.init_transactions()
    Producer(backend.open(), "etl2").init_transactions()
    old2.begin_transaction()
    old2.send("t", rows(range(20, 25), "zombie2"))
    with pytest.raises(ProducerFencedError):
        old2.commit_transaction()
    with new.transaction():
        new.send("t", rows(range(30, 33), "new"))
    assert committed_ids(backend) == [30, 31, 32]


def test_zombie_abort_after_fence_has_no_effect_on_new_epoch(backend: Backend) -> None:
    store = backend.open()
    make_topic(store)
    old = Producer(store, "x")
    old.init_transactions()
    old.begin_transaction()
    old.send("t", rows([1], "z"))
    old.flush()
    new = Producer(backend.open(), "x")
    new.init_transactions()
    new.begin_transaction()
    new.send("t", rows([2], "n"))
    new.flush()
    with pytest.raises(ProducerFencedError):
        old.abort_transaction()
    new.commit_transaction()
    assert committed_ids(backend) == [2]


def test_hung_transaction_does_not_block_later_commits(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=1)
    hung = Producer(store, "hung")
    hung.init_transactions()
    hung.begin_transaction()
    hung.send("t", rows(range(5), "hung"))
    hung.flush()  # staged and announced, never committed
    live = Producer(backend.open(), "live")
    live.init_transactions()
    with live.transaction():
        live.send("t", rows(range(10, 13), "live"))
    consumer = Consumer(backend.open())
    consumer.subscribe(["t"])
    got = consumer.poll()
    assert got.column("id").to_pylist() == [10, 11, 12]
    assert got.column("_offset").to_pylist() == [0, 1, 2]
    # read_uncommitted additionally shows the hung transaction's records, without offsets.
    unc = Consumer(backend.open(), isolation_level="read_uncommitted")
    unc.subscribe(["t"])
    table = unc.poll()
    assert sorted(table.column("id").to_pylist()) == [0, 1, 2, 3, 4, 10, 11, 12]
    assert table.filter(pa.compute.is_null(table.column("_offset"))).num_rows == 5


def test_commit_whose_writer_died_before_its_partition_records_is_read_whole(backend: Backend) -> None:
    from coordinator import faults
    from coordinator.faults import InjectedCrash

    store = backend.open()
    make_topic(store, partitions=2)
    p = Producer(store, "w")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows(range(8), "x"), key="id")

    def crash(name: str) -> None:
        if name == "record.after":
            raise InjectedCrash(name)

    with faults.injected(crash), pytest.raises(InjectedCrash):
        p.commit_transaction()
    # The entry is the commit point; one partition's record is written, the other not: readers compute it.
    assert committed_ids(backend) == list(range(8))


def test_timeout_sweep_aborts_with_epoch_bump_even_with_skewed_clocks(backend: Backend) -> None:
    store = backend.open()
    make_topic(store)
    p = Producer(store, "slow")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows(range(3), "slow"))
    p.flush()
    sweeper = backend.coordinator()
    (opened,) = store.list_info("_txn/open")
    start = opened.mtime * 1000  # the transaction's start on the store's clock
    # Judged on the store's clock: before the timeout nothing happens; minutes later it is aborted and fenced.
    assert sweeper.abort_timed_out(now=start + 5_000) == []
    assert sweeper.abort_timed_out(now=start + 5 * 60_000) == ["slow"]
    meta = sweeper.log.refresh().producers["slow"]
    assert meta.state is TxnState.COMPLETE_ABORT and meta.epoch == 1
    with pytest.raises(ProducerFencedError):
        p.commit_transaction()
    assert committed_ids(backend) == []


def test_expired_transactional_id_fences_its_producer_and_gets_a_new_pid(backend: Backend) -> None:
    store = backend.open()
    make_topic(store)
    p = Producer(store, "idle")
    ident = p.init_transactions()
    coord = backend.coordinator()
    last = coord.log.refresh().producers["idle"].last_ts
    assert coord.expire_transactional_ids(now=last + 1000) == []
    assert coord.expire_transactional_ids(now=last + 8 * 24 * 3600 * 1000) == ["idle"]
    with pytest.raises(ProducerFencedError, match="expired"), p.transaction():
        p.send("t", rows([1], "x"))
    again = Producer(backend.open(), "idle").init_transactions()
    assert again.pid != ident.pid


def test_sequence_numbers_drop_duplicates_and_refuse_gaps(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=1)
    coord = TransactionCoordinator(store)
    ident = coord.init_producer("seq")
    tbl = pa.Table.from_pylist(rows(range(3), "s"), schema=SCHEMA)
    s0 = stage_segment(store, "t", 0, tbl, "seg-0", seq=0)
    s1 = stage_segment(store, "t", 0, tbl, "seg-1", seq=1)
    coord.commit(ident, ident.txn_id(0), [s0, s1])
    # A retried send of seq 1 (duplicate) is dropped; seq 2 is new.
    s2 = stage_segment(store, "t", 0, tbl, "seg-2", seq=2)
    res = coord.commit(ident, ident.txn_id(1), [s1, s2])
    assert res.records == 3
    s4 = stage_segment(store, "t", 0, tbl, "seg-4", seq=4)
    with pytest.raises(OutOfOrderSequenceError, match="expected 3, got 4"):
        coord.commit(ident, ident.txn_id(2), [s4])
    assert len(committed_ids(backend)) == 9


def test_application_version_makes_a_replayed_or_older_commit_a_no_op(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=1)
    coord = TransactionCoordinator(store)
    tbl = pa.Table.from_pylist(rows(range(4), "b"), schema=SCHEMA)
    seg = stage_segment(store, "t", 0, tbl, "a.q1.7.first~x")
    first = coord.commit_app("q1", 7, "first", [seg])
    seg2 = stage_segment(store, "t", 0, tbl, "a.q1.7.replay~x")
    again = backend.coordinator().commit_app("q1", 7, "replay", [seg2])
    older = backend.coordinator().commit_app("q1", 6, "late", [seg2])
    assert not first.already_committed and again.already_committed and older.already_committed
    other_query = coord.commit_app("q2", 7, "other", [seg2])
    assert not other_query.already_committed
    assert len(committed_ids(backend)) == 8


def test_group_offsets_commit_atomically_with_output(backend: Backend) -> None:
    from coordinator import faults
    from coordinator.faults import InjectedCrash

    store = backend.open()
    make_topic(store, "in", 1)
    make_topic(store, "out", 1)
    src = Producer(store, "src")
    src.init_transactions()
    with src.transaction():
        src.send("in", rows(range(10), "in"))
    etl = Producer(backend.open(), "etl")
    etl.init_transactions()
    consumer = Consumer(backend.open(), group_id="g")
    consumer.subscribe(["in"])
    batch = consumer.poll(max_records=4)
    etl.begin_transaction()
    etl.send("out", rows([i * 10 for i in batch.column("id").to_pylist()], "out"))
    etl.send_offsets_to_transaction(consumer.positions(), "g")

    def crash(name: str) -> None:
        if name == "txnlog.entry.before":
            raise InjectedCrash(name)

    with faults.injected(crash), pytest.raises(InjectedCrash):
        etl.commit_transaction()
    assert backend.coordinator().group_offsets("g") == {}
    assert committed_ids(backend, "out") == []
    # The restarted job starts from the committed offsets (none) and commits output and offsets together.
    etl = Producer(backend.open(), "etl")
    etl.init_transactions()
    consumer = Consumer(backend.open(), group_id="g")
    consumer.subscribe(["in"])
    batch = consumer.poll(max_records=4)
    with etl.transaction():
        etl.send("out", rows([i * 10 for i in batch.column("id").to_pylist()], "out"))
        etl.send_offsets_to_transaction(consumer.positions(), "g")
    assert backend.coordinator().group_offsets("g") == {"in": {0: 4}}
    assert committed_ids(backend, "out") == [0, 10, 20, 30]
    assert Consumer(backend.open(), group_id="g").committed("in", 0) == 4
    c2 = Consumer(backend.open(), group_id="g")
    c2.subscribe(["in"])
    assert c2.position("in", 0) == 4 and c2.lag() == {("in", 0): 6}


def test_snapshot_is_transaction_consistent_across_topics(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, "a", 2)
    make_topic(store, "b", 2)
    p = Producer(store, "x")
    p.init_transactions()
    for n in range(5):
        with p.transaction():
            p.send("a", rows(range(n * 10, n * 10 + 10), f"t{n}"), key="id")
            p.send("b", rows(range(n * 10, n * 10 + 10), f"t{n}"), key="id")
    snap = backend.coordinator().snapshot(["a", "b"])
    with p.transaction():
        p.send("a", rows(range(90, 95), "late"))
        p.send("b", rows(range(90, 95), "late"))
    got = read_snapshot(backend.open(), ["a", "b"], snapshot=snap)
    for t in ("a", "b"):
        assert sorted(got[t].column("id").to_pylist()) == list(range(50))


def test_commit_costs_one_conditional_write_plus_one_idempotent_record_per_partition(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=16)
    coord = TransactionCoordinator(store, checkpoint_interval=2)  # checkpoints must not add conditional writes
    ident = coord.init_producer("cost")
    for n, touched in enumerate((1, 4, 16)):
        segs = [stage_segment(store, "t", p, pa.Table.from_pylist(rows([p], "c"), schema=SCHEMA), f"c{touched}-{p}")
                for p in range(touched)]
        before = store.counters["put_if_absent"]
        coord.commit(ident, ident.txn_id(n), segs)
        assert store.counters["put_if_absent"] - before == touched + 1


def test_opening_the_log_costs_few_requests_whatever_its_length(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=1)
    coord = TransactionCoordinator(store, checkpoint_interval=20, partition_checkpoint_interval=8)
    ident = coord.init_producer("many")
    tbl = pa.Table.from_pylist(rows([1], "m"), schema=SCHEMA)
    costs = []
    n = 0
    for _ in range(3):
        for _ in range(40):
            seg = stage_segment(store, "t", 0, tbl, f"{ident.txn_id(n)}~x")
            coord.commit(ident, ident.txn_id(n), [seg])
            n += 1
        coord.log.flush()  # the checkpoint of the last interval is written in the background
        fresh = backend.open()
        TransactionCoordinator(fresh).partition("t", 0).refresh()
        costs.append(fresh.counters.total())
    # The history grows 40 -> 120 commits; the cost of opening does not grow with it: at most the entries after
    # the last checkpoint (< 20) and the records after the last partition checkpoint (< 8), plus a few listings.
    assert max(costs) <= 20 + 8 + 8, costs


class OneLostReply(LostReplyStore):
    """Loses the reply of the next transaction-log write; with ``reads_fail``, reading ``_txn/`` fails too from then
    on, until ``reads_fail`` is cleared (a network partition right after the write)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.lose_next_reply = False
        self.reads_fail = False
        self._down = False

    def lose(self, path: str) -> str | None:
        if self.lose_next_reply and "_txn/log" in path:
            self.lose_next_reply = False
            self._down = self.reads_fail
            return "unknown" if self.reads_fail else "read back"
        return None

    def _partitioned(self, path: str) -> None:
        from coordinator import StoreError

        if self._down and self.reads_fail and path.startswith("_txn"):
            raise StoreError(f"network partition reading {path}")

    def get(self, path: str) -> bytes:
        self._partitioned(path)
        return super().get(path)

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> list[str]:
        self._partitioned(prefix)
        return super().list(prefix, start_after, limit)


def test_lost_reply_of_commit_point_is_resolved_by_reading_back(backend: Backend) -> None:
    store = OneLostReply(backend.open())
    make_topic(store)
    p = Producer(store, "lr")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows(range(6), "x"))
    p.flush()
    store.lose_next_reply = True
    result = p.commit_transaction()  # reported as committed, not as a conflict
    assert result.records == 6
    assert committed_ids(backend) == list(range(6))


def test_unknown_commit_outcome_is_reported_then_resolved_by_init(backend: Backend) -> None:
    store = OneLostReply(backend.open())
    make_topic(store)
    p = Producer(store, "lr2")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows(range(6), "x"))
    p.flush()
    store.lose_next_reply = True
    store.reads_fail = True
    with pytest.raises(CommitStateUnknownError):
        p.commit_transaction()
    with pytest.raises(InvalidTxnStateError, match="unknown"):
        p.begin_transaction()  # the number is not reused while its outcome is unknown
    store.reads_fail = False
    # The durable record decides: the entry was written, so the transaction is committed, and the producer
    # learns it by asking again.
    assert committed_ids(backend) == list(range(6))
    assert p.commit_transaction().txn.endswith(".0")
    with p.transaction():
        p.send("t", rows([7], "y"))
    assert committed_ids(backend) == [0, 1, 2, 3, 4, 5, 7]


def test_bad_input_is_refused_clearly_and_writes_nothing(backend: Backend) -> None:
    store = backend.open()
    make_topic(store)
    p = Producer(store, "bad")
    p.init_transactions()
    p.begin_transaction()
    with pytest.raises(SchemaMismatchError, match="missing columns \\['txn'\\]"):
        p.send("t", [{"id": 1}])
    with pytest.raises(SchemaMismatchError, match="column 'id'"):
        p.send("t", [{"id": "one", "txn": "x"}])
    with pytest.raises(TopicNotFoundError, match="nope"):
        p.send("nope", rows([1], "x"))
    with pytest.raises(InvalidOptionError, match="partition 7"):
        p.send("t", rows([1], "x"), partition=7)
    p.commit_transaction()
    assert committed_ids(backend) == []
    for bad in ["../escape", "a/b", "", ".", "x" * 300, "/abs", "a\\b"]:
        with pytest.raises(InvalidNameError):
            create_topic(store, bad, SCHEMA)
        with pytest.raises(InvalidNameError):
            Producer(store, bad).init_transactions()
        with pytest.raises(InvalidNameError):
            Consumer(store, group_id=bad)
    with pytest.raises(InvalidOptionError, match="isolationLevel"):
        Consumer(store, isolation_level="dirty")
    with pytest.raises(InvalidTxnStateError, match="init_transactions"):
        Producer(store, "fresh").begin_transaction()


def test_snapshot_is_a_prefix_of_the_log_and_needs_no_partition_request(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=8)
    p = Producer(store, "x")
    p.init_transactions()
    with p.transaction():
        p.send("t", rows(range(0, 80), "x"), key="id")
    fresh = backend.open()
    snap = TransactionCoordinator(fresh).snapshot(["t"])
    listed = [k for k in fresh.counters.snapshot() if k not in ("get", "list")]
    assert listed == [], fresh.counters.snapshot()  # read-only
    assert sum(snap.ends["t"].values()) == 80
    y = Producer(backend.open(), "y")
    y.init_transactions()
    with y.transaction():
        y.send("t", rows(range(100, 180), "y"), key="id")
    ids = sorted(read_snapshot(backend.open(), ["t"], snapshot=snap)["t"].column("id").to_pylist())
    assert ids == list(range(80)), "the cut holds x entirely and nothing of y"
    assert committed_ids(backend) == list(range(80)) + list(range(100, 180))


# -- the entry builder: a request is decided against the state the requests before it in the entry left ----------
#
# Across entries, a request already decided or fenced is answered from the state before the builder sees it (and a
# waiting intent is skipped by its name), so only requests that meet in one entry test the builder's own checks.


def _wait_as_intent(store: Store, *reqs: Request) -> None:
    """Publish ``reqs`` as intents, as their processes do after losing a race (and then pause)."""
    for req in reqs:
        store.put(intent_path(req.id), request_bytes(req))


def test_a_fenced_producers_commit_decided_after_its_fence_in_one_entry_is_rejected(backend: Backend) -> None:
    """G3: a writer taking over the log with its own init of ``etl`` (which fences epoch 0) and the old epoch's
    commit intent, read before, decides both in one entry: the commit comes after the fence and is rejected."""
    store = backend.open()
    make_topic(store, partitions=1)
    coord = TransactionCoordinator(store)
    ident = coord.init_producer("etl")
    seg = stage_segment(store, "t", 0, pa.Table.from_pylist(rows(range(5), "zombie"), schema=SCHEMA),
                        f"{ident.txn_id(0)}~a", seq=0)
    zombie = commit_request(txn=ident.txn_id(0), tid="etl", pid=ident.pid, epoch=ident.epoch, n=0, segments=(seg,))
    fence = init_request("etl", (ident.pid, ident.epoch), 60_000, False)
    builder = backend.coordinator().log
    with builder._lock:
        builder.refresh()
        won = builder._append([fence, zombie])
    assert won is not None
    init, decided = won[0].items
    assert isinstance(init, InitItem) and init.epoch == ident.epoch + 1
    assert isinstance(decided, RejectItem) and decided.request == zombie.id and decided.code == "fenced"
    with pytest.raises(ProducerFencedError):
        coord.commit(ident, ident.txn_id(0), [seg])
    assert committed_ids(backend) == []


def test_a_fenced_producers_abort_intent_decided_after_its_fence_is_rejected(backend: Backend) -> None:
    """G3: an init of ``etl`` (a new epoch) and an abort by the old epoch wait as intents; another process's commit
    decides both in one entry, the fence first (intents in name order): the abort is rejected and leaves the new
    epoch's first transaction alone, which then commits."""
    store = backend.open()
    make_topic(store, partitions=1)
    coord = TransactionCoordinator(store)
    ident = coord.init_producer("etl")
    zombie = abort_request(txn=ident.txn_id(0), tid="etl", pid=ident.pid, epoch=ident.epoch, n=0, reason="zombie")
    fence = init_request("etl", (ident.pid, ident.epoch), 60_000, False)
    other = Producer(backend.open(), "other")
    other.init_transactions()
    _wait_as_intent(store, fence, zombie)
    with other.transaction():
        other.send("t", rows([100], "other"))
    assert parallel.drain(30)  # the writer serves the queue on a thread of its own after answering its caller
    seen, fenced_by = other.coordinator.log.decision(zombie.id), other.coordinator.log.decision(fence.id)
    assert seen is not None and fenced_by is not None
    assert isinstance(seen[0], RejectItem) and seen[0].code == "fenced"
    assert isinstance(fenced_by[0], InitItem) and fenced_by[1] == seen[1]  # the fence, earlier in the same entry
    meta = backend.coordinator().log.refresh().producers["etl"]
    assert (meta.epoch, meta.state, meta.last_txn) == (ident.epoch + 1, TxnState.EMPTY, -1)
    new = ProducerIdentity("etl", ident.pid, ident.epoch + 1)
    seg = stage_segment(store, "t", 0, pa.Table.from_pylist(rows([1, 2], "new"), schema=SCHEMA),
                        f"{new.txn_id(0)}~a", seq=0)
    assert coord.commit(new, new.txn_id(0), [seg]).records == 2
    assert committed_ids(backend) == [1, 2, 100]


def test_two_attempts_at_one_application_version_decided_in_one_entry_commit_once(backend: Backend) -> None:
    """G2: two attempts at version 7 of ``q1`` (a restarted Spark job and its zombie) wait as intents and are
    decided in one entry by another process's commit: the first commits, the second publishes nothing."""
    store = backend.open()
    make_topic(store, partitions=1)
    tbl = pa.Table.from_pylist(rows(range(4), "b"), schema=SCHEMA)
    attempts = [commit_request(txn=app_txn_id("q1", 7, tok), app="q1", version=7, token=tok,
                               segments=(stage_segment(store, "t", 0, tbl, f"{app_txn_id('q1', 7, tok)}~x"),))
                for tok in ("first", "replay")]
    other = Producer(backend.open(), "other")
    other.init_transactions()
    _wait_as_intent(store, *attempts)
    with other.transaction():
        other.send("t", rows([100], "other"))
    assert parallel.drain(30)  # the writer serves the queue on a thread of its own after answering its caller
    first = other.coordinator.log.decision(attempts[0].id)
    assert first is not None and isinstance(first[0], CommitItem)
    assert backend.coordinator().log.refresh().apps["q1"].token == "first"
    assert committed_ids(backend) == [0, 1, 2, 3, 100]


def test_an_attempt_reaped_earlier_in_an_entry_cannot_commit_later_in_it(backend: Backend) -> None:
    """G1: GC's reap of an attempt (its files may go next) and that attempt's late commit, decided in one entry
    in that order: the commit is refused, never made onto files GC deletes."""
    store = backend.open()
    make_topic(store, partitions=1)
    txn = app_txn_id("q1", 7, "tok")
    seg = stage_segment(store, "t", 0, pa.Table.from_pylist(rows(range(4), "b"), schema=SCHEMA), f"{txn}~x")
    reap = abort_request(txn=txn, app="q1", version=7, token="tok", reason="reaped by GC", segments=(seg,))
    late = commit_request(txn=txn, app="q1", version=7, token="tok", segments=(seg,))
    builder = backend.coordinator().log
    with builder._lock:
        builder.refresh()
        won = builder._append([reap, late])
    assert won is not None
    refused = next(i for i in won[0].items if i.request == late.id)
    assert isinstance(refused, RejectItem) and refused.code == "reaped"
    assert committed_ids(backend) == []


def test_one_partitions_record_of_an_entry_is_the_one_all_its_records_hold() -> None:
    from coordinator.errors import CorruptLogError
    from coordinator.partrecords import record_of, records_of
    from coordinator.records import CommitItem, LogEntry, MarkerSegment, PartAssign, ReplaceItem, RetainItem

    def seg(name: str, rows: int) -> MarkerSegment:
        return MarkerSegment(f"d/{name}", rows, 10 * rows, rows)

    items = (
        CommitItem("r1", txn="a", parts=(PartAssign("t", 0, 5, (seg("a0", 2),)), PartAssign("t", 1, 0, (seg("a1", 1),)),
                                         PartAssign("t", 2, 0, ()))),
        CommitItem("r2", txn="b", parts=(PartAssign("t", 1, 1, (seg("b1", 3), seg("b1x", 1))),
                                         PartAssign("u", 0, 7, (seg("b0", 1),)))),
        ReplaceItem("r3", topic="t", partition=0, base=0, end=5, replaces=("d/old",), segment=seg("m", 5),
                    runs=((0, 1, 2),)),
        RetainItem("r4", topic="u", partition=0, start=3),
    )
    entry = LogEntry(seq=9, ts=123, writer="w", items=items, touched=(("t", 0, 4), ("t", 1, 2), ("u", 0, 6)))
    every = records_of(entry)
    assert set(every) == {("t", 0), ("t", 1), ("u", 0)}
    for tp in [("t", 0), ("t", 1), ("t", 2), ("u", 0), ("u", 1), ("v", 0)]:
        assert record_of(entry, *tp) == every.get(tp)
    assert [type(op).__name__ for op in every[("t", 0)].ops] == ["CommitOp", "ReplaceOp"]
    assert [op.base for op in every[("t", 1)].ops] == [0, 1]  # type: ignore[union-attr]
    damaged = LogEntry(seq=9, ts=123, writer="w", items=items, touched=(("t", 2, 0),))
    with pytest.raises(CorruptLogError, match="t/2 as touched"):
        record_of(damaged, "t", 2)
    assert record_of(damaged, "t", 0) is None


class RecordReads(LostReplyStore):
    """Counts the reads of partition records (``topics/<t>/<p>/log/...``)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.record_gets = 0
        self.records_read: list[int] = []  # their numbers

    def get(self, path: str) -> bytes:
        if path.startswith("topics/") and "/log/" in path:
            self.record_gets += 1
            self.records_read.append(int(path.rsplit("/", 1)[1].split(".")[0]))
        return super().get(path)


def _spread_writer(inner: Store) -> tuple[RecordReads, TransactionCoordinator, Callable[[int], None]]:
    """A topic of 4 partitions on ``inner``; a writer checkpointing every 2 entries and each partition every 8
    records, on a store counting record reads; and ``commit(n)``: its transaction ``n``, one row in each partition."""
    make_topic(inner, partitions=4)
    store = RecordReads(inner)
    coord = TransactionCoordinator(store, checkpoint_interval=2, partition_checkpoint_interval=8)
    ident = coord.init_producer("spread")
    tbl = pa.Table.from_pylist(rows([1], "s"), schema=SCHEMA)

    def commit(n: int) -> None:
        segs = [stage_segment(store, "t", p, tbl, f"{ident.txn_id(n)}~{p}") for p in range(4)]
        coord.commit(ident, ident.txn_id(n), segs)

    return store, coord, commit


def test_a_writer_checkpointing_partitions_computes_the_records_it_decided_instead_of_reading_them(
        backend: Backend) -> None:
    """A writer checkpoints a partition's index every few records, catching the index up over the records since
    it last looked. Those are records of entries it decided, still in memory: it computes them, even once a
    coordinator checkpoint covers them. (It used to forget them at every coordinator checkpoint and read each one
    back, one request after another: a writer serving 16 busy partitions spent a sixth of its requests on that.)"""
    inner = backend.open()
    store, coord, commit = _spread_writer(inner)
    for n in range(40):
        commit(n)
    coord.log.flush()
    checkpoints = [inner.list(f"topics/t/{p}/checkpoint") for p in range(4)]
    # 40 records each, a checkpoint every 8 (a busy writer may skip some: it checkpoints where it has reached)
    assert all(len(c) >= 2 for c in checkpoints), checkpoints
    assert store.record_gets == 0


def test_the_records_a_log_view_can_compute_are_bounded_by_the_entries_it_keeps_in_memory(
        backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived view keeps, per partition record, the entry that defines it only while that entry is in memory:
    the map stays bounded by the entries kept, however many entries the view reads, with no read of the newest
    checkpoint to prune it."""
    monkeypatch.setattr(txnlog, "_RECENT_KEPT", 6)
    make_topic(backend.open(), partitions=4)
    # no checkpoint of its own: the map is pruned as entries leave memory, not by checkpoints
    coord = TransactionCoordinator(backend.open(), checkpoint_interval=1_000)
    ident = coord.init_producer("bounded")
    tbl = pa.Table.from_pylist(rows([1], "b"), schema=SCHEMA)
    for n in range(30):
        segs = [stage_segment(coord.store, "t", p, tbl, f"{ident.txn_id(n)}~{p}") for p in range(4)]
        coord.commit(ident, ident.txn_id(n), segs)
    log = coord.log
    assert len(log._recent) == 6
    kept = {(t, p, i) for e in log._recent.values() for t, p, i in e.touched}
    assert set(log._record_seq) <= kept
    assert len(log._record_seq) >= 4 * 5  # the entries in memory still define theirs


def test_after_a_reset_the_records_a_view_can_compute_are_still_computed_once_a_checkpoint_covers_them(
        backend: Backend) -> None:
    """A reset (a jump back over entries a refresh applied unproven, say) drops the entries from memory but may leave
    their keys in the map of computable records; the next coordinator checkpoint prunes those, and only those: the
    records of entries read again since, in memory, are still computed rather than read back."""
    inner = backend.open()
    store, coord, commit = _spread_writer(inner)
    for n in range(6):
        commit(n)
    coord.log.flush()
    log = coord.log
    ck = log.last_checkpoint()
    assert ck is not None
    commit(6)  # its entry lies beyond the checkpoint the view is reset to
    with log._lock:
        log._reset(ck)
    assert any(s > ck.seq for s in log._record_seq.values())  # keys of entries no longer in memory
    for n in range(7, 11):
        commit(n)
    coord.log.flush()
    # (the first entries after the reset may read records back: those the reset dropped from memory, and the first
    # checks of their own; from here on, every record is one of an entry in memory)
    del store.records_read[:]
    for n in range(11, 40):
        commit(n)
    coord.log.flush()
    assert all(len(inner.list(f"topics/t/{p}/checkpoint")) >= 2 for p in range(4))
    assert store.records_read == []
    kept = {(t, p, i) for e in log._recent.values() for t, p, i in e.touched}
    assert set(log._record_seq) <= kept
