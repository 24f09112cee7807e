"""Driver-side preparation shared by the batch and streaming writers: parse the options, open the store, and
create the topic or check that the DataFrame fits it, all before any task runs.

Which topic a row goes to: the ``topic`` option when set (as in Spark's Kafka sink, it wins over a ``topic``
column), else the row's ``topic`` column (a string column), so one job or micro-batch can write several topics
in one transaction. A ``partition`` column (an integer column) picks the row's partition; otherwise the
``partitionKey`` columns are hashed with the topic's partitioner, or, without a key, each task spreads its rows
evenly over the topic's partitions (:mod:`txnsink.staging`: whole segments in turn, the rest split evenly, so a
task writes a file per partition, as a keyed one does). Routing columns are not stored; a topic that has columns of
those names keeps them as data (a write creating a topic with the ``topic`` option stores a ``topic`` column, but
routes by the ``partition`` column, as Kafka's sink; a value outside the topic's partitions, or a null, fails the
write naming it).

Each row's producer time (read back as ``_producerTimestamp``, Kafka's ``CreateTime``) is the time the writing task
received the row's Arrow batch, or, as Kafka's sink takes a ``timestamp`` column, the row's value in a
``_producerTimestamp`` column of the DataFrame (a ``timestamp`` column; a null takes the task's time). That column is
not stored as data, so a DataFrame read from txnlog keeps its producer times when it is written back. Record
headers come likewise from a ``_headers`` column, or, as in Kafka's sink, a ``headers`` column of type
``array<struct<key:string,value:binary>>`` that the topic does not declare; they are stored in the reserved segment
column :data:`coordinator.segments.HEADERS`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from coordinator import (
    InvalidOptionError,
    Store,
    TopicExistsError,
    TopicMeta,
    TopicNotFoundError,
    create_topic,
    get_topic,
    open_store,
)
from coordinator.partitioner import check_key
from coordinator.probe import probe_conditional_writes
from coordinator.segments import HEADERS, PRODUCER_TS
from txnsink.options import SinkOptions, parse_options
from txnsink.types import check_compatible, nullable, spark_to_arrow

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["TOPIC_COLUMN", "PARTITION_COLUMN", "TIMESTAMP_COLUMN", "WritePlan", "ensure_topic", "plan_write"]

TOPIC_COLUMN = "topic"
PARTITION_COLUMN = "partition"
TIMESTAMP_COLUMN = PRODUCER_TS


@dataclass(frozen=True)
class WritePlan:
    """What the driver settled before the tasks run.

    Attributes:
        options: the parsed options.
        url: the store's normalised URL.
        meta: the topic of the ``topic`` option (None: rows name their topic in ``topic_column``).
        data: the Arrow schema of the data columns (routing columns removed), named as in the DataFrame.
        renames: DataFrame column -> topic column where the names differ in case only.
        topic_column, partition_column: the DataFrame's routing columns, if any.
        rotation: where this write's tasks start placing rows without a key (task ``i`` from partition
            ``(rotation + i) % partitions``), drawn per write so that the odd rows of repeated small jobs spread
            over every partition.
        timestamp_column: the DataFrame's column of producer times (:data:`TIMESTAMP_COLUMN`), if any.
        headers_column: the DataFrame's column of record headers (``_headers``, or ``headers``), if any.
    """

    options: SinkOptions
    url: str
    meta: TopicMeta | None
    data: pa.Schema
    renames: dict[str, str] = field(default_factory=dict)
    topic_column: str | None = None
    partition_column: str | None = None
    rotation: int = 0
    timestamp_column: str | None = None
    headers_column: str | None = None

    @property
    def label(self) -> str:
        """The topic written, for reprs and messages."""
        return self.meta.name if self.meta is not None else f"<column {self.topic_column}>"


def ensure_topic(store: Store, cfg: SinkOptions, name: str, schema: pa.Schema,
                 existing: TopicMeta | None = None) -> TopicMeta:
    """Topic ``name``: created from ``schema`` (every column nullable) with ``cfg.num_partitions`` (default 1)
    partitions when it does not exist. ``existing``: the topic's definition as the caller just read it (it is not
    read again).

    Raises:
        InvalidOptionError: ``numPartitions`` differs from the existing topic's partition count, or a column
            name is reserved (starts with ``_``).
    """
    try:
        meta = existing if existing is not None else get_topic(store, name)
    except TopicNotFoundError:
        try:
            return create_topic(store, name, nullable(schema), cfg.num_partitions or 1)
        except TopicExistsError:  # created concurrently by another writer
            meta = get_topic(store, name)
    if cfg.num_partitions is not None and cfg.num_partitions != meta.partitions:
        raise InvalidOptionError(
            f"option numPartitions={cfg.num_partitions} but topic {name!r} already exists with "
            f"{meta.partitions} partitions; numPartitions applies only when a write creates the topic"
        )
    return meta


def _column(schema: pa.Schema, name: str, kind: str) -> str | None:
    """The DataFrame column named ``name`` (any case) if it has the routing type ``kind``."""
    for f in schema:
        if f.name.lower() == name:
            ok = pa.types.is_string(f.type) or pa.types.is_large_string(f.type) if kind == "string" \
                else pa.types.is_integer(f.type)
            return f.name if ok else None
    return None


def plan_write(options: Mapping[str, str], schema: StructType) -> tuple[WritePlan, Store]:
    """Parse ``options``, open the store and ensure the topic for a DataFrame of ``schema``; last, probe that the
    store honours conditional writes, so every write path (batch, stream, native) is refused on the driver, before
    any task stages a file.

    Raises:
        InvalidOptionError: bad options (named), an unsupported store URL, no ``topic`` option and no ``topic``
            column, a ``partitionKey`` column that is not in the DataFrame or cannot be hashed, or a
            ``_producerTimestamp`` column that is not a timestamp.
        SchemaMismatchError: the DataFrame does not fit the existing topic.
        TopicNotFoundError: the topic was deleted (its name is not reused).
        UnsupportedStoreError: the store does not honour conditional writes.
    """
    cfg = parse_options(options)
    arrow = spark_to_arrow(schema)
    topic_col = _column(arrow, TOPIC_COLUMN, "string")
    part_col = _column(arrow, PARTITION_COLUMN, "integer")
    store = open_store(cfg.root, cfg.store)
    meta: TopicMeta | None = None
    if cfg.topic is not None:
        try:
            existing: TopicMeta | None = get_topic(store, cfg.topic)
        except TopicNotFoundError:
            existing = None
        # a routing column the topic does not hold is routing; a new topic takes a topic column as data but, as
        # Kafka's sink, routes by an integer partition column without storing it
        topic_col = topic_col if existing is not None and existing.schema.get_field_index(topic_col or "") < 0 \
            else None
        part_col = part_col if existing is None or existing.schema.get_field_index(part_col or "") < 0 else None
    elif cfg.merge_schema:
        raise InvalidOptionError("option mergeSchema=true needs the topic option (rows routed by a topic column "
                                 "write topics as they are)")
    elif topic_col is None:
        raise InvalidOptionError(
            "option topic is missing and the DataFrame has no string column named topic: name the topic with "
            ".option('topic', ...) or give each row its topic in a 'topic' column"
        )
    ts_col = next((f.name for f in arrow if f.name.lower() == TIMESTAMP_COLUMN.lower()), None)
    if ts_col is not None and not pa.types.is_timestamp(arrow.field(ts_col).type):
        raise InvalidOptionError(f"column {ts_col!r} gives each row's producer time and must be a timestamp, "
                                 f"not {arrow.field(ts_col).type}")
    hdr_col = _headers_column(arrow, existing if cfg.topic is not None else None)
    data = pa.schema([f for f in arrow if f.name not in (topic_col, part_col, ts_col, hdr_col)])
    missing = [c for c in cfg.partition_key if data.get_field_index(c) < 0]
    if missing:
        raise InvalidOptionError(
            f"option partitionKey={','.join(cfg.partition_key)!r}: columns {missing} are not data columns of the "
            f"DataFrame (columns: {data.names})"
        )
    renames: dict[str, str] = {}
    if cfg.topic is not None:
        meta = ensure_topic(store, cfg, cfg.topic, data, existing)
        if cfg.merge_schema:
            from coordinator.evolution import evolve_schema

            meta = evolve_schema(store, cfg.topic, data)
        renames = check_compatible(data, meta)
        if cfg.partition_key:
            check_key(meta, tuple(renames.get(c, c) for c in cfg.partition_key))
    if cfg.partition_key and part_col is not None:
        raise InvalidOptionError(
            f"option partitionKey={','.join(cfg.partition_key)!r} and the DataFrame's {part_col!r} column both "
            "choose partitions; give one of them"
        )
    probe_conditional_writes(store)  # topic creation probed already; an existing topic's writes need it too
    rotation = random.randrange(1 << 30)
    return WritePlan(cfg, store.url, meta, data, renames, topic_col, part_col, rotation, ts_col, hdr_col), store


def _headers_column(arrow: pa.Schema, existing: TopicMeta | None) -> str | None:
    """The DataFrame's record-header column: ``_headers`` (any case), else a ``headers`` column of Kafka's type
    the topic does not declare.

    Raises:
        InvalidOptionError: a ``_headers`` column that is not a list of (key string, value binary) structs.
    """
    for f in arrow:
        if f.name.lower() == HEADERS.lower():
            if not _is_headers(f.type):
                raise InvalidOptionError(f"column {f.name!r} gives each row's record headers and must be "
                                         f"array<struct<key:string,value:binary>>, not {f.type}")
            return f.name
    for f in arrow:
        if f.name.lower() == "headers" and _is_headers(f.type) and \
                (existing is None or existing.schema.get_field_index(f.name) < 0):
            return f.name
    return None


def _is_headers(t: pa.DataType) -> bool:
    """Whether ``t`` can be stored as record headers (:data:`coordinator.segments.HEADERS_TYPE`)."""
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
        return False
    inner = t.value_type
    return [inner.field(i).name for i in range(inner.num_fields)] == ["key", "value"] and \
        pa.types.is_string(inner.field(0).type) and pa.types.is_binary(inner.field(1).type)
