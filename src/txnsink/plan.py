"""Driver-side preparation shared by the batch and streaming writers: parse the options, open the store, and
create the topic or check that the DataFrame fits it, all before any task runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
from txnsink.options import SinkOptions, parse_options
from txnsink.types import check_compatible, spark_to_arrow

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["WritePlan", "ensure_topic", "plan_write"]


@dataclass(frozen=True)
class WritePlan:
    """What the driver settled before the tasks run: the options, the store's normalised URL and the topic."""

    options: SinkOptions
    url: str
    meta: TopicMeta


def ensure_topic(store: Store, cfg: SinkOptions, schema: pa.Schema) -> TopicMeta:
    """The topic ``cfg.topic``: created from ``schema`` with ``cfg.num_partitions`` (default 1) partitions when
    it does not exist, otherwise checked against ``schema``.

    Raises:
        SchemaMismatchError: the existing topic's schema does not fit ``schema``.
        InvalidOptionError: ``numPartitions`` differs from the existing topic's partition count, or a column
            name is reserved (starts with ``_``).
    """
    try:
        meta = get_topic(store, cfg.topic)
    except TopicNotFoundError:
        try:
            return create_topic(store, cfg.topic, schema, cfg.num_partitions or 1)
        except TopicExistsError:  # created concurrently by another writer
            meta = get_topic(store, cfg.topic)
    check_compatible(schema, meta)
    if cfg.num_partitions is not None and cfg.num_partitions != meta.partitions:
        raise InvalidOptionError(
            f"option numPartitions={cfg.num_partitions} but topic {cfg.topic!r} already exists with "
            f"{meta.partitions} partitions; numPartitions applies only when a write creates the topic"
        )
    return meta


def plan_write(options: Mapping[str, str], schema: StructType) -> tuple[WritePlan, Store]:
    """Parse ``options``, open the store and ensure the topic for a DataFrame of ``schema``.

    Raises:
        InvalidOptionError: bad options (named), an unsupported store URL, or a ``partitionKey`` column that is
            not in the DataFrame or has a type the topic's partitioner cannot hash.
        SchemaMismatchError: the DataFrame does not fit the existing topic.
        UnsupportedStoreError: the store does not honour conditional writes.
    """
    cfg = parse_options(options)
    arrow = spark_to_arrow(schema)
    missing = [c for c in cfg.partition_key if arrow.get_field_index(c) < 0]
    if missing:
        raise InvalidOptionError(
            f"option partitionKey={','.join(cfg.partition_key)!r}: columns {missing} are not in the DataFrame "
            f"(columns: {arrow.names})"
        )
    store = open_store(cfg.root, cfg.store)
    meta = ensure_topic(store, cfg, arrow)
    if cfg.partition_key:
        check_key(meta, cfg.partition_key)
    return WritePlan(cfg, store.url, meta), store
