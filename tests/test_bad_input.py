"""G8: corrupt and truncated files give a clear CorruptLogError naming the file, other partitions stay readable and
nothing committed is lost; oversized records and odd inputs are handled."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from coordinator import (
    Consumer,
    CorruptLogError,
    InvalidNameError,
    InvalidOptionError,
    Producer,
    ProducerConfig,
    SchemaMismatchError,
    TransactionCoordinator,
    create_topic,
    open_store,
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


def test_an_integer_beyond_its_column_type_names_the_column(tmp_path: Path) -> None:
    import pandas as pd

    store = open_store(str(tmp_path / "lake"))
    make_topic(store, partitions=1)
    create_topic(store, "big", pa.schema([("n", pa.uint64())]))
    p = Producer(store, "w")
    p.init_transactions()
    with p.transaction():
        for data in ([{"id": 1, "txn": "a"}, {"id": 2**64, "txn": "b"}], pd.DataFrame({"id": [2**64], "txn": ["c"]})):
            with pytest.raises(SchemaMismatchError,
                               match=r"column 'id' of topic 't': value 18446744073709551616 is out of the range of "
                                     r"int64 \(-9223372036854775808 to 9223372036854775807\)"):
                p.send("t", data)
        with pytest.raises(SchemaMismatchError, match="column 'n' of topic 'big': value -1 is out of the range of "
                                                      "uint64"):
            p.send("big", [{"n": 2**63}, {"n": -1}])
        p.send("big", [{"n": 2**63}, {"n": 2**64 - 1}])  # what the topic's type holds is taken
    assert read_snapshot(store, ["t"])["t"].num_rows == 0  # nothing of the refused sends went in
    assert read_snapshot(store, ["big"])["big"].column("n").to_pylist() == [2**63, 2**64 - 1]


def test_a_transactional_id_is_checked_when_the_producer_is_made(tmp_path: Path) -> None:
    with pytest.raises(InvalidNameError, match="invalid transactional id name 'no spaces'"):
        Producer(str(tmp_path / "lake"), "no spaces")
    assert not (tmp_path / "lake").exists()


def test_a_streaming_transactional_id_too_long_for_file_names_is_refused_when_given(tmp_path: Path) -> None:
    """A valid 240-character id used to fail only at the first micro-batch's tasks (file name too long); it is
    refused by the driver, naming the option, before anything is written. The longest one taken fits every file
    name a micro-batch stages on local disk, with every id Spark gives at its largest."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from txnsink import make_stream_writer
    from txnsink.options import MAX_STREAM_ID_CHARS
    from txnsink.staging import TaskIds

    schema = StructType([StructField("id", LongType()), StructField("txn", StringType())])
    lake = tmp_path / "lake"
    opts = {"path": str(lake), "topic": "t", "checkpointLocation": str(tmp_path / "cp")}
    with pytest.raises(InvalidOptionError, match=f"option transactionalId='{'x' * 240}' is 240 characters; a "
                                                 f"streaming write takes at most {MAX_STREAM_ID_CHARS}"):
        make_stream_writer({**opts, "transactionalId": "x" * 240}, schema, False)
    assert not lake.exists()
    w = make_stream_writer({**opts, "transactionalId": "y" * MAX_STREAM_ID_CHARS}, schema, False)
    batch = pa.record_batch({"id": pa.array([7], pa.int64()), "txn": pa.array(["s"])})
    largest = TaskIds(2**31 - 1, 2**31 - 1, 2**63 - 1, "0" * 8 + "-0000-0000-0000-" + "0" * 12, 2**62)
    w.commit([w.stage(iter([batch]), largest)], 2**62)
    assert read_snapshot(str(lake), ["t"])["t"].column("id").to_pylist() == [7]
