"""The randomized history checker: generated histories with injected faults must show zero anomalies, and every
checker rule must fire on a hand-made bad history (so the checker can fail).

Default run: a few hundred short histories (memory store mostly, some on local disk, a couple across processes,
one on the loopback S3 server) plus a small Hypothesis search over workload parameters. ``-m slow`` adds a long run.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import MemoryStore, Producer, ProducerFencedError, faults, open_store
from coordinator.faults import InjectedCrash
from history.checker import FAILED, OK, RULES, UNKNOWN, History, MiscOp, ReadOp, TxnOp, check
from history.run import Summary, main, run
from history.workload import params_for, run_history
from s3_lake import S3Lake


def _assert_clean(summary: Summary) -> None:
    assert summary.histories and summary.operations and summary.faults, summary.line()
    assert not summary.anomalies, summary.line() + "\n" + "\n".join(summary.details())


# -- generated histories --------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", range(4))
def test_memory_histories_have_no_anomalies(chunk: int) -> None:
    _assert_clean(run(10_000 + chunk * 30, 30, "memory"))


def test_local_disk_histories_have_no_anomalies(tmp_path: Path) -> None:
    n = iter(range(100))
    _assert_clean(run(20_000, 5, steps=15, factory=lambda seed: (f"file://{tmp_path}/h{seed}-{next(n)}", {})))


def test_histories_across_processes_have_no_anomalies(tmp_path: Path) -> None:
    _assert_clean(run(30_000, 2, processes=True, steps=12,
                      factory=lambda seed: (f"file://{tmp_path}/p{seed}", {})))


def test_s3_history_has_no_anomalies(s3_lake: S3Lake) -> None:
    h = run_history(params_for(40_000, s3_lake.url, s3_lake.options, steps=6, workers=1, fault_rate=0.05))
    assert h.faults and len(h.ops) > 6
    assert check(h) == []


@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**20), fault_rate=st.sampled_from([0.0, 0.02, 0.05, 0.1]),
       steps=st.integers(3, 25), ckpt=st.sampled_from([0, 2, 7]), lost=st.sampled_from([0.0, 0.03]),
       zombies=st.sampled_from([0.0, 1.0]))
def test_hypothesis_workload_parameters(seed: int, fault_rate: float, steps: int, ckpt: int, lost: float,
                                        zombies: float) -> None:
    """Single-worker histories are deterministic for a seed, so Hypothesis can shrink a failure."""
    url = f"memory://hyp-{uuid.uuid4().hex}"
    try:
        h = run_history(params_for(seed, url, fault_rate=fault_rate, steps=steps, workers=1,
                                   checkpoint_interval=ckpt, lost_reply_rate=lost, zombie_rate=zombies))
        assert check(h) == [], h.params
    finally:
        MemoryStore.drop(url)


@pytest.mark.slow
def test_long_run_has_no_anomalies(tmp_path: Path) -> None:
    _assert_clean(run(100_000, 1000, "memory", 0.05, steps=40))
    _assert_clean(run(200_000, 30, factory=lambda seed: (f"file://{tmp_path}/l{seed}", {})))
    _assert_clean(run(300_000, 6, processes=True, factory=lambda seed: (f"file://{tmp_path}/p{seed}", {})))


def test_command_line_prints_one_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--seed", "7", "--histories", "3", "--steps", "8"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("histories=3 operations=") and " faults=" in out[0] and "anomalies=" in out[0]
    assert code == (1 if len(out) > 1 else 0)


# -- the checker can fail -------------------------------------------------------------------------------------


def _good() -> History:
    """A small consistent history: A committed (a/0 twice, b/0 once), F failed, a consume-transform-produce step
    that consumed in/0@0 and produced its output, a snapshot and its re-read, a final read."""
    a = TxnOp("A", "w0t0", 0, 1, start=10, end=20, commit_start=15, outcome=OK,
              writes={("a", 0): ["w0t0/0/1/0", "w0t0/0/1/1"], ("b", 0): ["w0t0/0/1/2"]})
    f = TxnOp("F", "w0t1", 0, 1, start=10, end=12, outcome=FAILED, writes={("a", 1): ["w0t1/0/1/0"]})
    i = TxnOp("I", "w0t0", 0, 2, start=21, end=30, commit_start=25, outcome=OK,
              writes={("in", 0): ["w0t0/0/2/0", "w0t0/0/2/1"]})
    c = TxnOp("C", "ctp", 0, 1, start=31, end=40, commit_start=35, outcome=OK, offsets={"in": {0: 1}},
              writes={("out", 0): ["ctp/0/1/0|w0t0/0/2/0"]})
    u = TxnOp("U", "w0t1", 1, 2, start=41, end=44, commit_start=42, outcome=UNKNOWN,
              writes={("a", 2): ["w0t1/1/2/0"]})
    recs_a = [("a", 0, 0, "w0t0/0/1/0"), ("a", 0, 1, "w0t0/0/1/1"), ("b", 0, 0, "w0t0/0/1/2")]
    snap = ReadOp("S", "snapshot", start=21, end=22, topics=("a", "b"), complete=True, records=list(recs_a))
    again = ReadOp("R", "reread", start=50, end=51, topics=("a", "b"), reread_of="S", records=list(recs_a))
    poll = ReadOp("P", "poll", start=26, end=27, topics=("a", "b", "in"), session="s1", complete=True,
                  start_positions={("a", 0): 0}, records=[*recs_a, ("in", 0, 0, "w0t0/0/2/0"),
                                                          ("in", 0, 1, "w0t0/0/2/1"), ("a", 1, None, "w0t1/0/1/0")])
    final = ReadOp("final", "final", start=60, end=61, topics=("a", "b", "in", "out"), complete=True,
                   records=[*recs_a, ("in", 0, 0, "w0t0/0/2/0"), ("in", 0, 1, "w0t0/0/2/1"),
                            ("out", 0, 0, "ctp/0/1/0|w0t0/0/2/0")])
    init = MiscOp("init", "init", 1, 2, error="InjectedCrash: txnlog.Empty.after", outcome=UNKNOWN)
    return History(1, "hand-made", ops=[init, a, f, i, c, u, snap, again, poll], final=final,
                   final_groups={"ctp": {"in": {0: 1}}}, ctp=("ctp", "in", "out"))


def _final(h: History) -> ReadOp:
    assert h.final is not None
    return h.final


def _break(rule: str, h: History) -> None:
    """Damage ``h`` the way ``rule`` should notice."""
    ops = {o.id: o for o in h.ops}
    snap, poll = ops["S"], ops["P"]
    assert isinstance(snap, ReadOp) and isinstance(poll, ReadOp)
    final = _final(h)
    if rule == "duplicate":
        final.records.append(("a", 0, 2, "w0t0/0/1/0"))
    elif rule == "offset-conflict":
        snap.records[0] = ("a", 0, 0, "w0t0/0/1/1")
        snap.records[1] = ("a", 0, 1, "w0t0/0/1/0")
    elif rule == "aborted-read":
        final.records.append(("a", 1, 0, "w0t1/0/1/0"))
    elif rule == "undecided-read":
        snap.end = 12  # before A asked to commit
    elif rule == "lost-write":
        final.records.remove(("b", 0, 0, "w0t0/0/1/2"))
    elif rule == "gap":
        final.records[1] = ("a", 0, 2, "w0t0/0/1/1")
    elif rule == "order":
        final.records[0], final.records[1] = ("a", 0, 0, "w0t0/0/1/1"), ("a", 0, 1, "w0t0/0/1/0")
    elif rule == "torn-transaction":
        snap.records.remove(("b", 0, 0, "w0t0/0/1/2"))
    elif rule == "group-offsets":
        h.final_groups = {"ctp": {"in": {0: 2}}}  # consumed two inputs, produced one output
    elif rule == "fencing":
        h.ops.append(TxnOp("Z", "w0t0", 0, 9, start=70, end=71, commit_start=70, outcome=FAILED, zombie=True,
                           error="InvalidTxnStateError: cannot go from PrepareCommit to PrepareCommit"))
    elif rule == "unstable-snapshot":
        again = ops["R"]
        assert isinstance(again, ReadOp)
        again.records = again.records[:2]
    elif rule == "unexpected-error":
        h.ops.append(MiscOp("X", "sweep", 70, 71, outcome=UNKNOWN, error="KeyError: '1.0.abc'"))
    else:
        raise AssertionError(f"no bad history for rule {rule}")


def test_hand_made_good_history_is_clean() -> None:
    assert check(_good()) == []


def test_fencing_rule_accepts_a_zombie_retry_only_of_a_transaction_committed_before_the_fence() -> None:
    h = _good()
    # U (outcome unknown) is not in the final read: a zombie retry of it acknowledged would be a commit after the
    # fence; a retry of A (all of it in the final read) answered with A's decision is fine.
    h.ops.append(TxnOp("ZA", "w0t0", 0, 9, start=70, end=71, commit_start=70, outcome=OK, zombie=True,
                       retry_of="A"))
    assert check(h) == []
    h.ops.append(TxnOp("ZU", "w0t1", 1, 9, start=72, end=73, commit_start=72, outcome=OK, zombie=True,
                       retry_of="U"))
    assert [a.kind for a in check(h)] == ["fencing"]


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_fires_on_a_bad_history(rule: str) -> None:
    h = _good()
    _break(rule, h)
    kinds = {a.kind for a in check(h)}
    assert rule in kinds, f"{rule} did not fire; got {kinds}"
    assert all(a.seed == 1 for a in check(h))


def test_unknown_outcome_may_be_present_or_absent_but_never_partial() -> None:
    h = _good()
    final = _final(h)
    assert check(h) == []  # U absent
    final.records.append(("a", 2, 0, "w0t1/1/2/0"))
    assert check(h) == []  # U present
    h2 = _good()
    ops = {o.id: o for o in h2.ops}
    u = ops["U"]
    assert isinstance(u, TxnOp)
    u.writes[("b", 1)] = ["w0t1/1/2/1"]
    _final(h2).records.append(("a", 2, 0, "w0t1/1/2/0"))
    kinds = {a.kind for a in check(h2)}
    assert "torn-transaction" in kinds and kinds <= {"torn-transaction", "lost-write"}, kinds


def test_zombie_commit_and_acknowledged_zombie_are_flagged() -> None:
    h = _good()
    h.ops.append(TxnOp("Z", "w0t0", 0, 9, start=70, end=71, commit_start=70, outcome=OK, zombie=True))
    assert [a.kind for a in check(h)] == ["fencing"]


def test_a_real_history_with_a_dropped_record_is_flagged() -> None:
    url = f"memory://drop-{uuid.uuid4().hex}"
    h = run_history(params_for(5, url, steps=20, workers=1, fault_rate=0.0, lost_reply_rate=0.0))
    MemoryStore.drop(url)
    assert check(h) == []
    acked = next(o for o in h.txns() if o.outcome == OK and o.values())
    bad = copy.deepcopy(h)
    _final(bad).records = [r for r in _final(bad).records if r[3] != acked.values()[0]]
    assert "lost-write" in {a.kind for a in check(bad)}


def test_a_sabotaged_core_is_caught_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """If abort published the transaction instead, the histories must show aborted reads."""
    def abort_by_committing(self: Producer) -> None:
        Producer.commit_transaction(self)

    monkeypatch.setattr(Producer, "abort_transaction", abort_by_committing)
    found = set()
    for seed in range(6):
        url = f"memory://sabotage-{uuid.uuid4().hex}"
        h = run_history(params_for(seed, url, steps=25, workers=1, fault_rate=0.0, lost_reply_rate=0.0))
        MemoryStore.drop(url)
        found |= {a.kind for a in check(h)}
    assert "aborted-read" in found


# -- regression tests for bugs the histories found ------------------------------------------------------------


def _zombie_setup(tid: str) -> tuple[str, Producer]:
    from history.workload import setup_topics

    url = f"memory://zombie-{uuid.uuid4().hex}"
    setup_topics(url, {})
    old = Producer(open_store(url), tid)
    old.init_transactions()
    old.begin_transaction()
    old.send("a", [{"v": f"{tid}/0/1/0"}], partition=0)
    old.flush()
    return url, old


def _crash_at(point: str) -> Callable[[str], None]:
    def injector(name: str) -> None:
        if name == point:
            raise InjectedCrash(name)

    return injector


def test_zombie_retrying_a_commit_past_its_commit_point_gets_the_recorded_decision() -> None:
    """G3/G7: a zombie whose commit crashed after the commit point and that retries the commit once a new epoch
    exists gets the decision made before the fence (committed: nothing happens again), never InvalidTxnStateError;
    anything new it tries is fenced. (The first build answered InvalidTxnStateError "cannot go from PrepareCommit
    to PrepareCommit", found by the histories: ``run.py --seed 5 --histories 1``.)"""
    url, old = _zombie_setup("z")
    try:
        with faults.injected(_crash_at("record.before")), pytest.raises(InjectedCrash):
            old.commit_transaction()
        Producer(open_store(url), "z").init_transactions()  # the new process bumps the epoch
        assert old.commit_transaction().txn.endswith(".0")
        old.begin_transaction()
        old.send("a", [{"v": "z/0/2/0"}], partition=0)
        with pytest.raises(ProducerFencedError):
            old.commit_transaction()
    finally:
        MemoryStore.drop(url)


def test_zombie_starting_a_transaction_after_a_crashed_abort_is_fenced() -> None:
    """G3, same cause: a zombie whose abort crashed (its replay still shows its transaction Ongoing or
    PrepareAbort) starts a new transaction after a new epoch exists; ``begin`` answers InvalidTxnStateError
    "is Ongoing; cannot begin" instead of ProducerFencedError (``run.py --seed 13 --histories 1``)."""
    url, old = _zombie_setup("y")
    try:
        with faults.injected(_crash_at("txnlog.entry.after")), pytest.raises(InjectedCrash):
            old.abort_transaction()
        Producer(open_store(url), "y").init_transactions()
        old.begin_transaction()
        old.send("a", [{"v": "y/0/2/0"}], partition=0)
        with pytest.raises(ProducerFencedError):
            old.flush()
    finally:
        MemoryStore.drop(url)


def test_commit_completed_by_another_process_is_acknowledged() -> None:
    """G5/G7: when another process (a reader's snapshot, a sweeper) rolls a transaction forward between its
    commit point and the committer's own completion, ``commit`` must still acknowledge it. It raises
    ``KeyError: '<txn>'`` instead: ``complete_pending`` skips the transaction (no longer pending) and ``commit``
    then looks its offsets up in a cached ``PartitionLog`` that has not read the new marker
    (``coordinator.py``, ``self.partition(topic, p).txns[txn]``). Found by the histories with concurrent
    workers (``run.py --seed 10078 --histories 1``; interleaving dependent)."""
    from coordinator import TransactionCoordinator
    from history.workload import setup_topics

    url = f"memory://race-{uuid.uuid4().hex}"
    setup_topics(url, {})
    producer = Producer(open_store(url), "r")
    producer.init_transactions()
    with producer.transaction():  # caches the partition log of a/0 in the producer's coordinator
        producer.send("a", [{"v": "r/0/1/0"}], partition=0)
    producer.begin_transaction()
    producer.send("a", [{"v": "r/0/2/0"}], partition=0)
    busy: list[str] = []

    def other_process_rolls_forward(name: str) -> None:
        if name == "txnlog.entry.after" and not busy:
            busy.append(name)
            TransactionCoordinator(open_store(url)).repair_records()

    try:
        with faults.injected(other_process_rolls_forward):
            result = producer.commit_transaction()
        assert result.offsets == {("a", 0): (1, 2)}
    finally:
        MemoryStore.drop(url)
