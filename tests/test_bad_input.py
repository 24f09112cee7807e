"""G8: corrupt and truncated files give a clear CorruptLogError naming the file, other partitions stay readable and
nothing committed is lost; oversized records and odd inputs are handled."""

from __future__ import annotations

import pyarrow as pa
import pytest

from coordinator import (
    Consumer,
    CorruptLogError,
    Producer,
    ProducerConfig,
    TransactionCoordinator,
    read_snapshot,
)
from coordinator.layout import marker_path, txn_log_path
from core_helpers import Backend, make_topic, rows


def two_partitions(backend: Backend) -> None:
    make_topic(backend.open(), partitions=2)
    store = backend.open()
    p = Producer(store, "w", coordinator=TransactionCoordinator(store, checkpoint_interval=100))
    p.init_transactions()
    for i in range(3):
        with p.transaction():
            p.send("t", rows([i * 2], "x"), partition=0)
            p.send("t", rows([i * 2 + 1], "x"), partition=1)


def read_partition(backend: Backend, partition: int) -> list[int]:
    c = Consumer(backend.open())
    c.assign([("t", partition)])
    return c.poll().column("id").to_pylist()


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_damaged_segment_names_the_file_and_spares_other_partitions(backend: Backend, damage: str) -> None:
    two_partitions(backend)
    store = backend.open()
    plog = TransactionCoordinator(store).partition("t", 0)
    victim = plog.segments[1].path
    data = store.get(victim)
    if damage == "truncate":
        store.put(victim, data[: len(data) // 2])
    elif damage == "flip":
        store.put(victim, data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    else:
        store.delete(victim)
    with pytest.raises(CorruptLogError, match=victim.replace(".", r"\.")):
        read_partition(backend, 0)
    assert read_partition(backend, 1) == [1, 3, 5]
    # Offsets before the damaged segment still read.
    c = Consumer(backend.open())
    c.assign([("t", 0)])
    assert c.poll(max_records=1).column("id").to_pylist() == [0]


@pytest.mark.parametrize("damage", [b"", b"{not json", b'{"v": 2, "ops": []}', b'{"v": 2, "idx": 1, "ops": [{}]}'])
def test_corrupt_partition_record_is_healed_from_the_log_then_names_itself(backend: Backend, damage: bytes) -> None:
    from coordinator import inspect as ti

    two_partitions(backend)
    store = backend.open()
    path = marker_path("t", 0, 1)
    store.put(path, damage)
    # While the log entry that defines the record is retained, readers compute it: nothing is lost ...
    assert read_partition(backend, 0) == [0, 2, 4]
    # ... and verify names the damaged partition and its file.
    problems = [p for p in ti.verify(backend.open()) if p.path == path]
    assert problems and "partition t/0 is damaged" in problems[0].message
    # Once the log is checkpointed (the entries below are not needed by readers any more), a reader starting
    # from the checkpoint has nothing to compute the record from: the error names the file; partition 1 reads on.
    coord = TransactionCoordinator(backend.open())
    coord.log.write_checkpoint()
    with pytest.raises(CorruptLogError, match=path.replace(".", r"\.")):
        read_partition(backend, 0)
    assert read_partition(backend, 1) == [1, 3, 5]
    # The documented repair rewrites the record from the retained entry.
    assert TransactionCoordinator(backend.open()).repair_records(damaged=True) >= 1
    assert read_partition(backend, 0) == [0, 2, 4]
    assert [p for p in ti.verify(backend.open()) if p.path == path] == []


def test_corrupt_transaction_log_entry_names_the_file(backend: Backend) -> None:
    two_partitions(backend)
    store = backend.open()
    path = txn_log_path(2)
    store.put(path, b'{"seq": 2, "tid": "w"')
    with pytest.raises(CorruptLogError, match=path.replace(".", r"\.")):
        TransactionCoordinator(backend.open()).log.refresh()
    # The partitions' own logs do not depend on it: everything committed is still there and readable.
    from coordinator import PartitionLog

    ends = []
    for p in (0, 1):
        plog = PartitionLog(backend.open(), "t", p)
        plog.refresh()
        ends.append(plog.end_offset)
    assert ends == [3, 3]


def test_record_larger_than_the_segment_target_is_written_alone(backend: Backend) -> None:
    store = backend.open()
    schema = pa.schema([("id", pa.int64()), ("txn", pa.string())])
    from coordinator import create_topic

    create_topic(store, "big", schema, 1)
    p = Producer(store, "big", config=ProducerConfig(segment_target_bytes=1024))
    p.init_transactions()
    huge = "x" * 200_000
    with p.transaction():
        p.send("big", [{"id": 1, "txn": "small"}])
        p.send("big", [{"id": 2, "txn": huge}])
        p.send("big", [{"id": 3, "txn": "small"}])
    table = read_snapshot(backend.open(), ["big"])["big"].sort_by("_offset")
    assert table.column("id").to_pylist() == [1, 2, 3]
    assert len(table.column("txn")[1].as_py()) == 200_000
    assert len(TransactionCoordinator(backend.open()).partition("big", 0).segments) >= 2


def test_empty_and_odd_sends(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    p = Producer(backend.open(), "odd")
    p.init_transactions()
    import pandas as pd

    with p.transaction():
        p.send("t", [])  # nothing
        p.send("t", pd.DataFrame({"id": [1, 2], "txn": ["a", None]}))
        p.send("t", pa.record_batch([pa.array([3]), pa.array(["c"])], names=["id", "txn"]))
    got = read_snapshot(backend.open(), ["t"])["t"].sort_by("_offset")
    assert got.column("id").to_pylist() == [1, 2, 3] and got.column("txn").to_pylist() == ["a", None, "c"]
