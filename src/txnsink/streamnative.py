"""Micro-batches of ``df.writeStream.format("txnlog")`` through Spark's own Parquet writer.

In a session with :func:`txnsink.enable_native`, the write rule (``io.txnlog.spark.NativeWriteRule``) also looks at
each micro-batch of a streaming query writing ``format("txnlog")``: Spark plans it as a write to the data source's
streaming writer (:mod:`txnsink.stream`); the rule asks :func:`plan_stream` whether the native path takes it and, if
so, puts in its place a command (``StreamInsert``) which, when the micro-batch runs, hands :func:`write_micro_batch`
a batch DataFrame over the micro-batch's rows (computed by the query's own plan, state included). That function
writes them as :func:`txnsink.native.write_options` does (the same segment files and checks as a batch append; rows
without a key placed as Kafka's sticky partitioner does, see :func:`write_micro_batch`) and commits them with the
streaming sink's idempotency key: application ``<transactionalId or "spark">.<query id>``, version ``batchId``. The
key is the one :class:`txnsink.stream.TxnStreamWriter` commits with, so a query may change paths between runs
(``writePath``, or the rule enabled or not) and each micro-batch is still published once: a replayed batch, or a
zombie driver's late commit of a batch the live query committed, finds its version committed and publishes nothing.

A micro-batch the native path cannot write after all (under ``writePath`` = ``auto``: a column type Spark's
Parquet writer does not write as txnlog does, record headers, a key the JVM partitioner cannot hash) is written by
the batch data source with the same key (``txnAppId``/``txnVersion``), again once. A failure before the commit is
decided aborts the transaction and deletes its files (nothing visible), and the micro-batch fails, as Spark's own
sinks do; Spark replays it on restart.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from coordinator.errors import StoreError
from txnsink.nativeframe import Placement
from txnsink.options import parse_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from txnsink.native import WriteResult

__all__ = ["STREAM_RUN_ROWS", "batch_options", "per_core", "plan_stream", "write_micro_batch"]

#: Rows a micro-batch's task puts into one topic partition (without a key) before it moves to the next.
STREAM_RUN_ROWS = 1 << 20

log = logging.getLogger(__name__)

#: The streaming-only options a micro-batch's batch write does not take (the app id is built from them).
_STREAM_ONLY = ("transactionalid", "checkpointlocation")


def plan_stream(options: Mapping[str, str]) -> bool | str | None:
    """Whether the native path writes the micro-batches of a ``format("txnlog")`` stream with these options: True,
    an error text (``writePath`` = ``native`` that cannot be honoured, or a local store this process may not
    write), or None (the data source's streaming writer writes them and reports any bad option as it always does).
    Reads no topic: only the options and the store's folders."""
    from txnsink.writerule import _reason

    try:
        opts = parse_options(options, stream=True)
        if opts.write_path == "python" or opts.txn_app_id is not None or opts.txn_version is not None:
            return None
        why = _reason(options)
    except Exception:  # noqa: BLE001 - the streaming writer reports bad options as it always does
        return None
    from txnsink.publish import check_writable

    try:
        check_writable(opts.root, opts.topic)
    except StoreError as exc:
        return str(exc)
    if why is None:
        return True
    if opts.write_path == "native":
        return f"option 'writePath' = 'native' cannot write this stream: {why}"
    log.info("txnlog: micro-batches written through the Python data source: %s", why)
    return None


def batch_options(options: Mapping[str, str], query_id: str, batch_id: int) -> dict[str, str]:
    """The batch write options of micro-batch ``batch_id`` of query ``query_id``: the stream's, without its
    ``transactionalId`` and ``checkpointLocation``, with ``txnAppId`` = ``<transactionalId or "spark">.<query id>``
    and ``txnVersion`` = ``batch_id`` (the key :class:`txnsink.stream.TxnStreamWriter` commits with).

    Raises:
        InvalidOptionError: a bad option.
    """
    opts = parse_options(options, stream=True)
    out = {k: v for k, v in options.items() if k.lower() not in _STREAM_ONLY}
    out["txnAppId"] = f"{opts.transactional_id or 'spark'}.{query_id}"
    out["txnVersion"] = str(batch_id)
    return out


def per_core(df: DataFrame) -> tuple[DataFrame, int]:
    """``df`` merged (``coalesce``, no shuffle) into at most one task per core, and that bound.

    A task writes a file per topic partition it puts rows in, and a file costs its task ~10 ms whatever its size (an
    fsync included); a batch append merges its input by its estimated size (:func:`txnsink.nativeframe.fewer_tasks`),
    but a micro-batch's rows come from the executed plan, whose size Spark does not know: a source of many small
    partitions (a txnlog topic's micro-batch: one per topic partition) would write as many small files. ``coalesce``
    leaves a DataFrame of fewer partitions as it is, so they are not counted (counting plans the micro-batch once
    more: ~30 ms of each).
    """
    cores = max(1, df.sparkSession.sparkContext.defaultParallelism)
    return df.coalesce(cores), cores


def write_micro_batch(df: DataFrame, options: Mapping[str, str], query_id: str, batch_id: int) -> WriteResult:
    """Write and commit micro-batch ``batch_id`` of query ``query_id`` (its rows: the batch DataFrame ``df``) as
    version ``batch_id`` of the query's app, through the native path (see the module docstring). A version already
    committed publishes nothing.

    Without a key, task ``i`` of the micro-batch's ``T`` tasks puts its rows into partition ``(batch_id + i * s) %
    partitions`` (``s`` = ``partitions // T``, at least 1), moving to the next one every :data:`STREAM_RUN_ROWS`
    rows: one file per task where a batch append writes one per task and partition (a file costs a task ~10 ms
    whatever its size), and the partitions take turns over the micro-batches. A replayed batch places its rows as
    the first attempt did.

    Raises:
        InvalidOptionError: a bad option, or ``writePath`` = ``native`` where the native path does not apply.
        SchemaMismatchError: the rows do not fit the topic.
        CommitStateUnknownError: the commit's outcome could not be learned (a replay publishes once).
    """
    from txnsink.native import write_options

    frame, tasks = per_core(df)
    placement = Placement(rotation=batch_id, run=STREAM_RUN_ROWS, tasks=tasks)
    result = write_options(frame, batch_options(options, query_id, batch_id), placement=placement)
    log.info("txnlog: micro-batch %d of query %s written by the %s path%s%s", batch_id, query_id, result.path,
             " (already committed: nothing published)" if result.skipped else "",
             f" ({result.reason})" if result.reason else "")
    return result
