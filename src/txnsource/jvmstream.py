"""The offsets of ``readStream.format("txnlog")`` queries under txnlog's session extension, served in its planner.

A Python stream source costs a Python process per query: Spark starts one when the query starts (about a second,
most of it importing pyspark from Spark's ``pyspark.zip``, which has no compiled modules) and asks it for every
offset. Under the session extension (:func:`pyspark_txnlog.configure_spark_with_txnlog`) a resolution rule
(``io.txnlog.spark.StreamResolutionRule``) gives the query a JVM stream (``io.txnlog.spark.TxnlogStream``) instead,
whose offsets come from the data source's own stream reader (:class:`txnsource.stream.TxnLogStreamReader`) created
in txnlog's planner process, which the application starts once (:func:`pyspark_txnlog.serve`). Offsets are the
stream reader's JSON either way, so a query may restart from a checkpoint written under the other stream. Each
micro-batch is read by Spark's Parquet scan of its offset range (:mod:`txnsource.nativestream`); a query whose
options the native scan cannot honour at all keeps the Python stream (:func:`streamable`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from txnsource.options import ReadOptions
    from txnsource.stream import TxnLogStreamReader

__all__ = ["StreamCalls", "open_stream", "streamable"]


def streamable(spark: SparkSession, options: Mapping[str, str], schema: StructType | None = None) -> str | None:
    """None when Spark's Parquet scan can read every micro-batch of a stream with ``options`` and read schema
    ``schema``, else why not.

    The reasons are the ones known before any batch: ``readPath`` = ``python``, bad options (the Python stream
    reports them), ``includeHeaders``, ``maxRecordsPerPartition``, ``read_uncommitted``, a store Spark's file system
    does not reach, a column type the native scan does not read, a given schema that casts (checked against the
    topics read when the query is defined). A batch that meets Arrow IPC segments later fails, saying so.
    """
    from txnsource.native import NativeUnavailable, native_root
    from txnsource.options import parse_options

    try:
        opts = parse_options(options, streaming=True)
    except Exception as exc:  # noqa: BLE001 - the Python stream reports bad options as it always does
        return f"{type(exc).__name__}: {exc}"
    if opts.read_path == "python":
        return "option 'readPath' = 'python'"
    if opts.include_headers:
        return "option 'includeHeaders' reads record headers, which the native scan does not"
    if opts.max_records_per_partition is not None:
        return "option 'maxRecordsPerPartition' splits tasks by record count, which only the Python reader does"
    try:
        native_root(spark, opts)
        if schema is not None:
            _check_columns(spark, opts, schema)
    except NativeUnavailable as why:
        return str(why)
    except Exception as exc:  # noqa: BLE001 - the Python stream reports it as it always does
        return f"{type(exc).__name__}: {exc}"
    return None


def _check_columns(spark: SparkSession, opts: ReadOptions, schema: StructType) -> None:
    """Raises: NativeUnavailable when the native scan cannot read the topics ``opts`` names as ``schema``; the
    errors of :func:`txnsource.native.topic_columns` otherwise."""
    from coordinator import open_store
    from coordinator.topics import list_topics
    from txnsource.native import topic_columns
    from txnsource.options import with_topics

    store = open_store(opts.path, opts.store)
    try:
        if opts.pattern is not None:
            opts = with_topics(opts, list_topics(store))
        topic_columns(spark, store, opts.topics, schema)
    finally:
        store.close()


class StreamCalls:
    """One query's offsets (``io.txnlog.spark.StreamCalls``), answered by the data source's stream reader.

    Spark calls it from the query's thread; a lock keeps a progress report from another thread out of a call in
    flight. Errors propagate to Spark, which fails the query with their message.
    """

    class Java:
        implements = ["io.txnlog.spark.StreamCalls"]

    def __init__(self, reader: TxnLogStreamReader) -> None:
        self._reader = reader
        self._lock = threading.Lock()

    def initialOffset(self) -> str:  # noqa: N802 - Java's name
        with self._lock:
            return json.dumps(self._reader.initialOffset())

    def defaultReadLimit(self) -> str:  # noqa: N802 - Java's name
        import dataclasses

        with self._lock:
            limit = self._reader.getDefaultReadLimit()
        return json.dumps(dataclasses.asdict(limit) | {"_type": type(limit).__name__})  # type: ignore[call-overload]

    def latestOffset(self, start: str, limit: str) -> str:  # noqa: N802 - Java's name
        from pyspark.sql.datasource_internal import ReadLimitRegistry

        with self._lock:
            return json.dumps(self._reader.latestOffset(json.loads(start), ReadLimitRegistry().get(json.loads(limit))))

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Java's name
        with self._lock:
            self._reader.prepareForTriggerAvailableNow()

    def reportLatestOffset(self) -> str | None:  # noqa: N802 - Java's name
        with self._lock:
            got = self._reader.reportLatestOffset()
        return None if got is None else json.dumps(got)

    def commit(self, end: str) -> None:
        with self._lock:
            self._reader.commit(json.loads(end))

    def stop(self) -> None:
        with self._lock:
            self._reader.stop()
            store = getattr(self._reader, "_store", None)
            if store is not None:
                store.close()


def open_stream(options_json: str, schema_json: str) -> Any:
    """The :class:`StreamCalls` of a query starting with these options (one JSON object) and read schema (JSON).

    Raises:
        InvalidOptionError, TopicNotFoundError: as the Python stream's reader when the query starts.
    """
    from pyspark.sql.types import StructType

    from coordinator.jvm import options_from_json
    from txnsource.options import parse_options, resolve_pattern
    from txnsource.stream import TxnLogStreamReader

    opts = resolve_pattern(parse_options(options_from_json(options_json), streaming=True))
    return StreamCalls(TxnLogStreamReader(opts, StructType.fromJson(json.loads(schema_json))))
