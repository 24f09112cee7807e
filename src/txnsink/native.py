"""The native write path: :func:`write` has Spark's own Parquet writer write a batch DataFrame's segments, and one
txnlog transaction publish them.

A Python data source writer hands every row to a Python worker, which encodes it again with pyarrow; Spark's
Parquet writer encodes in the JVM. :func:`write` therefore has Spark write Parquet files into a staging folder of
the store (the topic's schema applied: column names, order and types, every column nullable, timestamps as
microseconds, row groups of :data:`coordinator.segments.ROW_GROUP_ROWS` rows) through the jar's
``SegmentParquetFormat`` (Spark's format on Spark Connect): each file's dictionary encoding is chosen once per
column from its first rows, and on a local store each task syncs and describes its files (rows, size, CRC-32).
The driver then takes each file's description (or reads the file), moves it into its partition's data folder under
a name starting with the transaction id, and commits them all as one transaction (:mod:`txnsink.publish`), only if
they hold exactly the rows Spark's tasks reported writing (counted by an observation of the written DataFrame,
returned with the tasks' results): files deleted under the running write fail it, never publish part of it.
Placement is the data source's:

* without a key, each Spark task deals its rows over the partitions in turn, its ``n``-th row to partition
  ``(r + i + n) % partitions`` for task ``i`` and a random ``r`` per write (the jar's ``SegmentParquetFormat``;
  on Spark Connect, whose driver has no jar, a column computing the same and ``partitionBy``), so every task, a
  single one included, spreads its rows evenly, one file per partition; a micro-batch's tasks instead each put
  up to :data:`txnsink.streamnative.STREAM_RUN_ROWS` rows into one partition before moving to the next, and
  successive micro-batches start further on (as Kafka's sticky partitioner fills one partition's batch at a
  time): a micro-batch writes a file per task, not one per task and partition, and the partitions even out over
  the micro-batches;
* with ``key``, each row's partition is the topic's partitioner over the key columns, so a key lands where the
  Python producer puts it: computed in the JVM by the jar's ``SegmentParquetFormat``, which writes each task's rows
  into one file per partition (no sort) in the folders ``partitionBy`` would give, where
  the key types and the topic's partitioner allow (:func:`~txnsink.nativeframe.jvm_key`); else by an Arrow UDF computing
  :func:`partition_for` over the key columns, and ``partitionBy``.

Either way a task writes one file per topic partition, and a Parquet file costs ~10 ms of a task's time whatever
its size, so the input's Spark partitions are first merged (``coalesce``, no shuffle) into tasks of about
``keyedTaskBytes`` of input, never fewer than the cores (:func:`~txnsink.nativeframe.fewer_tasks`), for a topic of
several partitions.

Idempotency as in the batch sink: with ``txnAppId``/``txnVersion`` a version not above the last committed one
publishes nothing (checked before Spark writes anything, and again by the commit itself); without them, a fresh
ephemeral producer transaction (or ``transactionalId``'s, fencing older writers with that id). Inside
``foreachBatch``, ``write(batch_df, url, topic, txnAppId=query_id, txnVersion=batch_id)`` publishes each micro-batch
once.

A failure before the commit is decided aborts the transaction through the log and deletes the files (nothing was
visible); a commit whose outcome is unknown keeps them for GC. A driver that dies while Spark writes leaves the
staging folder ``_native-staging/<write id>`` (outside every topic; never read), which GC (``txnlog gc``, the
daemon, ``maintain``) deletes once all its files are older than the grace period and the lease the running driver
kept renewing there has lapsed (:class:`~txnsink.publish.StagingLease`).

The native path applies when Spark's file system reaches the store (a local folder or ``file:`` URL; ``s3://``
through ``s3a://`` only with ``hadoop-aws`` on Spark's classpath), the topic is named (no ``topic`` or
``partition`` routing column) and its columns have plain types (numbers, booleans, strings, binary, dates,
decimals, microsecond timestamps). ``writePath`` = ``auto`` (the default) falls back to
``df.write.format("txnlog")`` otherwise and says why in :attr:`WriteResult.reason`; ``native`` fails naming the
reason. With a key the JVM partitioner cannot hash, ``auto`` writes through the data source (its vectorised
partitioner in the tasks is faster than the partitioner UDF and ``partitionBy``); ``native`` takes the UDF.
``df.write.format("txnlog")`` itself takes this path in a session with :func:`txnsink.enable_native` (its write rule
calls :func:`write_options`); ``writePath`` is then an option of that write too.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator import InvalidOptionError, TransactionCoordinator
from coordinator.segments import now_us
from txnsink.nativeframe import (
    NativeUnavailable,
    Placement,
    conformed,
    fewer_tasks,
    jvm_key,
    partition_udf,
    spark_write,
    spread_column,
)
from txnsink.options import WRITE_PATHS
from txnsink.publish import (
    PARTITION_COLUMN,
    StagingLease,
    abort_native,
    check_complete,
    check_writable,
    move_files,
    moved,
    output_folder,
    spark_files,
    staging_folder,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from coordinator import Store, TopicMeta
    from txnsink.options import SinkOptions
    from txnsink.plan import WritePlan
    from txnsink.publish import SparkFile

__all__ = ["KEYED_REASON", "NativeUnavailable", "WriteResult", "publish_files", "spark_url", "write", "write_options"]

log = logging.getLogger(__name__)

#: Why ``writePath`` = ``auto`` writes a keyed append through the data source when the JVM partitioner cannot place
#: its rows (bench/bench_spark.py: the data source's vectorised partitioner in the tasks against the native path's
#: partitioner UDF plus ``partitionBy``).
KEYED_REASON = ("the key's types or the topic's partitioner have no JVM partitioner, and keyed writes are then "
                "faster through the data source")

#: Why ``writePath`` = ``auto`` writes a keyed append of a Spark Connect DataFrame through the data source.
CONNECT_KEYED_REASON = ("a Spark Connect client cannot reach the driver's JVM, where the jar's partitioner places "
                        "keyed rows; keyed writes are then faster through the data source (on a server with txnlog's "
                        "session extension, df.write.format('txnlog') writes them natively)")


@dataclass(frozen=True)
class WriteResult:
    """What :func:`write` did.

    Attributes:
        path: ``native`` or ``python`` (the data source wrote).
        reason: why the data source wrote (None on the native path, or when ``writePath`` = ``python``).
        txn: the transaction id (None on the Python path).
        rows: rows published (0 when skipped; None on the Python path, which does not report them).
        segments: segment files published (0 when skipped; None on the Python path).
        skipped: ``txnVersion`` was not above the last version committed for ``txnAppId``: nothing was published.
    """

    path: str
    reason: str | None = None
    txn: str | None = None
    rows: int | None = None
    segments: int | None = None
    skipped: bool = False


def write(df: DataFrame, path: str, topic: str, *, key: str | Sequence[str] | None = None, **options: Any) \
        -> WriteResult:
    """Append ``df`` to ``topic`` of the store at ``path`` as one transaction, as
    ``df.write.format("txnlog").option("topic", topic).option("partitionKey", key).mode("append").save(path)``
    does, through Spark's own Parquet writer where it can (see the module docstring).

    Args:
        df: a batch DataFrame (inside ``foreachBatch``, the micro-batch's).
        path: the store root URL.
        topic: the topic written (created with ``numPartitions`` partitions when it does not exist).
        key: the key column(s) placing rows by the topic's partitioner; None spreads rows over partitions.
        options: the batch write options of ``format("txnlog")`` (``numPartitions``, ``txnAppId``,
            ``txnVersion``, ``transactionalId``, ``transactionTimeoutMs``, ``s3.*``) and ``writePath``
            (``auto``, ``native``, ``python``); values are turned into strings.

    Returns:
        What was written, and by which path.
    Raises:
        InvalidOptionError: a bad option, or ``writePath`` = ``native`` where the native path does not apply (the
            message says why).
        SchemaMismatchError: ``df`` does not fit the existing topic.
        ProducerFencedError: a newer writer with the same ``transactionalId`` initialised meanwhile; nothing is
            published.
        CommitStateUnknownError: the commit's outcome could not be learned (a retry with the same
            ``txnAppId``/``txnVersion`` publishes once).
    """
    text = {str(k): ("" if v is None else str(v)) for k, v in options.items()}
    if key is not None:
        text["partitionKey"] = key if isinstance(key, str) else ",".join(key)
    text["topic"] = topic
    text["path"] = path
    return write_options(df, text)


def write_options(df: DataFrame, options: Mapping[str, str], *, placement: Placement | None = None) -> WriteResult:
    """:func:`write` with every argument given as the write options of ``format("txnlog")`` (``path`` and
    ``topic`` among them, ``partitionKey`` for the key, ``writePath`` for the path): what the write rule of
    :func:`txnsink.enable_native` runs for ``df.write.format("txnlog")``. ``placement``: where the tasks of
    an unkeyed write put their rows, from a caller that merged them already (a micro-batch); by default every task
    spreads its rows evenly, from a random partition, over tasks merged by ``keyedTaskBytes``.

    Raises:
        as :func:`write`.
    """
    text = dict(options)
    mode = "auto"
    path = ""
    for k in list(text):
        lk = k.lower()
        if lk == "writepath":
            mode = text.pop(k).strip().lower()
        elif lk == "path":
            path = text.pop(k)
    if mode not in WRITE_PATHS:
        raise InvalidOptionError(f"option 'writePath' = {mode!r} is not one of {', '.join(WRITE_PATHS)}")
    if mode == "python":
        return _python_writer(df, path, text, None)
    try:
        return _native(df, path, text, mode, placement)
    except NativeUnavailable as why:
        if mode == "native":
            raise InvalidOptionError(f"option 'writePath' = 'native' cannot write this: {why}") from None
        log.info("txnlog: writing through the Python data source: %s", why)
        return _python_writer(df, path, text, str(why))


def _python_writer(df: DataFrame, path: str, options: Mapping[str, str], reason: str | None) -> WriteResult:
    writer = df.write.format("txnlog").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.option("writePath", "python").save(path)  # so that the write rule leaves it to the data source
    return WriteResult("python", reason)


# -- checks (driver, before Spark writes anything) ------------------------------------------------------------


def spark_url(store_url: str) -> str:
    """The store root as Spark's file system names it (:func:`coordinator.store_factory.hadoop_url`).

    Raises:
        NativeUnavailable: an in-memory store, or a path Spark would read as a glob pattern.
    """
    from coordinator.store_factory import HadoopUnreachable, hadoop_url

    try:
        return hadoop_url(store_url)
    except HadoopUnreachable as exc:
        raise NativeUnavailable(str(exc)) from exc


def hadoop_options(plan: WritePlan) -> dict[str, str]:
    """The ``fs.s3a.*`` write options equivalent to the ``s3.*`` options (empty for local stores); they travel
    with the write only."""
    from coordinator.store_factory import hadoop_s3a_options

    return hadoop_s3a_options(plan.url, plan.options.store)


_PLAIN = ("is_signed_integer", "is_floating", "is_boolean", "is_string", "is_binary", "is_date32", "is_decimal128")


def check_types(meta: TopicMeta) -> None:
    """Raises: NativeUnavailable when a column's type is not one Spark's Parquet writer writes as the Python writer
    does, or two columns differ only in case (Spark resolves columns case-insensitively)."""
    import pyarrow as pa

    seen: dict[str, str] = {}
    for f in meta.schema:
        t = f.type
        plain = any(getattr(pa.types, k)(t) for k in _PLAIN) and not pa.types.is_float16(t)
        if not (plain or (pa.types.is_timestamp(t) and t.unit == "us")):
            raise NativeUnavailable(f"column {f.name!r} of topic {meta.name!r} is {t}")
        if f.name.lower() in seen or f.name == PARTITION_COLUMN:
            raise NativeUnavailable(f"column {f.name!r} of topic {meta.name!r} clashes with "
                                    f"{seen.get(f.name.lower(), f.name)!r} in Spark's Parquet writer")
        seen[f.name.lower()] = f.name


def _already_committed(store: Store, plan: WritePlan) -> bool:
    opts = plan.options
    if opts.txn_app_id is None or opts.txn_version is None:
        return False
    am = TransactionCoordinator(store).log.refresh().apps.get(opts.txn_app_id)
    return am is not None and opts.txn_version <= am.version


# -- the write ------------------------------------------------------------------------------------------------


def _remove_folder(store: Store, folder: str) -> None:
    import shutil

    from coordinator import parallel
    from coordinator.store_factory import local_path

    root = local_path(store.url)
    if root is not None:
        shutil.rmtree(f"{root}/{folder}", ignore_errors=True)
        return
    parallel.pmap(lambda i: store.delete(i.path), store.list_info(folder))


def _native(df: DataFrame, path: str, options: Mapping[str, str], mode: str, placement: Placement | None) \
        -> WriteResult:
    from coordinator.store_factory import local_path
    from txnsink.plan import plan_write

    spark_url(path)  # an in-memory store fails here, before the topic is created
    check_writable(path, next((v for k, v in options.items() if k.lower() == "topic"), None))
    plan, store = plan_write({**options, "path": path}, df.schema)
    if plan.meta is None or plan.topic_column is not None or plan.partition_column is not None:
        raise NativeUnavailable("the DataFrame routes rows by a topic or partition column")
    if plan.headers_column is not None:
        raise NativeUnavailable(f"the DataFrame gives record headers (column {plan.headers_column!r})")
    meta = plan.meta
    check_types(meta)
    url = spark_url(plan.url)
    if _already_committed(store, plan):
        _skipped(plan.options)
        return WriteResult("native", skipped=True, rows=0, segments=0)
    key = [plan.renames.get(c, c) for c in plan.options.partition_key]
    frame = conformed(df, plan, meta)
    classic = getattr(df, "_jdf", None) is not None  # the jar's format needs the driver's JVM
    ordinals = jvm_key(meta, key, frame.columns) if key and classic else None
    if key and ordinals is None:
        if mode == "auto":
            raise NativeUnavailable(KEYED_REASON if classic else CONNECT_KEYED_REASON)
        frame = frame.withColumn(PARTITION_COLUMN, partition_udf(meta, key)(*[frame[f"`{k}`"] for k in key]))
    place = placement if placement is not None else Placement(plan.rotation)
    stride = place.stride(meta.partitions)
    spread = place.rotation if not key and meta.partitions > 1 else None
    if spread is not None and not classic:
        frame = frame.withColumn(PARTITION_COLUMN, spread_column(spread, meta.partitions, place.run, stride))
    foldered = bool(key) or spread is not None  # one folder per topic partition
    if foldered and not place.merged:
        frame = fewer_tasks(frame, plan.options.keyed_task_bytes)
    tag = uuid.uuid4().hex[:16]
    out = output_folder(tag)
    ptime = None if plan.timestamp_column is not None else now_us()
    frame, counted = _counted(frame, tag)
    try:
        with StagingLease(store, tag):
            spark_write(frame, f"{url}/{out}", foldered, hadoop_options(plan), ordinals, meta.partitions,
                         describe=local_path(store.url) is not None, spread=spread if classic else None,
                         spread_run=place.run, spread_stride=stride)
            files = spark_files(store, out, meta.partitions, plan.rotation, foldered)
            return publish_files(store, plan.options, meta, tag, files, ptime, counted())
    finally:
        _remove_folder(store, staging_folder(tag))


def _counted(frame: DataFrame, tag: str) -> tuple[DataFrame, Callable[[], int]]:
    """``frame`` observed (Spark's ``Observation``) counting its rows as Spark's tasks write them, and a function
    returning that count once the write has run (the successful tasks' counts, each taken once)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    seen = Observation(f"txnlog-native-{tag}")
    observed = frame.observe(seen, F.count(F.lit(1)).alias("rows"))
    return observed, lambda: int(seen.get["rows"])


def _skipped(opts: SinkOptions) -> None:
    log.warning("txnlog write skipped: version %s of txnAppId %r was already committed; nothing published",
                opts.txn_version, opts.txn_app_id)


def publish_files(store: Store, opts: SinkOptions, meta: TopicMeta, tag: str, files: Sequence[SparkFile],
                  ptime: int | None, reported_rows: int) -> WriteResult:
    """The driver's publish step: move the Parquet ``files`` Spark left in write ``tag``'s output folder into the
    topic's data folders and commit them as one transaction, provided they hold the ``reported_rows`` rows Spark's
    tasks reported writing; otherwise abort it (nothing published, the moved files deleted).

    Raises:
        IncompleteWriteError: the files hold other than ``reported_rows`` rows (some were deleted under the write).
        ProducerFencedError: a newer writer with the same ``transactionalId`` initialised meanwhile.
        CommitStateUnknownError: the commit's outcome could not be learned (the files stay for GC).
        StoreError, OSError: the store failed (the transaction is aborted).
    """
    from coordinator import CommitStateUnknownError, faults

    ephemeral = opts.transactional_id is None
    tid = opts.transactional_id or f"spark-native-{uuid.uuid4().hex}"
    coord = TransactionCoordinator(store)
    coord.know_topic(meta)
    ident = coord.init_producer(tid, timeout_ms=opts.transaction_timeout_ms, ephemeral=ephemeral)
    coord.open_transaction(ident, 0)
    txn = ident.txn_id(0)
    app = (opts.txn_app_id, opts.txn_version) if opts.txn_app_id is not None and opts.txn_version is not None \
        else None
    segs: list[Any] = []
    try:
        segs = move_files(store, meta.name, txn, tag, files, ptime)
        check_complete(segs, reported_rows, staging_folder(tag))
        faults.point("native.before_commit")
        result = coord.commit(ident, txn, segs, app=app, end_producer=ephemeral)
    except CommitStateUnknownError:
        raise  # the files stay for GC: the transaction may have committed
    except BaseException:  # a fenced commit included: that transaction can never commit
        abort_native(coord, ident, txn, ephemeral, segs or moved(store, meta.name, meta.partitions, txn, tag))
        raise
    coord.close_transaction(txn)
    if result.already_committed:
        _skipped(opts)
        for s in segs:
            store.delete(s.path)
        return WriteResult("native", txn=txn, rows=0, segments=0, skipped=True)
    return WriteResult("native", txn=txn, rows=sum(s.rows for s in segs), segments=len(segs))
