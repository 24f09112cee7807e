"""The batch writer: ``df.write.format("txnlog")``. One job is one transaction over every partition it touches.

On the driver, :func:`make_writer` checks the options and the schema (creating the topic on the first write),
then initialises the producer: a given ``transactionalId`` is fenced against any older writer with that id; without
one, each job gets a fresh unique id. Tasks stage segments (:mod:`txnsink.staging`); the driver's ``commit``
publishes exactly the segments named by the messages it receives with one ``TransactionCoordinator.commit``, so
retried and speculative attempts never duplicate. ``abort`` deletes what the messages name; a failed job leaves
nothing visible.

Save modes (PySpark 4.2 Python data sources accept only ``append`` and ``overwrite``; Spark itself refuses
``errorifexists`` (the default of ``save()``) and ``ignore`` with ``UNSUPPORTED_DATA_SOURCE_SAVE_MODE`` before the
writer is created): ``append`` appends one transaction; ``overwrite`` is refused with an ``InvalidOptionError``,
because a txnlog topic is an append-only log whose offsets are never rewritten.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from coordinator import (
    InvalidOptionError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    ProducerIdentity,
    TopicNotFoundError,
    TransactionCoordinator,
    TxnLogError,
    new_txn_id,
    open_store,
)
from txnsink.plan import WritePlan, plan_write
from txnsink.staging import TaskIds, delete_segments, gather, stage_batches

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["TxnBatchWriter", "make_writer"]

#: Errors raised by a commit before its commit point: nothing was published, staged files may go.
NOT_COMMITTED = (ProducerFencedError, InvalidTxnStateError, OutOfOrderSequenceError, TopicNotFoundError)


class TxnBatchWriter(DataSourceArrowWriter):
    """Writes one Spark job as one txnlog transaction. Pickled to the executors; ``repr`` shows no secrets."""

    def __init__(self, plan: WritePlan, ident: ProducerIdentity, txn: str) -> None:
        self.plan = plan
        self.ident = ident
        self.txn = txn

    def __repr__(self) -> str:
        return (
            f"TxnBatchWriter(store={self.plan.url!r}, topic={self.plan.meta.name!r}, "
            f"transactional_id={self.ident.tid!r}, txn={self.txn!r})"
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Stage this task's rows as segments (invisible until the driver commits).

        Raises:
            SchemaMismatchError: the rows do not fit the topic.
            StoreError: the store failed.
        """
        store = open_store(self.plan.url, self.plan.options.store, probe=False)
        return stage_batches(store, self.plan.meta, self.plan.options.partition_key, iterator, TaskIds.current())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Publish every segment the messages name, as one transaction (nothing when there are none).

        Raises:
            ProducerFencedError: a newer writer with the same ``transactionalId`` initialised after this job
                started; nothing is published and this job's staged files are deleted.
            CommitStateUnknownError: the outcome could not be learned (staged files are kept).
        """
        _msgs, segs = gather(messages)
        if not segs:
            return
        store = open_store(self.plan.url, self.plan.options.store, probe=False)
        try:
            TransactionCoordinator(store).commit(self.ident, self.txn, segs)
        except NOT_COMMITTED:
            delete_segments(store, segs)
            raise

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the segments the messages name (best effort) and abort the transaction; nothing is visible."""
        _msgs, segs = gather(messages)
        store = open_store(self.plan.url, self.plan.options.store, probe=False)
        delete_segments(store, segs)
        try:
            TransactionCoordinator(store).abort(self.ident, self.txn)
        except TxnLogError:
            pass


def make_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> TxnBatchWriter:
    """The batch writer for ``df.write.format("txnlog")`` (called on the driver, before any task).

    Raises:
        InvalidOptionError: ``mode("overwrite")``, or a bad option (the message names key and value).
        SchemaMismatchError: the DataFrame does not fit the existing topic.
    """
    if overwrite:
        raise InvalidOptionError(
            "save mode 'overwrite' is not supported: a txnlog topic is an append-only log whose offsets are never "
            "rewritten; use mode('append')"
        )
    plan, store = plan_write(options, schema)
    tid = plan.options.transactional_id or f"spark-batch-{uuid.uuid4().hex}"
    ident = TransactionCoordinator(store).init_producer(tid)
    return TxnBatchWriter(plan, ident, new_txn_id(ident.pid, ident.epoch))


