""""Equal bytes mean mine" only where the bytes are unique to their writer (the store contract, rule 2): a
conditional create that finds equal bytes reports success, so every conditionally created object carries a writer
token, or is a pure function of what is decided. A topic definition used to carry none: re-creating a deleted
topic's name with the same definition "succeeded", and a Spark append then committed rows no reader could see.
On memory, local disk and S3; the Spark writers are driven as Spark drives them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from coordinator import (
    Producer,
    TopicExistsError,
    TopicMeta,
    TopicNotFoundError,
    TransactionCoordinator,
    create_topic,
    get_topic,
    read_snapshot,
)
from coordinator.layout import topic_meta_path
from coordinator.topic_admin import delete_topic, set_topic_config
from core_helpers import Backend

SCHEMA = pa.schema([("id", pa.int64())])


def _spark_schema() -> Any:
    from pyspark.sql.types import LongType, StructField, StructType

    return StructType([StructField("id", LongType())])


def _batch(ids: list[int]) -> Iterator[pa.RecordBatch]:
    return iter([pa.record_batch({"id": pa.array(ids, pa.int64())})])


def _spark_append(backend: Backend, topic: str, ids: list[int]) -> None:
    """``df.write.format("txnlog").option("topic", topic).save(url)``: the driver's writer, one task, the commit."""
    from txnsink import make_writer
    from txnsink.staging import TaskIds, stage_batches

    w = make_writer({"path": backend.url, "topic": topic, **backend.options}, _spark_schema(), False)
    w.commit([stage_batches(backend.open(), w.plan, _batch(ids), TaskIds(0, 0, 0), w.txn)])


def _spark_micro_batch(backend: Backend, topic: str, ids: list[int], cp: Path) -> None:
    """One micro-batch of ``df.writeStream.format("txnlog")``: the driver's writer, one task, the commit."""
    from txnsink import make_stream_writer
    from txnsink.staging import TaskIds

    opts = {"path": backend.url, "topic": topic, "checkpointLocation": str(cp), **backend.options}
    w = make_stream_writer(opts, _spark_schema(), False)
    w.commit([w.stage(_batch(ids), TaskIds(0, 0, 0, "q-tokens", 0))], 0)


def test_a_deleted_topic_name_is_refused_even_with_the_same_definition(backend: Backend) -> None:
    create_topic(backend.open(), "gone", SCHEMA, 2)
    delete_topic(backend.coordinator(), "gone")
    for exist_ok in (False, True):
        with pytest.raises(TopicExistsError, match="topic 'gone' was deleted and its name is not reused"):
            create_topic(backend.open(), "gone", SCHEMA, 2, exist_ok=exist_ok)
    with pytest.raises(TopicNotFoundError, match="'gone' was deleted"):
        get_topic(backend.open(), "gone")


def test_every_write_to_a_deleted_topic_fails_before_anything_is_committed(backend: Backend, tmp_path: Path) -> None:
    _spark_append(backend, "gone", [1, 2])  # the sink created the topic from the DataFrame's schema
    assert sorted(read_snapshot(backend.open(), ["gone"])["gone"].column("id").to_pylist()) == [1, 2]
    delete_topic(backend.coordinator(), "gone")
    producer = Producer(backend.open(), "p")
    producer.init_transactions()
    seq = TransactionCoordinator(backend.open()).log.refresh().seq

    def produce() -> None:
        with producer.transaction():
            producer.send("gone", [{"id": 5}])

    writes = {
        "batch sink": lambda: _spark_append(backend, "gone", [3]),
        "stream sink": lambda: _spark_micro_batch(backend, "gone", [4], tmp_path / "cp"),
        "producer": produce,
    }
    for write in writes.values():
        with pytest.raises(TopicNotFoundError, match="topic 'gone' was deleted"):
            write()
    assert TransactionCoordinator(backend.open()).log.refresh().seq == seq  # nothing committed
    assert [o.path for o in backend.open().list_info("topics/gone") if not o.path.startswith("topics/gone/meta/")] \
        == []  # nor staged


def test_creating_a_topic_twice_is_refused_the_second_time(backend: Backend) -> None:
    first = create_topic(backend.open(), "t", SCHEMA, 2)
    with pytest.raises(TopicExistsError, match="topic 't' already exists"):
        create_topic(backend.open(), "t", SCHEMA, 2)  # the same definition: another writer's, not this one's
    assert create_topic(backend.open(), "t", SCHEMA, 2, exist_ok=True) == first
    assert get_topic(backend.open(), "t").token == first.token != ""


def test_every_definition_written_carries_its_own_token(backend: Backend) -> None:
    from coordinator.topics import create_definition

    store = backend.open()
    meta = TopicMeta("d", 1, SCHEMA, {}, 0, 0)
    mine = create_definition(store, meta)
    assert mine is not None and mine.token
    assert create_definition(backend.open(), meta) is None  # equal content, another writer: not a win
    # A stale administrator (it read version 0) setting the same value as one that won version 1 does not take
    # version 1 as its own: it reads again and writes version 2 on top of what is there.
    ahead = set_topic_config(backend.open(), "d", {"retention.ms": "1000"})
    assert ahead.version == 1
    stale = create_definition(backend.open(), TopicMeta("d", 1, SCHEMA, {"retention.ms": "1000"}, 1, 0))
    assert stale is None
    tokens = {get_topic(store, "d").token, mine.token}
    assert len(tokens) == 2


def test_definitions_written_without_a_token_still_read(backend: Backend) -> None:
    """Topics created before definitions carried tokens: read as before (token empty), and growable."""
    store = backend.open()
    create_topic(store, "old", SCHEMA)  # makes the store; its definition is replaced below by a tokenless one
    legacy = TopicMeta("older", 2, SCHEMA, {"partitioner": get_topic(store, "old").config["partitioner"]})
    body = legacy.to_bytes().replace(b',"token":""', b"")
    assert b"token" not in body
    store.put(topic_meta_path("older", 0), body)
    got = get_topic(backend.open(), "older")
    assert got == legacy and got.token == ""
    assert set_topic_config(backend.open(), "older", {"retention.ms": "5"}).token
