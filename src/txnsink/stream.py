"""The streaming writer: ``df.writeStream.format("txnlog")``, exactly once. Each micro-batch is one transaction.

Exactly once by a monotone batch version (Delta's ``SetTransaction(appId, version)``), not by fencing: the commit of
micro-batch ``batchId`` is an application commit ``(app = <transactionalId or "spark">.<query id>, version =
batchId)``, applied only if ``batchId`` is above the last version committed for that app. A batch Spark replays
after a crash between our commit and its own checkpoint write, or a zombie driver's late commit of a batch the live
query already committed, is a no-op, never an error; no run records and no epochs are involved, so a zombie can
never stop the live query.

Why two runs always mean the same rows by batch ``N``: Spark writes batch ``N``'s offsets to its offset log before
it runs the batch, and every later run on the same checkpoint re-runs batch ``N`` from those offsets; with a
replayable source (txnlog, Kafka, files) that is the same data. With a source that is not replayable a replay may
differ; the version rule still publishes exactly one attempt of each batch id, never two.

What Spark 4 does (measured, see the tests): the driver calls ``DataSource.streamWriter()`` once per micro-batch
to build the writer shipped to the tasks, and again, in a fresh Python worker, to run ``commit(messages,
batchId)``; nothing survives between those calls but the store and the commit messages. Tasks see the query id
and the batch id as the local properties ``sql.streaming.queryId`` and ``streaming.sql.batchId`` and put them in
their messages, so the query id comes from Spark itself, whatever file system holds the checkpoint. Every attempt
gets a random token; staged file names start with ``a.<app>.<batchId>.<token>``. ``abort`` decides its attempt
as aborted through the log before deleting anything.

``outputMode("complete")`` (Spark's ``overwrite``) is refused: a topic is an append-only log.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from coordinator import (
    InvalidOptionError,
    InvalidTxnStateError,
    Store,
    StoreOptions,
    TransactionCoordinator,
    TxnLogError,
    app_txn_id,
    open_store,
)
from txnsink.options import parse_options
from txnsink.plan import WritePlan, plan_write
from txnsink.staging import TaskIds, delete_segments, gather, stage_batches

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["TxnStreamWriter", "make_stream_writer", "read_query_id"]

log = logging.getLogger(__name__)

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _open_text(location: str, store_opts: StoreOptions) -> str:
    """Read a small text file from a local path, ``file:`` URL or fsspec URL (``s3a://`` is read as ``s3://``)."""
    if location.startswith("file:"):
        path = location[len("file:"):]
        while path.startswith("//"):
            path = path[1:]
        location = path
    if "://" not in location:
        with open(location, encoding="utf-8") as fh:
            return fh.read()
    import fsspec

    url = "s3://" + location[len("s3a://"):] if location.startswith("s3a://") else location
    kwargs: dict[str, object] = {}
    if url.startswith("s3://"):
        kwargs = {"key": store_opts.key, "secret": store_opts.secret, "token": store_opts.token}
        client: dict[str, str] = {}
        if store_opts.endpoint:
            client["endpoint_url"] = store_opts.endpoint
        if store_opts.region:
            client["region_name"] = store_opts.region
        kwargs["client_kwargs"] = client
    with fsspec.open(url, "r", encoding="utf-8", **kwargs) as fh:
        return str(fh.read())


def read_query_id(checkpoint: str | None, store_opts: StoreOptions | None = None) -> str | None:
    """The streaming query id Spark keeps in ``<checkpoint>/metadata``, when that file can be read (a fallback:
    tasks normally report the query id Spark gives them). None when it cannot."""
    if not checkpoint:
        return None
    where = checkpoint.rstrip("/") + "/metadata"
    try:
        qid = json.loads(_open_text(where, store_opts or StoreOptions()).splitlines()[0])["id"]
    except (OSError, ValueError, KeyError, IndexError, TypeError, ImportError):
        return None
    return qid if isinstance(qid, str) and _ID_RE.match(qid) else None


class TxnStreamWriter(DataSourceStreamArrowWriter):
    """Writes each micro-batch as one txnlog transaction, exactly once. Pickled to the executors; ``repr`` shows
    no secrets; holds no state that must survive between calls (``token`` names this writer's attempt)."""

    def __init__(self, plan: WritePlan, query_id: str | None, prefix: str) -> None:
        self.plan = plan
        self.query_id = query_id
        self.prefix = prefix
        self.token = uuid.uuid4().hex[:16]

    def __repr__(self) -> str:
        return (
            f"TxnStreamWriter(store={self.plan.url!r}, topic={self.plan.label!r}, query_id={self.query_id!r}, "
            f"app_prefix={self.prefix!r})"
        )

    def app_id(self, query_id: str) -> str:
        """The application id this query's micro-batches commit as."""
        return f"{self.prefix}.{query_id}"

    def _store(self) -> Store:
        return open_store(self.plan.url, self.plan.options.store)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Stage this task's rows as segments (invisible until the driver commits the micro-batch).

        Raises:
            InvalidOptionError: Spark gave the task no query id or batch id, and the checkpoint gave none either.
            SchemaMismatchError: the rows do not fit the topic.
            StoreError: the store failed.
        """
        return self.stage(iterator, TaskIds.current())

    def stage(self, batches: Iterator[pa.RecordBatch], ids: TaskIds) -> WriterCommitMessage:
        """What ``write`` does, with the task's ids given (so the commit protocol can be driven directly)."""
        query = ids.query_id or self.query_id
        batch = ids.batch_id
        if query is None or not _ID_RE.match(query) or batch is None:
            raise InvalidOptionError(
                "the txnlog stream sink needs the streaming query id and batch id, which Spark sets on the tasks of "
                "a micro-batch (sql.streaming.queryId, streaming.sql.batchId); this task has none"
            )
        ids = dataclasses.replace(ids, query_id=query)
        txn = app_txn_id(self.app_id(query), batch, self.token)
        return stage_batches(self._store(), self.plan, batches, ids, txn)

    def _attempt(self, messages: list[WriterCommitMessage | None], batch_id: int) -> tuple[str, str] | None:
        """(app id, token) of the attempt the messages belong to; None when there are none."""
        msgs, _segs = gather(messages)
        if not msgs:
            return None
        queries = {m.task.query_id for m in msgs}
        tokens = {m.txn.rsplit(".", 1)[-1] for m in msgs}
        if len(queries) != 1 or len(tokens) != 1 or None in queries:
            raise InvalidTxnStateError(
                f"micro-batch {batch_id}: commit messages of several queries or attempts ({sorted(map(str, queries))})"
            )
        return self.app_id(str(queries.pop())), tokens.pop()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Publish the micro-batch's segments as version ``batchId`` of the query's app; a replayed or zombie
        batch (the version is already committed) publishes nothing and succeeds.

        Raises:
            InvalidTxnStateError: this attempt was reaped by GC (its files were abandoned too long); Spark replays
                the batch.
            CommitStateUnknownError: the outcome could not be learned (nothing is deleted).
        """
        _msgs, segs = gather(messages)
        attempt = self._attempt(messages, batchId)
        if attempt is None or not segs:
            return
        app, token = attempt
        coord = TransactionCoordinator(self._store())
        if self.plan.meta is not None:
            coord.know_topic(self.plan.meta)
        result = coord.commit_app(app, batchId, token, segs)
        if result.already_committed:
            log.info("micro-batch %d of %s was already committed (a replay or a zombie): nothing published",
                     batchId, app)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Decide this attempt as aborted through the log, then delete its staged files; if the version was
        committed (by this attempt or another), or the outcome cannot be learned, nothing is deleted."""
        _msgs, segs = gather(messages)
        try:
            attempt = self._attempt(messages, batchId)
        except InvalidTxnStateError:
            return
        if attempt is None or not segs:
            return
        app, token = attempt
        try:
            store = self._store()
            aborted = TransactionCoordinator(store).abort_app(app, batchId, token, reason="Spark batch aborted",
                                                              staged=segs)
        except TxnLogError:
            return  # outcome unknown: keep the files (GC removes them once the attempt is decided)
        if aborted:
            delete_segments(store, segs)


def make_stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> TxnStreamWriter:
    """The streaming writer for ``df.writeStream.format("txnlog")`` (called on the driver for every micro-batch).

    Raises:
        InvalidOptionError: ``outputMode("complete")``, a bad option (a ``transactionalId`` longer than
            :data:`txnsink.options.MAX_STREAM_ID_CHARS` included), ``txnAppId``/``txnVersion``, or ``writePath`` =
            ``native`` (which only the native streaming write of :mod:`txnsink.streamnative` takes: a query it
            writes never reaches this function).
        SchemaMismatchError: the DataFrame does not fit the existing topic.
    """
    if overwrite:
        raise InvalidOptionError(
            "outputMode('complete') is not supported: a txnlog topic is an append-only log; use outputMode "
            "'append' (or 'update', which appends each micro-batch's updated rows)"
        )
    if parse_options(options, stream=True).write_path == "native":
        raise InvalidOptionError(
            "option writePath='native' cannot write this stream: its micro-batches reached the Python data source, "
            "which happens when txnsink.enable_native(spark) is not in force in the query's session (or under "
            "Spark Connect, or outputMode('complete')); enable it, or use writePath 'auto' or 'python'"
        )
    plan, _store = plan_write(options, schema)
    if plan.options.txn_app_id is not None:
        raise InvalidOptionError(
            "options txnAppId/txnVersion are for batch writes (and foreachBatch); a streaming write is already "
            "exactly once, keyed on its query id and batch id"
        )
    query_id = read_query_id(plan.options.checkpoint_location, plan.options.store)
    return TxnStreamWriter(plan, query_id, plan.options.transactional_id or "spark")
