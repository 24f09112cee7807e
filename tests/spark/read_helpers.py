"""Test data for the Spark reader tests: a two-column topic schema and committed transactions made with the core
producer (the reader tests never depend on the Spark writer)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from coordinator import Producer

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def rows(start: int, n: int) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}"} for i in range(start, start + n)]


def produce(lake: str, topic: str, txns: list[list[dict[str, Any]]], *, partition: int | None = 0,
            tid: str = "writer", options: dict[str, str] | None = None) -> None:
    """One committed transaction per list in ``txns``, each one segment in ``partition``."""
    producer = Producer(lake, tid, options=options)
    producer.init_transactions()
    for data in txns:
        with producer.transaction():
            producer.send(topic, data, partition=partition)
