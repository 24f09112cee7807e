"""Native micro-batches: each micro-batch of ``spark.readStream.format("txnlog")`` read by Spark's Parquet reader.

With :func:`txnsource.enable_native`, the read rule (``io.txnlog.spark.NativeReadRule``) also matches the scan of
each micro-batch (``StreamingDataSourceV2ScanRelation`` of the Python stream of ``txnlog``, planned with the batch's
start and end offsets) and asks :func:`stream_frame` for the native DataFrame of exactly that offset range. The stream
reader still decides every micro-batch's offsets (``latestOffset``: admission limits, new partitions and topics,
``failOnDataLoss``) and Spark still logs and commits them; only the reading of a planned range changes. The range
per partition is the one the stream reader's ``partitions`` would read (:func:`txnsource.stream.stream_ranges`,
shared by both), so a micro-batch ending inside a transaction, a replayed batch and a restart from a checkpoint read
the same rows either way. The rows are the committed offsets ``[start, end)`` of each partition, read from the
segment files the batch native path reads (:func:`txnsource.native.range_scans`), with the same metadata columns.

Where the native path does not apply (Arrow IPC segments, ``maxRecordsPerPartition``, ``includeHeaders``, a store
Spark's file system does not reach, a given schema that casts, ...) or planning fails in any way (an offset below
the log start with ``failOnDataLoss``, a topic deleted under ``subscribePattern``), :func:`stream_frame` raises and
the micro-batch is read by the stream reader, which then reports errors as it always does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from txnsource.native import NativeUnavailable, native_root, range_scans, scans_frame, topic_columns
from txnsource.options import parse_options, with_topics

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["NativeUnavailable", "stream_frame"]


def stream_frame(spark: SparkSession, options: Mapping[str, str], schema: StructType, start: str,
                 end: str) -> DataFrame:
    """The native DataFrame of the micro-batch from offset ``start`` to offset ``end`` (the stream reader's JSON
    offsets) of a ``readStream.format("txnlog")`` with ``options`` and read schema ``schema``.

    Raises:
        NativeUnavailable: the native path does not apply (the reason), or ``readPath`` is ``python``.
        InvalidOptionError, TopicNotFoundError, SchemaMismatchError, CorruptLogError: as the stream reader.
        OffsetOutOfRangeError: ``start`` lies below a partition's log start and ``failOnDataLoss`` is true.
    """
    from coordinator import open_store
    from coordinator.coordinator import TransactionCoordinator
    from coordinator.topics import list_topics
    from txnsource.stream import stream_ranges

    opts = parse_options(options, streaming=True)
    if opts.read_path == "python":
        raise NativeUnavailable("option 'readPath' = 'python'")
    root = native_root(spark, opts)
    store = open_store(opts.path, opts.store)
    try:
        coord = TransactionCoordinator(store)
        if opts.pattern is not None:
            opts = with_topics(opts, list_topics(store))
        ranges = stream_ranges(coord, opts, json.loads(start), json.loads(end))
        # the topics of the query and any the offsets name (a replayed batch may name one not listed now)
        opts = replace(opts, topics=tuple(sorted(set(opts.topics).union(t for t, _ in ranges))))
        metas, full, out = topic_columns(spark, store, opts.topics, schema)
        scans = range_scans(store, coord, opts, root, ranges)
    finally:
        store.close()
    return scans_frame(spark, opts, root, scans, out, full, metas)
