"""Record headers (Kafka's ``headers``): the producer stores them in the reserved ``_headers`` column, the consumer
returns them with ``include_headers``; rows sent without headers, and segments written before, read as null."""

from __future__ import annotations

import pyarrow as pa
import pytest

from coordinator import Consumer, InvalidOptionError, Producer, create_topic, open_store
from coordinator.segments import HEADERS_TYPE

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def poll_all(lake: str, **kw: object) -> pa.Table:
    with Consumer(lake, **kw) as consumer:  # type: ignore[arg-type]
        consumer.subscribe(["t"])
        return consumer.poll().sort_by([("_partition", "ascending"), ("_offset", "ascending")])


def test_headers_round_trip_through_producer_and_consumer(tmp_path: object) -> None:
    lake = f"{tmp_path}/lake"
    create_topic(open_store(lake), "t", SCHEMA, partitions=1)
    producer = Producer(lake, "p")
    producer.init_transactions()
    with producer.transaction():
        producer.send("t", [{"id": 1}, {"id": 2}], partition=0, headers=[("trace", b"abc"), ("tenant", "x")])
        producer.send("t", [{"id": 3}], partition=0)  # no headers: null
        per_row = [{"id": 4, "h": [{"key": "k", "value": b"v4"}]}, {"id": 5, "h": []}]
        producer.send("t", pa.Table.from_pylist(per_row, pa.schema([("id", pa.int64()), ("h", HEADERS_TYPE)])),
                      partition=0, headers="h")
    got = poll_all(lake, include_headers=True)
    assert got.column("id").to_pylist() == [1, 2, 3, 4, 5]
    assert got.schema.field("_headers").type.equals(HEADERS_TYPE)
    assert got.column("_headers").to_pylist() == [
        [{"key": "trace", "value": b"abc"}, {"key": "tenant", "value": b"x"}],
        [{"key": "trace", "value": b"abc"}, {"key": "tenant", "value": b"x"}],
        None, [{"key": "k", "value": b"v4"}], [],
    ]
    # without include_headers the records are as before: no _headers, and the header column is not data
    plain = poll_all(lake)
    assert "_headers" not in plain.column_names and "h" not in plain.column_names


def test_bad_headers_are_refused_and_the_transaction_goes_on(tmp_path: object) -> None:
    lake = f"{tmp_path}/lake"
    create_topic(open_store(lake), "t", SCHEMA, partitions=1)
    producer = Producer(lake, "p")
    producer.init_transactions()
    with producer.transaction():
        with pytest.raises(InvalidOptionError, match="are not \\(key, value\\) pairs"):
            producer.send("t", [{"id": 1}], partition=0, headers=[("k", 5)])
        with pytest.raises(InvalidOptionError, match="headers column 'nope' is not a column"):
            producer.send("t", [{"id": 1}], partition=0, headers="nope")
        producer.send("t", [{"id": 2}], partition=0)
    assert poll_all(lake, include_headers=True).column("_headers").to_pylist() == [None]
