"""txnsource: the Spark reader of txnlog topics, batch (``spark.read``) and streaming (``spark.readStream``).

Entry points for :class:`pyspark_txnlog.DefaultSource`:

* :func:`read_schema`: the read schema (topic columns, united by name across topics, then ``_topic``,
  ``_partition``, ``_offset``, ``_timestamp``, ``_producerTimestamp``, and ``_headers`` with ``includeHeaders``);
* :func:`pin_read`: the snapshot a DataFrame pins when Spark creates its source (one DataFrame, one snapshot:
  :mod:`txnsource.pin`);
* :func:`make_reader`: the batch reader (the pinned transaction-consistent snapshot, segment-range planning,
  filter pushdown on the metadata columns);
* :func:`make_stream_reader`: the micro-batch reader (admission control as Spark's Kafka source,
  ``Trigger.AvailableNow``, consumer-group progress, ``latestOffset`` in progress reports).

For users, :func:`read` (``txnsource.read(spark, path, topic=...)``) returns a batch DataFrame read by Spark's own
Parquet reader where it can (:mod:`txnsource.native`), by the data source otherwise; :func:`enable_native` makes
``spark.read.format("txnlog")`` batch reads of a session do the same (:mod:`txnsource.nativerule`).

Options are described in :mod:`txnsource.options`. This package imports :mod:`coordinator`, never ``txnsink``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from txnsource.batch import TxnLogBatchReader, TxnLogPushdownReader, make_batch_reader
from txnsource.native import read
from txnsource.nativerule import disable_native, enable_native, native_enabled
from txnsource.options import ReadOptions, parse_options
from txnsource.pin import PinFailure, ReadPin, pin_read
from txnsource.stream import TxnLogStreamReader, make_stream_reader

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceReader
    from pyspark.sql.types import StructType

__all__ = [
    "PinFailure", "ReadOptions", "ReadPin", "TxnLogBatchReader", "TxnLogPushdownReader", "TxnLogStreamReader",
    "disable_native", "enable_native", "make_reader", "make_stream_reader", "native_enabled", "parse_options",
    "pin_read", "read", "read_schema",
]


def read_schema(options: Mapping[str, str]) -> StructType:
    """The Spark schema of a read of the topics ``options`` name.

    Raises:
        InvalidOptionError: a bad option.
        TopicNotFoundError: a topic does not exist, or ``subscribePattern`` matches none.
        SchemaMismatchError: two topics type one column differently, or a column has no Spark type.
    """
    from coordinator import open_store
    from coordinator.topics import get_topic, list_topics
    from txnsource.options import with_topics
    from txnsource.schema import to_spark_schema, union_schema

    opts = parse_options(options, streaming=None)
    store = open_store(opts.path, opts.store)
    if opts.pattern is not None:
        opts = with_topics(opts, list_topics(store))
    schema = union_schema([get_topic(store, t) for t in opts.topics])
    if opts.include_headers:
        from coordinator.reader import HEADERS_FIELD

        schema = schema.append(HEADERS_FIELD)
    return to_spark_schema(schema)


def make_reader(options: Mapping[str, str], schema: StructType,
                pin: ReadPin | PinFailure | None = None) -> DataSourceReader:
    """The batch reader (see :mod:`txnsource.batch`) of ``pin``'s snapshot (from :func:`pin_read`; None: a snapshot
    taken when the read is planned).

    Raises:
        InvalidOptionError: a bad option.
        Whatever taking the pin raised (kept in a :class:`PinFailure`).
    """
    return make_batch_reader(options, schema, pin)
