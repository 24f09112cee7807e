"""The coordinator state's producers by pid: an index kept with the producers, never a scan of them."""
from __future__ import annotations

from coordinator.records import AbortItem, CommitItem, ExpireItem, InitItem, Item
from coordinator.state import CoordinatorState, ProducerMeta


def _scan(st: CoordinatorState, pid: int) -> ProducerMeta | None:
    return next((m for m in st.producers.values() if m.pid == pid), None)


def _agrees(st: CoordinatorState, pids: range) -> None:
    for got in (st, st.copy(), CoordinatorState.from_json(st.to_json(), "test")):
        for pid in pids:
            assert got.producer_by_pid(pid) == _scan(got, pid), f"pid {pid} after entry {st.seq}"


def test_producers_by_pid_agree_with_the_producers_through_every_kind_of_change() -> None:
    """Every change of a producer (init, commit, abort, fence, expiry, an ephemeral producer's end, a transactional
    id given a new pid) leaves ``producer_by_pid`` answering what a scan of the producers answers, in the state, in
    its copy and in a checkpoint of it. A pid left behind in the index would name a producer that holds another
    pid now: the transactions of its old pid would be judged against the new one's epoch and numbers."""
    st = CoordinatorState()
    steps: list[Item] = [
        InitItem("i-a", tid="a", pid=0, epoch=0),
        InitItem("i-b", tid="b", pid=1, epoch=0),
        InitItem("i-c", tid="c", pid=2, epoch=0, ephemeral=True),
        CommitItem("c-a0", txn="a0", tid="a", pid=0, epoch=0, n=0),
        AbortItem("x-b0", txn="b0", tid="b", pid=1, epoch=0, n=0, reason="test"),
        AbortItem("x-b1", txn="b1", tid="b", pid=1, epoch=0, n=1, reason="timeout", fence=True),
        CommitItem("c-c0", txn="c0", tid="c", pid=2, epoch=0, n=0, end_producer=True),
        ExpireItem("e-a", tid="a", pid=0, reason="expired"),
        InitItem("i-a2", tid="a", pid=3, epoch=0),  # the expired id comes back under a new pid
        InitItem("i-b2", tid="b", pid=4, epoch=0),  # an id given a new pid while it is known
        AbortItem("x-b2", txn="b2", tid="b", pid=4, epoch=0, n=0, reason="test", end_producer=True),
    ]
    for seq, item in enumerate(steps):
        st.apply_item(item, 1_000 + seq)
        st.seq = seq
        _agrees(st, range(6))
    assert st.producer_by_pid(0) is None and st.producer_by_pid(1) is None and st.producer_by_pid(4) is None
    meta = st.producer_by_pid(3)
    assert meta is not None and meta.tid == "a"
    assert set(st.producers) == {"a"}
