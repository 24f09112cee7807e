"""How the native write path shapes and saves a batch DataFrame (:mod:`txnsink.native`): the topic's columns
(:func:`conformed`), each row's partition (:func:`jvm_key`, :func:`partition_udf`, :func:`spread_column`), the
tasks (:func:`fewer_tasks`) and Spark's write of the segment files (:func:`spark_write`).

In a classic session the projection and the save are each one call into the jar (``io.txnlog.spark.SegmentWrites``):
a micro-batch pays for every call its driver makes into the JVM, and pyspark's column functions make several each.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator.segments import PRODUCER_TS, ROW_GROUP_ROWS
from coordinator.store_factory import missing_file_system
from txnsink.publish import PARTITION_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from coordinator import TopicMeta
    from txnsink.plan import WritePlan

__all__ = ["NativeUnavailable", "Placement", "conformed", "fewer_tasks", "jvm_key", "partition_udf", "spark_write",
           "spread_column"]


class NativeUnavailable(Exception):  # noqa: N818 - a reason, not an error the caller sees
    """Why the native path cannot write this (``auto`` then uses the data source)."""


@dataclass(frozen=True)
class Placement:
    """Where an unkeyed write's tasks put their rows: task ``i`` starts at partition ``(rotation + i * stride) %
    partitions`` and puts ``run`` consecutive rows into a partition before it moves to the next.

    ``tasks``: the number of tasks the caller has already merged the rows into (a micro-batch: one per core at
    most); the tasks then start as far apart as the partitions allow (``stride`` = ``partitions // tasks``, at
    least 1), and the write merges nothing more. None (a batch append): the write merges its tasks by their input's
    size itself (:func:`fewer_tasks`), and they start one partition apart, dealing their rows one by one.
    """

    rotation: int
    run: int = 1
    tasks: int | None = None

    @property
    def merged(self) -> bool:
        """Whether the caller has merged the tasks (the write must not merge them again)."""
        return self.tasks is not None

    def stride(self, partitions: int) -> int:
        """How many partitions apart the tasks start."""
        return 1 if self.tasks is None else max(1, partitions // max(1, self.tasks))


def conformed(df: DataFrame, plan: WritePlan, meta: TopicMeta) -> DataFrame:
    """``df`` with the topic's column names, order and types, every column nullable (as the topic is), and, when
    the DataFrame gives producer times, the producer-time column (:data:`coordinator.segments.PRODUCER_TS`; a null
    takes the write's time). Without it the files hold no such column: the write's one time goes into each
    segment's reference instead (:attr:`coordinator.SegmentRef.ptime`), which costs nothing per row.

    In a classic session the projection is built by the jar in one call (``SegmentWrites.conform``): built column by
    column through pyspark it takes ~250 calls into the JVM, about 30 ms of each micro-batch."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention
    from pyspark.sql.pandas.types import from_arrow_schema

    target = from_arrow_schema(meta.schema)
    src = {plan.renames.get(c, c): c for c in plan.data.names}
    nulls = {f.name for f in df.schema.fields if not f.nullable}
    jdf = getattr(df, "_jdf", None)
    if jdf is not None:
        from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame

        from coordinator import jvm

        spec = {"columns": [{"name": f.name, "source": src[f.name], "type": f.dataType.json(),
                             "nonNull": src[f.name] in nulls} for f in target.fields],
                "timestamp": plan.timestamp_column, "producerColumn": PRODUCER_TS}
        spark = df.sparkSession
        return ClassicFrame(jvm.segment_writes(spark).conform(jdf, json.dumps(spec)), spark)
    cols = []
    for f in target.fields:
        c = F.col(f"`{src[f.name]}`")
        if src[f.name] in nulls:
            # a value Spark cannot prove non-null (spark_partition_id is never folded), so the file says optional
            c = F.when(F.spark_partition_id() >= 0, c)
        cols.append(c.cast(f.dataType).alias(f.name))
    if plan.timestamp_column is not None:
        when = F.coalesce(F.col(f"`{plan.timestamp_column}`").cast("timestamp"), F.current_timestamp())
        cols.append(when.alias(PRODUCER_TS))
    return df.select(*cols)


def partition_udf(meta: TopicMeta, key: Sequence[str]) -> Any:
    """An Arrow UDF of the key columns giving each row's partition by the topic's partitioner (the producer's)."""
    import pyarrow as pa
    from pyspark.sql.functions import ArrowUDFType, arrow_udf

    types = [meta.schema.field(k).type for k in key]
    names = list(key)
    partitions = meta.partitions

    def place(*cols: pa.Array) -> pa.Array:
        from coordinator.partitioner import partition_for

        table = pa.table({n: c.cast(t) for n, c, t in zip(names, cols, types, strict=True)})
        return pa.array(partition_for(table, names, partitions, meta), type=pa.int32())

    with warnings.catch_warnings():  # the hints name pyarrow, imported here only: the type is given instead
        warnings.simplefilter("ignore", UserWarning)
        return arrow_udf(place, "int", ArrowUDFType.SCALAR)


def jvm_key(meta: TopicMeta, key: Sequence[str], columns: Sequence[str]) -> list[int] | None:
    """The key columns' positions in ``columns`` (the conformed frame's) when the jar's JVM partitioner places rows
    as the topic's own partitioner does (``txnlog-v2``, keys of integers, booleans, floats, dates, microsecond
    timestamps, strings or binaries); None otherwise (the partitioner UDF places them)."""
    import pyarrow as pa

    from coordinator.partitioner import CURRENT, partitioner_of

    if partitioner_of(meta) != CURRENT:
        return None
    for k in key:
        t = meta.schema.field(k).type
        if not (pa.types.is_signed_integer(t) or pa.types.is_boolean(t) or pa.types.is_float32(t)
                or pa.types.is_float64(t) or pa.types.is_date32(t) or (pa.types.is_timestamp(t) and t.unit == "us")
                or pa.types.is_string(t) or pa.types.is_binary(t)):
            return None
    return [list(columns).index(k) for k in key]


def fewer_tasks(frame: DataFrame, task_bytes: int) -> DataFrame:
    """``frame`` coalesced to ``max(cores, ceil(estimated bytes / task_bytes))`` partitions, rounded up to a multiple of
    the cores (a last wave of fewer tasks than cores would leave cores idle), when that is fewer than it has; as it
    is when ``task_bytes`` is 0, Spark knows no size for its plan, or the session is a Connect session (its size
    estimate is out of reach)."""
    jdf = getattr(frame, "_jdf", None)
    if task_bytes <= 0 or jdf is None:
        return frame
    size = int(str(jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    cores = max(1, frame.sparkSession.sparkContext.defaultParallelism)
    if size >= 2**63 - 1:
        return frame  # no estimate: Spark's default size (spark.sql.defaultSizeInBytes) is Long.MaxValue
    tasks = max(1, -(-size // (task_bytes * cores))) * cores
    return frame if tasks >= 2**31 else frame.coalesce(tasks)


def spread_column(rotation: int, partitions: int, run: int = 1, stride: int = 1) -> Any:
    """The partition a spread write puts each row in without the jar (Spark Connect): the ``n``-th row of task
    ``i`` in ``(rotation + i * 2**33 + n) % partitions`` (Spark's ``monotonically_increasing_id``), each task's rows
    in turn as the jar's format deals them (from another first partition); with ``run`` > 1, in
    ``(rotation + i * stride + n // run) % partitions``, as the jar's format places runs."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    row_id = F.monotonically_increasing_id()
    if run == 1:
        return F.pmod(row_id + F.lit(rotation), F.lit(partitions)).cast("int")
    task, n = F.shiftright(row_id, 33), row_id.bitwiseAND(F.lit((1 << 33) - 1))
    first = task * F.lit(stride) + F.lit(rotation)
    return F.pmod(first + F.floor(n / F.lit(run)).cast("long"), F.lit(partitions)).cast("int")


def spark_write(frame: DataFrame, url: str, keyed: bool, fs_options: Mapping[str, str],
                 jvm_ordinals: Sequence[int] | None = None, partitions: int = 0, describe: bool = False,
                 spread: int | None = None, spread_run: int = 1, spread_stride: int = 1) -> None:
    """``frame.write.parquet(url)`` with microsecond timestamps and row groups of ``ROW_GROUP_ROWS`` rows, through
    the jar's ``SegmentParquetFormat`` in a classic session (each file's dictionaries chosen per column from its
    first rows: a column of mostly distinct values is written without one; with ``describe``, each file synced and
    described by its task: :mod:`txnsink.publish`); when ``keyed``, one folder per partition: by that format over
    the key columns at ``jvm_ordinals``, else by ``partitionBy`` the partitioner UDF's column (Spark's own
    format); with ``spread`` (a rotation, classic sessions), the format's rows in turn over ``partitions``,
    ``spread_run`` consecutive rows to a partition, tasks starting ``spread_stride`` partitions apart.

    Raises:
        NativeUnavailable: Spark has no file system for the URL's scheme.
        InvalidOptionError: the jar is missing or does not load (a classic session).
    """
    from pyspark.errors.exceptions.captured import capture_sql_exception

    from coordinator import jvm

    options = {"compression": "snappy", "parquet.block.row.count.limit": str(ROW_GROUP_ROWS), **fs_options}
    if describe:
        options["txnlog.describe"] = "true"
    if jvm_ordinals is not None:
        options.update({"txnlog.key": ",".join(str(i) for i in jvm_ordinals), "txnlog.partitions": str(partitions),
                        "txnlog.folder": PARTITION_COLUMN})
    elif spread is not None:
        options.update({"txnlog.spread": str(spread), "txnlog.partitions": str(partitions),
                        "txnlog.folder": PARTITION_COLUMN, "txnlog.spreadRun": str(spread_run),
                        "txnlog.spreadStride": str(spread_stride)})
    spark = frame.sparkSession
    jdf = getattr(frame, "_jdf", None)
    try:
        if jdf is not None and not (keyed and jvm_ordinals is None and spread is None):
            # one call: the writer's options, the timestamp setting and the save (Spark's errors as pyspark
            # raises them from its own calls)
            capture_sql_exception(jvm.segment_writes(spark).write)(jdf, json.dumps(options), url)
        else:
            _python_save(frame, url, options, keyed)
    except Exception as exc:
        why = missing_file_system(str(exc), url)
        if why is not None:
            raise NativeUnavailable(why) from None
        raise


def _python_save(frame: DataFrame, url: str, options: Mapping[str, str], keyed: bool) -> None:
    """``frame`` saved to ``url`` through pyspark with Spark's own Parquet format (a Connect session, or a write
    folded by ``partitionBy`` the partitioner UDF's column when ``keyed``), timestamps as microseconds."""
    spark = frame.sparkSession
    conf = "spark.sql.parquet.outputTimestampType"
    old = spark.conf.get(conf, None)
    spark.conf.set(conf, "TIMESTAMP_MICROS")
    try:
        w = frame.write.options(**options)
        if keyed:
            w.partitionBy(PARTITION_COLUMN).parquet(url)
        else:
            w.parquet(url)
    finally:
        if old is None:
            spark.conf.unset(conf)
        else:
            spark.conf.set(conf, old)
