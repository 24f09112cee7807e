"""Spark's own Parquet reader behind ``spark.read.format("txnlog")``: :func:`enable_native`.

A Python data source hands Spark Arrow batches that a Python worker decoded, and pyspark 4.x gives it no column
pruning; reading through it costs 2-3x of Spark's Parquet reader on the same data, most of which no Python source can
avoid (docs/design.md, "What the data-source path costs"). :func:`txnsource.read` (``txnsource/native.py``) builds
the same snapshot as a Parquet scan instead, but it is a function: code written against ``format("txnlog")`` does not
reach it.

:func:`enable_native` installs, in one classic session, an optimizer rule (``io.txnlog.spark.NativeReadRule``, about
160 lines of Java shipped in txnlog's jar (:mod:`coordinator.jvm`) and loaded at run time: no ``spark.jars``, no
static configuration) that replaces each batch scan of ``format("txnlog")`` by the plan :func:`txnsource.read` builds
for the same options and columns, whenever the native path applies (``readPath`` = ``auto`` or ``native``). The rule
calls back into this driver process through py4j, once per scan each time a query is optimized, handing over the
scan's data source as Spark pickled it when the DataFrame was created: the plan reads the snapshot pinned there
(:mod:`txnsource.pin`), so every scan and every action of one DataFrame reads one snapshot, the same one the data
source reads with the rule off. Where the native path does not apply (read_uncommitted,
Arrow IPC segments, a store Spark's file system does not reach, ...), or the planning fails for any reason, the
scan stays the Python data source's, which then reads or reports the error as it always does; ``readPath`` =
``native`` makes such a read fail instead, naming the reason, and ``readPath`` = ``python`` keeps the data source.

While ``spark.sql.python.filterPushdown.enabled`` is true, the rule leaves every scan to the data source: filters
the data source took over are no longer in the plan, so a replacement could not apply them.

Streaming reads: the rule also replaces the scan of each micro-batch of ``spark.readStream.format("txnlog")`` (its
offsets still decided by the stream reader) by the native DataFrame of that batch's offset range, marked streaming so
that stateful operators above it stay stateful (:mod:`txnsource.nativestream`). A query takes the session's rules
when it starts: call :func:`enable_native` before ``writeStream...start()``. The query's offsets still come from
the Python stream, which Spark runs in a Python process it starts per query; under the session extension the query
runs on a JVM stream instead (:mod:`txnsource.jvmstream`), whose micro-batches this rule reads too.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from coordinator import jvm as jvm_rules
from coordinator.jvm import options_from_json

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RULE", "disable_native", "enable_native", "native_enabled"]

log = logging.getLogger(__name__)

#: The rule's class.
RULE = "io.txnlog.spark.NativeReadRule"
#: The data source short name whose scans the rule replaces.
FORMAT = "txnlog"
CALLER = "txnsource.enable_native"
INSTEAD = "use the data source, or txnsource.read on the server side"


class _Planner:
    """The rule's planner (``NativeReadRule.Planner``), called by the JVM through py4j."""

    class Java:
        implements = [RULE + "$Planner"]

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def plan(self, options_json: str, schema_json: str, source: bytes | None) -> Any:
        """The scan's Dataset (a py4j object), an error text (``readPath`` = ``native`` that cannot be honoured),
        or None (the data source reads), for the scan's options given as one JSON object and its data source as
        Spark pickled it (None when the rule could not get it: the data source then reads)."""
        from pyspark.sql.types import StructType

        from txnsource.native import NativeUnavailable, native_frame
        from txnsource.options import parse_options
        from txnsource.pin import ReadPin

        text = options_from_json(options_json)
        try:
            opts = parse_options(text, streaming=False)
        except Exception:  # noqa: BLE001 - the data source reports bad options as it always does
            return None
        if opts.read_path == "python":
            return None
        pin = _pin_of(source)
        if not isinstance(pin, ReadPin):
            return None  # the data source reads, and reports why its pin failed
        try:
            schema = StructType.fromJson(json.loads(schema_json))
            return native_frame(self.spark, opts, schema, pin)._jdf
        except NativeUnavailable as why:
            if opts.read_path == "native":
                return f"option 'readPath' = 'native' cannot read this: {why}"
            log.info("txnlog: reading through the Python data source: %s", why)
        except Exception as exc:  # noqa: BLE001 - the data source plans again and reports it as it always does
            log.info("txnlog: native planning failed (%s); the Python data source reads", type(exc).__name__)
        return None

    def planStream(self, options_json: str, schema_json: str, start: str, end: str,  # noqa: N802 - Java's
                   strict: bool = False) -> Any:
        """The Dataset (a py4j object) of the micro-batch from offset ``start`` to ``end`` (the stream reader's JSON
        offsets) of a ``readStream.format("txnlog")`` with these options and read schema; when it cannot be had,
        None (the Python stream reader reads it, and reports any error as it always does) or, with ``strict`` (the
        JVM stream of :mod:`txnsource.jvmstream`, which nothing else reads), the reason."""
        from pyspark.sql.types import StructType

        from txnsource.nativestream import NativeUnavailable, stream_frame

        text = options_from_json(options_json)
        try:
            schema = StructType.fromJson(json.loads(schema_json))
            return stream_frame(self.spark, text, schema, start, end)._jdf
        except NativeUnavailable as why:
            if strict:
                return str(why)
            log.info("txnlog: micro-batch read through the Python stream reader: %s", why)
        except Exception as exc:  # noqa: BLE001 - the stream reader plans again and reports it as it always does
            if strict:
                return f"{type(exc).__name__}: {exc}"
            log.info("txnlog: native micro-batch planning failed (%s: %s); the Python stream reader reads",
                     type(exc).__name__, exc)
        return None

    def streamable(self, options_json: str, schema_json: str) -> str | None:
        """None when the JVM stream may read a stream with these options (:func:`txnsource.jvmstream.streamable`),
        else why not."""
        from pyspark.sql.types import StructType

        from txnsource.jvmstream import streamable

        return streamable(self.spark, options_from_json(options_json),
                          StructType.fromJson(json.loads(schema_json)))

    def openStream(self, options_json: str, schema_json: str) -> Any:  # noqa: N802 - Java's name
        """The offsets of a query starting now (:class:`txnsource.jvmstream.StreamCalls`)."""
        from txnsource.jvmstream import open_stream

        return open_stream(options_json, schema_json)


