"""Spark's own Parquet writer behind ``df.write.format("txnlog")``: :func:`enable_native`.

A Python data source's writer receives every row in a Python worker, which encodes it again with pyarrow; the
native write path (:mod:`txnsink.native`) has Spark's Parquet writer write the segments and one txnlog transaction
publish them, but it is a function (:func:`txnsink.write`): code written against ``format("txnlog")`` does not
reach it.

:func:`enable_native` installs, in one classic session, an optimizer rule (``io.txnlog.spark.NativeWriteRule``, in
txnlog's jar: :mod:`coordinator.jvm`) that turns each batch append to ``format("txnlog")`` into a call of
:func:`txnsink.native.write_options` with the same rows and options, whenever the native path may apply
(``writePath`` = ``auto`` or ``native``). When the rule optimizes the write, it asks this driver process (through
py4j) whether to take it, without touching the store: an append with no ``topic`` option (rows routed by a
``topic`` column) or to a store Spark's file system cannot name stays with the data source. When the write runs,
:func:`~txnsink.native.write_options` writes and commits; where the native path turns out not to apply (a type
Spark's Parquet writer does not write as txnlog does, a ``partition`` column, no ``hadoop-aws`` for ``s3://``, under
``auto`` a key the JVM partitioner cannot hash), ``auto`` writes through the data source instead
(``writePath`` = ``python``, which the rule leaves alone) and ``native`` fails naming the reason.

The semantics are the data source's: one append is one transaction (``transactionalId`` fencing,
``txnAppId``/``txnVersion`` idempotency, an ephemeral producer otherwise), and the same options are accepted. Errors
reach the caller of ``save()`` as the Java exception of the failed Python call, whose message holds the txnlog
error. The same rule writes the micro-batches of ``df.writeStream.format("txnlog")`` queries of the session natively,
each committed with the streaming sink's idempotency key (:mod:`txnsink.streamnative`). Appends of a Spark Connect
client are never rewritten (the rule needs the driver's Python process).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coordinator import jvm as jvm_rules
from coordinator.jvm import options_from_json

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RULE", "disable_native", "enable_native", "native_enabled"]

log = logging.getLogger(__name__)

#: The rule's class.
RULE = "io.txnlog.spark.NativeWriteRule"
#: The data source short name whose appends the rule rewrites.
FORMAT = "txnlog"
CALLER = "txnsink.enable_native"
INSTEAD = "use the data source, or txnsink.write on the server side"


def _reason(options: Mapping[str, str]) -> str | None:
    """Why the native path cannot take a write with these options, from the options alone (no store access);
    None when it may.

    Raises:
        InvalidOptionError: bad options (the data source then reports them as it always does).
    """
    from txnsink.native import NativeUnavailable, spark_url
    from txnsink.options import parse_options

    opts = parse_options(options)
    if opts.topic is None:
        return "rows name their topic in a topic column (the native path writes one named topic)"
    try:
        spark_url(opts.root)
    except NativeUnavailable as why:
        return str(why)
    return None


class _Writer:
    """The rule's writer (``NativeWriteRule.Writer``), called by the JVM through py4j."""

    class Java:
        implements = [RULE + "$Writer"]

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def plan(self, options_json: str, schema_json: str) -> Any:
        """True (the native path writes), an error text (``writePath`` = ``native`` that cannot be honoured, or a
        local store this process may not write), or None (the data source writes), for the write options given as
        one JSON object."""
        from coordinator.errors import StoreError
        from txnsink.options import parse_options
        from txnsink.publish import check_writable

        text = options_from_json(options_json)
        try:
            opts = parse_options(text)
            mode = opts.write_path
            if mode == "python":
                return None
            why = _reason(text)
        except Exception:  # noqa: BLE001 - the data source reports bad options as it always does
            return None
        try:
            check_writable(opts.root, opts.topic)
        except StoreError as exc:
            return str(exc)  # on the driver, before any task: the data source's tasks could not write either
        if why is None:
            return True
        if mode == "native":
            return f"option 'writePath' = 'native' cannot write this: {why}"
        log.info("txnlog: writing through the Python data source: %s", why)
        return None

    def insert(self, dataset: Any, options_json: str) -> None:
        """Write and commit the rows of ``dataset`` (a classic Java ``Dataset``) as :func:`write_options` does."""
        from pyspark.sql.classic.dataframe import DataFrame

        from txnsink.native import write_options

        result = write_options(DataFrame(dataset, self.spark), options_from_json(options_json))
        log.info("txnlog: format('txnlog') append written by the %s path%s", result.path,
                 f" ({result.reason})" if result.reason else "")

    def planStream(self, options_json: str, schema_json: str) -> Any:  # noqa: N802 - the Java interface's name
        """As :meth:`plan`, for the micro-batches of a ``writeStream.format("txnlog")`` query
        (:func:`txnsink.streamnative.plan_stream`)."""
        from txnsink.streamnative import plan_stream

        return plan_stream(options_from_json(options_json))

    def insertStream(self, dataset: Any, options_json: str, query_id: str, batch_id: int) -> None:  # noqa: N802
        """Write and commit micro-batch ``batch_id`` of query ``query_id`` (the rows of ``dataset``, a classic Java
        ``Dataset``) as :func:`txnsink.streamnative.write_micro_batch` does."""
        from pyspark.sql.classic.dataframe import DataFrame

        from txnsink.streamnative import write_micro_batch

        options = options_from_json(options_json)
        write_micro_batch(DataFrame(dataset, self.spark), options, str(query_id), int(batch_id))


def enable_native(spark: SparkSession) -> None:
    """Write ``df.write.format("txnlog")`` batch appends of this session with Spark's own Parquet writer wherever
    the native path applies (see the module docstring). Calling it again changes nothing.

    Raises:
        InvalidOptionError: ``spark`` is a Spark Connect session, or the jar is missing or does not load into this
            Spark (the message says which).
    """
    from pyspark.java_gateway import ensure_callback_server_started

    jvm_rules.enable(spark, RULE, _Writer(spark), FORMAT, ensure_callback_server_started, CALLER, INSTEAD)


def disable_native(spark: SparkSession) -> None:
    """Undo :func:`enable_native` in this session (the data source writes every append again)."""
    jvm_rules.disable(spark, RULE, CALLER, INSTEAD)


def native_enabled(spark: SparkSession) -> bool:
    """Whether :func:`enable_native` is in force in this session (False for a Spark Connect session)."""
    return jvm_rules.enabled(spark, RULE)
