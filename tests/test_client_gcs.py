"""The Python producer and consumer on the loopback GCS endpoint (fake-gcs-server): transactions across two topics,
read_committed consumption, an aborted transaction that no reader sees, and a fenced zombie."""

from __future__ import annotations

import pyarrow as pa
import pytest

from coordinator import Consumer, Producer, create_topic, open_store, read_snapshot
from coordinator.errors import ProducerFencedError
from gcs_lake import GCSLake

pytestmark = pytest.mark.gcs

SCHEMA = pa.schema([("id", pa.int64()), ("txn", pa.string())])


def test_gcs_transactions_are_exactly_once_and_aborts_invisible(gcs_lake: GCSLake) -> None:
    store = open_store(gcs_lake.url, gcs_lake.options)
    create_topic(store, "orders", SCHEMA, 3)
    create_topic(store, "audit", SCHEMA, 1)
    producer = Producer(store, "etl")
    producer.init_transactions()
    sent: list[int] = []
    for t in range(3):
        with producer.transaction():
            batch = list(range(t * 5, t * 5 + 5))
            producer.send("orders", [{"id": i, "txn": f"t{t}"} for i in batch], key="id")
            producer.send("audit", [{"id": batch[0], "txn": f"t{t}"}], partition=0)
        sent += batch
    producer.begin_transaction()
    producer.send("orders", [{"id": -1, "txn": "aborted"}], partition=0)
    producer.send("audit", [{"id": -1, "txn": "aborted"}], partition=0)
    producer.flush()
    producer.abort_transaction()
    with producer.transaction():
        producer.send("orders", [{"id": 100, "txn": "after"}], partition=0)
    # a second producer with the same transactional id fences the first
    successor = Producer(open_store(gcs_lake.url, gcs_lake.options), "etl")
    successor.init_transactions()
    with pytest.raises(ProducerFencedError), producer.transaction():
        producer.send("orders", [{"id": -2, "txn": "zombie"}], partition=1)

    consumer = Consumer(open_store(gcs_lake.url, gcs_lake.options), isolation_level="read_committed")
    consumer.subscribe(["orders", "audit"])
    got = consumer.poll()
    assert consumer.poll().num_rows == 0
    orders = got.filter(pa.compute.equal(got.column("_topic"), "orders"))
    audit = got.filter(pa.compute.equal(got.column("_topic"), "audit"))
    assert sorted(orders.column("id").to_pylist()) == sent + [100]
    assert audit.column("id").to_pylist() == [0, 5, 10]
    # a snapshot read agrees: committed rows only
    snap = read_snapshot(open_store(gcs_lake.url, gcs_lake.options), ["orders"])["orders"]
    assert sorted(snap.column("id").to_pylist()) == sent + [100]
    assert store.counters["put_if_absent"] > 0
