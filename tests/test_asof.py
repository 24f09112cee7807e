"""``coordinator.asof``: the snapshot as of an earlier transaction log entry is the cut a reader took at that entry
(decisions after it ignored, commits up to it included), rebuilt from checkpoints and retained entries, and refused
when log truncation removed what the rebuild needs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from coordinator import InvalidOptionError, Producer, create_topic, open_store
from coordinator.asof import snapshot_at
from coordinator.coordinator import TransactionCoordinator
from coordinator.maintenance.retention import apply_retention

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def _producer(store: object, tid: str, *, interval: int = 4) -> Producer:
    coord = TransactionCoordinator(store, checkpoint_interval=interval)  # type: ignore[arg-type]
    coord.log.background_checkpoints = False
    p = Producer(store, tid, coordinator=coord)  # type: ignore[arg-type]
    p.init_transactions()
    return p


def test_snapshot_at_an_entry_is_the_cut_taken_then(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    create_topic(store, "t", SCHEMA, partitions=2)
    a, b = _producer(store, "a"), _producer(store, "b")
    seen = []
    b.begin_transaction()
    b.send("t", [{"id": -1}], partition=1)  # staged now, committed only after several cuts below
    for i in range(10):
        with a.transaction():
            a.send("t", [{"id": i}], partition=i % 2)
        if i == 3:
            a.begin_transaction()
            a.send("t", [{"id": 99}], partition=0)
            a.abort_transaction()
        if i == 6:
            apply_retention(TransactionCoordinator(store), "t", 0, retention_bytes=0)
        seen.append(TransactionCoordinator(store).snapshot(["t"]))
    b.commit_transaction()
    reader = TransactionCoordinator(store)
    for snap in seen:
        assert snapshot_at(reader, ["t"], snap.seq) == snap
    newest = reader.snapshot(["t"])
    assert newest.ends["t"][1] == seen[-1].ends["t"][1] + 1  # b's commit, after every cut above
    assert snapshot_at(reader, ["t"], newest.seq) == newest


def test_an_entry_beyond_the_log_is_refused(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    create_topic(store, "t", SCHEMA, partitions=1)
    p = _producer(store, "p")
    with p.transaction():
        p.send("t", [{"id": 1}], partition=0)
    coord = TransactionCoordinator(store)
    last = coord.snapshot(["t"]).seq
    with pytest.raises(InvalidOptionError, match=rf"log entry {last + 5} is outside .*\[0, {last}\]"):
        snapshot_at(coord, ["t"], last + 5)


def test_an_entry_log_truncation_removed_is_refused_not_guessed(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    create_topic(store, "t", SCHEMA, partitions=1)
    p = _producer(store, "p", interval=2)
    cuts = []
    for i in range(12):
        with p.transaction():
            p.send("t", [{"id": i}], partition=0)
        cuts.append(TransactionCoordinator(store).snapshot(["t"]))
    assert TransactionCoordinator(store).log.truncate(now=store.now() + 3600) > 0
    coord = TransactionCoordinator(store)
    with pytest.raises(InvalidOptionError, match=rf"snapshot at log entry {cuts[0].seq} can no longer be rebuilt: "
                                                 r"log truncation removed .* oldest entry retained is \d+"):
        snapshot_at(coord, ["t"], cuts[0].seq)
    assert snapshot_at(coord, ["t"], cuts[-1].seq) == cuts[-1]
