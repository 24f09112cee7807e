"""The batch writer: ``df.write.format("txnlog")``. One job is one transaction over every partition it touches.

On the driver, :func:`make_writer` checks the options and the schema (creating the topic on the first write),
then initialises the producer: a given ``transactionalId`` is fenced against any older writer with that id; without
one, each job gets an ephemeral producer that its own commit or abort removes from the coordinator's state. Tasks
stage segments (:mod:`txnsink.staging`) under names starting with the job's transaction id; the driver's ``commit``
publishes exactly the segments named by the messages it receives, so retried and speculative attempts never
duplicate.

Idempotent jobs: with ``txnAppId`` and ``txnVersion`` (Delta's options), the commit publishes only if
``txnVersion`` is above the last version committed for ``txnAppId``; otherwise it publishes nothing and logs that
it skipped. A job retried after ``CommitStateUnknownError`` or a driver crash after the commit point thus publishes
once; so does every ``foreachBatch`` micro-batch written with ``txnVersion = batchId``.

``abort`` never deletes what may be committed: it first decides the transaction as aborted through the log (which
fails if the commit won), and deletes the staged files only then.

Save modes (PySpark 4 Python data sources accept only ``append`` and ``overwrite``; Spark itself refuses
``errorifexists`` (the default of ``save()``) and ``ignore`` with ``UNSUPPORTED_DATA_SOURCE_SAVE_MODE`` before the
writer is created): ``append`` appends one transaction; ``overwrite`` is refused with an ``InvalidOptionError``,
because a txnlog topic is an append-only log whose offsets are never rewritten.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from coordinator import (
    AlreadyCommittedError,
    InvalidOptionError,
    InvalidTxnStateError,
    ProducerFencedError,
    ProducerIdentity,
    TransactionCoordinator,
    TxnLogError,
    open_store,
)
from txnsink.options import parse_options
from txnsink.plan import WritePlan, plan_write
from txnsink.staging import TaskIds, delete_segments, gather, stage_batches

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["TxnBatchWriter", "make_writer"]

log = logging.getLogger(__name__)


class TxnBatchWriter(DataSourceArrowWriter):
    """Writes one Spark job as one txnlog transaction. Pickled to the executors; ``repr`` shows no secrets."""

    def __init__(self, plan: WritePlan, ident: ProducerIdentity, txn: str, ephemeral: bool) -> None:
        self.plan = plan
        self.ident = ident
        self.txn = txn
        self.ephemeral = ephemeral

    def __repr__(self) -> str:
        return (
            f"TxnBatchWriter(store={self.plan.url!r}, topic={self.plan.label!r}, "
            f"transactional_id={self.ident.tid!r}, txn={self.txn!r})"
        )

    def _coordinator(self) -> TransactionCoordinator:
        coord = TransactionCoordinator(open_store(self.plan.url, self.plan.options.store))
        if self.plan.meta is not None:
            coord.know_topic(self.plan.meta)
        return coord

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Stage this task's rows as segments (invisible until the driver commits).

        Raises:
            SchemaMismatchError: the rows do not fit the topic.
            StoreError: the store failed.
        """
        store = open_store(self.plan.url, self.plan.options.store)
        return stage_batches(store, self.plan, iterator, TaskIds.current(), self.txn)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Publish every segment the messages name, as one transaction (with ``txnAppId``/``txnVersion``, only if
        that version was not committed yet).

        Raises:
            ProducerFencedError: a newer writer with the same ``transactionalId`` initialised after this job
                started, and the log shows this transaction was never committed; nothing is published. Nothing is
                deleted here: Spark's ``abort`` deletes once the log says the transaction is aborted.
            CommitStateUnknownError: the outcome could not be learned; the staged files are kept (a retry with the
                same ``txnAppId``/``txnVersion`` publishes once).
        """
        _msgs, segs = gather(messages)
        coord = self._coordinator()
        opts = self.plan.options
        app = (opts.txn_app_id, opts.txn_version) if opts.txn_app_id is not None and opts.txn_version is not None \
            else None
        result = coord.commit(self.ident, self.txn, segs, app=app, end_producer=self.ephemeral)
        coord.close_transaction(self.txn)
        if result.already_committed:
            log.warning("txnlog write skipped: version %s of txnAppId %r was already committed; nothing published",
                        opts.txn_version, opts.txn_app_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Decide the transaction as aborted through the log, then delete the staged files the messages name. If
        the commit had won (its reply was lost), nothing is deleted; if the outcome cannot be learned (including a
        fence by a newer epoch, which may have come after a commit whose reply was lost), the files are kept for
        GC, which removes them once the log shows the transaction was never committed."""
        _msgs, segs = gather(messages)
        try:
            coord = self._coordinator()
            coord.abort(self.ident, self.txn, reason="Spark job aborted", end_producer=self.ephemeral, staged=segs)
        except AlreadyCommittedError:
            return
        except (ProducerFencedError, InvalidTxnStateError):
            # A newer epoch (a newer writer, or expiry) can never commit this transaction, but it may have
            # committed before the fence (a commit whose reply was lost): delete only what the log says is aborted.
            try:
                if coord.txn_status(self.txn) != "aborted":
                    return
            except TxnLogError:
                return
        except TxnLogError:
            return  # outcome unknown: keep the files (GC removes them once the transaction is decided)
        coord.close_transaction(self.txn)
        delete_segments(coord.store, segs)


def make_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> TxnBatchWriter:
    """The batch writer for ``df.write.format("txnlog")`` (called on the driver, before any task).

    Raises:
        InvalidOptionError: ``mode("overwrite")``, ``writePath`` = ``native`` (the data source is the Python
            path), or a bad option (the message names key and value).
        SchemaMismatchError: the DataFrame does not fit the existing topic.
    """
    if overwrite:
        raise InvalidOptionError(
            "save mode 'overwrite' is not supported: a txnlog topic is an append-only log whose offsets are never "
            "rewritten; use mode('append')"
        )
    if parse_options(options).write_path == "native":
        raise InvalidOptionError(
            "option writePath='native' cannot be honoured here: this append reached the Python data source. The "
            "native write path takes format('txnlog') appends in a session where txnsink.enable_native(spark) is "
            "in force; txnsink.write(df, ...) takes it in any classic session"
        )
    plan, store = plan_write(options, schema)
    opts = plan.options
    ephemeral = opts.transactional_id is None
    tid = opts.transactional_id or f"spark-batch-{uuid.uuid4().hex}"
    coord = TransactionCoordinator(store)
    ident = coord.init_producer(tid, timeout_ms=opts.transaction_timeout_ms, ephemeral=ephemeral)
    coord.open_transaction(ident, 0)
    return TxnBatchWriter(plan, ident, ident.txn_id(0), ephemeral)
