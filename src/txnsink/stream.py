"""The streaming writer: ``df.writeStream.format("txnlog")``, exactly once. Each micro-batch is one transaction.

What Spark 4.2 does (measured, see the tests): the driver calls ``DataSource.streamWriter()`` in a Python worker
once per micro-batch to build the writer shipped to the tasks, and again, in a fresh worker, to run
``commit(messages, batchId)``; nothing survives between those calls but the store. The checkpoint's ``metadata``
file (``{"id": <query id>}``) is written when the query starts, before the first ``streamWriter()`` call, also
for a fresh checkpoint; the ``checkpointLocation`` option reaches the sink. Tasks see the query's run id as the
``spark.jobGroup.id`` local property and the batch id as ``streaming.sql.batchId``.

So:

* **Idempotency.** The commit carries ``app_key = "<query id>/<batchId>"``; the coordinator refuses to commit a
  key twice for the same transactional id, so a batch Spark replays after a crash (same batchId, same data)
  publishes nothing the second time, and its freshly staged files are deleted.
* **Fencing.** ``transactionalId`` defaults to ``spark-query-<query id>``. The first commit of each *run* of the
  query (the run id comes in the tasks' messages) calls ``init_producer``, bumping the epoch, and records the
  run's (pid, epoch) in the store at ``_sink/<transactional id>/runs/<run id>.json``; later commits of that run
  use the recorded identity. A restarted query (a new run) therefore fences every older run: a zombie driver
  still running the old run gets ``ProducerFencedError`` at its next commit and publishes nothing.
* ``outputMode("complete")`` (Spark's ``overwrite``) is refused: a topic is an append-only log.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from coordinator import (
    CorruptLogError,
    InvalidOptionError,
    ProducerIdentity,
    Store,
    StoreOptions,
    TransactionCoordinator,
    new_txn_id,
    open_store,
)
from txnsink.batch import NOT_COMMITTED
from txnsink.plan import WritePlan, plan_write
from txnsink.staging import TaskIds, delete_segments, gather, stage_batches

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["TxnStreamWriter", "make_stream_writer", "read_query_id", "run_record_path"]

_RUN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def run_record_path(tid: str, run_id: str) -> str:
    """Where the identity of one run of a streaming query is recorded in the store."""
    return f"_sink/{tid}/runs/{run_id}.json"


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


def read_query_id(checkpoint: str | None, store_opts: StoreOptions | None = None) -> str:
    """The streaming query id Spark keeps in ``<checkpoint>/metadata``.

    Raises:
        InvalidOptionError: no ``checkpointLocation`` option, or its ``metadata`` file is missing or unreadable.
    """
    if not checkpoint:
        raise InvalidOptionError(
            "writeStream to txnlog needs option checkpointLocation (set it with .option('checkpointLocation', ...); "
            "the spark.sql.streaming.checkpointLocation conf does not reach the sink): exactly-once publishing is "
            "keyed on the query id Spark keeps there"
        )
    where = checkpoint.rstrip("/") + "/metadata"
    try:
        text = _open_text(where, store_opts or StoreOptions())
    except FileNotFoundError:
        raise InvalidOptionError(f"option checkpointLocation={checkpoint!r}: {where} does not exist") from None
    except OSError as exc:
        raise InvalidOptionError(f"option checkpointLocation={checkpoint!r}: cannot read {where}: {exc}") from exc
    try:
        qid = json.loads(text.splitlines()[0])["id"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise InvalidOptionError(
            f"option checkpointLocation={checkpoint!r}: {where} holds no query id ({exc!r})"
        ) from None
    if not isinstance(qid, str) or not _RUN_RE.match(qid):
        raise InvalidOptionError(f"option checkpointLocation={checkpoint!r}: {where} has a bad query id {qid!r}")
    return qid


class TxnStreamWriter(DataSourceStreamArrowWriter):
    """Writes each micro-batch as one txnlog transaction, exactly once. Pickled to the executors; ``repr`` shows
    no secrets; holds no state that must survive between calls."""

    def __init__(self, plan: WritePlan, query_id: str, tid: str) -> None:
        self.plan = plan
        self.query_id = query_id
        self.tid = tid

    def __repr__(self) -> str:
        return (
            f"TxnStreamWriter(store={self.plan.url!r}, topic={self.plan.meta.name!r}, query_id={self.query_id!r}, "
            f"transactional_id={self.tid!r})"
        )

    def app_key(self, batch_id: int) -> str:
        """The idempotency key of micro-batch ``batch_id`` of this query."""
        return f"{self.query_id}/{batch_id}"

    def _store(self) -> Store:
        return open_store(self.plan.url, self.plan.options.store, probe=False)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Stage this task's rows as segments (invisible until the driver commits the micro-batch).

        Raises:
            SchemaMismatchError: the rows do not fit the topic.
            StoreError: the store failed.
        """
        return self.stage(iterator, TaskIds.current())

    def stage(self, batches: Iterator[pa.RecordBatch], ids: TaskIds) -> WriterCommitMessage:
        """What ``write`` does, with the task's ids given (so the commit protocol can be driven directly)."""
        return stage_batches(self._store(), self.plan.meta, self.plan.options.partition_key, batches, ids)

    def run_identity(self, coord: TransactionCoordinator, run_id: str | None) -> ProducerIdentity:
        """The producer identity of run ``run_id``: the recorded one, or a new epoch (fencing every older run)
        recorded now. Without a run id, a new epoch every call.

        Raises:
            CorruptLogError: the run record cannot be decoded.
        """
        if run_id is None or not _RUN_RE.match(run_id):
            return coord.init_producer(self.tid)
        path = run_record_path(self.tid, run_id)
        store = coord.store
        try:
            return _decode_run(store.get(path), path)
        except FileNotFoundError:
            pass
        ident = coord.init_producer(self.tid)
        rec = {"v": 1, "tid": ident.tid, "pid": ident.pid, "epoch": ident.epoch, "run": run_id,
               "query": self.query_id, "ts": int(time.time() * 1000)}
        if store.put_if_absent(path, json.dumps(rec, sort_keys=True).encode()):
            return ident
        return _decode_run(store.get(path), path)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Publish the micro-batch's segments as one transaction keyed ``<query id>/<batchId>``; a replayed
        batch publishes nothing and its staged files are deleted.

        Raises:
            ProducerFencedError: a newer run of this query (or another writer with this transactional id) took
                over; nothing is published and the staged files are deleted.
            CommitStateUnknownError: the outcome could not be learned (staged files are kept).
        """
        msgs, segs = gather(messages)
        if not segs:
            return
        runs = {m.task.run_id for m in msgs}
        run_id = runs.pop() if len(runs) == 1 else None
        store = self._store()
        coord = TransactionCoordinator(store)
        try:
            ident = self.run_identity(coord, run_id)
            result = coord.commit(ident, new_txn_id(ident.pid, ident.epoch), segs, app_key=self.app_key(batchId))
        except NOT_COMMITTED:
            delete_segments(store, segs)
            raise
        if result.already_committed:
            delete_segments(store, segs)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Delete the segments the messages name (best effort); nothing of the micro-batch is visible."""
        _msgs, segs = gather(messages)
        delete_segments(self._store(), segs)


def _decode_run(data: bytes, path: str) -> ProducerIdentity:
    try:
        d = json.loads(data)
        return ProducerIdentity(str(d["tid"]), int(d["pid"]), int(d["epoch"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptLogError(f"run record {path} is corrupt: {exc}") from exc


def make_stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> TxnStreamWriter:
    """The streaming writer for ``df.writeStream.format("txnlog")`` (called on the driver for every micro-batch).

    Raises:
        InvalidOptionError: ``outputMode("complete")``, a bad option, or no readable ``checkpointLocation``.
        SchemaMismatchError: the DataFrame does not fit the existing topic.
    """
    if overwrite:
        raise InvalidOptionError(
            "outputMode('complete') is not supported: a txnlog topic is an append-only log; use outputMode "
            "'append' (or 'update', which appends each micro-batch's updated rows)"
        )
    plan, _store = plan_write(options, schema)
    query_id = read_query_id(plan.options.checkpoint_location, plan.options.store)
    tid = plan.options.transactional_id or f"spark-query-{query_id}"
    return TxnStreamWriter(plan, query_id, tid)
