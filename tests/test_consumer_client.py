"""The Python consumer's client surface: ``poll(max_records)`` shares its budget fairly across partitions,
``commit()`` records the group's positions outside any transaction (Kafka's ``commitSync``), ``close()`` and the
context manager end it, and iterating yields batches until caught up. Memory, local disk and S3."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from coordinator import ClientClosedError, Consumer, InvalidOptionError, Producer, create_topic
from coordinator.consumer import fair_shares
from core_helpers import Backend

SCHEMA = pa.schema([("id", pa.int64())])


def _topic(backend: Backend, sizes: list[int]) -> None:
    """Topic ``t`` whose partition ``p`` holds ``sizes[p]`` records (ids ``p * 1000 + k``), one commit."""
    store = backend.open()
    create_topic(store, "t", SCHEMA, len(sizes))
    prod = Producer(store, "w")
    prod.init_transactions()
    with prod.transaction():
        for p, n in enumerate(sizes):
            if n:
                prod.send("t", [{"id": p * 1000 + k} for k in range(n)], partition=p)


def test_fair_shares_split_the_budget_max_min() -> None:
    assert fair_shares({("t", 0): 120, ("t", 1): 120, ("t", 2): 120}, 120) == {("t", 0): 40, ("t", 1): 40,
                                                                               ("t", 2): 40}
    # What a small partition cannot use goes to the others.
    assert fair_shares({("t", 0): 500, ("t", 1): 5, ("t", 2): 0, ("t", 3): 500}, 120) == {
        ("t", 0): 58, ("t", 1): 5, ("t", 2): 0, ("t", 3): 57}
    # A remainder smaller than the partition count rotates with ``first``.
    assert fair_shares({("t", 0): 9, ("t", 1): 9}, 1, 0) == {("t", 0): 1, ("t", 1): 0}
    assert fair_shares({("t", 0): 9, ("t", 1): 9}, 1, 1) == {("t", 0): 0, ("t", 1): 1}
    assert sum(fair_shares({("t", p): 1000 for p in range(7)}, 100).values()) == 100
    assert fair_shares({("t", 0): 3}, 100) == {("t", 0): 3}


def test_poll_shares_its_budget_across_partitions(backend: Backend) -> None:
    _topic(backend, [300, 300, 300, 10])
    c = Consumer(backend.open())
    c.subscribe(["t"])
    batch = c.poll(max_records=120)
    per_partition = Counter(batch.column("_partition").to_pylist())
    assert batch.num_rows == 120 and per_partition == {0: 37, 1: 37, 2: 36, 3: 10}
    # Each partition's records come in offset order, from where the last poll stopped.
    assert [c.position("t", p) for p in range(4)] == [37, 37, 36, 10]
    again = c.poll(max_records=90)
    assert Counter(again.column("_partition").to_pylist()) == {0: 30, 1: 30, 2: 30}
    rows = sorted(zip(again.column("_partition").to_pylist(), again.column("_offset").to_pylist(), strict=True))
    assert [o for p, o in rows if p == 0] == list(range(37, 67))
    with pytest.raises(InvalidOptionError):
        c.poll(max_records=0)


def test_commit_records_positions_outside_transactions(backend: Backend) -> None:
    _topic(backend, [5, 5])
    c = Consumer(backend.open(), group_id="g")
    c.subscribe(["t"])
    c.poll(max_records=4)
    c.commit()
    assert backend.coordinator().group_offsets("g") == {"t": {0: 2, 1: 2}}
    resumed = Consumer(backend.open(), group_id="g")
    resumed.subscribe(["t"])
    assert sorted(resumed.poll().column("id").to_pylist()) == [2, 3, 4, 1002, 1003, 1004]
    c.commit({"t": {1: 5}})  # explicit offsets, as commitSync(offsets)
    assert backend.coordinator().group_offsets("g") == {"t": {0: 2, 1: 5}}
    with pytest.raises(InvalidOptionError, match="negative"):
        c.commit({"t": {0: -1}})
    with pytest.raises(InvalidOptionError, match="group_id"):
        Consumer(backend.open()).commit()


def test_iteration_yields_until_caught_up_and_close_ends_the_consumer(backend: Backend) -> None:
    _topic(backend, [25, 25])
    with Consumer(backend.open(), group_id="g", max_poll_records=10) as c:
        c.subscribe(["t"])
        sizes = [b.num_rows for b in c]
        assert sizes == [10, 10, 10, 10, 10]
        assert list(c) == []  # caught up: iteration ends at once
        c.commit()
        assert "2 partition(s) assigned" in repr(c)
    assert "closed" in repr(c)
    for call in (c.poll, c.commit, lambda: c.subscribe(["t"])):
        with pytest.raises(ClientClosedError):
            call()
    c.close()  # idempotent
    assert backend.coordinator().group_offsets("g") == {"t": {0: 25, 1: 25}}