def _pin_of(source: bytes | None) -> object:
    """The pin of the data source Spark pickled (``pyspark_txnlog.DefaultSource``), or None."""
    import pickle

    if not source:
        return None
    try:
        instance = pickle.loads(bytes(source))  # noqa: S301 - bytes Spark pickled in this application's workers
    except Exception as exc:  # noqa: BLE001 - the data source reads
        log.info("txnlog: the scan's data source does not unpickle here (%s); the Python data source reads",
                 type(exc).__name__)
        return None
    return getattr(instance, "__dict__", {}).get("_pin")


def enable_native(spark: SparkSession) -> None:
    """Read ``spark.read.format("txnlog")`` batch scans, and the micro-batches of ``spark.readStream.format("txnlog")``
    queries started afterwards, of this session with Spark's own Parquet reader wherever the native path applies
    (see the module docstring). Calling it again changes nothing.

    Raises:
        InvalidOptionError: ``spark`` is a Spark Connect session, or the jar is missing or does not load into this
            Spark (the message says which).
    """
    from pyspark.java_gateway import ensure_callback_server_started

    jvm_rules.enable(spark, RULE, _Planner(spark), FORMAT, ensure_callback_server_started, CALLER, INSTEAD)


def disable_native(spark: SparkSession) -> None:
    """Undo :func:`enable_native` in this session (the data source reads every scan again)."""
    jvm_rules.disable(spark, RULE, CALLER, INSTEAD)


def native_enabled(spark: SparkSession) -> bool:
    """Whether :func:`enable_native` is in force in this session (False for a Spark Connect session)."""
    return jvm_rules.enabled(spark, RULE)
